//! Error codes on the wire.
//!
//! - [`ErrorCode`]: the spec's five names. They are what a 402 body's top-level `error` carries
//!   when a payment or subscription failed, so the set is closed.
//! - [`ApiErrorCode`]: every `code` of the facilitator's (and the gate's) error body
//!   [`ApiErrorBody`], `{"error": {"code", "message"}}`: the spec's names, the facilitator's
//!   own codes, and [`ApiErrorCode::Other`] for a code this version does not know (a newer
//!   facilitator's, or a contract revert's name), so that clients keep working when codes are
//!   added.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The spec's error names, as they travel on the wire (`{"error": {"code": "<name>", ...}}` and
/// the top-level `error` of a 402 body).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The agent wallet's stablecoin balance is too low.
    #[error("InsufficientFunds")]
    InsufficientFunds,
    /// The subscription is paused or cancelled.
    #[error("SubscriptionNotActive")]
    SubscriptionNotActive,
    /// The spend cap is fully used.
    #[error("AllowanceExhausted")]
    AllowanceExhausted,
    /// The facilitator declined the proof.
    #[error("InvalidPaymentProof")]
    InvalidPaymentProof,
    /// The plan accepts no new subscriptions.
    #[error("PlanDeprecated")]
    PlanDeprecated,
}

impl ErrorCode {
    /// The name as the spec spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InsufficientFunds => "InsufficientFunds",
            Self::SubscriptionNotActive => "SubscriptionNotActive",
            Self::AllowanceExhausted => "AllowanceExhausted",
            Self::InvalidPaymentProof => "InvalidPaymentProof",
            Self::PlanDeprecated => "PlanDeprecated",
        }
    }

    /// The spec's name spelled `s`, if it is one. x402's `insufficient_funds` reads as
    /// [`ErrorCode::InsufficientFunds`].
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "InsufficientFunds" | "insufficient_funds" => Self::InsufficientFunds,
            "SubscriptionNotActive" => Self::SubscriptionNotActive,
            "AllowanceExhausted" => Self::AllowanceExhausted,
            "InvalidPaymentProof" => Self::InvalidPaymentProof,
            "PlanDeprecated" => Self::PlanDeprecated,
            _ => return None,
        })
    }
}

macro_rules! api_codes {
    ($($(#[doc = $doc:literal])* $variant:ident,)*) => {
        /// The `code` of an [`ApiErrorBody`]. Serialized as its name (`"InsufficientFunds"`);
        /// a name this version does not know deserializes to [`ApiErrorCode::Other`], kept
        /// verbatim.
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ApiErrorCode {
            $($(#[doc = $doc])* $variant,)*
            /// A code not in this list, kept as received.
            Other(String),
        }

        impl ApiErrorCode {
            /// Every code this version knows, in declaration order.
            pub const KNOWN: &'static [&'static str] = &[$(stringify!($variant),)*];

            /// The wire spelling. A `const fn`, so that constants of the wire spelling
            /// (`tollgate_gate::PAYMENT_REQUIRED_REASON`) are written as the code itself.
            pub const fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => stringify!($variant),)*
                    Self::Other(s) => s.as_str(),
                }
            }

            /// From the wire spelling; unknown codes become [`ApiErrorCode::Other`].
            pub fn parse(s: &str) -> Self {
                match s {
                    $(stringify!($variant) => Self::$variant,)*
                    other => Self::Other(other.to_owned()),
                }
            }
        }
    };
}

