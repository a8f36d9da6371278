//! The facilitator's one error body and its one `IntoResponse`:
//! `{"error": {"code": "<SpecName or reason>", "message": "..."}}` with a fitting status.
//!
//! | status | when |
//! |---|---|
//! | 400 | malformed JSON, a missing or mistyped field (the message names it); `InvalidQuery`: a query string that does not parse or is out of range (the message names the parameter); `InvalidPath`: a path parameter that does not decode |
//! | 401 | `Unauthorized`: a provider endpoint without a valid API key |
//! | 402 | `InsufficientFunds`: the payer's token balance is below the amount; `AllowanceExhausted`: a deduction would cross the overage cap |
//! | 403 | `Forbidden`: the API key's provider does not own the plan; `ClaimMismatch`: a repeat of `/authorize` or a status URL without the settlement's claim |
//! | 404 | unknown settlement, resource or route |
//! | 405 | `MethodNotAllowed`: a known route under another method (`Allow` names the methods) |
//! | 409 | `AuthorizationUsed` / `IdempotencyConflict`: the nonce (or idempotency key) was used otherwise; `SubscriptionNotActive`: a deduction for a paused, cancelled, overdue or ending subscription |
//! | 408 | `RequestTimeout`: the request (body included) took longer than `[server] request_timeout_secs` |
//! | 413 | body too large |
//! | 415 | not `application/json` |
//! | 422 | well-formed but invalid: unknown network or token, bad signature, nonce not committing to payTo/memo/fee, validity window, a revert |
//! | 429 | `RateLimited`: the client is over `[server]`'s per-client rate (`Retry-After` says when to come back) |
//! | 431 | request headers over `[server] max_header_bytes` or `max_headers` (no body; the connection closes) |
//! | 503 | the chain or the store is unavailable |
//! | 500 | a bug; the cause is logged, never sent |

use alloy::primitives::B256;
use axum::{
    Json,
    extract::{
        FromRequest, FromRequestParts, Path, Query, Request,
        rejection::{JsonRejection, PathRejection, QueryRejection},
    },
    http::{StatusCode, request::Parts},
    response::{IntoResponse, Response},
};
use serde::de::DeserializeOwned;
use tollgate_chain::{Error as ChainError, Revert};
use tollgate_protocol::{ApiErrorBody, ApiErrorCode};

use crate::store::StoreError;

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
    /// `SubscriptionReverted` or `RaiseReverted`).
    #[error("{kind:?} transaction {tx_hash} reverted")]
    Reverted {
        /// What the transaction was.
        kind: Relayed,
        /// The transaction.
        tx_hash: B256,
    },
    /// A contract refused the call at simulation: 402 `InsufficientFunds`, 409
    /// `AuthorizationUsed`, 422 `PlanDeprecated`, or 422 named after the revert.
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
            Self::WebhooksNotConfigured => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                C::WebhooksNotConfigured,
                "webhook endpoints are unavailable: the facilitator's operator has not set \
                 `keys.webhook_secrets`, the key their signing secrets are encrypted with",
            ),
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
            Self::Chain(cause) if chain_unavailable(cause) => {
                tracing::error!(%cause, "the chain unavailable");
            }
            Self::Chain(error) => tracing::warn!(%error, "chain refused a request"),
            Self::Internal(cause) => tracing::error!(%cause, "internal error"),
            _ => {}
        }
        self.to_api()
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

