//! Tollgate's wire contract, free of I/O: the x402 V1 payment-required body and payloads, the
//! facilitator's signed payment proofs, the one `X-PAYMENT` decoder ([`decode_x_payment`]), the
//! header names ([`headers`]), every request and response of the facilitator's HTTP API
//! ([`api`]), and the error codes and error body ([`ErrorCode`], [`ApiErrorCode`],
//! [`ApiErrorBody`]).

mod amount;
pub mod api;
mod clock;
mod codec;
mod error;
#[cfg(test)]
mod fixtures;
pub mod headers;
pub mod mpp;
pub mod network;
#[cfg(feature = "openapi")]
pub mod openapi;
mod payment;
mod required;
pub mod webhook;
pub mod x402;
mod x_payment;

pub use amount::{Amount, AmountError, NotationError};
pub use api::subscriptions::{
    AllowanceUsage, AllowanceView, DeductRequest, PermitSignature, PlanView, QuoteQuery,
    RaiseAllowanceRequest, SubscribeRequest, SubscriptionQuote, SubscriptionStatus,
    SubscriptionView,
};
pub use clock::unix_now;
pub use error::{ApiErrorBody, ApiErrorCode, ApiErrorDetail, ErrorCode};
pub use mpp::rfc3339_millis;
pub use network::{Network, NetworkError};
pub use payment::{
    AuthorizeRequest, AuthorizeResponse, Eip3009Authorization, MAX_PAYMENT_HEADER, PaymentProof,
    PendingResponse, ProofDecodeError, SettlementStatus, SignedPayment,
};
pub use required::{
    PaymentOption, PaymentRequired, PlanTerms, SPEC_VERSION, ServiceExtension, SubscriptionReceipt,
};
pub use webhook::{WebhookError, WebhookEvent, WebhookSecret, WebhookSecretError};
pub use x_payment::{XPayment, XPaymentError, decode_x_payment};
