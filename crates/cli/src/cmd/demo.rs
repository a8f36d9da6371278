//! The demo API `tollgate dev` serves, gated by the provider SDK exactly as a provider would gate
//! theirs.

use std::{net::SocketAddr, sync::Arc};

use alloy::primitives::{B256, keccak256};
use anyhow::Context as _;
use axum::{
    Extension, Json, Router,
    routing::{get, post},
};
use serde_json::{Value, json};
use tollgate_chain::{Chain, accounts::DevAccount};
use tollgate_gate::{Amount, Gate, PlanTerms, Pricing, VerifiedSubscription};
use tollgate_protocol::api::plans::CreatePlanRequest;

use super::dev::DevInfo;

/// The one-time price of `GET /v1/quote`: 500000 = 0.50 token.
pub(crate) const QUOTE_PRICE: u64 = 500_000;
/// `GET /v1/report`: the demo plan's subscribers, or 1.00 token one-time.
pub(crate) const REPORT_PRICE: u64 = 1_000_000;
/// `POST /v1/process`: 0.10 token per call, one-time or metered from a subscriber's overage
/// allowance.
pub(crate) const PROCESS_PRICE: u64 = 100_000;
/// The demo plan: 5.00 token per cycle.
pub(crate) const PLAN_AMOUNT: u64 = 5_000_000;
/// The demo plan's cycle: 30 days.
pub(crate) const PLAN_INTERVAL: u64 = 30 * 24 * 3600;
/// The idempotency key the demo plan is published under (the same plan on every restart).
const PLAN_KEY: &str = "tollgate-dev-demo-plan";

/// Publishes the provider's demo plan through the facilitator (`POST /plans` with the provider's
/// API key), as a provider would; idempotent, so a restart finds the same plan.
pub(crate) async fn publish_plan(
    facilitator_url: &str,
    api_key: &str,
    network: &str,
) -> anyhow::Result<PlanTerms> {
    let plan = super::plan::client(facilitator_url, Some(api_key))?
        .create_plan(&CreatePlanRequest {
            network: network.parse()?,
            amount: Amount::from_units(PLAN_AMOUNT),
            interval: PLAN_INTERVAL,
            pay_to: None,
            idempotency_key: PLAN_KEY.to_owned(),
        })
        .await
        .context("publishing the demo plan")?;
    Ok(PlanTerms {
        plan_id: plan.plan_id,
        amount: plan.amount,
        interval: plan.interval,
        token: plan.token,
    })
}

/// Builds the demo API: the gate pays the provider account, settles through the dev facilitator,
/// and keeps its once-only memo set in the state directory.
pub(crate) async fn router(
    info: &DevInfo,
    provider: &DevAccount,
    plan: PlanTerms,
    chain: Arc<dyn Chain>,
    state_dir: &std::path::Path,
    bound: SocketAddr,
) -> anyhow::Result<Router> {
    let plan_id: B256 = plan.plan_id;
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
        .plan_terms(plan)
        .subscriptions(chain, info.contracts.subscriptions)
        .api_key(info.api_key.clone())
        .build()
        .await
        .context("building the demo API's gate")?;
    let quote = Router::new().route("/v1/quote", get(quote)).route_layer(
        gate.payment_gate([Pricing::one_time(QUOTE_PRICE)])
            .description("A price quote")
            .mime_type("application/json")
            .mpp(true),
    );
    let report = Router::new().route("/v1/report", get(report)).route_layer(
        gate.payment_gate([
            Pricing::subscription(plan_id),
            Pricing::one_time(REPORT_PRICE),
        ])
        .description("The daily report")
        .mime_type("application/json")
        .mpp(true),
    );
    let process = Router::new()
        .route("/v1/process", post(process))
        .route_layer(
            gate.payment_gate([
                Pricing::subscription(plan_id),
                Pricing::one_time(PROCESS_PRICE),
            ])
            .metered(Amount::from_units(PROCESS_PRICE))
            .description(
                "Process a payload (subscribers: 0.10 per call from the overage allowance)",
            )
            .mime_type("application/json")
            .mpp(true),
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

async fn process(
    subscription: Option<Extension<VerifiedSubscription>>,
    body: axum::body::Bytes,
) -> Json<Value> {
    let mut answer = json!({ "processed": true, "bytes": body.len(), "digest": keccak256(&body) });
    if let Some(Extension(sub)) = subscription {
        answer["subscription"] = json!(sub.id);
        answer["metered"] = json!(PROCESS_PRICE.to_string());
    }
    Json(answer)
}
