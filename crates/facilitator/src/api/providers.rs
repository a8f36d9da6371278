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
    api::{Routes, extract::ApiJson},
    error::{Error, Result},
    facilitator::Facilitator,
    openapi::builder::op,
    providers::unauthorized,
};

/// The routes of provider registration and API keys, each with its OpenAPI operation.
pub(super) fn routes(r: &mut Routes) {
    r.post("/providers/challenge", challenge, op("providerChallenge", "providers", "Get a registration challenge to sign with the provider's wallet.")
        .description("An EIP-191 `personal_sign` text naming this facilitator, the address, a random nonce and the expiry (5 minutes). Sign it and post it to `/providers/register`.")
        .body::<ChallengeRequest>()
        .ok::<ChallengeResponse>(200, "The challenge.")
        .errors(&[422, 503]));
    r.post("/providers/register", register, op("providerRegister", "providers", "Register with a signed challenge and get an API key (returned once).")
        .description("The signature must recover `address`; the challenge must be one this facilitator issued to that address, unexpired and unused (it is consumed). The key (`tg_` + 64 hex digits) is shown once; only its hash is stored.")
        .body::<RegisterRequest>()
        .ok::<RegisterResponse>(201, "Registered: the API key.")
        .errors(&[401, 503]));
    r.post(
        "/providers/keys/revoke",
        revoke,
        op(
            "providerRevokeKey",
            "providers",
            "Revoke the presented API key.",
        )
        .secured()
        .ok::<RevokeResponse>(200, "Revoked.")
        .errors(&[503]),
    );
}

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
    f.plans().authenticate(key).await
}

/// `POST /providers/challenge`.
pub(super) async fn challenge(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<ChallengeRequest>,
) -> Result<Json<ChallengeResponse>> {
    f.plans().challenge(req.address).await.map(Json)
}

/// `POST /providers/register`.
pub(super) async fn register(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<RegisterRequest>,
) -> Result<(StatusCode, Json<RegisterResponse>)> {
    let registered = f.plans().register(&req).await?;
    Ok((StatusCode::CREATED, Json(registered)))
}

/// `POST /providers/keys/revoke`: revokes the presented key.
pub(super) async fn revoke(
    State(f): State<Facilitator>,
    provider: Provider,
) -> Result<Json<RevokeResponse>> {
    let revoked = f.plans().revoke_api_key(provider).await?;
    Ok(Json(RevokeResponse {
        provider: provider.address,
        revoked,
    }))
}
