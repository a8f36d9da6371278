//! The facilitator's domain error: what a [`Facilitator`](crate::Facilitator) method fails with.
//!
//! The variants carry the spec's names (`InsufficientFunds`, `SubscriptionNotActive`,
//! `AllowanceExhausted`, `PlanDeprecated`, ...) and typed sources (the chain's, the store's). Their
//! HTTP face (status, [`ApiErrorCode`] and message, in the one error body) is given in exactly one
//! place, [`Error::to_api`]; see [`ApiError`] for the table of statuses.

use std::time::Duration;

use alloy::primitives::{Address, B256};
use tollgate_chain::{Error as ChainError, Revert};
use tollgate_protocol::ApiErrorCode;

pub use crate::api::{
    error::ApiError,
    extract::{ApiJson, ApiPath, ApiQuery},
};
use crate::store::{RelayScope, StoreError};

/// What a [`Facilitator`](crate::Facilitator) method (or a handler's own check) fails with: a
/// domain error. It is mapped to an HTTP status, code and message in exactly one place
/// ([`Error::to_api`], through `IntoResponse` and `From<Error> for ApiError`), and server-side
/// failures are logged in exactly one place ([`Error::into_api`]), their cause never sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A query parameter that does not parse, is out of range or contradicts another (400
    /// `InvalidQuery`); the message names it.
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// A body or path field that is missing, malformed or out of range (400 `InvalidField`);
    /// the message names it (`"<field>: <why>"`).
    #[error("invalid field: {0}")]
    InvalidField(String),
    /// No valid API key, or a registration that does not prove the address (401 `Unauthorized`).
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The payer's (or subscriber's) token balance is below the amount (402 `InsufficientFunds`).
    #[error("insufficient funds: {0}")]
    InsufficientFunds(String),
    /// A deduction would cross the cycle's overage cap (402 `AllowanceExhausted`).
    #[error("allowance exhausted: {0}")]
    AllowanceExhausted(String),
    /// The API key's provider does not own the resource (403 `Forbidden`).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The token refuses an account of the payment, blacklisted (Circle's USDC) (403
    /// `AccountBlacklisted`); the message names it, where the token says which.
    #[error("account blacklisted: {0}")]
    AccountBlacklisted(String),
    /// The token is paused (Circle's USDC) and moves nothing until it is unpaused (422
    /// `TokenPaused`); nothing was recorded, the same payment may be sent again later.
    #[error("token paused: {0}")]
    TokenPaused(String),
    /// A repeat of `/authorize`, or a status URL, without the settlement's claim (403
    /// `ClaimMismatch`).
    #[error("the settlement's claim was not presented")]
    ClaimMismatch,
    /// No such settlement, subscription, plan, endpoint or delivery (404 `NotFound`); the
    /// message says what.
    #[error("not found: {0}")]
    NotFound(String),
    /// The authorization's nonce is used or cancelled on-chain and no matching settlement
    /// exists (409 `AuthorizationUsed`).
    #[error("the authorization's nonce is already used, by no matching settlement")]
    AuthorizationUsed,
    /// The payment (payer and nonce) or the idempotency key was used with other terms (409
    /// `IdempotencyConflict`).
    #[error("idempotency conflict: {0}")]
    IdempotencyConflict(String),
    /// A deduction for a paused, cancelled, overdue or ending subscription (409
    /// `SubscriptionNotActive`).
    #[error("subscription {id} {why}")]
    SubscriptionNotActive {
        /// The subscription.
        id: B256,
        /// Why it is not active ("is paused", ...).
        why: &'static str,
    },
    /// Well-formed but invalid (422): an unknown network or token, a bad signature, a nonce not
    /// committing to payTo/memo/fee, a validity window, plan terms, a webhook target, ...;
    /// `code` names the reason, `reason` explains it (naming the field where there is one).
    #[error("{code}: {reason}")]
    Invalid {
        /// The reason (`UnknownNetwork`, `InvalidSignature`, `NonceMismatch`, ...).
        code: ApiErrorCode,
        /// The explanation.
        reason: String,
    },
    /// The plan takes no new subscriptions (422 `PlanDeprecated`).
    #[error("plan {plan_id} is deprecated")]
    PlanDeprecated {
        /// The plan.
        plan_id: B256,
    },
    /// A transaction the facilitator relayed was mined and reverted (422 `SettlementReverted`,
    /// `SubscriptionReverted` (a subscription or a subscriber's action) or `RaiseReverted`).
    #[error("{kind:?} transaction {tx_hash} reverted")]
    Reverted {
        /// What the transaction was.
        kind: Relayed,
        /// The transaction.
        tx_hash: B256,
    },
    /// A contract refused the call at simulation: 402 `InsufficientFunds`, 409
    /// `AuthorizationUsed`, 403 `AccountBlacklisted`, 422 `TokenPaused`, 422 `PlanDeprecated`,
    /// or 422 named after the revert.
    #[error("reverted: {0}")]
    Revert(Revert),
    /// A settlement that failed earlier, answered as it was then (422 with its stored code).
    #[error("the settlement failed: {code}: {message}")]
    SettlementFailed {
        /// The code recorded when it failed.
        code: ApiErrorCode,
        /// The message recorded when it failed.
        message: String,
    },
    /// A relayed transaction is not confirmed yet: retry the same request (503 `Pending`).
    #[error("transaction {tx_hash} is not confirmed yet")]
    Pending {
        /// The transaction.
        tx_hash: B256,
    },
    /// A subscription's transaction was not confirmed within the confirmation timeout: send the
    /// same request again (504 `Pending`).
    #[error("transaction {tx_hash} not confirmed in time")]
    ConfirmationTimeout {
        /// The transaction.
        tx_hash: B256,
    },
    /// A subscriber's relayed lifecycle transactions are at their bound (429 `RateLimited`,
    /// with `Retry-After`): nothing was sent (see [`crate::config::SubscriptionsSection`]).
    #[error("{} at its bound of relayed transactions; retry in {retry_after} s", match scope {
        RelayScope::Subscription => format!("subscription {id}"),
        RelayScope::Subscriber => format!("subscriber {subscriber}"),
    })]
    RelayLimited {
        /// Whose bound: the subscription's or its subscriber's.
        scope: RelayScope,
        /// The subscription asked about.
        id: B256,
        /// Its subscriber.
        subscriber: Address,
        /// The bound: at most this many ...
        limit: u32,
        /// ... within this window.
        window: Duration,
        /// Seconds until a slot frees up.
        retry_after: u64,
    },
    /// This replica holds no relayer account (more replicas than relayer keys): it sends
    /// nothing (503 `Unavailable`, with `Retry-After`; another replica takes the request).
    #[error(transparent)]
    NoRelayer(#[from] crate::replica::NoRelayer),
    /// No relayer of this replica holds the gas of one settlement on the payment's network (503
    /// `Unavailable`, with `Retry-After`): nothing was written or sent (see [`crate::funds`]).
    #[error("relayers out of gas: {0}")]
    RelayersDry(String),
    /// No key to seal webhook secrets with is configured (503 `WebhooksNotConfigured`).
    #[error("webhook secrets key not configured")]
    WebhooksNotConfigured,
    /// The chain failed: a revert maps as [`Error::Revert`]; an unreachable node is 503
    /// `Unavailable`, any other refusal 502 `ChainError` (the cause is logged, never sent).
    #[error("chain: {0}")]
    Chain(#[from] ChainError),
    /// The store failed (503 `Unavailable`; the cause is logged, never sent).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A bug or a broken invariant (500 `Internal`; the cause is logged, never sent).
    #[error("internal: {0}")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// What a relayed transaction that reverted on-chain was (see [`Error::Reverted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Relayed {
    /// A `/authorize` settlement through the PaymentRouter.
    Settlement,
    /// `Subscriptions.subscribeWithSig`.
    Subscription,
    /// `Subscriptions.raiseAllowanceWithSig`.
    RaiseAllowance,
    /// `Subscriptions.pauseWithSig`.
    Pause,
    /// `Subscriptions.resumeWithSig`.
    Resume,
    /// `Subscriptions.cancelWithSig`.
    Cancel,
}

/// A [`Facilitator`](crate::Facilitator) method's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// 422 with `code` and `reason`.
    pub(crate) fn invalid(code: ApiErrorCode, reason: impl Into<String>) -> Self {
        Self::Invalid {
            code,
            reason: reason.into(),
        }
    }

    /// 500: a bug or a broken invariant.
    pub(crate) fn internal(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Internal(cause.into())
    }

    /// Whether this is the facilitator's failure (a 5xx: a dependency down or a bug) rather than
    /// the request's.
    pub fn is_server_error(&self) -> bool {
        self.to_api().status.is_server_error()
    }

    /// Whether this is the request's failure (a 4xx): the same request will fail again.
    pub fn is_client_error(&self) -> bool {
        self.to_api().status.is_client_error()
    }
}
