//! `tollgate gateway` prices the path the upstream will serve: percent-escapes of unreserved
//! characters, `//` and case variants of a route cannot buy a priced route at a cheaper route's
//! price, nor pass free under `pass_unmatched`; the upstream receives exactly the canonical path
//! that was priced.

use std::{
    path::Path,
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{Router, routing::any};
use tokio::process::{Child, Command};
use tollgate_agent::{Amount, PayRequest};

use crate::dev::{agent, spawn_dev};

/// What the upstream received, as `path?query`, in order.
type Seen = Arc<Mutex<Vec<String>>>;

/// An upstream that records the path and query it received and echoes them.
async fn recording_upstream() -> (String, Seen, tokio::task::JoinHandle<()>) {
    let seen = Seen::default();
    let record = seen.clone();
    let app = Router::new().fallback(any(move |uri: axum::http::Uri| {
        let record = record.clone();
        async move {
            record
                .lock()
                .unwrap()
                .push(uri.path_and_query().unwrap().as_str().to_owned());
            axum::Json(serde_json::json!({ "path": uri.path(), "query": uri.query() }))
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (
        url,
        seen,
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }),
    )
}

/// Starts `tollgate gateway` in front of `upstream` with `/v1` at 0.01, `/v1/premium` at 0.50
/// and `/paid` at 0.02; returns it and its port once it answers.
async fn spawn_gateway(
    dir: &Path,
    info: &serde_json::Value,
    upstream: &str,
    pass_unmatched: bool,
) -> (Child, u16) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let config = dir.join(format!("gateway-{pass_unmatched}.toml"));
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:{port}"
upstream = "{upstream}"
pass_unmatched = {pass_unmatched}
[gate]
network = "{network}"
token = "{token}"
pay_to = "0x6161616161616161616161616161616161616161"
facilitator = "{facilitator}"
memo_store = "sqlite://{memos}"
[[routes]]
prefix = "/v1"
price = "10000"
[[routes]]
prefix = "/v1/premium"
price = "500000"
[[routes]]
prefix = "/paid"
price = "20000"
[[routes]]
prefix = "/healthz"
free = true
"#,
            network = info["network"].as_str().unwrap(),
            token = info["contracts"]["token"].as_str().unwrap(),
            facilitator = info["facilitatorUrl"].as_str().unwrap(),
            memos = dir.join(format!("memos-{pass_unmatched}.db")).display(),
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["gateway", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "gateway did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, port)
}

/// `GET {target}` sent byte for byte (HTTP clients would normalize dot segments); the status
/// and the body as JSON (`Null` when it is not JSON).
async fn raw_get(port: u16, target: &str) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream
        .write_all(
            format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, serde_json::from_str(&body).unwrap_or_default())
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// Asserts a 402 quoting `amount` for the resource at `path` on the gateway at `port`.
#[track_caller]
fn assert_quotes(
    port: u16,
    target: &str,
    (status, body): &(u16, serde_json::Value),
    amount: &str,
    path: &str,
) {
    assert_eq!(*status, 402, "{target}: {body}");
    let entry = &body["accepts"][0];
    assert_eq!(entry["maxAmountRequired"], amount, "{target}: {body}");
    assert_eq!(
        entry["resource"],
        format!("http://127.0.0.1:{port}{path}"),
        "{target}: {body}"
    );
}

/// Asserts a 400 in the gateway's error shape with `code`.
#[track_caller]
fn assert_refused(target: &str, (status, body): &(u16, serde_json::Value), code: &str) {
    assert_eq!(*status, 400, "{target}: {body}");
    assert_eq!(body["error"]["code"], code, "{target}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_prices_the_path_the_upstream_serves() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let dev = spawn_dev(&dir.path().join("dev"), &[]).await;
    let info = &dev.info;
    let (up, seen, _up_task) = recording_upstream().await;
    let (_open, open) = spawn_gateway(dir.path(), info, &up, true).await;
    let (_closed, closed) = spawn_gateway(dir.path(), info, &up, false).await;
    seen.lock().unwrap().clear();

    for port in [open, closed] {
        // Variants of the premium route are priced as the premium route (or refused), never at
        // the 0.01 of `/v1`; variants of `/paid` never pass free under `pass_unmatched`.
        for (target, amount, path) in [
            ("/v1/premium", "500000", "/v1/premium"),
            ("/v1/%70remium", "500000", "/v1/premium"),
            ("/v1/%70%72emium/x", "500000", "/v1/premium/x"),
            ("/v1//premium", "500000", "/v1/premium"),
            ("//v1///premium//", "500000", "/v1/premium/"),
            ("/v1/Other", "10000", "/v1/Other"),
            ("/paid", "20000", "/paid"),
            ("//paid", "20000", "/paid"),
            ("/%70aid", "20000", "/paid"),
            ("/%70%61%69%64?x=%70", "20000", "/paid"),
        ] {
            assert_quotes(port, target, &raw_get(port, target).await, amount, path);
        }
        // A path priced differently by an upstream that folds case (or drops `;parameters`)
        // than by one that does not is refused; so are dot segments and encoded separators.
        for target in [
            "/v1/PREMIUM",
            "/V1/premium",
            "/v1/Premium/x",
            "/PAID",
            "/Paid/x",
            "/paid;jsessionid=1",
            "/;x/paid",
            "/v1/premium;x/y",
        ] {
            assert_refused(target, &raw_get(port, target).await, "AmbiguousPath");
        }
        for target in [
            "/v1/./premium",
            "/v1/%2E/premium",
            "/healthz/../paid",
            "/healthz/%2e%2E/paid",
            "/healthz/..;/paid",
            "/healthz%2f..%2fpaid",
            "/v1%2Fpremium",
            "/v1%5cpremium",
            "/v1/premium%00",
        ] {
            assert_refused(target, &raw_get(port, target).await, "InvalidPath");
        }
    }
    // None of that reached the upstream.
    assert_eq!(*seen.lock().unwrap(), Vec::<String>::new());

    // Unmatched paths: forwarded free in their canonical form (the query untouched) when
    // pass_unmatched is on, 404 otherwise.
    let (status, echo) = raw_get(open, "//elsewhere//a/%7Eb%2a/%c3%a9?q=%70&r=//x").await;
    assert_eq!(status, 200, "{echo}");
    assert_eq!(echo["path"], "/elsewhere/a/~b%2A/%C3%A9");
    assert_eq!(echo["query"], "q=%70&r=//x");
    assert_eq!(raw_get(closed, "//elsewhere").await.0, 404);
    assert_eq!(raw_get(closed, "/v1premium").await.0, 404);

    // A paid request through a non-canonical spelling pays the premium price and the upstream is
    // asked for exactly the premium path that was priced.
    seen.lock().unwrap().clear();
    let paid = agent(info, 0)
        .pay(PayRequest::get(&format!("http://127.0.0.1:{open}/v1//%70remium/x?q=1")).unwrap())
        .await
        .unwrap();
    assert_eq!(paid.status, 200);
    assert_eq!(
        paid.payment.as_ref().unwrap().amount,
        Amount::from_units(500_000)
    );
    assert_eq!(*seen.lock().unwrap(), ["/v1/premium/x?q=1"]);
}
