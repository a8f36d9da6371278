//! Events per second through the webhook outbox to a receiver on loopback, with the store on
//! SQLite (a file, `synchronous = FULL`) and, when `TOLLGATE_TEST_DATABASE_URL` is set, on
//! PostgreSQL:
//!
//! - writing: `N` events recorded by 64 concurrent tasks (each event and its deliveries in one
//!   transaction, as the store's state changes record them);
//! - delivering: the worker draining them, signed, to 1 endpoint and then to 8 endpoints (in
//!   order per endpoint, endpoints concurrently), each delivery a real HTTP POST answered 200.
//!
//! ```text
//! cargo bench -p tollgate-facilitator --bench webhooks                     # N = 10,000
//! TOLLGATE_BENCH_N=50000 TOLLGATE_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!     cargo bench -p tollgate-facilitator --bench webhooks
//! ```
#![allow(missing_docs, clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::primitives::{Address, B256};
use axum::{Router, routing::post};
use tollgate_chain::Chain;
use tollgate_devnet::{Devnet, DevnetConfig};
use tollgate_facilitator::{
    Facilitator, Settings,
    store::{self, Endpoint, NewEvent, Store},
};
use tollgate_protocol::webhook::WebhookSecret;
use tollgate_testkit::harness::{PgSchema, network_spec};

fn main() {
    tollgate_chain::install_crypto_provider();
    let n: usize = support::size("TOLLGATE_BENCH_N", 10_000);
    support::runtime().block_on(run(n));
}

async fn run(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let devnet = Devnet::start(DevnetConfig {
        state_dir: Some(dir.path().join("devnet")),
        ..Default::default()
    })
    .unwrap();
    let received = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&received);
    let app = Router::new().route(
        "/hook",
        post(move || {
            let count = Arc::clone(&count);
            async move {
                count.fetch_add(1, Ordering::Relaxed);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    println!("webhooks bench (N = {n} events)");
    let sqlite = store::open(&format!("sqlite://{}", dir.path().join("f.db").display()))
        .await
        .unwrap();
    bench(&devnet, sqlite, &url, n, "SQLite", &received).await;
    if let Ok(db) = std::env::var("TOLLGATE_TEST_DATABASE_URL") {
        let (pg, schema) = PgSchema::create(&db, "tg_bench_wh").await.unwrap();
        bench(&devnet, pg, &url, n, "PostgreSQL", &received).await;
        schema.drop_schema().await.unwrap();
    } else {
        println!("  (PostgreSQL skipped: TOLLGATE_TEST_DATABASE_URL is not set)");
    }
}

async fn bench(
    devnet: &Arc<Devnet>,
    store: Arc<dyn Store>,
    url: &str,
    n: usize,
    label: &str,
    received: &AtomicUsize,
) {
    let accounts = devnet.accounts().to_vec();
    let d = devnet.deployment();
    let spec = network_spec("tollgate-devnet", devnet.chain_id(), &d, 1);
    let f = Facilitator::new(
        Settings {
            webhook_allow_private: true,
            keeper_interval: Duration::ZERO,
            ..Settings::default()
        },
        vec![(spec, Arc::clone(devnet) as Arc<dyn Chain>)],
        vec![accounts[0].address],
        accounts[9].private_key,
        Arc::clone(&store),
    )
    .unwrap();
    for endpoints in [1usize, 8] {
        let provider = Address::from(B256::random().0[..20].try_into().unwrap_or([0u8; 20]));
        for i in 0..endpoints {
            store
                .insert_webhook_endpoint(&Endpoint {
                    id: format!("we_bench_{label}_{endpoints}_{i}"),
                    provider,
                    url: url.to_owned(),
                    events: "*".into(),
                    description: String::new(),
                    secret: WebhookSecret::generate().expose_secret(),
                    old_secret: None,
                    old_secret_expires_at: None,
                    enabled: true,
                    disabled_reason: None,
                    created_at: 1,
                    updated_at: 1,
                })
                .await
                .unwrap();
        }
        let t = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..64 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let mut i = w;
                while i < n {
                    let e = NewEvent {
                        id: format!("evt_{}", B256::random()),
                        provider,
                        r#type: "payment.settled".into(),
                        data: format!("{{\"i\":{i},\"amount\":\"500000\"}}"),
                        created_at: 1,
                    };
                    store.record_event(&e).await.unwrap();
                    i += 64;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let written = t.elapsed();
        let before = received.load(Ordering::Relaxed);
        let t = Instant::now();
        while received.load(Ordering::Relaxed) - before < n * endpoints {
            f.deliver_webhooks_once().await;
        }
        let delivered = t.elapsed();
        println!(
            "  {label:<10} {endpoints} endpoint(s): outbox writes {:>7.0} events/s ({} deliveries each); delivered {:>7.0} deliveries/s ({:.0} events/s)",
            n as f64 / written.as_secs_f64(),
            endpoints,
            (n * endpoints) as f64 / delivered.as_secs_f64(),
            n as f64 / delivered.as_secs_f64(),
        );
    }
}
