//! The gate's errors: one enum per thing that can go wrong, each `#[non_exhaustive]`.
//!
//! - [`ProofError`]: an `X-PAYMENT` value that is not a Tollgate proof (malformed, or an x402
//!   payload, which the layer routes to the x402 path);
//! - [`InvalidProof`]: a well-formed proof that does not pay for this request, or that cannot be
//!   checked right now ([`InvalidProof::is_unavailable`]);
//! - [`BuildError`]: a [`crate::GateBuilder`] that cannot build;
//! - [`StoreError`]: the memo store failed;
//! - [`FacilitatorError`]: the facilitator could not be asked, or refused the request itself;
//! - [`SubscriptionError`]: an `X-Service-Sub` id that does not grant access (the spec's
//!   `SubscriptionNotActive`), or that cannot be checked right now.

use alloy::primitives::{Address, B256};
use tollgate_protocol::{Amount, ApiErrorCode, XPaymentError};

/// Result alias with the gate's build error.
pub type Result<T, E = BuildError> = std::result::Result<T, E>;

/// Why an `X-PAYMENT` value is not a Tollgate payment proof ([`crate::parse_payment_proof`]):
/// the protocol's decoder said so ([`ProofError::Decode`]), or it is an x402 payment payload,
/// which the layer routes to the x402 path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    /// Not a readable proof, as the protocol's one `X-PAYMENT` decoder
    /// ([`tollgate_protocol::decode_x_payment`]) reports it: too large, not base64, not JSON, an
    /// unknown proof version, or not a proof's shape. Its message and source are the decoder's.
    #[error(transparent)]
    Decode(#[from] XPaymentError),
    /// An x402 payment payload (it has `x402Version`), not a Tollgate proof. The layer settles
    /// version 1 through the facilitator and refuses the others.
    #[error(
        "X-PAYMENT carries an x402 payment payload (x402Version {x402_version:?}), not a Tollgate proof"
    )]
    X402Payload {
        /// The payload's `x402Version`, when it is an integer.
        x402_version: Option<u64>,
    },
}

impl ProofError {
    /// A stable snake_case code for the 402 body's `reason` (the decoder's
    /// [`XPaymentError::code`], or `x402_payload`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Decode(e) => e.code(),
            Self::X402Payload { .. } => "x402_payload",
        }
    }
}

/// Why a well-formed proof does not pay for the request ([`crate::Gate::verify_payment_proof`]).
///
/// [`InvalidProof::is_unavailable`] separates "this proof is no good" (the client gets a 402 with
/// fresh terms) from "the proof could not be checked now" (a 503: the facilitator, the chain or the
/// memo store is down; the memo is not spent, so the same proof works once they are back).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidProof {
    /// The signature is malformed, or does not recover to the proof's `signer`.
    #[error("the proof's signature is invalid")]
    BadSignature,
    /// Signed by a key the facilitator does not publish in `/.well-known/tollgate`.
    #[error("the proof is signed by {0}, which is not one of the facilitator's proof signers")]
    UnknownSigner(Address),
    /// Past the proof's own `expiry`.
    #[error("the proof expired at {expiry}")]
    Expired {
        /// The proof's expiry (unix seconds).
        expiry: u64,
    },
    /// For another network (or another chain id than the facilitator publishes for it).
    #[error("the proof is for network {found:?}, this gate takes {expected:?}")]
    WrongNetwork {
        /// This gate's network.
        expected: String,
        /// The proof's network (with its chain id when only that differs).
        found: String,
    },
    /// For another token.
    #[error("the proof pays token {found}, this gate takes {expected}")]
    WrongToken {
        /// This gate's token.
        expected: Address,
        /// The proof's token.
        found: Address,
    },
    /// Paid to someone else.
    #[error("the proof pays {found}, this gate is paid to {expected}")]
    WrongPayee {
        /// This gate's payee.
        expected: Address,
        /// The proof's payee.
        found: Address,
    },
    /// Less than the price.
    #[error("the proof pays {paid}, the price is {price}")]
    Underpaid {
        /// The price of the request.
        price: Amount,
        /// What the proof paid.
        paid: Amount,
    },
    /// The memo was not issued by this gate for this method, resource, price, payee and network
    /// (its MAC does not match): a proof bought for another resource or price, or a forgery.
    #[error("the proof's memo was not issued by this gate for this request")]
    MemoForgedOrForeign,
    /// The memo was issued by this gate for this request, but its time is up.
    #[error("the proof's memo expired at {expiry}; request fresh terms")]
    MemoExpired {
        /// The memo's expiry (unix seconds).
        expiry: u64,
    },
    /// The memo was already used once.
    #[error("this payment was already used")]
    Replayed,
    /// On-chain mode: the transaction is missing, failed, or lacks the matching
    /// `PaymentSettled` event.
    #[error("the payment is not settled on-chain: {0}")]
    NotSettledOnChain(&'static str),
    /// The facilitator's signers could not be fetched (and none are cached).
    #[error("the facilitator is unavailable")]
    FacilitatorUnavailable(#[source] FacilitatorError),
    /// On-chain mode: the chain could not be read.
    #[error("the chain is unavailable")]
    ChainUnavailable(#[source] tollgate_chain::Error),
    /// The memo store could not record the memo.
    #[error("the memo store is unavailable")]
    StoreUnavailable(#[source] StoreError),
}

impl InvalidProof {
    /// A stable snake_case code for the 402 body's `reason`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadSignature => "bad_signature",
            Self::UnknownSigner(_) => "unknown_signer",
            Self::Expired { .. } => "proof_expired",
            Self::WrongNetwork { .. } => "wrong_network",
            Self::WrongToken { .. } => "wrong_token",
            Self::WrongPayee { .. } => "wrong_payee",
            Self::Underpaid { .. } => "underpaid",
            Self::MemoForgedOrForeign => "memo_forged_or_foreign",
            Self::MemoExpired { .. } => "memo_expired",
            Self::Replayed => "replayed",
            Self::NotSettledOnChain(_) => "not_settled_on_chain",
            Self::FacilitatorUnavailable(_) => "facilitator_unavailable",
            Self::ChainUnavailable(_) => "chain_unavailable",
            Self::StoreUnavailable(_) => "store_unavailable",
        }
    }

    /// `true` when the proof could not be checked now (facilitator, chain or store down), as
    /// opposed to being invalid. The layer answers these with 503.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Self::FacilitatorUnavailable(_) | Self::ChainUnavailable(_) | Self::StoreUnavailable(_)
        )
    }
}

