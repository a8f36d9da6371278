//! Hostile servers: garbage 402s, 402s forever, redirect loops, servers that take the payment and
//! fail, servers that never answer. Every case ends in a typed error or a reported answer, with at
//! most the allowed payments.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    Router,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::get,
};
use serde_json::{Value, json};
use tollgate_agent::{Amount, Error, Malformed, PayRequest};
use tollgate_chain::{B256, U256};
use tollgate_gate::Pricing;

use crate::support::{App, FEE, Harness, NETWORK, PAYEE, PRICE, SHORT, policy};

/// A server answering every request on `/r` with `reply`, counting requests that carry
/// `X-PAYMENT`.
async fn serve(reply: impl Fn() -> (StatusCode, String) + Clone + Send + Sync + 'static) -> App {
    let paid = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&paid);
    let app = Router::new().route(
        "/r",
        get(move |headers: HeaderMap| {
            let reply = reply.clone();
            let paid = Arc::clone(&counted);
            async move {
                if headers.contains_key("x-payment") {
                    paid.fetch_add(1, Ordering::SeqCst);
                }
                let (status, body) = reply();
                (status, [("content-type", "application/json")], body).into_response()
            }
        }),
    );
    App::serve(app, paid).await
}

/// A valid Tollgate 402 (real facilitator, real payee, a fresh memo) with this `error`.
fn superset(h: &Harness, error: &str) -> Value {
    let token = h.token();
    json!({
        "version": "1", "x402Version": 1, "error": error,
        "accepts": [{
            "scheme": "exact", "network": NETWORK, "maxAmountRequired": PRICE.to_string(),
            "resource": "http://127.0.0.1/r", "description": "", "mimeType": "",
            "payTo": h.address(PAYEE), "maxTimeoutSeconds": 60, "asset": token,
            "extra": { "name": "USD Coin", "version": "2" },
            "token": token, "amount": PRICE.to_string(), "memo": B256::random(),
            "service": { "subscriptionScheme": false, "facilitator": h.url },
        }]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_402s_are_typed_errors_and_cost_nothing() {
    let h = Harness::new().await;
    let agent = h.agent(policy(1_000_000, 1_000_000));
    let huge = serve(|| {
        let pad = "x".repeat(1024 * 1024);
        (
            StatusCode::PAYMENT_REQUIRED,
            format!(r#"{{"x402Version":1,"pad":"{pad}","accepts":[]}}"#),
        )
    })
    .await;
    let garbage = serve(|| {
        (
            StatusCode::PAYMENT_REQUIRED,
            "{\"x402Version\": 1, \"acc".into(),
        )
    })
    .await;
    let v2 = serve(|| {
        (
            StatusCode::PAYMENT_REQUIRED,
            r#"{"x402Version":2,"accepts":[]}"#.into(),
        )
    })
    .await;
    let nothing = serve(|| {
        (
            StatusCode::PAYMENT_REQUIRED,
            r#"{"x402Version":1,"accepts":[{"scheme":"subscription"},{"scheme":"upto","network":"base"}]}"#.into(),
        )
    })
    .await;

    let pay = |app: &App| agent.pay(PayRequest::get(&app.url("/r")).unwrap());
    assert!(matches!(
        pay(&huge).await,
        Err(Error::MalformedPaymentRequired(Malformed::TooLarge {
            limit: 65536
        }))
    ));
    assert!(matches!(
        pay(&garbage).await,
        Err(Error::MalformedPaymentRequired(Malformed::Json(_)))
    ));
    assert!(matches!(
        pay(&v2).await,
        Err(Error::UnsupportedVersion { .. })
    ));
    assert!(matches!(
        pay(&nothing).await,
        Err(Error::NoAcceptableOption { offered: 2 })
    ));
    for app in [&huge, &garbage, &v2, &nothing] {
        assert_eq!(app.hits(), 0, "no payment was sent");
    }
    assert_eq!(agent.spent(), Amount::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_402_forever_gets_one_payment() {
    let h = Harness::new().await;
    let agent = h.agent(policy(1_000_000, 10_000_000));
    let payee0 = h.balance(h.address(PAYEE)).await;
    let body = superset(&h, "X-PAYMENT header is required");
    let forever = serve(move || {
        let mut b = body.clone();
        b["accepts"][0]["memo"] = json!(B256::random());
        (StatusCode::PAYMENT_REQUIRED, b.to_string())
    })
    .await;
    match agent
        .pay(PayRequest::get(&forever.url("/r")).unwrap())
        .await
    {
        Err(Error::PaymentRejected { reason, payments }) => {
            assert_eq!(reason, "X-PAYMENT header is required");
            assert_eq!(payments.len(), 1);
            assert!(payments[0].tx_hash.is_some(), "the facilitator settled it");
        }
        other => panic!("expected PaymentRejected, got {other:?}"),
    }
    assert_eq!(forever.hits(), 1);
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee0 + U256::from(PRICE - FEE)
    );
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_payment_proof_forever_gets_one_payment_and_its_proof_resent_once() {
    // The automatic retry recovers the proof of the payment made and sends it again; a server
    // that declines it again gets a report, never a second payment.
    let h = Harness::new().await;
    let agent = h.agent(policy(1_000_000, 10_000_000));
    let payee0 = h.balance(h.address(PAYEE)).await;
    let body = superset(&h, "InvalidPaymentProof");
    let forever = serve(move || {
        let mut b = body.clone();
        b["accepts"][0]["memo"] = json!(B256::random());
        (StatusCode::PAYMENT_REQUIRED, b.to_string())
    })
    .await;
    match agent
        .pay(PayRequest::get(&forever.url("/r")).unwrap())
        .await
    {
        Err(Error::InvalidPaymentProof { payments }) => {
            assert_eq!(payments.len(), 1, "one payment");
            assert!(payments[0].tx_hash.is_some(), "the facilitator settled it");
        }
        other => panic!("expected InvalidPaymentProof, got {other:?}"),
    }
    assert_eq!(
        forever.hits(),
        2,
        "the paid request and one resend, no more"
    );
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee0 + U256::from(PRICE - FEE)
    );
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_facilitator_that_redirects_the_money_is_not_trusted_when_listed() {
    // The 402 names a "facilitator" the agent does not trust: with an allow-list of
    // facilitators, the agent pays that entry as plain x402 to payTo instead of signing to
    // whatever router the stranger publishes.
    let h = Harness::new().await;
    let agent = h
        .agent_builder(crate::support::PAYER, policy(1_000_000, 1_000_000))
        .facilitators(["https://facilitator.example"])
        .network(NETWORK, h.chain_id())
        .request_timeout(SHORT)
        .build()
        .unwrap();
    let body = superset(&h, "X-PAYMENT header is required");
    let app = serve(move || (StatusCode::PAYMENT_REQUIRED, body.to_string())).await;
    match agent.pay(PayRequest::get(&app.url("/r")).unwrap()).await {
        Err(Error::PaymentRejected { payments, .. }) => {
            assert_eq!(payments.len(), 1);
            assert_eq!(payments[0].kind, tollgate_agent::PaymentKind::X402);
            assert_eq!(payments[0].pay_to, h.address(PAYEE));
        }
        other => panic!("expected PaymentRejected, got {other:?}"),
    }
    assert_eq!(app.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_times_out() {
    let h = Harness::new().await;
    let agent = h
        .agent_builder(crate::support::PAYER, policy(1_000_000, 1_000_000))
        .request_timeout(SHORT)
        .build()
        .unwrap();
    let app = Router::new().route(
        "/r",
        get(|| async {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            "late"
        }),
    );
    let app = App::serve(app, Arc::default()).await;
    match agent.pay(PayRequest::get(&app.url("/r")).unwrap()).await {
        Err(Error::Http(e)) => assert!(e.is_timeout(), "{e}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // And a server that is not there at all.
    match agent
        .pay(PayRequest::get("http://127.0.0.1:9/r").unwrap())
        .await
    {
        Err(Error::Http(e)) => assert!(e.is_connect(), "{e}"),
        other => panic!("expected a connect error, got {other:?}"),
    }
    assert_eq!(agent.spent(), Amount::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_reported_not_followed_and_never_paid_twice() {
    let h = Harness::new().await;
    let agent = h.agent(policy(1_000_000, 10_000_000));
    let payee0 = h.balance(h.address(PAYEE)).await;
    let body = superset(&h, "X-PAYMENT header is required");
    let paid = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&paid);
    let app = Router::new()
        // A redirect loop before any payment.
        .route(
            "/loop",
            get(|| async { (StatusCode::FOUND, [("location", "/loop")]) }),
        )
        // A redirect to a priced resource: following it would pay a server the caller never
        // named.
        .route(
            "/elsewhere",
            get(|| async { (StatusCode::TEMPORARY_REDIRECT, [("location", "/r")]) }),
        )
        // Payment asked, then the paid retry redirected back to itself.
        .route(
            "/r",
            get(move |headers: HeaderMap| {
                let body = body.clone();
                let paid = Arc::clone(&counted);
                async move {
                    if headers.contains_key("x-payment") {
                        paid.fetch_add(1, Ordering::SeqCst);
                        (StatusCode::FOUND, [("location", "/r")], String::new())
                    } else {
                        let mut b = body.clone();
                        b["accepts"][0]["memo"] = json!(B256::random());
                        (
                            StatusCode::PAYMENT_REQUIRED,
                            [("content-type", "application/json")],
                            b.to_string(),
                        )
                    }
                }
            }),
        );
    let app = App::serve(app, paid).await;

    for path in ["/loop", "/elsewhere"] {
        let answer = agent.pay(PayRequest::get(&app.url(path)).unwrap()).await;
        let answer = answer.unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(answer.status.is_redirection(), "{path}: {}", answer.status);
        assert!(answer.payment.is_none(), "{path}");
    }
    assert_eq!(app.hits(), 0);
    assert_eq!(agent.spent(), Amount::ZERO);

    let answer = agent
        .pay(PayRequest::get(&app.url("/r")).unwrap())
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::FOUND);
    let payment = answer
        .payment
        .expect("the redirect is reported with what was paid");
    assert!(payment.tx_hash.is_some());
    assert_eq!(app.hits(), 1, "the redirect after payment was not followed");
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee0 + U256::from(PRICE - FEE),
        "paid exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_takes_the_payment_and_fails_is_reported_with_the_receipt() {
    // A real gate in front of a handler that fails: the gate spends the memo before the handler
    // runs (x402 has no refunds), so the agent must hand back the 500 together with what it
    // paid, and must not pay again on its own.
    let h = Harness::new().await;
    let agent = h.agent(policy(1_000_000, 10_000_000));
    let payee0 = h.balance(h.address(PAYEE)).await;
    let gate = h.gate().await;
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = Router::new()
        .route(
            "/r",
            get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded") }
            }),
        )
        .route_layer(gate.payment_gate([Pricing::one_time(PRICE)]));
    let app = App::serve(app, hits).await;

    let answer = agent
        .pay(PayRequest::get(&app.url("/r")).unwrap())
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(&answer.body[..], b"upstream exploded");
    let payment = answer
        .payment
        .expect("the failure is reported with its receipt");
    assert_eq!(payment.kind, tollgate_agent::PaymentKind::Tollgate);
    assert!(payment.tx_hash.is_some());
    assert_eq!(payment.pay_to, h.address(PAYEE));
    assert_eq!(app.hits(), 1, "one paid attempt, no automatic retry");
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee0 + U256::from(PRICE - FEE)
    );
}
