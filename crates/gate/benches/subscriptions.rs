//! Subscription costs, measured in one run against the embedded devnet and a real facilitator:
//!
//! - subscription-gated requests per second (`X-Service-Sub` of an ACTIVE subscription, status
//!   cached as in production) against the same axum app ungated: in process
//!   (`tower::ServiceExt::oneshot`, one task and 64 tasks) and over loopback HTTP (64 keep-alive
//!   connections); reported as ratios;
//! - `Gate::deduct_allowance` per second through the facilitator's HTTP API, 64 tasks over 16
//!   subscriptions and 64 tasks on one subscription (one hot ledger row), with the ledger on
//!   SQLite and, when `TOLLGATE_TEST_DATABASE_URL` is set, on PostgreSQL;
//! - metered requests per second through the layer (`metered(...)`: one deduction each).
//!
//! ```text
//! cargo bench -p tollgate-gate --bench subscriptions            # N = 20,000
//! TOLLGATE_BENCH_N=50000 TOLLGATE_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!     cargo bench -p tollgate-gate --bench subscriptions
//! ```
#![allow(missing_docs, clippy::print_stdout, clippy::print_stderr)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::{
    primitives::{B256, U256},
    sol_types::{SolCall, SolEvent},
};
use axum::{Router, body::Body, http::Request, routing::get};
use serde_json::{Value, json};
use tollgate_chain::{
    TxRequest, WaitOptions,
    contracts::{Subscriptions, Token},
};
use tollgate_facilitator::store::Store;
use tollgate_gate::{Gate, Pricing};
use tollgate_protocol::{Amount, PlanTerms};
use tollgate_testkit::harness::{PgSchema, TestNet};
use tower::ServiceExt as _;

use tollgate_testkit::load;

const NETWORK: &str = "tollgate-devnet";
const PLAN_AMOUNT: u64 = 1_000_000;
const INTERVAL: u64 = 30 * 24 * 3600;
const SUBSCRIPTIONS: usize = 16;
const TASKS: usize = 64;

