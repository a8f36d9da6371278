//! Plans: `POST /plans`, `GET /plans/{id}`, `POST /plans/{id}/deprecate`.

use alloy::primitives::B256;
use axum::{Json, extract::State, http::StatusCode};
use tollgate_protocol::api::plans::{CreatePlanRequest, NetworkQuery, Plan};

use crate::{
    api::{
        extract::{ApiJson, ApiPath, ApiQuery},
        providers::Provider,
    },
    error::{Error, Result},
    facilitator::Facilitator,
};

fn parse_plan_id(id: &str) -> Result<B256> {
    id.parse()
        .map_err(|_| Error::InvalidField("id: expected a 0x-prefixed 32-byte hex plan id".into()))
}

/// `POST /plans`: 201 when created, 200 when the idempotency key names an existing plan.
pub(super) async fn create(
    State(f): State<Facilitator>,
    provider: Provider,
    ApiJson(req): ApiJson<CreatePlanRequest>,
) -> Result<(StatusCode, Json<Plan>)> {
    let (plan, created) = f.create_plan(provider.address, &req).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(plan)))
}

/// `GET /plans/{id}?network=`.
pub(super) async fn show(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<NetworkQuery>,
) -> Result<Json<Plan>> {
    let plan_id = parse_plan_id(&id)?;
    f.plan_by_id(q.network.as_deref(), plan_id).await.map(Json)
}

/// `POST /plans/{id}/deprecate?network=`: owner only; idempotent.
pub(super) async fn deprecate(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<NetworkQuery>,
    provider: Provider,
) -> Result<Json<Plan>> {
    let plan_id = parse_plan_id(&id)?;
    f.deprecate_plan(provider.address, q.network.as_deref(), plan_id)
        .await
        .map(Json)
}
