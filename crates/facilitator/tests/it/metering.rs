//! Metering over real HTTP: `deductAllowance` never crosses the cap under concurrency, usage is
//! charged on-chain in batches and at the end of the cycle, a raise lets the next deduction
//! through, the cap resets with the cycle, and a charge sent before a crash is applied once.

use std::time::Duration;

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use serde_json::{Value, json};
use tollgate_chain::{
    TxRequest, WaitOptions,
    authorization::{Action, ActionKind, sign, subscriptions_domain},
    contracts::{self, Subscriptions, Token},
};
use tollgate_facilitator::{
    Settings,
    metering::charge_reference,
    store::{ChargeState, NewCharge},
};

use crate::support::{Backend, Harness, NETWORK, RELAYER};

const PROVIDER: usize = 5;
const PAY_TO: usize = 6;
const SUBSCRIBER: usize = 3;
const OTHER_PROVIDER: usize = 4;
const PLAN_AMOUNT: u64 = 1_000_000;
const INTERVAL: u64 = 30 * 24 * 3600;

/// A provider with an API key, its plan (published through the facilitator) and a subscription.
struct Metered {
    h: Harness,
    key: String,
    plan_id: B256,
    id: B256,
}

async fn api_key(h: &Harness, who: usize, label: &str) -> String {
    h.api_key(who, label).await
}

/// Sends `data` to `to` from account `from` and waits for a successful receipt.
pub(crate) async fn send(
    h: &Harness,
    from: usize,
    to: Address,
    data: Vec<u8>,
) -> tollgate_chain::Receipt {
    let r = h
        .fixture
        .chain
        .send_and_wait(
            TxRequest::call(h.account(from).address, to, data),
            WaitOptions::default(),
        )
        .await
        .unwrap()
        .receipt()
        .cloned()
        .expect("confirmed");
    assert!(r.success);
    r
}

/// Subscribes [`SUBSCRIBER`] directly on-chain with `cap` as its overage cap.
async fn subscribe(h: &Harness, plan_id: B256, cap: u64) -> B256 {
    let d = h.fixture.deployment;
    let call = Subscriptions::subscribeCall {
        planId: plan_id,
        maxOverage: U256::from(cap),
    };
    let receipt = send(h, SUBSCRIBER, d.subscriptions, call.abi_encode()).await;
    receipt
        .logs
        .iter()
        .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
        .expect("SubscriptionCreated")
        .id
}

async fn setup(backend: Backend, cap: u64, tweak: impl FnOnce(&mut Settings)) -> Metered {
    setup_on(Harness::with(backend, tweak).await, cap).await
}

