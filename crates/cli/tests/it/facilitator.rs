//! `tollgate facilitator` as a process: the helpers the process tests share, and a facilitator
//! killed mid-delivery of webhooks (the crash tests at every failpoint are in `crash.rs`).

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use alloy::primitives::{Address, B256, U256};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};
use tollgate_chain::{
    accounts::dev_accounts,
    authorization::{ReceiveWithAuthorization, router_nonce, sign, token_domain},
};
use tollgate_protocol::{Amount, Eip3009Authorization, SignedPayment};

use crate::devnet::spawn_devnet;

pub(crate) struct Facilitator {
    pub(crate) child: Child,
    pub(crate) url: String,
}

/// `tollgate facilitator --config config`, with `failpoint` armed (the process aborts there).
pub(crate) async fn spawn_facilitator(config: &Path, failpoint: Option<&str>) -> Facilitator {
    let accounts = dev_accounts(10);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(["facilitator", "--config"])
        .arg(config)
        .env("TOLLGATE_RELAYER_KEY", accounts[8].private_key.to_string())
        .env("TOLLGATE_PROOF_KEY", accounts[9].private_key.to_string())
        .env("TOLLGATE_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(name) = failpoint {
        cmd.env("TOLLGATE_FAILPOINT", name);
    }
    let mut child = cmd.spawn().expect("spawn tollgate facilitator");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .expect("facilitator did not start in time")
            .unwrap()
            .expect("facilitator exited before listening");
        if let Some(rest) = line.split("public_url=").nth(1) {
            let url = rest.split_whitespace().next().unwrap().to_owned();
            // Keep draining stderr so the child never blocks on a full pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Facilitator { child, url };
        }
    }
}

