//! Subscriptions on Circle's USDC (FiatToken v2.2 behind its proxy at USDC's Base Sepolia
//! address), on anvil run as Base Sepolia with 2 s blocks and 2 confirmations: the whole
//! lifecycle with the money it moves held to the webhooks, the analytics and the dashboard; and
//! the renewals that cannot succeed — the subscriber blacklisted by USDC's blacklister, the
//! allowance revoked, the balance gone, the token paused by Circle's pauser, the token's
//! implementation refusing every call — tried a bounded number of times, reported once, shown,
//! and never blocking the others.

use crate::usdc::post;
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::{
    primitives::{Address, B256, U256},
    sol,
    sol_types::{SolCall, SolEvent},
};
use axum::{Router, body::Bytes, http::HeaderMap, routing};
use serde_json::{Value, json};
use tollgate_chain::{
    Confirmation, LogFilter, TxRequest, WaitOptions,
    authorization::{
        Action, ActionKind, Permit, Subscribe, sign, subscriptions_domain, token_domain,
    },
    contracts::{self, Subscriptions, Token},
};
use tollgate_facilitator::{
    KeeperReport,
    keeper::MAX_REFUSED_COLLECTS,
    store::{IndexedState, RenewalOutcome, Store},
    webhooks::{SecretsKey, SecretsKeys},
};
use tollgate_testkit::{
    harness::{PAYEE, PgSchema, RELAYER, TestNet},
    usdc::{self, BASE_SEPOLIA_CHAIN_ID, USDC_BASE_SEPOLIA, Usdc},
};

const NETWORK: &str = "base-sepolia";
const PROVIDER: usize = 5;
/// Where a drained subscriber's balance goes.
const ELSEWHERE: usize = 6;
const AMOUNT: u64 = 1_000_000; // one USDC a cycle
const INTERVAL: u64 = 7 * 24 * 3600;

sol! {
    /// `AdminUpgradeabilityProxy`'s upgrade, sent by the proxy's admin.
    interface FiatTokenProxyAdmin {
        function upgradeTo(address newImplementation);
    }
}

/// A webhook receiver on loopback: answers 200 and records `(webhook-id, body)`.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<(String, Value)>>>);

impl Receiver {
    async fn start() -> (Self, String) {
        let r = Self::default();
        let got = r.clone();
        let app = Router::new().route(
            "/hook",
            routing::post(move |headers: HeaderMap, body: Bytes| {
                let got = got.clone();
                async move {
                    let id = headers["webhook-id"].to_str().unwrap().to_owned();
                    got.0
                        .lock()
                        .unwrap()
                        .push((id, serde_json::from_slice(&body).unwrap()));
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (r, url)
    }

    /// The events received of `kind`, each with its `data`.
    fn of(&self, kind: &str) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, e)| e["type"] == kind)
            .map(|(_, e)| e["data"].clone())
            .collect()
    }

    /// Every delivery's event type, and whether any event was delivered twice.
    fn types(&self) -> (Vec<String>, bool) {
        let got = self.0.lock().unwrap();
        let mut ids: Vec<&String> = got.iter().map(|(id, _)| id).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        (
            got.iter()
                .map(|(_, e)| e["type"].as_str().unwrap().to_owned())
                .collect(),
            ids.len() != n,
        )
    }
}

/// FiatToken on anvil as Base Sepolia (2 s blocks, 2 confirmations), the facilitator over it, a
/// plan published through `POST /plans` by [`PROVIDER`], and a webhook endpoint of its own.
struct World {
    net: TestNet,
    usdc: Usdc,
    key: String,
    plan_id: B256,
    subs: Address,
    hooks: Receiver,
}

impl World {
    async fn new() -> Self {
        Self::on(None).await
    }

    /// On PostgreSQL (a schema of its own); fails the test when `TOLLGATE_TEST_DATABASE_URL` is
    /// not set.
    async fn on_postgres() -> (Self, PgSchema) {
        let url = tollgate_testkit::peer::database_url();
        let (store, schema) = PgSchema::create(&url, "tg_usdc_subs")
            .await
            .expect("postgres");
        (Self::on(Some(store)).await, schema)
    }

