//! The analytics dashboard with a large store: `N` confirmed settlements (default one million)
//! to one provider over 30 days, from 2,000 payers, to 20 resources, written through the store's
//! own `insert_settlement` + `mark_confirmed` (so the rollups and the outbox events are written as
//! in production). Then, per range:
//!
//! - `GET /dashboard` (the whole page: every report query and the HTML) and `GET /analytics`
//!   over loopback HTTP, sequentially: median and p95;
//! - for comparison, the volume totals computed straight from the settlements table (what the
//!   rollups save).
//!
//! ```text
//! cargo bench -p tollgate-facilitator --bench dashboard                          # SQLite, N = 1,000,000
//! TOLLGATE_BENCH_N=200000 TOLLGATE_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!     cargo bench -p tollgate-facilitator --bench dashboard                      # and PostgreSQL
//! ```
#![allow(missing_docs, clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::primitives::{Address, B256, U256, keccak256};
use tollgate_chain::Chain;
use tollgate_devnet::{Devnet, DevnetConfig};
use tollgate_facilitator::{
    Facilitator, Settings,
    store::{self, NewSettlement, SettlementKind, Store},
};
use tollgate_protocol::Amount;
use tollgate_testkit::harness::{PgSchema, network_spec};

const DAY: u64 = 86_400;
const PAYERS: u64 = 2_000;
const RESOURCES: u64 = 20;

fn main() {
    tollgate_chain::install_crypto_provider();
    let n: u64 = support::size("TOLLGATE_BENCH_N", 1_000_000);
    support::runtime().block_on(run(n));
}

async fn run(n: u64) {
    let dir = tempfile::tempdir().unwrap();
    let devnet = Devnet::start(DevnetConfig {
        state_dir: Some(dir.path().join("devnet")),
        ..Default::default()
    })
    .unwrap();
    println!("dashboard bench (N = {n} settlements to one provider over 30 days)");
    let path = dir.path().join("f.db");
    let sqlite = store::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let raw = format!("sqlite://{}?mode=ro", path.display());
    bench(&devnet, sqlite, n, "SQLite", Some(raw)).await;
    if let Ok(db) = std::env::var("TOLLGATE_TEST_DATABASE_URL") {
        let (pg, schema) = PgSchema::create(&db, "tg_bench_dash").await.unwrap();
        bench(&devnet, pg, n, "PostgreSQL", None).await;
        schema.drop_schema().await.unwrap();
    } else {
        println!("  (PostgreSQL skipped: TOLLGATE_TEST_DATABASE_URL is not set)");
    }
}

fn address(tag: u8, i: u64) -> Address {
    let mut b = [tag; 20];
    b[12..].copy_from_slice(&i.to_be_bytes());
    Address::from(b)
}

