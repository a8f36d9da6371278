//! No secret reaches a log or an error body. `tollgate dev` runs at `TOLLGATE_LOG=trace` (every
//! crate's most verbose level) through a session that touches every kind of secret the service
//! holds: the dev accounts' private keys (payers, provider, relayer, proof signer), the provider
//! API key and a second one registered by signature, webhook signing secrets (created and
//! rotated), a dashboard session token, plus wrong keys sent on purpose. Beside it, a
//! `tollgate facilitator` at `TOLLGATE_LOG=trace` reaches the same chain through a node URL that
//! carries credentials the way hosted nodes take them (a password in the user info, a token in
//! the path, an API key in the query), settles a payment through it, and reports on `/readyz`
//! while the node is up and after it went away. Then both logs and every error or status body are
//! scanned for each secret, in the spellings it could take.
//!
//! (`tollgate dev` prints its keys on stdout by design, as a development tool's guide; the log is
//! stderr.)

use std::{
    path::Path,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256},
    signers::local::PrivateKeySigner,
};
use axum::{
    Router,
    body::Bytes,
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tollgate_agent::PayRequest;

use crate::{
    dev::spawn_dev_logging,
    facilitator::{payment_with_memo, write_config},
};

/// The node's credentials. The password and the API key hold characters a URL percent-encodes.
const NODE_USER: &str = "tollgate";
const NODE_PASSWORD: &str = "pa55:w/rd-S3cret";
const NODE_PASSWORD_ENCODED: &str = "pa55%3Aw%2Frd-S3cret";
const NODE_PATH_TOKEN: &str = "s3cretPathToken0";
const NODE_API_KEY: &str = "s3cret+Key/42=";
const NODE_API_KEY_ENCODED: &str = "s3cret%2BKey%2F42%3D";

/// A JSON-RPC node behind credentials, as hosted nodes are: it answers only requests that carry
/// the password (HTTP Basic), the path token and the API key, and forwards those to `upstream`
/// (the devnet of `tollgate dev`).
struct HostedNode {
    /// The URL with every credential in it.
    url: String,
    /// Requests answered.
    served: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl HostedNode {
    async fn start(upstream: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let url = format!(
            "http://{NODE_USER}:{NODE_PASSWORD_ENCODED}@{addr}/v2/{NODE_PATH_TOKEN}?apikey={NODE_API_KEY_ENCODED}"
        );
        let http = reqwest::Client::new();
        let served = Arc::new(AtomicUsize::new(0));
        let app = Router::new().fallback({
            let (upstream, served) = (upstream.to_owned(), Arc::clone(&served));
            move |uri: Uri, headers: HeaderMap, body: Bytes| {
                let (http, upstream, served) =
                    (http.clone(), upstream.clone(), Arc::clone(&served));
                async move {
                    let authorized = headers.get("authorization").map(|v| v.as_bytes())
                        == Some(basic_credential().as_bytes())
                        && uri.path() == format!("/v2/{NODE_PATH_TOKEN}")
                        && uri.query() == Some(&format!("apikey={NODE_API_KEY_ENCODED}"));
                    if !authorized {
                        return (StatusCode::UNAUTHORIZED, "missing credentials").into_response();
                    }
                    served.fetch_add(1, Ordering::Relaxed);
                    relay(&http, &upstream, body).await
                }
            }
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self {
            url,
            served,
            stop: Some(stop),
            task,
        }
    }

    /// Stops the node: its clients' next requests fail at the connection.
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
    }
}

/// The `Authorization` header the node's user and password make (base64 of `user:password`).
fn basic_credential() -> String {
    let request = reqwest::Client::new()
        .post("http://127.0.0.1/")
        .basic_auth(NODE_USER, Some(NODE_PASSWORD))
        .build()
        .unwrap();
    request.headers()["authorization"]
        .to_str()
        .unwrap()
        .to_owned()
}

async fn relay(http: &reqwest::Client, upstream: &str, body: Bytes) -> Response {
    match http
        .post(upstream)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
    {
        Ok(r) => {
            let status = StatusCode::from_u16(r.status().as_u16()).unwrap();
            let bytes = r.bytes().await.unwrap_or_default();
            (status, [("content-type", "application/json")], bytes).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// `tollgate facilitator --config config` at `TOLLGATE_LOG=trace`, its stdout and stderr both
/// written to `log`; its URL once it listens.
async fn spawn_facilitator_logging(config: &Path, log: &Path) -> (Child, String) {
    let accounts = tollgate_chain::accounts::dev_accounts(10);
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["facilitator", "--config"])
        .arg(config)
        .env("TOLLGATE_RELAYER_KEY", accounts[8].private_key.to_string())
        .env("TOLLGATE_PROOF_KEY", accounts[9].private_key.to_string())
        .env("TOLLGATE_LOG", "trace")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tollgate facilitator");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(rest) = text.split("public_url=").nth(1) {
            return (child, rest.split_whitespace().next().unwrap().to_owned());
        }
        assert!(
            Instant::now() < deadline,
            "the facilitator did not start:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The spellings a secret could be logged in: as given, lowercase, without a `0x` or `whsec_`
/// prefix, and as the bare hex of a `tg_` key.
fn spellings(secret: &str) -> Vec<String> {
    let mut out = vec![secret.to_owned(), secret.to_lowercase()];
    for prefix in ["0x", "whsec_", "tg_"] {
        if let Some(rest) = secret.strip_prefix(prefix) {
            out.push(rest.to_owned());
            out.push(rest.to_lowercase());
        }
    }
    out.retain(|s| s.len() >= 16);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_appears_in_logs_or_error_bodies() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("dev.log");
    let dev = spawn_dev_logging(&dir.path().join("dev"), &[], Some(&log)).await;
    let info = dev.info.clone();
    let fac = info["facilitatorUrl"].as_str().unwrap().to_owned();
    let api = info["apiUrl"].as_str().unwrap().to_owned();
    let api_key = info["apiKey"].as_str().unwrap().to_owned();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut secrets: Vec<(String, String)> = info["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                format!("{} private key", a["role"].as_str().unwrap()),
                a["privateKey"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    secrets.push(("API key".into(), api_key.clone()));
    secrets.push((
        "webhook-secrets key".into(),
        info["webhookSecretsKey"]
            .as_str()
            .expect("dev.json holds the webhook-secrets key")
            .to_owned(),
    ));
    let mut bodies: Vec<(String, String)> = Vec::new();

    // A one-time payment (the payer signs; the relayer settles; the proof key signs).
    let agent = crate::dev::agent(&info, 0);
    let paid = agent
        .pay(PayRequest::get(&format!("{api}/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(paid.status, 200);

    // A second provider registers by signature and gets its own key.
    let provider = PrivateKeySigner::random();
    secrets.push((
        "registered provider's private key".into(),
        provider.to_bytes().to_string(),
    ));
    let second_key = crate::facilitator::register_provider(&http, &fac, &provider).await;
    secrets.push(("registered API key".into(), second_key.clone()));

    // Webhook secrets: created, then rotated.
    let r: Value = http
        .post(format!("{fac}/webhooks/endpoints"))
        .bearer_auth(&api_key)
        .json(&json!({ "url": "http://127.0.0.1:9/hook" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let endpoint = r["id"].as_str().unwrap().to_owned();
    secrets.push((
        "webhook secret".into(),
        r["secret"].as_str().unwrap().into(),
    ));
    let r: Value = http
        .post(format!("{fac}/webhooks/endpoints/{endpoint}/rotate"))
        .bearer_auth(&api_key)
        .json(&json!({ "overlapSecs": 60 }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    secrets.push((
        "rotated webhook secret".into(),
        r["secret"].as_str().unwrap().into(),
    ));

    // A dashboard session.
    let r = http
        .post(format!("{fac}/dashboard/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("apiKey={api_key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    let token = cookie
        .strip_prefix("tollgate_session=")
        .and_then(|c| c.split(';').next())
        .unwrap()
        .to_owned();
    secrets.push(("session token".into(), token.clone()));
    let r = http
        .get(format!("{fac}/dashboard"))
        .header("cookie", format!("tollgate_session={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Wrong and revoked keys, sent where they could be echoed back.
    let wrong = format!("tg_{}", "5a".repeat(32));
    secrets.push(("wrong API key".into(), wrong.clone()));
    for (what, request) in [
        (
            "wrong bearer",
            http.get(format!("{fac}/analytics")).bearer_auth(&wrong),
        ),
        (
            "wrong login",
            http.post(format!("{fac}/dashboard/login"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("apiKey={wrong}")),
        ),
        (
            "malformed bearer",
            http.get(format!("{fac}/events"))
                .header("authorization", format!("Bearer {wrong} trailing")),
        ),
        (
            "revoke with the wrong key",
            http.post(format!("{fac}/providers/keys/revoke"))
                .bearer_auth(&wrong)
                .json(&json!({})),
        ),
    ] {
        let r = request.send().await.unwrap();
        let status = r.status();
        bodies.push((what.into(), r.text().await.unwrap()));
        assert!(status.is_client_error(), "{what}: {status}");
    }
    let r = http
        .post(format!("{fac}/providers/keys/revoke"))
        .bearer_auth(&second_key)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .get(format!("{fac}/events"))
        .bearer_auth(&second_key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    bodies.push(("revoked key".into(), r.text().await.unwrap()));

    // A facilitator on the same chain through a node URL with credentials: it connects, settles
    // a payment, reports ready; then the node goes away and it reports why it is not.
    let node = HostedNode::start(info["rpcUrl"].as_str().unwrap()).await;
    let fac_dir = dir.path().join("facilitator");
    std::fs::create_dir_all(&fac_dir).unwrap();
    let contracts: tollgate_chain::Deployment =
        serde_json::from_value(info["contracts"].clone()).unwrap();
    let config = write_config(&fac_dir, &node.url, &contracts, "");
    let fac_log = dir.path().join("facilitator.log");
    let (fac_child, fac2) = spawn_facilitator_logging(&config, &fac_log).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let payment = payment_with_memo(
        info["chainId"].as_u64().unwrap(),
        contracts.token,
        contracts.router,
        Address::repeat_byte(0x77),
        now,
        B256::repeat_byte(0x77),
    );
    let r = http
        .post(format!("{fac2}/authorize"))
        .json(&json!({ "signedPayment": payment }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    for path in ["/readyz", "/metrics"] {
        let r = http.get(format!("{fac2}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        bodies.push((path.into(), r.text().await.unwrap()));
    }
    assert!(
        node.served.load(Ordering::Relaxed) > 0,
        "the facilitator never reached the node"
    );
    node.stop().await;
    let r = http.get(format!("{fac2}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503, "the node is gone");
    bodies.push(("/readyz with the node gone".into(), r.text().await.unwrap()));
    drop(fac_child);

    // Let the webhook worker try its (unreachable) endpoint and the keeper run once.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("webhook") || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(dev);

    let text = std::fs::read_to_string(&log).unwrap();
    // Kept for reading: target/test-artifacts/secrets/{dev,facilitator}.log.
    let artifacts = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("test-artifacts/secrets");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(artifacts.join("dev.log"), &text).unwrap();
    let fac_text = std::fs::read_to_string(&fac_log).unwrap();
    std::fs::write(artifacts.join("facilitator.log"), &fac_text).unwrap();
    for expected in [
        "TRACE",
        "sqlx::query",
        "provider registered",
        "webhook secret rotated",
        "API key revoked",
    ] {
        assert!(
            text.contains(expected),
            "the log lacks {expected:?}: not the run this test means to scan"
        );
    }
    for expected in ["TRACE", "eth_sendRawTransaction", "node's answer"] {
        assert!(
            fac_text.contains(expected),
            "the facilitator's log lacks {expected:?}: not the run this test means to scan"
        );
    }
    let mut checks: Vec<(String, String)> = secrets
        .iter()
        .flat_map(|(what, secret)| spellings(secret).into_iter().map(|s| (what.clone(), s)))
        .collect();
    for (what, spelling) in [
        ("node password", NODE_PASSWORD.to_owned()),
        ("node password", NODE_PASSWORD_ENCODED.to_owned()),
        ("node password", NODE_PASSWORD_ENCODED.to_lowercase()),
        ("node credentials", basic_credential()),
        ("node path token", NODE_PATH_TOKEN.to_owned()),
        ("node API key", NODE_API_KEY.to_owned()),
        ("node API key", NODE_API_KEY_ENCODED.to_owned()),
        ("node API key", NODE_API_KEY_ENCODED.to_lowercase()),
    ] {
        checks.push((what.into(), spelling));
    }
    // The Basic credential without its scheme.
    checks.push((
        "node credentials".into(),
        basic_credential()
            .trim_start_matches("Basic ")
            .trim_end_matches('=')
            .to_owned(),
    ));
    let mut leaks = Vec::new();
    for (what, spelling) in &checks {
        for (name, log) in [("the log", &text), ("the facilitator's log", &fac_text)] {
            if let Some(line) = log.lines().find(|l| l.contains(spelling.as_str())) {
                leaks.push(format!("{what} in {name}: {line}"));
            }
        }
        for (request, body) in &bodies {
            if body.contains(spelling.as_str()) {
                leaks.push(format!("{what} in the body of {request}: {body}"));
            }
        }
    }
    leaks.dedup();
    assert!(leaks.is_empty(), "secrets leaked:\n{}", leaks.join("\n"));
}