    async fn on(store: Option<Arc<dyn Store>>) -> Self {
        let (fixture, usdc) = usdc::fixture().await.expect("USDC on anvil");
        let mut builder = TestNet::builder();
        if let Some(store) = store {
            builder = builder.store(store);
        }
        let net = builder
            .fixture(fixture)
            .networks([NETWORK])
            .confirmations(2)
            .settings(|s| {
                s.webhook_allow_private = true;
                s.webhook_retry_schedule = vec![Duration::ZERO; 3];
                s.webhook_secrets = Some(SecretsKeys::new(SecretsKey::from_bytes([0x5e; 32])));
                s.overage_batch_interval = Duration::ZERO;
            })
            .start()
            .await
            .expect("test network");
        net.mine_every(2).await;
        let key = net.api_key(PROVIDER, "provider").await;
        let (hooks, url) = Receiver::start().await;
        let (s, v) = call(
            &net,
            "POST",
            "/webhooks/endpoints",
            &key,
            json!({ "url": url }),
        )
        .await;
        assert_eq!(s, 201, "{v}");
        let (s, plan) = call(
            &net,
            "POST",
            "/plans",
            &key,
            json!({
                "network": NETWORK, "amount": AMOUNT.to_string(), "interval": INTERVAL,
                "payTo": net.address(PAYEE), "idempotencyKey": "usdc-subscriptions"
            }),
        )
        .await;
        assert_eq!(s, 201, "{plan}");
        let plan_id = plan["planId"].as_str().unwrap().parse().unwrap();
        let subs = net.fixture.deployment.subscriptions;
        Self {
            net,
            usdc,
            key,
            plan_id,
            subs,
            hooks,
        }
    }

    fn chain(&self) -> &dyn tollgate_chain::Chain {
        self.net.fixture.chain.as_ref()
    }

    /// `who` subscribes gaslessly through `POST /subscriptions` with FiatToken's `permit` for
    /// twelve cycles and their overage: the subscription's id.
    async fn subscribe(&self, who: usize, max_overage: u64) -> B256 {
        let net = &self.net;
        let subscriber = net.address(who);
        let (_, quote) = get(
            net,
            &format!(
                "/subscriptions/quote?network={NETWORK}&planId={}&subscriber={subscriber}",
                self.plan_id
            ),
            None,
        )
        .await;
        let nonce: U256 = quote["nonce"].as_str().unwrap().parse().unwrap();
        let permit_nonce: U256 = quote["permitNonce"].as_str().unwrap().parse().unwrap();
        let now = quote["now"].as_u64().unwrap();
        let signer = net.account(who).signer();
        let value = U256::from((AMOUNT + max_overage) * 12);
        let permit = Permit {
            owner: subscriber,
            spender: self.subs,
            value,
            nonce: permit_nonce,
            deadline: U256::from(now + 3600),
        };
        let domain = token_domain(
            usdc::NAME.to_owned(),
            usdc::VERSION.to_owned(),
            BASE_SEPOLIA_CHAIN_ID,
            USDC_BASE_SEPOLIA,
        );
        let permit_sig = sign(&signer, &permit, &domain).unwrap();
        let intent = Subscribe {
            planId: self.plan_id,
            subscriber,
            maxOverage: U256::from(max_overage),
            nonce,
            deadline: U256::from(now + 600),
        };
        let signature = sign(
            &signer,
            &intent,
            &subscriptions_domain(BASE_SEPOLIA_CHAIN_ID, self.subs),
        )
        .unwrap();
        let body = json!({
            "network": NETWORK, "planId": self.plan_id, "subscriber": subscriber,
            "maxOverage": max_overage.to_string(), "deadline": now + 600, "signature": signature,
            "permit": { "value": value.to_string(), "deadline": now + 3600, "signature": permit_sig },
        });
        let (status, sub) = post(net, "/subscriptions", &body).await;
        assert_eq!(status, 200, "{sub}");
        assert_eq!(sub["status"], "ACTIVE", "{sub}");
        sub["id"].as_str().unwrap().parse().unwrap()
    }

