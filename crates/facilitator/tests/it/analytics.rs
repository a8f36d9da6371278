//! `GET /analytics` through the real pieces: revenue by kind (one-time payments, subscriptions'
//! first cycles, renewals and overage charges, against the chain's token movements), settled
//! volume from payments made over `/authorize`
//! and x402 `/settle` (per resource, payer, network and time bucket, net of the router's fee, each
//! payment once), subscription counts and recurring revenue after the keeper indexes a plan
//! published through the facilitator, metered usage from `/subscriptions/{id}/usage`, webhook
//! delivery health, and the rollups' saturation at the store.

use crate::metering::send;
use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use axum::{Router, http::StatusCode, routing::post};
use serde_json::{Value, json};
use tollgate_chain::contracts::{Subscriptions, Token};
use tollgate_facilitator::{
    Settings,
    analytics::{self, ReportParams},
    store::{self, NewEvent, NewSettlement, SettlementKind, Store},
};
use tollgate_protocol::{Amount, unix_now};

use crate::support::{Backend, Harness, NETWORK};

/// The payee whose analytics are read, and one that owns nothing.
const PROVIDER: usize = 7;
const OTHER: usize = 6;
const SUBSCRIBER: usize = 3;
/// The facilitator's fee on the router path (the harness signs payments with it).
const FEE: u64 = 1_000;

