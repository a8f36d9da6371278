//! Plans: `POST /plans`, `GET /plans/{id}`, `POST /plans/{id}/deprecate`.

use alloy::primitives::B256;
use axum::{Json, extract::State, http::StatusCode};
use tollgate_protocol::api::plans::{CreatePlanRequest, NetworkQuery, Plan};

use crate::{
    api::{
        Routes,
        extract::{ApiJson, ApiPath, ApiQuery},
        providers::Provider,
    },
    error::{Error, Result},
    facilitator::Facilitator,
    openapi::builder::op,
};

/// The routes of plans, each with its OpenAPI operation.
pub(super) fn routes(r: &mut Routes) {
    r.post("/plans", create, op("createPlan", "providers", "Publish a plan on-chain (the facilitator's relayer sends `createPlan`).")
        .description("The plan id is `planIdFor(relayer, keccak256(abi.encode(provider, idempotencyKey)))`: the same idempotency key again returns the same plan (200) instead of creating another. Waits for confirmation.")
        .secured()
        .body::<CreatePlanRequest>()
        .ok::<Plan>(200, "The plan this idempotency key already created.")
        .ok::<Plan>(201, "Created.")
        .errors(&[409, 422, 502, 503, 504]));
    r.get(
        "/plans/{id}",
        show,
        op(
            "showPlan",
            "providers",
            "A plan's on-chain terms and its provider.",
        )
        .hash_path("id", "The plan id.")
        .query::<NetworkQuery>()
        .ok::<Plan>(200, "The plan.")
        .errors(&[422, 502, 503]),
    );
    r.post("/plans/{id}/deprecate", deprecate, op("deprecatePlan", "providers", "Deprecate a plan (owner only; idempotent).")
        .description("A deprecated plan takes no new subscriptions (`PlanDeprecated`); existing subscriptions keep running until cancelled.")
        .secured()
        .hash_path("id", "The plan id.")
        .query::<NetworkQuery>()
        .ok::<Plan>(200, "The plan, deprecated.")
        .errors(&[403, 422, 502, 503, 504]));
}

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
    let (plan, created) = f.plans().create(provider.address, &req).await?;
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
    f.plans().get(q.network.as_deref(), plan_id).await.map(Json)
}

/// `POST /plans/{id}/deprecate?network=`: owner only; idempotent.
pub(super) async fn deprecate(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<NetworkQuery>,
    provider: Provider,
) -> Result<Json<Plan>> {
    let plan_id = parse_plan_id(&id)?;
    f.plans()
        .deprecate(provider.address, q.network.as_deref(), plan_id)
        .await
        .map(Json)
}
