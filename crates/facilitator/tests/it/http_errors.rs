//! Every 4xx the facilitator answers is `application/json` in its one error shape
//! (`{"error": {"code", "message"}}`): the status URL of a settlement that is not a router
//! settlement, out-of-range analytics queries, query strings and path parameters that do not
//! parse, unknown routes and methods.

use alloy::primitives::B256;
use reqwest::Method;
use serde_json::{Value, json};
use tollgate_facilitator::settlement_key;

use crate::support::{Backend, Harness};

/// The payee whose analytics are read.
const PROVIDER: usize = 7;

/// A provider API key for `who`, stored as registration stores it.
async fn key_for(h: &Harness, who: usize) -> String {
    h.api_key(who, "t").await
}

/// Sends `method path` (with `key` as Bearer auth) and returns the status, the content type and
/// the body as text.
async fn send(h: &Harness, method: Method, path: &str, key: Option<&str>) -> (u16, String, String) {
    let mut r = h.http.request(method, format!("{}{path}", h.url));
    if let Some(key) = key {
        r = r.bearer_auth(key);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, r.text().await.unwrap())
}

/// Checks that `method path` answers `status` as JSON in the error shape; the error object, or
/// what was wrong.
async fn try_json_error(
    h: &Harness,
    method: Method,
    path: &str,
    key: Option<&str>,
    status: u16,
) -> Result<Value, String> {
    let (s, content_type, body) = send(h, method.clone(), path, key).await;
    let what = format!("{method} {path}: {s} {content_type:?} {body:.200}");
    if s != status || !content_type.starts_with("application/json") {
        return Err(format!("{what} (expected {status} application/json)"));
    }
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{what}: {e}"))?;
    let error = &v["error"];
    if error["code"].as_str().is_some_and(|c| !c.is_empty())
        && error["message"].as_str().is_some_and(|m| !m.is_empty())
    {
        Ok(error.clone())
    } else {
        Err(format!("{what}: not the error shape"))
    }
}

/// [`try_json_error`], panicking on a mismatch.
async fn json_error(
    h: &Harness,
    method: Method,
    path: &str,
    key: Option<&str>,
    status: u16,
) -> Value {
    try_json_error(h, method, path, key, status)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Panics with every failed case.
fn all_ok(failures: &[String]) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An x402 settlement (`POST /settle`) has no proof and no status URL: its key answers 404 as an
/// unknown key does, where it answered 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_url_of_an_x402_settlement_is_not_found() {
    let h = Harness::new(Backend::Devnet).await;
    let pay_to = h.account(7).address;
    let nonce = B256::repeat_byte(0x5a);
    let payload = h.x402_payload(1, pay_to, 10_000, nonce).await;
    let body = json!({
        "x402Version": 1,
        "paymentPayload": payload,
        "paymentRequirements": h.requirements(pay_to, 10_000),
    });
    let (s, r) = h.post("/settle", &body).await;
    assert_eq!((s, &r["success"]), (200, &json!(true)), "{r}");

    // The key x402.rs stores the settlement under.
    let d = h.fixture.deployment;
    let key = settlement_key(
        h.fixture.chain.chain_id(),
        d.token,
        h.account(1).address,
        nonce,
    );
    let row = h.facilitator.store().settlement(key).await.unwrap();
    assert!(row.is_some(), "the x402 settlement is stored under {key}");

    let unknown = json_error(
        &h,
        Method::GET,
        &format!("/settlements/{}", B256::repeat_byte(0x77)),
        None,
        404,
    )
    .await;
    for path in [
        format!("/settlements/{key}"),
        format!("/settlements/{key}?token={}", B256::repeat_byte(1)),
    ] {
        let e = json_error(&h, Method::GET, &path, None, 404).await;
        // The same answer as an unknown key: nothing tells the two apart.
        assert_eq!(e, unknown, "{path}");
    }
}

