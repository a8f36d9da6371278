//! No secret reaches a log or an error body. `tollgate dev` runs at `TOLLGATE_LOG=trace` (every
//! crate's most verbose level) through a session that touches every kind of secret the service
//! holds: the dev accounts' private keys (payers, provider, relayer, proof signer), the provider
//! API key and a second one registered by signature, webhook signing secrets (created and
//! rotated), a dashboard session token, plus wrong keys sent on purpose. Then the whole log and
//! every error body is scanned for each secret, in the spellings it could take.
//!
//! (`tollgate dev` prints its keys on stdout by design, as a development tool's guide; the log is
//! stderr.)

use std::time::{Duration, Instant};

use alloy::signers::local::PrivateKeySigner;
use serde_json::{Value, json};
use tollgate_agent::PayRequest;

use crate::dev::spawn_dev_logging;

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
    // Kept for reading: target/test-artifacts/secrets/dev.log.
    let artifacts = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("test-artifacts/secrets");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(artifacts.join("dev.log"), &text).unwrap();
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
    let mut leaks = Vec::new();
    for (what, secret) in &secrets {
        for spelling in spellings(secret) {
            if let Some(line) = text.lines().find(|l| l.contains(&spelling)) {
                leaks.push(format!("{what} in the log: {line}"));
            }
            for (request, body) in &bodies {
                if body.contains(&spelling) {
                    leaks.push(format!("{what} in the error body of {request}"));
                }
            }
        }
    }
    leaks.dedup();
    assert!(leaks.is_empty(), "secrets leaked:\n{}", leaks.join("\n"));
}
