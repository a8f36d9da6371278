//! Deliveries: signed per Standard Webhooks, retried (honouring `Retry-After`) in order,
//! dead-lettered, redelivered by hand, disabled on 410, kept across a restart; chain events
//! reach the plan owner through its filters.

use super::*;

/// A settlement to the provider becomes `payment.settled`, delivered once, signed with the
/// endpoint's secret (and, after a rotation, with both secrets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_is_delivered_signed() {
    let h = Harness::with(Backend::Devnet, dev_mode).await;
    let key = key_for(&h, PROVIDER).await;
    let (rx, url) = Receiver::start(vec![]).await;
    let (_, ep) = add_endpoint(&h, &key, &url).await;
    let secret = WebhookSecret::parse(ep["secret"].as_str().unwrap()).unwrap();

    let payee = h.account(PROVIDER).address;
    let sp = h
        .signed_payment(PAYER, payee, 250_000, B256::repeat_byte(0x51))
        .await;
    let (s, v) = h.post("/authorize", &json!({ "signedPayment": sp })).await;
    assert_eq!(s, 200, "{v}");
    let r = h.facilitator.deliver_webhooks_once().await;
    assert_eq!(r.delivered, 1, "{r:?}");
    let got = rx.got.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let (headers, body, _) = &got[0];
    let header = |n: &str| headers[n].to_str().unwrap().to_owned();
    verify(
        std::slice::from_ref(&secret),
        &header("webhook-id"),
        &header("webhook-timestamp"),
        &header("webhook-signature"),
        body,
        h.now().await,
        300,
    )
    .expect("signed with the endpoint's secret");
    let event: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(event["type"], "payment.settled");
    assert_eq!(event["id"], json!(header("webhook-id")));
    assert_eq!(event["data"]["payTo"], json!(payee));
    assert_eq!(event["data"]["amount"], "250000");
    assert_eq!(event["data"]["txHash"], v["payment"]["txHash"]);
    assert!(event["createdAt"].as_u64().is_some());

    // The same payment again: the same proof, no second event.
    let (s, _) = h.post("/authorize", &json!({ "signedPayment": sp })).await;
    assert_eq!(s, 200);
    assert_eq!(h.facilitator.deliver_webhooks_once().await.delivered, 0);

    // After a rotation, deliveries carry both signatures; either secret verifies.
    let id = ep["id"].as_str().unwrap();
    let (_, rotated) = call(
        &h,
        "POST",
        &format!("/webhooks/endpoints/{id}/rotate"),
        Some(&key),
        None,
    )
    .await;
    let new = WebhookSecret::parse(rotated["secret"].as_str().unwrap()).unwrap();
    record(&h, payee, 1, "rot").await;
    assert_eq!(h.facilitator.deliver_webhooks_once().await.delivered, 1);
    let got = rx.got.lock().unwrap().clone();
    let (headers, body, _) = &got[1];
    let header = |n: &str| headers[n].to_str().unwrap().to_owned();
    assert_eq!(header("webhook-signature").split(' ').count(), 2);
    for s in [&secret, &new] {
        verify(
            std::slice::from_ref(s),
            &header("webhook-id"),
            &header("webhook-timestamp"),
            &header("webhook-signature"),
            body,
            h.now().await,
            300,
        )
        .expect("either secret verifies during the overlap");
    }
    // The events log has both.
    let (s, log) = call(&h, "GET", "/events", Some(&key), None).await;
    assert_eq!(s, 200);
    assert_eq!(log.as_array().unwrap().len(), 2, "{log}");
    assert_eq!(log[0]["type"], "payment.settled");
}

