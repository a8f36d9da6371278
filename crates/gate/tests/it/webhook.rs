//! Standard Webhooks interop with an independent implementation: the reference JavaScript library
//! (`standardwebhooks@1.1.1` from npm, pinned in `scripts/install-tools`), through
//! `tests/interop/webhook-sign.mjs` and `tests/interop/webhook-verify.mjs`.
//!
//! Without `node` (Node 20) the tests fail with the install command, never skip. With node but
//! without the pinned package the tests fail and say to run `scripts/install-tools`.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{SystemTime, UNIX_EPOCH},
};

use http::{HeaderMap, HeaderValue};
use tollgate_gate::{
    EventData, EventType, WebhookError, WebhookEvent, verify_webhook, verify_webhook_with,
};
use tollgate_protocol::webhook::{
    DEFAULT_TOLERANCE_SECS, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, WebhookSecret, sign,
    signature_header,
};

const MSG_ID: &str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";
/// A Tollgate event, with a multi-byte character so that the body is not plain ASCII.
const BODY: &str = r#"{"id":"msg_2KWPBgLlAfxdpx2AI54pPJ85f4W","type":"subscription.renewal_stuck","createdAt":1735689600,"data":{"network":"base","subscriptionId":"0x2222222222222222222222222222222222222222222222222222222222222222","cycle":3,"attempts":5,"error":"café"}}"#;
const TAMPERED: &str = r#"{"id":"msg_2KWPBgLlAfxdpx2AI54pPJ85f4W","type":"subscription.renewal_stuck","createdAt":1735689600,"data":{"network":"base","subscriptionId":"0x2222222222222222222222222222222222222222222222222222222222222222","cycle":4,"attempts":5,"error":"café"}}"#;

/// The `tests/interop` scripts directory, after checking for `node` and the pinned package (a
/// missing one fails the test with the install command, never skips it).
fn interop_scripts() -> PathBuf {
    tollgate_testkit::peer::interop_scripts(&["standardwebhooks"])
}

