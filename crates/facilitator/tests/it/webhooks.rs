//! Webhooks through the real pieces: endpoints over the API (with the SSRF guard), events written
//! with the changes that cause them (a settlement, the chain's subscription events, a refused
//! deduction), deliveries signed per Standard Webhooks to a receiver on loopback, retried on
//! failure (honouring `Retry-After`), in order, dead-lettered, redelivered by hand, disabled on
//! 410, and kept across a restart.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::primitives::{Address, B256};
use axum::{
    Router,
    body::Bytes,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};
use serde_json::{Value, json};
use tollgate_facilitator::{
    Facilitator, Settings,
    store::{self, DeliveryState, Endpoint, NewEvent},
    webhooks::{SealError, SecretsError, SecretsKey, SecretsKeys},
};
use tollgate_protocol::webhook::{WebhookSecret, verify};

use crate::support::{Backend, Harness, PROOF_KEY, RELAYER};

const PROVIDER: usize = 5;
const OTHER: usize = 4;
const PAYER: usize = 1;

/// The receiver's next answers: a status and an optional `Retry-After`.
type Script = Arc<Mutex<Vec<(u16, Option<&'static str>)>>>;

/// A receiver on loopback: answers each request with the next scripted status (then 200), and
/// records what it got.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<(HeaderMap, Bytes, u16)>>>,
    script: Script,
}

