//! Issue 33: a keeper that was down (or whose relayer ran dry) for several intervals bills one
//! cycle when it comes back, starting at the renewal, never the intervals the subscription was
//! refused as overdue; its webhook event and the provider's analytics show that one renewal.

use std::time::Duration;

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use serde_json::{Value, json};
use tollgate_chain::contracts::{self, Subscriptions, Token};
use tollgate_facilitator::{
    Settings,
    store::{IndexedState, RenewalOutcome},
};

use crate::{
    metering::send,
    support::{Backend, Harness, NETWORK},
};

const PROVIDER: usize = 7;
const SUBSCRIBER: usize = 3;
const AMOUNT: u64 = 700_000;
const WEEK: u64 = 7 * 86_400;
const CAP: u64 = 100_000;
/// Usage metered in the renewed cycle (charged before the next renewal).
const USED: u64 = 1_000;

/// `method path` with the provider's API key; returns the status and the JSON body.
async fn call(
    h: &Harness,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("{}{path}", h.url);
    let mut r = match method {
        "GET" => h.http.get(url),
        _ => h.http.post(url),
    }
    .bearer_auth(key);
    if let Some(body) = body {
        r = r.json(&body);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn onchain(h: &Harness, id: B256) -> Subscriptions::subscriptionsReturn {
    contracts::read(
        h.fixture.chain.as_ref(),
        h.fixture.deployment.subscriptions,
        &Subscriptions::subscriptionsCall { id },
    )
    .await
    .unwrap()
}

/// The provider's `subscription.renewed` events.
async fn renewed_events(h: &Harness, key: &str) -> Vec<Value> {
    let (s, events) = call(h, key, "GET", "/events?limit=1000", None).await;
    assert_eq!(s, 200, "{events}");
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "subscription.renewed")
        .cloned()
        .collect()
}

async fn keeper_down_for_three_intervals_bills_one_cycle(backend: Backend) {
    let h = Harness::with(backend, |s: &mut Settings| {
        s.overage_batch_interval = Duration::ZERO;
    })
    .await;
    let f = &h.facilitator;
    let d = h.fixture.deployment;
    let key = h.api_key(PROVIDER, "renewals").await;
    let (s, plan) = call(
        &h,
        &key,
        "POST",
        "/plans",
        Some(json!({
            "network": NETWORK, "amount": AMOUNT.to_string(), "interval": WEEK,
            "idempotencyKey": "late-renewal"
        })),
    )
    .await;
    assert_eq!(s, 201, "{plan}");
    let plan_id: B256 = plan["planId"].as_str().unwrap().parse().unwrap();
    let pay_to: Address = plan["payTo"].as_str().unwrap().parse().unwrap();
    let approve = Token::approveCall {
        spender: d.subscriptions,
        value: U256::MAX,
    };
    send(&h, SUBSCRIBER, d.token, approve.abi_encode()).await;
    let subscribe = Subscriptions::subscribeCall {
        planId: plan_id,
        maxOverage: U256::from(CAP),
    };
    let receipt = send(&h, SUBSCRIBER, d.subscriptions, subscribe.abi_encode()).await;
    let created = receipt
        .logs
        .iter()
        .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
        .expect("SubscriptionCreated");
    let id = created.id;
    let r = f.run_keeper_once().await;
    assert_eq!((r.renewed, r.errors), (0, 0), "{r:?}");
    let held = h.token_balance(h.address(SUBSCRIBER)).await;
    let owed = h.token_balance(pay_to).await;

    // The keeper is down for three intervals and a day after the paid period: the subscription
    // is refused as overdue meanwhile.
    h.fixture
        .chain
        .advance_time(4 * WEEK + 86_400)
        .await
        .unwrap();
    assert!(h.now().await >= created.paidThrough + 3 * WEEK);
    let usage = format!("/subscriptions/{id}/usage");
    let deduct = json!({ "amount": USED.to_string() });
    let (s, v) = call(&h, &key, "POST", &usage, Some(deduct.clone())).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("SubscriptionNotActive")),
        "overdue: {v}"
    );

    // Back up, it runs as often as it likes: one cycle is billed, from the renewal's time.
    let mut renewed = 0;
    for _ in 0..4 {
        let r = f.run_keeper_once().await;
        assert_eq!((r.failed, r.errors, r.pending), (0, 0, 0), "{r:?}");
        renewed += r.renewed;
    }
    assert_eq!(renewed, 1, "one renewal after the outage");
    assert_eq!(h.token_balance(pay_to).await, owed + U256::from(AMOUNT));
    assert_eq!(
        h.token_balance(h.address(SUBSCRIBER)).await,
        held - U256::from(AMOUNT)
    );
    let sub = onchain(&h, id).await;
    assert_eq!((sub.state, sub.cycle), (1, 2));
    let renewals = f.store().renewals(NETWORK, id).await.unwrap();
    assert_eq!(
        renewals
            .iter()
            .map(|r| (r.cycle, r.outcome))
            .collect::<Vec<_>>(),
        [(2, RenewalOutcome::Renewed)]
    );
    let at = h
        .fixture
        .chain
        .receipt(renewals[0].tx_hash)
        .await
        .unwrap()
        .expect("the renewal's receipt")
        .block_timestamp;
    assert_eq!(
        sub.paidThrough,
        at + WEEK,
        "the cycle runs from the renewal"
    );
    let row = f
        .store()
        .indexed_subscription(NETWORK, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.state, row.cycle, row.next_due),
        (IndexedState::Active, 2, sub.paidThrough)
    );
    // Served again.
    let (s, v) = call(&h, &key, "POST", &usage, Some(deduct)).await;
    assert_eq!(s, 200, "{v}");

    // One webhook event, carrying the new paid period; one renewal in the analytics.
    let events = renewed_events(&h, &key).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (
            &events[0]["data"]["cycle"],
            &events[0]["data"]["paidThrough"]
        ),
        (&json!(2), &json!(sub.paidThrough))
    );
    let (s, report) = call(&h, &key, "GET", "/analytics", None).await;
    assert_eq!(s, 200, "{report}");
    assert_eq!(report["subscriptions"]["renewed"], 1, "{report}");
    assert_eq!(
        report["revenue"]["total"]["renewal"],
        AMOUNT.to_string(),
        "{report}"
    );

    // The next cycle is due one interval after the renewal, and is billed once.
    h.fixture.chain.advance_time(WEEK / 2).await.unwrap();
    let r = f.run_keeper_once().await;
    assert_eq!((r.renewed, r.errors), (0, 0), "{r:?}");
    h.fixture.chain.advance_time(WEEK / 2).await.unwrap();
    let r = f.run_keeper_once().await;
    assert_eq!((r.renewed, r.errors), (1, 0), "{r:?}");
    let r = f.run_keeper_once().await;
    assert_eq!((r.renewed, r.errors), (0, 0), "{r:?}");
    assert_eq!(onchain(&h, id).await.cycle, 3);
    assert_eq!(
        h.token_balance(pay_to).await,
        owed + U256::from(2 * AMOUNT + USED)
    );
    assert_eq!(renewed_events(&h, &key).await.len(), 2);
}

crate::on_backends!(keeper_down_for_three_intervals_bills_one_cycle);
