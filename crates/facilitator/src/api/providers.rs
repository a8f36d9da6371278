//! Provider self-registration (`POST /providers/challenge`, `/providers/register`), key
//! revocation, and the [`Provider`] extractor every provider endpoint authenticates with.

use axum::{
    Json,
    extract::{FromRequestParts, State},
    http::{HeaderMap, StatusCode, header, request::Parts},
};
use tollgate_protocol::api::providers::{
    ChallengeRequest, ChallengeResponse, RegisterRequest, RegisterResponse, RevokeResponse,
};

pub(crate) use crate::providers::Provider;
use crate::{
    api::extract::ApiJson,
    error::{Error, Result},
    facilitator::Facilitator,
    providers::unauthorized,
};

/// `Authorization: Bearer <API key>` naming an unrevoked key; rejects with 401 `Unauthorized`.
impl FromRequestParts<Facilitator> for Provider {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, f: &Facilitator) -> Result<Self> {
        bearer_provider(f, &parts.headers).await
    }
}

/// The provider of the `Authorization: Bearer <key>` in `headers`; 401 when absent, malformed,
/// unknown or revoked.
pub(crate) async fn bearer_provider(f: &Facilitator, headers: &HeaderMap) -> Result<Provider> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| unauthorized("send Authorization: Bearer <API key>"))?;
    let key = value
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or_else(|| unauthorized("send Authorization: Bearer <API key>"))?;
    f.authenticate(key).await
}

/// `POST /providers/challenge`.
pub(super) async fn challenge(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<ChallengeRequest>,
) -> Result<Json<ChallengeResponse>> {
    f.provider_challenge(req.address).await.map(Json)
}

/// `POST /providers/register`.
pub(super) async fn register(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<RegisterRequest>,
) -> Result<(StatusCode, Json<RegisterResponse>)> {
    let registered = f.register_provider(&req).await?;
    Ok((StatusCode::CREATED, Json(registered)))
}

/// `POST /providers/keys/revoke`: revokes the presented key.
pub(super) async fn revoke(
    State(f): State<Facilitator>,
    provider: Provider,
) -> Result<Json<RevokeResponse>> {
    let revoked = f.revoke_api_key(provider).await?;
    Ok(Json(RevokeResponse {
        provider: provider.address,
        revoked,
    }))
}
