//! The subscriber's gasless lifecycle over real HTTP (issue 15): `POST /subscriptions/{id}/pause`,
//! `/resume` and `/cancel` relayed and idempotent, their refusals, the webhook events they cause,
//! `GET /subscriptions?subscriber=` signed by the subscriber (with and without the keeper), and
//! one set of figures: the view's remaining allowance is the ledger's, the quote's provider is the
//! plan's owner.

use crate::metering::send;
use std::collections::BTreeMap;

use alloy::{
    primitives::{Address, B256, U256},
    signers::SignerSync,
    sol_types::{SolCall, SolEvent},
};
use serde_json::{Value, json};
use tollgate_chain::{
    authorization::{Action, ActionKind, sign, subscriptions_domain},
    contracts::{self, Subscriptions, Token},
};
use tollgate_protocol::api::subscriptions::{LIST_MAX_VALIDITY_SECS, ListSubscriptionsQuery};

use crate::support::{Backend, Harness, NETWORK};

const PROVIDER: usize = 5;
const PAY_TO: usize = 6;
const SUBSCRIBER: usize = 3;
const STRANGER: usize = 4;
const PLAN_AMOUNT: u64 = 1_000_000;
const INTERVAL: u64 = 30 * 24 * 3600;

/// A plan published through the facilitator by [`PROVIDER`], and [`SUBSCRIBER`] ready to pay.
struct Setup {
    h: Harness,
    key: String,
    plan_id: B256,
}

