//! Subscriptions and their metered usage: `POST /subscriptions`, `GET /subscriptions`,
//! `GET /subscriptions/quote`, `GET /subscriptions/{id}`, `GET|POST /subscriptions/{id}/usage`,
//! `POST /subscriptions/{id}/allowance` and the subscriber's
//! `POST /subscriptions/{id}/pause|resume|cancel`.

use alloy::primitives::{Address, B256};
use axum::{Json, extract::State};
use tollgate_protocol::{
    AllowanceUsage, DeductRequest, QuoteQuery, RaiseAllowanceRequest, SubscribeRequest,
    SubscriptionQuote, SubscriptionView,
    api::{
        plans::NetworkQuery,
        subscriptions::{ActionRequest, ListSubscriptionsQuery, SubscriberAction},
    },
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

/// `GET /subscriptions?network=&subscriber=&deadline=&signature=`.
pub(super) async fn list(
    State(f): State<Facilitator>,
    ApiQuery(q): ApiQuery<ListSubscriptionsQuery>,
) -> Result<Json<Vec<SubscriptionView>>> {
    f.subscriptions_of(&q).await.map(Json)
}

/// `POST /subscriptions/{id}/pause`.
pub(super) async fn pause(
    f: State<Facilitator>,
    id: ApiPath<String>,
    req: ApiJson<ActionRequest>,
) -> Result<Json<SubscriptionView>> {
    act(f, id, SubscriberAction::Pause, req).await
}

/// `POST /subscriptions/{id}/resume`.
pub(super) async fn resume(
    f: State<Facilitator>,
    id: ApiPath<String>,
    req: ApiJson<ActionRequest>,
) -> Result<Json<SubscriptionView>> {
    act(f, id, SubscriberAction::Resume, req).await
}

/// `POST /subscriptions/{id}/cancel`.
pub(super) async fn cancel(
    f: State<Facilitator>,
    id: ApiPath<String>,
    req: ApiJson<ActionRequest>,
) -> Result<Json<SubscriptionView>> {
    act(f, id, SubscriberAction::Cancel, req).await
}

async fn act(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    action: SubscriberAction,
    ApiJson(req): ApiJson<ActionRequest>,
) -> Result<Json<SubscriptionView>> {
    let id = parse_id(&id)?;
    f.subscriber_action(id, action, &req).await.map(Json)
}
