//! Issue 33, fault 6: relayed lifecycle calls are bounded. A subscriber could make the
//! facilitator send pause/resume (or allowance raise) transactions back to back at the operator's
//! gas, each one a webhook event. The rule (the defaults): at most 4 relayed transactions per subscription per
//! hour and 24 per subscriber per day on a network, counted in the store (so across replicas);
//! a call beyond either is refused with 429 `RateLimited` and `Retry-After` before anything is
//! sent. An idempotent repeat, or an action whose target state already holds, sends nothing and is
//! neither counted nor refused; a subscription's first cancel is never refused.

use std::{path::PathBuf, sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tollgate_chain::{
    authorization::{Action, ActionKind, sign, subscriptions_domain},
    contracts::{self, Subscriptions, Token},
};
use tollgate_facilitator::{
    Facilitator, Settings,
    store::{Relay, RelayBounds, RelayOutcome, RelayScope, Store},
};
use tollgate_testkit::harness;

use crate::{
    metering::send,
    support::{Backend, Harness, NETWORK, PROOF_KEY, RELAYER},
};

const PROVIDER: usize = 5;
const PAY_TO: usize = 6;
const SUBSCRIBER: usize = 3;
const OTHER: usize = 4;
/// A second replica's relayer account.
const RELAYER_B: usize = 2;
const PLAN_AMOUNT: u64 = 1_000;
const INTERVAL: u64 = 30 * 24 * 3600;
/// The defaults: relayed transactions per subscription per hour, per subscriber per day.
const PER_SUBSCRIPTION: usize = 4;
const PER_SUBSCRIBER: usize = 24;
const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// A plan published through the facilitator, subscribers that pay for it, and the calls.
struct World {
    h: Harness,
    key: String,
    plan_id: B256,
}

/// A lifecycle call's answer: status, `Retry-After` (seconds) and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<u64>,
    body: Value,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }
}

impl World {
    async fn new(h: Harness) -> Self {
        let key = h.api_key(PROVIDER, "provider").await;
        let r = h
            .http
            .post(format!("{}/plans", h.url))
            .bearer_auth(&key)
            .json(&json!({
                "network": NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": INTERVAL,
                "payTo": h.account(PAY_TO).address, "idempotencyKey": "relays"
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let plan: Value = r.json().await.unwrap();
        let plan_id = plan["planId"].as_str().unwrap().parse().unwrap();
        let d = h.fixture.deployment;
        for who in [SUBSCRIBER, OTHER] {
            let approve = Token::approveCall {
                spender: d.subscriptions,
                value: U256::MAX,
            };
            send(&h, who, d.token, approve.abi_encode()).await;
        }
        Self { h, key, plan_id }
    }

    /// `who` subscribes directly on-chain (nothing relayed).
    async fn subscribe(&self, who: usize) -> B256 {
        let call = Subscriptions::subscribeCall {
            planId: self.plan_id,
            maxOverage: U256::ZERO,
        };
        let receipt = send(
            &self.h,
            who,
            self.h.fixture.deployment.subscriptions,
            call.abi_encode(),
        )
        .await;
        receipt
            .logs
            .iter()
            .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
            .expect("SubscriptionCreated")
            .id
    }

    async fn nonce(&self, who: usize) -> U256 {
        contracts::read(
            self.h.fixture.chain.as_ref(),
            self.h.fixture.deployment.subscriptions,
            &Subscriptions::noncesCall {
                subscriber: self.h.address(who),
            },
        )
        .await
        .unwrap()
    }

    /// `kind` on `id`, signed by `who` with its current nonce, valid for ten minutes.
    async fn signed(&self, id: B256, kind: ActionKind, who: usize) -> Value {
        let h = &self.h;
        let deadline = h.now().await + 600;
        let action = Action::new(
            id,
            kind,
            U256::ZERO,
            self.nonce(who).await,
            U256::from(deadline),
        );
        let domain = subscriptions_domain(h.chain_id(), h.fixture.deployment.subscriptions);
        let signature = sign(&h.account(who).signer(), &action, &domain).unwrap();
        json!({ "network": NETWORK, "deadline": deadline, "signature": signature })
    }

    /// `POST {base}/subscriptions/{id}/{action}`.
    async fn act(&self, base: &str, id: B256, action: &str, body: &Value) -> Answer {
        let r = self
            .h
            .http
            .post(format!("{base}/subscriptions/{id}/{action}"))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let retry_after = r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse().expect("Retry-After in seconds"));
        let body = r.json().await.unwrap_or(Value::Null);
        Answer {
            status,
            retry_after,
            body,
        }
    }

    async fn status(&self, id: B256) -> String {
        let (st, v) = self.h.get(&format!("/subscriptions/{id}")).await;
        assert_eq!(st, 200, "{v}");
        v["status"].as_str().unwrap().to_owned()
    }

    /// What an abuser sends next: the action that changes the state (pause an active
    /// subscription, resume a paused one), freshly signed by `who`, at `base`.
    async fn flip(&self, base: &str, id: B256, who: usize) -> (&'static str, Value, Answer) {
        let (action, kind) = match self.status(id).await.as_str() {
            "ACTIVE" => ("pause", ActionKind::Pause),
            "PAUSED" => ("resume", ActionKind::Resume),
            other => panic!("{id} is {other}"),
        };
        let body = self.signed(id, kind, who).await;
        let answer = self.act(base, id, action, &body).await;
        (action, body, answer)
    }

    /// `n` flips of `id` at `base`, each of which must be relayed (200 with a transaction).
    async fn flips(
        &self,
        base: &str,
        id: B256,
        who: usize,
        n: usize,
    ) -> Vec<(&'static str, Value)> {
        let mut done = Vec::new();
        for i in 0..n {
            let (action, body, a) = self.flip(base, id, who).await;
            assert_eq!(a.status, 200, "flip {i} of {id}: {a:?}");
            assert!(a.body["txHash"].is_string(), "{a:?}");
            done.push((action, body));
        }
        done
    }

    /// Moves the chain's clock `secs` ahead, and waits until the facilitator reads it (it reuses
    /// the chain's time for a second).
    async fn advance(&self, secs: u64) {
        self.h.fixture.chain.advance_time(secs).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_100)).await;
    }

