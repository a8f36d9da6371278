//! RFC 9457 problem details, with the draft's problem types as mppx's `Errors.js` writes them.

use serde::{Deserialize, Serialize};

use super::PROBLEM_BASE;

/// The media type of a problem body.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// The problem types of draft-ryan-httpauth-payment-01 that an EVM charge uses, each with the
/// URI suffix, title and HTTP status of mppx 0.11.0's `Errors.js`. A refusal is a 402 with a
/// fresh challenge, except [`ProblemType::BadRequest`] and [`ProblemType::MethodUnsupported`]
/// (400) and [`ProblemType::InternalPaymentError`] (500).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemType {
    /// No credential: `payment-required`.
    PaymentRequired,
    /// The credential does not decode: `malformed-credential`.
    MalformedCredential,
    /// The echoed challenge was not issued here, does not match the route, or has no expiry:
    /// `invalid-challenge`.
    InvalidChallenge,
    /// The echoed challenge has expired: `payment-expired`.
    PaymentExpired,
    /// The payload does not fit the method's schema: `invalid-payload`.
    InvalidPayload,
    /// The payment failed a check, verification or settlement (replays included):
    /// `verification-failed`.
    VerificationFailed,
    /// Too little paid: `payment-insufficient` (mppx's EVM charge says `verification-failed`).
    PaymentInsufficient,
    /// A method the server does not take: `method-unsupported` (400).
    MethodUnsupported,
    /// A bad request: `bad-request` (400).
    BadRequest,
    /// The server failed: `internal-payment-error` (500).
    InternalPaymentError,
}

/// mppx's hint for payment-required and method-unsupported.
const HINT_PAY: &str = "Use a supported wallet to pay for this resource using one of the supported payment methods returned in the WWW-Authenticate header. See https://mpp.dev/tools/wallet.md";
/// mppx's hint for malformed-credential.
const HINT_MALFORMED: &str = "Use a supported wallet to construct valid credentials for one of the supported payment methods returned in the WWW-Authenticate header. See https://mpp.dev/tools/wallet.md";

impl ProblemType {
    /// Every problem type.
    pub const ALL: [Self; 10] = [
        Self::PaymentRequired,
        Self::MalformedCredential,
        Self::InvalidChallenge,
        Self::PaymentExpired,
        Self::InvalidPayload,
        Self::VerificationFailed,
        Self::PaymentInsufficient,
        Self::MethodUnsupported,
        Self::BadRequest,
        Self::InternalPaymentError,
    ];

    /// The URI's last segment (`payment-required`).
    pub fn suffix(self) -> &'static str {
        match self {
            Self::PaymentRequired => "payment-required",
            Self::MalformedCredential => "malformed-credential",
            Self::InvalidChallenge => "invalid-challenge",
            Self::PaymentExpired => "payment-expired",
            Self::InvalidPayload => "invalid-payload",
            Self::VerificationFailed => "verification-failed",
            Self::PaymentInsufficient => "payment-insufficient",
            Self::MethodUnsupported => "method-unsupported",
            Self::BadRequest => "bad-request",
            Self::InternalPaymentError => "internal-payment-error",
        }
    }

    /// The type URI: [`PROBLEM_BASE`] and the suffix.
    pub fn uri(self) -> String {
        format!("{PROBLEM_BASE}{}", self.suffix())
    }

    /// The title (`Payment Required`).
    pub fn title(self) -> &'static str {
        match self {
            Self::PaymentRequired => "Payment Required",
            Self::MalformedCredential => "Malformed Credential",
            Self::InvalidChallenge => "Invalid Challenge",
            Self::PaymentExpired => "Payment Expired",
            Self::InvalidPayload => "Invalid Payload",
            Self::VerificationFailed => "Verification Failed",
            Self::PaymentInsufficient => "Payment Insufficient",
            Self::MethodUnsupported => "Method Unsupported",
            Self::BadRequest => "Bad Request",
            Self::InternalPaymentError => "Internal Payment Error",
        }
    }

    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            Self::MethodUnsupported | Self::BadRequest => 400,
            Self::InternalPaymentError => 500,
            _ => 402,
        }
    }

    /// mppx's `hint` for this type, if it has one.
    pub fn hint(self) -> Option<&'static str> {
        match self {
            Self::PaymentRequired | Self::MethodUnsupported => Some(HINT_PAY),
            Self::MalformedCredential => Some(HINT_MALFORMED),
            _ => None,
        }
    }

    /// The type with this URI.
    pub fn from_uri(s: &str) -> Option<Self> {
        let suffix = s.strip_prefix(PROBLEM_BASE)?;
        Self::ALL.into_iter().find(|t| t.suffix() == suffix)
    }
}

/// An `application/problem+json` body as mppx writes it:
/// `{"type","title","status","detail","hint"?,"challengeId"?}`, `challengeId` being the id of
/// the fresh challenge sent with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// The type URI ([`ProblemType::uri`]).
    #[serde(rename = "type")]
    pub kind: String,
    /// The type's title.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong, for people.
    pub detail: String,
    /// How to fix it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The id of the challenge sent with this problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge_id: Option<String>,
}

impl Problem {
    /// A problem of type `t` with its title, status and mppx's hint.
    pub fn new(t: ProblemType, detail: impl Into<String>, challenge_id: Option<String>) -> Self {
        Self {
            kind: t.uri(),
            title: t.title().to_owned(),
            status: t.status(),
            detail: detail.into(),
            hint: t.hint().map(str::to_owned),
            challenge_id,
        }
    }

    /// The problem type, if its URI is one of the draft's.
    pub fn problem_type(&self) -> Option<ProblemType> {
        ProblemType::from_uri(&self.kind)
    }
}