/// The node could not be reached (503), as opposed to refusing the request (502).
fn chain_unavailable(e: &ChainError) -> bool {
    matches!(
        e,
        ChainError::Unavailable(_) | ChainError::Rpc { .. } | ChainError::Stopped
    )
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
        Revert::AuthorizationAlreadyUsed { .. } => ApiError::new(
            StatusCode::CONFLICT,
            C::AuthorizationUsed,
            "the authorization's nonce is already used or cancelled",
        ),
        Revert::AuthorizationExpired { .. } => {
            unprocessable(C::AuthorizationExpired, revert.to_string())
        }
        Revert::AuthorizationNotYetValid { .. } => {
            unprocessable(C::AuthorizationNotYetValid, revert.to_string())
        }
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
/// extractor's rejection of a request's shape. Building one logs nothing.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable code: a spec name (`InsufficientFunds`, `InvalidPaymentProof`) or a reason.
    pub code: ApiErrorCode,
    /// Human-readable explanation; never internal details.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: ApiErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
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
        let body = ApiErrorBody::new(self.code, self.message);
        (self.status, Json(body)).into_response()
    }
}

/// A JSON body whose rejections are answered in the facilitator's error shape, naming the field.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Self(v)),
            Err(rejection) => Err(json_rejection(&rejection)),
        }
    }
}

fn json_rejection(rejection: &JsonRejection) -> ApiError {
    let status = rejection.status();
    // axum's texts name the offending field path (via serde_path_to_error); keep the useful part.
    let text = rejection.body_text();
    let detail = text
        .split_once(": ")
        .map_or(text.as_str(), |(_, rest)| rest)
        .to_owned();
    match rejection {
        JsonRejection::JsonDataError(_) => {
            ApiError::bad_request(ApiErrorCode::InvalidField, detail)
        }
        JsonRejection::JsonSyntaxError(_) => {
            ApiError::bad_request(ApiErrorCode::MalformedJson, detail)
        }
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiErrorCode::UnsupportedMediaType,
            "send Content-Type: application/json",
        ),
        _ if status == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ApiErrorCode::PayloadTooLarge,
            "request body too large",
        ),
        _ => ApiError::new(status, ApiErrorCode::BadRequest, detail),
    }
}

/// The useful part of an axum rejection's text: after its fixed prefix ("Failed to deserialize
/// query string: ", "Invalid URL: ").
fn rejection_detail(text: String) -> String {
    text.split_once(": ")
        .map_or(text.as_str(), |(_, rest)| rest)
        .to_owned()
}

/// A query string whose rejections are answered in the facilitator's error shape: 400
/// `InvalidQuery` naming the parameter (axum's own `Query` answers `text/plain`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(Self(v)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::bad_request(
        ApiErrorCode::InvalidQuery,
        rejection_detail(rejection.body_text()),
    )
}

/// Path parameters whose rejections are answered in the facilitator's error shape: 400
/// `InvalidPath` (a segment that does not percent-decode to UTF-8 or does not parse).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(Self(v)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    match rejection {
        PathRejection::FailedToDeserializePathParams(e) if e.status().is_client_error() => {
            ApiError::bad_request(ApiErrorCode::InvalidPath, rejection_detail(e.body_text()))
        }
        // A route without the parameters its handler asks for, or a type that cannot hold them:
        // a bug, not the client's.
        other => Error::internal(other.body_text()).into_api(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Page {
        limit: Option<u32>,
    }

    async fn query(uri: &str) -> Result<Option<u32>, ApiError> {
        let (mut parts, ()) = axum::http::Request::get(uri).body(()).unwrap().into_parts();
        let ApiQuery(p) = ApiQuery::<Page>::from_request_parts(&mut parts, &()).await?;
        Ok(p.limit)
    }

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

    #[tokio::test]
    async fn query_rejections_are_invalid_query_naming_the_parameter() {
        for (uri, names) in [
            ("/q?limit=abc", "limit"),
            ("/q?other=1", "other"),
            ("/q?limit=1&limit=2", "limit"),
        ] {
            let e = query(uri).await.unwrap_err();
            assert_eq!(
                (e.status, e.code.as_str()),
                (StatusCode::BAD_REQUEST, "InvalidQuery")
            );
            assert!(e.message.contains(names), "{uri}: {}", e.message);
            assert!(!e.message.starts_with("Failed"), "{uri}: {}", e.message);
        }
        assert_eq!(query("/q?limit=7").await.unwrap(), Some(7));
    }
}
