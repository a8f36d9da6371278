//! `POST /authorize`, its status URL `GET /settlements/{key}`, and `POST /proofs/verify`.

use alloy::primitives::{B256, keccak256};
use axum::{
    Json,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use tollgate_protocol::{
    AuthorizeRequest, AuthorizeResponse, PendingResponse, SettlementStatus,
    api::authorize::{StatusQuery, VerifyProofRequest, VerifyProofResponse},
};

use crate::{
    api::extract::{ApiJson, ApiPath, ApiQuery},
    error::{Error, Result},
    facilitator::Facilitator,
    settle::Outcome,
};

/// The answer to `/authorize` or the status URL; a pending one names the status URL, with the
/// claim's `token` when there is one.
fn outcome_response(f: &Facilitator, outcome: Outcome, token: Option<B256>) -> Response {
    match outcome {
        Outcome::Confirmed { proof, payment } => (
            StatusCode::OK,
            Json(AuthorizeResponse {
                status: SettlementStatus::Confirmed,
                proof,
                payment: *payment,
            }),
        )
            .into_response(),
        Outcome::Pending { key, tx_hash } => {
            let status_url = format!(
                "{}/settlements/{key}{}",
                f.settings().public_url.trim_end_matches('/'),
                token.map(|t| format!("?token={t}")).unwrap_or_default()
            );
            (
                StatusCode::ACCEPTED,
                [(header::LOCATION, status_url.clone())],
                Json(PendingResponse {
                    status: SettlementStatus::Pending,
                    tx_hash,
                    status_url,
                }),
            )
                .into_response()
        }
    }
}

/// `POST /authorize`.
pub(super) async fn authorize(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<AuthorizeRequest>,
) -> Result<Response> {
    let outcome = f.authorize(&req).await?;
    Ok(outcome_response(&f, outcome, req.claim.map(keccak256)))
}

/// `GET /settlements/{key}?token=`.
pub(super) async fn status(
    State(f): State<Facilitator>,
    ApiPath(key): ApiPath<String>,
    ApiQuery(query): ApiQuery<StatusQuery>,
) -> Result<Response> {
    let key: B256 = key
        .parse()
        .map_err(|_| Error::InvalidField("key: expected a 0x-prefixed 32-byte hex value".into()))?;
    let outcome = f.settlement_status(key, query.token).await?;
    Ok(outcome_response(&f, outcome, query.token))
}

/// `POST /proofs/verify`: for gates that prefer to ask.
pub(super) async fn verify_proof(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<VerifyProofRequest>,
) -> Result<Json<VerifyProofResponse>> {
    f.verify_proof(&req.proof).await.map(Json)
}
