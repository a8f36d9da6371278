//! One-time payments with Tollgate proofs: the spec's one-time flow and every way a proof can be
//! wrong.

use std::time::{Duration, Instant};

use alloy::primitives::{B256, Bytes};
use serde_json::Value;
use tollgate_gate::{PAYMENT_REQUIRED_REASON, UNSUPPORTED_VERSION_REASON, X_PAYMENT_RESPONSE};
use tollgate_protocol::{
    PaymentProof,
    x402::{PaymentRequiredResponse, SettlementResponseHeader},
};

use crate::support::{
    App, Harness, NETWORK, OTHER_NETWORK, PAYEE, PAYER, PREMIUM_PRICE, PROOF_KEY, QUOTE_PRICE,
};

fn assert_invalid(r: &crate::support::Reply, reason: &str) {
    assert_eq!(r.status, 402, "{}", r.body);
    assert_eq!(r.body["error"], "InvalidPaymentProof", "{}", r.body);
    assert_eq!(r.body["reason"], reason, "{}", r.body);
    assert!(
        r.body["accepts"][0]["memo"].is_string(),
        "fresh terms: {}",
        r.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpaid_gets_the_superset_402_then_pays_once() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;

    // Ungated routes are untouched; unknown paths still 404.
    assert_eq!(app.get("/free", &[]).await.status, 200);
    assert_eq!(app.get("/nope", &[]).await.status, 404);

    let r = app.get("/v1/quote", &[]).await;
    assert_eq!(r.status, 402);
    assert_eq!(r.headers["content-type"], "application/json");
    let text = r.body.to_string();
    assert!(!text.contains("null"), "{text}");
    assert_eq!(r.body["version"], "1");
    assert_eq!(r.body["x402Version"], 1);
    assert_eq!(r.body["error"], PAYMENT_REQUIRED_REASON);
    assert_eq!(r.body["error"], "PaymentRequired");
    assert_eq!(r.body["reason"], "payment_required");
    let message = r.body["message"].as_str().unwrap();
    assert!(
        message.contains("X-PAYMENT") && message.contains("PAYMENT-SIGNATURE"),
        "{message}"
    );
    let x: PaymentRequiredResponse = serde_json::from_value(r.body.clone()).unwrap();
    for e in &x.accepts {
        e.check_x402_v1_compatible().unwrap();
    }
    let e = &r.body["accepts"][0];
    assert_eq!(e["scheme"], "exact");
    assert_eq!(e["network"], NETWORK);
    assert_eq!(e["amount"], QUOTE_PRICE.to_string());
    assert_eq!(e["maxAmountRequired"], QUOTE_PRICE.to_string());
    assert_eq!(e["token"], e["asset"]);
    assert_eq!(e["payTo"], h.address(PAYEE).to_checksum(None));
    assert!(
        e["resource"].as_str().unwrap().ends_with("/v1/quote"),
        "{e}"
    );
    assert!(
        e["resource"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:"),
        "{e}"
    );
    assert_eq!(e["description"], "a quote");
    assert_eq!(e["mimeType"], "application/json");
    assert_eq!(e["maxTimeoutSeconds"], 300);
    assert_eq!(
        e["extra"],
        serde_json::json!({"name": "USD Coin", "version": "2"})
    );
    assert_eq!(e["service"]["subscriptionScheme"], false);
    assert_eq!(e["service"]["facilitator"], h.url);
    assert_eq!(app.hits(), 0);

    let payee_before = h.token_balance(h.address(PAYEE)).await;
    let (proof, payment) = h.pay_402(&r.body).await;
    let ok = app.pay("/v1/quote", &proof).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.body["quote"], 42);
    assert_eq!(app.hits(), 1);
    let settled =
        SettlementResponseHeader::decode(ok.headers[X_PAYMENT_RESPONSE].to_str().unwrap()).unwrap();
    assert!(settled.success);
    assert_eq!(settled.transaction, payment.tx_hash.to_string());
    assert_eq!(settled.network, NETWORK);
    assert_eq!(settled.payer, Some(h.address(PAYER)));
    // The payee got the price less the facilitator's fee.
    let received = h.token_balance(h.address(PAYEE)).await - payee_before;
    assert_eq!(received, alloy::primitives::U256::from(QUOTE_PRICE - 1_000));

    // Replayed sequentially: refused with fresh terms, the handler not reached.
    let again = app.pay("/v1/quote", &proof).await;
    assert_invalid(&again, "replayed");
    assert_eq!(app.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_copies_of_one_proof_pass_once() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = std::sync::Arc::new(App::serve(&gate).await);
    let r = app.get("/v1/quote", &[]).await;
    let (proof, _) = h.pay_402(&r.body).await;
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let app = std::sync::Arc::clone(&app);
            let proof = proof.clone();
            tokio::spawn(async move { app.pay("/v1/quote", &proof).await.status })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 402).count(),
        49,
        "{statuses:?}"
    );
    assert_eq!(app.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proofs_for_something_else_are_refused() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    let memo = |b: &Value| -> B256 { b["accepts"][0]["memo"].as_str().unwrap().parse().unwrap() };
    let payee = h.address(PAYEE);
    // Each payment commits to its memo (the router nonce): every case gets fresh terms.
    let fresh = |path: &'static str| {
        let app = &app;
        async move { memo(&app.get(path, &[]).await.body) }
    };

    // Bought for /v1/quote, presented at /premium (another resource and price): the premium
    // price paid in full, but the memo is /v1/quote's.
    let (p, _) = h
        .authorize(NETWORK, payee, PREMIUM_PRICE, fresh("/v1/quote").await)
        .await;
    assert_invalid(&app.pay("/premium", &p).await, "memo_forged_or_foreign");

    // The premium memo, paid at the quote price: underpaid.
    let (p, _) = h
        .authorize(NETWORK, payee, QUOTE_PRICE, fresh("/premium").await)
        .await;
    assert_invalid(&app.pay("/premium", &p).await, "underpaid");

    // Another payee.
    let (p, _) = h
        .authorize(NETWORK, h.address(6), QUOTE_PRICE, fresh("/v1/quote").await)
        .await;
    assert_invalid(&app.pay("/v1/quote", &p).await, "wrong_payee");

    // Another network (the facilitator serves two on this chain).
    let (p, _) = h
        .authorize(OTHER_NETWORK, payee, QUOTE_PRICE, fresh("/v1/quote").await)
        .await;
    assert_invalid(&app.pay("/v1/quote", &p).await, "wrong_network");

    // The memo binds the method too: a proof for a GET memo presented with another method is
    // not routed here (axum answers 405 before the gate), so check it on the gate directly.
    let (p, proof) = h
        .authorize(NETWORK, payee, QUOTE_PRICE, fresh("/v1/quote").await)
        .await;
    let head = tollgate_gate::Expected {
        method: "POST",
        resource: "/v1/quote",
        price: tollgate_protocol::Amount::from_units(QUOTE_PRICE),
    };
    let e = gate.verify_payment_proof(&proof, &head).await.unwrap_err();
    assert_eq!(e.code(), "memo_forged_or_foreign");

    // A memo this gate never issued (another gate's secret).
    let other_gate = h.gate().await;
    let other_app = App::serve(&other_gate).await;
    assert_invalid(
        &other_app.pay("/v1/quote", &p).await,
        "memo_forged_or_foreign",
    );
    assert_eq!(other_app.hits(), 0);

    // The right proof still works after all that (nothing spent its memo).
    let ok = app.pay("/v1/quote", &p).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(app.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_foreign_signatures_are_refused() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    let r = app.get("/v1/quote", &[]).await;
    let (_, proof) = h.pay_402(&r.body).await;

    // A field changed after signing.
    let mut tampered = proof.clone();
    tampered.amount = tollgate_protocol::Amount::from_units(QUOTE_PRICE * 10);
    assert_invalid(
        &app.pay("/v1/quote", &tampered.encode()).await,
        "bad_signature",
    );
    // A garbage signature.
    let mut garbage = proof.clone();
    garbage.signature = Bytes::from(vec![7u8; 65]);
    assert_invalid(
        &app.pay("/v1/quote", &garbage.encode()).await,
        "bad_signature",
    );
    // Validly signed, by a key the facilitator does not publish.
    let mut foreign: PaymentProof = proof.clone();
    tollgate_chain::proof::sign(&h.fixture.accounts[3].signer(), &mut foreign).unwrap();
    assert_invalid(
        &app.pay("/v1/quote", &foreign.encode()).await,
        "unknown_signer",
    );
    // An expired proof, re-signed by the facilitator's own key (only the expiry is wrong).
    let mut expired = proof.clone();
    expired.expiry = expired.issued_at;
    tollgate_chain::proof::sign(&h.fixture.accounts[PROOF_KEY].signer(), &mut expired).unwrap();
    assert_invalid(
        &app.pay("/v1/quote", &expired.encode()).await,
        "proof_expired",
    );
    assert_eq!(app.hits(), 0);
    // The genuine one passes.
    assert_eq!(app.pay("/v1/quote", &proof.encode()).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_memo_is_refused() {
    let h = Harness::new().await;
    let gate = h
        .gate_builder()
        .memo_ttl(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let app = App::serve(&gate).await;
    let r = app.get("/v1/quote", &[]).await;
    assert_eq!(r.body["accepts"][0]["maxTimeoutSeconds"], 1);
    let (proof, _) = h.pay_402(&r.body).await;
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    assert_invalid(&app.pay("/v1/quote", &proof).await, "memo_expired");
    assert_eq!(app.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_headers_are_refused_with_a_reason() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    let big = "A".repeat(20_000);
    let cases = [
        ("not base64 at all!", "header_not_base64"),
        (big.as_str(), "header_too_large"),
        (&b64("hello") as &str, "header_not_json"),
        (&b64(r#"{"version": 9}"#), "unknown_proof_version"),
        (&b64(r#"{"version": 1, "network": 5}"#), "malformed_proof"),
    ];
    for (value, reason) in cases {
        assert_invalid(&app.pay("/v1/quote", value).await, reason);
    }
    // Two X-PAYMENT headers.
    let r = app
        .get("/v1/quote", &[("x-payment", "a"), ("x-payment", "b")])
        .await;
    assert_invalid(&r, "multiple_payment_headers");
    // A malformed x402 payload is refused with the x402 reason.
    let r = app
        .pay(
            "/v1/quote",
            &b64(r#"{"x402Version": 1, "scheme": "exact"}"#),
        )
        .await;
    assert_eq!(r.status, 402);
    assert_eq!(r.body["error"], "InvalidPaymentProof");
    assert_eq!(r.body["reason"], "invalid_payload");
    assert_eq!(app.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_x402_version_is_refused_naming_both() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    // base64 of {"x402Version":3}, in either header.
    for header in ["payment-signature", "x-payment"] {
        let r = app
            .get("/v1/quote", &[(header, "eyJ4NDAyVmVyc2lvbiI6M30=")])
            .await;
        assert_eq!(r.status, 402);
        assert_eq!(r.body["error"], UNSUPPORTED_VERSION_REASON);
        assert_eq!(r.body["reason"], "invalid_x402_version");
        let message = r.body["message"].as_str().unwrap();
        assert!(
            message.contains("V1") && message.contains("V2"),
            "{message}"
        );
        assert_eq!(r.body["x402Version"], 1, "fresh V1 terms");
    }
    // A V2 payload that is not one: refused as such.
    let r = app
        .get(
            "/v1/quote",
            &[("payment-signature", "eyJ4NDAyVmVyc2lvbiI6Mn0=")],
        )
        .await;
    assert_eq!(r.status, 402);
    assert_eq!(r.body["error"], "InvalidPaymentProof");
    assert_eq!(r.body["reason"], "invalid_payload");
    assert_eq!(app.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facilitator_down_is_a_quick_503_and_spends_nothing() {
    let h = Harness::new().await;
    // A gate pointed at a closed port: bound for the whole test but never listening, so
    // connections are refused and no concurrent test's server can take the port.
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = reserved.local_addr().unwrap();
    let secret = [0x42; 32];
    let down = h
        .gate_builder()
        .facilitator(format!("http://{closed}"))
        .memo_secret(secret)
        .build()
        .await
        .unwrap();
    let app = App::serve(&down).await;
    // Unpaid requests need no facilitator.
    let r = app.get("/v1/quote", &[]).await;
    assert_eq!(r.status, 402);
    let (proof, _) = h.pay_402(&r.body).await;
    let started = Instant::now();
    let r = app.pay("/v1/quote", &proof).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "FacilitatorUnavailable");
    assert!(r.headers.contains_key("retry-after"));
    // x402 too.
    let payload = h
        .x402_payload(
            PAYER,
            h.address(PAYEE),
            QUOTE_PRICE,
            B256::repeat_byte(0x31),
        )
        .await;
    let r = app.pay("/v1/quote", &payload.encode_header()).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(app.hits(), 0);

    // Same secret, facilitator back: the same proof works (its memo was not spent).
    let up = h.gate_builder().memo_secret(secret).build().await.unwrap();
    let app = App::serve(&up).await;
    assert_eq!(app.pay("/v1/quote", &proof).await.status, 200);
    drop(reserved);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_chain_mode_checks_the_settlement_event() {
    let h = Harness::new().await;
    let gate = h
        .gate_builder()
        .on_chain(std::sync::Arc::clone(&h.fixture.chain))
        .build()
        .await
        .unwrap();
    let app = App::serve(&gate).await;
    let r = app.get("/v1/quote", &[]).await;
    let (_, proof) = h.pay_402(&r.body).await;
    // Signed by the facilitator's key, but naming a transaction that does not exist.
    let mut fake = proof.clone();
    fake.tx_hash = B256::repeat_byte(0x99);
    tollgate_chain::proof::sign(&h.fixture.accounts[PROOF_KEY].signer(), &mut fake).unwrap();
    assert_invalid(
        &app.pay("/v1/quote", &fake.encode()).await,
        "not_settled_on_chain",
    );
    assert_eq!(app.pay("/v1/quote", &proof.encode()).await.status, 200);
    assert_eq!(app.hits(), 1);
}