/// Out-of-range, inverted or overflowing dates and absurd ranges are the client's mistake: 400
/// `InvalidQuery` naming the parameter, where dates beyond the store's range answered 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analytics_refuses_out_of_range_dates_with_400() {
    let h = Harness::new(Backend::Devnet).await;
    let key = key_for(&h, PROVIDER).await;
    let mut failures = Vec::new();
    for (query, name) in [
        ("from=99999999999999", "from"),
        ("to=99999999999999", "to"),
        ("to=9223372036854775808", "to"),
        ("to=18446744073709551615", "to"),
        ("from=9223372036854775806&to=9223372036854775807", "to"),
        ("from=18446744073709551614&to=18446744073709551615", "to"),
        ("to=99999999999999999999999", "to"),
        ("from=1700000000&to=1600000000", "from"),
        ("from=-1", "from"),
        ("to=-5", "to"),
        ("range=999999999d", "range"),
        ("range=-1d", "range"),
        ("top=abc", "top"),
        ("recent=1000", "recent"),
        ("bucket=year", "bucket"),
    ] {
        let path = format!("/analytics?{query}");
        match try_json_error(&h, Method::GET, &path, Some(&key), 400).await {
            Ok(e)
                if e["code"] == "InvalidQuery" && e["message"].as_str().unwrap().contains(name) => {
            }
            Ok(e) => failures.push(format!("{path}: {e}")),
            Err(e) => failures.push(e),
        }
    }
    all_ok(&failures);
    // The latest representable date still answers.
    let (s, _, body) = send(
        &h,
        Method::GET,
        "/analytics?from=253402297200&to=253402300800",
        Some(&key),
    )
    .await;
    assert_eq!(s, 200, "{body}");
}

/// A query string that does not deserialize (a duplicate, an unknown or a missing parameter, a
/// mistyped value) is answered in the JSON error shape on every endpoint that takes one, not as
/// axum's text/plain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_query_strings_are_json_400s() {
    let h = Harness::new(Backend::Devnet).await;
    let key = key_for(&h, PROVIDER).await;
    let id = B256::repeat_byte(0x11);
    let cases: Vec<(Method, String)> = vec![
        (Method::GET, "/analytics?from=1&from=2".into()),
        (Method::GET, "/dashboard?top=1&top=2".into()),
        (Method::GET, format!("/settlements/{id}?bogus=1")),
        (Method::GET, format!("/settlements/{id}?token=zz")),
        (Method::GET, "/subscriptions/quote?planId=0x01".into()),
        (Method::GET, "/subscriptions/quote?bogus=1".into()),
        (Method::GET, format!("/subscriptions/{id}?bogus=1")),
        (Method::GET, format!("/subscriptions/{id}/usage?bogus=1")),
        (Method::GET, format!("/plans/{id}?bogus=1")),
        (Method::POST, format!("/plans/{id}/deprecate?bogus=1")),
        (Method::GET, "/events?limit=abc".into()),
        (Method::GET, "/events?after=-1".into()),
        (
            Method::GET,
            "/webhooks/endpoints/ep_1/deliveries?limit=abc".into(),
        ),
    ];
    let mut failures = Vec::new();
    for (method, path) in cases {
        for key in [None, Some(key.as_str())] {
            match try_json_error(&h, method.clone(), &path, key, 400).await {
                Ok(e) if e["code"] == "InvalidQuery" || e["code"] == "InvalidField" => {}
                Ok(e) => failures.push(format!("{method} {path}: {e}")),
                Err(e) => failures.push(e),
            }
        }
    }
    all_ok(&failures);
}

/// A path parameter that does not decode or parse is a JSON 400; an unknown route a JSON 404; a
/// known route under another method a JSON 405 that still names the allowed methods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_routes_and_methods_are_json() {
    let h = Harness::new(Backend::Devnet).await;
    let key = key_for(&h, PROVIDER).await;
    let mut failures = Vec::new();
    for (method, path) in [
        (Method::GET, "/settlements/zz"),
        (Method::GET, "/settlements/%FF"),
        (Method::GET, "/subscriptions/0x12"),
        (Method::GET, "/subscriptions/%FF"),
        (Method::GET, "/subscriptions/%FF/usage"),
        (Method::POST, "/subscriptions/%FF/allowance"),
        (Method::GET, "/plans/%C3%28"),
        (Method::GET, "/webhooks/endpoints/%FF"),
        (Method::GET, "/webhooks/endpoints/%FF/deliveries"),
    ] {
        if let Err(e) = try_json_error(&h, method, path, Some(&key), 400).await {
            failures.push(e);
        }
    }
    if let Err(e) = try_json_error(&h, Method::GET, "/no/such/route", None, 404).await {
        failures.push(e);
    }
    for (method, path) in [
        (Method::DELETE, "/analytics"),
        (Method::GET, "/authorize"),
        (Method::PUT, "/settle"),
    ] {
        match try_json_error(&h, method.clone(), path, None, 405).await {
            Ok(e) if e["code"] == "MethodNotAllowed" => {}
            Ok(e) => failures.push(format!("{method} {path}: {e}")),
            Err(e) => failures.push(e),
        }
    }
    all_ok(&failures);
    let r = h
        .http
        .get(format!("{}/authorize", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["allow"], "POST");
}

