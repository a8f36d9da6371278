//! The client's one error type.

use std::time::Duration;

use tollgate_protocol::{ApiErrorBody, ApiErrorCode};

/// Everything a [`crate::FacilitatorClient`] call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The base URL is not an absolute http(s) URL.
    #[error("invalid facilitator URL {url:?}: {problem}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the facilitator HTTP client")]
    Build(#[source] reqwest::Error),
    /// The call needs the provider's API key ([`crate::ClientBuilder::api_key`]).
    #[error("this facilitator call needs the provider's API key")]
    MissingApiKey,
    /// No answer: the connection failed or broke.
    #[error("facilitator request to {url} failed")]
    Transport {
        /// The URL asked.
        url: String,
        /// What happened.
        #[source]
        source: reqwest::Error,
        /// Whether the request certainly never reached the facilitator (the only attempt could
        /// not connect): then nothing can have happened.
        never_sent: bool,
    },
    /// No answer within the timeout; the request may have been acted on.
    #[error("facilitator request to {url} timed out")]
    Timeout {
        /// The URL asked.
        url: String,
        /// What happened.
        #[source]
        source: reqwest::Error,
    },
    /// An HTTP error status: 5xx means unavailable, 4xx that the facilitator refused this
    /// request itself.
    #[error(
        "facilitator answered {status} to {url}{}",
        match body { Some(b) => format!(": {b}"), None => String::new() }
    )]
    Status {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The error body, when the answer carried one.
        body: Option<ApiErrorBody>,
        /// The start of the answer (at most 200 bytes) when it was not an error body.
        raw: String,
        /// The answer's `Retry-After`, when it gave one in seconds: when the same request may
        /// be taken again (a 429 `RateLimited`, a 503).
        retry_after: Option<Duration>,
    },
    /// A success status with a body that is not the expected shape.
    #[error("unreadable answer {status} from {url}")]
    Decode {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The answer is larger than the client reads ([`crate::ClientBuilder::max_answer_bytes`]).
    #[error("the answer from {url} is larger than {limit} bytes")]
    TooLarge {
        /// The URL asked.
        url: String,
        /// The limit.
        limit: usize,
    },
}

impl Error {
    /// `true` when the facilitator refused this request itself (a 4xx), rather than being down
    /// or unreachable.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::Status { status, .. } if (400..500).contains(status))
    }

    /// `true` when the facilitator could not be asked or is failing: no answer, a timeout, or a
    /// 5xx.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Transport { .. } | Self::Timeout { .. } => true,
            Self::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }

    /// `true` when the request certainly never reached the facilitator.
    pub fn never_sent(&self) -> bool {
        matches!(
            self,
            Self::Transport {
                never_sent: true,
                ..
            } | Self::InvalidUrl { .. }
                | Self::Build(_)
                | Self::MissingApiKey
        )
    }

    /// The HTTP status of an answer the call failed on.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } | Self::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The error body of an HTTP error answer, when it carried one.
    pub fn body(&self) -> Option<&ApiErrorBody> {
        match self {
            Self::Status { body, .. } => body.as_ref(),
            _ => None,
        }
    }

    /// How long to wait before sending the request again, when the error answer said
    /// (`Retry-After`): a 429 `RateLimited` (the facilitator's per-client rate, or a subscriber's
    /// relayed lifecycle calls at their bound) or a 503.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// `true` for a 429 `RateLimited`: the facilitator refused the request for now, without
    /// acting on it; send it again after [`Error::retry_after`].
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, Self::Status { status: 429, .. })
    }

    /// The `error.code` of an HTTP error answer, when it carried one.
    pub fn code(&self) -> Option<&ApiErrorCode> {
        self.body().map(ApiErrorBody::code)
    }

    /// The transport error under a [`Error::Transport`] or [`Error::Timeout`].
    pub fn transport(&self) -> Option<&reqwest::Error> {
        match self {
            Self::Transport { source, .. } | Self::Timeout { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result alias for the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;
