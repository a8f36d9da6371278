//! x402 V2 beside V1: the `PAYMENT-REQUIRED` header of every 402, `PAYMENT-SIGNATURE` payments
//! settled once under the V1 lock, both response headers, and `payment-identifier` retries.

use alloy::primitives::{B256, U256};
use tollgate_gate::{PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT_RESPONSE};
use tollgate_protocol::x402::{
    SettlementResponseHeader,
    v2::{PAYMENT_IDENTIFIER, PaymentPayloadV2, PaymentRequiredV2},
};

use crate::support::{App, Harness, NETWORK, PAYEE, PAYER, QUOTE_PRICE, Reply};

const CAIP2: &str = "eip155:84532";

/// The V2 terms of a fresh 402 at `path`.
async fn terms(app: &App, path: &str) -> (Reply, PaymentRequiredV2) {
    let r = app.get(path, &[]).await;
    assert_eq!(r.status, 402);
    let header = r.headers[PAYMENT_REQUIRED].to_str().unwrap().to_owned();
    (r, PaymentRequiredV2::decode_header(&header).unwrap())
}

/// A V2 payment for the first entry of `required`, signed as the reference client signs it,
/// with an optional payment identifier.
async fn pay_v2(
    h: &Harness,
    required: &PaymentRequiredV2,
    amount: u64,
    nonce: B256,
    id: Option<&str>,
) -> PaymentPayloadV2 {
    let accepted = required.accepts[0].clone();
    let signed = h.x402_payload(PAYER, accepted.pay_to, amount, nonce).await;
    PaymentPayloadV2 {
        x402_version: 2,
        resource: Some(required.resource.clone()),
        accepted,
        payload: signed.payload,
        extensions: id.map(|id| {
            serde_json::Map::from_iter([(
                PAYMENT_IDENTIFIER.to_owned(),
                serde_json::json!({ "info": { "required": false, "id": id } }),
            )])
        }),
    }
}

async fn send(app: &App, path: &str, p: &PaymentPayloadV2) -> Reply {
    app.get(path, &[(PAYMENT_SIGNATURE, &p.encode_header())])
        .await
}