/// Fills the store: `n` settlements, confirmed at times spread over the 30 days before `now`.
async fn fill(store: &Arc<dyn Store>, provider: Address, n: u64, now: u64) {
    let started = Instant::now();
    let tasks = 64;
    let mut handles = Vec::new();
    for w in 0..tasks {
        let store = Arc::clone(store);
        handles.push(tokio::spawn(async move {
            let mut i = w;
            while i < n {
                // A skewed payer mix: a few heavy agents, a long tail.
                let payer = (i * i + 7 * i) % PAYERS;
                let payer = if i % 3 == 0 { payer % 20 } else { payer };
                let at = now - 30 * DAY + i * (30 * DAY) / n;
                let new = NewSettlement {
                    key: keccak256(i.to_be_bytes()),
                    kind: SettlementKind::Router,
                    request_hash: keccak256((i + 1).to_be_bytes()),
                    network: "tollgate-devnet".into(),
                    chain_id: 31_337,
                    token: address(0xee, 0),
                    payer: address(0xaa, payer),
                    pay_to: provider,
                    amount: Amount::from_units(10_000 + (i % 50) * 10_000),
                    fee: Amount::from_units(1_000),
                    memo: B256::ZERO,
                    nonce: keccak256((i + 2).to_be_bytes()),
                    valid_before: at + 3_600,
                    request: "{}".into(),
                    resource: Some(format!("https://api.example/v1/resource-{}", i % RESOURCES)),
                    claim_hash: None,
                    created_at: at,
                };
                store.insert_settlement(&new).await.unwrap();
                store
                    .mark_confirmed(&new, new.nonce, i, None, at)
                    .await
                    .unwrap();
                i += tasks;
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    println!(
        "    filled in {:.0} s ({:.0} settlements/s, each inserted and confirmed)",
        started.elapsed().as_secs_f64(),
        n as f64 / started.elapsed().as_secs_f64()
    );
}

async fn timed(base: &str, key: &str, uri: &str, runs: usize) -> (Duration, Duration, usize) {
    let http = reqwest::Client::new();
    let mut times = Vec::with_capacity(runs);
    let mut bytes = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let res = http
            .get(format!("{base}{uri}"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{uri}");
        bytes = res.bytes().await.unwrap().len();
        times.push(t.elapsed());
    }
    times.sort();
    (times[runs / 2], times[runs * 95 / 100], bytes)
}

async fn bench(
    devnet: &Arc<Devnet>,
    store: Arc<dyn Store>,
    n: u64,
    label: &str,
    raw: Option<String>,
) {
    println!("  {label}");
    let accounts = devnet.accounts().to_vec();
    let d = devnet.deployment();
    let spec = network_spec("tollgate-devnet", devnet.chain_id(), &d, 1);
    let f = Facilitator::new(
        Settings {
            keeper_interval: Duration::ZERO,
            ..Settings::default()
        },
        vec![(spec, Arc::clone(devnet) as Arc<dyn Chain>)],
        vec![accounts[0].address],
        accounts[9].private_key,
        Arc::clone(&store),
    )
    .unwrap();
    let provider = address(0x11, u64::from(label.len() as u8));
    let key = f.issue_api_key(provider, "bench").await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    fill(&store, provider, n, now).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(tollgate_facilitator::serve(
        f,
        listener,
        std::future::pending(),
    ));

    let runs = 40;
    for (range, what) in [
        ("range=24h", "24 h by hour"),
        ("range=30d", "30 days by day"),
        ("range=30d&bucket=hour", "30 days by hour"),
        ("range=90d&bucket=week", "90 days by week"),
    ] {
        let (page_p50, page_p95, page_bytes) =
            timed(&base, &key, &format!("/dashboard?{range}"), runs).await;
        let (api_p50, api_p95, _) = timed(&base, &key, &format!("/analytics?{range}"), runs).await;
        println!(
            "    {what:<16} /dashboard p50 {:>6.1} ms  p95 {:>6.1} ms  ({} KiB)   /analytics p50 {:>6.1} ms  p95 {:>6.1} ms",
            ms(page_p50),
            ms(page_p95),
            page_bytes / 1024,
            ms(api_p50),
            ms(api_p95),
        );
    }
    // Sanity: the totals are those written.
    let report: serde_json::Value = reqwest::Client::new()
        .get(format!("{base}/analytics?range=90d"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["volume"]["total"]["payments"], n);
    let gross: U256 = report["volume"]["total"]["gross"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let want: u64 = (0..n).map(|i| 10_000 + (i % 50) * 10_000).sum();
    assert_eq!(gross, U256::from(want));
    if let Some(raw) = raw {
        scan_for_comparison(raw, provider, now).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// What the 30-day report's volume figures cost without the rollups: the totals and the payer
/// ranking straight from the settlements table (SQLite, read-only).
async fn scan_for_comparison(url: String, provider: Address, now: u64) {
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let pay_to = format!("{provider:#x}");
    let since = i64::try_from(now - 30 * DAY).unwrap();
    let t = Instant::now();
    let totals: (i64, i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), SUM(CAST(amount AS INTEGER)), SUM(CAST(fee AS INTEGER)) \
         FROM settlements WHERE pay_to = ?1 AND status = 'confirmed' AND updated_at >= ?2",
    )
    .bind(&pay_to)
    .bind(since)
    .fetch_one(&pool)
    .await
    .unwrap();
    let totals_took = t.elapsed();
    let t = Instant::now();
    let payers: Vec<(String, i64)> = sqlx::query_as(
        "SELECT payer, SUM(CAST(amount AS INTEGER)) AS g FROM settlements \
         WHERE pay_to = ?1 AND status = 'confirmed' AND updated_at >= ?2 \
         GROUP BY payer ORDER BY g DESC LIMIT 10",
    )
    .bind(&pay_to)
    .bind(since)
    .fetch_all(&pool)
    .await
    .unwrap();
    println!(
        "    without rollups (30 days, from settlements): totals {:.0} ms, top payers {:.0} ms ({} rows summed, {} payers listed)",
        ms(totals_took),
        ms(t.elapsed()),
        totals.0,
        payers.len()
    );
}