/// An endpoint down for several attempts, then up: every event arrives, in order, each delivered
/// (2xx) exactly once by `webhook-id`; a `Retry-After` is honoured.
async fn down_then_up(h: &Harness) {
    let key = key_for(h, PROVIDER).await;
    let (rx, url) = Receiver::start(vec![(503, None), (500, None), (429, Some("2"))]).await;
    let (s, _) = add_endpoint(h, &key, &url).await;
    assert_eq!(s, 201);
    let ids = record(h, h.account(PROVIDER).address, 5, "down").await;
    let f = &h.facilitator;
    drain(f).await;
    // Three failures of the first event; the third asked for a two-second wait.
    assert_eq!(rx.seen().len(), 3);
    assert!(
        f.store()
            .due_deliveries(u64::MAX / 2, 10)
            .await
            .unwrap()
            .len()
            == 1
    );
    assert_eq!(
        f.deliver_webhooks_once().await.delivered,
        0,
        "Retry-After honoured"
    );
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    drain(f).await;
    let seen = rx.seen();
    let ok: Vec<&str> = seen
        .iter()
        .filter(|s| s.2 == 200)
        .map(|s| s.0.as_str())
        .collect();
    assert_eq!(
        ok,
        ids.iter().map(String::as_str).collect::<Vec<_>>(),
        "in order, once each"
    );
    assert!(
        seen[..3].iter().all(|s| s.0 == ids[0]),
        "retries keep the webhook-id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_down_then_up_gets_every_event_once_in_order() {
    down_then_up(&Harness::with(Backend::Devnet, dev_mode).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_down_then_up_gets_every_event_once_in_order_on_postgres() {
    let (h, schema) = Harness::on_postgres_with(Backend::Devnet, dev_mode).await;
    down_then_up(&h).await;
    drop(h);
    schema.drop_schema().await;
}

/// 410 disables the endpoint; a receiver that never recovers dead-letters the delivery after
/// the last attempt; a manual redelivery brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_disables_failures_dead_letter_and_redelivery_works() {
    let h = Harness::with(Backend::Devnet, dev_mode).await;
    let key = key_for(&h, PROVIDER).await;
    let (_, gone_url) = Receiver::start(vec![(410, None)]).await;
    let (_, gone) = add_endpoint(&h, &key, &gone_url).await;
    let (rx, url) = Receiver::start(vec![(500, None); 4]).await;
    let (_, failing) = add_endpoint(&h, &key, &url).await;
    let ids = record(&h, h.account(PROVIDER).address, 1, "dead").await;
    drain(&h.facilitator).await;

    let gone_id = gone["id"].as_str().unwrap();
    let (_, g) = call(
        &h,
        "GET",
        &format!("/webhooks/endpoints/{gone_id}"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(g["enabled"], false, "{g}");
    assert!(g["disabledReason"].as_str().unwrap().contains("410"));

    // 1 + 3 retries (the schedule has three delays), then dead.
    assert_eq!(rx.seen().len(), 4);
    let failing_id = failing["id"].as_str().unwrap();
    let (_, d) = call(
        &h,
        "GET",
        &format!("/webhooks/endpoints/{failing_id}/deliveries"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(d[0]["state"], "dead", "{d}");
    assert_eq!(d[0]["attempts"], 4);
    assert_eq!(d[0]["lastStatus"], 500);
    let stored = h
        .facilitator
        .store()
        .deliveries(h.account(PROVIDER).address, failing_id, 10)
        .await
        .unwrap();
    assert_eq!(stored[0].state, DeliveryState::Dead);

    let (s, _) = call(
        &h,
        "POST",
        &format!(
            "/webhooks/endpoints/{failing_id}/deliveries/{}/redeliver",
            ids[0]
        ),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(s, 202);
    drain(&h.facilitator).await;
    assert_eq!(rx.seen().last().unwrap().2, 200);
    let (_, d) = call(
        &h,
        "GET",
        &format!("/webhooks/endpoints/{failing_id}/deliveries"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(d[0]["state"], "delivered", "{d}");
    let (s, _) = call(
        &h,
        "POST",
        &format!("/webhooks/endpoints/{failing_id}/deliveries/evt_nope/redeliver"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(s, 404);
}

/// Events recorded before a crash are delivered by the next process on the same store; a burst
/// of 1,000 arrives whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_no_event_and_a_burst_arrives_in_order() {
    let h = Harness::with(Backend::Devnet, dev_mode).await;
    let key = key_for(&h, PROVIDER).await;
    let (rx, url) = Receiver::start(vec![]).await;
    add_endpoint(&h, &key, &url).await;
    let ids = record(&h, h.account(PROVIDER).address, 1_000, "burst").await;

    // "Restart": another facilitator over the same store and chain delivers them.
    let mut settings = Settings::default();
    dev_mode(&mut settings);
    let spec = h.facilitator.networks().remove(0);
    let again = Facilitator::new(
        settings,
        vec![(spec, Arc::clone(&h.fixture.chain))],
        vec![h.account(RELAYER).address],
        h.account(PROOF_KEY).private_key,
        Arc::clone(h.facilitator.store()),
    )
    .unwrap();
    drain(&again).await;
    let seen = rx.seen();
    assert_eq!(seen.len(), 1_000);
    assert!(
        seen.iter()
            .zip(&ids)
            .all(|(s, id)| &s.0 == id && s.2 == 200),
        "in order"
    );
}

/// The chain's events become webhook events for the plan's owner: `plan.created`,
/// `subscription.created`, `.paused`, `.resumed`, `.renewed`, `.cancelled`, `allowance.raised`,
/// `allowance.charged` (from the keeper's log index) and `allowance.exhausted` (a refused
/// deduction); an endpoint's filter takes only what it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_events_reach_the_plan_owner_through_its_filters() {
    use alloy::{primitives::U256, sol_types::SolCall};
    use tollgate_chain::{
        TxRequest, WaitOptions,
        contracts::{Subscriptions, Token},
    };
    const SUBSCRIBER: usize = 3;

    let h = Harness::with(Backend::Devnet, |s| {
        dev_mode(s);
        s.overage_batch_interval = Duration::ZERO;
    })
    .await;
    let key = key_for(&h, PROVIDER).await;
    let (all_rx, all_url) = Receiver::start(vec![]).await;
    add_endpoint(&h, &key, &all_url).await;
    let (paused_rx, paused_url) = Receiver::start(vec![]).await;
    call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": paused_url, "events": ["subscription.paused"] })),
    )
    .await;
    let (s, plan) = call(
        &h,
        "POST",
        "/plans",
        Some(&key),
        Some(json!({
            "network": crate::support::NETWORK, "amount": "1000000", "interval": 3600,
            "idempotencyKey": "events"
        })),
    )
    .await;
    assert_eq!(s, 201, "{plan}");
    let plan_id: B256 = plan["planId"].as_str().unwrap().parse().unwrap();

    let d = h.fixture.deployment;
    let send = |data: Vec<u8>, to| {
        let chain = Arc::clone(&h.fixture.chain);
        let from = h.account(SUBSCRIBER).address;
        async move {
            chain
                .send_and_wait(TxRequest::call(from, to, data), WaitOptions::default())
                .await
                .unwrap();
        }
    };
    send(
        Token::approveCall {
            spender: d.subscriptions,
            value: U256::MAX,
        }
        .abi_encode(),
        d.token,
    )
    .await;
    send(
        Subscriptions::subscribeCall {
            planId: plan_id,
            maxOverage: U256::from(1_000),
        }
        .abi_encode(),
        d.subscriptions,
    )
    .await;
    let f = &h.facilitator;
    f.run_keeper_once().await;
    let id: B256 = f
        .store()
        .due_subscriptions(crate::support::NETWORK, u64::MAX / 2, 10)
        .await
        .unwrap()[0]
        .id;
    send(
        Subscriptions::pauseCall { id }.abi_encode(),
        d.subscriptions,
    )
    .await;
    send(
        Subscriptions::resumeCall { id }.abi_encode(),
        d.subscriptions,
    )
    .await;
    send(
        Subscriptions::raiseAllowanceCall {
            id,
            newMaxOverage: U256::from(2_000),
        }
        .abi_encode(),
        d.subscriptions,
    )
    .await;
    // Usage up to the cap, one refused deduction, a batch charged.
    let usage = format!("/subscriptions/{id}/usage");
    let deduct = |amount: u64| {
        call(
            &h,
            "POST",
            &usage,
            Some(&key),
            Some(json!({ "amount": amount.to_string() })),
        )
    };
    assert_eq!(deduct(2_000).await.0, 200);
    assert_eq!(deduct(1).await.0, 402);
    assert_eq!(deduct(1).await.0, 402, "told once");
    f.run_keeper_once().await;
    // Renewed at the next cycle, then cancelled.
    h.fixture.chain.advance_time(3_600).await.unwrap();
    f.run_keeper_once().await;
    send(
        Subscriptions::cancelCall { id }.abi_encode(),
        d.subscriptions,
    )
    .await;
    f.run_keeper_once().await;
    drain(f).await;

    let types: Vec<String> = all_rx.seen().into_iter().map(|s| s.1).collect();
    for t in [
        "plan.created",
        "subscription.created",
        "subscription.paused",
        "subscription.resumed",
        "allowance.raised",
        "allowance.exhausted",
        "allowance.charged",
        "subscription.renewed",
        "subscription.cancelled",
    ] {
        assert_eq!(
            types.iter().filter(|x| *x == t).count(),
            1,
            "{t} once in {types:?}"
        );
    }
    let paused: Vec<String> = paused_rx.seen().into_iter().map(|s| s.1).collect();
    assert_eq!(paused, ["subscription.paused"]);
    // Nothing for a provider that owns nothing.
    let other = key_for(&h, OTHER).await;
    let (_, log) = call(&h, "GET", "/events", Some(&other), None).await;
    assert_eq!(log, json!([]));
}
