//! Subscriptions and their metered usage: `POST /subscriptions`, `GET /subscriptions/quote`,
//! `GET /subscriptions/{id}`, `GET|POST /subscriptions/{id}/usage` and
//! `POST /subscriptions/{id}/allowance`.

use alloy::primitives::{Address, B256};
use axum::{Json, extract::State};
use tollgate_protocol::{
    AllowanceUsage, DeductRequest, QuoteQuery, RaiseAllowanceRequest, SubscribeRequest,
    SubscriptionQuote, SubscriptionView, api::plans::NetworkQuery,
};

use crate::{
    api::{
        extract::{ApiJson, ApiPath, ApiQuery},
        providers::Provider,
    },
    error::{Error, Result},
    facilitator::Facilitator,
};

/// A subscription id in a usage or allowance path.
fn parse_id(id: &str) -> Result<B256> {
    id.parse().map_err(|_| {
        Error::InvalidField("id: expected a 0x-prefixed 32-byte hex subscription id".into())
    })
}

/// `POST /subscriptions`.
pub(super) async fn create(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<SubscribeRequest>,
) -> Result<Json<SubscriptionView>> {
    f.subscribe(&req).await.map(Json)
}

/// `GET /subscriptions/{id}?network=`.
pub(super) async fn show(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<NetworkQuery>,
) -> Result<Json<SubscriptionView>> {
    let id: B256 = id
        .parse()
        .map_err(|_| Error::InvalidField("id: expected a 0x-prefixed 32-byte hex value".into()))?;
    f.subscription(q.network.as_deref(), id).await.map(Json)
}

/// `GET /subscriptions/quote?network=&planId=&subscriber=`.
pub(super) async fn quote(
    State(f): State<Facilitator>,
    ApiQuery(q): ApiQuery<QuoteQuery>,
) -> Result<Json<SubscriptionQuote>> {
    let plan_id: B256 = q.plan_id.parse().map_err(|_| {
        Error::InvalidField("planId: expected a 0x-prefixed 32-byte hex value".into())
    })?;
    let subscriber: Address = q
        .subscriber
        .parse()
        .map_err(|_| Error::InvalidField("subscriber: expected an address".into()))?;
    f.subscription_quote(q.network.as_deref(), plan_id, subscriber)
        .await
        .map(Json)
}

/// `POST /subscriptions/{id}/usage`.
pub(super) async fn deduct(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
    ApiJson(req): ApiJson<DeductRequest>,
) -> Result<Json<AllowanceUsage>> {
    let id = parse_id(&id)?;
    f.deduct_allowance(provider.address, id, &req)
        .await
        .map(Json)
}

/// `GET /subscriptions/{id}/usage?network=`.
pub(super) async fn usage(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<NetworkQuery>,
    provider: Provider,
) -> Result<Json<AllowanceUsage>> {
    let id = parse_id(&id)?;
    f.allowance_usage(provider.address, q.network.as_deref(), id)
        .await
        .map(Json)
}

/// `POST /subscriptions/{id}/allowance`.
pub(super) async fn raise(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<RaiseAllowanceRequest>,
) -> Result<Json<SubscriptionView>> {
    let id = parse_id(&id)?;
    f.raise_allowance(id, &req).await.map(Json)
}
