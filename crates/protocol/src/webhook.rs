//! [Standard Webhooks 1.0](https://www.standardwebhooks.com) signatures, free of I/O.
//!
//! A delivery carries three headers: [`WEBHOOK_ID`] (the message id, stable across retries),
//! [`WEBHOOK_TIMESTAMP`] (the attempt's time, unix seconds) and [`WEBHOOK_SIGNATURE`] (a
//! space-separated list of `v1,<base64 HMAC-SHA256>` values). Each signature is over
//! `{id}.{timestamp}.{body}` with the raw bytes of a [`WebhookSecret`]. During a secret rotation
//! the sender signs with both secrets ([`signature_header`]) and a receiver accepts the delivery
//! when any listed `v1` signature matches any of its secrets ([`verify`]), within a timestamp
//! tolerance (default [`DEFAULT_TOLERANCE_SECS`]).
//!
//! Tollgate's deliveries carry a [`WebhookEvent`] as their JSON body: its [`EventType`] and
//! [`EventData`], one struct per event type (see [`events`]).

use std::str::FromStr;

use base64::{Engine as _, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret as _, SecretSlice};
use serde::{Deserialize, Deserializer};
use sha2::Sha256;

pub mod events;

pub use events::{EventData, EventType, UnknownEventType, WebhookEvent};

/// The message id header: unique per event, the same on every retry (use it as an idempotency
/// key).
pub const WEBHOOK_ID: &str = "webhook-id";
/// The attempt timestamp header: an integer number of seconds since the unix epoch.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The signature header: space-separated `v1,<base64>` signatures (several during a rotation).
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// The prefix of a serialized secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// How far a delivery's timestamp may be from the receiver's clock, either way, by default (the
/// reference libraries' five minutes).
pub const DEFAULT_TOLERANCE_SECS: u64 = 5 * 60;
/// The shortest secret the spec allows, in bytes (192 bits).
pub const MIN_SECRET_LEN: usize = 24;
/// The longest secret the spec allows, in bytes (512 bits).
pub const MAX_SECRET_LEN: usize = 64;
/// The length of the secrets [`WebhookSecret::generate`] makes, in bytes.
pub const GENERATED_SECRET_LEN: usize = 32;

/// The version tag of a symmetric (HMAC-SHA256) signature.
const V1: &str = "v1";

/// A symmetric signing secret: `whsec_` followed by the base64 (standard alphabet, padded) of 24
/// to 64 random bytes; the HMAC key is those bytes.
///
/// The key bytes are held in a [`SecretSlice`], which zeroes them on drop and prints as
/// `[REDACTED]`; [`WebhookSecret::expose_secret`] is the one way to get the `whsec_…` text back
/// (to show it to the endpoint's owner once).
#[derive(Clone, Debug)]
pub struct WebhookSecret {
    key: SecretSlice<u8>,
}

/// Why a secret was refused. The messages never include any of the secret's text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookSecretError {
    /// The part after `whsec_` is not standard, padded base64.
    #[error("webhook secret is not `whsec_` followed by standard base64")]
    NotBase64,
    /// Fewer than [`MIN_SECRET_LEN`] or more than [`MAX_SECRET_LEN`] key bytes.
    #[error(
        "webhook secret has {0} key bytes; Standard Webhooks requires {MIN_SECRET_LEN} to {MAX_SECRET_LEN}"
    )]
    Length(usize),
}

impl WebhookSecret {
    /// A fresh secret of [`GENERATED_SECRET_LEN`] random bytes.
    pub fn generate() -> Self {
        Self {
            key: alloy::primitives::B256::random().to_vec().into(),
        }
    }

    /// A secret from its raw key bytes.
    pub fn from_bytes(key: &[u8]) -> Result<Self, WebhookSecretError> {
        Self::from_vec(key.to_vec().into())
    }