/// A `network` of no network's form (empty, spaced, upper case, `eip155:` without a chain id,
/// over-long) is refused where it enters, 400 naming the field, before anything is looked up:
/// in a body (`InvalidField`, also in an x402 `/verify` or `/settle` body's payload or
/// requirements) and in a query (`InvalidQuery`). Nothing is settled. A well-formed network that
/// is not served stays 422 `UnknownNetwork` (`authorize::rejections_change_nothing`), and x402's
/// in-band `invalid_network` at `/verify` and `/settle` (`x402::verify_rejections`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_networks_are_refused_where_they_enter() {
    let h = Harness::new(Backend::Devnet).await;
    let key = key_for(&h, PROVIDER).await;
    let pay_to = h.account(PROVIDER).address;
    let signed = h
        .signed_payment(2, pay_to, 10_000, B256::repeat_byte(0x4e))
        .await;
    let id = B256::repeat_byte(0x11);
    let long = "n".repeat(65);
    let x402_nonce = B256::repeat_byte(0x4f);
    let x402 = h.settle_body(2, pay_to, 10_000, x402_nonce).await;
    let mut failures = Vec::new();
    for bad in [
        "",
        " tollgate-devnet",
        "Tollgate-Devnet",
        "Base Sepolia!",
        "eip155:abc",
        &long,
    ] {
        let mut payment = serde_json::to_value(&signed).unwrap();
        payment["network"] = json!(bad);
        let (mut in_payload, mut in_requirements) = (x402.clone(), x402.clone());
        in_payload["paymentPayload"]["network"] = json!(bad);
        in_requirements["paymentRequirements"]["network"] = json!(bad);
        let bodies = [
            ("/verify", in_payload.clone()),
            ("/verify", in_requirements.clone()),
            ("/settle", in_payload),
            ("/settle", in_requirements),
            ("/authorize", json!({ "signedPayment": payment })),
            (
                "/plans",
                json!({ "network": bad, "amount": "1000", "idempotencyKey": "k" }),
            ),
            (
                &*format!("/subscriptions/{id}/usage"),
                json!({ "network": bad, "amount": "1" }),
            ),
        ];
        for (path, body) in bodies {
            let r = h
                .http
                .post(format!("{}{path}", h.url))
                .bearer_auth(&key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let v: Value = r.json().await.unwrap_or_default();
            let error = &v["error"];
            if status != 400
                || error["code"] != "InvalidField"
                || !error["message"].as_str().unwrap_or("").contains("network")
            {
                failures.push(format!("POST {path} network {bad:?}: {status} {v}"));
            }
        }
        let q = bad.replace(' ', "%20");
        for path in [
            format!("/plans/{id}?network={q}"),
            format!("/subscriptions/{id}?network={q}"),
            format!("/subscriptions/quote?network={q}&planId={id}&subscriber={pay_to}"),
        ] {
            match try_json_error(&h, Method::GET, &path, Some(&key), 400).await {
                Ok(e) if e["code"] == "InvalidQuery" || e["code"] == "InvalidField" => {}
                Ok(e) => failures.push(format!("GET {path}: {e}")),
                Err(e) => failures.push(e),
            }
        }
    }
    // No x402 settlement was made of the refused bodies.
    let d = h.fixture.deployment;
    let key = settlement_key(
        h.fixture.chain.chain_id(),
        d.token,
        h.account(2).address,
        x402_nonce,
    );
    if h.facilitator
        .store()
        .settlement(key)
        .await
        .unwrap()
        .is_some()
    {
        failures.push("a refused /settle body was settled".into());
    }
    all_ok(&failures);
}