impl Receiver {
    async fn start(script: Vec<(u16, Option<&'static str>)>) -> (Self, String) {
        let r = Self {
            got: Arc::default(),
            script: Arc::new(Mutex::new(script.into_iter().rev().collect())),
        };
        let state = r.clone();
        let app = Router::new().route(
            "/hook",
            post(move |headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                async move {
                    let (status, retry_after) =
                        state.script.lock().unwrap().pop().unwrap_or((200, None));
                    state.got.lock().unwrap().push((headers, body, status));
                    let mut res = StatusCode::from_u16(status).unwrap().into_response();
                    if let Some(v) = retry_after {
                        res.headers_mut().insert("retry-after", v.parse().unwrap());
                    }
                    res
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (r, url)
    }

    /// `(webhook-id, type, status)` of every request, in arrival order.
    fn seen(&self) -> Vec<(String, String, u16)> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(h, b, s)| {
                let v: Value = serde_json::from_slice(b).unwrap();
                (
                    h["webhook-id"].to_str().unwrap().to_owned(),
                    v["type"].as_str().unwrap().to_owned(),
                    *s,
                )
            })
            .collect()
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
        "PATCH" => h.http.patch(url),
        "DELETE" => h.http.delete(url),
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

/// The webhook-secrets key of these tests (the same across a "restart").
fn secrets_key() -> SecretsKey {
    SecretsKey::from_bytes([0x5e; 32])
}

fn with_key(s: &mut Settings) {
    s.webhook_secrets = Some(SecretsKeys::new(secrets_key()));
}

fn dev_mode(s: &mut Settings) {
    s.webhook_allow_private = true;
    s.webhook_retry_schedule = vec![Duration::ZERO; 3];
    with_key(s);
}

/// Records `n` synthetic events for `provider` (as the store's own changes do).
async fn record(h: &Harness, provider: Address, n: usize, tag: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("evt_{tag}_{i}");
        let e = NewEvent {
            id: id.clone(),
            provider,
            r#type: "plan.created".into(),
            data: json!({ "i": i }).to_string(),
            created_at: 1,
        };
        assert!(h.facilitator.store().record_event(&e).await.unwrap());
        assert!(
            !h.facilitator.store().record_event(&e).await.unwrap(),
            "one event per id"
        );
        ids.push(id);
    }
    ids
}

/// Delivers until nothing is due (bounded).
async fn drain(f: &Facilitator) {
    for _ in 0..50 {
        let r = f.deliver_webhooks_once().await;
        if r.delivered == 0 && r.retried == 0 && r.dead == 0 {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_managed_and_private_targets_refused_outside_dev_mode() {
    let h = Harness::new(Backend::Devnet).await;
    let key = key_for(&h, PROVIDER).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://10.1.2.3/hook",
        "http://[::1]/hook",
        "http://169.254.169.254/latest",
        "http://localhost/hook",
    ] {
        let (s, v) = call(
            &h,
            "POST",
            "/webhooks/endpoints",
            Some(&key),
            Some(json!({ "url": url })),
        )
        .await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (422, Some("TargetNotAllowed")),
            "{url}: {v}"
        );
    }
    let (s, _) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        None,
        Some(json!({ "url": "https://example.com" })),
    )
    .await;
    assert_eq!(s, 401);
    let (s, v) = call(&h, "GET", "/webhooks/endpoints", Some(&key), None).await;
    assert_eq!((s, v), (200, json!([])));

    let h = Harness::with(Backend::Devnet, dev_mode).await;
    let key = key_for(&h, PROVIDER).await;
    let other = key_for(&h, OTHER).await;
    let (_, url) = Receiver::start(vec![]).await;
    let (s, v) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url, "events": ["payment.settled", "nope"] })),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    let (s, created) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url, "events": ["payment.settled"], "description": "books" })),
    )
    .await;
    assert_eq!(s, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    WebhookSecret::parse(&secret).unwrap();
    let (s, list) = call(&h, "GET", "/webhooks/endpoints", Some(&key), None).await;
    assert_eq!(s, 200);
    assert_eq!(list[0]["id"], json!(id));
    assert!(
        list[0].get("secret").is_none(),
        "secrets are shown once: {list}"
    );
    let (s, _) = call(
        &h,
        "GET",
        &format!("/webhooks/endpoints/{id}"),
        Some(&other),
        None,
    )
    .await;
    assert_eq!(s, 404, "another provider's endpoint does not exist for it");
    let (s, v) = call(
        &h,
        "PATCH",
        &format!("/webhooks/endpoints/{id}"),
        Some(&key),
        Some(json!({ "events": "*", "enabled": false })),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (v["events"].clone(), v["enabled"].clone()),
        (json!(["*"]), json!(false))
    );
    let (s, rotated) = call(
        &h,
        "POST",
        &format!("/webhooks/endpoints/{id}/rotate"),
        Some(&key),
        Some(json!({ "overlapSecs": 600 })),
    )
    .await;
    assert_eq!(s, 200, "{rotated}");
    assert_ne!(rotated["secret"], json!(secret));
    assert!(rotated["previousSecretExpiresAt"].as_u64().is_some());
    let (s, _) = call(
        &h,
        "DELETE",
        &format!("/webhooks/endpoints/{id}"),
        Some(&other),
        None,
    )
    .await;
    assert_eq!(s, 404);
    let (s, _) = call(
        &h,
        "DELETE",
        &format!("/webhooks/endpoints/{id}"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(s, 204);
    let (s, _) = call(
        &h,
        "GET",
        &format!("/webhooks/endpoints/{id}"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(s, 404);
}

/// A settlement to the provider becomes `payment.settled`, delivered once, signed with the
/// endpoint's secret (and, after a rotation, with both secrets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_is_delivered_signed() {
    let h = Harness::with(Backend::Devnet, dev_mode).await;
    let key = key_for(&h, PROVIDER).await;
    let (rx, url) = Receiver::start(vec![]).await;
    let (_, ep) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url })),
    )
    .await;
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
    let (s, _) = call(
        h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url })),
    )
    .await;
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
    let (_, gone) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": gone_url })),
    )
    .await;
    let (rx, url) = Receiver::start(vec![(500, None); 4]).await;
    let (_, failing) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url })),
    )
    .await;
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
    call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url })),
    )
    .await;
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
    call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": all_url })),
    )
    .await;
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

/// Issue 13: IPv6 spellings of loopback and other refused addresses are refused at
/// registration with the existing error code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_forms_of_refused_addresses_are_refused_at_registration() {
    let h = Harness::with(Backend::Devnet, with_key).await;
    let key = key_for(&h, PROVIDER).await;
    for host in [
        "[::ffff:0:7f00:1]",
        "[fec0::1]",
        "[100::1]",
        "[::127.0.0.1]",
        "[64:ff9b::7f00:1]",
        "[2002:7f00:1::1]",
        "[::ffff:127.0.0.1]",
        "[2001:0:808:808::80ff:fffe]",
    ] {
        let url = format!("http://{host}:9/hook");
        let (s, v) = call(
            &h,
            "POST",
            "/webhooks/endpoints",
            Some(&key),
            Some(json!({ "url": url })),
        )
        .await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (422, Some("TargetNotAllowed")),
            "{url}: {v}"
        );
    }
    let (s, v) = call(&h, "GET", "/webhooks/endpoints", Some(&key), None).await;
    assert_eq!((s, v), (200, json!([])));
}

