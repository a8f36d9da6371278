//! One keeper run over many subscriptions due at once, on the embedded devnet with the store on
//! SQLite (a file, `synchronous = FULL`): how long indexing and renewing take, and how many
//! transactions it sends.
//!
//! Setup (not timed): a plan, 64 subscribers each approving the contract once, and `N`
//! subscriptions (`subscribe` sent by 64 concurrent clients), then the chain's clock moved one
//! interval ahead so every subscription is due. Timed: one `run_keeper_once` (it indexes the
//! `SubscriptionCreated` logs and collects every due subscription, 16 collections in flight),
//! then a second run that finds nothing due.
//!
//! ```text
//! cargo bench -p tollgate-facilitator --bench keeper                     # N = 100,000
//! TOLLGATE_BENCH_SUBSCRIPTIONS=10000 cargo bench -p tollgate-facilitator --bench keeper
//! ```
#![allow(missing_docs, clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::SolCall,
};
use tollgate_chain::{
    Chain, TxRequest, WaitOptions,
    contracts::{self, Subscriptions, Token},
};
use tollgate_devnet::{Devnet, DevnetConfig};
use tollgate_facilitator::{Facilitator, Settings, store};
use tollgate_testkit::harness::network_spec;

const INTERVAL: u64 = 30 * 24 * 3600;
const CLIENTS: usize = 64;

fn main() {
    tollgate_chain::install_crypto_provider();
    let n: usize = support::size("TOLLGATE_BENCH_SUBSCRIPTIONS", 100_000);
    support::runtime().block_on(run(n));
}

async fn send(devnet: &Devnet, from: Address, to: Address, data: Vec<u8>) {
    let tx = TxRequest {
        gas: Some(300_000),
        ..TxRequest::call(from, to, data)
    };
    let hash = devnet.send(tx).await.expect("send");
    let c = devnet
        .wait(
            hash,
            WaitOptions {
                confirmations: 1,
                timeout: Duration::from_secs(60),
            },
        )
        .await
        .expect("wait");
    assert!(c.receipt().expect("confirmed").success);
}

async fn run(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let devnet = Devnet::start(DevnetConfig {
        state_dir: Some(dir.path().join("devnet")),
        accounts: 2 + CLIENTS as u32,
        ..Default::default()
    })
    .unwrap();
    let accounts = devnet.accounts().to_vec();
    let d = devnet.deployment();
    let provider = accounts[1].address;

    // A plan of 1 unit per cycle, so that every subscriber can pay every renewal.
    let salt = B256::repeat_byte(1);
    let create = Subscriptions::createPlanCall {
        token: d.token,
        payTo: provider,
        amount: U256::from(1),
        interval: INTERVAL,
        operator: Address::ZERO,
        salt,
    };
    send(&devnet, provider, d.subscriptions, create.abi_encode()).await;
    let plan_id = contracts::read(
        devnet.as_ref(),
        d.subscriptions,
        &Subscriptions::planIdForCall { provider, salt },
    )
    .await
    .unwrap();

    eprintln!("setup: {n} subscriptions from {CLIENTS} subscribers (not timed)...");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let devnet = devnet.clone();
        let subscriber = accounts[2 + c].address;
        tasks.push(tokio::spawn(async move {
            let approve = Token::approveCall {
                spender: d.subscriptions,
                value: U256::MAX,
            };
            send(&devnet, subscriber, d.token, approve.abi_encode()).await;
            let mut i = c;
            while i < n {
                let call = Subscriptions::subscribeCall {
                    planId: plan_id,
                    maxOverage: U256::ZERO,
                };
                send(&devnet, subscriber, d.subscriptions, call.abi_encode()).await;
                if i % 10_000 == 0 && i > 0 {
                    eprintln!("  {i} subscriptions...");
                }
                i += CLIENTS;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!(
        "  {n} subscriptions in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    devnet.advance_time(INTERVAL).await.unwrap();

    let store = store::open(&format!("sqlite://{}", dir.path().join("f.db").display()))
        .await
        .unwrap();
    let spec = network_spec("tollgate-devnet", devnet.chain_id(), &d, 1);
    let f = Facilitator::new(
        Settings {
            keeper_interval: Duration::ZERO,
            ..Settings::default()
        },
        vec![(spec, devnet.clone() as Arc<dyn Chain>)],
        vec![accounts[0].address],
        B256::repeat_byte(0x42),
        store,
    )
    .unwrap();
    let block_before = devnet.block_number().await.unwrap();
    let t = Instant::now();
    let report = f.run_keeper_once().await;
    let elapsed = t.elapsed();
    let txs = devnet.block_number().await.unwrap() - block_before;
    assert_eq!(report.renewed, n, "{report:?}");
    assert_eq!(report.errors, 0, "{report:?}");
    println!("keeper bench: {n} subscriptions due at once (devnet in process, SQLite store)");
    println!(
        "  one run: {:.1} s  indexed {}  renewed {}  transactions sent {}  ({:.0} renewals/s)",
        elapsed.as_secs_f64(),
        report.indexed,
        report.renewed,
        txs,
        n as f64 / elapsed.as_secs_f64()
    );
    let t = Instant::now();
    let again = f.run_keeper_once().await;
    assert_eq!(again.renewed, 0, "{again:?}");
    println!(
        "  the next run (nothing due): {:.2} s, {} transactions",
        t.elapsed().as_secs_f64(),
        devnet.block_number().await.unwrap() - block_before - txs
    );
}