    /// Transactions sent from dev account `relayer` so far.
    async fn sent_by(&self, relayer: usize) -> u64 {
        self.h
            .fixture
            .chain
            .nonce(self.h.address(relayer))
            .await
            .unwrap()
    }

    /// The types of the provider's events about subscription `id`, in order (after the keeper
    /// read the chain's logs).
    async fn events_of(&self, id: B256) -> Vec<String> {
        self.h.facilitator.run_keeper_once().await;
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
        let id = json!(id);
        log.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                if r["event"].is_object() {
                    &r["event"]
                } else {
                    r
                }
            })
            .filter(|e| e["data"]["subscriptionId"] == id)
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    }
}

fn count(types: &[String], t: &str) -> usize {
    types.iter().filter(|x| *x == t).count()
}

/// A refusal: 429 `RateLimited`, with a `Retry-After` within `1..=max` seconds.
fn assert_refused(a: &Answer, max: u64) -> u64 {
    assert_eq!((a.status, a.code()), (429, "RateLimited"), "{a:?}");
    let wait = a.retry_after.expect("Retry-After");
    assert!((1..=max).contains(&wait), "Retry-After {wait}: {a:?}");
    wait
}

/// Twenty pause/resume calls as fast as they are answered: four are relayed, sixteen refused
/// before anything is sent; as many transactions and webhook events as relayed calls; repeats
/// still answered; another subscriber unaffected; leaving always possible.
async fn a_burst_of_pause_and_resume_is_bounded(backend: Backend) {
    let w = World::new(Harness::new(backend).await).await;
    let h = &w.h;
    let id = w.subscribe(SUBSCRIBER).await;
    let other = w.subscribe(OTHER).await;
    let sent = w.sent_by(RELAYER).await;

    let mut allowed = Vec::new();
    let mut refused = 0;
    for _ in 0..20 {
        let (action, body, a) = w.flip(&h.url, id, SUBSCRIBER).await;
        if a.status == 200 {
            assert!(a.body["txHash"].is_string(), "{a:?}");
            allowed.push((action, body));
        } else {
            assert_refused(&a, HOUR);
            refused += 1;
        }
    }
    assert_eq!(
        (allowed.len(), refused),
        (PER_SUBSCRIPTION, 20 - PER_SUBSCRIPTION)
    );
    assert_eq!(
        w.sent_by(RELAYER).await - sent,
        PER_SUBSCRIPTION as u64,
        "one transaction per relayed call, none for a refusal"
    );
    assert_eq!(w.status(id).await, "ACTIVE", "pause, resume, pause, resume");

    // Idempotent repeats are answered as before, never refused: every allowed call again, and
    // a fresh action whose target state holds.
    for (action, body) in &allowed {
        let a = w.act(&h.url, id, action, body).await;
        assert_eq!(a.status, 200, "{action} again: {a:?}");
        assert!(a.body["txHash"].is_null(), "{a:?}");
    }
    let holds = w.signed(id, ActionKind::Resume, SUBSCRIBER).await;
    let a = w.act(&h.url, id, "resume", &holds).await;
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (200, Some("ACTIVE")),
        "{a:?}"
    );

    // Another subscriber is unaffected.
    let (_, _, a) = w.flip(&h.url, other, OTHER).await;
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (200, Some("PAUSED")),
        "{a:?}"
    );
    // Leaving is never refused.
    let cancel = w.signed(id, ActionKind::Cancel, SUBSCRIBER).await;
    let a = w.act(&h.url, id, "cancel", &cancel).await;
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (200, Some("CANCELLED")),
        "{a:?}"
    );
    assert!(a.body["txHash"].is_string(), "{a:?}");
    assert_eq!(w.sent_by(RELAYER).await - sent, PER_SUBSCRIPTION as u64 + 2);

    // One webhook event per relayed transaction.
    let events = w.events_of(id).await;
    assert_eq!(
        (
            count(&events, "subscription.paused"),
            count(&events, "subscription.resumed"),
            count(&events, "subscription.cancelled"),
        ),
        (2, 2, 1),
        "{events:?}"
    );
}