    /// A secret from its key bytes, already boxed.
    fn from_vec(key: SecretSlice<u8>) -> Result<Self, WebhookSecretError> {
        let len = key.expose_secret().len();
        if !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&len) {
            return Err(WebhookSecretError::Length(len));
        }
        Ok(Self { key })
    }

    /// Parses `whsec_<base64>`. Like the reference libraries, the bare base64 (without the prefix)
    /// is accepted too.
    pub fn parse(s: &str) -> Result<Self, WebhookSecretError> {
        let encoded = s.strip_prefix(SECRET_PREFIX).unwrap_or(s);
        // The decode error is dropped on purpose: its message quotes a byte of the secret.
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| WebhookSecretError::NotBase64)?;
        Self::from_vec(key.into())
    }

    /// The `whsec_<base64>` text of this secret. Handle it like the secret it is.
    pub fn expose_secret(&self) -> String {
        format!(
            "{SECRET_PREFIX}{}",
            STANDARD.encode(self.key.expose_secret())
        )
    }

    /// The HMAC-SHA256 of `{msg_id}.{timestamp}.{body}`, ready to finalize.
    fn mac(&self, msg_id: &str, timestamp: u64, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.key.expose_secret())
            .expect("HMAC accepts keys of any length");
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

impl FromStr for WebhookSecret {
    type Err = WebhookSecretError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl<'de> Deserialize<'de> for WebhookSecret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Why a delivery was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// A required header is absent or empty; the header's name.
    #[error("missing `{0}` header")]
    MissingHeader(&'static str),
    /// A header's value is not visible ASCII; the header's name.
    #[error("`{0}` header is not valid text")]
    InvalidHeader(&'static str),
    /// `webhook-timestamp` is not an integer number of seconds since the unix epoch.
    #[error("`webhook-timestamp` is not a unix timestamp in seconds")]
    InvalidTimestamp,
    /// The timestamp is further in the past than the tolerance allows (a replay, or a very late
    /// retry that the sender should re-sign).
    #[error("webhook timestamp {timestamp} is more than {tolerance_secs} s before now ({now})")]
    TimestampTooOld {
        /// The delivery's timestamp.
        timestamp: u64,
        /// The receiver's clock.
        now: u64,
        /// The tolerance applied.
        tolerance_secs: u64,
    },
    /// The timestamp is further in the future than the tolerance allows.
    #[error("webhook timestamp {timestamp} is more than {tolerance_secs} s after now ({now})")]
    TimestampTooNew {
        /// The delivery's timestamp.
        timestamp: u64,
        /// The receiver's clock.
        now: u64,
        /// The tolerance applied.
        tolerance_secs: u64,
    },
    /// No `v1` signature in the header matches any of the secrets (a forged or altered delivery,
    /// or a secret that is not the sender's).
    #[error("no webhook signature matches")]
    NoMatchingSignature,
    /// There was no secret to verify with.
    #[error("no webhook secret configured")]
    NoSecrets,
    /// A configured secret is malformed.
    #[error(transparent)]
    InvalidSecret(#[from] WebhookSecretError),
    /// The (authentic) body is not the expected JSON.
    #[error("webhook body is not a valid event")]
    InvalidPayload(#[source] serde_json::Error),
}

/// The `v1,<base64>` signature of one delivery with one secret.
///
/// `msg_id` must not contain `.` (the signed content is `.`-delimited); the sender chooses it.
pub fn sign(secret: &WebhookSecret, msg_id: &str, timestamp: u64, body: &[u8]) -> String {
    let tag = secret.mac(msg_id, timestamp, body).finalize().into_bytes();
    format!("{V1},{}", STANDARD.encode(tag))
}

/// The [`WEBHOOK_SIGNATURE`] header value: one [`sign`] per secret, space-separated (the current
/// secret and, during a rotation, the previous one).
pub fn signature_header(
    secrets: &[WebhookSecret],
    msg_id: &str,
    timestamp: u64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|secret| sign(secret, msg_id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Verifies one delivery from its three header values and raw body: the timestamp must be within
/// `tolerance_secs` of `now` (unix seconds) either way, and some `v1` signature in
/// `signature_header` must match some secret in `secrets`. Signatures of other versions (`v1a`)
/// and unreadable entries are skipped. The comparison is constant-time.
pub fn verify(
    secrets: &[WebhookSecret],
    msg_id: &str,
    timestamp: &str,
    signature_header: &str,
    body: &[u8],
    now: u64,
    tolerance_secs: u64,
) -> Result<(), WebhookError> {
    if msg_id.is_empty() {
        return Err(WebhookError::MissingHeader(WEBHOOK_ID));
    }
    if timestamp.is_empty() {
        return Err(WebhookError::MissingHeader(WEBHOOK_TIMESTAMP));
    }
    if signature_header.trim().is_empty() {
        return Err(WebhookError::MissingHeader(WEBHOOK_SIGNATURE));
    }
    if secrets.is_empty() {
        return Err(WebhookError::NoSecrets);
    }
    let timestamp = parse_timestamp(timestamp)?;
    if now.saturating_sub(timestamp) > tolerance_secs {
        return Err(WebhookError::TimestampTooOld {
            timestamp,
            now,
            tolerance_secs,
        });
    }
    if timestamp.saturating_sub(now) > tolerance_secs {
        return Err(WebhookError::TimestampTooNew {
            timestamp,
            now,
            tolerance_secs,
        });
    }

    let candidates: Vec<Vec<u8>> = signature_header
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == V1)
        .filter_map(|(_, signature)| STANDARD.decode(signature).ok())
        .collect();
    for secret in secrets {
        let mac = secret.mac(msg_id, timestamp, body);
        // `verify_slice` compares in constant time.
        if candidates
            .iter()
            .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
        {
            return Ok(());
        }
    }
    Err(WebhookError::NoMatchingSignature)
}

/// Digits only (no sign, no whitespace), fitting `u64`.
fn parse_timestamp(text: &str) -> Result<u64, WebhookError> {
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(WebhookError::InvalidTimestamp);
    }
    text.parse().map_err(|_| WebhookError::InvalidTimestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The "sign function works" vector of the reference JavaScript library (the npm
    // `standardwebhooks` package): standard-webhooks/standard-webhooks,
    // libraries/javascript/src/webhook.test.ts.
    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TIMESTAMP: u64 = 1_614_265_330;
    const VECTOR_BODY: &str = r#"{"test": 2432232314}"#;
    const VECTOR_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    const NOW: u64 = 1_700_000_000;
    const ID: &str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";
    const BODY: &[u8] = br#"{"id":"msg_2KWPBgLlAfxdpx2AI54pPJ85f4W","type":"payment.settled","createdAt":1700000000,"data":{}}"#;

    fn secret(s: &str) -> WebhookSecret {
        WebhookSecret::parse(s).unwrap()
    }

    fn check(
        secrets: &[WebhookSecret],
        id: &str,
        ts: &str,
        header: &str,
        body: &[u8],
    ) -> Result<(), WebhookError> {
        verify(secrets, id, ts, header, body, NOW, DEFAULT_TOLERANCE_SECS)
    }

    #[test]
    fn reference_vector() {
        let s = secret(VECTOR_SECRET);
        let body = VECTOR_BODY.as_bytes();
        assert_eq!(
            sign(&s, VECTOR_ID, VECTOR_TIMESTAMP, body),
            VECTOR_SIGNATURE
        );
        let ts = VECTOR_TIMESTAMP.to_string();
        verify(
            &[s],
            VECTOR_ID,
            &ts,
            VECTOR_SIGNATURE,
            body,
            VECTOR_TIMESTAMP,
            DEFAULT_TOLERANCE_SECS,
        )
        .unwrap();
    }

    #[test]
    fn secret_text_round_trips_and_the_prefix_is_optional() {
        let s = secret(VECTOR_SECRET);
        assert_eq!(s.expose_secret(), VECTOR_SECRET);
        let bare = secret(VECTOR_SECRET.strip_prefix(SECRET_PREFIX).unwrap());
        assert_eq!(bare.expose_secret(), VECTOR_SECRET);
        let parsed: WebhookSecret = VECTOR_SECRET.parse().unwrap();
        assert_eq!(parsed.expose_secret(), VECTOR_SECRET);
        let json: WebhookSecret = serde_json::from_str(&format!("\"{VECTOR_SECRET}\"")).unwrap();
        assert_eq!(json.expose_secret(), VECTOR_SECRET);
    }

    #[test]
    fn generated_secrets_are_32_fresh_bytes() {
        let a = WebhookSecret::generate();
        let b = WebhookSecret::generate();
        assert_eq!(a.key.expose_secret().len(), GENERATED_SECRET_LEN);
        assert_ne!(a.expose_secret(), b.expose_secret());
        let text = a.expose_secret();
        assert!(text.starts_with(SECRET_PREFIX));
        assert_eq!(secret(&text).key.expose_secret(), a.key.expose_secret());
    }

    #[test]
    fn debug_redacts_the_key() {
        let s = secret(VECTOR_SECRET);
        let shown = format!("{s:?} {:?} {s:#?}", Some(&s));
        assert!(!shown.contains("MfKQ9r8"), "{shown}");
        assert!(shown.contains("[REDACTED]"), "{shown}");
    }

    #[test]
    fn malformed_secrets_are_refused_without_echoing_them() {
        for bad in [
            "whsec_not*base64!",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw==",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw ",
        ] {
            let err = WebhookSecret::parse(bad).unwrap_err();
            assert_eq!(err, WebhookSecretError::NotBase64, "{bad:?}");
            assert!(!err.to_string().contains("base64!"));
        }
        for empty in ["", "whsec_"] {
            assert_eq!(
                WebhookSecret::parse(empty).unwrap_err(),
                WebhookSecretError::Length(0)
            );
        }
        // 16 bytes: valid base64, too short for the spec.
        let short = format!("{SECRET_PREFIX}{}", STANDARD.encode([7u8; 16]));
        assert_eq!(
            WebhookSecret::parse(&short).unwrap_err(),
            WebhookSecretError::Length(16)
        );
        let long = format!("{SECRET_PREFIX}{}", STANDARD.encode([7u8; 65]));
        assert_eq!(
            WebhookSecret::parse(&long).unwrap_err(),
            WebhookSecretError::Length(65)
        );
        assert!(WebhookSecret::from_bytes(&[7u8; MIN_SECRET_LEN]).is_ok());
        assert!(WebhookSecret::from_bytes(&[7u8; MAX_SECRET_LEN]).is_ok());
    }

    #[test]
    fn signs_and_verifies() {
        let s = WebhookSecret::generate();
        let header = signature_header(std::slice::from_ref(&s), ID, NOW, BODY);
        assert_eq!(header, sign(&s, ID, NOW, BODY));
        check(&[s], ID, &NOW.to_string(), &header, BODY).unwrap();
    }

    #[test]
    fn rotation_either_secret_verifies() {
        let old = WebhookSecret::generate();
        let new = WebhookSecret::generate();
        let header = signature_header(&[new.clone(), old.clone()], ID, NOW, BODY);
        assert_eq!(header.split(' ').count(), 2);
        let ts = NOW.to_string();
        check(std::slice::from_ref(&old), ID, &ts, &header, BODY).unwrap();
        check(std::slice::from_ref(&new), ID, &ts, &header, BODY).unwrap();
        // A receiver that holds both also accepts a delivery signed with only one.
        let only_new = sign(&new, ID, NOW, BODY);
        check(&[old.clone(), new], ID, &ts, &only_new, BODY).unwrap();
        let stranger = WebhookSecret::generate();
        assert!(matches!(
            check(&[stranger], ID, &ts, &header, BODY),
            Err(WebhookError::NoMatchingSignature)
        ));
    }

    #[test]
    fn tampering_is_detected() {
        let s = WebhookSecret::generate();
        let secrets = std::slice::from_ref(&s);
        let header = sign(&s, ID, NOW, BODY);
        let ts = NOW.to_string();
        let earlier = (NOW - 1).to_string();
        let mut flipped = BODY.to_vec();
        flipped[10] ^= 1;
        let mut longer = BODY.to_vec();
        longer.push(b' ');
        for (what, id, ts, body) in [
            ("body", ID, ts.as_str(), &flipped[..]),
            ("trailing byte", ID, ts.as_str(), &longer[..]),
            ("empty body", ID, ts.as_str(), &[][..]),
            ("id", "msg_other", ts.as_str(), BODY),
            ("timestamp", ID, earlier.as_str(), BODY),
        ] {
            assert!(
                matches!(
                    check(secrets, id, ts, &header, body),
                    Err(WebhookError::NoMatchingSignature)
                ),
                "{what}"
            );
        }
        check(secrets, ID, &ts, &header, BODY).unwrap();
    }

    #[test]
    fn tolerance_both_ways() {
        let s = WebhookSecret::generate();
        let secrets = std::slice::from_ref(&s);
        let at = |ts: u64| {
            let header = sign(&s, ID, ts, BODY);
            check(secrets, ID, &ts.to_string(), &header, BODY)
        };
        at(NOW - DEFAULT_TOLERANCE_SECS).unwrap();
        at(NOW + DEFAULT_TOLERANCE_SECS).unwrap();
        assert!(matches!(
            at(NOW - DEFAULT_TOLERANCE_SECS - 1),
            Err(WebhookError::TimestampTooOld { timestamp, now: NOW, tolerance_secs: 300 })
                if timestamp == NOW - 301
        ));
        assert!(matches!(
            at(NOW + DEFAULT_TOLERANCE_SECS + 1),
            Err(WebhookError::TimestampTooNew { timestamp, now: NOW, tolerance_secs: 300 })
                if timestamp == NOW + 301
        ));
        // A custom tolerance.
        let ts = NOW - 30;
        let header = sign(&s, ID, ts, BODY);
        let ts = ts.to_string();
        verify(secrets, ID, &ts, &header, BODY, NOW, 30).unwrap();
        assert!(matches!(
            verify(secrets, ID, &ts, &header, BODY, NOW, 29),
            Err(WebhookError::TimestampTooOld { .. })
        ));
        // Timestamps near the ends of the range do not overflow.
        let header = sign(&s, ID, u64::MAX, BODY);
        assert!(matches!(
            verify(secrets, ID, &u64::MAX.to_string(), &header, BODY, 0, 300),
            Err(WebhookError::TimestampTooNew { .. })
        ));
        assert!(matches!(
            verify(secrets, ID, "0", &header, BODY, u64::MAX, u64::MAX),
            Err(WebhookError::NoMatchingSignature)
        ));
    }

    #[test]
    fn malformed_headers() {
        // The reference vector, whose signature has a `+` and a `/`.
        let s = secret(VECTOR_SECRET);
        let secrets = std::slice::from_ref(&s);
        let body = VECTOR_BODY.as_bytes();
        let ts = VECTOR_TIMESTAMP.to_string();
        let check = |id: &str, ts: &str, header: &str| {
            verify(
                secrets,
                id,
                ts,
                header,
                body,
                VECTOR_TIMESTAMP,
                DEFAULT_TOLERANCE_SECS,
            )
        };
        let good = VECTOR_SIGNATURE;
        check(VECTOR_ID, &ts, good).unwrap();

        for (id, ts, header, missing) in [
            ("", ts.as_str(), good, WEBHOOK_ID),
            (VECTOR_ID, "", good, WEBHOOK_TIMESTAMP),
            (VECTOR_ID, ts.as_str(), "", WEBHOOK_SIGNATURE),
            (VECTOR_ID, ts.as_str(), "   ", WEBHOOK_SIGNATURE),
        ] {
            assert!(
                matches!(check(id, ts, header), Err(WebhookError::MissingHeader(h)) if h == missing),
                "{missing}"
            );
        }
        for bad_ts in [
            "hello",
            "-1",
            "+1614265330",
            " 1614265330",
            "1614265330 ",
            "1614265330.0",
            "1e9",
            "99999999999999999999999",
        ] {
            assert!(
                matches!(
                    check(VECTOR_ID, bad_ts, good),
                    Err(WebhookError::InvalidTimestamp)
                ),
                "{bad_ts}"
            );
        }

        let sig = good.strip_prefix("v1,").unwrap();
        for bad in [
            "v1,".to_owned(),
            "v1".to_owned(),
            "garbage".to_owned(),
            sig.to_owned(),                                 // no version
            format!("v2,{sig}"),                            // unknown version
            format!("v1a,{sig}"),                           // the asymmetric tag
            format!("V1,{sig}"),                            // versions are case-sensitive
            good[..8].to_owned(),                           // truncated
            format!("v1,{}", sig.trim_end_matches('=')),    // unpadded
            format!("v1,{}", &sig[..sig.len() - 4]),        // a shorter tag
            format!("v1,{sig}{sig}"),                       // a longer tag
            format!("v1, {sig}"),                           // a stray space
            format!("v1,{}", sig.replace(['+', '/'], "-")), // the URL-safe alphabet
        ] {
            assert!(
                matches!(
                    check(VECTOR_ID, &ts, &bad),
                    Err(WebhookError::NoMatchingSignature)
                ),
                "{bad}"
            );
        }

        // The valid signature still counts among junk, extra spaces and other versions.
        let mixed = format!("garbage v1a,{sig}  v1,Zm9v {good} v2,{sig}");
        check(VECTOR_ID, &ts, &mixed).unwrap();

        assert!(matches!(
            verify(&[], VECTOR_ID, &ts, good, body, VECTOR_TIMESTAMP, 300),
            Err(WebhookError::NoSecrets)
        ));
    }

    #[test]
    fn event_golden_json() {
        let json = r#"{"id":"msg_2KWPBgLlAfxdpx2AI54pPJ85f4W","type":"relayer.low_balance","createdAt":1700000000,"data":{"network":"base","relayer":"0x7777777777777777777777777777777777777777","balance":"1","floor":"2","settlementsLeft":"0"}}"#;
        let event: WebhookEvent = serde_json::from_str(json).unwrap();
        assert_eq!(
            event,
            WebhookEvent {
                id: ID.to_owned(),
                created_at: NOW,
                data: EventData::RelayerLowBalance(events::RelayerLowBalance {
                    network: "base".parse().unwrap(),
                    relayer: alloy::primitives::Address::repeat_byte(0x77),
                    balance: crate::Amount::from_units(1),
                    floor: crate::Amount::from_units(2),
                    settlements_left: crate::Amount::ZERO,
                }),
            }
        );
        assert_eq!(event.event_type(), Some(EventType::RelayerLowBalance));
        assert_eq!(serde_json::to_string(&event).unwrap(), json);
        // Senders may add metadata, and types this build does not know.
        let extra: WebhookEvent =
            serde_json::from_str(r#"{"id":"a","type":"b","createdAt":1,"data":null,"version":2}"#)
                .unwrap();
        assert_eq!(
            extra.data,
            EventData::Other {
                r#type: "b".into(),
                data: serde_json::Value::Null
            }
        );
        assert_eq!((extra.type_name(), extra.event_type()), ("b", None));
        assert_eq!(
            serde_json::to_string(&extra).unwrap(),
            r#"{"id":"a","type":"b","createdAt":1,"data":null}"#
        );
        // createdAt is unix seconds, not an RFC 3339 string.
        assert!(
            serde_json::from_str::<WebhookEvent>(
                r#"{"id":"a","type":"b","createdAt":"2024-01-01T00:00:00Z","data":{}}"#
            )
            .is_err()
        );
        // A known type's data must have its shape: a renamed field is an error, not a silent
        // default.
        let renamed = json.replace("settlementsLeft", "settlements_left");
        let err = serde_json::from_str::<WebhookEvent>(&renamed).unwrap_err();
        assert!(err.to_string().contains("relayer.low_balance"), "{err}");
    }
}
