//! The facilitator as the agent sees it: one [`FacilitatorClient`] per facilitator (sharing the
//! agent's HTTP client: its timeouts, user agent and no-redirect policy), the agent's policy of
//! sending a signed request again while its outcome is unknown, and the mapping of the client's
//! errors to the agent's.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use reqwest::StatusCode;
use tollgate_client::FacilitatorClient;
use tollgate_protocol::ApiErrorCode;

use crate::{Error, Result};

/// The client of the facilitator at `base`: discovery cached until forgotten, answers read up
/// to `max_answer` bytes.
pub(crate) fn client(
    http: &reqwest::Client,
    base: &str,
    max_answer: usize,
) -> Result<FacilitatorClient> {
    FacilitatorClient::builder(base)
        .http_client(http.clone())
        .discovery_cache(None, Duration::ZERO)
        .max_answer_bytes(max_answer)
        .build()
        .map_err(error_from)
}

/// The agent's error for a failed facilitator call: no answer is [`Error::Http`],
/// `InsufficientFunds` by name, any other answer [`Error::Facilitator`] with its code
/// (`Unreadable` when the answer was not the expected shape).
pub(crate) fn error_from(e: tollgate_client::Error) -> Error {
    use tollgate_client::Error as E;
    match e {
        E::Transport { source, .. } | E::Timeout { source, .. } | E::Build(source) => {
            Error::Http(source)
        }
        E::Status {
            body: Some(body), ..
        } if body.error.code == ApiErrorCode::InsufficientFunds => Error::InsufficientFunds {
            message: body.error.message,
        },
        E::Status {
            status,
            body: Some(body),
            ..
        } => Error::Facilitator {
            status,
            code: body.error.code,
            message: body.error.message,
        },
        E::Status {
            status,
            body: None,
            raw,
            ..
        } => Error::Facilitator {
            status,
            code: "Unreadable".into(),
            message: raw,
        },
        E::Decode { status, source, .. } => Error::Facilitator {
            status,
            code: "Unreadable".into(),
            message: format!("unexpected answer: {source}"),
        },
        E::TooLarge { limit, .. } => Error::ResponseTooLarge { limit },
        E::InvalidUrl { .. } => Error::NoFacilitator,
        other => Error::Facilitator {
            status: 0,
            code: "ClientError".into(),
            message: other.to_string(),
        },
    }
}

/// The next poll delay: doubling from 100 ms up to 2 s.
pub(crate) fn backoff(previous: Duration) -> Duration {
    (previous * 2).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

/// Whether the facilitator answered that it cannot answer now (a 502/503/504: restarting, or
/// behind a proxy).
pub(crate) fn unavailable_now(e: &tollgate_client::Error) -> bool {
    matches!(
        e.status().and_then(|s| StatusCode::from_u16(s).ok()),
        Some(
            StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
        )
    )
}

/// What [`until_answered`] got.
pub(crate) struct Answered<T> {
    /// The last answer, or the last error.
    pub(crate) result: tollgate_client::Result<T>,
    /// Whether the request certainly never reached the facilitator (the first and only attempt
    /// could not connect): then nothing can have happened.
    pub(crate) never_sent: bool,
}

/// Sends **the same request** (`send` posts one signed body) again while its outcome is unknown
/// — the connection broke after the request left, a timeout, or a 502/503/504 (a facilitator
/// restarting, or behind a proxy) — with backoff until `deadline`. Every facilitator operation
/// the agent posts is idempotent per signed body (`/authorize` per authorization nonce,
/// `/subscriptions` per intent nonce), so a repeat returns the first outcome and never acts
/// twice; signing anew instead could pay twice for one request.
pub(crate) async fn until_answered<T, F, Fut>(
    what: &str,
    deadline: Instant,
    mut send: F,
) -> Answered<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = tollgate_client::Result<T>>,
{
    let mut delay = Duration::ZERO;
    let mut attempts = 0u32;
    loop {
        let result = send().await;
        attempts += 1;
        let unknown = match &result {
            Ok(_) => false,
            Err(e) => match e.transport() {
                Some(t) if attempts == 1 && t.is_connect() => false,
                Some(t) => !t.is_builder(),
                None => unavailable_now(e),
            },
        };
        delay = backoff(delay);
        if !unknown || Instant::now() + delay > deadline {
            let never_sent = attempts == 1 && result.as_ref().is_err_and(|e| e.never_sent());
            return Answered { result, never_sent };
        }
        tracing::debug!(%what, attempts, "outcome unknown; sending the same request again");
        tokio::time::sleep(delay).await;
    }
}
