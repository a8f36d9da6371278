//! Where a domain [`Error`] becomes a response: the one mapping ([`Error::to_api`]), the one
//! place answered errors are logged ([`Error::into_api`]) and the one `IntoResponse`, writing the
//! facilitator's one error body `{"error": {"code": "<SpecName or reason>", "message": "..."}}`
//! with the status [`ApiError`] lists.

use alloy::primitives::B256;
use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use tollgate_chain::{Error as ChainError, Revert};
use tollgate_protocol::{ApiErrorBody, ApiErrorCode};

use crate::{
    error::{Error, Relayed},
    store::RelayScope,
};

impl Error {
    /// The one mapping from a domain error to what the client sees: status, code and message.
    /// Pure: [`Error::into_api`] is where server-side failures are logged.
    pub fn to_api(&self) -> ApiError {
        use ApiErrorCode as C;
        match self {
            Self::InvalidQuery(m) => ApiError::bad_request(C::InvalidQuery, m.clone()),
            Self::InvalidField(m) => ApiError::bad_request(C::InvalidField, m.clone()),
            Self::Unauthorized(m) => {
                ApiError::new(StatusCode::UNAUTHORIZED, C::Unauthorized, m.clone())
            }
            Self::InsufficientFunds(m) => ApiError::new(
                StatusCode::PAYMENT_REQUIRED,
                C::InsufficientFunds,
                m.clone(),
            ),
            Self::AllowanceExhausted(m) => ApiError::new(
                StatusCode::PAYMENT_REQUIRED,
                C::AllowanceExhausted,
                m.clone(),
            ),
            Self::Forbidden(m) => ApiError::new(StatusCode::FORBIDDEN, C::Forbidden, m.clone()),
            Self::AccountBlacklisted(m) => {
                ApiError::new(StatusCode::FORBIDDEN, C::AccountBlacklisted, m.clone())
            }
            Self::TokenPaused(m) => unprocessable(C::TokenPaused, m.clone()),
            Self::ClaimMismatch => ApiError::new(
                StatusCode::FORBIDDEN,
                C::ClaimMismatch,
                "this settlement belongs to the client that submitted it: send its claim (or the \
                 status URL's token)",
            ),
            Self::NotFound(m) => ApiError::not_found(m.clone()),
            Self::AuthorizationUsed => ApiError::new(
                StatusCode::CONFLICT,
                C::AuthorizationUsed,
                "the authorization's nonce is already used or cancelled on-chain, and no matching settlement exists",
            ),
            Self::IdempotencyConflict(m) => {
                ApiError::new(StatusCode::CONFLICT, C::IdempotencyConflict, m.clone())
            }
            Self::SubscriptionNotActive { id, why } => ApiError::new(
                StatusCode::CONFLICT,
                C::SubscriptionNotActive,
                format!("subscription {id} {why}"),
            ),
            Self::Invalid { code, reason } => unprocessable(code.clone(), reason.clone()),
            Self::PlanDeprecated { plan_id } => plan_deprecated(*plan_id),
            Self::Reverted { kind, tx_hash } => {
                let (code, what) = match kind {
                    Relayed::Settlement => (C::SettlementReverted, "settlement"),
                    Relayed::Subscription => (C::SubscriptionReverted, "subscription"),
                    Relayed::RaiseAllowance => (C::RaiseReverted, "raiseAllowanceWithSig"),
                    Relayed::Pause => (C::SubscriptionReverted, "pauseWithSig"),
                    Relayed::Resume => (C::SubscriptionReverted, "resumeWithSig"),
                    Relayed::Cancel => (C::SubscriptionReverted, "cancelWithSig"),
                };
                unprocessable(code, format!("{what} transaction {tx_hash} reverted"))
            }
            Self::Revert(revert) => revert_api(revert),
            Self::SettlementFailed { code, message } => {
                unprocessable(code.clone(), message.clone())
            }
            Self::Pending { tx_hash } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                C::Pending,
                format!("transaction {tx_hash} is not confirmed yet; retry the same request"),
            ),
            Self::ConfirmationTimeout { tx_hash } => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                C::Pending,
                format!(
                    "transaction {tx_hash} not confirmed in time; send the same request again to get the subscription once it is"
                ),
            ),
            Self::RelayLimited {
                scope,
                id,
                subscriber,
                limit,
                window,
                retry_after,
            } => {
                let whose = match scope {
                    RelayScope::Subscription => format!("subscription {id}"),
                    RelayScope::Subscriber => format!("subscriber {subscriber}"),
                };
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    C::RateLimited,
                    format!(
                        "{whose} is at its bound of {limit} relayed lifecycle transactions per \
                         {}; nothing was sent: retry in {retry_after} s",
                        per(*window)
                    ),
                )
                .with_retry_after(*retry_after)
            }
            Self::NoRelayer(e) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                C::Unavailable,
                format!("{e}; retry (the load balancer sends it to another replica)"),
            ),
            Self::RelayersDry(m) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, C::Unavailable, m.clone())
                    .with_retry_after(crate::funds::DRY_RETRY_AFTER_SECS)
            }
            Self::WebhooksNotConfigured => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                C::WebhooksNotConfigured,
                "webhook endpoints are unavailable: the facilitator's operator has not set \
                 `keys.webhook_secrets`, the key their signing secrets are encrypted with",
            ),
            Self::Chain(e @ ChainError::FeeCapExceeded { .. }) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                C::Unavailable,
                format!("{e}; nothing was written or sent: send the payment again later"),
            )
            .with_retry_after(crate::funds::DRY_RETRY_AFTER_SECS),
            Self::Chain(ChainError::Revert(revert)) => revert_api(revert),
            Self::Chain(e) if chain_unavailable(e) => unavailable("the chain"),
            Self::Chain(_) => ApiError::new(
                StatusCode::BAD_GATEWAY,
                C::ChainError,
                "the chain refused the transaction",
            ),
            Self::Store(_) => unavailable("the store"),
            Self::Internal(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                C::Internal,
                "internal error",
            ),
        }
    }

    /// [`Error::to_api`], logging a server-side failure's cause: the one place where errors
    /// answered to a client are logged.
    pub fn into_api(self) -> ApiError {
        match &self {
            Self::Store(cause) => tracing::error!(%cause, "the store unavailable"),
            Self::Chain(ChainError::Revert(_)) => {}
            Self::Chain(cause @ ChainError::FeeCapExceeded { .. }) => {
                tracing::warn!(%cause, "fees above the cap: a payment refused");
            }
            Self::Chain(cause) if chain_unavailable(cause) => {
                tracing::error!(%cause, "the chain unavailable");
            }
            Self::Chain(error) => tracing::warn!(%error, "chain refused a request"),
            Self::Internal(cause) => tracing::error!(%cause, "internal error"),
            _ => {}
        }
        self.to_api()
    }
}