/// Why an `X-Service-Sub` subscription id does not grant access
/// ([`crate::Gate::verify_subscription`]). The layer answers all but the last two with 402,
/// fresh terms and `error: "SubscriptionNotActive"` (with [`SubscriptionError::code`] as
/// `reason`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubscriptionError {
    /// Not `0x` and 64 hex digits (or several `X-Service-Sub` headers).
    #[error("X-Service-Sub is not a subscription id (0x and 64 hex digits)")]
    Malformed,
    /// The resource is not sold by subscription.
    #[error("this resource is not sold by subscription")]
    NotOffered,
    /// No such subscription on-chain.
    #[error("no subscription {0}")]
    Unknown(B256),
    /// A subscription to a plan this resource does not accept.
    #[error("subscription {id} is to plan {plan_id}, which this resource does not accept")]
    ForeignPlan {
        /// The subscription.
        id: B256,
        /// Its plan.
        plan_id: B256,
    },
    /// Paused by its subscriber or by a failed renewal.
    #[error("subscription {0} is paused")]
    Paused(B256),
    /// Cancelled for good.
    #[error("subscription {0} is cancelled")]
    Cancelled(B256),
    /// ACTIVE on-chain, but its paid period ended (plus the gate's grace) without a renewal.
    #[error("subscription {id} was paid through {paid_through} and is not renewed")]
    Overdue {
        /// The subscription.
        id: B256,
        /// The end of its paid period (unix seconds).
        paid_through: u64,
    },
    /// The gate has no chain to check subscriptions on ([`crate::GateBuilder::subscriptions`]):
    /// a configuration error (the layer answers 500).
    #[error(
        "subscriptions are priced but the gate has no subscriptions contract (GateBuilder::subscriptions)"
    )]
    NotConfigured,
    /// The chain could not be read (the layer answers 503).
    #[error("the chain is unavailable")]
    ChainUnavailable(#[source] tollgate_chain::Error),
}

impl SubscriptionError {
    /// A stable snake_case code for the 402 body's `reason`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed => "malformed_subscription_id",
            Self::NotOffered => "subscription_not_offered",
            Self::Unknown(_) => "unknown_subscription",
            Self::ForeignPlan { .. } => "foreign_plan",
            Self::Paused(_) => "subscription_paused",
            Self::Cancelled(_) => "subscription_cancelled",
            Self::Overdue { .. } => "subscription_overdue",
            Self::NotConfigured => "subscriptions_not_configured",
            Self::ChainUnavailable(_) => "chain_unavailable",
        }
    }

    /// `true` when the subscription could not be checked (chain down, gate misconfigured), as
    /// opposed to not granting access.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::NotConfigured | Self::ChainUnavailable(_))
    }
}

/// The memo store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database refused or could not be reached (every claim waiting on the same commit gets
    /// it). The database's own error is the [`source`](std::error::Error::source); no driver's
    /// type is part of the gate's API.
    #[error("memo store database error")]
    Database(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A configuration value is unusable (the message names it).
    #[error("memo store configuration: {0}")]
    Config(String),
}