/// An endpoint whose name resolves to a private address by the time of delivery (registered
/// while it pointed elsewhere) is refused at delivery: nothing reaches the receiver, and the
/// delivery records why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_a_private_address_is_refused_at_delivery() {
    let h = Harness::with(Backend::Devnet, with_key).await;
    let (rx, url) = Receiver::start(vec![]).await;
    let url = url.replace("127.0.0.1", "localhost");
    let provider = h.account(PROVIDER).address;
    let id = "we_rebound".to_owned();
    let keys = SecretsKeys::new(secrets_key());
    h.facilitator
        .store()
        .insert_webhook_endpoint(&Endpoint {
            secret: keys
                .seal(&id, &WebhookSecret::generate().expose_secret())
                .unwrap(),
            id: id.clone(),
            provider,
            url,
            events: "*".into(),
            description: String::new(),
            old_secret: None,
            old_secret_expires_at: None,
            enabled: true,
            disabled_reason: None,
            created_at: 1,
            updated_at: 1,
        })
        .await
        .unwrap();
    record(&h, provider, 1, "rebound").await;
    let r = h.facilitator.deliver_webhooks_once().await;
    assert_eq!((r.delivered, r.retried), (0, 1), "{r:?}");
    assert!(rx.seen().is_empty(), "nothing reached the receiver");
    let d = h
        .facilitator
        .store()
        .deliveries(provider, &id, 10)
        .await
        .unwrap();
    let error = d[0].last_error.as_deref().unwrap_or_default();
    assert!(error.contains("localhost resolves to"), "{error}");
}

/// Raw access to the `webhook_endpoints` table, beside the store.
enum Raw {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool, String),
}

impl Raw {
    fn table(&self) -> String {
        match self {
            Self::Sqlite(_) => "webhook_endpoints".into(),
            Self::Postgres(_, schema) => format!("\"{schema}\".webhook_endpoints"),
        }
    }

    /// `(secret, old_secret)` of endpoint `id`, as stored.
    async fn secrets(&self, id: &str) -> (String, Option<String>) {
        let sql = format!(
            "SELECT secret, old_secret FROM {} WHERE id = '{id}'",
            self.table()
        );
        match self {
            Self::Sqlite(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
                .unwrap(),
            Self::Postgres(pool, _) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
                .unwrap(),
        }
    }

    /// Copies endpoint `from`'s stored secret into endpoint `to`'s row.
    async fn copy_secret(&self, from: &str, to: &str) {
        let t = self.table();
        let sql = format!(
            "UPDATE {t} SET secret = (SELECT secret FROM {t} WHERE id = '{from}') WHERE id = '{to}'"
        );
        match self {
            Self::Sqlite(pool) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(pool)
                    .await
                    .unwrap();
            }
            Self::Postgres(pool, _) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(pool)
                    .await
                    .unwrap();
            }
        }
    }
}

/// A facilitator over `h`'s chain and store with other webhook-secrets keys (a restart with
/// another configuration).
fn restarted(h: &Harness, keys: Option<SecretsKeys>) -> Facilitator {
    let mut settings = Settings::default();
    dev_mode(&mut settings);
    settings.webhook_secrets = keys;
    Facilitator::new(
        settings,
        vec![(
            h.facilitator.networks().remove(0),
            Arc::clone(&h.fixture.chain),
        )],
        vec![h.account(RELAYER).address],
        h.account(PROOF_KEY).private_key,
        Arc::clone(h.facilitator.store()),
    )
    .unwrap()
}

/// Checks the last delivery `rx` got verifies with each of `secrets` (alone).
fn signed_with(rx: &Receiver, secrets: &[&str]) {
    let got = rx.got.lock().unwrap().clone();
    let (headers, body, _) = got.last().expect("a delivery");
    let header = |n: &str| headers[n].to_str().unwrap().to_owned();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for secret in secrets {
        verify(
            &[WebhookSecret::parse(secret).unwrap()],
            &header("webhook-id"),
            &header("webhook-timestamp"),
            &header("webhook-signature"),
            body,
            now,
            300,
        )
        .expect("signed with the endpoint's secret");
    }
}

