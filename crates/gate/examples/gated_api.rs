//! A provider gating one route of an axum API behind a one-time payment.
//!
//! ```text
//! TOLLGATE_FACILITATOR=http://127.0.0.1:8402 \
//! TOLLGATE_TOKEN=0x… TOLLGATE_PAY_TO=0x… \
//!   cargo run -p tollgate-gate --example gated_api
//! curl -i http://127.0.0.1:8080/v1/quote     # 402 with the payment terms
//! ```
//!
//! (An example binary reads its settings from the environment; the library never does.)

use std::{env, error::Error};

use axum::{Json, Router, routing::get};
use tollgate_gate::{Gate, Pricing};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter("info,tollgate_gate=debug")
        .init();
    let var = |k: &str| env::var(k).map_err(|_| format!("set {k}"));
    let gate = Gate::builder()
        .network(env::var("TOLLGATE_NETWORK").unwrap_or_else(|_| "base-sepolia".into()))
        .token(var("TOLLGATE_TOKEN")?.parse()?, "USD Coin", "2")
        .pay_to(var("TOLLGATE_PAY_TO")?.parse()?)
        .facilitator(var("TOLLGATE_FACILITATOR")?)
        // A durable memo set, which survives restarts: the crate's feature "sqlite".
        .memo_store_url("sqlite://gated_api.db")
        .build()
        .await?;

    let paid = Router::new()
        .route(
            "/v1/quote",
            get(|| async { Json(serde_json::json!({ "quote": 42 })) }),
        )
        .route_layer(
            gate.payment_gate([Pricing::one_time(500_000u64)]) // 0.50 of a 6-decimal token
                .description("today's quote")
                .mime_type("application/json"),
        );
    let app = paid.route("/healthz", get(|| async { "ok" }));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    tracing::info!(addr = %listener.local_addr()?, "serving; GET /v1/quote costs 0.50");
    axum::serve(listener, app).await?;
    Ok(())
}
