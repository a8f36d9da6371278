//! The agent economy loop: one autonomous agent (a fresh key, no dev account, no human step)
//! registers as a provider, publishes a plan, gates its own API with it and meters it; another
//! agent finds the plan in a 402, subscribes gaslessly and is served; the provider reads its usage
//! ledger.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use alloy::{
    primitives::B256,
    signers::{SignerSync as _, local::Secp256k1Signer},
    sol_types::SolCall,
};
use axum::{Router, routing::get};
use serde_json::{Value, json};
use tollgate_agent::{Agent, Amount, PayRequest, PaymentKind, SpendPolicy};
use tollgate_chain::{TxRequest, U256, WaitOptions, contracts::Token};
use tollgate_gate::{Gate, Pricing};
use tollgate_protocol::PlanTerms;

use crate::support::{App, Harness, NETWORK, PAYER};

const PLAN_AMOUNT: u64 = 3_000_000;
const INTERVAL: u64 = 30 * 24 * 3600;
const PER_CALL: u64 = 50_000;

async fn post(h: &Harness, path: &str, key: Option<&str>, body: Value) -> Value {
    let mut r = reqwest::Client::new()
        .post(format!("{}{path}", h.url))
        .json(&body);
    if let Some(key) = key {
        r = r.bearer_auth(key);
    }
    let r = r.send().await.unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agent_provides_another_subscribes_and_is_served() {
    let h = Harness::new().await;

    // The provider agent: a fresh wallet registers by signing the facilitator's challenge.
    let provider = Secp256k1Signer::random();
    let challenge = post(
        &h,
        "/providers/challenge",
        None,
        json!({ "address": provider.address() }),
    )
    .await;
    let text = challenge["challenge"].as_str().unwrap();
    let signature = provider.sign_message_sync(text.as_bytes()).unwrap();
    let registered = post(
        &h,
        "/providers/register",
        None,
        json!({
            "address": provider.address(), "challenge": text,
            "signature": alloy::primitives::hex::encode_prefixed(signature.as_bytes())
        }),
    )
    .await;
    let api_key = registered["apiKey"].as_str().unwrap().to_owned();

    // It publishes a plan paying itself, and gates its own API with it (metered per call).
    let plan = post(
        &h,
        "/plans",
        Some(&api_key),
        json!({
            "network": NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": INTERVAL,
            "idempotencyKey": "agent-plan"
        }),
    )
    .await;
    let plan_id: B256 = plan["planId"].as_str().unwrap().parse().unwrap();
    assert_eq!(plan["payTo"], json!(provider.address()));
    let gate = Gate::builder()
        .network(NETWORK)
        .token(h.token(), "USD Coin", "2")
        .pay_to(provider.address())
        .facilitator(&h.url)
        .subscriptions(
            Arc::clone(&h.fixture.chain),
            h.fixture.deployment.subscriptions,
        )
        .plan_terms(PlanTerms {
            plan_id,
            amount: Amount::from_units(PLAN_AMOUNT),
            interval: INTERVAL,
            token: h.token(),
        })
        .api_key(&api_key)
        .build()
        .await
        .unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = Router::new()
        .route(
            "/v1/answer",
            get(move || {
                let hits = Arc::clone(&counted);
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    axum::Json(json!({ "answer": 42 }))
                }
            }),
        )
        .route_layer(
            gate.payment_gate([Pricing::subscription(plan_id)])
                .metered(PER_CALL),
        );
    let app = App::serve(app, hits).await;

    // The subscriber agent: another fresh wallet, funded with tokens only (it never pays gas).
    let subscriber = Secp256k1Signer::random();
    let fund = Token::transferCall {
        to: subscriber.address(),
        value: U256::from(10_000_000),
    };
    h.fixture
        .chain
        .send_and_wait(
            TxRequest::call(h.address(PAYER), h.token(), fund.abi_encode()),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    let agent = Agent::builder(
        subscriber.clone(),
        SpendPolicy::new(Amount::ZERO, Amount::from_units(5_000_000)).subscriptions(
            Amount::from_units(PLAN_AMOUNT),
            Amount::from_units(PER_CALL * 2),
        ),
    )
    .facilitators([h.url.clone()])
    .build()
    .unwrap();
    let before = h.balance(provider.address()).await;

    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = agent
            .pay(PayRequest::get(&app.url("/v1/answer")).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        match r.payment.map(|p| p.kind) {
            Some(PaymentKind::Subscription { id }) => ids.push(id),
            other => panic!("not served on a subscription: {other:?}"),
        }
    }
    assert_eq!(ids[0], ids[1], "subscribed once");
    assert_eq!(app.hits(), 2);
    assert_eq!(
        h.balance(provider.address()).await,
        before + U256::from(PLAN_AMOUNT),
        "the provider agent was paid the first cycle"
    );
    // Its ledger shows both calls metered against the subscriber's allowance.
    let usage: Value = reqwest::Client::new()
        .get(format!("{}/subscriptions/{}/usage", h.url, ids[0]))
        .bearer_auth(&api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(usage["used"], (2 * PER_CALL).to_string());
    assert_eq!(usage["remaining"], "0");
}