api_codes! {
    // The spec's names.
    /// The payer's token balance is below the amount (402).
    InsufficientFunds,
    /// The subscription is paused, cancelled, overdue or between cycles (409).
    SubscriptionNotActive,
    /// A deduction would cross the cycle's overage cap (402).
    AllowanceExhausted,
    /// The payment proof was declined.
    InvalidPaymentProof,
    /// The plan takes no new subscriptions (422).
    PlanDeprecated,

    // The request itself.
    /// The body is not JSON (400).
    MalformedJson,
    /// A body field is missing, mistyped or out of range; the message names it (400).
    InvalidField,
    /// A query parameter does not parse or is out of range; the message names it (400).
    InvalidQuery,
    /// A path parameter does not decode (400).
    InvalidPath,
    /// Another request error (400).
    BadRequest,
    /// The body is not `application/json` (415).
    UnsupportedMediaType,
    /// The body is too large (413).
    PayloadTooLarge,
    /// The route does not take this method (405).
    MethodNotAllowed,
    /// No such route, settlement, plan, endpoint or delivery (404).
    NotFound,
    /// The client is over the per-client rate (429).
    RateLimited,
    /// The request took too long to arrive (408).
    RequestTimeout,

    // Who is asking.
    /// A provider endpoint without a valid API key (401).
    Unauthorized,
    /// The API key's provider does not own the resource (403).
    Forbidden,
    /// A repeat of `/authorize`, or a status URL, without the settlement's claim (403).
    ClaimMismatch,

    // Payments.
    /// A signature does not check (422).
    InvalidSignature,
    /// The authorization does not fit the payment (422).
    InvalidAuthorization,
    /// The authorization's `validBefore` has passed by the chain's clock (422).
    AuthorizationExpired,
    /// The authorization's `validAfter` is still ahead by the chain's clock (422).
    AuthorizationNotYetValid,
    /// The authorization's validity window is longer than the facilitator accepts (422).
    ValidityTooLong,
    /// The authorization's nonce was used otherwise (409).
    AuthorizationUsed,
    /// The token refuses an account of the payment (payer, payee, fee recipient or router):
    /// it is blacklisted (Circle's USDC); the message names it (403).
    AccountBlacklisted,
    /// The token is paused and moves nothing until it is unpaused (Circle's USDC) (422).
    TokenPaused,
    /// The nonce does not commit to payTo, memo and fee (422).
    NonceMismatch,
    /// The amount does not exceed the facilitator's fee (422).
    AmountBelowFee,
    /// The amount is not acceptable (422).
    InvalidAmount,
    /// The network is not served here (422).
    UnsupportedNetwork,
    /// The token is not settled here (422).
    UnsupportedToken,
    /// The network named is not served here (422).
    UnknownNetwork,
    /// The idempotency key was used for another request (409).
    IdempotencyConflict,
    /// The settlement reverted on-chain (422).
    SettlementReverted,
    /// A transaction is not confirmed yet: retry the same request (503).
    Pending,

    // Plans and subscriptions.
    /// The plan's terms are not acceptable (422).
    InvalidPlan,
    /// No plan with this id (422).
    UnknownPlan,
    /// No subscription with this id.
    UnknownSubscription,
    /// The network has no subscriptions contract (422).
    SubscriptionsUnavailable,
    /// The subscription transaction reverted (422).
    SubscriptionReverted,
    /// The allowance raise reverted (422).
    RaiseReverted,
    /// The requested overage cap is not above the current one.
    AllowanceNotRaised,
    /// The signature's deadline has passed (422).
    SignatureExpired,
    /// The signature's deadline is too far ahead (422).
    DeadlineTooFar,

    // Webhooks.
    /// The facilitator has no key to seal webhook secrets with (503).
    WebhooksNotConfigured,
    /// The provider has as many endpoints as allowed (422).
    TooManyEndpoints,
    /// The endpoint URL is or resolves to a private address (422).
    TargetNotAllowed,

    // The service.
    /// A dependency (the chain, the store) is unavailable (503).
    Unavailable,
    /// The chain refused a transaction (502).
    ChainError,
    /// A bug; the cause is logged, never sent (500).
    Internal,

    // The gate's and the gateway's own answers.
    /// The top-level `error` of a gate's first 402: no payment was sent (402).
    PaymentRequired,
    /// The top-level `error` of a gate's 402 answering an x402 payment of a version other than
    /// 1 and 2 (402).
    UnsupportedVersion,
    /// The gate cannot reach the facilitator (503).
    FacilitatorUnavailable,
    /// The gate cannot reach the chain (503).
    ChainUnavailable,
    /// The gate's memo store is unavailable (503).
    MemoStoreUnavailable,
    /// An x402 settlement is still pending: send the same `X-PAYMENT` again (503).
    SettlementPending,
    /// `X-Service-Sub` on a gate that does not check subscriptions (500).
    SubscriptionsNotConfigured,
    /// A metered route on a gate without the provider's API key.
    MeteringNotConfigured,
    /// A metered route the gate cannot meter (500).
    MeteringMisconfigured,
    /// The gate failed itself (503).
    InternalError,
    /// A path the gateway will not forward because it reads two ways (400).
    AmbiguousPath,
    /// The gateway's upstream API did not answer in time (504).
    UpstreamTimeout,
    /// The gateway's upstream API could not be reached (502).
    UpstreamUnavailable,
}

