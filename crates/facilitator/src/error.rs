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

use std::borrow::Cow;

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
use tollgate_protocol::{ApiErrorBody, ErrorCode};

use crate::store::StoreError;

/// What a [`Facilitator`](crate::Facilitator) method fails with: a domain error, mapped to an
/// HTTP status, code and message in exactly one place (`Error::into_api`, through
/// `From<Error> for ApiError`), which is also where server-side failures are logged.
///
/// Migration state: the analytics methods return it; the other modules still build an
/// [`ApiError`] directly and reach this type through [`Error::Http`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A query parameter that does not parse, is out of range or contradicts another (400
    /// `InvalidQuery`); the message names it.
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// The store failed (503 `Unavailable`; the cause is logged, never sent).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// An error already in its HTTP shape, from a module not yet migrated to domain variants.
    #[error("{0}")]
    Http(ApiError),
}

/// A [`Facilitator`](crate::Facilitator) method's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The one mapping from a domain error to what the client sees: status, code and message.
    /// Server-side failures are logged here, their cause never sent.
    fn into_api(self) -> ApiError {
        match self {
            Self::InvalidQuery(message) => ApiError::bad_request("InvalidQuery", message),
            Self::Store(e) => ApiError::unavailable("the store", &e),
            Self::Http(e) => e,
        }
    }
}

impl Error {
    /// Whether this is the facilitator's failure (a 5xx: a dependency down or a bug) rather than
    /// the request's.
    pub fn is_server_error(&self) -> bool {
        match self {
            Self::InvalidQuery(_) => false,
            Self::Store(_) => true,
            Self::Http(e) => e.status.is_server_error(),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        e.into_api()
    }
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Self::Http(e)
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        self.into_api().into_response()
    }
}

/// An error answered to a client.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable code: a spec name (`InsufficientFunds`, `InvalidPaymentProof`) or a reason.
    pub code: Cow<'static, str>,
    /// Human-readable explanation; never internal details.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(
        status: StatusCode,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// 400: the request cannot be parsed.
    pub fn bad_request(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 422: well-formed but invalid.
    pub fn invalid(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// 402 `InsufficientFunds`.
    pub fn insufficient_funds(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PAYMENT_REQUIRED,
            ErrorCode::InsufficientFunds.as_str(),
            message,
        )
    }

    /// 409.
    pub fn conflict(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFound", message)
    }

    /// 405: the route exists, not under this method (the router adds `Allow`).
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "this endpoint does not take this method; the Allow header lists those it takes",
        )
    }

    /// 503: a dependency is down. The cause is logged here, not sent.
    pub fn unavailable(what: &str, cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(%cause, "{what} unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            format!("{what} is unavailable; retry later"),
        )
    }

    /// 500: a bug or a broken invariant. The cause is logged here, not sent.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(%cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal",
            "internal error",
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
        let body = ApiErrorBody::new(self.code.as_ref(), self.message);
        (self.status, Json(body)).into_response()
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::unavailable("the store", &e)
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
        JsonRejection::JsonDataError(_) => ApiError::bad_request("InvalidField", detail),
        JsonRejection::JsonSyntaxError(_) => ApiError::bad_request("MalformedJson", detail),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "send Content-Type: application/json",
        ),
        _ if status == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            "request body too large",
        ),
        _ => ApiError::new(status, "BadRequest", detail),
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
    ApiError::bad_request("InvalidQuery", rejection_detail(rejection.body_text()))
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
            ApiError::bad_request("InvalidPath", rejection_detail(e.body_text()))
        }
        // A route without the parameters its handler asks for, or a type that cannot hold them:
        // a bug, not the client's.
        other => ApiError::internal(&other.body_text()),
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

    #[test]
    fn domain_errors_keep_their_wire_shape_and_hide_internals() {
        let e = ApiError::from(Error::InvalidQuery("limit: 0 is not within 1..=100".into()));
        assert_eq!(
            (e.status, &*e.code, &*e.message),
            (
                StatusCode::BAD_REQUEST,
                "InvalidQuery",
                "limit: 0 is not within 1..=100"
            )
        );
        let store = Error::from(StoreError::Corrupt("secret row detail".into()));
        assert!(store.is_server_error());
        let e = ApiError::from(store);
        assert_eq!(
            (e.status, &*e.code, &*e.message),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                "the store is unavailable; retry later"
            )
        );
        let http = Error::from(ApiError::not_found("no such settlement"));
        assert!(!http.is_server_error());
        let e = ApiError::from(http);
        assert_eq!((e.status, &*e.code), (StatusCode::NOT_FOUND, "NotFound"));
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
                (e.status, &*e.code),
                (StatusCode::BAD_REQUEST, "InvalidQuery")
            );
            assert!(e.message.contains(names), "{uri}: {}", e.message);
            assert!(!e.message.starts_with("Failed"), "{uri}: {}", e.message);
        }
        assert_eq!(query("/q?limit=7").await.unwrap(), Some(7));
    }
}
