//! Receiving Tollgate's webhooks: [Standard Webhooks](https://www.standardwebhooks.com)
//! verification of a delivery's headers and raw body, against the system clock.

use std::time::Duration;

use http::HeaderMap;
use serde::de::DeserializeOwned;
use tollgate_protocol::unix_now;
use tollgate_protocol::webhook::{
    self, DEFAULT_TOLERANCE_SECS, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP,
};
pub use tollgate_protocol::webhook::{
    EventData, EventType, WebhookError, WebhookEvent, WebhookSecret, WebhookSecretError, events,
};

/// How far a delivery's `webhook-timestamp` may be from this machine's clock, either way, in
/// [`verify_webhook`].
pub const DEFAULT_WEBHOOK_TOLERANCE: Duration = Duration::from_secs(DEFAULT_TOLERANCE_SECS);

/// A delivery whose signature and timestamp checked out. Its body is authentic; parse it with
/// [`VerifiedWebhook::event`].
#[derive(Clone, Debug)]
pub struct VerifiedWebhook<'a> {
    id: String,
    timestamp: u64,
    body: &'a [u8],
}

impl<'a> VerifiedWebhook<'a> {
    /// The `webhook-id`: the same on every retry of one event, so use it to process each event
    /// once.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The `webhook-timestamp` of this attempt, unix seconds.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The raw body, as signed.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// The body as a Tollgate [`WebhookEvent`] (`{"id", "type", "createdAt", "data"}`): its
    /// [`EventData`] typed by its [`EventType`], or [`EventData::Other`] for a type this build
    /// does not know. A known type whose data lacks a field or has one of the wrong type is
    /// [`WebhookError::InvalidPayload`].
    pub fn event(&self) -> Result<WebhookEvent, WebhookError> {
        self.json()
    }

    /// The body as JSON of any shape.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, WebhookError> {
        serde_json::from_slice(self.body).map_err(WebhookError::InvalidPayload)
    }
}

/// The spec's provider-side call: checks that a webhook delivery (its `webhook-id`,
/// `webhook-timestamp` and `webhook-signature` headers, and its raw body, exactly as received)
/// was signed with `secret` (`whsec_…`) and sent within [`DEFAULT_WEBHOOK_TOLERANCE`] of now.
///
/// Verify before parsing: the signature covers the body's bytes, and JSON re-serialized from a
/// parsed body will not match. Reply 2xx once the event is handled (or recorded); any other
/// status makes the sender retry, with the same `webhook-id`.
///
/// ```rust,no_run
/// use axum::{
///     Router, body::Bytes, extract::State, http::{HeaderMap, StatusCode}, routing::post,
/// };
/// use tollgate_gate::{EventData, verify_webhook};
///
/// async fn tollgate_events(
///     State(secret): State<String>,
///     headers: HeaderMap,
///     body: Bytes,
/// ) -> StatusCode {
///     let Ok(delivery) = verify_webhook(&headers, &body, &secret) else {
///         return StatusCode::UNAUTHORIZED;
///     };
///     let Ok(event) = delivery.event() else {
///         return StatusCode::BAD_REQUEST;
///     };
///     // Deliveries are retried: skip ids already handled.
///     match event.data {
///         EventData::PaymentSettled(payment) => { /* … payment.amount, payment.payer … */ }
///         _ => {} // ignore types this receiver does not handle or know
///     }
///     StatusCode::NO_CONTENT
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let secret = std::env::var("TOLLGATE_WEBHOOK_SECRET")?; // whsec_…
/// let app = Router::new()
///     .route("/webhooks/tollgate", post(tollgate_events))
///     .with_state(secret);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, app).await?;
/// # Ok(()) }
/// ```
pub fn verify_webhook<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
    secret: &str,
) -> Result<VerifiedWebhook<'a>, WebhookError> {
    verify_webhook_with(headers, body, &[secret], DEFAULT_WEBHOOK_TOLERANCE)
}

/// [`verify_webhook`] with several secrets (any one matching is enough: keep the old secret here
/// while the sender rotates to the new one) and a timestamp tolerance of your own.
///
/// A malformed secret is an error ([`WebhookError::InvalidSecret`]) even when another one
/// would match, so that a configuration mistake is not hidden until the rotation ends.
pub fn verify_webhook_with<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
    secrets: &[&str],
    tolerance: Duration,
) -> Result<VerifiedWebhook<'a>, WebhookError> {
    let secrets = secrets
        .iter()
        .map(|s| WebhookSecret::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let id = header(headers, WEBHOOK_ID)?;
    let timestamp = header(headers, WEBHOOK_TIMESTAMP)?;
    let signature = header(headers, WEBHOOK_SIGNATURE)?;
    webhook::verify(
        &secrets,
        id,
        timestamp,
        signature,
        body,
        unix_now(),
        tolerance.as_secs(),
    )?;
    Ok(VerifiedWebhook {
        id: id.to_owned(),
        // `verify` accepted it, so it is digits within u64.
        timestamp: timestamp
            .parse()
            .map_err(|_| WebhookError::InvalidTimestamp)?,
        body,
    })
}