impl ApiErrorCode {
    /// The spec's name this code is, if it is one.
    pub fn spec(&self) -> Option<ErrorCode> {
        Some(match self {
            Self::InsufficientFunds => ErrorCode::InsufficientFunds,
            Self::SubscriptionNotActive => ErrorCode::SubscriptionNotActive,
            Self::AllowanceExhausted => ErrorCode::AllowanceExhausted,
            Self::InvalidPaymentProof => ErrorCode::InvalidPaymentProof,
            Self::PlanDeprecated => ErrorCode::PlanDeprecated,
            _ => return None,
        })
    }
}

impl From<ErrorCode> for ApiErrorCode {
    fn from(c: ErrorCode) -> Self {
        match c {
            ErrorCode::InsufficientFunds => Self::InsufficientFunds,
            ErrorCode::SubscriptionNotActive => Self::SubscriptionNotActive,
            ErrorCode::AllowanceExhausted => Self::AllowanceExhausted,
            ErrorCode::InvalidPaymentProof => Self::InvalidPaymentProof,
            ErrorCode::PlanDeprecated => Self::PlanDeprecated,
        }
    }
}

impl From<&str> for ApiErrorCode {
    fn from(s: &str) -> Self {
        Self::parse(s)
    }
}

impl From<String> for ApiErrorCode {
    fn from(s: String) -> Self {
        match Self::parse(&s) {
            Self::Other(_) => Self::Other(s),
            known => known,
        }
    }
}

impl PartialEq<str> for ApiErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ApiErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for ApiErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ApiErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ApiErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::from)
    }
}

/// The error body of the facilitator's API (and of the gate's non-402 refusals):
/// `{"error": {"code": "<code>", "message": "<prose>"}}`. Fields added later are ignored when
/// read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiErrorBody {
    /// The error.
    pub error: ApiErrorDetail,
}

/// The `error` object of an [`ApiErrorBody`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiErrorDetail {
    /// Machine-readable.
    pub code: ApiErrorCode,
    /// Human-readable; never internal details.
    #[serde(default)]
    pub message: String,
}

impl ApiErrorBody {
    /// A body with this code and message.
    pub fn new(code: impl Into<ApiErrorCode>, message: impl Into<String>) -> Self {
        Self {
            error: ApiErrorDetail {
                code: code.into(),
                message: message.into(),
            },
        }
    }

    /// The code.
    pub fn code(&self) -> &ApiErrorCode {
        &self.error.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.error.message
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        // A struct of two strings: serializing cannot fail.
        serde_json::to_string(self).expect("an error body serializes")
    }
}

impl fmt::Display for ApiErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.error.code, self.error.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_the_spec_names() {
        for code in [
            ErrorCode::InsufficientFunds,
            ErrorCode::SubscriptionNotActive,
            ErrorCode::AllowanceExhausted,
            ErrorCode::InvalidPaymentProof,
            ErrorCode::PlanDeprecated,
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
            assert_eq!(code.to_string(), code.as_str());
            let api = ApiErrorCode::from(code);
            assert_eq!(api.as_str(), code.as_str());
            assert_eq!(api.spec(), Some(code));
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(
            ErrorCode::parse("insufficient_funds"),
            Some(ErrorCode::InsufficientFunds)
        );
        assert_eq!(ErrorCode::parse("NotFound"), None);
    }