async fn setup_on(h: Harness, cap: u64) -> Metered {
    let key = api_key(&h, PROVIDER, "provider").await;
    let r = h
        .http
        .post(format!("{}/plans", h.url))
        .bearer_auth(&key)
        .json(&json!({
            "network": NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": INTERVAL,
            "payTo": h.account(PAY_TO).address, "idempotencyKey": "metered"
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
    let id = subscribe(&h, plan_id, cap).await;
    Metered {
        h,
        key,
        plan_id,
        id,
    }
}

impl Metered {
    async fn deduct_as(&self, key: Option<&str>, id: B256, body: Value) -> (u16, Value) {
        let mut r = self
            .h
            .http
            .post(format!("{}/subscriptions/{id}/usage", self.h.url))
            .json(&body);
        if let Some(key) = key {
            r = r.bearer_auth(key);
        }
        let r = r.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn deduct(&self, amount: u64) -> (u16, Value) {
        self.deduct_as(
            Some(&self.key),
            self.id,
            json!({ "amount": amount.to_string() }),
        )
        .await
    }

    async fn usage(&self) -> Value {
        let r = self
            .h
            .http
            .get(format!("{}/subscriptions/{}/usage", self.h.url, self.id))
            .bearer_auth(&self.key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    async fn onchain(&self) -> Subscriptions::subscriptionsReturn {
        contracts::read(
            self.h.fixture.chain.as_ref(),
            self.h.fixture.deployment.subscriptions,
            &Subscriptions::subscriptionsCall { id: self.id },
        )
        .await
        .unwrap()
    }

    async fn balance(&self, who: usize) -> U256 {
        self.h.token_balance(self.h.account(who).address).await
    }

    /// The subscriber's signed `raiseAllowanceWithSig`, relayed by the facilitator.
    async fn raise(&self, cap: u64) -> (u16, Value) {
        let h = &self.h;
        let d = h.fixture.deployment;
        let subscriber = h.account(SUBSCRIBER);
        let nonce = contracts::read(
            h.fixture.chain.as_ref(),
            d.subscriptions,
            &Subscriptions::noncesCall {
                subscriber: subscriber.address,
            },
        )
        .await
        .unwrap();
        let deadline = h.now().await + 600;
        let action = Action::new(
            self.id,
            ActionKind::RaiseAllowance,
            U256::from(cap),
            nonce,
            U256::from(deadline),
        );
        let domain = subscriptions_domain(h.fixture.chain.chain_id(), d.subscriptions);
        let signature = sign(&subscriber.signer(), &action, &domain).unwrap();
        h.post(
            &format!("/subscriptions/{}/allowance", self.id),
            &json!({
                "network": NETWORK, "maxOverage": cap.to_string(),
                "deadline": deadline, "signature": signature
            }),
        )
        .await
    }
}

fn amount(v: &Value, field: &str) -> u64 {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {v}"))
        .parse()
        .unwrap()
}

/// 200 concurrent deductions against a cap that holds 199 of them: 199 pass, exactly one is
/// refused with `AllowanceExhausted`, the ledger never crosses the cap; the batch then moves
/// exactly the deducted amount on-chain, once.
async fn concurrent_deductions_never_cross_the_cap(backend: Backend) {
    const UNIT: u64 = 10_000;
    const CAP: u64 = 199 * UNIT + 5_000;
    let m = setup(backend, CAP, |s| s.overage_batch_amount = 1_000_000).await;
    exact_cap_under_concurrency(&m, UNIT, CAP).await;
}

async fn exact_cap_under_concurrency(m: &Metered, unit: u64, cap: u64) {
    let subscriber_before = m.balance(SUBSCRIBER).await;
    let pay_to_before = m.balance(PAY_TO).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (http, url, key, id) = (m.h.http.clone(), m.h.url.clone(), m.key.clone(), m.id);
        tasks.spawn(async move {
            let r = http
                .post(format!("{url}/subscriptions/{id}/usage"))
                .bearer_auth(key)
                .json(&json!({ "amount": unit.to_string() }))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        });
    }
    let (mut ok, mut exhausted) = (0, 0);
    let mut seen_used = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let (status, body) = r.unwrap();
        match status {
            200 => {
                ok += 1;
                let used = amount(&body, "used");
                assert!(used <= cap, "{body}");
                seen_used.push(used);
            }
            402 => {
                assert_eq!(body["error"]["code"], "AllowanceExhausted", "{body}");
                exhausted += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!((ok, exhausted), (199, 1));
    // Every success saw a distinct running total: none was lost or counted twice.
    seen_used.sort_unstable();
    seen_used.dedup();
    assert_eq!(seen_used.len(), 199);
    let usage = m.usage().await;
    assert_eq!(amount(&usage, "used"), 199 * unit);
    assert_eq!(amount(&usage, "remaining"), cap - 199 * unit);
    assert_eq!(amount(&usage, "charged"), 0);

    // The last of the cap, exactly; then nothing more.
    let (s, v) = m.deduct(cap - 199 * unit).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(amount(&v, "remaining"), 0);
    let (s, v) = m.deduct(1).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (402, Some("AllowanceExhausted"))
    );

    // Over the batch amount: the keeper charges it all on-chain, once.
    let r = m.h.facilitator.run_keeper_once().await;
    assert_eq!((r.overage.charged, r.overage.errors), (1, 0), "{r:?}");
    let r = m.h.facilitator.run_keeper_once().await;
    assert_eq!(r.overage.charged, 0, "{r:?}");
    assert_eq!(m.onchain().await.overageUsed, U256::from(cap));
    assert_eq!(
        m.balance(SUBSCRIBER).await,
        subscriber_before - U256::from(cap)
    );
    assert_eq!(m.balance(PAY_TO).await, pay_to_before + U256::from(cap));
    let usage = m.usage().await;
    assert_eq!(amount(&usage, "charged"), cap);
    assert_eq!(amount(&usage, "unsettled"), 0);
}

/// The spec's metered flow over two cycles: exhausted → 402; a relayed raise, then a raise made
/// directly on-chain, each let the next deduction through; at the cycle's end deductions stop,
/// the keeper charges the rest of the cycle and renews; the cap resets.
async fn raise_cycle_end_and_reset(backend: Backend) {
    let m = setup(backend, 100_000, |_| {}).await;
    let subscriber_before = m.balance(SUBSCRIBER).await;
    let (s, v) = m.deduct(100_000).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["cycle"], 1);
    let (s, v) = m.deduct(1).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (402, Some("AllowanceExhausted"))
    );

    // Raised through the facilitator (the subscriber's signature): the next deduction passes.
    let (s, v) = m.raise(300_000).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["allowance"]["cap"], "300000");
    let (s, again) = m.raise(300_000).await;
    assert_eq!(
        (s, &again["allowance"]),
        (200, &v["allowance"]),
        "idempotent"
    );
    let (s, v) = m.deduct(50_000).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(amount(&v, "remaining"), 150_000);

    // Raised directly on-chain: the facilitator reads the chain again before refusing.
    let call = Subscriptions::raiseAllowanceCall {
        id: m.id,
        newMaxOverage: U256::from(400_000),
    };
    send(
        &m.h,
        SUBSCRIBER,
        m.h.fixture.deployment.subscriptions,
        call.abi_encode(),
    )
    .await;
    let (s, v) = m.deduct(250_000).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!((amount(&v, "cap"), amount(&v, "remaining")), (400_000, 0));

    // The cycle ends: no more usage lands in it.
    m.h.fixture.chain.advance_time(INTERVAL).await.unwrap();
    // The facilitator reads the chain's clock at most once a second.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (s, v) = m.deduct(1).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("SubscriptionNotActive")),
        "{v}"
    );

    // The keeper charges the cycle's usage, then renews.
    let r = m.h.facilitator.run_keeper_once().await;
    assert_eq!((r.renewed, r.overage.charged), (1, 1), "{r:?}");
    let onchain = m.onchain().await;
    assert_eq!((onchain.cycle, onchain.overageUsed), (2, U256::ZERO));
    assert_eq!(
        m.balance(SUBSCRIBER).await,
        subscriber_before - U256::from(400_000 + PLAN_AMOUNT)
    );
    let charges =
        m.h.facilitator
            .store()
            .overage_charges(NETWORK, m.id, 1)
            .await
            .unwrap();
    assert_eq!(charges.len(), 1);
    assert_eq!(
        (charges[0].state, charges[0].amount),
        (ChargeState::Confirmed, 400_000)
    );
    let charged =
        m.h.fixture
            .chain
            .receipt(charges[0].tx_hash.unwrap())
            .await
            .unwrap()
            .unwrap();
    let ev = charged
        .logs
        .iter()
        .find_map(|l| Subscriptions::OverageCharged::decode_log(l).ok())
        .unwrap();
    assert_eq!((ev.cycle, ev.amount), (1, U256::from(400_000)));

    // Cycle 2: the cap is whole again.
    let (s, v) = m.deduct(100_000).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["cycle"], 2);
    assert_eq!(
        (amount(&v, "used"), amount(&v, "remaining")),
        (100_000, 300_000)
    );
}

/// A charge written and broadcast before a crash (the facilitator died before recording its
/// outcome) is sent again with the same reference after the restart: the contract applies it
/// once, and the ledger records it as charged.
async fn a_charge_broadcast_before_a_crash_is_applied_once(backend: Backend) {
    let m = setup(backend, 1_000_000, |_| {}).await;
    let store = m.h.facilitator.store();
    let (s, v) = m.deduct(500_000).await;
    assert_eq!(s, 200, "{v}");
    let before = m.balance(SUBSCRIBER).await;
    let reference = charge_reference(m.id, 1, 0);
    let relayer = m.h.account(RELAYER).address;
    let started = store
        .begin_charge(&NewCharge {
            network: NETWORK.into(),
            id: m.id,
            cycle: 1,
            index: 0,
            reference,
            amount: 500_000,
            relayer,
            at: 1,
        })
        .await
        .unwrap();
    assert!(started);
    let call = Subscriptions::chargeOverageCall {
        id: m.id,
        cycle: 1,
        amount: U256::from(500_000),
        r#ref: reference,
    };
    send(
        &m.h,
        RELAYER,
        m.h.fixture.deployment.subscriptions,
        call.abi_encode(),
    )
    .await;

    let r = m.h.facilitator.run_keeper_once().await;
    assert_eq!((r.overage.charged, r.overage.unpaid), (1, 0), "{r:?}");
    assert_eq!(m.balance(SUBSCRIBER).await, before - U256::from(500_000));
    let usage = m.usage().await;
    assert_eq!(amount(&usage, "charged"), 500_000);
    assert_eq!(amount(&usage, "unsettled"), 0);
    let r = m.h.facilitator.run_keeper_once().await;
    assert_eq!(r.overage.charged, 0, "{r:?}");
    assert_eq!(m.balance(SUBSCRIBER).await, before - U256::from(500_000));
}

crate::on_backends!(
    concurrent_deductions_never_cross_the_cap,
    raise_cycle_end_and_reset,
    a_charge_broadcast_before_a_crash_is_applied_once,
);

/// Idempotency keys, authentication, ownership, bad input, and the states that refuse usage;
/// usage of a subscription cancelled mid-cycle is still charged (within its cap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_access_states_and_usage_after_cancel() {
    let m = setup(Backend::Devnet, 1_000_000, |s| {
        s.overage_batch_interval = Duration::ZERO;
    })
    .await;
    let body =
        |amount: u64, key: &str| json!({ "amount": amount.to_string(), "idempotencyKey": key });
    let (s, first) = m.deduct_as(Some(&m.key), m.id, body(1_000, "k1")).await;
    assert_eq!(s, 200, "{first}");
    let (s, again) = m.deduct_as(Some(&m.key), m.id, body(1_000, "k1")).await;
    assert_eq!((s, &again), (200, &first), "a replay deducts nothing");
    let (s, v) = m.deduct_as(Some(&m.key), m.id, body(2_000, "k1")).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("IdempotencyConflict"))
    );
    assert_eq!(amount(&m.usage().await, "used"), 1_000);

    let plain = json!({ "amount": "1" });
    let (s, _) = m.deduct_as(None, m.id, plain.clone()).await;
    assert_eq!(s, 401);
    let (s, _) = m.deduct_as(Some("tg_nope"), m.id, plain.clone()).await;
    assert_eq!(s, 401);
    let other = api_key(&m.h, OTHER_PROVIDER, "other").await;
    let (s, v) = m.deduct_as(Some(&other), m.id, plain.clone()).await;
    assert_eq!((s, v["error"]["code"].as_str()), (403, Some("Forbidden")));
    let (s, _) = m
        .deduct_as(Some(&m.key), B256::repeat_byte(0x77), plain.clone())
        .await;
    assert_eq!(s, 404);
    for bad in [
        json!({ "amount": "0" }),
        json!({ "amount": "9223372036854775808" }),
    ] {
        let (s, v) = m.deduct_as(Some(&m.key), m.id, bad).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (422, Some("InvalidAmount"))
        );
    }
    let (s, _) = m
        .deduct_as(Some(&m.key), m.id, json!({ "amount": "1", "extra": 1 }))
        .await;
    assert_eq!(s, 400);
    let r =
        m.h.http
            .post(format!("{}/subscriptions/0x1234/usage", m.h.url))
            .bearer_auth(&m.key)
            .json(&plain)
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        amount(&m.usage().await, "used"),
        1_000,
        "nothing else landed"
    );

    // A second subscription, paused before any use: refused.
    let d = m.h.fixture.deployment;
    let paused = subscribe(&m.h, m.plan_id, 1_000_000).await;
    send(
        &m.h,
        SUBSCRIBER,
        d.subscriptions,
        Subscriptions::pauseCall { id: paused }.abi_encode(),
    )
    .await;
    let (s, v) = m.deduct_as(Some(&m.key), paused, plain.clone()).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("SubscriptionNotActive"))
    );

    // The first is cancelled with usage outstanding: the usage is still charged, once.
    let before = m.balance(SUBSCRIBER).await;
    send(
        &m.h,
        SUBSCRIBER,
        d.subscriptions,
        Subscriptions::cancelCall { id: m.id }.abi_encode(),
    )
    .await;
    tokio::time::sleep(tollgate_facilitator::metering::HEAD_TTL).await;
    let (s, v) = m.deduct_as(Some(&m.key), m.id, plain).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("SubscriptionNotActive"))
    );
    let r = m.h.facilitator.run_keeper_once().await;
    assert_eq!(r.overage.charged, 1, "{r:?}");
    assert_eq!(m.balance(SUBSCRIBER).await, before - U256::from(1_000));
    assert_eq!(amount(&m.usage().await, "charged"), 1_000);
}

/// The same exact cap with the ledger on PostgreSQL (several replicas share it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deductions_never_cross_the_cap_on_postgres() {
    let (h, schema) = Harness::on_postgres(Backend::Devnet).await;
    let m = setup_on(h, 199 * 10_000 + 5_000).await;
    exact_cap_under_concurrency(&m, 10_000, 199 * 10_000 + 5_000).await;
    drop(m);
    schema.drop_schema().await;
}