/// Registers `signer` as a provider at the facilitator `base` (challenge, signature, register):
/// its API key.
pub(crate) async fn register_provider(
    http: &reqwest::Client,
    base: &str,
    signer: &(impl alloy::signers::SignerSync + alloy::signers::Signer),
) -> String {
    let post = |path: &str, body: serde_json::Value| {
        let request = http.post(format!("{base}{path}")).json(&body);
        async move {
            let r = request.send().await.unwrap();
            assert!(r.status().is_success(), "{}", r.status());
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let challenge = post(
        "/providers/challenge",
        serde_json::json!({ "address": signer.address() }),
    )
    .await;
    let text = challenge["challenge"].as_str().unwrap();
    let signature = signer.sign_message_sync(text.as_bytes()).unwrap();
    let registered = post(
        "/providers/register",
        serde_json::json!({
            "address": signer.address(), "challenge": text,
            "signature": alloy::primitives::hex::encode_prefixed(signature.as_bytes())
        }),
    )
    .await;
    registered["apiKey"].as_str().unwrap().to_owned()
}

pub(crate) fn payment_with_memo(
    chain_id: u64,
    token: Address,
    router: Address,
    pay_to: Address,
    now: u64,
    memo: B256,
) -> SignedPayment {
    let payer = &dev_accounts(10)[3];
    let auth = ReceiveWithAuthorization {
        from: payer.address,
        to: router,
        value: U256::from(500_000),
        validAfter: U256::from(now - 60),
        validBefore: U256::from(now + 600),
        nonce: router_nonce(pay_to, memo, U256::from(1_000)),
    };
    let signature = sign(
        &payer.signer(),
        &auth,
        &token_domain("USD Coin", "2", chain_id, token),
    )
    .unwrap();
    SignedPayment {
        network: "tollgate-devnet".parse().unwrap(),
        token,
        pay_to,
        amount: Amount::from_units(500_000),
        memo,
        authorization: Eip3009Authorization {
            from: payer.address,
            to: router,
            value: Amount::from_units(500_000),
            valid_after: Amount::from_units(now - 60),
            valid_before: Amount::from_units(now + 600),
            nonce: auth.nonce,
            signature,
        },
    }
}

/// A facilitator config for the devnet at `rpc_url`, its store in `dir`, plus `extra` TOML.
pub(crate) fn write_config(
    dir: &Path,
    rpc_url: &str,
    c: &tollgate_chain::Deployment,
    extra: &str,
) -> std::path::PathBuf {
    let config = dir.join("facilitator.toml");
    std::fs::write(
        &config,
        format!(
            r#"{listen}store = "sqlite://{store}"
{extra}
[keys]
relayers = ["env:TOLLGATE_RELAYER_KEY"]
proof = "env:TOLLGATE_PROOF_KEY"
webhook_secrets = "0x5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e"
[[networks]]
name = "tollgate-devnet"
chain_id = 31337
rpc_url = "{rpc_url}"
token = "{token}"
router = "{router}"
subscriptions = "{subs}"
"#,
            listen = if extra.contains("listen =") {
                ""
            } else {
                "listen = \"127.0.0.1:0\"\n"
            },
            store = dir.join("facilitator.db").display(),
            token = c.token,
            router = c.router,
            subs = c.subscriptions,
        ),
    )
    .unwrap();
    config
}

/// Killed (SIGKILL) in the middle of delivering webhooks and restarted on the same store, the
/// facilitator delivers every event: each arrives at least once, always with the same
/// `webhook-id`, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_delivery_delivers_every_event_after_restart() {
    use std::sync::{Arc, Mutex};

    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let devnet = spawn_devnet(&dir.path().join("devnet"), &[]).await;
    let rpc_url = devnet.info.rpc_url.clone().unwrap();
    let c = devnet.info.contracts;
    let config = write_config(
        dir.path(),
        &rpc_url,
        &c,
        "[webhooks]\nallow_private_targets = true\n",
    );
    let http = reqwest::Client::new();
    let mut first = spawn_facilitator(&config, None).await;

    // The provider registers (dev account 5) and adds an endpoint: a slow receiver.
    let provider = &dev_accounts(10)[5];
    let post = |url: String, body: serde_json::Value, key: Option<String>| {
        let http = http.clone();
        async move {
            let mut r = http.post(url).json(&body);
            if let Some(k) = key {
                r = r.bearer_auth(k);
            }
            let r = r.send().await.unwrap();
            assert!(r.status().is_success(), "{}", r.status());
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let key = register_provider(&http, &first.url, &provider.signer()).await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let log = Arc::clone(&log);
            async move {
                tokio::time::sleep(Duration::from_millis(150)).await;
                let id = headers["webhook-id"].to_str().unwrap().to_owned();
                log.lock().unwrap().push(id);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    post(
        format!("{}/webhooks/endpoints", first.url),
        serde_json::json!({ "url": hook, "events": ["payment.settled"] }),
        Some(key.clone()),
    )
    .await;

    // Six payments to the provider: six events.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for i in 1..=6u8 {
        let sp = payment_with_memo(
            31337,
            c.token,
            c.router,
            provider.address,
            now,
            B256::repeat_byte(i),
        );
        post(
            format!("{}/authorize", first.url),
            serde_json::json!({ "signedPayment": sp }),
            None,
        )
        .await;
    }
    // Killed as soon as the first delivery has arrived (the rest are in flight or pending).
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no delivery");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    let before_restart = seen.lock().unwrap().len();
    assert!(
        before_restart < 6,
        "killed mid-delivery ({before_restart} arrived)"
    );

    let second = spawn_facilitator(&config, None).await;
    let events: serde_json::Value = http
        .get(format!("{}/events", second.url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<String> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 6, "{events}");
    loop {
        let got = seen.lock().unwrap().clone();
        if ids.iter().all(|id| got.contains(id)) {
            // At least once each, never an id that is not an event's.
            assert!(got.iter().all(|g| ids.contains(g)), "{got:?}");
            break;
        }
        assert!(
            Instant::now() < deadline + Duration::from_secs(20),
            "missing deliveries: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `tollgate facilitator --config config [--check]` run to its end: exit success, stdout, stderr.
async fn run_facilitator(config: &Path, check: bool) -> (bool, String, String) {
    let accounts = dev_accounts(10);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(["facilitator", "--config"])
        .arg(config)
        .env("TOLLGATE_RELAYER_KEY", accounts[8].private_key.to_string())
        .env("TOLLGATE_PROOF_KEY", accounts[9].private_key.to_string())
        .env("TOLLGATE_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if check {
        cmd.arg("--check");
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the facilitator ran on (it should have checked or refused, then exited)")
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `--check` prints one line per check and exits 0 when nothing fails (the devnet runs no
/// `eth_call` with state overrides: the contracts' code is not compared, a warning), nonzero with
/// the failing line and its fix otherwise; it never serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facilitator_check_reports_each_check_and_exits_by_them() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let devnet = spawn_devnet(&dir.path().join("devnet"), &[]).await;
    let rpc_url = devnet.info.rpc_url.clone().unwrap();
    let c = devnet.info.contracts;
    let config = write_config(dir.path(), &rpc_url, &c, "");

    let (ok, stdout, stderr) = run_facilitator(&config, true).await;
    assert!(ok, "{stdout}\n{stderr}");
    for key in [
        "ok   networks[0].rpc_url",
        "ok   networks[0].token",
        "ok   networks[0].token_name",
        "networks[0].router",
        "networks[0].subscriptions",
        "ok   keys.relayers[0]",
        "warn networks[0].public_rpc_url",
    ] {
        assert!(stdout.contains(key), "{key}: {stdout}");
    }
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert!(!stderr.contains("listening"), "{stderr}");
    assert!(
        !dir.path().join("facilitator.db").exists(),
        "--check opened the store"
    );

    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace(
            &c.router.to_string(),
            &Address::repeat_byte(0x42).to_string(),
        ),
    )
    .unwrap();
    let (ok, stdout, stderr) = run_facilitator(&config, true).await;
    assert!(!ok, "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("FAIL networks[0].router: no contract at"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("tollgate deploy"), "{line}");
}

/// Served, a config naming a node of another chain or a router where there is none is refused
/// at start: nonzero exit, the network and the fix in the error, nothing served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facilitator_refuses_to_start_on_a_wrong_chain_id_or_a_missing_router() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let devnet = spawn_devnet(&dir.path().join("devnet"), &[]).await;
    let rpc_url = devnet.info.rpc_url.clone().unwrap();
    let c = devnet.info.contracts;
    let config = write_config(dir.path(), &rpc_url, &c, "");
    let text = std::fs::read_to_string(&config).unwrap();

    std::fs::write(&config, text.replace("chain_id = 31337", "chain_id = 1234")).unwrap();
    let (ok, _, stderr) = run_facilitator(&config, false).await;
    assert!(!ok, "{stderr}");
    assert!(!stderr.contains("facilitator listening"), "{stderr}");
    assert!(
        stderr.contains("network tollgate-devnet")
            && stderr.contains("serves chain id 31337, not 1234"),
        "{stderr}"
    );

    std::fs::write(
        &config,
        text.replace(
            &c.router.to_string(),
            &Address::repeat_byte(0x42).to_string(),
        ),
    )
    .unwrap();
    let (ok, _, stderr) = run_facilitator(&config, false).await;
    assert!(!ok, "{stderr}");
    assert!(!stderr.contains("facilitator listening"), "{stderr}");
    assert!(
        stderr.contains("networks[0].router: no contract at"),
        "{stderr}"
    );
}
