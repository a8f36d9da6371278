//! `Gate::builder().facilitator(url).plan(id)`: the plan's terms from the facilitator's plan API,
//! the subscriptions contract and the chain's RPC URL from its discovery, nothing else given.

use std::collections::BTreeMap;

use alloy::{
    primitives::{B256, U256},
    sol_types::{SolCall, SolEvent},
};
use axum::{Router, body::Body, http::Request, routing::get};
use serde_json::{Value, json};
use tollgate_chain::{
    TxRequest, WaitOptions,
    contracts::{Subscriptions, Token},
};
use tollgate_gate::{BuildError, Gate, GateBuilder, Pricing};
use tollgate_testkit::{
    Backend, Fixture,
    harness::{DEVNET_NETWORK, PAYEE, PAYER, TestNet},
};
use tower::ServiceExt as _;

const PLAN_AMOUNT: u64 = 5_000_000;
const INTERVAL: u64 = 30 * 24 * 3600;

/// A facilitator over the devnet served on JSON-RPC, publishing that URL when `publish_rpc`.
async fn testnet(publish_rpc: bool) -> TestNet {
    let fixture = Fixture::new(Backend::DevnetRpc).await.expect("devnet");
    let rpc = fixture.rpc_url().expect("rpc url").to_owned();
    TestNet::builder()
        .fixture(fixture)
        .settings(move |s| {
            if publish_rpc {
                s.public_rpc_urls = BTreeMap::from([(DEVNET_NETWORK.to_owned(), rpc)]);
            }
        })
        .start()
        .await
        .expect("test network")
}

/// [`PAYEE`]'s API key and a plan it publishes through the facilitator.
async fn provider_plan(net: &TestNet) -> (String, B256) {
    let key = net.api_key(PAYEE, "sdk").await;
    let r = net
        .http
        .post(format!("{}/plans", net.url))
        .bearer_auth(&key)
        .json(&json!({
            "network": DEVNET_NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": INTERVAL,
            "idempotencyKey": "sdk-discovery"
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "create plan");
    let v: Value = r.json().await.unwrap();
    (key, v["planId"].as_str().unwrap().parse().unwrap())
}

/// [`PAYER`] subscribes to `plan` on-chain.
async fn subscribe(net: &TestNet, plan: B256) -> B256 {
    let subs = net.fixture.deployment.subscriptions;
    let send = |to, data: Vec<u8>| {
        let tx = TxRequest::call(net.address(PAYER), to, data);
        net.fixture.chain.send_and_wait(tx, WaitOptions::default())
    };
    let approve = Token::approveCall {
        spender: subs,
        value: U256::from(PLAN_AMOUNT) * U256::from(10),
    };
    send(net.token(), approve.abi_encode()).await.unwrap();
    let call = Subscriptions::subscribeCall {
        planId: plan,
        maxOverage: U256::ZERO,
    };
    let c = send(subs, call.abi_encode()).await.unwrap();
    c.receipt()
        .expect("confirmed")
        .logs
        .iter()
        .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
        .expect("SubscriptionCreated")
        .id
}

/// A builder with only what a provider knows: network, token, payee, facilitator.
fn builder(net: &TestNet) -> GateBuilder {
    Gate::builder()
        .network(DEVNET_NETWORK)
        .token(net.token(), "USD Coin", "2")
        .pay_to(net.address(PAYEE))
        .facilitator(&net.url)
}

async fn call(app: &Router, sub: Option<B256>) -> (u16, Value) {
    let mut req = Request::get("/v1/report");
    if let Some(id) = sub {
        req = req.header("X-Service-Sub", id.to_string());
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status().as_u16();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_builds_its_plan_and_subscription_check_from_discovery() {
    let net = testnet(true).await;
    let (key, plan) = provider_plan(&net).await;
    let sub = subscribe(&net, plan).await;

    let gate = builder(&net).plan(plan).build().await.expect("gate");
    let verified = gate.verify_subscription(sub, &[plan]).await.unwrap();
    assert_eq!(verified.subscriber, net.address(PAYER));
    let app = Router::new()
        .route("/v1/report", get(|| async { "{}" }))
        .route_layer(gate.payment_gate([Pricing::subscription(plan)]));
    assert_eq!(call(&app, Some(sub)).await.0, 200);
    // The 402 offers the plan on the terms the facilitator holds.
    let (status, body) = call(&app, None).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["accepts"][0]["scheme"], "subscription", "{body}");
    assert_eq!(
        body["accepts"][0]["amount"],
        PLAN_AMOUNT.to_string(),
        "{body}"
    );

    // Refused at build: an unknown plan, then a deprecated one.
    let unknown = B256::repeat_byte(0x99);
    let e = builder(&net).plan(unknown).build().await.unwrap_err();
    assert!(
        matches!(e, BuildError::UnknownPlan(id) if id == unknown),
        "{e:?}"
    );
    let r = net
        .http
        .post(format!(
            "{}/plans/{plan}/deprecate?network={DEVNET_NETWORK}",
            net.url
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "deprecate");
    let e = builder(&net).plan(plan).build().await.unwrap_err();
    assert!(
        matches!(e, BuildError::PlanDeprecated(id) if id == plan),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_published_rpc_url_the_gate_needs_one() {
    let net = testnet(false).await;
    let (_key, plan) = provider_plan(&net).await;
    let e = builder(&net).plan(plan).build().await.unwrap_err();
    assert!(
        matches!(&e, BuildError::NoRpc { network } if network == DEVNET_NETWORK),
        "{e:?}"
    );
    assert!(e.to_string().contains("public_rpc_url"), "{e}");
    // An explicit RPC URL (which may carry credentials) stands in for the published one.
    let rpc = net.fixture.rpc_url().unwrap().to_owned();
    let sub = subscribe(&net, plan).await;
    let gate = builder(&net).plan(plan).rpc_url(rpc).build().await.unwrap();
    gate.verify_subscription(sub, &[plan]).await.unwrap();
}