crate::on_backends!(a_burst_of_pause_and_resume_is_bounded);

/// `Retry-After` is when the hour's oldest relay leaves the window: refused until then,
/// relayed from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_is_relayed_again_once_its_hour_has_passed() {
    let w = World::new(Harness::new(Backend::Devnet).await).await;
    let h = &w.h;
    let id = w.subscribe(SUBSCRIBER).await;
    w.flips(&h.url, id, SUBSCRIBER, PER_SUBSCRIPTION).await;
    let (_, _, a) = w.flip(&h.url, id, SUBSCRIBER).await;
    let wait = assert_refused(&a, HOUR);
    assert!(wait > HOUR - 120, "the first relay was moments ago: {wait}");

    w.advance(wait - 30).await;
    let (_, _, a) = w.flip(&h.url, id, SUBSCRIBER).await;
    let left = assert_refused(&a, 40);
    w.advance(left + 2).await;
    let (_, _, a) = w.flip(&h.url, id, SUBSCRIBER).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.body["txHash"].is_string(), "{a:?}");
}

/// The subscriber's day budget spans its subscriptions: after 24 relays over six of them, a
/// seventh is refused until the day has passed, though its own hour is untouched; its cancel
/// still goes through, and another subscriber is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscribers_day_budget_spans_its_subscriptions() {
    let w = World::new(Harness::new(Backend::Devnet).await).await;
    let h = &w.h;
    let mut ids = Vec::new();
    for _ in 0..=PER_SUBSCRIBER / PER_SUBSCRIPTION {
        ids.push(w.subscribe(SUBSCRIBER).await);
    }
    let sent = w.sent_by(RELAYER).await;
    for &id in &ids[..PER_SUBSCRIBER / PER_SUBSCRIPTION] {
        w.flips(&h.url, id, SUBSCRIBER, PER_SUBSCRIPTION).await;
    }
    let last = *ids.last().unwrap();
    let (_, _, a) = w.flip(&h.url, last, SUBSCRIBER).await;
    let wait = assert_refused(&a, DAY);
    assert!(wait > HOUR, "the day's budget, not the hour's: {wait}");
    assert_eq!(w.sent_by(RELAYER).await - sent, PER_SUBSCRIBER as u64);

    let other = w.subscribe(OTHER).await;
    w.flips(&h.url, other, OTHER, 1).await;
    for id in [last, ids[0]] {
        let cancel = w.signed(id, ActionKind::Cancel, SUBSCRIBER).await;
        let a = w.act(&h.url, id, "cancel", &cancel).await;
        assert_eq!(
            (a.status, a.body["status"].as_str()),
            (200, Some("CANCELLED")),
            "{a:?}"
        );
    }

    // An hour on, each subscription's hour is free again, the subscriber's day is not.
    w.advance(HOUR + 5).await;
    let (_, _, a) = w.flip(&h.url, ids[1], SUBSCRIBER).await;
    let left = assert_refused(&a, DAY - HOUR);
    assert!(left > DAY - 2 * HOUR, "{left}");
}

