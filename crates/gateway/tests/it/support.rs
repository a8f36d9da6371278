//! Fixtures: a facilitator over the devnet (JSON-RPC), a provider with an API key and a plan, an
//! on-chain subscriber, an upstream app counting its hits, and a gateway served on loopback.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use axum::{Router, routing::any};
use serde_json::{Value, json};
use tollgate_chain::{
    TxRequest, WaitOptions,
    contracts::{Subscriptions, Token},
};
use tollgate_gateway::{Config, Secrets};
use tollgate_protocol::AuthorizeResponse;
use tollgate_testkit::{
    Backend, Fixture,
    harness::{DEVNET_NETWORK, PAYEE, PAYER, TestNet},
};

pub const NETWORK: &str = DEVNET_NETWORK;
pub const PLAN_AMOUNT: u64 = 5_000_000;
pub const INTERVAL: u64 = 30 * 24 * 3600;

/// A facilitator over the devnet served on JSON-RPC; with `publish_rpc`, its discovery
/// publishes that RPC URL for [`NETWORK`] (as `tollgate dev` does).
pub async fn testnet(publish_rpc: bool) -> TestNet {
    let fixture = Fixture::new(Backend::DevnetRpc).await.expect("devnet");
    let rpc = fixture.rpc_url().expect("rpc url").to_owned();
    TestNet::builder()
        .fixture(fixture)
        .settings(move |s| {
            if publish_rpc {
                s.public_rpc_urls = BTreeMap::from([(NETWORK.to_owned(), rpc)]);
            }
        })
        .start()
        .await
        .expect("test network")
}

/// [`PAYEE`] registers (an API key) and publishes a plan through the facilitator.
pub async fn provider_plan(net: &TestNet, idempotency_key: &str) -> (String, B256) {
    let key = net.api_key(PAYEE, "gateway").await;
    let r = net
        .http
        .post(format!("{}/plans", net.url))
        .bearer_auth(&key)
        .json(&json!({
            "network": NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": INTERVAL,
            "idempotencyKey": idempotency_key
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "create plan");
    let v: Value = r.json().await.unwrap();
    (key, v["planId"].as_str().unwrap().parse().unwrap())
}

async fn send(net: &TestNet, from: usize, to: Address, data: Vec<u8>) -> tollgate_chain::Receipt {
    let tx = TxRequest::call(net.address(from), to, data);
    let c = net
        .fixture
        .chain
        .send_and_wait(tx, WaitOptions::default())
        .await
        .expect("transaction");
    let r = c.receipt().cloned().expect("confirmed");
    assert!(r.success, "{r:?}");
    r
}

/// [`PAYER`] approves and subscribes to `plan` on-chain with an overage cap of `cap`.
pub async fn subscribe(net: &TestNet, plan: B256, cap: u64) -> B256 {
    let subs = net.fixture.deployment.subscriptions;
    let approve = Token::approveCall {
        spender: subs,
        value: U256::from(PLAN_AMOUNT) * U256::from(100),
    };
    send(net, PAYER, net.token(), approve.abi_encode()).await;
    let call = Subscriptions::subscribeCall {
        planId: plan,
        maxOverage: U256::from(cap),
    };
    let r = send(net, PAYER, subs, call.abi_encode()).await;
    r.logs
        .iter()
        .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
        .expect("SubscriptionCreated")
        .id
}

/// The upstream API: answers every path with `upstream <path>`, counting hits.
pub async fn upstream() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let app = Router::new().fallback(any({
        let hits = Arc::clone(&hits);
        move |uri: axum::http::Uri| {
            let hits = Arc::clone(&hits);
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                format!("upstream {}", uri.path())
            }
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, hits, task)
}

/// A gateway config: `listen`, the `[gate]` of [`NETWORK`] paid to [`PAYEE`], `gate_extra` keys
/// and `routes` (TOML `[[routes]]` entries).
pub fn config(
    net: &TestNet,
    listen: &str,
    upstream: &str,
    memo_store: &str,
    gate_extra: &str,
    routes: &str,
) -> Config {
    let toml = format!(
        r#"listen = "{listen}"
upstream = "{upstream}"
[gate]
network = "{NETWORK}"
token = "{token}"
pay_to = "{pay_to}"
facilitator = "{facilitator}"
memo_store = "{memo_store}"
{gate_extra}
{routes}
"#,
        token = net.token(),
        pay_to = net.address(PAYEE),
        facilitator = net.url,
    );
    Config::from_toml_str(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"))
}

/// The gateway serving `config` (whose `listen` is `listener`'s address).
pub async fn serve_gateway(
    config: &Config,
    secrets: &Secrets,
    listener: tokio::net::TcpListener,
) -> tokio::task::JoinHandle<()> {
    let app = tollgate_gateway::router(config, secrets)
        .await
        .expect("gateway");
    let limits = config.limits().unwrap();
    tokio::spawn(async move {
        tollgate_gateway::serve(app, listener, &limits, std::future::pending())
            .await
            .unwrap();
    })
}

/// Pays the first entry of a 402 body as a Tollgate agent does (`/authorize`); returns the
/// `X-PAYMENT` value.
pub async fn pay_402(net: &TestNet, body: &Value) -> String {
    let e = &body["accepts"][0];
    let memo: B256 = e["memo"].as_str().unwrap().parse().unwrap();
    let pay_to: Address = e["payTo"].as_str().unwrap().parse().unwrap();
    let amount: u64 = e["amount"].as_str().unwrap().parse().unwrap();
    let sp = net
        .signed_payment(e["network"].as_str().unwrap(), PAYER, pay_to, amount, memo)
        .await;
    let r = net
        .http
        .post(format!("{}/authorize", net.url))
        .json(&json!({ "signedPayment": sp }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "authorize");
    let a: AuthorizeResponse = r.json().await.unwrap();
    a.proof
}
