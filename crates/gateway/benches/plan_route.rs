//! The gateway's plan route against the SDK layer's subscription-gated route, over loopback HTTP
//! in one run: the same facilitator, devnet (served over JSON-RPC, as discovery publishes it),
//! plan and subscription; both gates built from discovery alone (`plan(id)`), status cached as
//! in production. 64 keep-alive connections each. Also the gateway's free route, to separate the
//! proxy hop (the gateway forwards every admitted request to an upstream) from the gate.
//!
//! ```text
//! cargo bench -p tollgate-gateway --bench plan_route            # N = 20,000
//! TOLLGATE_BENCH_N=50000 cargo bench -p tollgate-gateway --bench plan_route
//! ```
#![allow(missing_docs, clippy::print_stdout, clippy::print_stderr)]

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::{
    primitives::{B256, U256},
    sol_types::{SolCall, SolEvent},
};
use axum::{Router, routing::get};
use serde_json::{Value, json};
use tollgate_chain::{
    TxRequest, WaitOptions,
    contracts::{Subscriptions, Token},
};
use tollgate_gate::{Gate, Pricing};
use tollgate_gateway::{Config, Secrets};
use tollgate_testkit::{
    Backend, Fixture,
    harness::{DEVNET_NETWORK, PAYEE, PAYER, TestNet},
};

use tollgate_testkit::load;

const PLAN_AMOUNT: u64 = 1_000_000;
const INTERVAL: u64 = 30 * 24 * 3600;
const CONNECTIONS: usize = 64;

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

/// A facilitator over the devnet served on JSON-RPC, publishing that URL; a plan of [`PAYEE`]'s
/// and one subscription of [`PAYER`]'s to it.
async fn setup() -> (TestNet, B256, B256) {
    let fixture = Fixture::new(Backend::DevnetRpc).await.unwrap();
    let rpc = fixture.rpc_url().unwrap().to_owned();
    let net = TestNet::builder()
        .fixture(fixture)
        .settings(move |s| {
            s.keeper_interval = Duration::ZERO;
            s.public_rpc_urls = BTreeMap::from([(DEVNET_NETWORK.to_owned(), rpc)]);
        })
        .start()
        .await
        .unwrap();
    let key = net.api_key(PAYEE, "bench").await;
    let plan: Value = net
        .http
        .post(format!("{}/plans", net.url))
        .bearer_auth(&key)
        .json(&json!({
            "network": DEVNET_NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": INTERVAL,
            "idempotencyKey": "bench-plan-route"
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let plan: B256 = plan["planId"].as_str().unwrap().parse().unwrap();
    let d = net.fixture.deployment;
    let send = |to, data: Vec<u8>| {
        let tx = TxRequest::call(net.address(PAYER), to, data);
        net.fixture.chain.send_and_wait(tx, WaitOptions::default())
    };
    let approve = Token::approveCall {
        spender: d.subscriptions,
        value: U256::MAX,
    };
    send(d.token, approve.abi_encode()).await.unwrap();
    let call = Subscriptions::subscribeCall {
        planId: plan,
        maxOverage: U256::ZERO,
    };
    let c = send(d.subscriptions, call.abi_encode()).await.unwrap();
    let sub = c
        .receipt()
        .unwrap()
        .logs
        .iter()
        .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
        .unwrap()
        .id;
    (net, plan, sub)
}

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// `total` requests `request` over [`CONNECTIONS`] keep-alive connections to `addr`, all 200;
/// requests per second.
async fn rate(addr: SocketAddr, request: String, total: usize) -> f64 {
    let request = Arc::new(request.into_bytes());
    // Warm-up: the subscription's status is read once, then cached; connections are pooled.
    assert_eq!(load::keep_alive(addr, &request, 10, 200).await, 10);
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..CONNECTIONS {
        let count = total / CONNECTIONS + usize::from(w < total % CONNECTIONS);
        let request = Arc::clone(&request);
        tasks.push(tokio::spawn(async move {
            load::keep_alive(addr, &request, count, 200).await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap();
    }
    assert_eq!(ok, total, "every answer was a 200");
    total as f64 / t.elapsed().as_secs_f64()
}

async fn run(n: usize) {
    eprintln!("setting up: a devnet, a facilitator, a plan and a subscription (not timed)...");
    let (net, plan, sub) = setup().await;
    let d = net.fixture.deployment;

    // The SDK: the layer on an axum route, built from discovery.
    let gate = Gate::builder()
        .network(DEVNET_NETWORK)
        .token(d.token, "USD Coin", "2")
        .pay_to(net.address(PAYEE))
        .facilitator(net.url.clone())
        .public_url("http://127.0.0.1:1")
        .plan(plan)
        .build()
        .await
        .unwrap();
    let sdk = serve(
        Router::new()
            .route("/v1/report", get(|| async { "42" }))
            .route_layer(gate.payment_gate([Pricing::subscription(plan)])),
    )
    .await;

    // The gateway: the same plan by TOML, in front of an upstream that answers the same.
    let upstream = serve(Router::new().fallback(get(|| async { "42" }))).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"listen = "127.0.0.1:1"
upstream = "http://{upstream}"
[server]
rate_per_second = 0
[gate]
network = "{DEVNET_NETWORK}"
token = "{token}"
pay_to = "{pay_to}"
facilitator = "{facilitator}"
memo_store = "sqlite://{memos}"
[[routes]]
prefix = "/v1/report"
plan = "{plan}"
[[routes]]
prefix = "/free"
free = true
"#,
        token = d.token,
        pay_to = net.address(PAYEE),
        facilitator = net.url,
        memos = dir.path().join("memos.db").display(),
    );
    let config = Config::from_toml_str(&toml).unwrap();
    let gateway = serve(
        tollgate_gateway::router(&config, &Secrets::new())
            .await
            .unwrap(),
    )
    .await;

    let with_sub =
        format!("GET /v1/report HTTP/1.1\r\nHost: bench\r\nX-Service-Sub: {sub}\r\n\r\n");
    let sdk_rate = rate(sdk, with_sub.clone(), n).await;
    let gateway_rate = rate(gateway, with_sub, n).await;
    let free_rate = rate(
        gateway,
        "GET /free HTTP/1.1\r\nHost: bench\r\n\r\n".to_owned(),
        n,
    )
    .await;
    println!("plan route bench (n = {n}, loopback HTTP, {CONNECTIONS} connections)");
    println!("  SDK layer, subscription-gated:      {sdk_rate:>9.0}/s");
    println!(
        "  gateway plan route (gate + proxy):  {gateway_rate:>9.0}/s  ({:.0} % of the SDK layer)",
        100.0 * gateway_rate / sdk_rate
    );
    println!(
        "  gateway free route (proxy only):    {free_rate:>9.0}/s  (plan route at {:.0} % of it)",
        100.0 * gateway_rate / free_rate
    );
    println!(
        "  chain reads of the subscription: SDK {}",
        gate.subscription_chain_reads()
    );
}
