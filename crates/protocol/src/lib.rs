//! Tollgate's wire vocabulary, free of I/O: the error codes of the spec (and, as the facilitator
//! and gate land, the x402 V1 payment-required body, payment options, proofs and signed payments).

mod amount;
pub mod network;
mod payment;
mod required;
mod subscription;
pub mod webhook;
pub mod x402;

pub use amount::{Amount, AmountError};
pub use payment::{
    AuthorizeRequest, AuthorizeResponse, Eip3009Authorization, MAX_PAYMENT_HEADER, PaymentProof,
    PendingResponse, ProofDecodeError, SettlementStatus, SignedPayment,
};
pub use required::{PaymentOption, PaymentRequired, PlanTerms, SPEC_VERSION, ServiceExtension};
pub use subscription::{
    AllowanceUsage, AllowanceView, DeductRequest, PermitSignature, PlanView, RaiseAllowanceRequest,
    SubscribeRequest, SubscriptionQuote, SubscriptionStatus, SubscriptionView,
};
pub use webhook::{WebhookError, WebhookEvent, WebhookSecret, WebhookSecretError};

use serde::{Deserialize, Serialize};

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
        }
    }
}