/// The node could not be reached (503), as opposed to refusing the request (502).
fn chain_unavailable(e: &ChainError) -> bool {
    matches!(
        e,
        ChainError::Unavailable(_) | ChainError::Rpc { .. } | ChainError::Stopped
    )
}

/// A window as a message says it: `hour`, `day`, or `N s`.
fn per(window: std::time::Duration) -> String {
    match window.as_secs() {
        3600 => "hour".into(),
        86_400 => "day".into(),
        secs => format!("{secs} s"),
    }
}

/// 422 with this code and message.
fn unprocessable(code: ApiErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
}

/// 503 `Unavailable`: a dependency is down.
fn unavailable(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ApiErrorCode::Unavailable,
        format!("{what} is unavailable; retry later"),
    )
}

fn plan_deprecated(plan_id: B256) -> ApiError {
    unprocessable(
        ApiErrorCode::PlanDeprecated,
        format!("plan {plan_id} is deprecated and takes no new subscriptions"),
    )
}

/// A revert at simulation, as the client sees it.
fn revert_api(revert: &Revert) -> ApiError {
    use ApiErrorCode as C;
    match revert {
        Revert::InsufficientFunds {
            account,
            balance,
            needed,
        } => ApiError::new(
            StatusCode::PAYMENT_REQUIRED,
            C::InsufficientFunds,
            format!("payer {account} holds {balance}, the payment needs {needed}"),
        ),
        Revert::TransferExceedsBalance => ApiError::new(
            StatusCode::PAYMENT_REQUIRED,
            C::InsufficientFunds,
            "the payer's balance is below the payment",
        ),
        Revert::AuthorizationAlreadyUsed { .. } | Revert::AuthorizationUsedOrCanceled => {
            ApiError::new(
                StatusCode::CONFLICT,
                C::AuthorizationUsed,
                "the authorization's nonce is already used or cancelled",
            )
        }
        Revert::AuthorizationExpired { .. } => {
            unprocessable(C::AuthorizationExpired, revert.to_string())
        }
        Revert::AuthorizationNotYetValid { .. } => {
            unprocessable(C::AuthorizationNotYetValid, revert.to_string())
        }
        Revert::Blacklisted => ApiError::new(
            StatusCode::FORBIDDEN,
            C::AccountBlacklisted,
            "the token refuses the transfer: an account of the payment is blacklisted",
        ),
        Revert::TokenPaused => unprocessable(
            C::TokenPaused,
            "the token is paused and moves nothing until it is unpaused; retry later",
        ),
        Revert::PlanDeprecated { plan_id } => plan_deprecated(*plan_id),
        Revert::InvalidSignature => unprocessable(
            C::InvalidSignature,
            "the token rejected the authorization's signature",
        ),
        other => unprocessable(C::parse(other.name()), other.to_string()),
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        e.into_api()
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        self.into_api().into_response()
    }
}

