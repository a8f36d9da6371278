//! The example configs follow `tollgate dev --port-base` without edits: `tollgate dev` writes
//! STATE_DIR/dev.env (its URLs, for a shell to source), and `tollgate gateway` and `tollgate
//! facilitator` take those variables over their files' values.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use axum::{Router, routing::get};
use tokio::process::Command;

fn example(name: &str) -> String {
    format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `bash -c "set -a; . DEV_ENV; exec COMMAND"` in `dir`, as a reader's shell runs it after
/// sourcing dev.env.
fn sourced(dev_env: &Path, dir: &Path, command: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args([
        "-c",
        &format!(". '{}' && exec {command}", dev_env.display()),
    ])
    .current_dir(dir)
    .env(
        "PATH",
        format!(
            "{}:{}",
            Path::new(env!("CARGO_BIN_EXE_tollgate"))
                .parent()
                .unwrap()
                .display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    )
    .env_remove("TOLLGATE_LOG")
    .env_remove("RUST_LOG")
    .env("NO_COLOR", "1")
    .stdin(Stdio::null())
    .kill_on_drop(true);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_follow_dev_port_base_through_dev_env() {
    tollgate_chain::install_crypto_provider();
    let state = tempfile::tempdir().unwrap();
    let dev = crate::dev::spawn_dev(state.path(), &[]).await;
    let info = &dev.info;
    let dev_env = state.path().join("dev.env");
    let text = std::fs::read_to_string(&dev_env).expect("tollgate dev writes dev.env");
    for (var, key) in [
        ("TOLLGATE_FACILITATOR", "facilitatorUrl"),
        ("TOLLGATE_RPC_URL", "rpcUrl"),
        ("TOLLGATE_API_URL", "apiUrl"),
    ] {
        let line = format!("export {var}={}", info[key].as_str().unwrap());
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }

    // The upstream the example fronts, on a free port, passed the same way.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_url = format!("http://{}", upstream.local_addr().unwrap());
    tokio::spawn(async move {
        let app = Router::new().route("/v1/quote", get(|| async { r#"{"quote":"upstream"}"# }));
        let _ = axum::serve(upstream, app).await;
    });
    let gw = format!("127.0.0.1:{}", crate::free_port());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("gateway.log");
    let _gateway = sourced(
        &dev_env,
        dir.path(),
        &format!("tollgate gateway --config '{}'", example("gateway.toml")),
    )
    .env("TOLLGATE_UPSTREAM_URL", &upstream_url)
    .env("TOLLGATE_GATEWAY_LISTEN", &gw)
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    let quote = format!("http://{gw}/v1/quote");
    let deadline = Instant::now() + Duration::from_secs(30);
    let offer = loop {
        if let Ok(r) = reqwest::get(&quote).await {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not come up: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(offer.status(), 402);
    let body: serde_json::Value = offer.json().await.unwrap();
    assert_eq!(
        body["accepts"][0]["service"]["facilitator"], info["facilitatorUrl"],
        "settled through tollgate dev's facilitator: {body}"
    );

    // Paid through it: the facilitator settles, the upstream answers.
    let payer = crate::dev::payer(info)["privateKey"]
        .as_str()
        .unwrap()
        .to_owned();
    let paid = sourced(
        &dev_env,
        dir.path(),
        &format!("tollgate pay {quote} --max 0.50"),
    )
    .env("TOLLGATE_KEY", &payer)
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&paid.stderr);
    assert!(paid.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&paid.stdout),
        "{\"quote\":\"upstream\"}\n"
    );
    assert!(stderr.contains("paid 0.500000"), "{stderr}");

    // The facilitator example checks out against the same devnet (its rpc_url from dev.env).
    let relayer = info["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["role"] == "relayer")
        .unwrap()["privateKey"]
        .as_str()
        .unwrap()
        .to_owned();
    let checked = sourced(
        &dev_env,
        dir.path(),
        &format!(
            "tollgate facilitator --config '{}' --check",
            example("facilitator.toml")
        ),
    )
    .env("TOLLGATE_RELAYER_KEY", &relayer)
    .env("TOLLGATE_PROOF_KEY", &payer)
    .output()
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
    drop(dev);
}
