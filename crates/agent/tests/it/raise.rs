//! `Agent::raise_allowance` end to end: a subscription created through the real facilitator, its
//! overage cap raised by the relayed `raiseAllowanceWithSig`, read back from the facilitator and
//! the chain. A reverse proxy in front of the facilitator loses an answer or corrupts a signature.

use std::sync::{Arc, Mutex};

use alloy::primitives::{B256, Bytes};
use axum::{
    Router,
    extract::State,
    http::{Method, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use tollgate_agent::{
    Agent, Amount, Error, RaiseAllowance, Refusal, Subscribe, SubscriptionStatus,
};
use tollgate_chain::{
    Address, TxRequest, U256, WaitOptions,
    contracts::{self, Subscriptions},
};

use crate::{
    subscribe::{AMOUNT, create_plan},
    support::{Harness, NETWORK, PAYER, policy},
};

const OVERAGE: u64 = 300_000;
const RAISED: u64 = 1_000_000;
/// Another subscriber.
const OTHER: usize = 2;

/// What the proxy does to `POST /subscriptions/{id}/allowance`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Forwards it.
    Pass,
    /// Forwards the first one, waits for its answer, and answers 503 `Pending` instead.
    LoseFirstAnswer,
    /// Forwards it with one byte of the signature changed.
    CorruptSignature,
}

#[derive(Clone)]
struct ProxyState {
    target: String,
    mode: Mode,
    http: reqwest::Client,
    /// The bodies of the allowance posts received.
    posts: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// A reverse proxy to the facilitator on loopback.
struct Proxy {
    url: String,
    posts: Arc<Mutex<Vec<Vec<u8>>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Proxy {
    async fn start(target: &str, mode: Mode) -> Self {
        let posts = Arc::new(Mutex::new(Vec::new()));
        let state = ProxyState {
            target: target.to_owned(),
            mode,
            http: reqwest::Client::new(),
            posts: Arc::clone(&posts),
        };
        let app = Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, posts, server }
    }

    fn allowance_posts(&self) -> Vec<Vec<u8>> {
        self.posts.lock().unwrap().clone()
    }
}

async fn forward(
    State(s): State<ProxyState>,
    method: Method,
    uri: Uri,
    body: axum::body::Bytes,
) -> Response {
    let raise = method == Method::POST && uri.path().ends_with("/allowance");
    let mut body = body.to_vec();
    let first = raise && {
        let mut posts = s.posts.lock().unwrap();
        posts.push(body.clone());
        posts.len() == 1
    };
    if raise && s.mode == Mode::CorruptSignature {
        let mut json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let mut sig: Bytes = json["signature"].as_str().unwrap().parse().unwrap();
        let mut bytes = sig.to_vec();
        bytes[5] ^= 0x01;
        sig = bytes.into();
        json["signature"] = sig.to_string().into();
        body = serde_json::to_vec(&json).unwrap();
    }
    let answer = s
        .http
        .request(method, format!("{}{uri}", s.target))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let bytes = answer.bytes().await.unwrap();
    if first && s.mode == Mode::LoseFirstAnswer {
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        let lost = serde_json::json!({
            "error": { "code": "Pending", "message": "the answer was lost on the way" }
        });
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(lost)).into_response();
    }
    (
        status,
        [("content-type", "application/json")],
        bytes.to_vec(),
    )
        .into_response()
}

/// The subscriber's `Subscriptions.nonces` (one per signature used: subscribe, raise, …).
async fn nonce(h: &Harness, who: Address) -> U256 {
    contracts::read(
        &*h.fixture.chain,
        h.fixture.deployment.subscriptions,
        &Subscriptions::noncesCall { subscriber: who },
    )
    .await
    .unwrap()
}

/// `remainingAllowance(id)` on-chain: the cap, while nothing was charged.
async fn remaining_on_chain(h: &Harness, id: B256) -> U256 {
    contracts::read(
        &*h.fixture.chain,
        h.fixture.deployment.subscriptions,
        &Subscriptions::remainingAllowanceCall { id },
    )
    .await
    .unwrap()
}

/// `GET /subscriptions/{id}` from the facilitator itself.
async fn view(h: &Harness, id: B256) -> serde_json::Value {
    let r = reqwest::get(format!("{}/subscriptions/{id}?network={NETWORK}", h.url))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

/// An agent of dev account `i` with no configured facilitator (each call names one).
fn agent(h: &Harness, i: usize, budget: u64) -> Agent {
    h.agent_builder(i, policy(AMOUNT, budget)).build().unwrap()
}

async fn subscribe(agent: &Agent, via: &str, plan_id: B256) -> tollgate_agent::Subscription {
    agent
        .subscribe(Subscribe::new(plan_id, Amount::from_units(OVERAGE)).facilitator(via))
        .await
        .unwrap()
}

fn raise(id: B256, cap: u64, via: &str) -> RaiseAllowance {
    RaiseAllowance::new(id, Amount::from_units(cap)).facilitator(via)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_lifts_the_cap_on_chain_and_a_lost_answer_is_retried_idempotently() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 1).await;
    let proxy = Proxy::start(&h.url, Mode::LoseFirstAnswer).await;
    // Through the only configured facilitator (the proxy), by default.
    let agent = h
        .agent_builder(PAYER, policy(AMOUNT, 10 * AMOUNT))
        .facilitators([proxy.url.clone()])
        .build()
        .unwrap();
    let sub = agent
        .subscribe(Subscribe::new(plan_id, Amount::from_units(OVERAGE)))
        .await
        .unwrap();
    assert_eq!(
        view(&h, sub.id).await["allowance"]["cap"],
        OVERAGE.to_string()
    );
    let nonce_before = nonce(&h, h.address(PAYER)).await;
    let spent = agent.spent();

    let raised = agent
        .raise_allowance(RaiseAllowance::new(sub.id, Amount::from_units(RAISED)))
        .await
        .unwrap();
    assert_eq!(raised.id, sub.id);
    assert_eq!(raised.status, SubscriptionStatus::Active);
    assert_eq!(raised.allowance_cap, Amount::from_units(RAISED));
    assert_eq!(raised.allowance_remaining, Amount::from_units(RAISED));

    // The facilitator's view and the chain show the new cap.
    let v = view(&h, sub.id).await;
    assert_eq!(v["allowance"]["cap"], RAISED.to_string(), "{v}");
    assert_eq!(remaining_on_chain(&h, sub.id).await, U256::from(RAISED));
    // The first answer was lost: the same signed request was sent again and answered without a
    // second transaction (one nonce used).
    let posts = proxy.allowance_posts();
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[0], posts[1]);
    assert_eq!(
        nonce(&h, h.address(PAYER)).await,
        nonce_before + U256::from(1)
    );
    // The increase is counted in the budget.
    assert_eq!(
        agent.spent(),
        Amount(spent.get() + U256::from(RAISED - OVERAGE))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_not_above_the_current_one_is_refused_before_signing() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 2).await;
    let proxy = Proxy::start(&h.url, Mode::Pass).await;
    let agent = agent(&h, PAYER, 10 * AMOUNT);
    let sub = subscribe(&agent, &proxy.url, plan_id).await;
    let nonce_before = nonce(&h, h.address(PAYER)).await;
    let spent = agent.spent();

    for requested in [OVERAGE, OVERAGE - 1, 0] {
        let err = agent
            .raise_allowance(raise(sub.id, requested, &proxy.url))
            .await
            .unwrap_err();
        match err {
            Error::AllowanceNotRaised { cap, requested: r } => {
                assert_eq!(cap, Amount::from_units(OVERAGE));
                assert_eq!(r, Amount::from_units(requested));
            }
            other => panic!("{requested}: {other:?}"),
        }
    }
    // A raise, then the same raise again: the second is refused the same way.
    agent
        .raise_allowance(raise(sub.id, RAISED, &proxy.url))
        .await
        .unwrap();
    let err = agent
        .raise_allowance(raise(sub.id, RAISED, &proxy.url))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::AllowanceNotRaised { cap, .. } if cap == Amount::from_units(RAISED)),
        "{err:?}"
    );
    assert_eq!(proxy.allowance_posts().len(), 1, "refusals post nothing");
    assert_eq!(
        nonce(&h, h.address(PAYER)).await,
        nonce_before + U256::from(1)
    );
    assert_eq!(
        agent.spent(),
        Amount(spent.get() + U256::from(RAISED - OVERAGE))
    );

    // A cancelled subscription cannot be raised.
    let cancel = Subscriptions::cancelCall { id: sub.id };
    h.fixture
        .chain
        .send_and_wait(
            TxRequest::call(
                h.address(PAYER),
                h.fixture.deployment.subscriptions,
                alloy::sol_types::SolCall::abi_encode(&cancel),
            ),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    let err = agent
        .raise_allowance(raise(sub.id, 2 * RAISED, &proxy.url))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SubscriptionNotActive), "{err:?}");
    assert_eq!(proxy.allowance_posts().len(), 1);
    assert_eq!(
        view(&h, sub.id).await["allowance"]["cap"],
        RAISED.to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_or_unknown_subscription_is_refused() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 3).await;
    let proxy = Proxy::start(&h.url, Mode::Pass).await;
    let other = agent(&h, OTHER, 10 * AMOUNT);
    let theirs = subscribe(&other, &proxy.url, plan_id).await;
    let agent = agent(&h, PAYER, 10 * AMOUNT);

    let err = agent
        .raise_allowance(raise(theirs.id, RAISED, &proxy.url))
        .await
        .unwrap_err();
    match err {
        Error::NotSubscriber { id, subscriber } => {
            assert_eq!(id, theirs.id);
            assert_eq!(subscriber, h.address(OTHER));
        }
        other => panic!("{other:?}"),
    }
    let unknown = B256::repeat_byte(0x42);
    let err = agent
        .raise_allowance(raise(unknown, RAISED, &proxy.url))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownSubscription { id } if id == unknown),
        "{err:?}"
    );
    assert!(proxy.allowance_posts().is_empty());
    assert_eq!(agent.spent(), Amount::ZERO);
    assert_eq!(nonce(&h, h.address(PAYER)).await, U256::ZERO);
    assert_eq!(
        view(&h, theirs.id).await["allowance"]["cap"],
        OVERAGE.to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_bounds_the_raise_and_a_refused_raise_releases_it() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 4).await;
    let corrupting = Proxy::start(&h.url, Mode::CorruptSignature).await;
    let direct = h.url.clone();
    // Room for the first cycle and 0.5 token of overage.
    let agent = agent(&h, PAYER, AMOUNT + 500_000);
    let sub = subscribe(&agent, &direct, plan_id).await;
    assert_eq!(agent.spent(), Amount::from_units(AMOUNT));
    let nonce_before = nonce(&h, h.address(PAYER)).await;

    // Over the budget: refused before signing.
    let err = agent
        .raise_allowance(raise(sub.id, OVERAGE + 500_001, &direct))
        .await
        .unwrap_err();
    match err {
        Error::PolicyViolation {
            what: Refusal::OverBudget { price, remaining },
        } => {
            assert_eq!(price, Amount::from_units(500_001));
            assert_eq!(remaining, Amount::from_units(500_000));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(agent.spent(), Amount::from_units(AMOUNT));

    // Within the budget, but the contract refuses the (corrupted) signature: the reservation
    // is released.
    let err = agent
        .raise_allowance(raise(sub.id, OVERAGE + 500_000, &corrupting.url))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Facilitator { status: 422, code, .. } if code == "InvalidSignature"),
        "{err:?}"
    );
    assert_eq!(corrupting.allowance_posts().len(), 1);
    assert_eq!(agent.spent(), Amount::from_units(AMOUNT));
    assert_eq!(nonce(&h, h.address(PAYER)).await, nonce_before);
    assert_eq!(remaining_on_chain(&h, sub.id).await, U256::from(OVERAGE));

    // The same raise, intact: it fits the budget exactly.
    let raised = agent
        .raise_allowance(raise(sub.id, OVERAGE + 500_000, &direct))
        .await
        .unwrap();
    assert_eq!(raised.allowance_cap, Amount::from_units(OVERAGE + 500_000));
    assert_eq!(agent.remaining(), Amount::ZERO);
    assert_eq!(
        remaining_on_chain(&h, sub.id).await,
        U256::from(OVERAGE + 500_000)
    );
}