    /// A lifecycle action (`pause`, `resume`, `cancel`, or `allowance` with `value` the new
    /// cap) signed by `who` and relayed by the facilitator: the answer.
    async fn relay(&self, who: usize, id: B256, kind: ActionKind, value: u64) -> Value {
        let net = &self.net;
        let deadline = net.now().await + 600;
        let nonce: U256 = contracts::read(
            self.chain(),
            self.subs,
            &Subscriptions::noncesCall {
                subscriber: net.address(who),
            },
        )
        .await
        .unwrap();
        let action = Action::new(id, kind, U256::from(value), nonce, U256::from(deadline));
        let domain = subscriptions_domain(BASE_SEPOLIA_CHAIN_ID, self.subs);
        let signature = sign(&net.account(who).signer(), &action, &domain).unwrap();
        let (path, body) = match kind {
            ActionKind::Pause => ("pause", json!({})),
            ActionKind::Resume => ("resume", json!({})),
            ActionKind::Cancel => ("cancel", json!({})),
            _ => ("allowance", json!({ "maxOverage": value.to_string() })),
        };
        let mut body = body;
        body["network"] = json!(NETWORK);
        body["deadline"] = json!(deadline);
        body["signature"] = json!(signature);
        let (status, v) = post(net, &format!("/subscriptions/{id}/{path}"), &body).await;
        assert_eq!(status, 200, "{path}: {v}");
        v
    }

    /// Sends `data` to `to` from `from` (a key the fixture's chain holds) and waits for it.
    async fn send(&self, from: Address, to: Address, data: Vec<u8>) {
        let sent = self
            .net
            .fixture
            .chain
            .send_and_wait(TxRequest::call(from, to, data), WaitOptions::default())
            .await
            .unwrap();
        let Confirmation::Confirmed(receipt) = sent else {
            panic!("not confirmed: {sent:?}");
        };
        assert!(receipt.success, "{receipt:?}");
    }

    async fn onchain(&self, id: B256) -> Subscriptions::subscriptionsReturn {
        contracts::read(
            self.chain(),
            self.subs,
            &Subscriptions::subscriptionsCall { id },
        )
        .await
        .unwrap()
    }

    /// Moves the chain's clock past `paid_through` and lets a block or so pass.
    async fn pass(&self, paid_through: u64) {
        let now = self.net.now().await;
        self.net
            .fixture
            .chain
            .advance_time(paid_through.saturating_sub(now) + 10)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2_100)).await;
    }

    /// Runs the keeper until what it indexes is confirmed (2 confirmations, 2 s blocks), then
    /// delivers the webhooks: the reports of every run.
    async fn settle_down(&self) -> Vec<KeeperReport> {
        let mut reports = Vec::new();
        for _ in 0..3 {
            reports.push(self.net.facilitator.run_keeper_once().await);
            tokio::time::sleep(Duration::from_millis(2_100)).await;
        }
        reports.push(self.net.facilitator.run_keeper_once().await);
        self.deliver().await;
        reports
    }

    async fn deliver(&self) {
        for _ in 0..50 {
            let r = self.net.facilitator.deliver_webhooks_once().await;
            if r.delivered == 0 && r.retried == 0 && r.dead == 0 {
                return;
            }
        }
    }

    /// The relayer's transaction count (nothing sent means it did not move).
    async fn relayer_nonce(&self) -> u64 {
        self.chain().nonce(self.net.address(RELAYER)).await.unwrap()
    }

    /// `GET /analytics` for the last day.
    async fn analytics(&self) -> Value {
        let (s, v) = get(&self.net, "/analytics?range=24h", Some(&self.key)).await;
        assert_eq!(s, 200, "{v}");
        v
    }

    /// `GET /dashboard` with the provider's key: the page.
    async fn dashboard(&self) -> String {
        let r = self
            .net
            .http
            .get(format!("{}/dashboard", self.net.url))
            .bearer_auth(&self.key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    }

    /// The `RenewalFailed` logs of `id` on the chain, by cycle.
    async fn renewal_failed_logs(&self, id: B256) -> Vec<u32> {
        let filter = LogFilter {
            from_block: 0,
            to_block: None,
            addresses: vec![self.subs],
            topics: [
                Some(vec![Subscriptions::RenewalFailed::SIGNATURE_HASH]),
                Some(vec![id]),
                None,
                None,
            ],
        };
        self.net
            .fixture
            .chain
            .logs(&filter)
            .await
            .unwrap()
            .iter()
            .map(|l| {
                Subscriptions::RenewalFailed::decode_log(&l.log)
                    .unwrap()
                    .cycle
            })
            .collect()
    }
}

