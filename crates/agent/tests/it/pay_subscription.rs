//! `Agent::pay` on a subscription: a route gated by `tollgate-gate` priced
//! `[Pricing::subscription(plan), Pricing::one_time(..)]`, subscriptions checked on the devnet,
//! the real facilitator's relay.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::{
    primitives::B256,
    signers::SignerSync as _,
    sol_types::{SolCall, SolEvent},
};
use axum::{Router, routing::get};
use tollgate_agent::{
    Agent, Amount, Error, PaidResponse, PayRequest, PaymentKind, RaiseAllowance, SpendPolicy,
    Subscribe,
};
use tollgate_chain::{
    Address, LogFilter, TxRequest, U256, WaitOptions,
    contracts::{self, Subscriptions},
};
use tollgate_gate::{Gate, Pricing};
use tollgate_protocol::PlanTerms;

use crate::{
    subscribe::{AMOUNT, INTERVAL, PROVIDER, create_plan},
    support::{App, Harness, NETWORK, PAYEE, PAYER, PRICE, policy},
};

/// Another subscriber.
pub(crate) const OTHER: usize = 2;
/// What a metered request deducts from the allowance.
pub(crate) const METERED: u64 = 100_000;

/// A gate checking subscriptions on the devnet and knowing `plan_id`'s terms (metering through
/// `api_key` when given).
pub(crate) async fn gate(h: &Harness, plan_id: B256, api_key: Option<String>) -> Gate {
    let mut b = Gate::builder()
        .network(NETWORK)
        .token(h.token(), "USD Coin", "2")
        .pay_to(h.address(PAYEE))
        .facilitator(&h.url)
        .subscriptions(
            Arc::clone(&h.fixture.chain),
            h.fixture.deployment.subscriptions,
        )
        .plan_terms(PlanTerms {
            plan_id,
            amount: Amount::from_units(AMOUNT),
            interval: INTERVAL,
            token: h.token(),
        });
    if let Some(key) = api_key {
        b = b.api_key(key);
    }
    b.build().await.expect("gate")
}

/// `/v1/report`, offering the plan and a one-time price of [`PRICE`], metered when asked.
pub(crate) async fn report_app(gate: &Gate, plan_id: B256, metered: bool) -> App {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let mut layer = gate.payment_gate([Pricing::subscription(plan_id), Pricing::one_time(PRICE)]);
    if metered {
        layer = layer.metered(METERED);
    }
    let app = Router::new()
        .route(
            "/v1/report",
            get(move || {
                let hits = Arc::clone(&counted);
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    axum::Json(serde_json::json!({ "report": "ok" }))
                }
            }),
        )
        .route_layer(layer);
    App::serve(app, hits).await
}

/// An agent of dev account `i` through the harness's facilitator under `policy`.
pub(crate) fn agent_of(h: &Harness, i: usize, policy: SpendPolicy) -> Agent {
    h.agent_builder(i, policy)
        .facilitators([h.url.clone()])
        .build()
        .unwrap()
}

/// The opt-in: one-time payments up to [`PRICE`], plans up to [`AMOUNT`] a cycle.
pub(crate) fn subscribing(max_overage: u64) -> SpendPolicy {
    policy(PRICE, 10 * AMOUNT)
        .subscriptions(Amount::from_units(AMOUNT), Amount::from_units(max_overage))
}

pub(crate) async fn nonce(h: &Harness, who: Address) -> U256 {
    contracts::read(
        &*h.fixture.chain,
        h.fixture.deployment.subscriptions,
        &Subscriptions::noncesCall { subscriber: who },
    )
    .await
    .unwrap()
}

/// How many `SubscriptionCreated` events the contract emitted.
pub(crate) async fn created_events(h: &Harness) -> usize {
    let filter = LogFilter {
        from_block: 0,
        to_block: None,
        addresses: vec![h.fixture.deployment.subscriptions],
        topics: [
            Some(vec![Subscriptions::SubscriptionCreated::SIGNATURE_HASH]),
            None,
            None,
            None,
        ],
    };
    h.fixture.chain.logs(&filter).await.unwrap().len()
}

pub(crate) fn subscription_of(r: &PaidResponse) -> B256 {
    match r.payment.as_ref().map(|p| p.kind) {
        Some(PaymentKind::Subscription { id }) => id,
        other => panic!("not served on a subscription: {other:?}"),
    }
}