/// A second replica on the same store, served on its own port, sending from [`RELAYER_B`].
async fn replica_b(w: &World, store: Arc<dyn Store>) -> (Facilitator, String) {
    let h = &w.h;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let settings = Settings {
        public_url: url.clone(),
        ..Settings::default()
    };
    let spec = harness::network_spec(NETWORK, h.chain_id(), &h.fixture.deployment, 1);
    let f = Facilitator::new(
        settings,
        vec![(spec, Arc::clone(&h.fixture.chain))],
        vec![h.address(RELAYER_B)],
        h.account(PROOF_KEY).private_key,
        store,
    )
    .unwrap();
    tokio::spawn(tollgate_facilitator::serve(
        f.clone(),
        listener,
        std::future::pending(),
    ));
    (f, url)
}

/// The burst sent to two replicas by turns is bounded as one: the count is the store's.
async fn the_bound_holds_across_replicas(w: World, store_b: Arc<dyn Store>) {
    let h = &w.h;
    let (_b, url_b) = replica_b(&w, store_b).await;
    let id = w.subscribe(SUBSCRIBER).await;
    let sent = w.sent_by(RELAYER).await + w.sent_by(RELAYER_B).await;
    let mut allowed = 0;
    for i in 0..20 {
        let base = if i % 2 == 0 { &h.url } else { &url_b };
        let (_, _, a) = w.flip(base, id, SUBSCRIBER).await;
        if a.status == 200 {
            allowed += 1;
        } else {
            assert_refused(&a, HOUR);
        }
    }
    assert_eq!(allowed, PER_SUBSCRIPTION);
    let now = w.sent_by(RELAYER).await + w.sent_by(RELAYER_B).await;
    assert_eq!(now - sent, PER_SUBSCRIPTION as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_holds_across_replicas_on_sqlite() {
    let h = Harness::new(Backend::Devnet).await;
    let store = Arc::clone(h.facilitator.store());
    the_bound_holds_across_replicas(World::new(h).await, store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_holds_across_replicas_on_postgres() {
    let url = tollgate_testkit::peer::database_url();
    let (pg, schema) = harness::PgSchema::create(&url, "tg_relays").await.unwrap();
    // The second replica has a pool of its own on the same schema.
    let pg_b = tollgate_facilitator::store::PostgresStore::connect_with_schema(&url, schema.name())
        .await
        .unwrap();
    let h = Harness::with_store(Backend::Devnet, pg).await;
    the_bound_holds_across_replicas(World::new(h).await, Arc::new(pg_b)).await;
    schema.drop_schema().await.unwrap();
}

/// A late resume the chain refuses at simulation (the subscriber cannot pay for the new cycle)
/// sent nothing: it is not counted, however often it is tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_at_simulation_is_not_counted() {
    let w = World::new(Harness::new(Backend::Devnet).await).await;
    let h = &w.h;
    let id = w.subscribe(SUBSCRIBER).await;
    w.flips(&h.url, id, SUBSCRIBER, 1).await;
    let token = h.fixture.deployment.token;
    let all = h.token_balance(h.address(SUBSCRIBER)).await;
    let away = Token::transferCall {
        to: h.address(OTHER),
        value: all,
    };
    send(h, SUBSCRIBER, token, away.abi_encode()).await;
    w.advance(INTERVAL + 60).await;
    for _ in 0..PER_SUBSCRIPTION + 2 {
        let (_, _, a) = w.flip(&h.url, id, SUBSCRIBER).await;
        assert_eq!((a.status, a.code()), (402, "InsufficientFunds"), "{a:?}");
    }
    let back = Token::transferCall {
        to: h.address(SUBSCRIBER),
        value: U256::from(PLAN_AMOUNT),
    };
    send(h, OTHER, token, back.abi_encode()).await;
    w.flips(&h.url, id, SUBSCRIBER, 1).await;
    assert_eq!(w.status(id).await, "ACTIVE");
}

/// Raising the overage cap is relayed at the operator's gas too: the same bound holds (it shares
/// the subscription's count with pause and resume); a raise whose signature is not the
/// subscriber's is refused at simulation and uses up nobody's budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raises_are_bounded_by_the_same_count() {
    let w = World::new(Harness::new(Backend::Devnet).await).await;
    let h = &w.h;
    let id = w.subscribe(SUBSCRIBER).await;
    let raise = |cap: u64, who: usize| {
        let w = &w;
        async move {
            let h = &w.h;
            let deadline = h.now().await + 600;
            let action = Action::new(
                id,
                ActionKind::RaiseAllowance,
                U256::from(cap),
                w.nonce(SUBSCRIBER).await,
                U256::from(deadline),
            );
            let domain = subscriptions_domain(h.chain_id(), h.fixture.deployment.subscriptions);
            let signature = sign(&h.account(who).signer(), &action, &domain).unwrap();
            let body = json!({
                "network": NETWORK, "maxOverage": cap.to_string(),
                "deadline": deadline, "signature": signature
            });
            w.act(&h.url, id, "allowance", &body).await
        }
    };
    let sent = w.sent_by(RELAYER).await;
    // Forged by another key: refused, not counted.
    for cap in 1..=3 {
        let a = raise(cap * 1_000, OTHER).await;
        assert!(a.status >= 400 && a.status != 429, "{a:?}");
    }
    for cap in 1..=PER_SUBSCRIPTION as u64 {
        let a = raise(cap * 1_000, SUBSCRIBER).await;
        assert_eq!(a.status, 200, "raise {cap}: {a:?}");
    }
    assert_refused(&raise(99_000, SUBSCRIBER).await, HOUR);
    // A pause shares the count.
    let (_, _, a) = w.flip(&h.url, id, SUBSCRIBER).await;
    assert_refused(&a, HOUR);
    assert_eq!(w.sent_by(RELAYER).await - sent, PER_SUBSCRIPTION as u64);
    w.advance(HOUR + 1).await;
    assert_eq!(raise(99_000, SUBSCRIBER).await.status, 200);
}

/// The store's counting rules, on `stores` (one store, or pools of its own on one database).
async fn relay_rules(stores: &[Arc<dyn Store>]) {
    let store = &stores[0];
    let bounds = RelayBounds {
        per_subscription: 2,
        subscription_window: Duration::from_secs(100),
        per_subscriber: 3,
        subscriber_window: Duration::from_secs(1000),
    };
    let (alice, bob, carol) = (
        Address::repeat_byte(0xa1),
        Address::repeat_byte(0xb0),
        Address::repeat_byte(0xc0),
    );
    let [a, b, c, d] = [1, 2, 3, 4].map(B256::repeat_byte);
    let relay = |id, subscriber, action: &str, at| Relay {
        network: NETWORK.into(),
        subscription: id,
        subscriber,
        action: action.into(),
        free_once: action == "cancel",
        at,
    };
    let take = |r: Relay| {
        let store = Arc::clone(store);
        async move { store.take_relay(&r, &bounds).await.unwrap() }
    };
    let taken = |o: RelayOutcome| matches!(o, RelayOutcome::Taken { .. });
    let refused = |scope, retry_at| RelayOutcome::Refused { scope, retry_at };
    let t = 1_700_000_000;

    // The subscription's window: two, then refused until the first leaves it.
    assert!(taken(take(relay(a, alice, "pause", t)).await));
    assert!(taken(take(relay(a, alice, "resume", t + 10)).await));
    assert_eq!(
        take(relay(a, alice, "pause", t + 20)).await,
        refused(RelayScope::Subscription, t + 100)
    );
    assert!(taken(take(relay(a, alice, "pause", t + 100)).await));
    // The subscriber's window spans its subscriptions; with both full, the later one says when.
    assert_eq!(
        take(relay(b, alice, "pause", t + 101)).await,
        refused(RelayScope::Subscriber, t + 1000)
    );
    assert_eq!(
        take(relay(a, alice, "pause", t + 101)).await,
        refused(RelayScope::Subscriber, t + 1000)
    );
    // A subscription's first cancel is never refused (and counted); another is.
    assert!(taken(take(relay(b, alice, "cancel", t + 102)).await));
    assert_eq!(
        take(relay(b, alice, "cancel", t + 103)).await,
        refused(RelayScope::Subscriber, t + 1010)
    );
    // Another subscriber is unaffected; a count taken back frees its slot, once.
    assert!(taken(take(relay(c, bob, "pause", t + 103)).await));
    let RelayOutcome::Taken { seq } = take(relay(c, bob, "resume", t + 104)).await else {
        panic!("taken")
    };
    assert!(store.release_relay(seq).await.unwrap());
    assert!(!store.release_relay(seq).await.unwrap());
    assert!(taken(take(relay(c, bob, "resume", t + 105)).await));
    assert_eq!(
        take(relay(c, bob, "pause", t + 106)).await,
        refused(RelayScope::Subscription, t + 203)
    );
    // Counts out of every window are dropped: a cancel long after is free again.
    assert!(taken(take(relay(a, alice, "pause", t + 5000)).await));
    assert!(taken(take(relay(b, alice, "cancel", t + 5001)).await));

    // Sixteen counts for one subscription at once, through every pool: exactly two taken.
    let racers = (0..16).map(|i| {
        let store = Arc::clone(&stores[i % stores.len()]);
        let r = relay(d, carol, "pause", t + 6000);
        tokio::spawn(async move { store.take_relay(&r, &bounds).await.unwrap() })
    });
    let mut won = 0;
    for racer in racers {
        won += usize::from(taken(racer.await.unwrap()));
    }
    assert_eq!(won, 2, "two of sixteen counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_counts_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    relay_rules(&[harness::sqlite_store(&dir, "relays.db").await.unwrap()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_counts_on_postgres() {
    let url = tollgate_testkit::peer::database_url();
    let (pg, schema) = harness::PgSchema::create(&url, "tg_relay_counts")
        .await
        .unwrap();
    let other =
        tollgate_facilitator::store::PostgresStore::connect_with_schema(&url, schema.name())
            .await
            .unwrap();
    relay_rules(&[pg, Arc::new(other)]).await;
    schema.drop_schema().await.unwrap();
}

/// `[subscriptions]`'s two keys: their defaults (the example file's too), a value of each, and a
/// zero refused naming its key; the settings a config describes carry them.
#[test]
fn the_bounds_are_configured_and_validated() {
    use tollgate_facilitator::config::{
        Config, ConfigError, DEFAULT_RELAYS_PER_SUBSCRIBER_PER_DAY,
        DEFAULT_RELAYS_PER_SUBSCRIPTION_PER_HOUR,
    };
    let config = |subscriptions: &str| {
        Config::from_toml_str(&format!(
            r#"
[keys]
relayers = ["env:RELAYER"]
proof = "env:PROOF"
[subscriptions]
{subscriptions}
[[networks]]
name = "tollgate-devnet"
chain_id = 31337
rpc_url = "http://127.0.0.1:8545"
token = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
router = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
"#
        ))
    };
    let defaults = config("").unwrap().subscriptions.relay_bounds();
    assert_eq!(
        (defaults.per_subscription, defaults.per_subscriber),
        (
            DEFAULT_RELAYS_PER_SUBSCRIPTION_PER_HOUR,
            DEFAULT_RELAYS_PER_SUBSCRIBER_PER_DAY
        )
    );
    assert_eq!(
        (PER_SUBSCRIPTION, PER_SUBSCRIBER),
        (
            DEFAULT_RELAYS_PER_SUBSCRIPTION_PER_HOUR as usize,
            DEFAULT_RELAYS_PER_SUBSCRIBER_PER_DAY as usize
        ),
        "the tests above count with the defaults"
    );
    assert_eq!(
        (defaults.subscription_window, defaults.subscriber_window),
        (Duration::from_secs(HOUR), Duration::from_secs(DAY))
    );
    assert_eq!(Settings::default().relay_bounds, defaults);
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/facilitator.toml");
    assert_eq!(
        Config::load(example).unwrap().subscriptions.relay_bounds(),
        defaults
    );

    let set =
        config("relays_per_subscription_per_hour = 2\nrelays_per_subscriber_per_day = 10").unwrap();
    let bounds = tollgate_facilitator::start::settings(&set).relay_bounds;
    assert_eq!((bounds.per_subscription, bounds.per_subscriber), (2, 10));
    for key in [
        "relays_per_subscription_per_hour",
        "relays_per_subscriber_per_day",
    ] {
        let e = config(&format!("{key} = 0")).unwrap_err();
        assert!(
            matches!(&e, ConfigError::InvalidValue { key: k, .. } if *k == format!("subscriptions.{key}")),
            "{e}"
        );
    }
    let e = config("relays_per_subscription_per_hour = -1").unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
}