async fn call(net: &TestNet, method: &str, path: &str, key: &str, body: Value) -> (u16, Value) {
    let url = format!("{}{path}", net.url);
    let r = match method {
        "POST" => net.http.post(url),
        _ => net.http.get(url),
    };
    let r = r.bearer_auth(key).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get(net: &TestNet, path: &str, key: Option<&str>) -> (u16, Value) {
    let mut r = net.http.get(format!("{}{path}", net.url));
    if let Some(key) = key {
        r = r.bearer_auth(key);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn units(v: &Value) -> U256 {
    v.as_str()
        .unwrap_or_else(|| panic!("an amount: {v}"))
        .parse()
        .unwrap()
}

/// The sum of one field over reports.
fn total(reports: &[KeeperReport], field: impl Fn(&KeeperReport) -> usize) -> usize {
    reports.iter().map(field).sum()
}

/// The whole lifecycle on FiatToken: subscribe with USDC's permit, usage charged on-chain as
/// overage, the cap raised, paused, resumed, renewed by the keeper, cancelled — every action but
/// the renewal relayed at the facilitator's gas — and the money that moved on the token the
/// same as the webhooks, the analytics and the dashboard say, each event delivered once.
#[tokio::test(flavor = "multi_thread")]
async fn the_whole_lifecycle_on_fiat_token_agrees_with_the_chain() {
    const SUBSCRIBER: usize = 2;
    const CAP: u64 = 250_000;
    const USED: u64 = 120_000;
    let w = World::new().await;
    let (who, pay_to) = (w.net.address(SUBSCRIBER), w.net.address(PAYEE));
    let (s0, p0) = (
        w.net.token_balance(who).await,
        w.net.token_balance(pay_to).await,
    );
    let gas0 = w.chain().balance(who).await.unwrap();

    let id = w.subscribe(SUBSCRIBER, CAP).await;

    // Metered usage, deducted off-chain, charged on-chain by the keeper's overage pass.
    for _ in 0..3 {
        let (s, v) = call(
            &w.net,
            "POST",
            &format!("/subscriptions/{id}/usage"),
            &w.key,
            json!({ "amount": (USED / 3).to_string() }),
        )
        .await;
        assert_eq!(s, 200, "{v}");
    }
    let reports = w.settle_down().await;
    assert!(total(&reports, |r| r.overage.charged) >= 1, "{reports:?}");
    assert_eq!(total(&reports, |r| r.errors + r.overage.errors), 0);
    assert_eq!(w.onchain(id).await.overageUsed, U256::from(USED));
    assert_eq!(
        w.net.token_balance(pay_to).await,
        p0 + U256::from(AMOUNT + USED)
    );

    // Raise, pause, resume: relayed, the subscriber signs only.
    w.relay(SUBSCRIBER, id, ActionKind::RaiseAllowance, 2 * CAP)
        .await;
    assert_eq!(w.onchain(id).await.maxOverage, U256::from(2 * CAP));
    let v = w.relay(SUBSCRIBER, id, ActionKind::Pause, 0).await;
    assert_eq!(v["status"], "PAUSED", "{v}");
    let v = w.relay(SUBSCRIBER, id, ActionKind::Resume, 0).await;
    assert_eq!(v["status"], "ACTIVE", "{v}");
    w.settle_down().await;

    // Renewed by the keeper once the paid period ends, once.
    w.pass(w.onchain(id).await.paidThrough).await;
    let reports = w.settle_down().await;
    assert_eq!(total(&reports, |r| r.renewed), 1, "{reports:?}");
    assert_eq!(total(&reports, |r| r.failed + r.errors), 0, "{reports:?}");
    let sub = w.onchain(id).await;
    assert_eq!((sub.state, sub.cycle), (1, 2));

    let v = w.relay(SUBSCRIBER, id, ActionKind::Cancel, 0).await;
    assert_eq!(v["status"], "CANCELLED", "{v}");
    let reports = w.settle_down().await;
    assert_eq!(total(&reports, |r| r.renewed + r.failed + r.errors), 0);

    // The chain: two cycles and the overage left the subscriber and reached the payee, and the
    // subscriber spent no gas at all.
    let moved = U256::from(2 * AMOUNT + USED);
    assert_eq!(w.net.token_balance(who).await, s0 - moved);
    assert_eq!(w.net.token_balance(pay_to).await, p0 + moved);
    assert_eq!(w.chain().balance(who).await.unwrap(), gas0);

    // The webhooks: each event once, the amounts they carry the amounts that moved.
    let (types, repeated) = w.hooks.types();
    assert!(!repeated, "an event delivered twice: {types:?}");
    for t in [
        "plan.created",
        "subscription.created",
        "allowance.raised",
        "subscription.paused",
        "subscription.resumed",
        "subscription.renewed",
        "subscription.cancelled",
    ] {
        assert_eq!(
            types.iter().filter(|x| *x == t).count(),
            1,
            "{t} once in {types:?}"
        );
    }
    assert!(w.hooks.of("subscription.renewal_failed").is_empty());
    let created = &w.hooks.of("subscription.created")[0];
    let charged: U256 = w
        .hooks
        .of("allowance.charged")
        .iter()
        .map(|c| units(&c["amount"]))
        .sum();
    let renewed = &w.hooks.of("subscription.renewed")[0];
    assert_eq!(created["subscriptionId"], json!(id));
    assert_eq!(
        units(&created["amount"]) + charged + units(&renewed["amount"]),
        moved
    );
    assert_eq!(charged, U256::from(USED));
    assert_eq!(renewed["cycle"], 2);

    // The analytics: the same money, by kind, and the lifecycle's counts.
    let a = w.analytics().await;
    let revenue = &a["revenue"]["total"];
    assert_eq!(
        units(&revenue["subscriptionFirstCycle"]),
        U256::from(AMOUNT),
        "{a}"
    );
    assert_eq!(units(&revenue["renewal"]), U256::from(AMOUNT), "{a}");
    assert_eq!(units(&revenue["overage"]), U256::from(USED), "{a}");
    assert_eq!(units(&revenue["gross"]), moved, "{a}");
    let s = &a["subscriptions"];
    assert_eq!(
        (
            &s["new"],
            &s["renewed"],
            &s["renewalFailed"],
            &s["pausedInRange"],
            &s["resumedInRange"],
            &s["cancelledInRange"],
            &s["cancelled"],
        ),
        (
            &json!(1),
            &json!(1),
            &json!(0),
            &json!(1),
            &json!(1),
            &json!(1),
            &json!(1)
        ),
        "{s}"
    );
    assert_eq!(units(&a["metered"]["used"]), U256::from(USED), "{a}");
    assert_eq!(units(&a["metered"]["charged"]), U256::from(USED), "{a}");
    assert_eq!(a["metered"]["raised"], 1, "{a}");

    // The dashboard draws the analytics' figures, and has nothing to flag.
    let page = w.dashboard().await;
    assert!(page.contains(r#"data-metric="renewals.failed" data-value="0""#));
    assert!(page.contains(r#"data-metric="renewals.stuck" data-value="0""#));
    assert!(!page.contains("data-issue="));
}

/// Three renewals that can never succeed — the subscriber blacklisted by USDC's blacklister, the
/// allowance revoked, the balance moved away — due in the same keeper run as a healthy one: the
/// healthy one renews in that run; each failing one is collected once, pauses on-chain at that
/// collect (`RenewalFailed`), is recorded failed, reported once by webhook and listed on the
/// dashboard, and no later run tries it again (while the healthy one goes on renewing).
#[tokio::test(flavor = "multi_thread")]
async fn renewals_that_can_never_succeed_fail_once_and_never_block_the_others() {
    never_succeed(World::new().await).await;
}

/// The same on PostgreSQL (`TOLLGATE_TEST_DATABASE_URL`).
#[tokio::test(flavor = "multi_thread")]
async fn renewals_that_can_never_succeed_fail_once_and_never_block_the_others_on_postgres() {
    let (w, schema) = World::on_postgres().await;
    never_succeed(w).await;
    schema.drop_schema().await.unwrap();
}

async fn never_succeed(w: World) {
    const HEALTHY: usize = 1;
    const BLACKLISTED: usize = 2;
    const REVOKED: usize = 3;
    const DRAINED: usize = 4;
    let mut ids = BTreeMap::new();
    for who in [HEALTHY, BLACKLISTED, REVOKED, DRAINED] {
        ids.insert(who, w.subscribe(who, 0).await);
    }
    let paid_through = w.onchain(ids[&DRAINED]).await.paidThrough;
    w.settle_down().await;

    // USDC's blacklister blacklists one; one revokes the allowance; one moves its balance away.
    w.usdc
        .blacklist(w.chain(), w.net.address(BLACKLISTED))
        .await
        .unwrap();
    assert!(
        w.usdc
            .is_blacklisted(w.chain(), w.net.address(BLACKLISTED))
            .await
            .unwrap()
    );
    w.send(
        w.net.address(REVOKED),
        USDC_BASE_SEPOLIA,
        Token::approveCall {
            spender: w.subs,
            value: U256::ZERO,
        }
        .abi_encode(),
    )
    .await;
    let drained = w.net.address(DRAINED);
    let all = w.net.token_balance(drained).await;
    w.send(
        drained,
        USDC_BASE_SEPOLIA,
        Token::transferCall {
            to: w.net.address(ELSEWHERE),
            value: all,
        }
        .abi_encode(),
    )
    .await;
    assert_eq!(w.net.token_balance(drained).await, U256::ZERO);

    // All four due in one run.
    let pay_to = w.net.address(PAYEE);
    let (p0, h0) = (
        w.net.token_balance(pay_to).await,
        w.net.token_balance(w.net.address(HEALTHY)).await,
    );
    w.pass(paid_through).await;
    let first = w.net.facilitator.run_keeper_once().await;
    assert_eq!(
        (first.renewed, first.failed, first.errors, first.stuck),
        (1, 3, 0, 0),
        "{first:?}"
    );
    assert_eq!(w.net.token_balance(pay_to).await, p0 + U256::from(AMOUNT));
    assert_eq!(
        w.net.token_balance(w.net.address(HEALTHY)).await,
        h0 - U256::from(AMOUNT)
    );
    let store = w.net.facilitator.store();
    for (who, id) in &ids {
        let sub = w.onchain(*id).await;
        let row = store
            .indexed_subscription(NETWORK, *id)
            .await
            .unwrap()
            .unwrap();
        let renewals = store.renewals(NETWORK, *id).await.unwrap();
        let outcomes: Vec<(u32, RenewalOutcome)> =
            renewals.iter().map(|r| (r.cycle, r.outcome)).collect();
        if *who == HEALTHY {
            assert_eq!((sub.state, sub.cycle), (1, 2), "healthy");
            assert_eq!(row.state, IndexedState::Active);
            assert_eq!(outcomes, [(2, RenewalOutcome::Renewed)]);
        } else {
            // Paused on-chain by the first failed collect; the unpaid cycle is recorded failed.
            assert_eq!((sub.state, sub.cycle), (2, 1), "account {who}");
            assert_eq!(row.state, IndexedState::Paused, "account {who}");
            assert_eq!(outcomes, [(2, RenewalOutcome::Failed)], "account {who}");
        }
    }

    // Later runs (the healthy one due again meanwhile) never try the failed ones again.
    let nonce = w.relayer_nonce().await;
    let mut later = w.settle_down().await;
    assert_eq!(w.relayer_nonce().await, nonce, "nothing sent: {later:?}");
    let healthy_through = w.onchain(ids[&HEALTHY]).await.paidThrough;
    w.pass(healthy_through).await;
    later.extend(w.settle_down().await);
    assert_eq!(total(&later, |r| r.renewed), 1, "{later:?}");
    assert_eq!(
        total(&later, |r| r.failed
            + r.errors
            + r.stuck
            + r.pending
            + r.skipped),
        0,
        "{later:?}"
    );
    for who in [BLACKLISTED, REVOKED, DRAINED] {
        assert_eq!(w.renewal_failed_logs(ids[&who]).await, [2], "account {who}");
        assert_eq!(w.onchain(ids[&who]).await.state, 2);
    }
    assert_eq!(w.onchain(ids[&HEALTHY]).await.cycle, 3);

    // Reported once each by webhook, to the plan's owner.
    let (types, repeated) = w.hooks.types();
    assert!(!repeated, "{types:?}");
    let mut failed: Vec<B256> = w
        .hooks
        .of("subscription.renewal_failed")
        .iter()
        .map(|d| {
            assert_eq!(d["cycle"], 2, "{d}");
            d["subscriptionId"].as_str().unwrap().parse().unwrap()
        })
        .collect();
    failed.sort();
    let mut expected = vec![ids[&BLACKLISTED], ids[&REVOKED], ids[&DRAINED]];
    expected.sort();
    assert_eq!(failed, expected);
    assert_eq!(
        types
            .iter()
            .filter(|t| *t == "subscription.renewed")
            .count(),
        2
    );

    // The analytics count them; the dashboard lists each, and only them.
    let a = w.analytics().await;
    assert_eq!(a["subscriptions"]["renewalFailed"], 3, "{a}");
    assert_eq!(a["revenue"]["failed"]["renewals"], 3, "{a}");
    assert_eq!(a["subscriptions"]["renewed"], 2, "{a}");
    assert_eq!(a["subscriptions"]["paused"], 3, "{a}");
    assert_eq!(
        units(&a["revenue"]["total"]["renewal"]),
        U256::from(2 * AMOUNT),
        "{a}"
    );
    let page = w.dashboard().await;
    assert!(page.contains(r#"data-metric="renewals.failed" data-value="3""#));
    assert_eq!(page.matches(r#"data-issue="failed""#).count(), 3);
    for who in [BLACKLISTED, REVOKED, DRAINED] {
        assert!(
            page.contains(&format!(
                r#"data-subscription="{}" data-issue="failed" data-cycle="2""#,
                ids[&who]
            )),
            "account {who}"
        );
    }
    assert!(!page.contains(&format!(r#"data-subscription="{}""#, ids[&HEALTHY])));
}

/// Circle pauses USDC while a subscription is due: the keeper postpones it (nothing sent, the
/// subscription still active and unpaid, no `RenewalFailed`), run after run; once unpaused, the
/// next run renews it, once.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_token_postpones_renewals_and_never_pauses_them() {
    const SUBSCRIBER: usize = 2;
    let w = World::new().await;
    let id = w.subscribe(SUBSCRIBER, 0).await;
    let paid_through = w.onchain(id).await.paidThrough;
    w.settle_down().await;

    w.usdc.pause(w.chain()).await.unwrap();
    assert!(w.usdc.paused(w.chain()).await.unwrap());
    w.pass(paid_through).await;
    let nonce = w.relayer_nonce().await;
    let paused = w.settle_down().await;
    for r in &paused {
        assert_eq!(
            (r.postponed, r.renewed, r.failed, r.errors),
            (1, 0, 0, 0),
            "{paused:?}"
        );
    }
    assert_eq!(w.relayer_nonce().await, nonce, "nothing sent");
    let sub = w.onchain(id).await;
    assert_eq!((sub.state, sub.cycle), (1, 1), "still active, not renewed");
    assert!(w.renewal_failed_logs(id).await.is_empty());

    w.usdc.unpause(w.chain()).await.unwrap();
    let reports = w.settle_down().await;
    assert_eq!(total(&reports, |r| r.renewed), 1, "{reports:?}");
    assert_eq!(
        total(&reports, |r| r.postponed + r.failed + r.errors),
        0,
        "{reports:?}"
    );
    let sub = w.onchain(id).await;
    assert_eq!((sub.state, sub.cycle), (1, 2));
    assert!(w.hooks.of("subscription.renewal_failed").is_empty());
    assert_eq!(w.hooks.of("subscription.renewed").len(), 1);
}

/// A `collect` refused at simulation for a reason the keeper does not expect, with real parts:
/// USDC's proxy admin points the proxy at an implementation without `balanceOf` (Tollgate's
/// router), so `collect`'s balance check reverts. The keeper tries it
/// [`MAX_REFUSED_COLLECTS`] times (one per run, nothing broadcast), then marks it stuck: one
/// `subscription.renewal_stuck` webhook event, listed on the dashboard, and no later run tries
/// it — not even once the token is restored, until the subscription changes on-chain (the
/// subscriber raises its cap): then the next run renews it.
#[tokio::test(flavor = "multi_thread")]
async fn a_collect_refused_every_time_is_marked_stuck_once_and_left_alone() {
    refused_every_time(World::new().await).await;
}

/// The same on PostgreSQL (`TOLLGATE_TEST_DATABASE_URL`).
#[tokio::test(flavor = "multi_thread")]
async fn a_collect_refused_every_time_is_marked_stuck_once_and_left_alone_on_postgres() {
    let (w, schema) = World::on_postgres().await;
    refused_every_time(w).await;
    schema.drop_schema().await.unwrap();
}

async fn refused_every_time(w: World) {
    const SUBSCRIBER: usize = 3;
    let id = w.subscribe(SUBSCRIBER, 0).await;
    let paid_through = w.onchain(id).await.paidThrough;
    w.settle_down().await;

    let admin = w.usdc.roles.proxy_admin.address;
    let upgrade = |to: Address| FiatTokenProxyAdmin::upgradeToCall {
        newImplementation: to,
    };
    w.send(
        admin,
        USDC_BASE_SEPOLIA,
        upgrade(w.net.fixture.deployment.router).abi_encode(),
    )
    .await;
    w.pass(paid_through).await;
    let nonce = w.relayer_nonce().await;
    for run in 1..=MAX_REFUSED_COLLECTS {
        let r = w.net.facilitator.run_keeper_once().await;
        let expected = if run < MAX_REFUSED_COLLECTS {
            (1, 0)
        } else {
            (0, 1)
        };
        assert_eq!((r.errors, r.stuck), expected, "run {run}: {r:?}");
        assert_eq!((r.renewed, r.failed), (0, 0), "run {run}: {r:?}");
    }
    for _ in 0..3 {
        let r = w.net.facilitator.run_keeper_once().await;
        assert_eq!(r, KeeperReport::default(), "left alone: {r:?}");
    }
    assert_eq!(w.relayer_nonce().await, nonce, "nothing broadcast");
    w.deliver().await;
    let stuck = w.hooks.of("subscription.renewal_stuck");
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    assert_eq!(stuck[0]["subscriptionId"], json!(id));
    assert_eq!(stuck[0]["cycle"], 2);
    assert_eq!(stuck[0]["attempts"], MAX_REFUSED_COLLECTS);
    let page = w.dashboard().await;
    assert!(page.contains(r#"data-metric="renewals.stuck" data-value="1""#));
    assert!(page.contains(&format!(
        r#"data-subscription="{id}" data-issue="stuck" data-cycle="2""#
    )));

    // The token restored: still left alone (the subscription did not change).
    w.send(
        admin,
        USDC_BASE_SEPOLIA,
        upgrade(w.usdc.implementation).abi_encode(),
    )
    .await;
    let reports = w.settle_down().await;
    assert_eq!(total(&reports, |r| r.renewed + r.errors + r.stuck), 0);
    assert_eq!(w.onchain(id).await.cycle, 1);

    // The subscriber raises its cap (a change on-chain): tried again, renewed once.
    w.send(
        w.net.address(SUBSCRIBER),
        w.subs,
        Subscriptions::raiseAllowanceCall {
            id,
            newMaxOverage: U256::from(1_000),
        }
        .abi_encode(),
    )
    .await;
    let reports = w.settle_down().await;
    assert_eq!(total(&reports, |r| r.renewed), 1, "{reports:?}");
    assert_eq!(total(&reports, |r| r.errors + r.stuck), 0, "{reports:?}");
    assert_eq!(w.onchain(id).await.cycle, 2);
    assert_eq!(w.hooks.of("subscription.renewal_stuck").len(), 1);
    let page = w.dashboard().await;
    assert!(page.contains(r#"data-metric="renewals.stuck" data-value="0""#));
}
