#![doc = include_str!("../README.md")]
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod error;
mod facilitator;
mod gate;
mod layer;
mod memo;
mod proof;
pub mod store;
mod subscription;
mod webhook;

pub use error::{
    BuildError, DeductError, FacilitatorError, InvalidProof, ProofError, Result, StoreError,
    SubscriptionError,
};
pub use gate::{
    DEFAULT_FACILITATOR_TIMEOUT, DEFAULT_MEMO_TTL, DEFAULT_PENDING_HOLD,
    DEFAULT_SIGNERS_MIN_REFRESH, DEFAULT_SIGNERS_TTL, DEFAULT_TOKEN_DECIMALS, Expected, Gate,
    GateBuilder, MppFailure, Offer, Pricing, VerifiedPayment, X402Failure,
};
pub use layer::{
    Admission, PAYMENT_RECEIPT, PAYMENT_REQUIRED, PAYMENT_REQUIRED_REASON, PAYMENT_RESPONSE,
    PAYMENT_SIGNATURE, PaymentGate, PaymentGateLayer, ResponseFuture, UNSUPPORTED_VERSION_REASON,
    X_PAYMENT, X_PAYMENT_RESPONSE, X_PAYMENT_RETRY, X_SERVICE_RECEIPT, X_SERVICE_SCHEMES,
};
pub mod paywall;
pub use proof::parse_payment_proof;
pub use store::MemoStore;
pub use subscription::{
    DEFAULT_SUBSCRIPTION_CACHE_TTL, DEFAULT_SUBSCRIPTION_GRACE, DEFAULT_SUBSCRIPTION_POLL_INTERVAL,
    VerifiedSubscription, X_SERVICE_SUB, parse_subscription_id,
};
pub use tollgate_protocol::{
    AllowanceUsage, Amount, ApiErrorCode, PaymentProof, PaymentRequired, PlanTerms, XPaymentError,
};
pub use webhook::{
    DEFAULT_WEBHOOK_TOLERANCE, EventData, EventType, VerifiedWebhook, WebhookError, WebhookEvent,
    WebhookSecret, WebhookSecretError, events, verify_webhook, verify_webhook_with,
};

#[cfg(test)]
use tempfile as _;
