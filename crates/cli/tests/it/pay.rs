//! `tollgate pay` as a process, against a gated API on the devnet with a real facilitator.

use std::{process::Stdio, sync::Arc};

use alloy::primitives::{Address, U256};
use axum::{Router, routing::get};
use tollgate_chain::contracts::{self, Token};
use tollgate_facilitator::{Facilitator, NetworkSpec, Settings, store};
use tollgate_gate::{Gate, Pricing};
use tollgate_testkit::{Backend, Fixture};

const NETWORK: &str = "tollgate-devnet";
const PRICE: u64 = 500_000;
const FEE: u64 = 1_000;
const PAYER: usize = 1;
const PAYEE: usize = 7;
/// A binary body (not UTF-8), without a final newline.
const BLOB: [u8; 5] = [0x89, b'P', 0x00, 0xff, b'x'];

struct World {
    fixture: Fixture,
    api: String,
    dir: tempfile::TempDir,
    _servers: Vec<tokio::task::JoinHandle<()>>,
}

impl World {
    async fn new() -> Self {
        tollgate_chain::install_crypto_provider();
        let fixture = Fixture::new(Backend::Devnet).await.expect("chain fixture");
        let dir = tempfile::tempdir().unwrap();
        let (facilitator_url, f) = serve_facilitator(&fixture, dir.path()).await;
        let d = fixture.deployment;
        let gate = Gate::builder()
            .network(NETWORK)
            .token(d.token, "USD Coin", "2")
            .pay_to(fixture.accounts[PAYEE].address)
            .facilitator(&facilitator_url)
            .build()
            .await
            .unwrap();
        let app = Router::new()
            .route("/v1/quote", get(|| async { r#"{"quote":42}"# }))
            .route(
                "/v1/blob",
                get(|| async {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
                        BLOB.to_vec(),
                    )
                }),
            )
            .route_layer(gate.payment_gate([Pricing::one_time(PRICE)]));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = format!("http://{}", listener.local_addr().unwrap());
        let a = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            fixture,
            api,
            dir,
            _servers: vec![f, a],
        }
    }

    async fn balance(&self, who: Address) -> U256 {
        contracts::read(
            &*self.fixture.chain,
            self.fixture.deployment.token,
            &Token::balanceOfCall { account: who },
        )
        .await
        .unwrap()
    }

    fn key_hex(&self) -> String {
        self.fixture.accounts[PAYER].private_key.to_string()
    }

    /// Runs `tollgate pay ARGS` with `env`; returns (exit code, stdout, stderr).
    async fn pay(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.arg("pay")
            .args(args)
            .env_remove("TOLLGATE_KEY")
            .env_remove("TOLLGATE_LOG")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
            .await
            .expect("tollgate pay finished")
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_prints_the_body_and_a_summary_and_exits_by_outcome() {
    let w = World::new().await;
    let payee = w.fixture.accounts[PAYEE].address;
    let payee0 = w.balance(payee).await;
    let quote = format!("{}/v1/quote", w.api);
    let key_file = w.dir.path().join("agent.key");
    std::fs::write(&key_file, w.key_hex()).unwrap();
    let key_file = key_file.to_str().unwrap();

    // Paid: the body on stdout, the summary on stderr, exit 0, one payment.
    let (code, stdout, stderr) = w
        .pay(&[&quote, "--key-file", key_file, "--max", "0.50"], &[])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, concat!(r#"{"quote":42}"#, "\n"));
    assert!(stderr.contains("paid 0.500000 (500000 units)"), "{stderr}");
    assert!(stderr.contains(NETWORK), "{stderr}");
    assert!(stderr.contains(&payee.to_string()), "{stderr}");
    assert!(
        !stderr.contains(&w.key_hex()[2..]),
        "the key is never printed"
    );
    assert_eq!(w.balance(payee).await, payee0 + U256::from(PRICE - FEE));

    // Over the cap (key from TOLLGATE_KEY): refused by the policy, exit 3, nothing paid.
    let (code, stdout, stderr) = w
        .pay(
            &[&quote, "--max", "0.40"],
            &[("TOLLGATE_KEY", &w.key_hex())],
        )
        .await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("per-request cap"), "{stderr}");

    // Not allowed on this network: exit 3.
    let (code, _, stderr) = w
        .pay(&[&quote, "--key-file", key_file, "--network", "base"], &[])
        .await;
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(w.balance(payee).await, payee0 + U256::from(PRICE - FEE));

    // An HTTP error status without a 402: exit 1, the body still printed.
    let (code, _, stderr) = w
        .pay(
            &[&format!("{}/nowhere", w.api), "--key-file", key_file],
            &[],
        )
        .await;
    assert_eq!(code, 1, "{stderr}");

    // No key: a usage error. A bad amount: clap's usage error.
    let (code, _, stderr) = w.pay(&[&quote], &[]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("TOLLGATE_KEY"), "{stderr}");
    let (code, _, _) = w
        .pay(&[&quote, "--key-file", key_file, "--max", "1e6"], &[])
        .await;
    assert_eq!(code, 2);

    // Nobody listening: a network error, exit 5.
    let (code, _, stderr) = w
        .pay(
            &["http://127.0.0.1:9/v1/quote", "--key-file", key_file],
            &[],
        )
        .await;
    assert_eq!(code, 5, "{stderr}");

    // `--help` documents the exit codes.
    let (code, stdout, _) = w.pay(&["--help"], &[]).await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("Exit codes:") && stdout.contains("3  payment refused"),
        "{stdout}"
    );
}

/// The issue's report: `tollgate pay` logged INFO lines repeating its own summary and printed the
/// body without a final newline. Now: the body, a newline after text (not after binary bodies),
/// one summary line on stderr, logs only with -v, and `--json` for machines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_is_quiet_ends_text_with_a_newline_and_speaks_json() {
    let w = World::new().await;
    let key = [("TOLLGATE_KEY", w.key_hex())];
    let key = [(key[0].0, key[0].1.as_str())];
    let quote = format!("{}/v1/quote", w.api);

    // Text: the body and a newline; one line on stderr, the summary.
    let (code, stdout, stderr) = w.pay(&[&quote], &key).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "{\"quote\":42}\n");
    assert_eq!(
        stderr.lines().count(),
        1,
        "one summary line, no logs: {stderr}"
    );
    assert!(
        stderr.starts_with("paid 0.500000 (500000 units)"),
        "{stderr}"
    );