/// Issue 13: the secrets column holds ciphertext bound to its row, never the secret; deliveries
/// are still signed with the plaintext secrets, through a rotation.
async fn secrets_are_encrypted_at_rest(h: &Harness, raw: &Raw) {
    let key = key_for(h, PROVIDER).await;
    let (rx, url) = Receiver::start(vec![]).await;
    let (s, ep) = call(
        h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url, "events": ["plan.created"] })),
    )
    .await;
    assert_eq!(s, 201, "{ep}");
    let id = ep["id"].as_str().unwrap().to_owned();
    let first = ep["secret"].as_str().unwrap().to_owned();
    let body = |s: &str| s.trim_start_matches("whsec_").to_owned();
    let (stored, old) = raw.secrets(&id).await;
    assert!(stored.starts_with("enc1:"), "{stored}");
    assert!(!stored.contains(&body(&first)), "the secret is not stored");
    assert_eq!(old, None);

    let (s, rotated) = call(
        h,
        "POST",
        &format!("/webhooks/endpoints/{id}/rotate"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(s, 200, "{rotated}");
    let second = rotated["secret"].as_str().unwrap().to_owned();
    let (stored, old) = raw.secrets(&id).await;
    let old = old.expect("the previous secret is kept for the overlap");
    assert!(stored.starts_with("enc1:") && old.starts_with("enc1:"));
    for column in [&stored, &old] {
        for secret in [&first, &second] {
            assert!(!column.contains(&body(secret)), "no secret in {column}");
        }
    }

    // Delivered, signed with both secrets (the rotation's overlap).
    record(h, h.account(PROVIDER).address, 1, "sealed").await;
    assert_eq!(h.facilitator.deliver_webhooks_once().await.delivered, 1);
    signed_with(&rx, &[&first, &second]);

    // A sealed secret copied into another endpoint's row does not open there: that endpoint's
    // deliveries fail (never signed with a wrong secret), and startup refuses the store.
    let (s, other) = call(
        h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url, "events": ["plan.deprecated"] })),
    )
    .await;
    assert_eq!(s, 201, "{other}");
    let other = other["id"].as_str().unwrap().to_owned();
    raw.copy_secret(&id, &other).await;
    h.facilitator
        .store()
        .record_event(&NewEvent {
            id: "evt_moved".into(),
            provider: h.account(PROVIDER).address,
            r#type: "plan.deprecated".into(),
            data: "{}".into(),
            created_at: 1,
        })
        .await
        .unwrap();
    let r = h.facilitator.deliver_webhooks_once().await;
    assert_eq!((r.delivered, r.retried), (0, 1), "{r:?}");
    let d = h
        .facilitator
        .store()
        .deliveries(h.account(PROVIDER).address, &other, 1)
        .await
        .unwrap();
    let error = d[0].last_error.as_deref().unwrap_or_default();
    assert!(error.contains("does not decrypt"), "{error}");
    let e = h.facilitator.seal_webhook_secrets().await.unwrap_err();
    assert!(
        matches!(&e, SecretsError::Seal { endpoint, source: SealError::Tampered } if *endpoint == other),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_secrets_are_encrypted_at_rest_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
    let store = store::open(&url).await.unwrap();
    let fixture = tollgate_testkit::Fixture::new(Backend::Devnet)
        .await
        .unwrap();
    let chain = Arc::clone(&fixture.chain);
    let h = Harness::assemble(fixture, chain, 1, Some(store), dev_mode).await;
    let raw = Raw::Sqlite(sqlx::SqlitePool::connect(&url).await.unwrap());
    secrets_are_encrypted_at_rest(&h, &raw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_secrets_are_encrypted_at_rest_in_postgres() {
    let url = tollgate_testkit::peer::database_url();
    let schema = format!("tg_it_sealed_{}", std::process::id());
    let pg = store::PostgresStore::connect_with_schema(&url, &schema)
        .await
        .unwrap();
    store::Store::migrate(&pg).await.unwrap();
    let fixture = tollgate_testkit::Fixture::new(Backend::Devnet)
        .await
        .unwrap();
    let chain = Arc::clone(&fixture.chain);
    let h = Harness::assemble(fixture, chain, 1, Some(Arc::new(pg)), dev_mode).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let raw = Raw::Postgres(pool.clone(), schema.clone());
    secrets_are_encrypted_at_rest(&h, &raw).await;
    drop(h);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
}

/// Secrets an older version stored in plaintext still sign, and are encrypted at startup; a
/// restart without the key, or with another key, refuses to start naming the setting (and would
/// not deliver); a key rotation through `keys.webhook_secrets_previous` re-encrypts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_secrets_are_sealed_at_startup_and_a_wrong_key_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
    let store = store::open(&url).await.unwrap();
    let fixture = tollgate_testkit::Fixture::new(Backend::Devnet)
        .await
        .unwrap();
    let chain = Arc::clone(&fixture.chain);
    let h = Harness::assemble(fixture, chain, 1, Some(store), dev_mode).await;
    let raw = Raw::Sqlite(sqlx::SqlitePool::connect(&url).await.unwrap());
    let provider = h.account(PROVIDER).address;
    let (rx, hook) = Receiver::start(vec![]).await;
    let (current, previous) = (
        WebhookSecret::generate().expose_secret(),
        WebhookSecret::generate().expose_secret(),
    );
    let id = "we_legacy".to_owned();
    h.facilitator
        .store()
        .insert_webhook_endpoint(&Endpoint {
            id: id.clone(),
            provider,
            url: hook,
            events: "*".into(),
            description: String::new(),
            secret: current.clone(),
            old_secret: Some(previous.clone()),
            old_secret_expires_at: Some(u64::MAX / 2),
            enabled: true,
            disabled_reason: None,
            created_at: 1,
            updated_at: 1,
        })
        .await
        .unwrap();

    // Without a key, a store with (plaintext) secrets does not start.
    let e = restarted(&h, None)
        .seal_webhook_secrets()
        .await
        .unwrap_err();
    assert!(
        matches!(e, SecretsError::PlaintextWithoutKey { endpoints: 1 }),
        "{e}"
    );
    assert!(e.to_string().contains("keys.webhook_secrets"), "{e}");

    // Before startup sealing, the plaintext row still signs.
    record(&h, provider, 1, "legacy").await;
    assert_eq!(h.facilitator.deliver_webhooks_once().await.delivered, 1);
    signed_with(&rx, &[&current, &previous]);

    // Startup: sealed in place, and deliveries sign as before.
    assert_eq!(h.facilitator.seal_webhook_secrets().await.unwrap(), 1);
    assert_eq!(
        h.facilitator.seal_webhook_secrets().await.unwrap(),
        0,
        "once"
    );
    let (stored, old) = raw.secrets(&id).await;
    let old = old.unwrap();
    assert!(stored.starts_with("enc1:") && old.starts_with("enc1:"));
    assert!(!stored.contains(&current[6..]) && !old.contains(&previous[6..]));
    record(&h, provider, 1, "sealed").await;
    assert_eq!(h.facilitator.deliver_webhooks_once().await.delivered, 1);
    signed_with(&rx, &[&current, &previous]);

    // A restart without the key, or with another one: refused, naming the setting; and such a
    // facilitator does not deliver (nothing signed with a wrong secret).
    let e = restarted(&h, None)
        .seal_webhook_secrets()
        .await
        .unwrap_err();
    assert!(
        matches!(e, SecretsError::KeyMissing { endpoints: 1 }),
        "{e}"
    );
    assert!(
        e.to_string().contains("`keys.webhook_secrets` is not set"),
        "{e}"
    );
    let other = SecretsKey::from_bytes([0x77; 32]);
    let wrong = restarted(&h, Some(SecretsKeys::new(other.clone())));
    let e = wrong.seal_webhook_secrets().await.unwrap_err();
    assert!(
        matches!(
            &e,
            SecretsError::Seal {
                source: SealError::UnknownKey { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("keys.webhook_secrets"), "{e}");
    let seen = rx.seen().len();
    record(&h, provider, 1, "wrong").await;
    let r = wrong.deliver_webhooks_once().await;
    assert_eq!((r.delivered, r.retried), (0, 1), "{r:?}");
    assert_eq!(rx.seen().len(), seen, "nothing sent");
    let d = h
        .facilitator
        .store()
        .deliveries(provider, &id, 1)
        .await
        .unwrap();
    assert!(
        d[0].last_error
            .as_deref()
            .unwrap_or_default()
            .contains("keys.webhook_secrets"),
        "{:?}",
        d[0].last_error
    );

    // Key rotation: the new key with the old one as previous re-seals every row; then the old
    // key alone no longer opens them, and the new key alone does.
    let rotated = restarted(
        &h,
        Some(SecretsKeys::new(other.clone()).with_previous([secrets_key()])),
    );
    assert_eq!(rotated.seal_webhook_secrets().await.unwrap(), 1);
    assert!(
        raw.secrets(&id)
            .await
            .0
            .starts_with(&format!("enc1:{}:", other.id()))
    );
    assert!(h.facilitator.seal_webhook_secrets().await.is_err());
    let after = restarted(&h, Some(SecretsKeys::new(other)));
    assert_eq!(after.seal_webhook_secrets().await.unwrap(), 0);
    drain(&after).await;
    signed_with(&rx, &[&current, &previous]);
}

/// Without `keys.webhook_secrets` no endpoint can be added (no secret would be stored in
/// plaintext): 503 `WebhooksNotConfigured`, naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_key_endpoints_cannot_be_added() {
    let h = Harness::with(Backend::Devnet, |s| {
        dev_mode(s);
        s.webhook_secrets = None;
    })
    .await;
    let key = key_for(&h, PROVIDER).await;
    let (_, url) = Receiver::start(vec![]).await;
    let (s, v) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url })),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (503, Some("WebhooksNotConfigured")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("keys.webhook_secrets")
    );
    assert!(
        h.facilitator
            .store()
            .webhook_secrets()
            .await
            .unwrap()
            .is_empty()
    );
}

