//! Webhook verification (Standard Webhooks): the gate's `verify_webhook_with` on fuzzed headers,
//! body and secrets, the protocol's `webhook::verify` against a fixed clock, and a property with
//! deliveries signed by our own signer.
//!
//! Input format (so that seeds are readable): newline-separated `webhook-id`,
//! `webhook-timestamp`, `webhook-signature`, the receiver's secrets (space-separated), then the
//! raw body (the rest, newlines included).
//!
//! Invariants: no panic; an accepted delivery carries a `v1` signature equal to the HMAC of one
//! of the secrets; a delivery signed with `signature_header` verifies, and changing any one byte
//! of its body, or its timestamp, makes it fail with `NoMatchingSignature`.
#![no_main]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::{Engine as _, engine::general_purpose::STANDARD};
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use tollgate_gate::{WebhookError, WebhookSecret, verify_webhook, verify_webhook_with};
use tollgate_protocol::webhook::{
    self, DEFAULT_TOLERANCE_SECS, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, sign,
    signature_header,
};

/// The fixed "now" of the clock-independent checks: the timestamp of the Standard Webhooks
/// reference vector (in the seed corpus), so that it verifies.
const FIXED_NOW: u64 = 1_614_265_330;
/// Most secrets tried per input.
const MAX_SECRETS: usize = 4;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(5, |&b| b == b'\n');
    let id = parts.next().unwrap_or_default();
    let timestamp = parts.next().unwrap_or_default();
    let signature = parts.next().unwrap_or_default();
    let secrets_line = std::str::from_utf8(parts.next().unwrap_or_default()).unwrap_or_default();
    let body = parts.next().unwrap_or_default();
    let secrets: Vec<&str> = secrets_line.split(' ').take(MAX_SECRETS).collect();

    arbitrary_delivery(id, timestamp, signature, &secrets, body);
    signed_delivery(data, id, &secrets, body);
});

/// Whatever the headers, body and secrets, verification answers without panicking, and accepts
/// only a delivery that carries a matching HMAC.
fn arbitrary_delivery(
    id: &[u8],
    timestamp: &[u8],
    signature: &[u8],
    secrets: &[&str],
    body: &[u8],
) {
    let mut headers = HeaderMap::new();
    for (name, value) in [
        (WEBHOOK_ID, id),
        (WEBHOOK_TIMESTAMP, timestamp),
        (WEBHOOK_SIGNATURE, signature),
    ] {
        if let Ok(v) = HeaderValue::from_bytes(value) {
            headers.insert(name, v);
        }
    }
    if let Ok(verified) = verify_webhook_with(&headers, body, secrets, DEFAULT_TOLERANCE) {
        let parsed: Vec<WebhookSecret> = secrets.iter().map(|s| s.parse().unwrap()).collect();
        assert_matching_signature(
            &parsed,
            verified.id(),
            verified.timestamp(),
            signature,
            body,
        );
        let _ = verified.event();
    }

    // The same check against a fixed clock, with the secrets that parse.
    let (Ok(id), Ok(ts), Ok(sig)) = (
        std::str::from_utf8(id),
        std::str::from_utf8(timestamp),
        std::str::from_utf8(signature),
    ) else {
        return;
    };
    let parsed: Vec<WebhookSecret> = secrets.iter().filter_map(|s| s.parse().ok()).collect();
    match webhook::verify(
        &parsed,
        id,
        ts,
        sig,
        body,
        FIXED_NOW,
        DEFAULT_TOLERANCE_SECS,
    ) {
        Ok(()) => {
            let ts: u64 = ts.parse().expect("an accepted timestamp is a u64");
            assert!(ts.abs_diff(FIXED_NOW) <= DEFAULT_TOLERANCE_SECS);
            assert_matching_signature(&parsed, id, ts, sig.as_bytes(), body);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

const DEFAULT_TOLERANCE: Duration = Duration::from_secs(DEFAULT_TOLERANCE_SECS);

fn assert_matching_signature(
    secrets: &[WebhookSecret],
    id: &str,
    timestamp: u64,
    header: &[u8],
    body: &[u8],
) {
    let header = std::str::from_utf8(header).expect("an accepted header is text");
    let listed: Vec<Vec<u8>> = header
        .split(' ')
        .filter_map(|e| e.strip_prefix("v1,"))
        .filter_map(|s| STANDARD.decode(s).ok())
        .collect();
    let matches = secrets.iter().any(|secret| {
        let ours = sign(secret, id, timestamp, body);
        let ours = STANDARD
            .decode(&ours["v1,".len()..])
            .expect("our own base64");
        listed.contains(&ours)
    });
    assert!(
        matches,
        "a delivery without a matching signature was accepted"
    );
}

/// Our signer's deliveries verify; a one-byte change of the body, or another timestamp, does not.
fn signed_delivery(data: &[u8], id: &[u8], secrets: &[&str], body: &[u8]) {
    let secret = secrets
        .iter()
        .find_map(|s| s.parse::<WebhookSecret>().ok())
        .unwrap_or_else(|| {
            let mut key = [0x5a_u8; 32];
            for (k, d) in key.iter_mut().zip(data) {
                *k ^= d;
            }
            WebhookSecret::from_bytes(&key).expect("32 bytes is a valid key")
        });
    // The sender's ids are visible ASCII without `.`; keep the input's id when it is one.
    let id = std::str::from_utf8(id)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && b != b'.'))
        .unwrap_or("msg_fuzz");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let other = WebhookSecret::from_bytes(&[7; 24]).expect("24 bytes is a valid key");
    // Signed during a rotation: both secrets listed.
    let signature = signature_header(&[other, secret.clone()], id, now, body);
    let headers = |ts: u64| {
        let mut h = HeaderMap::new();
        h.insert(WEBHOOK_ID, HeaderValue::from_str(id).unwrap());
        h.insert(WEBHOOK_TIMESTAMP, HeaderValue::from(ts));
        h.insert(
            WEBHOOK_SIGNATURE,
            HeaderValue::from_str(&signature).unwrap(),
        );
        h
    };
    let text = secret.expose_secret();
    let verified = verify_webhook(&headers(now), body, &text).expect("our own delivery verifies");
    assert_eq!(verified.id(), id);
    assert_eq!(verified.timestamp(), now);
    assert_eq!(verified.body(), body);

    assert!(matches!(
        verify_webhook(&headers(now - 1), body, &text),
        Err(WebhookError::NoMatchingSignature)
    ));
    if body.is_empty() {
        return;
    }
    let mut changed = body.to_vec();
    let at = data.iter().map(|&b| usize::from(b)).sum::<usize>() % changed.len();
    changed[at] ^= 1 << (data.len() % 8);
    assert!(matches!(
        verify_webhook(&headers(now), &changed, &text),
        Err(WebhookError::NoMatchingSignature)
    ));
}
