//! The demo API `tollgate dev` serves, gated by the provider SDK exactly as a provider would gate
//! theirs.

use std::net::SocketAddr;

use alloy::primitives::keccak256;
use anyhow::Context as _;
use axum::{
    Json, Router,
    routing::{get, post},
};
use serde_json::{Value, json};
use tollgate_chain::accounts::DevAccount;
use tollgate_gate::{Gate, Pricing};

use super::dev::DevInfo;

/// The one-time price of `GET /v1/quote`: 500000 = 0.50 token.
pub(crate) const QUOTE_PRICE: u64 = 500_000;
/// `GET /v1/report`: 1.00 token one-time (a subscription offer joins it with the plans issue).
pub(crate) const REPORT_PRICE: u64 = 1_000_000;
/// `POST /v1/process`: 0.10 token per call (metered under a subscription with the plans issue).
pub(crate) const PROCESS_PRICE: u64 = 100_000;

/// Builds the demo API: the gate pays the provider account, settles through the dev facilitator,
/// and keeps its once-only memo set in the state directory.
pub(crate) async fn router(
    info: &DevInfo,
    provider: &DevAccount,
    state_dir: &std::path::Path,
    bound: SocketAddr,
) -> anyhow::Result<Router> {
    let gate = Gate::builder()
        .network(info.network.clone())
        .token(info.contracts.token, "USD Coin", "2")
        .pay_to(provider.address)
        .facilitator(info.facilitator_url.clone())
        .public_url(format!("http://{bound}"))
        // Stable across restarts (derived from the provider's dev key), so memos issued before a
        // restart still verify after it.
        .memo_secret(
            keccak256(
                [
                    b"tollgate dev memo".as_slice(),
                    provider.private_key.as_slice(),
                ]
                .concat(),
            )
            .0,
        )
        .memo_store_url(format!(
            "sqlite://{}",
            state_dir.join("gate-memos.db").display()
        ))
        .build()
        .await
        .context("building the demo API's gate")?;
    let quote = Router::new().route("/v1/quote", get(quote)).route_layer(
        gate.payment_gate([Pricing::one_time(QUOTE_PRICE)])
            .description("A price quote")
            .mime_type("application/json"),
    );
    let report = Router::new().route("/v1/report", get(report)).route_layer(
        gate.payment_gate([Pricing::one_time(REPORT_PRICE)])
            .description("The daily report")
            .mime_type("application/json"),
    );
    let process = Router::new()
        .route("/v1/process", post(process))
        .route_layer(
            gate.payment_gate([Pricing::one_time(PROCESS_PRICE)])
                .description("Process a payload")
                .mime_type("application/json"),
        );
    Ok(Router::new()
        .merge(quote)
        .merge(report)
        .merge(process)
        .route(
            "/healthz",
            get(|| async { Json(json!({ "status": "ok" })) }),
        ))
}

async fn quote() -> Json<Value> {
    Json(json!({ "symbol": "ETH/USD", "price": "3141.59", "source": "tollgate demo" }))
}

async fn report() -> Json<Value> {
    Json(json!({ "report": "daily", "items": [ { "metric": "requests", "value": 1024 } ] }))
}

async fn process(body: axum::body::Bytes) -> Json<Value> {
    Json(json!({ "processed": true, "bytes": body.len(), "digest": keccak256(&body) }))
}
