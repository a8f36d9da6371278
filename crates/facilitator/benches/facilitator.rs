//! Facilitator load: `/authorize` on the devnet (SQLite and PostgreSQL stores), and the x402 V1
//! path (`/verify`, `/settle`) against anvil, driven by an in-repo Rust load generator over
//! loopback HTTP with distinct pre-signed payments.
//!
//! ```text
//! cargo bench -p tollgate-facilitator --bench facilitator                    # everything
//! cargo bench -p tollgate-facilitator --bench facilitator -- authorize       # /authorize, SQLite
//! cargo bench -p tollgate-facilitator --bench facilitator -- authorize-pg    # /authorize, PostgreSQL
//! cargo bench -p tollgate-facilitator --bench facilitator -- x402            # /verify and /settle on anvil
//! ```
//!
//! PostgreSQL: `TOLLGATE_TEST_DATABASE_URL` (default postgres://postgres@127.0.0.1:5432/test); the
//! bench works in a schema of its own and drops it afterwards. Sizes: `TOLLGATE_BENCH_N`.
#![allow(missing_docs, clippy::print_stdout, clippy::print_stderr)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::primitives::{Address, B256, U256};
use tollgate_chain::{
    Chain,
    accounts::DevAccount,
    authorization::{
        ReceiveWithAuthorization, TransferWithAuthorization, router_nonce, sign, token_domain,
    },
};
use tollgate_devnet::{Devnet, DevnetConfig};
use tollgate_facilitator::{Facilitator, NetworkSpec, Settings, store};
use tollgate_protocol::{
    Amount, Eip3009Authorization, SignedPayment,
    x402::{ExactEvmAuthorization, ExactEvmPayload, PaymentPayload},
};
use tollgate_testkit::{Anvil, anvil_chain};

fn main() {
    tollgate_chain::install_crypto_provider();
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let all = which.is_empty();
    let want = |name: &str| all || which.iter().any(|w| w == name);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let n: usize = std::env::var("TOLLGATE_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    if want("authorize") {
        rt.block_on(authorize(None, n));
    }
    if want("authorize-pg") {
        let url = std::env::var("TOLLGATE_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        rt.block_on(authorize(Some(url), n));
    }
    if want("x402") {
        rt.block_on(x402(n));
    }
}

struct Served {
    url: String,
    _server: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn serve(f: Facilitator) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(tollgate_facilitator::serve(
        f,
        listener,
        std::future::pending(),
    ));
    Served {
        url,
        _server: server,
    }
}

fn spec(chain: &dyn Chain, d: tollgate_chain::Deployment) -> NetworkSpec {
    NetworkSpec {
        name: "tollgate-devnet".into(),
        chain_id: chain.chain_id(),
        token: d.token,
        token_name: "USD Coin".into(),
        token_version: "2".into(),
        router: d.router,
        subscriptions: Some(d.subscriptions),
        confirmations: 1,
    }
}

/// Latency percentiles and throughput of `n` requests at concurrency `c`, each made by `req(i)`.
async fn drive<F, Fut>(label: &str, n: usize, c: usize, req: F)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let req = Arc::new(req);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..c {
        let req = req.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut failures = 0usize;
            let mut i = w;
            while i < n {
                let t = Instant::now();
                if !req(i).await {
                    failures += 1;
                }
                lat.push(t.elapsed());
                i += c;
            }
            (lat, failures)
        }));
    }
    let mut lat = Vec::with_capacity(n);
    let mut failures = 0;
    for t in tasks {
        let (l, f) = t.await.unwrap();
        lat.extend(l);
        failures += f;
    }
    let elapsed = started.elapsed();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "  {label:<34} n={n:<6} c={c:<3} {:>8.0} req/s   p50 {:>7.2} ms   p99 {:>7.2} ms   failures {failures}",
        n as f64 / elapsed.as_secs_f64(),
        ms(pct(0.50)),
        ms(pct(0.99)),
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn authorize(pg: Option<String>, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let devnet = Devnet::start(DevnetConfig {
        state_dir: Some(dir.path().join("devnet")),
        ..Default::default()
    })
    .unwrap();
    let accounts = devnet.accounts().to_vec();
    let (store, label, schema) = match &pg {
        None => {
            let url = format!("sqlite://{}", dir.path().join("f.db").display());
            (
                store::open(&url).await.unwrap(),
                "/authorize devnet + SQLite",
                None,
            )
        }
        Some(url) => {
            let schema = format!("tg_bench_{}", std::process::id());
            let s = store::PostgresStore::connect_with_schema(url, &schema)
                .await
                .unwrap();
            store::Store::migrate(&s).await.unwrap();
            let s: Arc<dyn store::Store> = Arc::new(s);
            (
                s,
                "/authorize devnet + PostgreSQL",
                Some((url.clone(), schema)),
            )
        }
    };
    // Four relayers (dev accounts 5-8) settle in parallel; account 9 signs proofs.
    let relayers: Vec<Address> = accounts[5..9].iter().map(|a| a.address).collect();
    let f = Facilitator::new(
        Settings {
            confirmation_timeout: Duration::from_secs(30),
            ..Settings::default()
        },
        vec![(
            spec(&*devnet, devnet.deployment()),
            devnet.clone() as Arc<dyn Chain>,
        )],
        relayers,
        accounts[9].private_key,
        store,
    )
    .unwrap();
    let served = serve(f).await;
    let d = devnet.deployment();
    let domain = token_domain("USD Coin", "2", devnet.chain_id(), d.token);
    let now = devnet.timestamp().await.unwrap().max(unix_now());
    eprintln!("signing {n} payments (not timed)...");
    let bodies: Vec<String> = (0..n)
        .map(|i| {
            let payer: &DevAccount = &accounts[i % 5];
            let pay_to = Address::repeat_byte(0xee);
            let memo = B256::from(U256::from(i as u64 + 1));
            let auth = ReceiveWithAuthorization {
                from: payer.address,
                to: d.router,
                value: U256::from(10_000),
                validAfter: U256::from(now - 60),
                validBefore: U256::from(now + 3000),
                nonce: router_nonce(pay_to, memo, U256::from(1_000)),
            };
            let signature = sign(&payer.signer(), &auth, &domain).unwrap();
            let sp = SignedPayment {
                network: "tollgate-devnet".into(),
                token: d.token,
                pay_to,
                amount: Amount::from_units(10_000),
                memo,
                authorization: Eip3009Authorization {
                    from: payer.address,
                    to: d.router,
                    value: Amount::from_units(10_000),
                    valid_after: Amount::from_units(now - 60),
                    valid_before: Amount::from_units(now + 3000),
                    nonce: auth.nonce,
                    signature,
                },
            };
            serde_json::to_string(&serde_json::json!({ "signedPayment": sp })).unwrap()
        })
        .collect();
    let bodies = Arc::new(bodies);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()
        .unwrap();
    let url = format!("{}/authorize", served.url);
    drive(label, n, 64, move |i| {
        let (http, url, bodies) = (http.clone(), url.clone(), bodies.clone());
        async move {
            match http
                .post(&url)
                .header("content-type", "application/json")
                .body(bodies[i].clone())
                .send()
                .await
            {
                Ok(r) => r.status() == 200,
                Err(_) => false,
            }
        }
    })
    .await;
    if let Some((url, schema)) = schema {
        sqlx_drop(&url, &schema).await;
    }
}

