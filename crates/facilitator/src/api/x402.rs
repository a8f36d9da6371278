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

use utoipa::openapi::{
    Required,
    path::{ParameterBuilder, ParameterIn},
};

use crate::{
    api::{Routes, extract::ApiJson},
    facilitator::Facilitator,
    openapi::builder::{op, string},
};

/// The routes of the x402 facilitator API, each with its OpenAPI operation.
pub(super) fn routes(r: &mut Routes) {
    r.post("/verify", verify, op(
            "x402Verify",
            "x402",
            "x402 V1 and V2: check a payment against its requirements without settling it.",
        )
        .description("The body's `x402Version` (absent: 1) says which shape it has; a V2 body's `paymentPayload.accepted` must be its `paymentRequirements` (`extra` may be a subset).")
        .body::<AnyVerifyRequest>()
        .ok::<VerifyResponse>(
            200,
            "The verdict; a failed check is `isValid: false` with `invalidReason`.",
        ));
    r.post("/settle", settle, op("x402Settle", "x402", "x402 V1 and V2: settle a payment (`transferWithAuthorization` to `payTo`).")
        .description("One authorization (chain, token, payer, nonce) moves money once and is answered `success` once: a repeat is `duplicate_settlement` naming the original transaction, unless it comes from the first settler, named by its `Idempotency-Key` (or, in V2, by the payload's `payment-identifier`), whose retries of the same payload get the first outcome again. Another V2 payload under a `payment-identifier` already bound is `payment_identifier_conflict`. V2 answers name the network by its CAIP-2 id.")
        .header(ParameterBuilder::new()
            .name(IDEMPOTENCY_KEY)
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some("Names the settler: its retries of the same payload get the first outcome again (another settler's repeat is `duplicate_settlement`)."))
            .schema(Some(string("Any value; only its hash is kept.")))
            .build())
        .body::<AnyVerifyRequest>()
        .ok::<SettleResponse>(200, "The result; a failure is `success: false` with `errorReason`.")
        .errors(&[503]));
    r.get("/supported", supported, op(
            "supported",
            "x402",
            "The (x402Version, scheme, network) kinds this facilitator settles (V1 by name, V2 by CAIP-2 id), the V2 extensions it implements and its settlement signers.",
        )
        .ok::<SupportedResponse>(200, "The supported kinds.")
        .errors(&[]));
}

/// `POST /verify`.
pub(super) async fn verify(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<AnyVerifyRequest>,
) -> Json<VerifyResponse> {
    Json(match &req {
        AnyVerifyRequest::V1(req) => f.x402().verify(req).await,
        AnyVerifyRequest::V2(req) => f.x402().verify_v2(req).await,
    })
}

/// `POST /settle`. An optional `Idempotency-Key` header names the settler: its own retries of
/// the same payload get the first outcome again ([`X402::settle`](crate::X402::settle)); a V2
/// `payment-identifier` does the same without it ([`X402::settle_v2`](crate::X402::settle_v2)).
pub(super) async fn settle(
    State(f): State<Facilitator>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<AnyVerifyRequest>,
) -> Result<Json<SettleResponse>, crate::error::Error> {
    // A replica that holds no relayer account, or none with a settlement's gas on the payment's
    // network (or whose fee market is above the cap), answers 503 before anything is checked
    // or written: the load balancer takes the payment to a replica that can send it.
    f.x402().can_send(&req).await?;
    let settler = headers
        .get(IDEMPOTENCY_KEY)
        .map(|v| alloy::primitives::keccak256(v.as_bytes()));
    Ok(Json(match &req {
        AnyVerifyRequest::V1(req) => f.x402().settle(req, settler).await,
        AnyVerifyRequest::V2(req) => f.x402().settle_v2(req, settler).await,
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
