//! The service's own endpoints: discovery (`/.well-known/tollgate`), liveness and readiness
//! (`/healthz`, `/readyz`), the Prometheus metrics and the OpenAPI document.

use std::collections::BTreeMap;

use axum::{
    Json,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use tollgate_protocol::{
    Amount,
    api::{
        discovery::{NONCE_DERIVATION, NetworkInfo, WellKnown},
        health::{Health, Readiness},
    },
};
use utoipa::openapi::schema::{ObjectBuilder, Type};

use crate::{
    api::Routes,
    facilitator::{Facilitator, unix_now},
    openapi::builder::{json_response, op, text},
};

/// The routes of discovery, health, readiness, metrics and the OpenAPI document, each with its
/// OpenAPI operation.
pub(super) fn routes(r: &mut Routes) {
    r.get("/.well-known/tollgate", well_known, op("discovery", "tollgate", "Discovery: per network the chain id, token, router, subscriptions contract, fee and confirmation depth; the proof-signer addresses gates verify proofs against offline.")
        .ok::<WellKnown>(200, "The facilitator's public parameters.")
        .errors(&[]));
    r.get(
        "/healthz",
        healthz,
        op("health", "operations", "Liveness: the process answers.")
            .ok::<Health>(200, "Alive.")
            .errors(&[]),
    );
    r.get(
        "/readyz",
        readyz,
        op(
            "ready",
            "operations",
            "Readiness: every chain answers and the store takes a write.",
        )
        .ok::<Readiness>(200, "Ready.")
        .ok::<Readiness>(503, "Not ready; `checks` says what failed.")
        .errors(&[]),
    );
    r.get(
        "/metrics",
        metrics,
        op(
            "metrics",
            "operations",
            "Prometheus metrics (text exposition format 0.0.4).",
        )
        .respond(200, text("text/plain", "The metrics."))
        .errors(&[]),
    );
    r.get(
        "/openapi.json",
        openapi,
        op("openapi", "operations", "This document.")
            .respond(
                200,
                json_response(
                    "The OpenAPI 3.1 document.",
                    ObjectBuilder::new().schema_type(Type::Object).build(),
                ),
            )
            .errors(&[]),
    );
}

/// `GET /.well-known/tollgate`.
pub(super) async fn well_known(State(f): State<Facilitator>) -> Json<WellKnown> {
    let mut networks = BTreeMap::new();
    for n in f.networks() {
        // The chain's clock, read now (devnets travel in time): clients sign validity windows
        // by it, since this facilitator and the token check them by it.
        let chain_time = match f.core().network(&n.name) {
            Some(net) => match net.chain.timestamp().await {
                Ok(t) => t.max(unix_now()),
                Err(_) => net.now().await,
            },
            None => unix_now(),
        };
        networks.insert(
            n.name.clone(),
            NetworkInfo {
                chain_id: n.chain_id,
                chain_time: Some(chain_time),
                confirmations: n.confirmations,
                decimals: 6,
                fee: Amount(f.settings().fee),
                router: n.router,
                rpc_url: f.settings().public_rpc_urls.get(&n.name).cloned(),
                subscriptions: n.subscriptions,
                token: n.token,
                token_name: n.token_name.clone(),
                token_version: n.token_version.clone(),
            },
        );
    }
    Json(WellKnown {
        facilitator: f.settings().public_url.clone(),
        networks,
        nonce: NONCE_DERIVATION.to_owned(),
        proof_signers: vec![f.proof_signer()],
        x402_version: 1,
    })
}

/// `GET /healthz`.
pub(super) async fn healthz() -> Json<Health> {
    Json(Health::ok())
}

/// `GET /readyz`: ready when every chain answers and the store takes a write.
pub(super) async fn readyz(State(f): State<Facilitator>) -> Response {
    let mut checks = BTreeMap::new();
    let mut ready = true;
    for n in f.core().networks.values() {
        let ok = n.chain.block_number().await;
        ready &= ok.is_ok();
        checks.insert(
            format!("chain:{}", n.spec.name),
            ok.map(|b| format!("block {b}"))
                .unwrap_or_else(|e| e.to_string()),
        );
    }
    // A replica without a relayer account (more replicas than keys) is ready: it verifies and
    // answers status reads; it says that it sends nothing.
    let held = f.held_relayers();
    checks.insert(
        "relayers".into(),
        if held.is_empty() {
            format!(
                "none of {} held by this replica: it verifies and answers status reads, and sends nothing",
                f.relayers().len()
            )
        } else {
            format!(
                "{} of {} held by this replica: {}",
                held.len(),
                f.relayers().len(),
                held.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
            )
        },
    );
    // Relayer funds (see `crate::funds`): one below the floor is named; a network none of
    // whose held relayers can pay one settlement makes the replica not ready.
    if !held.is_empty() {
        for n in f.core().networks.values() {
            let standing = f.core().standing(n).await;
            if standing.is_empty() {
                continue;
            }
            ready &= standing.iter().any(|s| s.can_pay);
            let low: Vec<String> = standing
                .iter()
                .filter(|s| s.low || !s.can_pay)
                .map(|s| {
                    format!(
                        "{} holds {} (floor {}){}",
                        s.relayer,
                        crate::funds::ether(s.balance),
                        crate::funds::ether(s.floor),
                        if s.can_pay {
                            ""
                        } else {
                            ": dry, cannot pay a settlement"
                        }
                    )
                })
                .collect();
            checks.insert(
                format!("funds:{}", n.spec.name),
                if low.is_empty() {
                    format!("{} relayers above the floor", standing.len())
                } else {
                    format!("below the floor: {}", low.join("; "))
                },
            );
        }
    }
    checks.insert("replica".into(), f.replica_id().to_owned());
    let store = f.store().ping().await;
    ready &= store.is_ok();
    checks.insert(
        "store".into(),
        store.map(|()| "writable".to_owned()).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "store not ready");
            "unavailable".to_owned()
        }),
    );
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(Readiness { checks, ready })).into_response()
}

/// `GET /metrics`.
pub(super) async fn metrics(State(f): State<Facilitator>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        f.metrics().render(),
    )
        .into_response()
}

/// `GET /openapi.json`.
pub(super) async fn openapi(State(f): State<Facilitator>) -> Json<serde_json::Value> {
    Json(crate::openapi::document(&f.settings().public_url))
}
