//! The pending window on a chain as real ones run (a block every 2 s, 2 confirmations): a
//! payment whose settlement is sent but not confirmed belongs to its payer. Once broadcast, the
//! whole authorization is public calldata; whoever rebuilds the `X-PAYMENT` from it, forges a
//! signature over the payer's nonce, or guesses a token is refused, and the payer's retry with
//! its retry token is served once.

use std::{sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, B256, Bytes, U256},
    sol_types::SolCall,
};
use serde_json::json;
use tollgate_chain::contracts::{PaymentRouter, Token};
use tollgate_protocol::{
    Amount,
    x402::{ExactEvmAuthorization, ExactEvmPayload, PaymentPayload, RetryToken},
};

use crate::support::{App, Harness, NETWORK, PAYEE, PAYER, Reply};

const PATH: &str = "/v1/quote";
const PRICE: u64 = crate::support::QUOTE_PRICE;

/// A facilitator that answers "pending" after 300 ms, on anvil with 2 s blocks and 2
/// confirmations, and a gate that holds a pending request 300 ms: the 503 comes before the
/// settlement confirms.
async fn slow_chain() -> (Harness, Arc<App>) {
    let h = Harness::on_slow_anvil(2, 2, |s| {
        s.confirmation_timeout = Duration::from_millis(300);
    })
    .await;
    let gate = h
        .gate_builder()
        .pending_hold(Duration::from_millis(300))
        .build()
        .await
        .expect("gate");
    let app = Arc::new(App::serve(&gate).await);
    (h, app)
}

/// The retry token of a 503 `SettlementPending`.
fn token_of(r: &Reply) -> String {
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "SettlementPending", "{}", r.body);
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(r.headers["cache-control"], "no-store");
    let token = r.headers["x-payment-retry"].to_str().unwrap().to_owned();
    token.parse::<RetryToken>().expect("a retry token");
    token
}

