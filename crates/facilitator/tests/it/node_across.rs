//! A node across the network (issue 36): the facilitator reaches anvil through
//! `tollgate_testkit::node_proxy`, which adds a round trip to every call and refuses calls past
//! a per-second limit with `429` as hosted providers do, on a chain of 2 s blocks with
//! `confirmations = 2`. The correctness rules of SECURITY.md hold under the delay: a success only
//! for a mined transfer of exactly that value, each payment once, and no state read staler than
//! a block (a settled payment verifies as used at once).

use std::{collections::HashSet, sync::Arc, time::Duration};

use alloy::primitives::{B256, U256};
use serde_json::Value;
use tollgate_chain::{Chain, rpc::RpcChain};
use tollgate_testkit::{
    Fixture,
    node_proxy::{NodeProxy, ProxyOptions},
};

use crate::support::{Backend, Harness, relayer_chain_via};

const PAYMENTS: u8 = 8;

/// A fresh anvil, a proxy in front of it with `options`, and the relayer's handle on the chain
/// through the proxy.
async fn behind_proxy(options: ProxyOptions) -> (Fixture, NodeProxy, Arc<RpcChain>) {
    tollgate_chain::install_crypto_provider();
    let fixture = Fixture::new(Backend::Anvil).await.expect("anvil");
    let proxy = NodeProxy::start(fixture.rpc_url().unwrap(), options)
        .await
        .unwrap();
    let chain = relayer_chain_via(&fixture, proxy.url()).await;
    (fixture, proxy, chain)
}
const AMOUNT: u64 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_80_ms_and_a_429_limit_each_x402_payment_settles_once_and_only_when_mined() {
    let (fixture, proxy, chain) = behind_proxy(ProxyOptions {
        round_trip: Duration::from_millis(80),
        calls_per_second: Some(10),
    })
    .await;
    let h = Harness::assemble(fixture, chain, 2, None, |s| {
        s.confirmation_timeout = Duration::from_secs(90);
    })
    .await;
    h.mine_every(2).await;
    let h = Arc::new(h);
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    let start = proxy.calls();

    // Every payment verified then settled, all at once, as 8 resource servers would.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..PAYMENTS {
        let h = Arc::clone(&h);
        tasks.spawn(async move {
            let payer = 1 + usize::from(i % 6);
            let body = h
                .settle_body(payer, pay_to, AMOUNT, B256::repeat_byte(0x60 + i))
                .await;
            let (s, v) = h.post("/verify", &body).await;
            assert_eq!((s, &v["isValid"]), (200, &Value::Bool(true)), "{v}");
            let (s, r) = h.post("/settle", &body).await;
            assert_eq!(s, 200, "{r}");
            assert_eq!(r["success"], true, "{r}");
            // Answered only once mined with its confirmations: read straight from the node.
            let tx: B256 = r["transaction"].as_str().unwrap().parse().unwrap();
            let chain = &h.fixture.chain;
            let receipt = chain.receipt(tx).await.unwrap().expect("mined");
            assert!(receipt.success);
            let head = chain.block_number().await.unwrap();
            // confirmations = 2: its block and one more.
            assert!(
                head > receipt.block_number,
                "answered at block {head}, mined in {}",
                receipt.block_number
            );
            (body, tx)
        });
    }
    let mut settled = Vec::new();
    while let Some(r) = tasks.join_next().await {
        settled.push(r.unwrap());
    }
    // (Settled alone or batched together: the transactions may be fewer than the payments.)
    let txs: HashSet<_> = settled.iter().map(|(_, tx)| *tx).collect();
    assert!(!txs.is_empty() && txs.len() <= usize::from(PAYMENTS));
    let paid = U256::from(u64::from(PAYMENTS) * AMOUNT);
    assert_eq!(
        h.token_balance(pay_to).await - before,
        paid,
        "each paid once"
    );
    let calls = proxy.calls().since(&start);
    assert!(calls.refused > 0, "the limit refused some calls: {calls:?}");

    // Settled again: the same transaction, nothing moved; verified again: used, at once.
    for (body, tx) in &settled {
        let (_, again) = h.post("/settle", body).await;
        assert_eq!(again["success"], false, "{again}");
        assert_eq!(again["errorReason"], "duplicate_settlement");
        assert_eq!(again["transaction"], tx.to_string());
        let (_, v) = h.post("/verify", body).await;
        assert_eq!(v["isValid"], false, "{v}");
        assert_eq!(v["invalidReason"], "invalid_transaction_state");
    }
    assert_eq!(h.token_balance(pay_to).await - before, paid);
}

/// Requests that come together while the facilitator's cached readings are stale (the chain's
/// clock, a relayer's balance, the fees) wait for one reading each instead of each asking the
/// node: 80 ms away, every request of those 80 ms would ask, and a hosted node bills each call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_come_together_share_one_reading_of_the_clock_funds_and_fees() {
    let (fixture, proxy, chain) = behind_proxy(ProxyOptions {
        round_trip: Duration::from_millis(80),
        calls_per_second: None,
    })
    .await;
    // Without the token view, whose polls read blocks of their own, however many verify.
    let h = Arc::new(
        Harness::assemble(fixture, chain.clone(), 1, None, |s| s.token_view = false).await,
    );
    let pay_to = h.account(7).address;
    let mut bodies = Vec::new();
    for i in 0..16u8 {
        bodies.push(
            h.settle_body(
                1 + usize::from(i % 6),
                pay_to,
                AMOUNT,
                B256::repeat_byte(0x80 + i),
            )
            .await,
        );
    }
    let together = async |path: &'static str, bodies: &Vec<Value>| {
        let before = proxy.calls();
        let mut tasks = tokio::task::JoinSet::new();
        for body in bodies.clone() {
            let h = Arc::clone(&h);
            tasks.spawn(async move { h.post(path, &body).await });
        }
        while let Some(r) = tasks.join_next().await {
            let (s, v) = r.unwrap();
            assert_eq!(s, 200, "{path}: {v}");
        }
        proxy.calls().since(&before)
    };
    // The clock, stale after a second: sixteen verifications read it once.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let calls = together("/verify", &bodies).await;
    assert_eq!(
        calls.of("eth_getBlockByNumber"),
        1,
        "the clock: {}",
        calls.summary()
    );
    // The relayer's balance (its reading stale) and the fees: sixteen settlements read each
    // once.
    tokio::time::sleep(tollgate_facilitator::funds::FUNDS_TTL + Duration::from_millis(100)).await;
    let calls = together("/settle", &bodies).await;
    assert_eq!(
        calls.of("eth_getBalance"),
        1,
        "the funds: {}",
        calls.summary()
    );
    assert!(
        calls.of("eth_feeHistory") <= 2,
        "the fees: {}",
        calls.summary()
    );
    assert!(
        calls.of("eth_getBlockByNumber") <= 2,
        "the clock: {}",
        calls.summary()
    );
    // The fees, stale after a second, asked for by sixteen sends at once: one `eth_feeHistory`.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let before = proxy.calls();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let chain = chain.clone();
        tasks.spawn(async move { chain.max_fee_per_gas().await.unwrap() });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let calls = proxy.calls().since(&before);
    assert_eq!(
        calls.of("eth_feeHistory"),
        1,
        "the fees: {}",
        calls.summary()
    );
}
