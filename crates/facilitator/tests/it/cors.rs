//! CORS through the real router: the paywall's calls (`/authorize`, the discovery document, the
//! status URL) answer preflights and are readable from any origin; every other endpoint stays
//! same-origin.

use reqwest::{Method, header::HeaderMap};

use crate::support::{Backend, Harness};

/// The paths a gate's paywall page calls from its own origin.
const CROSS_ORIGIN: [&str; 3] = [
    "/authorize",
    "/.well-known/tollgate",
    "/settlements/0x0000000000000000000000000000000000000000000000000000000000000001",
];

/// Sends `method path` from another origin (a preflight's request headers on `OPTIONS`); the
/// status and the headers.
async fn from_elsewhere(h: &Harness, method: Method, path: &str) -> (u16, HeaderMap) {
    let mut r = h
        .http
        .request(method.clone(), format!("{}{path}", h.url))
        .header("origin", "https://shop.example");
    if method == Method::OPTIONS {
        r = r
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type");
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.headers().clone())
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_paywall_calls_are_open_to_any_origin_and_nothing_else_is() {
    let h = Harness::new(Backend::Devnet).await;
    for path in CROSS_ORIGIN {
        let (status, headers) = from_elsewhere(&h, Method::OPTIONS, path).await;
        assert!((200..300).contains(&status), "OPTIONS {path}: {status}");
        assert_eq!(
            header(&headers, "access-control-allow-origin"),
            Some("*"),
            "{path}"
        );
        let methods = header(&headers, "access-control-allow-methods").unwrap_or_default();
        let mut methods: Vec<&str> = methods.split(',').map(str::trim).collect();
        methods.sort_unstable();
        assert_eq!(methods, ["GET", "POST"], "{path}");
        assert_eq!(
            header(&headers, "access-control-allow-headers"),
            Some("content-type"),
            "{path}"
        );
        assert_eq!(
            header(&headers, "access-control-max-age"),
            Some("600"),
            "{path}"
        );
    }
    // Answers (a refusal included) are readable by the other origin.
    for (method, path) in [
        (Method::GET, CROSS_ORIGIN[1]),
        (Method::GET, CROSS_ORIGIN[2]),
        (Method::POST, CROSS_ORIGIN[0]),
    ] {
        let (status, headers) = from_elsewhere(&h, method.clone(), path).await;
        assert_eq!(
            header(&headers, "access-control-allow-origin"),
            Some("*"),
            "{method} {path}: {status}"
        );
        assert!(header(&headers, "access-control-allow-methods").is_none());
    }
    // Everything else stays same-origin: no preflight, no CORS headers.
    for path in [
        "/healthz",
        "/plans",
        "/subscriptions/quote",
        "/openapi.json",
    ] {
        let (status, headers) = from_elsewhere(&h, Method::OPTIONS, path).await;
        assert!(!(200..300).contains(&status), "OPTIONS {path}: {status}");
        assert!(
            headers
                .keys()
                .all(|k| !k.as_str().starts_with("access-control-")),
            "OPTIONS {path}: {headers:?}"
        );
        let (_, headers) = from_elsewhere(&h, Method::GET, path).await;
        assert!(
            headers
                .keys()
                .all(|k| !k.as_str().starts_with("access-control-")),
            "GET {path}: {headers:?}"
        );
    }
}
