//! The request extractors whose rejections are answered in the facilitator's error shape
//! ([`ApiError`]), naming the field or parameter at fault.

use axum::{
    Json,
    body::{Body, Bytes},
    extract::{
        FromRequest, FromRequestParts, Path, Query, Request,
        rejection::{JsonRejection, PathRejection, QueryRejection},
    },
    http::{StatusCode, request::Parts},
};
use serde::de::DeserializeOwned;
use tollgate_protocol::ApiErrorCode;

use crate::{api::error::ApiError, error::Error};

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
        let (parts, body) = req.into_parts();
        let bytes = Bytes::from_request(Request::from_parts(parts.clone(), body), state)
            .await
            .map_err(|rejection| body_rejection(rejection.status(), rejection.body_text()))?;
        let object = is_json_object(&bytes);
        match Json::<T>::from_request(Request::from_parts(parts, Body::from(bytes)), state).await {
            Ok(Json(v)) if object => Ok(Self(v)),
            Ok(_) => Err(ApiError::bad_request(
                ApiErrorCode::InvalidField,
                NOT_AN_OBJECT,
            )),
            Err(rejection) => Err(json_rejection(&rejection)),
        }
    }
}

/// Every JSON body of the API is an object: serde's derived structs would also read an array,
/// by position (`[null, null]` as a struct of two fields), which the API does not accept.
pub(crate) fn is_json_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// The message of a body that is valid JSON but not an object.
pub(crate) const NOT_AN_OBJECT: &str = "expected a JSON object";

/// A body that could not be read: too large (413), or cut off.
fn body_rejection(status: StatusCode, detail: String) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            status,
            ApiErrorCode::PayloadTooLarge,
            "request body too large",
        )
    } else {
        ApiError::new(status, ApiErrorCode::BadRequest, rejection_detail(detail))
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