pub(crate) async fn fetch(agent: &Agent, app: &App) -> PaidResponse {
    let r = agent
        .pay(PayRequest::get(&app.url("/v1/report")).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opted_in_agent_subscribes_once_and_then_serves_on_the_subscription() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 1).await;
    let gate = gate(&h, plan_id, None).await;
    let app = report_app(&gate, plan_id, false).await;
    let payer = h.address(PAYER);
    let (balance, payee) = (h.balance(payer).await, h.balance(h.address(PAYEE)).await);
    let agent = agent_of(&h, PAYER, subscribing(0));

    // The first request subscribes: one subscription on-chain, the first cycle billed.
    let first = fetch(&agent, &app).await;
    let id = subscription_of(&first);
    let p = first.payment.as_ref().unwrap();
    assert_eq!(p.amount, Amount::from_units(AMOUNT));
    assert_eq!(p.pay_to, h.address(PAYEE));
    assert_eq!(p.header, id.to_string());
    assert!(p.tx_hash.is_some());
    assert_eq!(nonce(&h, payer).await, U256::from(1));
    assert_eq!(created_events(&h).await, 1);
    assert_eq!(h.balance(payer).await, balance - U256::from(AMOUNT));
    assert_eq!(agent.spent(), Amount::from_units(AMOUNT));

    // The second reuses it: nothing paid, nothing created.
    let second = fetch(&agent, &app).await;
    assert_eq!(subscription_of(&second), id);
    assert_eq!(second.payment.as_ref().unwrap().amount, Amount::ZERO);
    assert_eq!(second.payment.as_ref().unwrap().tx_hash, None);
    assert_eq!(nonce(&h, payer).await, U256::from(1));
    assert_eq!(created_events(&h).await, 1);
    assert_eq!(h.balance(payer).await, balance - U256::from(AMOUNT));
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee + U256::from(AMOUNT)
    );
    assert_eq!(agent.spent(), Amount::from_units(AMOUNT));
    assert_eq!(app.hits(), 2);

    // Concurrent first requests of another agent subscribe once between them.
    let other = agent_of(&h, OTHER, subscribing(0));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let other = other.clone();
            let url = app.url("/v1/report");
            tokio::spawn(async move { other.pay(PayRequest::get(&url).unwrap()).await })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        let r = t.await.unwrap().unwrap();
        assert_eq!(r.status, 200);
        ids.push(subscription_of(&r));
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_ne!(ids[0], id);
    assert_eq!(nonce(&h, h.address(OTHER)).await, U256::from(1));
    assert_eq!(created_events(&h).await, 2);
    assert_eq!(other.spent(), Amount::from_units(AMOUNT));
    assert_eq!(app.hits(), 6);

    // A subscription held already (another process created it) is used as given.
    let fresh = agent_of(&h, PAYER, subscribing(0));
    fresh.use_subscription(plan_id, id);
    let r = fetch(&fresh, &app).await;
    assert_eq!(subscription_of(&r), id);
    assert_eq!(fresh.spent(), Amount::ZERO);
    assert_eq!(nonce(&h, payer).await, U256::from(1));
    assert_eq!(created_events(&h).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opted_out_or_over_its_cap_an_agent_pays_one_time() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 2).await;
    let gate = gate(&h, plan_id, None).await;
    let app = report_app(&gate, plan_id, false).await;
    let payer = h.address(PAYER);
    let balance = h.balance(payer).await;

    // A subscription to the plan exists (another account's, created directly).
    let theirs = agent_of(&h, OTHER, subscribing(0))
        .subscribe(Subscribe::new(plan_id, Amount::ZERO))
        .await
        .unwrap();
    // Opted out (although the per-request cap would cover the plan, and the agent is told of
    // the subscription), and a cap per cycle below the plan's amount.
    let plain = agent_of(&h, PAYER, policy(AMOUNT, 10 * AMOUNT).no_subscriptions());
    plain.use_subscription(plan_id, theirs.id);
    let small = agent_of(
        &h,
        PAYER,
        policy(PRICE, 10 * AMOUNT).subscriptions(Amount::from_units(AMOUNT - 1), Amount::ZERO),
    );
    for a in [&plain, &small] {
        let r = fetch(a, &app).await;
        let p = r.payment.unwrap();
        assert_eq!(p.kind, PaymentKind::Tollgate);
        assert_eq!(p.amount, Amount::from_units(PRICE));
        assert!(p.proof.is_some());
    }
    assert_eq!(nonce(&h, payer).await, U256::ZERO);
    assert_eq!(created_events(&h).await, 1);
    assert_eq!(h.balance(payer).await, balance - U256::from(2 * PRICE));
    assert_eq!(app.hits(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_an_agent_prefers_to_subscribe_within_its_budget() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 5).await;
    let gate = gate(&h, plan_id, None).await;
    let app = report_app(&gate, plan_id, false).await;
    // The spec: a client on the service's own SDK that sees subscriptionScheme true prefers to
    // subscribe. The default policy does, for a plan within the budget, though one cycle is
    // over the per-request cap; once subscribed, the next request rides on it.
    let agent = agent_of(&h, PAYER, policy(PRICE, 10 * AMOUNT));
    let first = fetch(&agent, &app).await;
    let id = subscription_of(&first);
    assert_eq!(
        first.payment.as_ref().unwrap().amount,
        Amount::from_units(AMOUNT)
    );
    let again = fetch(&agent, &app).await;
    let p = again.payment.unwrap();
    assert_eq!(p.kind, PaymentKind::Subscription { id });
    assert_eq!((p.amount, p.metered), (Amount::ZERO, Some(Amount::ZERO)));
    assert_eq!(agent.spent(), Amount::from_units(AMOUNT));
    // Over the budget a cycle, it pays one-time.
    let small = agent_of(&h, OTHER, policy(PRICE, AMOUNT - 1));
    assert_eq!(
        fetch(&small, &app).await.payment.unwrap().kind,
        PaymentKind::Tollgate
    );
    assert_eq!(app.hits(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_subscription_is_forgotten_for_one_time_then_replaced() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 3).await;
    let gate = gate(&h, plan_id, None).await;
    let app = report_app(&gate, plan_id, false).await;
    let payer = h.address(PAYER);
    let agent = agent_of(&h, PAYER, subscribing(0));
    let id = subscription_of(&fetch(&agent, &app).await);

    let cancel = Subscriptions::cancelCall { id };
    h.fixture
        .chain
        .send_and_wait(
            TxRequest::call(
                payer,
                h.fixture.deployment.subscriptions,
                cancel.abi_encode(),
            ),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    // Until the gate sees the cancellation (its watcher polls every second), requests are
    // still served on it; then the agent forgets it and pays one-time, in the same call,
    // without subscribing again.
    let started = Instant::now();
    let r = loop {
        let r = fetch(&agent, &app).await;
        if !matches!(
            r.payment.as_ref().map(|p| p.kind),
            Some(PaymentKind::Subscription { .. })
        ) {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the gate never refused it"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let p = r.payment.unwrap();
    assert_eq!(p.kind, PaymentKind::Tollgate);
    assert_eq!(p.amount, Amount::from_units(PRICE));
    assert_eq!(nonce(&h, payer).await, U256::from(1));

    // The next request subscribes anew.
    let r = fetch(&agent, &app).await;
    let renewed = subscription_of(&r);
    assert_ne!(renewed, id);
    assert_eq!(
        r.payment.unwrap().amount,
        Amount::from_units(AMOUNT),
        "a new first cycle"
    );
    assert_eq!(nonce(&h, payer).await, U256::from(2));
    assert_eq!(created_events(&h).await, 2);
}

/// [`PROVIDER`]'s API key, by the facilitator's challenge and `personal_sign`.
pub(crate) async fn provider_key(h: &Harness) -> String {
    let http = reqwest::Client::new();
    let account = &h.fixture.accounts[PROVIDER];
    let challenge: serde_json::Value = http
        .post(format!("{}/providers/challenge", h.url))
        .json(&serde_json::json!({ "address": account.address }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = challenge["challenge"].as_str().unwrap();
    let signature = account.signer().sign_message_sync(text.as_bytes()).unwrap();
    let registered: serde_json::Value = http
        .post(format!("{}/providers/register", h.url))
        .json(&serde_json::json!({
            "address": account.address,
            "challenge": text,
            "signature": alloy::primitives::Bytes::from(signature.as_bytes().to_vec()),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    registered["apiKey"].as_str().unwrap().to_owned()
}

/// A plan published through the facilitator with `api_key` (so that the facilitator meters
/// its subscriptions for the key's provider).
pub(crate) async fn published_plan(h: &Harness, api_key: &str) -> B256 {
    let r = reqwest::Client::new()
        .post(format!("{}/plans", h.url))
        .bearer_auth(api_key)
        .json(&serde_json::json!({
            "network": NETWORK,
            "amount": AMOUNT.to_string(),
            "interval": INTERVAL,
            "payTo": h.address(PAYEE),
            "idempotencyKey": "metered",
        }))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let plan: serde_json::Value = r.json().await.unwrap();
    assert!(status.is_success(), "{status} {plan}");
    plan["planId"].as_str().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_allowance_is_typed_and_a_raise_lifts_it() {
    let h = Harness::new().await;
    let api_key = provider_key(&h).await;
    let plan_id = published_plan(&h, &api_key).await;
    let gate = gate(&h, plan_id, Some(api_key)).await;
    let app = report_app(&gate, plan_id, true).await;
    let agent = agent_of(&h, PAYER, subscribing(METERED));
    let sub = agent
        .subscribe(Subscribe::new(plan_id, Amount::from_units(METERED)))
        .await
        .unwrap();
    agent.use_subscription(plan_id, sub.id);

    // The allowance covers one metered request.
    assert_eq!(subscription_of(&fetch(&agent, &app).await), sub.id);
    let err = agent
        .pay(PayRequest::get(&app.url("/v1/report")).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AllowanceExhausted), "{err:?}");
    assert_eq!(app.hits(), 1);

    // Raised by two more: served again, on the same subscription.
    agent
        .raise_allowance(RaiseAllowance::new(sub.id, Amount::from_units(3 * METERED)))
        .await
        .unwrap();
    assert_eq!(subscription_of(&fetch(&agent, &app).await), sub.id);
    assert_eq!(subscription_of(&fetch(&agent, &app).await), sub.id);
    assert!(matches!(
        agent
            .pay(PayRequest::get(&app.url("/v1/report")).unwrap())
            .await,
        Err(Error::AllowanceExhausted)
    ));
    assert_eq!(app.hits(), 3);
    assert_eq!(nonce(&h, h.address(PAYER)).await, U256::from(2));
}