/// The facilitator could not be asked, or answered something unusable: the
/// [`tollgate_client`] error ([`FacilitatorError::is_refusal`]: the facilitator refused the
/// request itself, a 4xx, rather than being down).
pub use tollgate_client::Error as FacilitatorError;

/// Why [`crate::Gate::deduct_allowance`] deducted nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeductError {
    /// The deduction would cross the cycle's overage cap (the spec's `AllowanceExhausted`): the
    /// metered request gets a 402 until the subscriber raises its cap or the next cycle begins.
    #[error("AllowanceExhausted: {message}")]
    AllowanceExhausted {
        /// The facilitator's explanation (what remains of the cap).
        message: String,
    },
    /// The subscription is paused, cancelled, overdue or between cycles.
    #[error("SubscriptionNotActive: {message}")]
    SubscriptionNotActive {
        /// The facilitator's explanation.
        message: String,
    },
    /// The gate has no provider API key ([`crate::GateBuilder::api_key`]).
    #[error("deducting an allowance needs the provider's API key (GateBuilder::api_key)")]
    NotConfigured,
    /// The facilitator refused the request itself: a missing or revoked API key (401), a
    /// subscription to another provider's plan (403), an unknown subscription (404), a bad amount
    /// (422), a reused idempotency key (409).
    #[error("the facilitator refused the deduction: {status} {code}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The error body's `code` (the protocol's [`ApiErrorCode`]; a code this version does
        /// not know is [`ApiErrorCode::Other`], kept verbatim).
        code: ApiErrorCode,
        /// The error body's `message`.
        message: String,
    },
    /// The facilitator could not be asked, or is failing (5xx).
    #[error("the facilitator is unavailable")]
    Unavailable(#[source] FacilitatorError),
}

impl DeductError {
    /// The spec's error name for the 402 (`AllowanceExhausted`, `SubscriptionNotActive`), else a
    /// code of ours.
    pub fn code(&self) -> &str {
        match self {
            Self::AllowanceExhausted { .. } => {
                tollgate_protocol::ErrorCode::AllowanceExhausted.as_str()
            }
            Self::SubscriptionNotActive { .. } => {
                tollgate_protocol::ErrorCode::SubscriptionNotActive.as_str()
            }
            Self::NotConfigured => const { ApiErrorCode::MeteringNotConfigured.as_str() },
            Self::Refused { code, .. } => code.as_str(),
            Self::Unavailable(_) => const { ApiErrorCode::FacilitatorUnavailable.as_str() },
        }
    }
}

/// A [`crate::GateBuilder`] that cannot build.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A required setting was not given (the builder method is named).
    #[error("Gate::builder(): `{0}` is required")]
    Missing(&'static str),
    /// A setting has an unusable value (the setting is named).
    #[error("Gate::builder(): `{setting}`: {problem}")]
    Invalid {
        /// The builder method.
        setting: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The HTTP client for the facilitator could not be built.
    #[error("cannot build the facilitator HTTP client")]
    Http(#[source] reqwest::Error),
    /// The memo store could not be opened.
    #[error("cannot open the memo store")]
    Store(#[from] StoreError),
    /// The facilitator could not be asked for its discovery document or a plan
    /// ([`crate::GateBuilder::plan`]).
    #[error("cannot load the plans and network from the facilitator")]
    Facilitator(#[source] FacilitatorError),
    /// The facilitator knows no plan with this id on the gate's network.
    #[error("the facilitator knows no plan {0} on this network")]
    UnknownPlan(B256),
    /// The plan is deprecated (the spec's `PlanDeprecated`): it takes no new subscribers, so a
    /// gate should not offer it.
    #[error("PlanDeprecated: plan {0} is deprecated and takes no new subscriptions")]
    PlanDeprecated(B256),
    /// The facilitator does not serve the gate's network, or serves it without a subscriptions
    /// contract.
    #[error("the facilitator at {facilitator} {problem}")]
    Network {
        /// The facilitator's base URL.
        facilitator: String,
        /// What it lacks.
        problem: String,
    },
    /// Plans are priced but there is no chain to check subscriptions on: the facilitator's
    /// discovery publishes no `rpcUrl` for the network (its `networks.<n>.public_rpc_url`), and
    /// neither [`crate::GateBuilder::rpc_url`] nor [`crate::GateBuilder::subscriptions`] was
    /// given.
    #[error(
        "no chain to check subscriptions on: the facilitator publishes no rpcUrl for network \
         {network:?} (its networks.<n>.public_rpc_url); give the gate an RPC URL \
         (GateBuilder::rpc_url) or a chain (GateBuilder::subscriptions)"
    )]
    NoRpc {
        /// The gate's network.
        network: String,
    },
    /// The chain's JSON-RPC endpoint could not be reached, or serves another chain.
    #[error("cannot connect to the chain to check subscriptions")]
    Chain(#[source] tollgate_chain::Error),
}
