//! The facilitator's one error body and its one `IntoResponse`:
//! `{"error": {"code": "<SpecName or reason>", "message": "..."}}` with a fitting status.
//!
//! | status | when |
//! |---|---|
//! | 400 | malformed JSON, a missing or mistyped field (the message names it) |
//! | 401 | `Unauthorized`: a provider endpoint without a valid API key |
//! | 402 | `InsufficientFunds`: the payer's token balance is below the amount; `AllowanceExhausted`: a deduction would cross the overage cap |
//! | 403 | `Forbidden`: the API key's provider does not own the plan; `ClaimMismatch`: a repeat of `/authorize` or a status URL without the settlement's claim |
//! | 404 | unknown settlement or resource |
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
    extract::{FromRequest, Request, rejection::JsonRejection},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::de::DeserializeOwned;
use serde_json::json;
use tollgate_protocol::ErrorCode;

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
        let body = json!({ "error": { "code": self.code, "message": self.message } });
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