fn settlement(r: &Reply, header: &str) -> SettlementResponseHeader {
    SettlementResponseHeader::decode(r.headers[header].to_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_402_carries_the_v2_terms_beside_the_v1_body() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    assert_eq!(gate.caip2().map(|n| n.as_str()), Some(CAIP2));
    let app = App::serve(&gate).await;
    let (r, v2) = terms(&app, "/v1/quote").await;
    assert_eq!(r.body["x402Version"], 1, "the body stays the V1 superset");
    assert_eq!(r.body["version"], "1");
    assert_eq!(v2.x402_version, 2);
    assert_eq!(v2.error.as_deref(), Some("PaymentRequired"));
    assert_eq!(v2.resource.url, format!("{}/v1/quote", app.url));
    assert_eq!(v2.resource.description.as_deref(), Some("a quote"));
    assert_eq!(v2.accepts.len(), 1);
    let a = &v2.accepts[0];
    assert_eq!((a.scheme.as_str(), a.network.as_str()), ("exact", CAIP2));
    assert_eq!(a.amount.to_string(), QUOTE_PRICE.to_string());
    assert_eq!((a.asset, a.pay_to), (h.token(), h.address(PAYEE)));
    assert_eq!(a.extra.as_ref().unwrap()["name"], "USD Coin");
    let header = r.headers[PAYMENT_REQUIRED].to_str().unwrap();
    let json: serde_json::Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::STANDARD, header).unwrap(),
    )
    .unwrap();
    assert!(json["accepts"][0]["maxTimeoutSeconds"].is_u64());
    assert_eq!(
        json["extensions"][PAYMENT_IDENTIFIER]["info"]["required"],
        false
    );
    // The facilitator is named, so that a Tollgate client signs by its chain clock.
    assert_eq!(
        json["extensions"][tollgate_protocol::x402::v2::FACILITATOR_EXTENSION]["info"]["facilitator"],
        h.url.as_str()
    );
    // Refusals carry it too, with the reason in its `error`.
    let r = app.pay("/v1/quote", "garbage").await;
    let v2 =
        PaymentRequiredV2::decode_header(r.headers[PAYMENT_REQUIRED].to_str().unwrap()).unwrap();
    assert_eq!(v2.error.as_deref(), Some("InvalidPaymentProof"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_v2_payment_settles_once_under_the_v1_lock() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));
    let before = (h.token_balance(payer).await, h.token_balance(payee).await);
    let (_, required) = terms(&app, "/v1/quote").await;
    let p = pay_v2(&h, &required, QUOTE_PRICE, B256::repeat_byte(0x71), None).await;

    let ok = send(&app, "/v1/quote", &p).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let v2 = settlement(&ok, PAYMENT_RESPONSE);
    let v1 = settlement(&ok, X_PAYMENT_RESPONSE);
    assert!(v2.success && v1.success);
    assert_eq!((v2.network.as_str(), v1.network.as_str()), (CAIP2, NETWORK));
    assert_eq!(v2.transaction, v1.transaction);
    assert_eq!(v2.payer, Some(payer));
    assert_eq!(
        h.token_balance(payee).await,
        before.1 + U256::from(QUOTE_PRICE)
    );

    // Replayed as V2, and as its V1 twin in X-PAYMENT: one lock for both versions.
    let again = send(&app, "/v1/quote", &p).await;
    assert_eq!(again.status, 402);
    assert_eq!(again.body["reason"], "duplicate_settlement");
    let twin = p.to_v1(&NETWORK.parse().unwrap()).encode_header();
    assert_eq!(
        app.pay("/v1/quote", &twin).await.body["reason"],
        "duplicate_settlement"
    );
    assert_eq!(app.hits(), 1);
    assert_eq!(
        h.token_balance(payer).await,
        before.0 - U256::from(QUOTE_PRICE)
    );
    assert_eq!(
        h.token_balance(payee).await,
        before.1 + U256::from(QUOTE_PRICE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_or_foreign_v2_payments_are_refused_and_move_nothing() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    let payee = h.address(PAYEE);
    let before = h.token_balance(payee).await;
    let (_, required) = terms(&app, "/v1/quote").await;

    // `accepted` lowered to what was signed: not this route's requirement.
    let mut cheap = pay_v2(&h, &required, 1, B256::repeat_byte(0x72), None).await;
    cheap.accepted.amount = 1u64.into();
    let r = send(&app, "/v1/quote", &cheap).await;
    assert_eq!(
        (r.status, r.body["reason"].as_str()),
        (402, Some("invalid_payment_requirements"))
    );
    // The amount signed raised past `accepted` after signing: the signature no longer holds.
    let mut raised = pay_v2(&h, &required, QUOTE_PRICE, B256::repeat_byte(0x73), None).await;
    raised.payload.authorization.value = (QUOTE_PRICE + 1).into();
    let r = send(&app, "/v1/quote", &raised).await;
    assert_eq!(r.status, 402);
    assert_eq!(r.body["error"], "InvalidPaymentProof");
    // Less signed than `accepted` says.
    let short = pay_v2(
        &h,
        &required,
        QUOTE_PRICE - 1,
        B256::repeat_byte(0x74),
        None,
    )
    .await;
    let r = send(&app, "/v1/quote", &short).await;
    assert_eq!(
        r.body["reason"],
        "invalid_exact_evm_payload_authorization_value"
    );
    // The quote's terms at the dearer /premium.
    let quote = pay_v2(&h, &required, QUOTE_PRICE, B256::repeat_byte(0x75), None).await;
    let r = send(&app, "/premium", &quote).await;
    assert_eq!(r.body["reason"], "invalid_payment_requirements");
    // Another network.
    let mut elsewhere = pay_v2(&h, &required, QUOTE_PRICE, B256::repeat_byte(0x76), None).await;
    elsewhere.accepted.network = "eip155:8453".parse().unwrap();
    assert_eq!(
        send(&app, "/v1/quote", &elsewhere).await.body["reason"],
        "invalid_network"
    );
    // Both headers at once.
    let both = app
        .get(
            "/v1/quote",
            &[
                (PAYMENT_SIGNATURE, &quote.encode_header()),
                (
                    "x-payment",
                    &quote.to_v1(&NETWORK.parse().unwrap()).encode_header(),
                ),
            ],
        )
        .await;
    assert_eq!(both.body["reason"], "multiple_payment_headers");
    assert_eq!(app.hits(), 0);
    assert_eq!(h.token_balance(payee).await, before);
    // The untampered payment still pays: nothing above spent its nonce.
    let ok = send(&app, "/v1/quote", &quote).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

/// `value`, a payment edited as JSON, as a header value (base64 JSON).
fn encoded(value: &serde_json::Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(value).unwrap())
}

/// A `network` of no network's form in an `X-PAYMENT` (V1) or `PAYMENT-SIGNATURE` (V2) payment
/// is refused where it enters, as any malformed payment is: 402 `InvalidPaymentProof` with
/// x402's `invalid_payload`, the handler not run, nothing settled (the same payment, untouched,
/// still pays). A well-formed network not served stays `invalid_network`
/// (`tampered_or_foreign_v2_payments_are_refused_and_move_nothing`,
/// `x402::x402_payments_that_do_not_fit_get_the_x402_reason`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_network_is_refused_where_it_enters() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    let payee = h.address(PAYEE);
    let before = h.token_balance(payee).await;
    let (_, required) = terms(&app, "/v1/quote").await;
    let v2 = pay_v2(&h, &required, QUOTE_PRICE, B256::repeat_byte(0x7a), None).await;
    let v1 = h
        .x402_payload(PAYER, payee, QUOTE_PRICE, B256::repeat_byte(0x7b))
        .await;
    for bad in ["Base Sepolia!", "eip155:abc", ""] {
        let mut x_payment = serde_json::to_value(&v1).unwrap();
        x_payment["network"] = bad.into();
        let mut signature = serde_json::to_value(&v2).unwrap();
        signature["accepted"]["network"] = bad.into();
        for (header, value) in [
            ("x-payment", encoded(&x_payment)),
            (PAYMENT_SIGNATURE, encoded(&signature)),
        ] {
            let r = app.get("/v1/quote", &[(header, &value)]).await;
            assert_eq!(r.status, 402, "{header} {bad:?}: {}", r.body);
            assert_eq!(r.body["error"], "InvalidPaymentProof", "{header} {bad:?}");
            assert_eq!(r.body["reason"], "invalid_payload", "{header} {bad:?}");
        }
    }
    assert_eq!(app.hits(), 0);
    assert_eq!(h.token_balance(payee).await, before);
    // Neither payment's nonce was spent.
    let ok = app.pay("/v1/quote", &v1.encode_header()).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let ok = send(&app, "/v1/quote", &v2).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_payment_identifier_makes_retries_idempotent() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = std::sync::Arc::new(App::serve(&gate).await);
    let payee = h.address(PAYEE);
    let before = h.token_balance(payee).await;
    let (_, required) = terms(&app, "/v1/quote").await;
    let id = "pay_7d5d747be160e280504c099d984bcfe0";
    let p = pay_v2(
        &h,
        &required,
        QUOTE_PRICE,
        B256::repeat_byte(0x81),
        Some(id),
    )
    .await;

    let first = send(&app, "/v1/quote", &p).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let tx = settlement(&first, PAYMENT_RESPONSE).transaction;
    // The same payload under its id, again and concurrently: the first outcome, charged once.
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let (app, p) = (std::sync::Arc::clone(&app), p.clone());
            tokio::spawn(async move { send(&app, "/v1/quote", &p).await })
        })
        .collect();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(settlement(&r, PAYMENT_RESPONSE).transaction, tx);
    }
    assert_eq!(
        h.token_balance(payee).await,
        before + U256::from(QUOTE_PRICE)
    );
    // Another payload under the same id: refused, nothing moves.
    let other = pay_v2(
        &h,
        &required,
        QUOTE_PRICE,
        B256::repeat_byte(0x82),
        Some(id),
    )
    .await;
    let r = send(&app, "/v1/quote", &other).await;
    assert_eq!(
        (r.status, r.body["reason"].as_str()),
        (402, Some("payment_identifier_conflict"))
    );
    assert_eq!(
        h.token_balance(payee).await,
        before + U256::from(QUOTE_PRICE)
    );
    assert_eq!(app.hits(), 6);

    // A refused payment frees its id for the next payload.
    let id2 = "pay_0123456789abcdef0123";
    let short = pay_v2(
        &h,
        &required,
        QUOTE_PRICE - 1,
        B256::repeat_byte(0x83),
        Some(id2),
    )
    .await;
    assert_eq!(send(&app, "/v1/quote", &short).await.status, 402);
    let good = pay_v2(
        &h,
        &required,
        QUOTE_PRICE,
        B256::repeat_byte(0x84),
        Some(id2),
    )
    .await;
    assert_eq!(send(&app, "/v1/quote", &good).await.status, 200);
    assert_eq!(
        h.token_balance(payee).await,
        before + U256::from(2 * QUOTE_PRICE)
    );
    // A malformed id is refused.
    let bad = pay_v2(
        &h,
        &required,
        QUOTE_PRICE,
        B256::repeat_byte(0x85),
        Some("short"),
    )
    .await;
    assert_eq!(
        send(&app, "/v1/quote", &bad).await.body["reason"],
        "invalid_payload"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_get_the_paywall_where_a_route_has_one_and_programs_never() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let page = app.get("/v1/quote", &[("accept", browser)]).await;
    assert_eq!(page.status, 402);
    assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(page.headers["vary"], "accept");
    assert!(
        page.headers.contains_key(PAYMENT_REQUIRED),
        "the same headers"
    );
    let html = page.body.as_str().expect("a page");
    assert!(
        html.contains("id=\"tollgate-terms\"") && html.contains("0.50"),
        "{html}"
    );
    // The embedded terms are the JSON 402's, with what the wallet signs (router and nonce).
    let start = html.find("id=\"tollgate-terms\">").unwrap() + "id=\"tollgate-terms\">".len();
    let end = start + html[start..].find("</script>").unwrap();
    let embedded: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
    assert_eq!(
        embedded["terms"]["accepts"][0]["amount"],
        QUOTE_PRICE.to_string()
    );
    let memo = embedded["terms"]["accepts"][0]["memo"].as_str().unwrap();
    assert!(embedded["pay"]["nonces"][memo].is_string(), "{embedded}");
    let router: alloy::primitives::Address =
        embedded["pay"]["router"].as_str().unwrap().parse().unwrap();
    assert_eq!(router, h.fixture.deployment.router);
    // The dashboard's security headers: a CSP that runs only the page's own script (by its
    // hash), connects only to this origin and the facilitator, and lets no site frame the page.
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    for part in [
        "default-src 'none'".to_owned(),
        "frame-ancestors 'none'".to_owned(),
        "base-uri 'none'".to_owned(),
        "form-action 'none'".to_owned(),
        format!("connect-src 'self' {}", h.url),
    ] {
        assert!(csp.contains(&part), "{part} in {csp}");
    }
    let script_start = html.find("<script>").unwrap() + "<script>".len();
    let script_end = script_start + html[script_start..].find("</script>").unwrap();
    let hash = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        <sha2::Sha256 as sha2::Digest>::digest(&html.as_bytes()[script_start..script_end]),
    );
    assert!(
        csp.contains(&format!("script-src 'sha256-{hash}';")),
        "{csp}"
    );
    assert_eq!(page.headers["x-frame-options"], "DENY");
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    assert_eq!(page.headers["referrer-policy"], "no-referrer");
    assert_eq!(page.headers["cache-control"], "no-store");
    // Programs: JSON whatever else they accept.
    for accept in [
        "*/*",
        "application/json",
        "application/json, text/html;q=0.5",
    ] {
        let r = app.get("/v1/quote", &[("accept", accept)]).await;
        assert_eq!(r.headers["content-type"], "application/json", "{accept}");
    }
    // A route without a paywall: JSON for browsers too.
    let off = {
        use axum::{Router, routing::get};
        use tollgate_gate::Pricing;
        let router = Router::new()
            .route("/raw", get(|| async { "raw" }))
            .route_layer(
                gate.payment_gate([Pricing::one_time(QUOTE_PRICE)])
                    .paywall(false),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/raw", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        reqwest::Client::new()
            .get(url)
            .header("accept", browser)
            .send()
            .await
            .unwrap()
    };
    assert_eq!(off.status(), 402);
    assert_eq!(off.headers()["content-type"], "application/json");
    assert_eq!(app.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_payloads_under_one_identifier_pay_once() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = std::sync::Arc::new(App::serve(&gate).await);
    let payee = h.address(PAYEE);
    let before = h.token_balance(payee).await;
    let (_, required) = terms(&app, "/v1/quote").await;
    let id = "pay_concurrent_gate_0123";
    let mut payments = Vec::new();
    for n in 0..6u8 {
        payments.push(
            pay_v2(
                &h,
                &required,
                QUOTE_PRICE,
                B256::repeat_byte(0x90 + n),
                Some(id),
            )
            .await,
        );
    }
    let tasks: Vec<_> = payments
        .into_iter()
        .map(|p| {
            let app = std::sync::Arc::clone(&app);
            tokio::spawn(async move { send(&app, "/v1/quote", &p).await })
        })
        .collect();
    let mut served = 0;
    for t in tasks {
        let r = t.await.unwrap();
        if r.status == 200 {
            served += 1;
        } else {
            assert_eq!(
                r.body["reason"], "payment_identifier_conflict",
                "{}",
                r.body
            );
        }
    }
    assert_eq!(served, 1);
    assert_eq!(app.hits(), 1);
    assert_eq!(
        h.token_balance(payee).await,
        before + U256::from(QUOTE_PRICE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_payment_identifiers_serves_each_payment_once() {
    use axum::{Router, routing::get};
    use tollgate_gate::Pricing;
    let h = Harness::new().await;
    let gate = h.gate().await;
    let router = Router::new()
        .route("/strict", get(|| async { "strict" }))
        .route_layer(
            gate.payment_gate([Pricing::one_time(QUOTE_PRICE)])
                .payment_identifier(false),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let http = reqwest::Client::new();
    let r = http.get(format!("{base}/strict")).send().await.unwrap();
    let header = r.headers()[PAYMENT_REQUIRED].to_str().unwrap().to_owned();
    let required = PaymentRequiredV2::decode_header(&header).unwrap();
    assert!(
        !required
            .extensions
            .as_ref()
            .unwrap()
            .contains_key(PAYMENT_IDENTIFIER),
        "not declared"
    );
    let p = pay_v2(
        &h,
        &required,
        QUOTE_PRICE,
        B256::repeat_byte(0xa1),
        Some("pay_strict_route_0001"),
    )
    .await;
    let send = |p: &PaymentPayloadV2| {
        http.get(format!("{base}/strict"))
            .header(PAYMENT_SIGNATURE, p.encode_header())
            .send()
    };
    assert_eq!(send(&p).await.unwrap().status(), 200);
    let again = send(&p).await.unwrap();
    assert_eq!(
        again.status(),
        402,
        "the id is ignored: a repeat is a replay"
    );
    let body: serde_json::Value = again.json().await.unwrap();
    assert_eq!(body["reason"], "duplicate_settlement");
}
