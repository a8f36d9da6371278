//! A payment whose settlement is pending, on a chain as real ones run (a block every 2 s, 2
//! confirmations): the agent resends the same payment with its retry token until it is served,
//! never pays again, and never reports "paid" for a payment nothing shows moved.

use std::time::Duration;

use tollgate_agent::{Amount, Error, PayRequest, PaymentKind};
use tollgate_chain::U256;

use crate::support::{Harness, NETWORK, PAYEE, PAYER, PRICE, policy};

/// An agent that pays the gate's x402 entry as a generic client would (it trusts no
/// facilitator), so that the gate settles it, with this settle timeout.
fn x402_agent(h: &Harness, settle_timeout: Duration) -> tollgate_agent::Agent {
    h.agent_builder(PAYER, policy(1_000_000, 2_000_000))
        .facilitators(Vec::<String>::new())
        .network(NETWORK, h.chain_id())
        .settle_timeout(settle_timeout)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_payment_is_resent_with_its_token_and_paid_once() {
    let h = Harness::on_slow_anvil(2, 2).await;
    // The gate answers 503 pending after 300 ms: the agent must come back for the outcome.
    let app = h.gated_app_holding(Duration::from_millis(300)).await;
    let agent = x402_agent(&h, Duration::from_secs(60));
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));
    let before = (h.balance(payer).await, h.balance(payee).await);

    let r = agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let p = r.payment.expect("the payment");
    assert_eq!(p.kind, PaymentKind::X402);
    assert!(p.retry_token.is_some());
    assert!(p.settlement.as_ref().is_some_and(|s| s.success));
    assert!(p.tx_hash.is_some());
    assert!(r.earlier_payments.is_empty(), "one payment");
    assert_eq!(app.hits(), 1);
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
    assert_eq!(h.balance(payer).await, before.0 - U256::from(PRICE));
    assert_eq!(h.balance(payee).await, before.1 + U256::from(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_still_pending_at_the_settle_timeout_is_a_typed_error_and_never_paid_again() {
    let h = Harness::on_slow_anvil(2, 2).await;
    let app = h.gated_app_holding(Duration::from_millis(300)).await;
    // Shorter than 2 confirmations of 2 s blocks.
    let agent = x402_agent(&h, Duration::from_secs(1));
    let payer = h.address(PAYER);
    let before = h.balance(payer).await;

    let e = agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
        .unwrap_err();
    let Error::SettlementPending { payments, .. } = &e else {
        panic!("expected SettlementPending, got {e:?}");
    };
    assert_eq!(payments.len(), 1, "one payment, sent once");
    assert!(payments[0].retry_token.is_some());
    assert_eq!(app.hits(), 0, "not served");
    // The payment settles on its own, once; nothing else moves.
    for _ in 0..40 {
        if h.balance(payer).await != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(h.balance(payer).await, before - U256::from(PRICE));
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_the_server_could_not_settle_is_never_reported_paid() {
    let mut h = Harness::new().await;
    let app = h.gated_app().await;
    let agent = x402_agent(&h, Duration::from_secs(5));
    let payer = h.address(PAYER);
    let before = h.balance(payer).await;
    // The gate's facilitator is gone: the gate answers 503 FacilitatorUnavailable to the paid
    // request (its 402 needs no facilitator).
    h.stop_facilitator().await;

    let e = agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
        .unwrap_err();
    let Error::NotServed {
        status,
        code,
        payments,
    } = &e
    else {
        panic!("expected NotServed, got {e:?}");
    };
    assert_eq!(*status, 503);
    assert_eq!(code.as_deref(), Some("FacilitatorUnavailable"));
    assert_eq!(payments.len(), 1);
    assert!(payments[0].tx_hash.is_none());
    assert_eq!(app.hits(), 0);
    assert_eq!(h.balance(payer).await, before, "nothing moved");
}
