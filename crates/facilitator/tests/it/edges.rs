//! The facilitator's HTTP edges under its real server: per-client rate limits, oversized headers
//! and bodies, slow clients. The limits themselves are tested in `tollgate-server`; these check
//! that the facilitator serves through them with its settings.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_server::{Limits, RateLimit};

use crate::support::{Backend, Harness};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_rate_gets_429_and_others_do_not_notice() {
    let h = Harness::with(Backend::Devnet, |s| {
        s.server = Limits {
            rate_limit: Some(
                RateLimit::per_second(1, 3)
                    .client(tollgate_server::ClientAddress::XForwardedFor)
                    .limit_private(true),
            ),
            ..Limits::default()
        };
    })
    .await;
    let authorize = |client: &'static str| {
        h.http
            .post(format!("{}/authorize", h.url))
            .header("x-forwarded-for", client)
            .json(&json!({ "signedPayment": "garbage" }))
            .send()
    };
    // Garbage is still answered as garbage while the client is within its burst.
    for _ in 0..3 {
        assert_eq!(authorize("192.0.2.1").await.unwrap().status(), 400);
    }
    let refused = authorize("192.0.2.1").await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    let v: Value = refused.json().await.unwrap();
    assert_eq!(v["error"]["code"], "RateLimited");
    // Another client is served.
    assert_eq!(authorize("192.0.2.2").await.unwrap().status(), 400);
    // The refusal is counted in the metrics like any answer: five 4xx on /authorize.
    let metrics = h
        .http
        .get(format!("{}/metrics", h.url))
        .header("x-forwarded-for", "192.0.2.3")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"tollgate_http_responses_total{route="/authorize",class="4xx"} 5"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_and_oversized_requests_are_cut_off() {
    let h = Harness::with(Backend::Devnet, |s| {
        s.server = Limits {
            header_read_timeout: Duration::from_millis(300),
            request_timeout: Duration::from_secs(11),
            ..Limits::default()
        };
    })
    .await;
    let addr = h.url.trim_start_matches("http://").to_owned();
    // A header that never ends: the connection is closed.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /authorize HTTP/1.1\r\nHost: f\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut rest))
        .await
        .expect("closed")
        .unwrap();
    // Headers beyond 16 KiB: 431.
    let big = h
        .http
        .get(format!("{}/healthz", h.url))
        .header("x-big", "a".repeat(20_000))
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 431);
    // Bodies beyond limits.max_body_bytes: 413 in the facilitator's error shape.
    let (s, v) = h
        .post_raw("/authorize", vec![b' '; 70_000], "application/json")
        .await;
    assert_eq!(s, 413, "{v}");
    // Still serving.
    assert_eq!(h.get("/healthz").await.0, 200);
}