fn main() {
    tollgate_chain::install_crypto_provider();
    let n: usize = std::env::var("TOLLGATE_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(n));
}

/// A facilitator on `store` (default a fresh SQLite one) over a devnet of its own, served on
/// loopback, with a provider (dev account 1) holding an API key and a plan published through it,
/// and [`SUBSCRIPTIONS`] subscriptions to that plan with a cap no bench reaches.
struct Provider {
    net: TestNet,
    key: String,
    plan: PlanTerms,
    ids: Vec<B256>,
}

async fn provider(store: Option<Arc<dyn Store>>, label: &str) -> Provider {
    let mut builder = TestNet::builder().settings(|s| s.keeper_interval = Duration::ZERO);
    if let Some(store) = store {
        builder = builder.store(store);
    }
    let net = builder.start().await.unwrap();
    let accounts = net.fixture.accounts.clone();
    let d = net.fixture.deployment;
    let url = net.url.clone();
    let key = net.api_key(1, "bench").await;
    let plan: Value = reqwest::Client::new()
        .post(format!("{url}/plans"))
        .bearer_auth(&key)
        .json(&json!({
            "network": NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": INTERVAL,
            "idempotencyKey": label
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let plan = PlanTerms {
        plan_id: plan["planId"].as_str().unwrap().parse().unwrap(),
        amount: Amount::from_units(PLAN_AMOUNT),
        interval: INTERVAL,
        token: d.token,
    };
    let subscriber = accounts[2].address;
    let send = |data: Vec<u8>, to| {
        let chain = Arc::clone(&net.fixture.chain);
        async move {
            chain
                .send_and_wait(
                    TxRequest::call(subscriber, to, data),
                    WaitOptions::default(),
                )
                .await
                .unwrap()
                .receipt()
                .cloned()
                .unwrap()
        }
    };
    let approve = Token::approveCall {
        spender: d.subscriptions,
        value: U256::MAX,
    };
    send(approve.abi_encode(), d.token).await;
    let mut ids = Vec::new();
    for _ in 0..SUBSCRIPTIONS {
        let call = Subscriptions::subscribeCall {
            planId: plan.plan_id,
            maxOverage: U256::from(u64::MAX / 4),
        };
        let r = send(call.abi_encode(), d.subscriptions).await;
        ids.push(
            r.logs
                .iter()
                .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
                .unwrap()
                .id,
        );
    }
    Provider {
        net,
        key,
        plan,
        ids,
    }
}

fn gate(p: &Provider) -> impl std::future::Future<Output = Gate> {
    let d = p.net.fixture.deployment;
    let builder = Gate::builder()
        .network(NETWORK)
        .token(d.token, "USD Coin", "2")
        .pay_to(p.net.address(1))
        .facilitator(p.net.url.clone())
        .public_url("http://127.0.0.1:1")
        .plan_terms(p.plan.clone())
        .subscriptions(Arc::clone(&p.net.fixture.chain), d.subscriptions)
        .api_key(p.key.clone());
    async move { builder.build().await.unwrap() }
}

async fn run(n: usize) {
    eprintln!("setting up: a plan and {SUBSCRIPTIONS} subscriptions (not timed)...");
    let p = provider(None, "bench-sqlite").await;
    let g = gate(&p).await;
    let id = p.ids[0].to_string();
    println!("subscriptions bench (n = {n})");

    // 1. Subscription-gated vs ungated, same app, same run.
    let app = || Router::new().route("/v1/report", get(|| async { "42" }));
    let gated = app().route_layer(g.payment_gate([Pricing::subscription(p.plan.plan_id)]));
    let ungated = app();
    let request = |sub: bool| {
        let mut r = Request::get("/v1/report");
        if sub {
            r = r.header("x-service-sub", &id);
        }
        r.body(Body::empty()).unwrap()
    };
    // Warm-up: the status is read once, then cached.
    assert_eq!(
        gated.clone().oneshot(request(true)).await.unwrap().status(),
        200
    );
    let time = |router: Router, sub: bool| {
        let request = &request;
        async move {
            let t = Instant::now();
            for _ in 0..n {
                let r = router.clone().oneshot(request(sub)).await.unwrap();
                assert_eq!(r.status(), 200);
            }
            t.elapsed()
        }
    };
    let plain = time(ungated.clone(), false).await;
    let subbed = time(gated.clone(), true).await;
    let rate = |d: Duration, count: usize| count as f64 / d.as_secs_f64();
    println!(
        "  in process, 1 task:   ungated {:>9.0}/s  subscription-gated {:>9.0}/s  ratio {:.3}",
        rate(plain, n),
        rate(subbed, n),
        plain.as_secs_f64() / subbed.as_secs_f64()
    );
    let concurrent = |router: Router, sub: bool| {
        let id = id.clone();
        async move {
            let t = Instant::now();
            let mut tasks = Vec::new();
            for w in 0..TASKS {
                let (router, id) = (router.clone(), id.clone());
                tasks.push(tokio::spawn(async move {
                    let mut i = w;
                    while i < n {
                        let mut r = Request::get("/v1/report");
                        if sub {
                            r = r.header("x-service-sub", &id);
                        }
                        let r = router
                            .clone()
                            .oneshot(r.body(Body::empty()).unwrap())
                            .await
                            .unwrap();
                        assert_eq!(r.status(), 200);
                        i += TASKS;
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            t.elapsed()
        }
    };
    let plain = concurrent(ungated.clone(), false).await;
    let subbed = concurrent(gated.clone(), true).await;
    println!(
        "  in process, 64 tasks: ungated {:>9.0}/s  subscription-gated {:>9.0}/s  ratio {:.3}",
        rate(plain, n),
        rate(subbed, n),
        plain.as_secs_f64() / subbed.as_secs_f64()
    );
    let total = n * 2;
    let mut http = Vec::new();
    for (router, sub) in [(ungated, false), (gated, true)] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        let req: Arc<Vec<u8>> = Arc::new(if sub {
            format!("GET /v1/report HTTP/1.1\r\nHost: bench\r\nX-Service-Sub: {id}\r\n\r\n")
                .into_bytes()
        } else {
            b"GET /v1/report HTTP/1.1\r\nHost: bench\r\n\r\n".to_vec()
        });
        let t = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..TASKS {
            let count = total / TASKS + usize::from(w < total % TASKS);
            let req = Arc::clone(&req);
            tasks.push(tokio::spawn(async move {
                load::keep_alive(addr, &req, count, 200).await
            }));
        }
        let mut ok = 0;
        for t in tasks {
            ok += t.await.unwrap();
        }
        assert_eq!(ok, total, "every answer was a 200");
        http.push(t.elapsed());
    }
    println!(
        "  loopback HTTP, 64 connections: ungated {:>9.0}/s  subscription-gated {:>9.0}/s  ratio {:.3}",
        rate(http[0], total),
        rate(http[1], total),
        http[0].as_secs_f64() / http[1].as_secs_f64()
    );
    println!(
        "  chain reads of subscription status during all of the above: {}",
        g.subscription_chain_reads()
    );

    // 2. deduct_allowance per second, and metered requests through the layer.
    deductions(&g, &p, n, "SQLite").await;
    let metered = app().route_layer(
        g.payment_gate([Pricing::subscription(p.plan.plan_id)])
            .metered(1u64),
    );
    let t = concurrent(metered, true).await;
    println!(
        "  metered requests/s through the layer (64 tasks, SQLite): {:>9.0}",
        rate(t, n)
    );
    if let Ok(url) = std::env::var("TOLLGATE_TEST_DATABASE_URL") {
        let (pg, schema) = PgSchema::create(&url, "tg_bench").await.unwrap();
        let p = provider(Some(pg), "bench-postgres").await;
        let g = gate(&p).await;
        deductions(&g, &p, n, "PostgreSQL").await;
        schema.drop_schema().await.unwrap();
    } else {
        println!("  (PostgreSQL skipped: TOLLGATE_TEST_DATABASE_URL is not set)");
    }
}

/// `n` deductions of 1 unit from [`TASKS`] tasks, over all subscriptions and then on one.
async fn deductions(g: &Gate, p: &Provider, n: usize, label: &str) {
    for (what, ids) in [
        ("16 subscriptions", p.ids.clone()),
        ("1 subscription", vec![p.ids[1]]),
    ] {
        let ids = Arc::new(ids);
        let t = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..TASKS {
            let (g, ids) = (g.clone(), Arc::clone(&ids));
            tasks.push(tokio::spawn(async move {
                let mut i = w;
                while i < n {
                    g.deduct_allowance(ids[i % ids.len()], 1u64)
                        .await
                        .expect("deducted");
                    i += TASKS;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        println!(
            "  deduct_allowance/s ({label}, 64 tasks, {what}): {:>9.0}",
            n as f64 / t.elapsed().as_secs_f64()
        );
    }
}