/// Through the configuration, as `tollgate facilitator` starts: a store holding sealed webhook
/// secrets does not start without `keys.webhook_secrets` or with another key (the error names
/// the setting), and starts with the right one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_refuses_a_missing_or_wrong_webhook_secrets_key() {
    use tollgate_facilitator::{
        config::Config,
        start::{self, StartError},
    };

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("facilitator.db");
    let store = store::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let fixture = tollgate_testkit::Fixture::new(Backend::Devnet)
        .await
        .unwrap();
    let chain = Arc::clone(&fixture.chain);
    let h = Harness::assemble(fixture, chain, 1, Some(store), dev_mode).await;
    let key = key_for(&h, PROVIDER).await;
    let (_, url) = Receiver::start(vec![]).await;
    let (s, _) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url })),
    )
    .await;
    assert_eq!(s, 201);

    let d = h.fixture.deployment;
    let config = |keys: &str| {
        Config::from_toml_str(&format!(
            r#"store = "sqlite://{store}"
[keys]
relayers = ["{relayer}"]
proof = "{proof}"
{keys}
[[networks]]
name = "tollgate-devnet"
chain_id = {chain_id}
rpc_url = "embedded"
token = "{token}"
router = "{router}"
subscriptions = "{subs}"
"#,
            store = path.display(),
            relayer = h.account(RELAYER).private_key,
            proof = h.account(PROOF_KEY).private_key,
            chain_id = h.fixture.chain.chain_id(),
            token = d.token,
            router = d.router,
            subs = d.subscriptions,
        ))
        .unwrap()
    };
    let start = |config: Config, env: Option<String>| {
        let chain = Arc::clone(&h.fixture.chain);
        async move {
            let keys = config
                .resolve(|var| (var == "WEBHOOK_KEY").then(|| env.clone()).flatten())
                .unwrap();
            let settings = start::settings(&config);
            start::build(&config, &keys, settings, Some(chain)).await
        }
    };

    let e = start(config(""), None).await.unwrap_err();
    assert!(
        matches!(
            e,
            StartError::WebhookSecrets(SecretsError::KeyMissing { endpoints: 1 })
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("`keys.webhook_secrets` is not set"),
        "{e}"
    );

    let with_env = config("webhook_secrets = \"env:WEBHOOK_KEY\"");
    let wrong = SecretsKey::from_bytes([0x77; 32]).expose_hex();
    let e = start(with_env.clone(), Some(wrong)).await.unwrap_err();
    assert!(
        matches!(
            &e,
            StartError::WebhookSecrets(SecretsError::Seal {
                source: SealError::UnknownKey { .. },
                ..
            })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("keys.webhook_secrets"), "{e}");

    let right = start(with_env, Some(secrets_key().expose_hex()))
        .await
        .unwrap();
    assert_eq!(right.store().webhook_secrets().await.unwrap().len(), 1);
}
