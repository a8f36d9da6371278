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
    api::{
        Routes,
        extract::{ApiJson, ApiPath, ApiQuery},
    },
    error::{Error, Result},
    facilitator::Facilitator,
    openapi::builder::op,
    settle::Outcome,
};

/// The routes of settlement with a proof, its status, and proof verification, each with its
/// OpenAPI operation.
pub(super) fn routes(r: &mut Routes) {
    r.post("/authorize", authorize, op("authorize", "tollgate", "Settle a signed payment and get its proof.")
        .description("Verifies the signed payment (network served, token, the authorization paying the router, the nonce committing to payTo, memo and fee, the validity window, the signature, the payer's balance), submits it, and waits up to the configured confirmation timeout. Idempotent: the same signed payment again, also concurrently, yields the same proof and a single transfer.")
        .body::<AuthorizeRequest>()
        .ok::<AuthorizeResponse>(200, "Confirmed: the proof, base64 for `X-PAYMENT`, and its fields.")
        .pending(true)
        .errors(&[402, 403, 409, 422, 500, 502, 503]));
    r.get("/settlements/{key}", status, op("settlementStatus", "tollgate", "The status URL of a pending settlement.")
        .description("Only `/authorize` settlements have a status URL: any other key (an x402 `/settle` settlement among them) is answered 404 as an unknown key is.")
        .hash_path("key", "The settlement key from `statusUrl`.")
        .query::<StatusQuery>()
        .ok::<AuthorizeResponse>(200, "Confirmed: the proof.")
        .pending(false)
        .errors(&[403, 422, 503]));
    r.post("/proofs/verify", verify_proof, op("verifyProof", "tollgate", "Check a payment proof online.")
        .description("Checks the proof's signature against this facilitator's proof signer, its expiry, and that a confirmed settlement matches it. Gates may instead verify offline against `proofSigners` from `/.well-known/tollgate`. An invalid proof is a 200 with `valid: false`.")
        .body::<VerifyProofRequest>()
        .ok::<VerifyProofResponse>(200, "The verdict.")
        .errors(&[503]));
}

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
    let outcome = f.settlements().authorize(&req).await?;
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
    let outcome = f.settlements().status(key, query.token).await?;
    Ok(outcome_response(&f, outcome, query.token))
}

/// `POST /proofs/verify`: for gates that prefer to ask.
pub(super) async fn verify_proof(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<VerifyProofRequest>,
) -> Result<Json<VerifyProofResponse>> {
    f.settlements().verify_proof(&req.proof).await.map(Json)
}
