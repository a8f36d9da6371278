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
        Routes,
        extract::{ApiJson, ApiPath, ApiQuery},
        providers::Provider,
    },
    error::{Error, Result},
    facilitator::Facilitator,
    openapi::builder::{Op, op},
};

/// The routes of subscriptions, their lifecycle and metered usage, each with its OpenAPI
/// operation.
pub(super) fn routes(r: &mut Routes) {
    r.post("/subscriptions", create, op("subscribe", "subscriptions", "Relay a gasless subscription (subscribeWithSig): the first cycle is billed in the same transaction; answers after confirmation.")
        .description("The subscriber's EIP-712 `Subscribe` intent and its EIP-2612 permit (the standing authorization). Idempotent: the same signed request returns the subscription it created.")
        .body::<SubscribeRequest>()
        .ok::<SubscriptionView>(200, "The subscription.")
        .errors(&[402, 409, 422, 502, 503, 504]));
    r.get("/subscriptions", list, op("listSubscriptions", "subscriptions", "Every subscription of one subscriber (any state), read from the chain, by id; for that subscriber only.")
        .description("Authenticated by the subscriber's EIP-191 `personal_sign` signature of the text `Tollgate: list the subscriptions of <subscriber>\\nchain id: <chainId>\\nsubscriptions contract: <contract>\\nvalid until: <deadline>` (addresses checksummed; chain id and contract as `/.well-known/tollgate` publishes them), with `deadline` at most 600 seconds ahead of the chain's clock. Complete also when the facilitator's keeper is off: the ids come from the contract's `SubscriptionCreated` logs.")
        .query::<ListSubscriptionsQuery>()
        .ok_list::<SubscriptionView>(200, "The subscriptions.")
        .errors(&[401, 422, 502, 503]));
    r.get("/subscriptions/quote", quote, op("subscriptionQuote", "subscriptions", "What a subscriber signs: the plan's terms, its subscription and permit nonces, its allowance and the chain's clock.")
        .query::<QuoteQuery>()
        .ok::<SubscriptionQuote>(200, "The quote.")
        .errors(&[404, 422, 502, 503]));
    r.get(
        "/subscriptions/{id}",
        show,
        op(
            "showSubscription",
            "subscriptions",
            "A subscription's state from the chain.",
        )
        .hash_path("id", "The subscription id.")
        .query::<NetworkQuery>()
        .ok::<SubscriptionView>(200, "The subscription.")
        .errors(&[422, 502, 503]),
    );
    r.get(
        "/subscriptions/{id}/usage",
        usage,
        op(
            "showAllowanceUsage",
            "subscriptions",
            "The usage ledger of the subscription's current cycle (plan owner only).",
        )
        .secured()
        .hash_path("id", "The subscription id.")
        .query::<NetworkQuery>()
        .ok::<AllowanceUsage>(200, "The ledger.")
        .errors(&[403, 422, 502, 503]),
    );
    r.post("/subscriptions/{id}/usage", deduct, op("deductAllowance", "subscriptions", "The spec's deductAllowance: deduct metered usage from the subscription's overage allowance (plan owner only).")
        .description("Exact under concurrency: a deduction that would cross the cycle's cap is refused with 402 `AllowanceExhausted` and nothing is deducted. Usage is charged on-chain in batches and at the end of each cycle.")
        .secured()
        .hash_path("id", "The subscription id.")
        .body::<DeductRequest>()
        .ok::<AllowanceUsage>(200, "The allowance after the deduction.")
        .errors(&[402, 403, 409, 422, 502, 503]));
    r.post("/subscriptions/{id}/allowance", raise, op("raiseAllowance", "subscriptions", "Relay the subscriber's signed raiseAllowanceWithSig (EIP-712 `Action`, action 4, value = the new cap); answers after confirmation.")
        .description("Idempotent: a cap already at `maxOverage` is answered without a transaction.")
        .hash_path("id", "The subscription id.")
        .body::<RaiseAllowanceRequest>()
        .ok::<SubscriptionView>(200, "The subscription with its new cap.")
        .errors(&[409, 422, 502, 503, 504]));
    r.post(
        "/subscriptions/{id}/pause",
        pause,
        action(SubscriberAction::Pause),
    );
    r.post(
        "/subscriptions/{id}/resume",
        resume,
        action(SubscriberAction::Resume),
    );
    r.post(
        "/subscriptions/{id}/cancel",
        cancel,
        action(SubscriberAction::Cancel),
    );
}

/// The operation of a subscriber's `action` (`POST /subscriptions/{id}/pause|resume|cancel`).
fn action(action: SubscriberAction) -> Op {
    let (name, what, more) = match action {
        SubscriberAction::Pause => (
            "pauseSubscription",
            "pauseWithSig (action 1)",
            "Gates refuse a paused subscription (`SubscriptionNotActive`) and it is not renewed.",
        ),
        SubscriberAction::Resume => (
            "resumeSubscription",
            "resumeWithSig (action 2)",
            "When the paid period has ended, a new cycle is billed in the same transaction (402 `InsufficientFunds` when the subscriber cannot pay; nothing is sent).",
        ),
        SubscriberAction::Cancel => (
            "cancelSubscription",
            "cancelWithSig (action 3)",
            "Cancelled is final: a second, differently signed cancel is 409 `SubscriptionNotActive`; subscribe again.",
        ),
    };
    op(name, "subscriptions", &format!("Relay the subscriber's signed {what}: EIP-712 `Action` with value 0 and the subscriber's current nonce; answers after confirmation, gasless for the subscriber."))
            .description(&format!("Idempotent: the same signed request again, or an action whose target state already holds, answers the subscription as it is without a transaction. Refused without sending: a signature that does not recover to the subscriber (422 `InvalidSignature`), a passed deadline (422 `SignatureExpired`), an action on a cancelled subscription (409 `SubscriptionNotActive`), and an action beyond the facilitator's bound on relayed transactions, by default 4 per subscription per hour and 24 per subscriber per day (429 `RateLimited`, with `Retry-After`; what is answered without a transaction is never counted, and a subscription's first cancel is never refused). {more}"))
            .hash_path("id", "The subscription id.")
            .body::<ActionRequest>()
            .ok::<SubscriptionView>(200, "The subscription after the action.")
            .errors(&[402, 404, 409, 422, 502, 503])
}

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
    f.subscriptions().subscribe(&req).await.map(Json)
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
    f.subscriptions()
        .subscription(q.network.as_deref(), id)
        .await
        .map(Json)
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
    f.subscriptions()
        .quote(q.network.as_deref(), plan_id, subscriber)
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
    f.subscriptions()
        .deduct_allowance(provider.address, id, &req)
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
    f.subscriptions()
        .allowance_usage(provider.address, q.network.as_deref(), id)
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
    f.subscriptions().raise_allowance(id, &req).await.map(Json)
}

/// `GET /subscriptions?network=&subscriber=&deadline=&signature=`.
pub(super) async fn list(
    State(f): State<Facilitator>,
    ApiQuery(q): ApiQuery<ListSubscriptionsQuery>,
) -> Result<Json<Vec<SubscriptionView>>> {
    f.subscriptions().list(&q).await.map(Json)
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
    f.subscriptions()
        .subscriber_action(id, action, &req)
        .await
        .map(Json)
}
