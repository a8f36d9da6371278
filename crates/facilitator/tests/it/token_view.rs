//! x402 `/verify` from the token's view (`crate::view`), with the node 20 ms away on a chain of
//! 2 s blocks: a payer and payee simulated once are verified without a call to the node, and
//! the view follows what others do on chain within a block: a payload someone else put on chain
//! verifies as used, a balance spent elsewhere as insufficient.

use std::{sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::SolCall,
};
use serde_json::Value;
use tollgate_chain::{TxRequest, WaitOptions, contracts::Token};
use tollgate_protocol::x402::PaymentPayload;
use tollgate_testkit::{
    Backend, Fixture,
    node_proxy::{NodeProxy, ProxyOptions},
};

use crate::support::{Harness, relayer_chain_via};

const AMOUNT: u64 = 10_000;

/// A facilitator on anvil through a proxy 20 ms away, blocks every 2 s, `confirmations = 2`.
async fn twenty_ms_away() -> (Arc<Harness>, NodeProxy) {
    tollgate_chain::install_crypto_provider();
    let fixture = Fixture::new(Backend::Anvil).await.expect("anvil");
    let proxy = NodeProxy::start(
        fixture.rpc_url().unwrap(),
        ProxyOptions {
            round_trip: Duration::from_millis(20),
            calls_per_second: None,
        },
    )
    .await
    .unwrap();
    let chain = relayer_chain_via(&fixture, proxy.url()).await;
    let h = Harness::assemble(fixture, chain, 2, None, |s| {
        s.confirmation_timeout = Duration::from_secs(60);
    })
    .await;
    h.mine_every(2).await;
    (Arc::new(h), proxy)
}

async fn verify(h: &Harness, body: &Value) -> Value {
    let (s, v) = h.post("/verify", body).await;
    assert_eq!(s, 200, "{v}");
    v
}

/// Verifies fresh payments of `payer` until one costs no `eth_call` (the view knows the pair and
/// the payer's balance), within 5 s.
async fn until_viewed(h: &Harness, proxy: &NodeProxy, payer: usize, pay_to: Address, tag: u8) {
    for i in 0..50u8 {
        let body = h
            .settle_body(
                payer,
                pay_to,
                AMOUNT,
                B256::repeat_byte(tag) ^ B256::with_last_byte(i),
            )
            .await;
        let before = proxy.calls();
        let v = verify(h, &body).await;
        assert_eq!(v["isValid"], true, "{v}");
        if proxy.calls().since(&before).of("eth_call") == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the view never answered for payer {payer}");
}

/// A payment of [`AMOUNT`] from dev account `payer` to `pay_to` (its nonce `nonce` repeated):
/// the payload, and the `/verify` body that carries it.
async fn payment(h: &Harness, payer: usize, pay_to: Address, nonce: u8) -> (PaymentPayload, Value) {
    let payload = h
        .x402_payload(payer, pay_to, AMOUNT, B256::repeat_byte(nonce))
        .await;
    let body = serde_json::json!({
        "x402Version": 1,
        "paymentPayload": payload,
        "paymentRequirements": h.requirements(pay_to, AMOUNT),
    });
    (payload, body)
}

/// The payload's own transfer, sent to the token by another account (not the facilitator).
async fn put_on_chain_by_someone_else(h: &Harness, payload: &PaymentPayload) -> u64 {
    let auth = &payload.payload.authorization;
    let call = Token::transferWithAuthorization_0Call {
        from: auth.from,
        to: auth.to,
        value: auth.value.get(),
        validAfter: auth.valid_after.get(),
        validBefore: auth.valid_before.get(),
        nonce: auth.nonce,
        signature: payload.payload.signature.clone(),
    };
    let tx = TxRequest::call(h.account(9).address, h.token(), call.abi_encode());
    let confirmation = h
        .fixture
        .chain
        .send_and_wait(tx, WaitOptions::default())
        .await
        .unwrap();
    confirmation.receipt().expect("mined").block_number
}

/// The scenario of issue 36's first point: with the node 20 ms away, every `/verify` paid a
/// round trip (an `eth_call`). Once a payer and payee were simulated, their next verifications
/// cost the node nothing, and each still answers what the simulation would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payer_simulated_once_is_verified_without_a_call_to_the_node() {
    let (h, proxy) = twenty_ms_away().await;
    let pay_to = h.account(7).address;
    until_viewed(&h, &proxy, 1, pay_to, 0x10).await;

    let before = proxy.calls();
    for i in 0..20u8 {
        let body = h
            .settle_body(1, pay_to, AMOUNT, B256::repeat_byte(0x20 + i))
            .await;
        let v = verify(&h, &body).await;
        assert_eq!(v["isValid"], true, "{v}");
    }
    let calls = proxy.calls().since(&before);
    assert_eq!(calls.of("eth_call"), 0, "{}", calls.summary());

    // What the view answers is what the token would: more than the balance is refused, another
    // payee (never simulated) is simulated, and so is a signature that is not the payer's.
    let balance: u64 = h
        .token_balance(h.account(1).address)
        .await
        .try_into()
        .unwrap();
    let before = proxy.calls();
    let body = h
        .settle_body(1, pay_to, balance + 1, B256::repeat_byte(0x40))
        .await;
    let v = verify(&h, &body).await;
    assert_eq!(v["isValid"], false, "{v}");
    assert_eq!(v["invalidReason"], "insufficient_funds", "{v}");
    assert_eq!(proxy.calls().since(&before).of("eth_call"), 0);

    let before = proxy.calls();
    let other = h
        .settle_body(1, h.account(8).address, AMOUNT, B256::repeat_byte(0x41))
        .await;
    assert_eq!(verify(&h, &other).await["isValid"], true);
    assert!(
        proxy.calls().since(&before).of("eth_call") >= 1,
        "simulated"
    );
}