/// Waits for the wall clock's next second, so that what follows is strictly newer.
async fn next_second() {
    let now = unix_now();
    while unix_now() == now {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn key_for(h: &Harness, who: usize) -> String {
    h.api_key(who, "t").await
}

async fn call(
    h: &Harness,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("{}{path}", h.url);
    let mut r = match method {
        "GET" => h.http.get(url),
        _ => h.http.post(url),
    };
    if let Some(key) = key {
        r = r.bearer_auth(key);
    }
    if let Some(body) = body {
        r = r.json(&body);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `GET /analytics{query}` with `key`, which must succeed.
async fn report(h: &Harness, key: &str, query: &str) -> Value {
    let (s, v) = call(h, "GET", &format!("/analytics{query}"), Some(key), None).await;
    assert_eq!(s, 200, "{query}: {v}");
    v
}

/// A [`VolumeView`](analytics::VolumeView) as JSON.
fn volume(payments: u64, gross: u64, fees: u64) -> Value {
    json!({
        "payments": payments,
        "gross": gross.to_string(),
        "fees": fees.to_string(),
        "net": (gross - fees).to_string(),
    })
}

/// A top-list entry as JSON.
fn ranked(key: &str, payments: u64, gross: u64, fees: u64) -> Value {
    let mut v = volume(payments, gross, fees);
    v["key"] = json!(key);
    v
}

fn units(v: &Value) -> u64 {
    v.as_str()
        .unwrap_or_else(|| panic!("an amount: {v}"))
        .parse()
        .unwrap()
}

/// One-time payments to [`PROVIDER`] over `/authorize`: payer, amount and the resource the
/// client reports (stored without query or fragment).
const AUTHORIZED: [(usize, u64, Option<&str>); 4] = [
    (1, 300_000, Some("http://127.0.0.1/v1/report")),
    (2, 200_000, Some("http://127.0.0.1/v1/quote?units=3#top")),
    (3, 100_000, None),
    (1, 50_000, Some("http://127.0.0.1/v1/report?page=2")),
];
/// And one over x402 `/settle`, by payer 2, which pays no fee.
const X402_AMOUNT: u64 = 400_000;
const X402_RESOURCE: &str = "http://127.0.0.1/v1/quote?units=9";
const REPORT: &str = "http://127.0.0.1/v1/report";
const QUOTE: &str = "http://127.0.0.1/v1/quote";

/// Settled volume, shown exactly, once per payment, to its payee only; and the queries refused.
async fn volume_of_router_and_x402_payments(h: &Harness) {
    let key = key_for(h, PROVIDER).await;
    let pay_to = h.account(PROVIDER).address;
    let started = unix_now();

    let mut first = None;
    for (i, (payer, amount, resource)) in AUTHORIZED.into_iter().enumerate() {
        let sp = h
            .signed_payment(payer, pay_to, amount, B256::repeat_byte(0x60 + i as u8))
            .await;
        let mut body = json!({ "signedPayment": sp });
        if let Some(r) = resource {
            body["resource"] = json!(r);
        }
        let (s, v) = h.post("/authorize", &body).await;
        assert_eq!((s, v["status"].as_str()), (200, Some("confirmed")), "{v}");
        first.get_or_insert((body, v));
    }
    // The newest payment, strictly: it must come first in `recentPayments`.
    next_second().await;
    let mut req = serde_json::to_value(h.requirements(pay_to, X402_AMOUNT)).unwrap();
    req["resource"] = json!(X402_RESOURCE);
    let payload = h
        .x402_payload(2, pay_to, X402_AMOUNT, B256::repeat_byte(0x6f))
        .await;
    let x402 = json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": req });
    let (s, settled) = h.post("/settle", &x402).await;
    assert_eq!((s, &settled["success"]), (200, &json!(true)), "{settled}");

    // The same payments again (one with another resource) are the same payments.
    let (body, reply) = first.unwrap();
    let (s, again) = h.post("/authorize", &body).await;
    assert_eq!((s, &again["proof"]), (200, &reply["proof"]));
    let mut relabelled = body.clone();
    relabelled["resource"] = json!("http://127.0.0.1/v1/elsewhere");
    let (s, again) = h.post("/authorize", &relabelled).await;
    assert_eq!((s, &again["proof"]), (200, &reply["proof"]));
    let (_, again) = h.post("/settle", &x402).await;
    assert_eq!(again["transaction"], settled["transaction"]);
    let finished = unix_now();

    let v = report(h, &key, "").await;
    assert_eq!(v["provider"], json!(pay_to.to_checksum(None)));
    assert_eq!(v["bucket"], "day", "30 days by default, in days");
    let to = v["to"].as_u64().unwrap();
    assert!(
        (finished..=finished + 5).contains(&to),
        "{to} vs {finished}"
    );
    assert_eq!(v["from"].as_u64().unwrap(), to - 30 * 86_400);

    let vol = &v["volume"];
    assert_eq!(vol["total"], volume(5, 1_050_000, 4 * FEE), "{vol}");
    assert_eq!(vol["failed"], 0);
    assert_eq!(
        vol["byResource"],
        json!([
            ranked(QUOTE, 2, 600_000, FEE),
            ranked(REPORT, 2, 350_000, 2 * FEE),
            ranked("", 1, 100_000, FEE),
        ]),
    );
    let payer = |i: usize| h.account(i).address.to_checksum(None);
    assert_eq!(
        vol["byPayer"],
        json!([
            ranked(&payer(2), 2, 600_000, FEE),
            ranked(&payer(1), 2, 350_000, 2 * FEE),
            ranked(&payer(3), 1, 100_000, FEE),
        ]),
    );
    assert_eq!(
        vol["byNetwork"],
        json!([ranked(NETWORK, 5, 1_050_000, 4 * FEE)])
    );

    // The latest payments, newest first, each with its resource label.
    let recent = v["recentPayments"].as_array().unwrap();
    assert_eq!(recent.len(), 5, "{recent:?}");
    assert_eq!(recent[0]["path"], "x402");
    assert_eq!(recent[0]["resource"], QUOTE);
    assert_eq!(recent[0]["fee"], "0");
    assert_eq!(recent[0]["txHash"], settled["transaction"]);
    let at = |p: &Value| p["at"].as_u64().unwrap();
    assert!(
        recent.windows(2).all(|w| at(&w[0]) >= at(&w[1])),
        "{recent:?}"
    );
    assert!(at(&recent[0]) > at(&recent[1]), "strictly newest first");
    let mut seen: Vec<(Address, u64, Option<&str>, &str)> = recent
        .iter()
        .map(|p| {
            assert_eq!(p["status"], "confirmed", "{p}");
            assert_eq!(p["network"], NETWORK);
            assert!((started..=finished).contains(&at(p)), "{p}");
            (
                p["payer"].as_str().unwrap().parse().unwrap(),
                units(&p["amount"]),
                p.get("resource").map(|r| r.as_str().unwrap()),
                p["path"].as_str().unwrap(),
            )
        })
        .collect();
    seen.sort();
    let address = |i: usize| h.account(i).address;
    let mut expected = vec![
        (address(1), 300_000, Some(REPORT), "router"),
        (address(2), 200_000, Some(QUOTE), "router"),
        (address(3), 100_000, None, "router"),
        (address(1), 50_000, Some(REPORT), "router"),
        (address(2), X402_AMOUNT, Some(QUOTE), "x402"),
    ];
    expected.sort();
    assert_eq!(seen, expected);

    // Every bucket holds exactly the payments confirmed in it: the day holding now carries the
    // totals (unless the test ran across midnight) and every other bucket is zero.
    let series = vol["series"].as_array().unwrap();
    assert!(series.len() >= 30, "{}", series.len());
    let day = |t: u64| t - t % 86_400;
    assert_eq!(series.last().unwrap()["start"], day(to - 1));
    for point in series {
        let start = point["start"].as_u64().unwrap();
        let mut want = (0, 0, 0);
        for p in recent.iter().filter(|p| day(at(p)) == start) {
            want = (
                want.0 + 1,
                want.1 + units(&p["amount"]),
                want.2 + units(&p["fee"]),
            );
        }
        let mut got = point.clone();
        got.as_object_mut().unwrap().remove("start");
        assert_eq!(got, volume(want.0, want.1, want.2), "bucket {start}");
    }
    if day(started) == day(finished) {
        let last = series.last().unwrap();
        assert_eq!(last["gross"], "1050000", "the day holding now: {last}");
    }

    // Hourly over the last day: the same totals.
    let v = report(h, &key, "?range=24h").await;
    assert_eq!(v["bucket"], "hour");
    assert_eq!(v["volume"]["total"], volume(5, 1_050_000, 4 * FEE));
    // A range long before: nothing.
    let v = report(h, &key, "?from=1000&to=5000").await;
    assert_eq!(
        (v["from"].as_u64(), v["to"].as_u64()),
        (Some(1000), Some(5000))
    );
    assert_eq!(v["volume"]["total"], volume(0, 0, 0));
    assert_eq!(v["volume"]["series"].as_array().unwrap().len(), 2);
    assert_eq!(v["volume"]["byResource"], json!([]));

    // Another provider's key sees none of it.
    let other = key_for(h, OTHER).await;
    let v = report(h, &other, "").await;
    assert_eq!(
        v["provider"],
        json!(h.account(OTHER).address.to_checksum(None))
    );
    assert_eq!(v["volume"]["total"], volume(0, 0, 0));
    for list in ["byResource", "byPayer", "byNetwork"] {
        assert_eq!(v["volume"][list], json!([]), "{list}");
    }
    assert_eq!(v["recentPayments"], json!([]));

    // No key, a bad key, bad queries.
    let (s, _) = call(h, "GET", "/analytics", None, None).await;
    assert_eq!(s, 401);
    let (s, _) = call(h, "GET", "/analytics", Some("tg_nope"), None).await;
    assert_eq!(s, 401);
    for query in [
        "bucket=minute",
        "from=10&to=10",
        "range=90d&bucket=hour",
        "range=1y",
        "top=0",
        "from=abc",
    ] {
        let (s, v) = call(h, "GET", &format!("/analytics?{query}"), Some(&key), None).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (400, Some("InvalidQuery")),
            "{query}: {v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_counts_each_settled_payment_once() {
    volume_of_router_and_x402_payments(&Harness::new(Backend::Devnet).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_counts_each_settled_payment_once_on_postgres() {
    let (h, schema) = Harness::on_postgres(Backend::Devnet).await;
    volume_of_router_and_x402_payments(&h).await;
    drop(h);
    schema.drop_schema().await;
}

/// A plan's price per cycle and its cycle (a week): 3,000,000 per 30 days.
const PLAN_AMOUNT: u64 = 700_000;
const WEEK: u64 = 7 * 86_400;
const CAP: u64 = 100_000;

/// Subscription states, lifecycle counts, recurring revenue and metered usage, as the keeper
/// indexes the chain and the provider meters usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_and_metered_usage() {
    let h = Harness::with(Backend::Devnet, |s: &mut Settings| {
        s.overage_batch_interval = Duration::ZERO;
    })
    .await;
    let f = &h.facilitator;
    let key = key_for(&h, PROVIDER).await;
    let (s, plan) = call(
        &h,
        "POST",
        "/plans",
        Some(&key),
        Some(json!({
            "network": NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": WEEK,
            "idempotencyKey": "analytics"
        })),
    )
    .await;
    assert_eq!(s, 201, "{plan}");
    let plan_id: B256 = plan["planId"].as_str().unwrap().parse().unwrap();

    let d = h.fixture.deployment;
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
    let id = receipt
        .logs
        .iter()
        .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
        .expect("SubscriptionCreated")
        .id;
    f.run_keeper_once().await;

    let v = report(&h, &key, "").await;
    let subs = &v["subscriptions"];
    assert_eq!(
        (&subs["active"], &subs["paused"], &subs["cancelled"]),
        (&json!(1), &json!(0), &json!(0)),
        "{subs}"
    );
    assert_eq!(subs["new"], 1);
    assert_eq!(subs["recurringRevenue"], "3000000");
    assert_eq!(
        subs["byPlan"],
        json!([{
            "network": NETWORK, "planId": plan_id, "amount": PLAN_AMOUNT.to_string(),
            "intervalSecs": WEEK, "active": 1, "paused": 0, "cancelled": 0,
            "recurringRevenue": "3000000",
        }])
    );
    let summed = |series: &Value, field: &str| -> u64 {
        series
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[field].as_u64().unwrap())
            .sum()
    };
    assert_eq!(summed(&subs["series"], "new"), 1);

    // Usage up to the cap; the deduction over it is refused and counted as exhaustion, not use.
    let usage = format!("/subscriptions/{id}/usage");
    for (amount, status) in [(30_000, 200), (50_000, 200), (30_000, 402), (20_000, 200)] {
        let (s, v) = call(
            &h,
            "POST",
            &usage,
            Some(&key),
            Some(json!({ "amount": amount.to_string() })),
        )
        .await;
        assert_eq!(s, status, "{amount}: {v}");
    }
    let r = f.run_keeper_once().await;
    assert_eq!(r.overage.charged, 1, "{r:?}");
    let v = report(&h, &key, "").await;
    let metered = &v["metered"];
    assert_eq!(metered["deductions"], 3, "{metered}");
    assert_eq!(metered["used"], CAP.to_string());
    assert_eq!(metered["exhausted"], 1);
    assert_eq!(metered["raised"], 0);
    assert_eq!(metered["charged"], CAP.to_string());
    assert_eq!(metered["unpaid"], "0");
    assert_eq!(summed(&metered["series"], "deductions"), 3);

    // Paused, then cancelled, on-chain: the keeper's next pass moves the counts.
    let pause = Subscriptions::pauseCall { id };
    send(&h, SUBSCRIBER, d.subscriptions, pause.abi_encode()).await;
    f.run_keeper_once().await;
    let subs = &report(&h, &key, "").await["subscriptions"];
    assert_eq!(
        (&subs["active"], &subs["paused"], &subs["pausedInRange"]),
        (&json!(0), &json!(1), &json!(1)),
        "{subs}"
    );
    assert_eq!(
        subs["recurringRevenue"], "0",
        "only active subscriptions pay"
    );
    let cancel = Subscriptions::cancelCall { id };
    send(&h, SUBSCRIBER, d.subscriptions, cancel.abi_encode()).await;
    f.run_keeper_once().await;
    let subs = &report(&h, &key, "").await["subscriptions"];
    assert_eq!(
        (
            &subs["paused"],
            &subs["cancelled"],
            &subs["cancelledInRange"]
        ),
        (&json!(0), &json!(1), &json!(1)),
        "{subs}"
    );
    assert_eq!(subs["byPlan"][0]["cancelled"], 1);
    assert_eq!(summed(&subs["series"], "cancelled"), 1);

    // None of it is another provider's.
    let other = key_for(&h, OTHER).await;
    let v = report(&h, &other, "").await;
    assert_eq!(v["subscriptions"]["byPlan"], json!([]));
    assert_eq!(
        (&v["subscriptions"]["new"], &v["metered"]["deductions"]),
        (&json!(0), &json!(0))
    );
}

/// A one-time payment beside the subscription, and the overage metered in its first cycle.
const ONE_TIME: u64 = 250_000;
const OVERAGE: u64 = 60_000;
/// Where the subscriber's tokens go when its renewal is made to fail.
const ELSEWHERE: usize = 5;

/// The amount of a kind in a [`RevenueView`](analytics::RevenueView) as JSON.
fn kind(v: &Value, kind: &str) -> u64 {
    units(&v[kind])
}

/// Issue 15: `/analytics` counts every payment the chain confirmed, by kind (a one-time payment,
/// a subscription's first cycle, a renewal after time travel, an overage charge), each once, to
/// the plan's owner only; the subscription kinds add up to what reached the plan's payee on
/// chain; a failed renewal is shown as a failure, never as revenue.
async fn revenue_by_kind(h: &Harness) {
    let f = &h.facilitator;
    let d = h.fixture.deployment;
    let key = key_for(h, PROVIDER).await;
    let provider = h.account(PROVIDER).address;

    let sp = h
        .signed_payment(1, provider, ONE_TIME, B256::repeat_byte(0x7a))
        .await;
    let (s, v) = h.post("/authorize", &json!({ "signedPayment": sp })).await;
    assert_eq!((s, v["status"].as_str()), (200, Some("confirmed")), "{v}");

    let (s, plan) = call(
        h,
        "POST",
        "/plans",
        Some(&key),
        Some(json!({
            "network": NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": WEEK,
            "idempotencyKey": "revenue"
        })),
    )
    .await;
    assert_eq!(s, 201, "{plan}");
    let plan_id: B256 = plan["planId"].as_str().unwrap().parse().unwrap();
    let payee: Address = plan["payTo"].as_str().unwrap().parse().unwrap();
    let before = h.token_balance(payee).await;

    // First cycle: paid by `subscribe`.
    let approve = Token::approveCall {
        spender: d.subscriptions,
        value: U256::MAX,
    };
    send(h, SUBSCRIBER, d.token, approve.abi_encode()).await;
    let subscribe = Subscriptions::subscribeCall {
        planId: plan_id,
        maxOverage: U256::from(CAP),
    };
    let receipt = send(h, SUBSCRIBER, d.subscriptions, subscribe.abi_encode()).await;
    let id = receipt
        .logs
        .iter()
        .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
        .expect("SubscriptionCreated")
        .id;
    f.run_keeper_once().await;
    let r = &report(h, &key, "").await["revenue"];
    assert_eq!(
        kind(&r["total"], "subscriptionFirstCycle"),
        PLAN_AMOUNT,
        "{r}"
    );

    // Overage: metered, charged on-chain by the keeper, booked when its log is indexed.
    let (s, v) = call(
        h,
        "POST",
        &format!("/subscriptions/{id}/usage"),
        Some(&key),
        Some(json!({ "amount": OVERAGE.to_string() })),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let run = f.run_keeper_once().await;
    assert_eq!(run.overage.charged, 1, "{run:?}");

    // A renewal, a week later.
    h.fixture.chain.advance_time(WEEK).await.unwrap();
    let run = f.run_keeper_once().await;
    assert_eq!((run.renewed, run.errors), (1, 0), "{run:?}");
    f.run_keeper_once().await;
    let after = h.token_balance(payee).await;

    // The next renewal fails (the subscriber's tokens are gone): a failure, not revenue.
    let held = h.token_balance(h.account(SUBSCRIBER).address).await;
    let away = Token::transferCall {
        to: h.account(ELSEWHERE).address,
        value: held,
    };
    send(h, SUBSCRIBER, d.token, away.abi_encode()).await;
    h.fixture.chain.advance_time(WEEK).await.unwrap();
    let run = f.run_keeper_once().await;
    assert_eq!((run.failed, run.errors), (1, 0), "{run:?}");
    f.run_keeper_once().await;
    assert_eq!(
        h.token_balance(payee).await,
        after,
        "a failed renewal pays nothing"
    );

    let v = report(h, &key, "").await;
    let r = &v["revenue"];
    let total = &r["total"];
    assert_eq!(
        total,
        &json!({
            "gross": (ONE_TIME + 2 * PLAN_AMOUNT + OVERAGE).to_string(),
            "oneTime": ONE_TIME.to_string(),
            "subscriptionFirstCycle": PLAN_AMOUNT.to_string(),
            "renewal": PLAN_AMOUNT.to_string(),
            "overage": OVERAGE.to_string(),
        }),
        "{r}"
    );
    // The subscription kinds are exactly what moved to the plan's payee on chain.
    let moved = after - before;
    assert_eq!(
        U256::from(
            kind(total, "subscriptionFirstCycle") + kind(total, "renewal") + kind(total, "overage")
        ),
        moved
    );
    // One-time revenue is the settled volume; the other sections keep their figures.
    assert_eq!(total["oneTime"], v["volume"]["total"]["gross"]);
    assert_eq!(v["metered"]["charged"], OVERAGE.to_string());
    assert_eq!(v["subscriptions"]["renewed"], 1);
    assert_eq!(
        r["failed"],
        json!({ "payments": 0, "renewals": 1, "overage": "0" }),
        "{r}"
    );
    // Every bucket adds up, and the buckets add up to the total.
    let series = r["series"].as_array().unwrap();
    assert_eq!(
        series.len(),
        v["volume"]["series"].as_array().unwrap().len()
    );
    for k in [
        "gross",
        "oneTime",
        "subscriptionFirstCycle",
        "renewal",
        "overage",
    ] {
        assert_eq!(
            series.iter().map(|p| kind(p, k)).sum::<u64>(),
            kind(total, k),
            "{k}"
        );
    }
    for p in series {
        assert_eq!(
            kind(p, "gross"),
            ["oneTime", "subscriptionFirstCycle", "renewal", "overage"]
                .iter()
                .map(|k| kind(p, k))
                .sum::<u64>(),
            "{p}"
        );
    }

    // Each fact once: more keeper runs, and an event recorded again under its id, book nothing.
    f.run_keeper_once().await;
    let (s, events) = call(h, "GET", "/events", Some(&key), None).await;
    assert_eq!(s, 200);
    let renewed = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "subscription.renewed")
        .expect("subscription.renewed")
        .clone();
    let again = NewEvent {
        id: renewed["id"].as_str().unwrap().to_owned(),
        provider,
        r#type: "subscription.renewed".into(),
        data: renewed["data"].to_string(),
        created_at: unix_now(),
    };
    assert!(!f.store().record_event(&again).await.unwrap());
    assert_eq!(&report(h, &key, "").await["revenue"]["total"], total);

    // None of it is another provider's.
    let other = key_for(h, OTHER).await;
    let r = &report(h, &other, "").await["revenue"];
    assert_eq!(r["total"]["gross"], "0", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revenue_counts_first_cycles_renewals_and_overage() {
    let h = Harness::with(Backend::Devnet, |s: &mut Settings| {
        s.overage_batch_interval = Duration::ZERO;
    })
    .await;
    revenue_by_kind(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revenue_counts_first_cycles_renewals_and_overage_on_postgres() {
    let (h, schema) = Harness::on_postgres_with(Backend::Devnet, |s: &mut Settings| {
        s.overage_batch_interval = Duration::ZERO;
    })
    .await;
    revenue_by_kind(&h).await;
    drop(h);
    schema.drop_schema().await;
}

/// A receiver on loopback answering every delivery with `status`; counts the requests.
async fn receiver(status: u16) -> (Arc<AtomicUsize>, String) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    let app = Router::new().route(
        "/hook",
        post(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { StatusCode::from_u16(status).unwrap() }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (hits, url)
}

/// Per endpoint: waiting, retrying, dead-lettered and delivered deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_health_per_endpoint() {
    let h = Harness::with(Backend::Devnet, |s: &mut Settings| {
        s.webhook_allow_private = true;
        s.webhook_retry_schedule = vec![Duration::ZERO; 3];
        s.webhook_secrets = Some(tollgate_facilitator::webhooks::SecretsKeys::new(
            tollgate_facilitator::webhooks::SecretsKey::from_bytes([0x5e; 32]),
        ));
    })
    .await;
    let key = key_for(&h, PROVIDER).await;
    let mut ids = Vec::new();
    let mut hits = Vec::new();
    for status in [200, 500] {
        let (n, url) = receiver(status).await;
        let (s, ep) = call(
            &h,
            "POST",
            "/webhooks/endpoints",
            Some(&key),
            Some(json!({ "url": url, "events": ["payment.settled"] })),
        )
        .await;
        assert_eq!(s, 201, "{ep}");
        ids.push(ep["id"].as_str().unwrap().to_owned());
        hits.push(n);
    }
    let health = |v: &Value, id: &str| -> (u64, u64, u64, u64) {
        let e = v["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {v}"))
            .clone();
        assert_eq!(e["enabled"], true, "{e}");
        let n = |f: &str| e[f].as_u64().unwrap();
        (n("pending"), n("retrying"), n("dead"), n("delivered"))
    };

    let pay_to = h.account(PROVIDER).address;
    let sp = h
        .signed_payment(1, pay_to, 250_000, B256::repeat_byte(0x71))
        .await;
    let (s, v) = h.post("/authorize", &json!({ "signedPayment": sp })).await;
    assert_eq!(s, 200, "{v}");
    let v = report(&h, &key, "").await;
    assert_eq!(v["webhooks"].as_array().unwrap().len(), 2, "{v}");
    for id in &ids {
        assert_eq!(health(&v, id), (1, 0, 0, 0), "waiting: {id}");
    }

    // One pass: delivered to the first; the second failed (twice: nothing is delayed) and waits.
    h.facilitator.deliver_webhooks_once().await;
    let v = report(&h, &key, "").await;
    assert_eq!(health(&v, &ids[0]), (0, 0, 0, 1));
    let (pending, retrying, dead, delivered) = health(&v, &ids[1]);
    assert_eq!((pending, retrying, dead, delivered), (1, 1, 0, 0));

    // Until the schedule runs out: dead-lettered after four attempts.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while hits[1].load(Ordering::SeqCst) < 4 {
        assert!(std::time::Instant::now() < deadline, "not dead-lettered");
        h.facilitator.deliver_webhooks_once().await;
    }
    let v = report(&h, &key, "").await;
    assert_eq!(health(&v, &ids[0]), (0, 0, 0, 1));
    assert_eq!(health(&v, &ids[1]), (0, 0, 1, 0));
    assert_eq!(hits[0].load(Ordering::SeqCst), 1);
}

/// Settlement `n`: `amount` (in the token's units) for `resource`, from payer `0x7171…` to payee
/// `0x7272…`, confirmed at `at`.
async fn confirm(s: &dyn Store, n: u8, amount: U256, resource: &str, at: u64) {
    let new = NewSettlement {
        key: B256::repeat_byte(n),
        kind: SettlementKind::Router,
        request_hash: B256::repeat_byte(n.wrapping_add(0x80)),
        network: "base-sepolia".into(),
        chain_id: 84_532,
        token: Address::repeat_byte(0x70),
        payer: Address::repeat_byte(0x71),
        pay_to: Address::repeat_byte(0x72),
        amount: Amount::from(amount),
        fee: Amount::from_units(FEE),
        memo: B256::repeat_byte(n),
        nonce: B256::repeat_byte(n),
        valid_before: at + 600,
        request: "{}".into(),
        resource: Some(resource.into()),
        claim_hash: None,
        created_at: at,
    };
    s.insert_settlement(&new).await.unwrap();
    let tx = B256::repeat_byte(n.wrapping_add(0x40));
    s.mark_submitted(new.key, tx, at).await.unwrap();
    s.mark_confirmed(&new, tx, 7, Some("proof"), at)
        .await
        .unwrap();
}

/// The report of the payee of [`confirm`] over `[from, to)`, in hours.
async fn store_report(s: &dyn Store, from: u64, to: u64) -> Value {
    let params = ReportParams {
        from: Some(from.to_string()),
        to: Some(to.to_string()),
        bucket: Some("hour".into()),
        ..ReportParams::default()
    };
    let (q, bucket) = analytics::report_query(&params, Address::repeat_byte(0x72), to).unwrap();
    let data = s.analytics(&q).await.unwrap();
    serde_json::to_value(analytics::report(&q, bucket, &data).unwrap()).unwrap()
}

/// Amounts beyond what a rollup holds (2^63 - 1) confirm without error and saturate there.
async fn huge_amounts_saturate_the_rollups(s: &dyn Store) {
    const T: u64 = 1_700_000_000;
    let max = store::ROLLUP_MAX;
    assert_eq!(max, 9_223_372_036_854_775_807);
    confirm(s, 1, U256::MAX, "/big", T).await;
    let v = store_report(s, T - 3_600, T + 3_600).await;
    let total = volume(1, max, FEE);
    assert_eq!(v["volume"]["total"], total);
    assert_eq!(v["volume"]["byPayer"][0]["gross"], max.to_string());
    assert_eq!(v["volume"]["byResource"][0]["key"], "/big");
    assert_eq!(v["recentPayments"][0]["amount"], U256::MAX.to_string());

    // A second one into the same rollup rows stays at the ceiling.
    confirm(s, 2, U256::from(max) - U256::from(1), "/big", T + 1).await;
    let v = store_report(s, T - 3_600, T + 3_600).await;
    assert_eq!(v["volume"]["total"], volume(2, max, 2 * FEE));
    assert_eq!(
        v["volume"]["byPayer"],
        json!([ranked(
            &Address::repeat_byte(0x71).to_checksum(None),
            2,
            max,
            2 * FEE
        )])
    );
}

/// Runs `case` on a SQLite store in a temporary file.
async fn on_sqlite_store<Fut: Future<Output = ()>>(case: impl FnOnce(Arc<dyn Store>) -> Fut) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
    case(store::open(&url).await.unwrap()).await;
}

/// Runs `case` on a PostgreSQL store in a schema of its own, dropped afterwards (also when the
/// case panics), at `TOLLGATE_TEST_DATABASE_URL` (unset, the test fails).
async fn on_postgres_store<Fut>(case: impl FnOnce(Arc<dyn Store>) -> Fut)
where
    Fut: Future<Output = ()> + Send + 'static,
{
    let url = tollgate_testkit::peer::database_url();
    static N: AtomicUsize = AtomicUsize::new(0);
    let schema = format!(
        "tg_analytics_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let pg = store::PostgresStore::connect_with_schema(&url, &schema)
        .await
        .unwrap();
    pg.migrate().await.unwrap();
    let outcome = tokio::spawn(case(Arc::new(pg))).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&pool)
        .await
        .unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test]
async fn huge_amounts_saturate_the_rollups_on_sqlite() {
    on_sqlite_store(|s| async move { huge_amounts_saturate_the_rollups(s.as_ref()).await }).await;
}

#[tokio::test]
async fn huge_amounts_saturate_the_rollups_on_postgres() {
    on_postgres_store(|s| async move { huge_amounts_saturate_the_rollups(s.as_ref()).await }).await;
}

/// Saturated rollup rows of two resources in one hour still add up (in the report's `u128`).
async fn saturated_rows_add_up(s: &dyn Store) {
    const T: u64 = 1_700_000_000;
    let max = store::ROLLUP_MAX;
    confirm(s, 1, U256::MAX, "/a", T).await;
    confirm(s, 2, U256::MAX, "/b", T + 1).await;
    let v = store_report(s, T - 3_600, T + 3_600).await;
    let total = &v["volume"]["total"];
    assert_eq!(total["gross"], (2 * u128::from(max)).to_string(), "{total}");
    assert_eq!(
        v["volume"]["byResource"],
        json!([ranked("/a", 1, max, FEE), ranked("/b", 1, max, FEE)])
    );
}

#[tokio::test]
async fn saturated_rows_add_up_on_sqlite() {
    on_sqlite_store(|s| async move { saturated_rows_add_up(s.as_ref()).await }).await;
}

#[tokio::test]
async fn saturated_rows_add_up_on_postgres() {
    on_postgres_store(|s| async move { saturated_rows_add_up(s.as_ref()).await }).await;
}

/// What happened in the current second is in the default range ("the last 30 days up to now").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_the_current_second_are_counted_by_default() {
    let h = Harness::new(Backend::Devnet).await;
    let key = key_for(&h, PROVIDER).await;
    for i in 0.. {
        let at = unix_now();
        let event = NewEvent {
            id: format!("evt_now_{i}"),
            provider: h.account(PROVIDER).address,
            r#type: "subscription.created".into(),
            data: "{}".into(),
            created_at: at,
        };
        assert!(h.facilitator.store().record_event(&event).await.unwrap());
        let v = report(&h, &key, "").await;
        if unix_now() == at {
            assert_eq!(v["subscriptions"]["new"], i + 1, "{}", v["subscriptions"]);
            return;
        }
        // The second ended before the report was made: try again within one.
        assert!(i < 3, "the clock keeps turning over");
    }
}
