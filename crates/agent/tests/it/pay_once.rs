//! One request, one payment: a proof corrupted on its way to the gate is recovered from the
//! facilitator and sent again, never paid a second time; a gate that keeps declining it gets a
//! report, not another payment.

use tollgate_agent::{Amount, Error, PayRequest, PaymentKind};
use tollgate_chain::U256;

use crate::support::{CorruptingProxy, FEE, Harness, NETWORK, PAYEE, PAYER, PRICE, policy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_proof_is_recovered_and_resent_never_paid_twice() {
    let h = Harness::new().await;
    let app = h.gated_app().await;
    let proxy = CorruptingProxy::new(&app.url).await;
    // Room for two payments: only the agent's rule keeps it at one.
    let agent = h.agent(policy(1_000_000, 1_000_000));
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));
    let (payer0, payee0) = (h.balance(payer).await, h.balance(payee).await);

    let r = agent
        .pay(PayRequest::get(&proxy.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.json::<serde_json::Value>().unwrap()["quote"], 42);
    // The payer was charged exactly once: the price, nothing else.
    assert_eq!(h.balance(payer).await, payer0 - U256::from(PRICE));
    assert_eq!(h.balance(payee).await, payee0 + U256::from(PRICE - FEE));
    assert_eq!(app.hits(), 1);
    assert_eq!(agent.spent(), Amount::from_units(PRICE));

    // And reported so: one payment, whose proof was sent twice.
    let p = r.payment.clone().expect("a receipt");
    assert_eq!(p.kind, PaymentKind::Tollgate);
    assert_eq!(p.amount, Amount::from_units(PRICE));
    assert!(r.earlier_payments.is_empty(), "{:?}", r.earlier_payments);
    assert_eq!(r.payments().count(), 1);
    let seen = proxy.seen();
    assert_eq!(seen.len(), 2, "the paid request, then one resend");
    assert_eq!(
        seen[1], seen[0],
        "the resend carries the proof of the payment made"
    );
    assert_eq!(seen[1], p.header);
    // The proof was recovered from the facilitator's status URL (with the claim's token: the
    // URL answers 403 without it) before it was sent again.
    let metrics = reqwest::get(format!("{}/metrics", h.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let status_answers: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("tollgate_http_responses_total")
                && l.contains(r#"route="/settlements/{key}""#)
                && !l.ends_with(" 0")
        })
        .collect();
    assert_eq!(status_answers.len(), 1, "{status_answers:?}");
    assert!(
        status_answers[0].contains(r#"class="2xx""#) && status_answers[0].ends_with(" 1"),
        "{status_answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_x402_payment_is_resent_never_signed_twice() {
    // The generic path: the agent trusts no facilitator, signs an x402 payload to payTo, and
    // the gate settles it. The resend is the same signed authorization, which the token takes
    // at most once.
    let h = Harness::new().await;
    let app = h.gated_app().await;
    let proxy = CorruptingProxy::new(&app.url).await;
    let agent = h
        .agent_builder(PAYER, policy(1_000_000, 1_000_000))
        .facilitators(Vec::<String>::new())
        .network(NETWORK, h.chain_id())
        .build()
        .unwrap();
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));
    let (payer0, payee0) = (h.balance(payer).await, h.balance(payee).await);

    let r = agent
        .pay(PayRequest::get(&proxy.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let p = r.payment.clone().expect("a receipt");
    assert_eq!(p.kind, PaymentKind::X402);
    assert!(r.earlier_payments.is_empty(), "{:?}", r.earlier_payments);
    let seen = proxy.seen();
    assert_eq!(seen.len(), 2, "the paid request, then one resend");
    assert_eq!(
        seen[1], seen[0],
        "the resend carries the same signed payment"
    );
    assert_eq!(h.balance(payer).await, payer0 - U256::from(PRICE));
    assert_eq!(h.balance(payee).await, payee0 + U256::from(PRICE));
    assert_eq!(app.hits(), 1);
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_the_facilitator_reports_failed_is_paid_again_only_within_the_policy() {
    // The one case for a second payment: the server declined the proof and the facilitator's
    // status URL reports the settlement failed. (This facilitator front reports so falsely, so
    // both payments really settle: the agent must report both.)
    let h = Harness::new().await;
    let facilitator = CorruptingProxy::failing_status(&h.url).await;
    let app = h.gated_app_via(&facilitator.url).await;
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));

    // Room for two: paid again with the fresh terms, and both payments reported.
    let proxy = CorruptingProxy::new(&app.url).await;
    let agent = h.agent(policy(1_000_000, 2 * PRICE));
    let payer0 = h.balance(payer).await;
    let r = agent
        .pay(PayRequest::get(&proxy.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let payments: Vec<_> = r.payments().collect();
    assert_eq!(payments.len(), 2, "every payment is reported: {payments:?}");
    assert_ne!(payments[0].memo, payments[1].memo, "the fresh terms");
    assert_ne!(payments[0].tx_hash, payments[1].tx_hash);
    assert_eq!(h.balance(payer).await, payer0 - U256::from(2 * PRICE));
    assert_eq!(agent.spent(), Amount::from_units(2 * PRICE));

    // Room for one: the policy refuses the second payment; the first is reported.
    let proxy = CorruptingProxy::new(&app.url).await;
    let agent = h.agent(policy(1_000_000, PRICE));
    let (payer0, payee0) = (h.balance(payer).await, h.balance(payee).await);
    match agent
        .pay(PayRequest::get(&proxy.url("/v1/quote")).unwrap())
        .await
    {
        Err(Error::InvalidPaymentProof { payments }) => {
            assert_eq!(payments.len(), 1);
            assert!(payments[0].tx_hash.is_some());
        }
        other => panic!("expected InvalidPaymentProof, got {other:?}"),
    }
    assert_eq!(h.balance(payer).await, payer0 - U256::from(PRICE));
    assert_eq!(h.balance(payee).await, payee0 + U256::from(PRICE - FEE));
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
    assert_eq!(
        app.hits(),
        1,
        "only the first agent's second payment bought the resource"
    );
}