    // Binary: the bytes as they are.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["pay", &format!("{}/v1/blob", w.api)])
        .env("TOLLGATE_KEY", w.key_hex())
        .env_remove("TOLLGATE_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, BLOB, "no newline after a binary body");
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);

    // -v: the agent's logs too.
    let (code, _, stderr) = w.pay(&[&quote, "-v"], &key).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains(" INFO "), "-v shows info logs: {stderr}");

    // --json: one object on stdout with the status, headers, payment and body.
    let (code, stdout, stderr) = w.pay(&[&quote, "--json"], &key).await;
    assert_eq!(code, 0, "{stderr}");
    let out: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["body"], r#"{"quote":42}"#, "{out}");
    assert!(out["headers"]["x-payment-response"].is_string(), "{out}");
    let payment = &out["payment"];
    assert_eq!(payment["kind"], "tollgate", "{out}");
    assert_eq!(payment["amount"], "500000", "{out}");
    assert_eq!(payment["network"], NETWORK, "{out}");
    assert_eq!(
        payment["payTo"].as_str().map(str::to_lowercase),
        Some(w.fixture.accounts[PAYEE].address.to_string().to_lowercase()),
        "{out}"
    );
    let tx: alloy::primitives::B256 = payment["txHash"].as_str().unwrap().parse().unwrap();
    assert!(
        w.fixture
            .chain
            .receipt(tx)
            .await
            .unwrap()
            .expect("mined")
            .success
    );
    assert!(
        stdout.ends_with('\n') && stdout.lines().count() == 1,
        "{stdout}"
    );
    let (_, stdout, _) = w
        .pay(&[&format!("{}/v1/blob", w.api), "--json"], &key)
        .await;
    let out: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["body"], serde_json::Value::Null, "{out}");
    assert_eq!(out["bodyHex"], "895000ff78", "{out}");

    // `--help` says so.
    let (_, stdout, _) = w.pay(&["--help"], &[]).await;
    assert!(
        stdout.contains("--json") && stdout.contains("-v"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_through_a_proxy_that_corrupts_the_proof_pays_once() {
    // The issue's report: a proxy that corrupts the first X-PAYMENT made `tollgate pay` pay
    // 1.00 for a 0.50 request (the defaults, --max 1.00, leave room for two) and report one.
    let w = World::new().await;
    let proxy = CorruptingProxy::new(&w.api).await;
    let (payer, payee) = (
        w.fixture.accounts[PAYER].address,
        w.fixture.accounts[PAYEE].address,
    );
    let (payer0, payee0) = (w.balance(payer).await, w.balance(payee).await);

    let (code, stdout, stderr) = w
        .pay(
            &[&format!("{}/v1/quote", proxy.url)],
            &[("TOLLGATE_KEY", &w.key_hex())],
        )
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, concat!(r#"{"quote":42}"#, "\n"));
    let paid: Vec<&str> = stderr.lines().filter(|l| l.starts_with("paid ")).collect();
    assert_eq!(paid.len(), 1, "one payment reported: {stderr}");
    assert!(stderr.contains("paid 0.500000 (500000 units)"), "{stderr}");
    let seen = proxy.seen();
    assert_eq!(seen.len(), 2, "the paid request, then one resend");
    assert_eq!(seen[0], seen[1], "the resend carries the same proof");
    // Charged exactly once, the price and nothing else.
    assert_eq!(w.balance(payer).await, payer0 - U256::from(PRICE));
    assert_eq!(w.balance(payee).await, payee0 + U256::from(PRICE - FEE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_after_the_chain_travels_30_days() {
    // The README's renewal walk-through moves the chain 30 days ahead; `tollgate pay` must sign
    // by the chain's clock, which the facilitator publishes, not by the local one.
    let w = World::new().await;
    let days_30 = 30 * 86_400;
    w.fixture.chain.advance_time(days_30).await.unwrap();
    let payee = w.fixture.accounts[PAYEE].address;
    let payee0 = w.balance(payee).await;

    let (code, stdout, stderr) = w
        .pay(
            &[&format!("{}/v1/quote", w.api), "--max", "0.50"],
            &[("TOLLGATE_KEY", &w.key_hex())],
        )
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, concat!(r#"{"quote":42}"#, "\n"));
    assert_eq!(w.balance(payee).await, payee0 + U256::from(PRICE - FEE));
    // Settled in a block of the travelled chain: the token took the window by its clock.
    let tx: alloy::primitives::B256 = stderr
        .split("; tx ")
        .nth(1)
        .and_then(|t| t.split(';').next())
        .expect("a tx in the summary")
        .parse()
        .unwrap();
    let receipt = w.fixture.chain.receipt(tx).await.unwrap().expect("mined");
    assert!(receipt.success);
    let local = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(receipt.block_timestamp > local + days_30 - 86_400);
}

/// A real HTTP proxy on loopback in front of `upstream`: it forwards every request and answer
/// unchanged, except that it corrupts the `X-PAYMENT` of the first paid request (one character
/// flipped). It records every `X-PAYMENT` it received, before corruption.
struct CorruptingProxy {
    url: String,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

type ProxyState = (String, reqwest::Client, Arc<std::sync::Mutex<Vec<String>>>);

impl CorruptingProxy {
    async fn new(upstream: &str) -> Self {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let state: ProxyState = (
            upstream.to_owned(),
            reqwest::Client::new(),
            Arc::clone(&seen),
        );
        let app = Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, seen, server }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for CorruptingProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn forward(
    axum::extract::State((upstream, http, seen)): axum::extract::State<ProxyState>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::http::header;
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut headers = parts.headers.clone();
    for h in [header::HOST, header::CONTENT_LENGTH, header::CONNECTION] {
        headers.remove(h);
    }
    if let Some(value) = headers.get("x-payment").and_then(|v| v.to_str().ok()) {
        let value = value.to_owned();
        let first = {
            let mut seen = seen.lock().unwrap();
            seen.push(value.clone());
            seen.len() == 1
        };
        if first {
            let mut bytes = value.into_bytes();
            let i = bytes.len() / 2;
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            headers.insert(
                "x-payment",
                String::from_utf8(bytes).unwrap().parse().unwrap(),
            );
        }
    }
    let answer = http
        .request(parts.method, format!("{upstream}{path}"))
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let mut headers = answer.headers().clone();
    for h in [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::CONNECTION,
    ] {
        headers.remove(h);
    }
    let body = answer.bytes().await.unwrap();
    let mut response = axum::response::Response::new(axum::body::Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// A facilitator over `fixture`'s chain (relayer dev account 8, proof key 9), its SQLite store in
/// `dir`, served on a loopback port: its URL and server task.
pub(crate) async fn serve_facilitator(
    fixture: &Fixture,
    dir: &std::path::Path,
) -> (String, tokio::task::JoinHandle<()>) {
    let store = store::open(&format!("sqlite://{}", dir.join("f.db").display()))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
    let d = fixture.deployment;
    let facilitator = Facilitator::new(
        Settings {
            public_url: facilitator_url.clone(),
            fee: U256::from(FEE),
            ..Settings::default()
        },
        vec![(
            NetworkSpec {
                name: NETWORK.into(),
                chain_id: fixture.chain.chain_id(),
                token: d.token,
                token_name: "USD Coin".into(),
                token_version: "2".into(),
                router: d.router,
                subscriptions: Some(d.subscriptions),
                confirmations: 1,
            },
            Arc::clone(&fixture.chain),
        )],
        vec![fixture.accounts[8].address],
        fixture.accounts[9].private_key,
        store,
    )
    .unwrap();
    let server = tokio::spawn(async move {
        let _ = tollgate_facilitator::serve(facilitator, listener, std::future::pending()).await;
    });
    (facilitator_url, server)
}
