//! `tollgate dev` and `tollgate gateway` as processes, paid by the agent SDK: dev.json, the 402
//! superset body, a paid request, state kept across a restart, and a gateway in front of an
//! upstream API that streams bodies and keeps headers.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use alloy::primitives::{Address, U256};
use axum::{Router, body::Bytes, http::HeaderMap, routing::any};
use tokio::process::{Child, Command};
use tollgate_agent::{Agent, Amount, PayRequest, SpendPolicy};
use tollgate_chain::contracts::{self, Token};

pub(crate) struct Dev {
    child: Child,
    pub(crate) info: serde_json::Value,
}

impl Dev {
    /// Kills the process and waits for it to be gone (its state directory's lock with it), as a
    /// restart on the same directory needs.
    pub(crate) async fn stop(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

/// The first "payer" account of a dev.json.
pub(crate) fn payer(info: &serde_json::Value) -> &serde_json::Value {
    info["accounts"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["role"] == "payer"))
        .unwrap_or_else(|| panic!("dev.json names no payer: {info}"))
}

pub(crate) async fn spawn_dev(dir: &Path, extra: &[&str]) -> Dev {
    spawn_dev_logging(dir, extra, None).await
}

/// [`spawn_dev`] with its log (stderr) written to `log` at `TOLLGATE_LOG=trace`.
pub(crate) async fn spawn_dev_logging(dir: &Path, extra: &[&str], log: Option<&Path>) -> Dev {
    let summary = dir.join("dev.json");
    let stamp = std::fs::metadata(&summary).and_then(|m| m.modified()).ok();
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .args(["dev", "--port-base", "0", "--state-dir"])
        .arg(dir)
        .args(extra)
        .env("NO_COLOR", "1");
    match log {
        Some(log) => command
            .env("TOLLGATE_LOG", "trace")
            .stderr(std::fs::File::create(log).unwrap()),
        None => command.stderr(Stdio::null()),
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tollgate dev");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let fresh = std::fs::metadata(&summary).and_then(|m| m.modified()).ok();
        // dev.json is written before the servers start: wait for the API to answer.
        if fresh.is_some()
            && fresh != stamp
            && let Ok(info) = serde_json::from_slice::<serde_json::Value>(
                &std::fs::read(&summary).unwrap_or_default(),
            )
        {
            let api = info["apiUrl"].as_str().unwrap().to_owned();
            if reqwest::get(format!("{api}/healthz"))
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return Dev { child, info };
            }
        }
        assert!(Instant::now() < deadline, "tollgate dev did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An agent paying with the `payer`-th payer account of a `tollgate dev` summary.
pub(crate) fn agent(info: &serde_json::Value, payer: usize) -> Agent {
    let key = info["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["role"] == "payer")
        .nth(payer)
        .unwrap()["privateKey"]
        .as_str()
        .unwrap()
        .to_owned();
    Agent::from_hex_key(
        &key,
        SpendPolicy::new(
            Amount::from_units(1_000_000),
            Amount::from_units(10_000_000),
        ),
    )
    .unwrap()
}

async fn balance(info: &serde_json::Value, who: Address) -> U256 {
    let chain = tollgate_testkit::connect(
        info["rpcUrl"].as_str().unwrap(),
        info["chainId"].as_u64().unwrap(),
        &[],
    )
    .await
    .unwrap();
    let token: Address = info["contracts"]["token"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    contracts::read(&chain, token, &Token::balanceOfCall { account: who })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_pays_and_keeps_state() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let dev = spawn_dev(dir.path(), &[]).await;
    let info = dev.info.clone();
    for key in [
        "chainId",
        "network",
        "rpcUrl",
        "facilitatorUrl",
        "apiUrl",
        "contracts",
        "apiKey",
    ] {
        assert!(!info[key].is_null(), "dev.json lacks {key}");
    }
    let roles: Vec<&str> = info["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["role"].as_str().unwrap())
        .collect();
    assert!(roles.contains(&"relayer") && roles.contains(&"provider"));
    assert!(roles.iter().filter(|r| **r == "payer").count() >= 2);
    let api = info["apiUrl"].as_str().unwrap().to_owned();

    // Unpaid: the superset 402 that x402 clients and the spec's clients both read.
    let r = reqwest::get(format!("{api}/v1/quote")).await.unwrap();
    assert_eq!(r.status(), 402);
    // MPP beside x402: an EVM charge challenge on the same price, token and payee.
    let challenges = tollgate_protocol::mpp::Challenge::parse_all(
        r.headers()
            .get_all("www-authenticate")
            .iter()
            .map(|v| v.to_str().unwrap()),
    );
    let challenge = challenges[0].as_ref().expect("an MPP challenge");
    assert_eq!(
        (challenge.method.as_str(), challenge.intent.as_str()),
        ("evm", "charge")
    );
    let request = challenge.charge_request().unwrap();
    assert_eq!(request.amount.to_string(), "500000");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["version"], "1");
    assert_eq!(body["x402Version"], 1);
    assert_eq!(body["accepts"][0]["amount"], "500000");
    assert_eq!(body["accepts"][0]["maxAmountRequired"], "500000");
    assert_eq!(
        body["accepts"][0]["service"]["facilitator"],
        info["facilitatorUrl"]
    );
    assert!(!body.to_string().contains("null"));

    // Paid by an agent.
    let provider: Address = info["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["role"] == "provider")
        .unwrap()["address"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let before = balance(&info, provider).await;
    let paid = agent(&info, 0)
        .pay(PayRequest::get(&format!("{api}/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(paid.status, 200);
    assert_eq!(
        paid.json::<serde_json::Value>().unwrap()["symbol"],
        "ETH/USD"
    );
    assert!(paid.headers.contains_key("x-payment-response"));
    let after = balance(&info, provider).await;
    assert_eq!(
        after,
        before + U256::from(500_000 - 1_000),
        "the provider got the price minus the fee, once"
    );

    // Restart on the same state directory: same chain, same key, balances kept.
    dev.stop().await;
    let dev2 = spawn_dev(dir.path(), &[]).await;
    assert_eq!(dev2.info["apiKey"], info["apiKey"]);
    assert_eq!(dev2.info["planId"], info["planId"], "the same demo plan");
    assert_eq!(balance(&dev2.info, provider).await, after);
    let api2 = dev2.info["apiUrl"].as_str().unwrap().to_owned();
    let again = agent(&dev2.info, 1)
        .pay(PayRequest::get(&format!("{api2}/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(again.status, 200);
}

/// The demo plan: `GET /v1/report` offers it beside the one-time price, a subscriber is served
/// on its id, and `POST /v1/process` deducts 0.10 per call from the overage allowance until the
/// cap is reached (402 `AllowanceExhausted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_demo_plan_serves_subscribers_and_meters_process() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let dev = spawn_dev(dir.path(), &[]).await;
    let info = &dev.info;
    let api = info["apiUrl"].as_str().unwrap();
    let plan_id: alloy::primitives::B256 = info["planId"].as_str().unwrap().parse().unwrap();

    let r = reqwest::get(format!("{api}/v1/report")).await.unwrap();
    assert_eq!(r.status(), 402);
    let body: serde_json::Value = r.json().await.unwrap();
    let offers = body["accepts"].as_array().unwrap();
    // One entry per scheme: the one-time price (subscribing preferred), then the plan.
    assert_eq!(offers.len(), 2, "{body}");
    assert_eq!(offers[0]["scheme"], "exact", "{body}");
    assert_eq!(offers[0]["amount"], "1000000", "the one-time price: {body}");
    assert_eq!(offers[0]["service"]["subscriptionScheme"], true, "{body}");
    let sub = &offers[1];
    assert_eq!(sub["scheme"], "subscription", "{body}");
    assert_eq!(sub["service"]["planId"], info["planId"]);
    assert_eq!(sub["plan"]["amount"], "5000000");

    let key = crate::dev::payer(info)["privateKey"]
        .as_str()
        .unwrap()
        .to_owned();
    let subscriber = Agent::from_hex_key(
        &key,
        SpendPolicy::new(
            Amount::from_units(5_000_000),
            Amount::from_units(10_000_000),
        ),
    )
    .unwrap();
    let subscription = subscriber
        .subscribe(
            tollgate_agent::Subscribe::new(plan_id, Amount::from_units(250_000))
                .facilitator(info["facilitatorUrl"].as_str().unwrap()),
        )
        .await
        .unwrap();
    let id = subscription.id.to_string();
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{api}/v1/report"))
        .header("x-service-sub", &id)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for _ in 0..2 {
        let r = http
            .post(format!("{api}/v1/process"))
            .header("x-service-sub", &id)
            .body("payload")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["metered"], "100000");
    }
    let r = http
        .post(format!("{api}/v1/process"))
        .header("x-service-sub", &id)
        .body("payload")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 402);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"], "AllowanceExhausted");
}

/// An upstream API that echoes what it received: method, path, a custom header, the body.
async fn upstream() -> (String, tokio::task::JoinHandle<()>) {
    let app = Router::new().fallback(any(|method: axum::http::Method, uri: axum::http::Uri, headers: HeaderMap, body: Bytes| async move {
        axum::Json(serde_json::json!({
            "method": method.as_str(),
            "path": uri.path(),
            "query": uri.query(),
            "custom": headers.get("x-custom").and_then(|v| v.to_str().ok()),
            "bytes": body.len(),
        }))
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (
        url,
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_gates_an_upstream_api() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let dev = spawn_dev(&dir.path().join("dev"), &[]).await;
    let info = &dev.info;
    let (up, _up_task) = upstream().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let provider = Address::repeat_byte(0x61);
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:{port}"
upstream = "{up}"
[gate]
network = "{network}"
token = "{token}"
pay_to = "{provider}"
facilitator = "{facilitator}"
memo_store = "sqlite://{memos}"
[server]
header_read_timeout_secs = 1
[[routes]]
prefix = "/v1/search"
price = "20000"
[[routes]]
prefix = "/healthz"
free = true
"#,
            network = info["network"].as_str().unwrap(),
            token = info["contracts"]["token"].as_str().unwrap(),
            facilitator = info["facilitatorUrl"].as_str().unwrap(),
            memos = dir.path().join("memos.db").display(),
        ),
    )
    .unwrap();
    let _gateway = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["gateway", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let gw = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while reqwest::get(format!("{gw}/healthz"))
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "gateway did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        reqwest::get(format!("{gw}/v1/search?q=x"))
            .await
            .unwrap()
            .status(),
        402
    );
    assert_eq!(
        reqwest::get(format!("{gw}/elsewhere"))
            .await
            .unwrap()
            .status(),
        404
    );

    // Paths the upstream would resolve to the paid prefix are refused before routing, instead of
    // being priced by the free `/healthz` prefix and served from `/v1/search`. Sent raw: HTTP
    // clients normalize dot segments themselves.
    for path in [
        "/healthz/../v1/search",
        "/healthz/%2e%2E/v1/search",
        "/healthz/..;/v1/search",
        "/healthz%2f..%2fv1%2fsearch",
    ] {
        assert_eq!(raw_get(port, path).await, 400, "{path}");
    }
    assert_eq!(raw_get(port, "/healthz/a.b").await, 200);

    // The gateway's server limits ([server]): a slow client is cut off, oversized headers 431.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: g\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut rest))
            .await
            .expect("the gateway closes a connection whose header never ends")
            .unwrap();
        let big = reqwest::Client::new()
            .get(format!("{gw}/healthz"))
            .header("x-big", "a".repeat(20_000))
            .send()
            .await
            .unwrap();
        assert_eq!(big.status(), 431);
    }

    let body = vec![7u8; 300_000];
    let req = PayRequest::post(&format!("{gw}/v1/search/deep?q=rust"), body.clone())
        .unwrap()
        .header("x-custom".parse().unwrap(), "kept".parse().unwrap());
    let paid = agent(info, 0).pay(req).await.unwrap();
    assert_eq!(paid.status, 200);
    let echo: serde_json::Value = paid.json().unwrap();
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["path"], "/v1/search/deep");
    assert_eq!(echo["query"], "q=rust");
    assert_eq!(echo["custom"], "kept");
    assert_eq!(echo["bytes"], body.len());
    assert!(paid.headers.contains_key("x-payment-response"));
    assert_eq!(balance(info, provider).await, U256::from(20_000 - 1_000));
}

/// The status code of `GET {path}` sent byte for byte, without the normalization of an HTTP
/// client.
async fn raw_get(port: u16, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let head = String::from_utf8_lossy(&response);
    head.split(' ').nth(1).unwrap().parse().unwrap()
}

/// `tollgate webhooks` against `tollgate dev` (dev mode: a loopback endpoint is allowed): create
/// prints the secret once, list shows the endpoint without it, rotate prints a new secret,
/// delete removes it; a bad event type is refused with the facilitator's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_cli_manages_endpoints() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let dev = spawn_dev(dir.path(), &[]).await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("webhooks")
            .args(args)
            .args([
                "--facilitator",
                dev.info["facilitatorUrl"].as_str().unwrap(),
            ])
            .env("TOLLGATE_API_KEY", dev.info["apiKey"].as_str().unwrap())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stdout, stderr)
    };
    let (ok, out, err) = run(&[
        "create",
        "--url",
        "http://127.0.0.1:9/hook",
        "--events",
        "payment.settled,plan.created",
    ]);
    assert!(ok, "{err}");
    let created: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(created["secret"].as_str().unwrap().starts_with("whsec_"));
    assert_eq!(
        created["events"],
        serde_json::json!(["payment.settled", "plan.created"])
    );
    let id = created["id"].as_str().unwrap().to_owned();

    let (ok, out, _) = run(&["list"]);
    assert!(ok);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list[0]["id"], serde_json::json!(id));
    assert!(list[0].get("secret").is_none());

    let (ok, out, _) = run(&["rotate", &id, "--overlap", "60"]);
    assert!(ok);
    let rotated: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_ne!(rotated["secret"], created["secret"]);

    let (ok, _, err) = run(&["update", &id, "--events", "nope"]);
    assert!(!ok);
    assert!(err.contains("unknown event type"), "{err}");

    let (ok, _, _) = run(&["delete", &id]);
    assert!(ok);
    let (ok, out, _) = run(&["list"]);
    assert!(ok);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap(),
        serde_json::json!([])
    );
}

/// Issue 13: `tollgate dev` creates its state directory 0700 and every file in it that holds
/// keys (dev.json: the dev accounts' keys, the API key, the webhook-secrets key; the databases
/// and their -wal/-shm files: API key hashes, sealed webhook secrets) 0600. Webhook secrets are
/// stored sealed under the generated key, which a restart keeps.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_state_files_are_private_and_webhook_secrets_sealed() {
    use std::os::unix::fs::PermissionsExt as _;

    tollgate_chain::install_crypto_provider();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    let dev = spawn_dev(&dir, &[]).await;
    let fac = dev.info["facilitatorUrl"].as_str().unwrap().to_owned();
    let key = dev.info["webhookSecretsKey"].as_str().unwrap().to_owned();
    assert_eq!(key.len(), 64, "a 32-byte key in dev.json");
    let http = reqwest::Client::new();
    let created: serde_json::Value = http
        .post(format!("{fac}/webhooks/endpoints"))
        .bearer_auth(dev.info["apiKey"].as_str().unwrap())
        .json(&serde_json::json!({ "url": "http://127.0.0.1:9/hook" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let secret = created["secret"].as_str().unwrap().to_owned();

    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700, "the state directory");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            files.push(entry.path());
        }
    }
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "dev.json",
        "facilitator.db",
        "facilitator.db-wal",
        "facilitator.db-shm",
        "gate-memos.db",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    for file in &files {
        assert_eq!(mode(file), 0o600, "{}: {:03o}", file.display(), mode(file));
    }

    // The store holds the secret sealed, not the secret.
    let store = tollgate_facilitator::store::SqliteStore::connect(&format!(
        "sqlite://{}",
        dir.join("facilitator.db").display()
    ))
    .await
    .unwrap();
    let stored = tollgate_facilitator::store::Store::webhook_secrets(&store)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert!(
        stored[0].secret.starts_with("enc1:"),
        "{}",
        stored[0].secret
    );
    assert!(!stored[0].secret.contains(&secret["whsec_".len()..]));
    drop(store);

    // A restart keeps the key (so the sealed secret still opens: the facilitator starts) and
    // the files' modes.
    dev.stop().await;
    let dev = spawn_dev(&dir, &[]).await;
    assert_eq!(dev.info["webhookSecretsKey"].as_str().unwrap(), key);
    assert_eq!(mode(&dir.join("dev.json")), 0o600);
}

/// The issue's report: a second `tollgate dev` on a state directory in use restored the journal
/// and then failed with an unrelated 503. Now it stops at once, before touching the journal or
/// the database, naming the running one's PID and ports; the first one is undisturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_dev_on_the_same_state_dir_stops_at_once_naming_the_first() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let dev = spawn_dev(dir.path(), &[]).await;
    let summary = std::fs::read(dir.path().join("dev.json")).unwrap();
    let started = Instant::now();
    let second = tokio::time::timeout(
        Duration::from_secs(20),
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["dev", "--port-base", "0", "--state-dir"])
            .arg(dir.path())
            .env("NO_COLOR", "1")
            .env_remove("TOLLGATE_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the second tollgate dev stops by itself")
    .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "at once, not after starting: {stderr}"
    );
    let pid = dev.child.id().unwrap();
    assert!(stderr.contains(&format!("pid {pid}")), "{stderr}");
    for url in ["rpcUrl", "facilitatorUrl", "apiUrl"] {
        let url = dev.info[url].as_str().unwrap();
        assert!(stderr.contains(url), "{url} in: {stderr}");
    }
    assert!(!stderr.contains("relayer"), "{stderr}");
    assert!(
        dir.path().join("devnet").is_dir(),
        "the journal is still there"
    );

    // The first one is undisturbed: same summary, still serving.
    assert_eq!(std::fs::read(dir.path().join("dev.json")).unwrap(), summary);
    let api = dev.info["apiUrl"].as_str().unwrap();
    let r = reqwest::get(format!("{api}/v1/quote")).await.unwrap();
    assert_eq!(r.status(), 402);
    let paid = agent(&dev.info, 0)
        .pay(PayRequest::get(&format!("{api}/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(paid.status, 200);
}