/// A header's value as text; absent is [`WebhookError::MissingHeader`] (and an empty value is
/// caught as missing by `webhook::verify`).
fn header<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, WebhookError> {
    headers
        .get(name)
        .ok_or(WebhookError::MissingHeader(name))?
        .to_str()
        .map_err(|_| WebhookError::InvalidHeader(name))
}

/// Seconds since the unix epoch by the system clock (0 if the clock is before it).
#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use tollgate_protocol::webhook::{sign, signature_header};

    use super::*;

    const BODY: &[u8] =
        br#"{"id":"msg_1","type":"plan.deprecated","createdAt":1700000000,"data":{"network":"base","txHash":"0x1111111111111111111111111111111111111111111111111111111111111111","block":7,"planId":"0x3333333333333333333333333333333333333333333333333333333333333333"}}"#;

    fn delivery(secrets: &[WebhookSecret], ts: u64, body: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(WEBHOOK_ID, HeaderValue::from_static("msg_1"));
        headers.insert(WEBHOOK_TIMESTAMP, ts.to_string().parse().unwrap());
        headers.insert(
            WEBHOOK_SIGNATURE,
            signature_header(secrets, "msg_1", ts, body)
                .parse()
                .unwrap(),
        );
        headers
    }

    #[test]
    fn verifies_and_parses_the_event() {
        let secret = WebhookSecret::generate();
        let now = unix_now();
        let headers = delivery(std::slice::from_ref(&secret), now, BODY);
        let verified = verify_webhook(&headers, BODY, &secret.expose_secret()).unwrap();
        assert_eq!(verified.id(), "msg_1");
        assert_eq!(verified.timestamp(), now);
        assert_eq!(verified.body(), BODY);
        let event = verified.event().unwrap();
        assert_eq!(event.event_type(), Some(EventType::PlanDeprecated));
        assert_eq!(event.created_at, 1_700_000_000);
        let EventData::PlanDeprecated(plan) = &event.data else {
            panic!("{event:?}")
        };
        assert_eq!(plan.source.block, 7);
        assert_eq!(plan.plan_id, alloy::primitives::B256::repeat_byte(0x33));
        let raw: serde_json::Value = verified.json().unwrap();
        assert_eq!(raw["id"], "msg_1");
    }

    #[test]
    fn an_authentic_body_that_is_not_an_event() {
        let secret = WebhookSecret::generate();
        let body = b"not json";
        let headers = delivery(std::slice::from_ref(&secret), unix_now(), body);
        let verified = verify_webhook(&headers, body, &secret.expose_secret()).unwrap();
        assert!(matches!(
            verified.event(),
            Err(WebhookError::InvalidPayload(_))
        ));
    }

    #[test]
    fn headers_are_checked() {
        let secret = WebhookSecret::generate();
        let text = secret.expose_secret();
        let full = delivery(std::slice::from_ref(&secret), unix_now(), BODY);
        for name in [WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE] {
            let mut headers = full.clone();
            headers.remove(name);
            assert!(matches!(
                verify_webhook(&headers, BODY, &text),
                Err(WebhookError::MissingHeader(h)) if h == name
            ));
            headers.insert(name, HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
            assert!(matches!(
                verify_webhook(&headers, BODY, &text),
                Err(WebhookError::InvalidHeader(h)) if h == name
            ));
        }
    }

    #[test]
    fn the_clock_and_tolerance() {
        let secret = WebhookSecret::generate();
        let text = secret.expose_secret();
        let secrets = std::slice::from_ref(&secret);
        let old = delivery(secrets, unix_now() - 600, BODY);
        assert!(matches!(
            verify_webhook(&old, BODY, &text),
            Err(WebhookError::TimestampTooOld { .. })
        ));
        verify_webhook_with(&old, BODY, &[&text], Duration::from_secs(3600)).unwrap();
        let early = delivery(secrets, unix_now() + 600, BODY);
        assert!(matches!(
            verify_webhook(&early, BODY, &text),
            Err(WebhookError::TimestampTooNew { .. })
        ));
    }

    #[test]
    fn several_secrets() {
        let old = WebhookSecret::generate();
        let new = WebhookSecret::generate();
        let (old_text, new_text) = (old.expose_secret(), new.expose_secret());
        let now = unix_now();
        let mut headers = delivery(std::slice::from_ref(&old), now, BODY);
        verify_webhook_with(
            &headers,
            BODY,
            &[&new_text, &old_text],
            DEFAULT_WEBHOOK_TOLERANCE,
        )
        .unwrap();
        assert!(matches!(
            verify_webhook(&headers, BODY, &new_text),
            Err(WebhookError::NoMatchingSignature)
        ));
        assert!(matches!(
            verify_webhook_with(&headers, BODY, &[], DEFAULT_WEBHOOK_TOLERANCE),
            Err(WebhookError::NoSecrets)
        ));
        assert!(matches!(
            verify_webhook_with(
                &headers,
                BODY,
                &[&old_text, "whsec_???"],
                DEFAULT_WEBHOOK_TOLERANCE
            ),
            Err(WebhookError::InvalidSecret(_))
        ));
        headers.insert(
            WEBHOOK_SIGNATURE,
            sign(&new, "msg_1", now, b"{}").parse().unwrap(),
        );
        assert!(matches!(
            verify_webhook(&headers, BODY, &new_text),
            Err(WebhookError::NoMatchingSignature)
        ));
    }
}
