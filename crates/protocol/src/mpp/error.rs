//! Why an MPP value was refused.

use super::{Challenge, ProblemType};

/// Why an MPP header value, or a value inside one, was refused. Each maps to the problem type a
/// server answers it with ([`MppError::problem_type`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MppError {
    /// A value is not base64 (either alphabet, padding optional).
    #[error("{what} is not base64url")]
    Base64 {
        /// What was being read (`"request"`, `"opaque"`, …).
        what: &'static str,
        /// The decoder's complaint.
        #[source]
        source: base64::DecodeError,
    },
    /// A value is not JSON of the expected shape.
    #[error("{what} is not the expected JSON")]
    Json {
        /// What was being read.
        what: &'static str,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A value is longer than this crate reads.
    #[error("{what} is {len} bytes long, more than {max}")]
    TooLarge {
        /// What was being read.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A `Payment` challenge's auth-params do not parse (unterminated quoted string, a
    /// parameter without a name, a duplicate).
    #[error("malformed Payment challenge: {0}")]
    Params(String),
    /// A required auth-param (or challenge field) is missing.
    #[error("the Payment challenge has no {0:?}")]
    MissingParam(&'static str),
    /// A challenge field has a value its schema refuses.
    #[error("the Payment challenge's {name:?} is invalid: {why}")]
    InvalidParam {
        /// The field.
        name: &'static str,
        /// Why.
        why: &'static str,
    },
    /// The challenge asks for the credential in a header other than `Authorization`
    /// (`header="Payment-Authorization"`), which Tollgate neither issues nor pays.
    #[error("the Payment challenge asks for its credential in {0:?}, not Authorization")]
    UnsupportedHeader(String),
    /// A timestamp is not RFC 3339 in mppx's form, or not a real instant after 1970.
    #[error("{0:?} is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM))")]
    Timestamp(String),
    /// An HMAC key shorter than mppx allows.
    #[error("the challenge key is {0} bytes long; it must be at least 32")]
    KeyTooShort(usize),
    /// The credential is not base64url JSON of `{challenge, payload, source?}` with a
    /// well-formed challenge (mppx: `malformed-credential`).
    #[error("malformed credential")]
    MalformedCredential(#[source] Box<MppError>),
    /// The credential is well-formed but its payload is not an `authorization` payload
    /// (mppx: `invalid-payload`). Carries the echoed challenge, so that a server can check it
    /// first, as mppx does.
    #[error("the credential's payload is not an EVM authorization payload")]
    InvalidPayload {
        /// The challenge the credential echoes (not yet checked).
        challenge: Box<Challenge>,
        /// Why the payload was refused.
        #[source]
        source: serde_json::Error,
    },
    /// A `Payment-Receipt` that is not base64url JSON of a successful receipt.
    #[error("malformed Payment-Receipt")]
    Receipt(#[source] Box<MppError>),
}

impl MppError {
    /// The problem type a server answers this error with: `malformed-credential` and
    /// `invalid-payload` for a credential, `internal-payment-error` for a bad key,
    /// `bad-request` for a receipt, `invalid-challenge` for everything read from a challenge.
    pub fn problem_type(&self) -> ProblemType {
        match self {
            Self::MalformedCredential(_) => ProblemType::MalformedCredential,
            Self::InvalidPayload { .. } => ProblemType::InvalidPayload,
            Self::KeyTooShort(_) => ProblemType::InternalPaymentError,
            Self::Receipt(_) => ProblemType::BadRequest,
            Self::Base64 { .. }
            | Self::Json { .. }
            | Self::TooLarge { .. }
            | Self::Params(_)
            | Self::MissingParam(_)
            | Self::InvalidParam { .. }
            | Self::UnsupportedHeader(_)
            | Self::Timestamp(_) => ProblemType::InvalidChallenge,
        }
    }

    /// The challenge a credential refused for its payload echoes ([`MppError::InvalidPayload`]).
    pub fn challenge(&self) -> Option<&Challenge> {
        match self {
            Self::InvalidPayload { challenge, .. } => Some(challenge),
            _ => None,
        }
    }
}