/// What an observer of the chain sees: the x402 payment carried by the settlement transaction
/// (a router batch or the token's own call) in the node's pending or latest block, rebuilt as
/// an `X-PAYMENT` from its calldata alone.
async fn rebuild_from_chain(h: &Harness, payer: Address) -> String {
    for _ in 0..100 {
        for block in ["pending", "latest"] {
            let b = h.rpc("eth_getBlockByNumber", json!([block, true])).await;
            for tx in b["transactions"].as_array().into_iter().flatten() {
                let input: Bytes = tx["input"].as_str().unwrap().parse().unwrap();
                if let Some(p) = decode(&input, payer) {
                    return p.encode_header();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no settlement transaction seen on the chain");
}

fn decode(input: &[u8], payer: Address) -> Option<PaymentPayload> {
    let transfers = if let Ok(call) = PaymentRouter::settleTransfersCall::abi_decode(input) {
        call.transfers
    } else if let Ok(c) = Token::transferWithAuthorization_0Call::abi_decode(input) {
        vec![PaymentRouter::Transfer {
            from: c.from,
            to: c.to,
            value: c.value,
            validAfter: c.validAfter,
            validBefore: c.validBefore,
            nonce: c.nonce,
            signature: c.signature,
        }]
    } else {
        return None;
    };
    let t = transfers.into_iter().find(|t| t.from == payer)?;
    Some(PaymentPayload {
        x402_version: 1,
        scheme: "exact".into(),
        network: NETWORK.parse().unwrap(),
        payload: ExactEvmPayload {
            signature: t.signature,
            authorization: ExactEvmAuthorization {
                from: t.from,
                to: t.to,
                value: Amount(t.value),
                valid_after: Amount(t.validAfter),
                valid_before: Amount(t.validBefore),
                nonce: t.nonce,
            },
        },
    })
}

/// Retries `header` with `token` until the answer is not 503 pending (the chain confirms within
/// a few blocks).
async fn retry_until_settled(app: &App, header: &str, token: &str) -> Reply {
    for _ in 0..60 {
        let r = app.pay_retrying(PATH, header, token).await;
        if r.status != 503 {
            return r;
        }
        assert_eq!(
            r.headers["x-payment-retry"].to_str().unwrap(),
            token,
            "the hold keeps its token"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("still pending after 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_observer_cannot_take_a_pending_payment_and_its_payer_is_served_once() {
    let (h, app) = slow_chain().await;
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));
    let before = (h.token_balance(payer).await, h.token_balance(payee).await);
    let payment = h
        .x402_payload(PAYER, payee, PRICE, B256::repeat_byte(0x51))
        .await;
    let header = payment.encode_header();

    // The payer, as a generic x402 client does: no token of its own. Held, then 503 with one.
    let token = token_of(&app.pay(PATH, &header).await);
    assert_eq!(app.hits(), 0);

    // The observer rebuilds the payment from the broadcast transaction: the same payment.
    let rebuilt = rebuild_from_chain(&h, payer).await;
    let decoded = PaymentPayload::decode_header(&rebuilt).unwrap();
    assert_eq!(decoded, payment, "the calldata is the whole payment");
    let refused = |r: Reply, who: &str| {
        assert_eq!(r.status, 402, "{who}: {}", r.body);
        assert_eq!(
            r.body["reason"], "duplicate_settlement",
            "{who}: {}",
            r.body
        );
    };
    refused(app.pay(PATH, &rebuilt).await, "the observer, no token");
    let guessed = RetryToken::random().to_string();
    refused(
        app.pay_retrying(PATH, &rebuilt, &guessed).await,
        "the observer, a guessed token",
    );
    refused(
        app.pay_retrying(PATH, &rebuilt, "not-a-token").await,
        "the observer, a malformed token",
    );
    // A forged signature over the payer's nonce, with and without the payer's token: refused,
    // and the payer's hold survives it.
    let mut forged = payment.clone();
    let mut sig = forged.payload.signature.to_vec();
    sig[10] ^= 0xff;
    forged.payload.signature = sig.into();
    let forged = forged.encode_header();
    refused(app.pay(PATH, &forged).await, "a forged signature");
    refused(
        app.pay_retrying(PATH, &forged, &token).await,
        "a forged signature with the payer's token",
    );
    assert_eq!(app.hits(), 0, "nobody served while pending");

    // The payer's retry with its token, several at once: served exactly once.
    let served = retry_until_settled(&app, &header, &token).await;
    assert_eq!(served.status, 200, "{}", served.body);
    assert_eq!(app.hits(), 1);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (app, header, token) = (Arc::clone(&app), header.clone(), token.clone());
            tokio::spawn(async move { app.pay_retrying(PATH, &header, &token).await })
        })
        .collect();
    for t in tasks {
        refused(t.await.unwrap(), "the payer's token after it was served");
    }
    // After: the observer still gets nothing.
    refused(app.pay(PATH, &rebuilt).await, "the observer, after");
    assert_eq!(app.hits(), 1);
    assert_eq!(
        h.token_balance(payer).await,
        before.0 - U256::from(PRICE),
        "the payer paid once"
    );
    assert_eq!(
        h.token_balance(payee).await,
        before.1 + U256::from(PRICE),
        "the payee was paid once"
    );
}

/// A Tollgate client chooses its token and sends it with the payment, so that an answer lost
/// while the gate holds the request loses nothing: its retry with the token is served once, the
/// first request (still held) is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_after_a_lost_answer_is_served_once_by_the_token_the_client_chose() {
    let h = Harness::on_slow_anvil(2, 2, |s| {
        s.confirmation_timeout = Duration::from_millis(300);
    })
    .await;
    // A hold longer than the chain takes: the first request would be served, if its client
    // were still there.
    let gate = h
        .gate_builder()
        .pending_hold(Duration::from_secs(20))
        .build()
        .await
        .expect("gate");
    let app = App::serve(&gate).await;
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));
    let before = (h.token_balance(payer).await, h.token_balance(payee).await);
    let header = h
        .x402_payload(PAYER, payee, PRICE, B256::repeat_byte(0x52))
        .await
        .encode_header();
    let token = RetryToken::random().to_string();

    // The first request's answer is lost: its client gives up after 1 s.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let lost = impatient
        .get(format!("{}{PATH}", app.url))
        .header("x-payment", &header)
        .header("x-payment-retry", &token)
        .send()
        .await;
    assert!(lost.is_err(), "the first answer is lost: {lost:?}");
    // Observers are refused meanwhile.
    let observer = app.pay(PATH, &header).await;
    assert_eq!(observer.status, 402, "{}", observer.body);

    let served = retry_until_settled(&app, &header, &token).await;
    assert_eq!(served.status, 200, "{}", served.body);
    // The first request ends without serving (it finds the hold taken by the retry), so the
    // handler ran once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(app.hits(), 1);
    assert_eq!(h.token_balance(payer).await, before.0 - U256::from(PRICE));
    assert_eq!(h.token_balance(payee).await, before.1 + U256::from(PRICE));
}

/// A generic x402 client (no token) on a chain that confirms within the gate's hold: its one
/// request is held open and served; nothing changes for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_generic_client_is_served_within_the_hold() {
    let h = Harness::on_slow_anvil(2, 2, |s| {
        s.confirmation_timeout = Duration::from_millis(300);
    })
    .await;
    let gate = h.gate().await; // the default hold
    let app = App::serve(&gate).await;
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));
    let before = h.token_balance(payer).await;
    let header = h
        .x402_payload(PAYER, payee, PRICE, B256::repeat_byte(0x53))
        .await
        .encode_header();
    let r = app.pay(PATH, &header).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(app.hits(), 1);
    assert_eq!(h.token_balance(payer).await, before - U256::from(PRICE));
    let again = app.pay(PATH, &header).await;
    assert_eq!(again.status, 402);
    assert_eq!(again.body["reason"], "duplicate_settlement");
}
