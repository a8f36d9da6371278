//! The x402 V1 facilitator API: `POST /verify`, `POST /settle`, `GET /supported`
//! ([`crate::x402`]).

use axum::{Json, extract::State, http::HeaderMap};
use tollgate_protocol::{
    headers::IDEMPOTENCY_KEY,
    x402::{
        SettleRequest, SettleResponse, SupportedKind, SupportedResponse, VerifyRequest,
        VerifyResponse,
    },
};

use crate::{api::extract::ApiJson, facilitator::Facilitator};

/// `POST /verify`.
pub(super) async fn verify(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<VerifyRequest>,
) -> Json<VerifyResponse> {
    Json(f.x402_verify(&req).await)
}

/// `POST /settle`. An optional `Idempotency-Key` header names the settler: its own retries of
/// the same payload get the first outcome again ([`Facilitator::x402_settle`]).
pub(super) async fn settle(
    State(f): State<Facilitator>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<SettleRequest>,
) -> Json<SettleResponse> {
    let settler = headers
        .get(IDEMPOTENCY_KEY)
        .map(|v| alloy::primitives::keccak256(v.as_bytes()));
    Json(f.x402_settle(&req, settler).await)
}

/// `GET /supported`: one `exact` kind per configured network.
pub(super) async fn supported(State(f): State<Facilitator>) -> Json<SupportedResponse> {
    let kinds = f
        .networks()
        .into_iter()
        .map(|n| SupportedKind::exact(n.name))
        .collect();
    Json(SupportedResponse { kinds })
}