/// Runs `node <scripts>/<script> <args>` with `stdin` as its standard input.
fn node(scripts: &Path, script: &str, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(tollgate_testkit::peer::node())
        .arg(scripts.join(script))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn node {script}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The reference library's `verify`: `Ok` when it accepts, `Err(its message)` when it refuses.
/// Panics when the script itself fails (exit code 2), so a broken call never passes as a refusal.
fn js_verify(
    scripts: &Path,
    secret: &WebhookSecret,
    ts: u64,
    header: &str,
    body: &str,
) -> Result<(), String> {
    js_verify_id(scripts, secret, MSG_ID, ts, header, body)
}

/// [`js_verify`] of a delivery with the `webhook-id` `msg_id`.
fn js_verify_id(
    scripts: &Path,
    secret: &WebhookSecret,
    msg_id: &str,
    ts: u64,
    header: &str,
    body: &str,
) -> Result<(), String> {
    let secret = secret.expose_secret();
    let ts = ts.to_string();
    let out = node(
        scripts,
        "webhook-verify.mjs",
        &[&secret, msg_id, &ts, header],
        body,
    );
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match out.status.code() {
        Some(0) if stdout == "valid" => Ok(()),
        Some(1) if stdout.starts_with("invalid: ") => Err(stdout),
        _ => panic!(
            "webhook-verify.mjs failed ({}): {stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The reference library's `sign` with each of `secrets`: a `webhook-signature` value.
fn js_sign(
    scripts: &Path,
    msg_id: &str,
    ts: u64,
    secrets: &[&WebhookSecret],
    body: &str,
) -> String {
    let ts = ts.to_string();
    let secrets: Vec<String> = secrets.iter().map(|s| s.expose_secret()).collect();
    let mut args = vec![msg_id, ts.as_str()];
    args.extend(secrets.iter().map(String::as_str));
    let out = node(scripts, "webhook-sign.mjs", &args, body);
    assert!(
        out.status.success(),
        "webhook-sign.mjs failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn headers(ts: u64, signature: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(WEBHOOK_ID, HeaderValue::from_static(MSG_ID));
    headers.insert(WEBHOOK_TIMESTAMP, ts.to_string().parse().unwrap());
    headers.insert(WEBHOOK_SIGNATURE, signature.parse().unwrap());
    headers
}

#[test]
fn the_reference_vector_matches_the_library() {
    let scripts = interop_scripts();
    // The reference library's own "sign function works" vector.
    let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let body = r#"{"test": 2432232314}"#;
    let expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    let ours = sign(
        &secret,
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1_614_265_330,
        body.as_bytes(),
    );
    assert_eq!(ours, expected);
    let theirs = js_sign(
        &scripts,
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1_614_265_330,
        &[&secret],
        body,
    );
    assert_eq!(theirs, expected);
}

#[test]
fn our_signature_passes_the_reference_verifier() {
    let scripts = interop_scripts();
    let secret = WebhookSecret::generate();
    let ts = now();
    let header = signature_header(std::slice::from_ref(&secret), MSG_ID, ts, BODY.as_bytes());
    js_verify(&scripts, &secret, ts, &header, BODY).unwrap();
    // Its tolerance is five minutes too.
    let late = ts - DEFAULT_TOLERANCE_SECS - 60;
    let header = signature_header(std::slice::from_ref(&secret), MSG_ID, late, BODY.as_bytes());
    let refused = js_verify(&scripts, &secret, late, &header, BODY).unwrap_err();
    assert!(refused.contains("too old"), "{refused}");
}

#[test]
fn the_reference_signature_passes_verify_webhook() {
    let scripts = interop_scripts();
    let secret = WebhookSecret::generate();
    let ts = now();
    let header = js_sign(&scripts, MSG_ID, ts, &[&secret], BODY);
    assert!(header.starts_with("v1,"), "{header}");
    let verified = verify_webhook(
        &headers(ts, &header),
        BODY.as_bytes(),
        &secret.expose_secret(),
    )
    .unwrap();
    assert_eq!(verified.id(), MSG_ID);
    assert_eq!(verified.timestamp(), ts);
    let event = verified.event().unwrap();
    assert_eq!(event.id, MSG_ID);
    assert_eq!(
        event.event_type(),
        Some(EventType::SubscriptionRenewalStuck)
    );
    assert_eq!(event.created_at, 1_735_689_600);
    let EventData::SubscriptionRenewalStuck(stuck) = &event.data else {
        panic!("{event:?}")
    };
    assert_eq!(stuck.error, "café");
}

/// Every golden event (`crates/protocol/tests/vectors/webhooks/`), as Tollgate writes it and
/// signed by Tollgate, verifies with the reference library; signed by the reference library, it
/// passes `verify_webhook` and reads back as the same typed [`WebhookEvent`].
#[test]
fn every_golden_event_interoperates_and_reads_back_typed() {
    let scripts = interop_scripts();
    let secret = WebhookSecret::generate();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../protocol/tests/vectors/webhooks");
    for &t in EventType::ALL {
        let golden = std::fs::read_to_string(dir.join(format!("{t}.json"))).unwrap();
        let event: WebhookEvent = serde_json::from_str(&golden).unwrap();
        // The body as the facilitator sends it.
        let body = serde_json::to_string(&event).unwrap();
        let ts = now();
        let ours = signature_header(
            std::slice::from_ref(&secret),
            &event.id,
            ts,
            body.as_bytes(),
        );
        js_verify_id(&scripts, &secret, &event.id, ts, &ours, &body)
            .unwrap_or_else(|e| panic!("{t}: {e}"));

        let theirs = js_sign(&scripts, &event.id, ts, &[&secret], &body);
        let mut headers = headers(ts, &theirs);
        headers.insert(WEBHOOK_ID, HeaderValue::from_str(&event.id).unwrap());
        let verified = verify_webhook(&headers, body.as_bytes(), &secret.expose_secret())
            .unwrap_or_else(|e| panic!("{t}: {e}"));
        let read = verified.event().unwrap_or_else(|e| panic!("{t}: {e}"));
        assert_eq!(read, event, "{t}");
        assert_eq!(read.event_type(), Some(t));
        assert!(!matches!(read.data, EventData::Other { .. }), "{t}");
        let original: serde_json::Value = serde_json::from_str(&golden).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), original, "{t}");
    }
}

#[test]
fn a_rotation_header_passes_with_either_secret() {
    let scripts = interop_scripts();
    let old = WebhookSecret::generate();
    let new = WebhookSecret::generate();
    let stranger = WebhookSecret::generate();
    let ts = now();

    // Ours, checked by the reference library holding either secret.
    let header = signature_header(&[new.clone(), old.clone()], MSG_ID, ts, BODY.as_bytes());
    js_verify(&scripts, &old, ts, &header, BODY).unwrap();
    js_verify(&scripts, &new, ts, &header, BODY).unwrap();
    js_verify(&scripts, &stranger, ts, &header, BODY).unwrap_err();

    // The reference library's, checked by ours holding either secret (or both).
    let header = js_sign(&scripts, MSG_ID, ts, &[&new, &old], BODY);
    assert_eq!(header.split(' ').count(), 2, "{header}");
    let map = headers(ts, &header);
    let (old, new) = (old.expose_secret(), new.expose_secret());
    for secret in [&old, &new] {
        verify_webhook(&map, BODY.as_bytes(), secret).unwrap();
    }
    verify_webhook_with(
        &map,
        BODY.as_bytes(),
        &[&stranger.expose_secret(), &old],
        std::time::Duration::from_secs(60),
    )
    .unwrap();
    assert!(matches!(
        verify_webhook(&map, BODY.as_bytes(), &stranger.expose_secret()),
        Err(WebhookError::NoMatchingSignature)
    ));
}

#[test]
fn a_tampered_body_fails_both() {
    let scripts = interop_scripts();
    let secret = WebhookSecret::generate();
    let ts = now();

    let ours = signature_header(std::slice::from_ref(&secret), MSG_ID, ts, BODY.as_bytes());
    let refused = js_verify(&scripts, &secret, ts, &ours, TAMPERED).unwrap_err();
    assert!(refused.contains("No matching signature"), "{refused}");

    let theirs = js_sign(&scripts, MSG_ID, ts, &[&secret], BODY);
    assert_eq!(theirs, ours, "the same inputs sign the same");
    assert!(matches!(
        verify_webhook(
            &headers(ts, &theirs),
            TAMPERED.as_bytes(),
            &secret.expose_secret()
        ),
        Err(WebhookError::NoMatchingSignature)
    ));
}