async fn setup(backend: Backend) -> Setup {
    let h = Harness::new(backend).await;
    let key = h.api_key(PROVIDER, "provider").await;
    let r = h
        .http
        .post(format!("{}/plans", h.url))
        .bearer_auth(&key)
        .json(&json!({
            "network": NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": INTERVAL,
            "payTo": h.account(PAY_TO).address, "idempotencyKey": "lifecycle"
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let plan: Value = r.json().await.unwrap();
    let plan_id: B256 = plan["planId"].as_str().unwrap().parse().unwrap();
    let d = h.fixture.deployment;
    let approve = Token::approveCall {
        spender: d.subscriptions,
        value: U256::MAX,
    };
    send(&h, SUBSCRIBER, d.token, approve.abi_encode()).await;
    Setup { h, key, plan_id }
}

impl Setup {
    /// [`SUBSCRIBER`] subscribes directly on-chain (nothing the facilitator relayed).
    async fn subscribe(&self, cap: u64) -> B256 {
        let d = self.h.fixture.deployment;
        let call = Subscriptions::subscribeCall {
            planId: self.plan_id,
            maxOverage: U256::from(cap),
        };
        let receipt = send(&self.h, SUBSCRIBER, d.subscriptions, call.abi_encode()).await;
        receipt
            .logs
            .iter()
            .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
            .expect("SubscriptionCreated")
            .id
    }

    async fn nonce(&self) -> U256 {
        contracts::read(
            self.h.fixture.chain.as_ref(),
            self.h.fixture.deployment.subscriptions,
            &Subscriptions::noncesCall {
                subscriber: self.h.account(SUBSCRIBER).address,
            },
        )
        .await
        .unwrap()
    }

    /// The body of a lifecycle action signed by `signer` with `nonce` (default: the current
    /// one) and `deadline` (default: ten minutes on the chain's clock).
    async fn signed(
        &self,
        id: B256,
        kind: ActionKind,
        signer: usize,
        deadline: Option<u64>,
    ) -> Value {
        let h = &self.h;
        let deadline = match deadline {
            Some(d) => d,
            None => h.now().await + 600,
        };
        let action = Action::new(
            id,
            kind,
            U256::ZERO,
            self.nonce().await,
            U256::from(deadline),
        );
        let domain = subscriptions_domain(
            h.fixture.chain.chain_id(),
            h.fixture.deployment.subscriptions,
        );
        let signature = sign(&h.account(signer).signer(), &action, &domain).unwrap();
        json!({ "network": NETWORK, "deadline": deadline, "signature": signature })
    }

    async fn act(&self, id: B256, action: &str, body: &Value) -> (u16, Value) {
        self.h
            .post(&format!("/subscriptions/{id}/{action}"), body)
            .await
    }

    async fn deduct(&self, id: B256, amount: u64) -> (u16, Value) {
        let r = self
            .h
            .http
            .post(format!("{}/subscriptions/{id}/usage", self.h.url))
            .bearer_auth(&self.key)
            .json(&json!({ "amount": amount.to_string() }))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// `GET /subscriptions` signed by `signer` for [`SUBSCRIBER`], valid until `deadline`.
    async fn list_as(&self, signer: usize, deadline: u64) -> (u16, Value) {
        let h = &self.h;
        let subscriber = h.account(SUBSCRIBER).address;
        let message = ListSubscriptionsQuery::message(
            subscriber,
            h.fixture.chain.chain_id(),
            h.fixture.deployment.subscriptions,
            deadline,
        );
        let key = h.account(signer).signer();
        let signature = key.sign_message_sync(message.as_bytes()).unwrap();
        let q = ListSubscriptionsQuery::new(
            None,
            subscriber,
            deadline,
            &signature.as_bytes().to_vec().into(),
        );
        h.get(&format!(
            "/subscriptions?subscriber={}&deadline={}&signature={}",
            q.subscriber, q.deadline, q.signature
        ))
        .await
    }

    async fn list(&self) -> BTreeMap<B256, String> {
        let deadline = self.h.now().await + 60;
        let (s, v) = self.list_as(SUBSCRIBER, deadline).await;
        assert_eq!(s, 200, "{v}");
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["id"].as_str().unwrap().parse().unwrap(),
                    s["status"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The types of the provider's events, in order.
    async fn event_types(&self) -> Vec<String> {
        let r = self
            .h
            .http
            .get(format!("{}/events?limit=100", self.h.url))
            .bearer_auth(&self.key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let log: Value = r.json().await.unwrap();
        log.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r["type"]
                    .as_str()
                    .or(r["event"]["type"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

async fn pause_resume_cancel_are_relayed_once_each(backend: Backend) {
    let s = setup(backend).await;
    let id = s.subscribe(1_000).await;
    let relayer_nonce = s.nonce().await;

    // Pause: answered after confirmation, gasless for the subscriber.
    let pause = s.signed(id, ActionKind::Pause, SUBSCRIBER, None).await;
    let (st, v) = s.act(id, "pause", &pause).await;
    assert_eq!((st, v["status"].as_str()), (200, Some("PAUSED")), "{v}");
    assert!(v["txHash"].is_string(), "{v}");
    assert_eq!(s.nonce().await, relayer_nonce + U256::from(1));
    // A paused subscription takes no usage, at once.
    let (st, v) = s.deduct(id, 1).await;
    assert_eq!((st, code(&v)), (409, "SubscriptionNotActive"), "{v}");
    // The same signed request again: the subscription as it is, no transaction.
    let (st, v) = s.act(id, "pause", &pause).await;
    assert_eq!((st, v["status"].as_str()), (200, Some("PAUSED")), "{v}");
    assert!(v["txHash"].is_null(), "{v}");
    // A new pause of a paused subscription: its target state holds, nothing is sent.
    let again = s.signed(id, ActionKind::Pause, SUBSCRIBER, None).await;
    let (st, v) = s.act(id, "pause", &again).await;
    assert_eq!((st, v["status"].as_str()), (200, Some("PAUSED")), "{v}");
    assert_eq!(
        s.nonce().await,
        relayer_nonce + U256::from(1),
        "no second transaction"
    );

    // Refusals that change nothing.
    let stranger = s.signed(id, ActionKind::Resume, STRANGER, None).await;
    let (st, v) = s.act(id, "resume", &stranger).await;
    assert_eq!((st, code(&v)), (422, "InvalidSignature"), "{v}");
    let wrong_action = s.signed(id, ActionKind::Pause, SUBSCRIBER, None).await;
    let (st, v) = s.act(id, "resume", &wrong_action).await;
    assert_eq!(
        (st, code(&v)),
        (422, "InvalidSignature"),
        "a pause signature does not resume: {v}"
    );
    let past = s.h.now().await - 1;
    let expired = s
        .signed(id, ActionKind::Resume, SUBSCRIBER, Some(past))
        .await;
    let (st, v) = s.act(id, "resume", &expired).await;
    assert_eq!((st, code(&v)), (422, "SignatureExpired"), "{v}");
    let (st, v) = s.act(B256::repeat_byte(7), "resume", &expired).await;
    assert_eq!(st, 404, "{v}");
    assert_eq!(s.nonce().await, relayer_nonce + U256::from(1));

    // Resume, then two identical pauses at once: one transaction.
    let resume = s.signed(id, ActionKind::Resume, SUBSCRIBER, None).await;
    let (st, v) = s.act(id, "resume", &resume).await;
    assert_eq!((st, v["status"].as_str()), (200, Some("ACTIVE")), "{v}");
    assert_eq!(s.deduct(id, 10).await.0, 200);
    let pause = s.signed(id, ActionKind::Pause, SUBSCRIBER, None).await;
    let (a, b) = tokio::join!(s.act(id, "pause", &pause), s.act(id, "pause", &pause));
    assert_eq!(
        (a.0, a.1["status"].as_str()),
        (200, Some("PAUSED")),
        "{a:?}"
    );
    assert_eq!(
        (b.0, b.1["status"].as_str()),
        (200, Some("PAUSED")),
        "{b:?}"
    );
    assert_eq!(s.nonce().await, relayer_nonce + U256::from(3));

    // Cancel (from paused); then a second cancel, a resume and a pause of it are refused.
    let cancel = s.signed(id, ActionKind::Cancel, SUBSCRIBER, None).await;
    let (st, v) = s.act(id, "cancel", &cancel).await;
    assert_eq!((st, v["status"].as_str()), (200, Some("CANCELLED")), "{v}");
    let (st, v) = s.act(id, "cancel", &cancel).await;
    assert_eq!(
        (st, v["status"].as_str()),
        (200, Some("CANCELLED")),
        "the same cancel: {v}"
    );
    for (action, kind) in [
        ("cancel", ActionKind::Cancel),
        ("resume", ActionKind::Resume),
        ("pause", ActionKind::Pause),
    ] {
        let body = s.signed(id, kind, SUBSCRIBER, None).await;
        let (st, v) = s.act(id, action, &body).await;
        assert_eq!(
            (st, code(&v)),
            (409, "SubscriptionNotActive"),
            "{action}: {v}"
        );
    }
    assert_eq!(s.nonce().await, relayer_nonce + U256::from(4));
    let (st, v) = s.deduct(id, 1).await;
    assert_eq!((st, code(&v)), (409, "SubscriptionNotActive"), "{v}");

    // Subscribing again after cancel works; the listing shows both, with and without the keeper.
    let second = s.subscribe(1_000).await;
    let listed = s.list().await;
    assert_eq!(
        listed,
        BTreeMap::from([(id, "CANCELLED".to_owned()), (second, "ACTIVE".to_owned())])
    );
    s.h.facilitator.run_keeper_once().await;
    assert_eq!(s.list().await, listed, "from the index as from the logs");

    // The chain's events of the relayed actions, once each, for the plan's owner.
    let types = s.event_types().await;
    let count = |t: &str| types.iter().filter(|x| *x == t).count();
    assert_eq!(count("subscription.paused"), 2, "{types:?}");
    assert_eq!(count("subscription.resumed"), 1, "{types:?}");
    assert_eq!(count("subscription.cancelled"), 1, "{types:?}");
    assert_eq!(count("subscription.created"), 2, "{types:?}");
}

async fn listing_is_for_the_subscriber_only(backend: Backend) {
    let s = setup(backend).await;
    let id = s.subscribe(0).await;
    let now = s.h.now().await;
    let (st, v) = s.list_as(SUBSCRIBER, now + 60).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v[0]["id"], json!(id));
    let (st, v) = s.list_as(STRANGER, now + 60).await;
    assert_eq!((st, code(&v)), (401, "Unauthorized"), "{v}");
    let (st, v) = s.list_as(SUBSCRIBER, now - 1).await;
    assert_eq!((st, code(&v)), (422, "SignatureExpired"), "{v}");
    let (st, v) = s
        .list_as(SUBSCRIBER, now + LIST_MAX_VALIDITY_SECS + 120)
        .await;
    assert_eq!((st, code(&v)), (422, "DeadlineTooFar"), "{v}");
    let (st, v) =
        s.h.get("/subscriptions?subscriber=0x12&deadline=1&signature=0x")
            .await;
    assert_eq!((st, code(&v)), (400, "InvalidQuery"), "{v}");
}

crate::on_backends!(
    pause_resume_cancel_are_relayed_once_each,
    listing_is_for_the_subscriber_only,
);

/// Resuming after the paid period bills the next cycle, and the ending cycle's metered usage is
/// charged first (the contract takes no charge for a past cycle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_late_bills_a_cycle_and_charges_the_last_ones_usage() {
    let s = setup(Backend::Devnet).await;
    let id = s.subscribe(5_000).await;
    let pay_to = s.h.account(PAY_TO).address;
    let before = s.h.token_balance(pay_to).await;
    assert_eq!(s.deduct(id, 1_500).await.0, 200);
    let pause = s.signed(id, ActionKind::Pause, SUBSCRIBER, None).await;
    assert_eq!(s.act(id, "pause", &pause).await.0, 200);
    s.h.fixture.chain.advance_time(INTERVAL + 60).await.unwrap();
    let resume = s.signed(id, ActionKind::Resume, SUBSCRIBER, None).await;
    let (st, v) = s.act(id, "resume", &resume).await;
    assert_eq!((st, v["status"].as_str()), (200, Some("ACTIVE")), "{v}");
    assert_eq!(v["cycle"], json!(2), "{v}");
    assert_eq!(
        v["allowance"]["remaining"],
        json!("5000"),
        "a new cycle: {v}"
    );
    assert_eq!(
        s.h.token_balance(pay_to).await - before,
        U256::from(PLAN_AMOUNT + 1_500),
        "the new cycle and the last one's usage"
    );
}

/// Issue 15 point 5: after exhaustion the subscription and its usage show the same remaining
/// allowance (the ledger's), also before the keeper charges anything on-chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remaining_allowance_is_the_same_everywhere() {
    let s = setup(Backend::Devnet).await;
    let id = s.subscribe(300_000).await;
    assert_eq!(s.deduct(id, 200_000).await.0, 200);
    let (st, v) = s.deduct(id, 100_000).await;
    assert_eq!((st, v["remaining"].as_str()), (200, Some("0")), "{v}");
    let (st, v) = s.deduct(id, 1).await;
    assert_eq!((st, code(&v)), (402, "AllowanceExhausted"), "{v}");
    let (st, view) = s.h.get(&format!("/subscriptions/{id}")).await;
    assert_eq!(st, 200, "{view}");
    assert_eq!(
        view["allowance"],
        json!({ "cap": "300000", "remaining": "0" })
    );
    // The same after the keeper charged it on-chain.
    s.h.facilitator.run_keeper_once().await;
    let (_, view) = s.h.get(&format!("/subscriptions/{id}")).await;
    assert_eq!(view["allowance"]["remaining"], json!("0"), "{view}");
}

/// Issue 15 point 5: the quote names the plan's owner as its provider, not the relayer that
/// created it on-chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quote_names_the_plans_owner() {
    let s = setup(Backend::Devnet).await;
    let subscriber = s.h.account(SUBSCRIBER).address;
    let (st, q) =
        s.h.get(&format!(
            "/subscriptions/quote?planId={}&subscriber={subscriber}",
            s.plan_id
        ))
        .await;
    assert_eq!(st, 200, "{q}");
    let provider: Address = q["plan"]["provider"].as_str().unwrap().parse().unwrap();
    assert_eq!(provider, s.h.account(PROVIDER).address, "{q}");
}

/// A late resume the subscriber cannot pay for is refused before anything is sent
/// (`InsufficientFunds`), and the subscription stays paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_resume_without_funds_changes_nothing() {
    let s = setup(Backend::Devnet).await;
    let id = s.subscribe(0).await;
    let pause = s.signed(id, ActionKind::Pause, SUBSCRIBER, None).await;
    assert_eq!(s.act(id, "pause", &pause).await.0, 200);
    let h = &s.h;
    let all = h.token_balance(h.account(SUBSCRIBER).address).await;
    let transfer = Token::transferCall {
        to: h.account(STRANGER).address,
        value: all,
    };
    send(
        h,
        SUBSCRIBER,
        h.fixture.deployment.token,
        transfer.abi_encode(),
    )
    .await;
    h.fixture.chain.advance_time(INTERVAL + 60).await.unwrap();
    let nonce = s.nonce().await;
    let resume = s.signed(id, ActionKind::Resume, SUBSCRIBER, None).await;
    let (st, v) = s.act(id, "resume", &resume).await;
    assert_eq!((st, code(&v)), (402, "InsufficientFunds"), "{v}");
    assert_eq!(s.nonce().await, nonce, "nothing sent");
    let (_, view) = h.get(&format!("/subscriptions/{id}")).await;
    assert_eq!(
        (view["status"].as_str(), &view["cycle"]),
        (Some("PAUSED"), &json!(1))
    );
}