    #[test]
    fn api_codes_round_trip_and_keep_unknown_ones() {
        for name in ApiErrorCode::KNOWN {
            let code = ApiErrorCode::parse(name);
            assert!(!matches!(code, ApiErrorCode::Other(_)), "{name}");
            assert_eq!(serde_json::to_value(&code).unwrap(), *name);
            assert_eq!(
                serde_json::from_value::<ApiErrorCode>((*name).into()).unwrap(),
                code
            );
        }
        let later: ApiErrorCode = serde_json::from_value("SomethingNew".into()).unwrap();
        assert_eq!(later, ApiErrorCode::Other("SomethingNew".into()));
        assert_eq!(serde_json::to_value(&later).unwrap(), "SomethingNew");
    }

    /// Every code's wire spelling, written out: a renamed variant changes the wire, and this
    /// table says so.
    #[test]
    fn every_code_renders_as_its_wire_name() {
        let wire = [
            "InsufficientFunds",
            "SubscriptionNotActive",
            "AllowanceExhausted",
            "InvalidPaymentProof",
            "PlanDeprecated",
            "MalformedJson",
            "InvalidField",
            "InvalidQuery",
            "InvalidPath",
            "BadRequest",
            "UnsupportedMediaType",
            "PayloadTooLarge",
            "MethodNotAllowed",
            "NotFound",
            "RateLimited",
            "RequestTimeout",
            "Unauthorized",
            "Forbidden",
            "ClaimMismatch",
            "InvalidSignature",
            "InvalidAuthorization",
            "AuthorizationExpired",
            "AuthorizationNotYetValid",
            "ValidityTooLong",
            "AuthorizationUsed",
            "AccountBlacklisted",
            "TokenPaused",
            "NonceMismatch",
            "AmountBelowFee",
            "InvalidAmount",
            "UnsupportedNetwork",
            "UnsupportedToken",
            "UnknownNetwork",
            "IdempotencyConflict",
            "SettlementReverted",
            "Pending",
            "InvalidPlan",
            "UnknownPlan",
            "UnknownSubscription",
            "SubscriptionsUnavailable",
            "SubscriptionReverted",
            "RaiseReverted",
            "AllowanceNotRaised",
            "SignatureExpired",
            "DeadlineTooFar",
            "WebhooksNotConfigured",
            "TooManyEndpoints",
            "TargetNotAllowed",
            "Unavailable",
            "ChainError",
            "Internal",
            "PaymentRequired",
            "UnsupportedVersion",
            "FacilitatorUnavailable",
            "ChainUnavailable",
            "MemoStoreUnavailable",
            "SettlementPending",
            "SubscriptionsNotConfigured",
            "MeteringNotConfigured",
            "MeteringMisconfigured",
            "InternalError",
            "AmbiguousPath",
            "UpstreamTimeout",
            "UpstreamUnavailable",
        ];
        assert_eq!(ApiErrorCode::KNOWN, wire.as_slice());
        for name in wire {
            let code = ApiErrorCode::parse(name);
            assert_eq!(code.as_str(), name);
            assert_eq!(code.to_string(), name);
            assert_eq!(ApiErrorCode::from(name.to_owned()), code);
            assert_eq!(
                serde_json::to_string(&ApiErrorBody::new(code.clone(), "m")).unwrap(),
                format!(r#"{{"error":{{"code":"{name}","message":"m"}}}}"#)
            );
        }
        let mut sorted = wire.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), wire.len(), "a code is listed twice");
    }

    #[test]
    fn the_error_body_has_the_documented_shape() {
        let body = ApiErrorBody::new(ApiErrorCode::NotFound, "no such thing");
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({ "error": { "code": "NotFound", "message": "no such thing" } })
        );
        // Extra fields are ignored, a missing message is empty.
        let read: ApiErrorBody = serde_json::from_str(
            r#"{"error":{"code":"AllowanceExhausted","remaining":"0"},"extra":1}"#,
        )
        .unwrap();
        assert_eq!(read.code(), &ApiErrorCode::AllowanceExhausted);
        assert_eq!(read.message(), "");
    }
}