async fn sqlx_drop(url: &str, schema: &str) {
    // Remove the bench schema with a fresh session.
    if let Ok(pool) = sqlx::PgPool::connect(url).await {
        let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
            .execute(&pool)
            .await;
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn x402(n: usize) {
    let anvil = Anvil::spawn().await.unwrap();
    let (chain, d, accounts) = anvil_chain(&anvil).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(&format!("sqlite://{}", dir.path().join("f.db").display()))
        .await
        .unwrap();
    let relayers: Vec<Address> = accounts[5..9].iter().map(|a| a.address).collect();
    let f = Facilitator::new(
        Settings::default(),
        vec![(spec(&*chain, d), chain.clone())],
        relayers,
        accounts[9].private_key,
        store,
    )
    .unwrap();
    let served = serve(f).await;
    let domain = token_domain("USD Coin", "2", chain.chain_id(), d.token);
    let now = chain.timestamp().await.unwrap().max(unix_now());
    let pay_to = Address::repeat_byte(0xdd);
    let requirements = serde_json::json!({
        "scheme": "exact", "network": "tollgate-devnet", "maxAmountRequired": "10000",
        "resource": "http://127.0.0.1/v1/quote", "description": "", "mimeType": "application/json",
        "payTo": pay_to, "maxTimeoutSeconds": 600, "asset": d.token,
        "extra": { "name": "USD Coin", "version": "2" }
    });
    eprintln!("signing {n} x402 payloads (not timed)...");
    let bodies: Vec<String> = (0..n)
        .map(|i| {
            let payer = &accounts[i % 5];
            let nonce = B256::from(U256::from(i as u64 + 1));
            let auth = TransferWithAuthorization {
                from: payer.address,
                to: pay_to,
                value: U256::from(10_000),
                validAfter: U256::from(now - 600),
                validBefore: U256::from(now + 600),
                nonce,
            };
            let signature = sign(&payer.signer(), &auth, &domain).unwrap();
            let payload = PaymentPayload {
                x402_version: 1,
                scheme: "exact".into(),
                network: "tollgate-devnet".into(),
                payload: ExactEvmPayload {
                    signature,
                    authorization: ExactEvmAuthorization {
                        from: payer.address,
                        to: pay_to,
                        value: Amount::from_units(10_000),
                        valid_after: Amount::from_units(now - 600),
                        valid_before: Amount::from_units(now + 600),
                        nonce,
                    },
                },
            };
            serde_json::json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": requirements }).to_string()
        })
        .collect();
    let bodies = Arc::new(bodies);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    for (path, c, key, count) in [
        ("verify", 16, "isValid", n),
        ("settle", 8, "success", n.min(3_000)),
    ] {
        let url = format!("{}/{path}", served.url);
        let (http, bodies) = (http.clone(), bodies.clone());
        drive(&format!("/{path} anvil (x402 V1)"), count, c, move |i| {
            let (http, url, bodies) = (http.clone(), url.clone(), bodies.clone());
            async move {
                let Ok(r) = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(bodies[i].clone())
                    .send()
                    .await
                else {
                    return false;
                };
                r.json::<serde_json::Value>()
                    .await
                    .is_ok_and(|v| v[key] == true)
            }
        })
        .await;
    }
}
