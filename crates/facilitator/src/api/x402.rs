//! The x402 facilitator API, V1 and V2: `POST /verify`, `POST /settle`, `GET /supported`
//! ([`crate::x402`], [`crate::x402_v2`]). A body's `x402Version` says which (absent: 1).

use std::collections::BTreeMap;

use axum::{Json, extract::State, http::HeaderMap};
use tollgate_protocol::{
    headers::IDEMPOTENCY_KEY,
    network,
    x402::{
        SettleResponse, SupportedKind, SupportedResponse, VerifyResponse,
        v2::{AnyVerifyRequest, PAYMENT_IDENTIFIER},
    },
};

use crate::{api::extract::ApiJson, facilitator::Facilitator};

/// `POST /verify`.
pub(super) async fn verify(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<AnyVerifyRequest>,
) -> Json<VerifyResponse> {
    Json(match &req {
        AnyVerifyRequest::V1(req) => f.x402_verify(req).await,
        AnyVerifyRequest::V2(req) => f.x402_verify_v2(req).await,
    })
}

/// `POST /settle`. An optional `Idempotency-Key` header names the settler: its own retries of
/// the same payload get the first outcome again ([`Facilitator::x402_settle`]); a V2
/// `payment-identifier` does the same without it ([`Facilitator::x402_settle_v2`]).
pub(super) async fn settle(
    State(f): State<Facilitator>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<AnyVerifyRequest>,
) -> Result<Json<SettleResponse>, crate::error::Error> {
    // A replica that holds no relayer account, or none with a settlement's gas on the payment's
    // network (or whose fee market is above the cap), answers 503 before anything is checked
    // or written: the load balancer takes the payment to a replica that can send it.
    f.x402_can_send(&req).await?;
    let settler = headers
        .get(IDEMPOTENCY_KEY)
        .map(|v| alloy::primitives::keccak256(v.as_bytes()));
    Ok(Json(match &req {
        AnyVerifyRequest::V1(req) => f.x402_settle(req, settler).await,
        AnyVerifyRequest::V2(req) => f.x402_settle_v2(req, settler).await,
    }))
}

/// `GET /supported`: per configured network, a V1 `exact` kind (its name) and a V2 one (its
/// CAIP-2 id, once per chain); the V2 extensions implemented; the relayers as the `eip155:*`
/// signers.
pub(super) async fn supported(State(f): State<Facilitator>) -> Json<SupportedResponse> {
    let networks = f.networks();
    let mut kinds: Vec<SupportedKind> = networks
        .iter()
        .map(|n| SupportedKind::exact(n.name.clone()))
        .collect();
    let mut chains: Vec<u64> = networks.iter().map(|n| n.chain_id).collect();
    chains.sort_unstable();
    chains.dedup();
    kinds.extend(
        chains
            .into_iter()
            .map(|id| SupportedKind::exact_v2(network::caip2(id))),
    );
    let signers = BTreeMap::from([("eip155:*".to_owned(), f.relayers().to_vec())]);
    Json(SupportedResponse {
        kinds,
        extensions: vec![PAYMENT_IDENTIFIER.to_owned()],
        signers,
    })
}