/// Someone else puts a verified payload's transfer on chain themselves (it is public once
/// sent): from the block the view reads it in, the payload verifies as used, as a simulation
/// would say; a settlement of it is not answered a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_someone_else_put_on_chain_verifies_as_used_within_a_block() {
    let (h, proxy) = twenty_ms_away().await;
    let pay_to = h.account(7).address;
    until_viewed(&h, &proxy, 2, pay_to, 0x50).await;

    let (payload, body) = payment(&h, 2, pay_to, 0x60).await;
    assert_eq!(verify(&h, &body).await["isValid"], true);
    let mined = put_on_chain_by_someone_else(&h, &payload).await;
    // The block after the one it was mined in (2 s later) is more than the view's staleness.
    while h.fixture.chain.block_number().await.unwrap() <= mined {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v = verify(&h, &body).await;
    assert_eq!(v["isValid"], false, "{v}");
    assert_eq!(v["invalidReason"], "invalid_transaction_state", "{v}");
    let (_, s) = h.post("/settle", &body).await;
    assert_eq!(s["success"], false, "{s}");
}

/// A payer spends their balance elsewhere (a plain transfer, not through the facilitator): the
/// view moves the balance by the `Transfer` log, and a payment above what is left verifies as
/// insufficient funds, one within it as valid, without a call to the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balance_spent_elsewhere_is_seen_within_a_block() {
    let (h, proxy) = twenty_ms_away().await;
    let pay_to = h.account(7).address;
    let payer = h.account(3).address;
    until_viewed(&h, &proxy, 3, pay_to, 0x70).await;

    let balance = h.token_balance(payer).await;
    let keep = U256::from(3 * AMOUNT / 2);
    let spend = Token::transferCall {
        to: h.account(9).address,
        value: balance - keep,
    };
    let tx = TxRequest::call(payer, h.token(), spend.abi_encode());
    let mined = h
        .fixture
        .chain
        .send_and_wait(tx, WaitOptions::default())
        .await
        .unwrap()
        .receipt()
        .expect("mined")
        .block_number;
    while h.fixture.chain.block_number().await.unwrap() <= mined {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let before = proxy.calls();
    let within = h
        .settle_body(3, pay_to, AMOUNT, B256::repeat_byte(0x80))
        .await;
    assert_eq!(verify(&h, &within).await["isValid"], true);
    let above = h
        .settle_body(3, pay_to, 2 * AMOUNT, B256::repeat_byte(0x81))
        .await;
    let v = verify(&h, &above).await;
    assert_eq!(v["isValid"], false, "{v}");
    assert_eq!(v["invalidReason"], "insufficient_funds", "{v}");
    let calls = proxy.calls().since(&before);
    assert_eq!(calls.of("eth_call"), 0, "{}", calls.summary());
}

/// A reorg under the view (anvil's `anvil_reorg`, then a block on the new chain): the view finds
/// its block gone, starts again, follows the new chain and answers again; a payload whose
/// transfer was in the reorged blocks verifies as the new chain says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reorg_the_view_follows_the_new_chain() {
    let (h, proxy) = twenty_ms_away().await;
    let pay_to = h.account(7).address;
    until_viewed(&h, &proxy, 4, pay_to, 0x90).await;

    let (payload, body) = payment(&h, 4, pay_to, 0xa0).await;
    let mined = put_on_chain_by_someone_else(&h, &payload).await;
    while h.fixture.chain.block_number().await.unwrap() <= mined {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(verify(&h, &body).await["isValid"], false);

    // The blocks from the transfer's on replaced, and one more on top, before the view's next
    // poll: its block is gone from under a newer head.
    let depth = h.fixture.chain.block_number().await.unwrap() - mined + 1;
    h.anvil("anvil_reorg", serde_json::json!([depth, []])).await;
    h.anvil("evm_mine", serde_json::json!([])).await;
    // The view's next poll finds it (until then it answers from before, as a read at "latest"
    // just before a reorg would).
    tokio::time::sleep(Duration::from_secs(1)).await;

    until_viewed(&h, &proxy, 4, pay_to, 0xb0).await;
    let state = Token::authorizationStateCall {
        authorizer: payload.payload.authorization.from,
        nonce: payload.payload.authorization.nonce,
    };
    let used_on_chain =
        async || tollgate_chain::contracts::read(&*h.fixture.chain, h.token(), &state).await;
    let used = used_on_chain().await.unwrap();
    let v = verify(&h, &body).await;
    let used_after = used_on_chain().await.unwrap();
    assert_eq!(used, used_after, "the chain moved meanwhile");
    assert_eq!(v["isValid"], !used, "the chain says used = {used}: {v}");
}