/// An error answered to a client: what [`Error::to_api`] makes of a domain error, or an
/// extractor's rejection of a request's shape. Building one logs nothing. Its body is
/// `{"error": {"code": "<SpecName or reason>", "message": "..."}}`, with these statuses:
///
/// | status | when |
/// |---|---|
/// | 400 | malformed JSON, a missing or mistyped field (the message names it); `InvalidQuery`: a query string that does not parse or is out of range (the message names the parameter); `InvalidPath`: a path parameter that does not decode |
/// | 401 | `Unauthorized`: a provider endpoint without a valid API key |
/// | 402 | `InsufficientFunds`: the payer's token balance is below the amount; `AllowanceExhausted`: a deduction would cross the overage cap |
/// | 403 | `Forbidden`: the API key's provider does not own the plan; `ClaimMismatch`: a repeat of `/authorize` or a status URL without the settlement's claim; `AccountBlacklisted`: the token (Circle's USDC) refuses an account of the payment (the message names it) |
/// | 404 | unknown settlement, resource or route |
/// | 405 | `MethodNotAllowed`: a known route under another method (`Allow` names the methods) |
/// | 409 | `AuthorizationUsed` / `IdempotencyConflict`: the nonce (or idempotency key) was used otherwise; `SubscriptionNotActive`: a deduction for a paused, cancelled, overdue or ending subscription |
/// | 408 | `RequestTimeout`: the request (body included) took longer than `[server] request_timeout_secs` |
/// | 413 | body too large |
/// | 415 | not `application/json` |
/// | 422 | well-formed but invalid: unknown network or token, bad signature, nonce not committing to payTo/memo/fee, validity window, a revert; `TokenPaused`: the token (Circle's USDC) is paused |
/// | 429 | `RateLimited`: the client is over `[server]`'s per-client rate, or a subscriber's relayed lifecycle transactions are at their bound (`[subscriptions]`'s `relays_per_*` keys; nothing was sent); `Retry-After` says when to come back |
/// | 431 | request headers over `[server] max_header_bytes` or `max_headers` (no body; the connection closes) |
/// | 503 | the chain or the store is unavailable; `Unavailable` with `Retry-After`: no relayer of the replica holds a settlement's gas, or the fee market is above the network's `max_fee_gwei` (nothing was written or sent) |
/// | 500 | a bug; the cause is logged, never sent |
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable code: a spec name (`InsufficientFunds`, `InvalidPaymentProof`) or a reason.
    pub code: ApiErrorCode,
    /// Human-readable explanation; never internal details.
    pub message: String,
    /// Seconds after which the same request may succeed, sent as `Retry-After` (a 503
    /// `Unavailable` or `Pending` without one says 1).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: ApiErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// This error with `Retry-After: secs`.
    #[must_use]
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// 400: the request cannot be parsed.
    pub fn bad_request(code: ApiErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404 `NotFound`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ApiErrorCode::NotFound, message)
    }

    /// 405: the route exists, not under this method (the router adds `Allow`).
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ApiErrorCode::MethodNotAllowed,
            "this endpoint does not take this method; the Allow header lists those it takes",
        )
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A 503 is worth retrying soon (a dependency failing over, a transaction not yet
        // confirmed, a replica without a relayer account): say when.
        let soon = self.status == StatusCode::SERVICE_UNAVAILABLE
            && matches!(self.code, ApiErrorCode::Unavailable | ApiErrorCode::Pending);
        let retry = self.retry_after.or(soon.then_some(1));
        let body = ApiErrorBody::new(self.code, self.message);
        let mut res = (self.status, Json(body)).into_response();
        if let Some(secs) = retry {
            res.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(secs),
            );
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    fn wire(e: Error) -> (u16, String, String) {
        let e = ApiError::from(e);
        (e.status.as_u16(), e.code.to_string(), e.message)
    }

    #[test]
    fn domain_errors_keep_their_wire_shape_and_hide_internals() {
        assert_eq!(
            wire(Error::InvalidQuery("limit: 0 is not within 1..=100".into())),
            (
                400,
                "InvalidQuery".into(),
                "limit: 0 is not within 1..=100".into()
            )
        );
        let store = Error::from(StoreError::Corrupt("secret row detail".into()));
        assert!(store.is_server_error());
        assert_eq!(
            wire(store),
            (
                503,
                "Unavailable".into(),
                "the store is unavailable; retry later".into()
            )
        );
        let chain = Error::from(ChainError::Unavailable("secret node detail".into()));
        assert!(chain.is_server_error());
        assert_eq!(
            wire(chain),
            (
                503,
                "Unavailable".into(),
                "the chain is unavailable; retry later".into()
            )
        );
        assert_eq!(
            wire(Error::from(ChainError::Rejected("nonce too low".into()))),
            (
                502,
                "ChainError".into(),
                "the chain refused the transaction".into()
            )
        );
        assert_eq!(
            wire(Error::internal("secret invariant")),
            (500, "Internal".into(), "internal error".into())
        );
        let missing = Error::NotFound("no such settlement".into());
        assert!(!missing.is_server_error() && missing.is_client_error());
        assert_eq!(wire(missing).0, 404);
    }

    #[test]
    fn a_relay_bound_is_429_with_retry_after() {
        let e = Error::RelayLimited {
            scope: RelayScope::Subscriber,
            id: B256::repeat_byte(1),
            subscriber: alloy::primitives::Address::repeat_byte(2),
            limit: 24,
            window: std::time::Duration::from_secs(86_400),
            retry_after: 1234,
        };
        assert!(e.is_client_error());
        let (status, code, message) = wire(e);
        assert_eq!((status, code.as_str()), (429, "RateLimited"));
        assert!(
            message.contains("24 relayed lifecycle transactions per day")
                && message.contains("retry in 1234 s"),
            "{message}"
        );
        let e = Error::RelayLimited {
            scope: RelayScope::Subscription,
            id: B256::repeat_byte(1),
            subscriber: alloy::primitives::Address::ZERO,
            limit: 4,
            window: std::time::Duration::from_secs(3600),
            retry_after: 7,
        };
        let res = e.into_response();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(res.headers()[axum::http::header::RETRY_AFTER], "7");
        // A 503 Unavailable still says 1; other errors say nothing.
        let res = Error::from(StoreError::Corrupt("x".into())).into_response();
        assert_eq!(res.headers()[axum::http::header::RETRY_AFTER], "1");
        let res = Error::NotFound("x".into()).into_response();
        assert!(!res.headers().contains_key(axum::http::header::RETRY_AFTER));
    }

    #[test]
    fn reverts_map_to_the_spec_names() {
        let plan_id = B256::repeat_byte(7);
        let (status, code, message) = wire(Error::Revert(Revert::PlanDeprecated { plan_id }));
        assert_eq!((status, code.as_str()), (422, "PlanDeprecated"));
        assert_eq!(wire(Error::PlanDeprecated { plan_id }).2, message);
        let used = Revert::AuthorizationAlreadyUsed {
            authorizer: alloy::primitives::Address::ZERO,
            nonce: B256::ZERO,
        };
        assert_eq!(
            wire(Error::Chain(ChainError::Revert(used))).0,
            409,
            "a revert inside a chain error maps as the revert"
        );
        // Circle's FiatToken's string refusals, decoded.
        let code_of = |r: Revert| {
            let (status, code, _) = wire(Error::Revert(r));
            (status, code.as_str().to_owned())
        };
        assert_eq!(
            code_of(Revert::Blacklisted),
            (403, "AccountBlacklisted".into())
        );
        assert_eq!(code_of(Revert::TokenPaused), (422, "TokenPaused".into()));
        assert_eq!(
            code_of(Revert::TransferExceedsBalance),
            (402, "InsufficientFunds".into())
        );
        assert_eq!(
            code_of(Revert::AuthorizationUsedOrCanceled),
            (409, "AuthorizationUsed".into())
        );
        let (status, code, _) = wire(Error::Revert(Revert::TransferFailed));
        assert_eq!((status, code.as_str()), (422, "TransferFailed"));
        assert_eq!(
            wire(Error::SettlementFailed {
                code: ApiErrorCode::from("SettlementFailed"),
                message: "the settlement failed".into()
            }),
            (
                422,
                "SettlementFailed".into(),
                "the settlement failed".into()
            )
        );
    }
}
