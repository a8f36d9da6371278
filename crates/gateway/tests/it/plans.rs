//! Plan, metered and one-time routes configured by TOML alone: the plan's terms and the chain
//! come from the facilitator's discovery.

use std::sync::atomic::Ordering;

use alloy::primitives::B256;
use serde_json::Value;
use tollgate_gateway::{Error, Secrets};

use crate::support::{
    NETWORK, PLAN_AMOUNT, config, pay_402, provider_plan, serve_gateway, subscribe, testnet,
    upstream,
};

const CHAT_PRICE: u64 = 250_000;
const QUOTE_PRICE: u64 = 500_000;
/// `metered = "0.10"`.
const METERED: u64 = 100_000;

struct Reply {
    status: u16,
    body: Value,
    text: String,
}

async fn get(http: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = http.get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply { status, body, text }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_metered_and_one_time_routes_from_discovery() {
    let net = testnet(true).await;
    let (key, plan) = provider_plan(&net, "gateway-plans").await;
    // An overage cap of 2.5 metered requests.
    let sub = subscribe(&net, plan, METERED * 5 / 2).await;
    let (up, hits, _up) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    // The memo store's directory does not exist yet: the gateway creates it.
    let memos = dir.path().join("state/gateway/memos.db");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listen = listener.local_addr().unwrap().to_string();
    let routes = format!(
        r#"[[routes]]
prefix = "/v1/chat"
plan = "{plan}"
price = "{CHAT_PRICE}"
[[routes]]
prefix = "/v1/process"
plan = "{plan}"
metered = "0.10"
[[routes]]
prefix = "/v1/quote"
price = "{QUOTE_PRICE}"
"#
    );
    let config = config(
        &net,
        &listen,
        &up,
        &format!("sqlite://{}", memos.display()),
        r#"api_key_env = "TOLLGATE_API_KEY""#,
        &routes,
    );
    let _gw = serve_gateway(&config, &Secrets::new().api_key(key.clone()), listener).await;
    assert!(
        memos.exists(),
        "the memo store was created at {}",
        memos.display()
    );
    let gw = format!("http://{listen}");
    let http = reqwest::Client::new();
    let sub_hex = sub.to_string();
    let with_sub = [("X-Service-Sub", sub_hex.as_str())];

    // The subscriber passes the plan route, without paying.
    let r = get(&http, &format!("{gw}/v1/chat"), &with_sub).await;
    assert_eq!(
        (r.status, r.text.as_str()),
        (200, "upstream /v1/chat"),
        "{}",
        r.text
    );

    // A non-subscriber gets the full 402, one entry per scheme, exactly as the SDK's
    // multi-scheme gate offers them: the one-time price (subscribing preferred), then the plan
    // (its terms loaded from the facilitator).
    let r = get(&http, &format!("{gw}/v1/chat"), &[]).await;
    assert_eq!(r.status, 402, "{}", r.text);
    assert_eq!(r.body["error"], "PaymentRequired", "{}", r.text);
    let accepts = r.body["accepts"].as_array().unwrap();
    assert_eq!(accepts.len(), 2, "{}", r.text);
    let e = &accepts[0];
    assert_eq!(e["scheme"], "exact", "{}", r.text);
    assert_eq!(e["amount"], CHAT_PRICE.to_string(), "{}", r.text);
    assert_eq!(e["service"]["subscriptionScheme"], true, "{}", r.text);
    let s = &accepts[1];
    assert_eq!(s["scheme"], "subscription", "{}", r.text);
    assert_eq!(s["service"]["planId"], plan.to_string(), "{}", r.text);
    assert_eq!(s["service"]["subscriptionScheme"], true, "{}", r.text);
    assert_eq!(s["plan"]["amount"], PLAN_AMOUNT.to_string(), "{}", r.text);
    // … and the one-time price pays.
    let proof = pay_402(&net, &r.body).await;
    let r = get(
        &http,
        &format!("{gw}/v1/chat"),
        &[("X-PAYMENT", proof.as_str())],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);

    // Metered: each admitted request deducts 0.10 until the cap, then AllowanceExhausted.
    let before = hits.load(Ordering::SeqCst);
    for _ in 0..2 {
        let r = get(&http, &format!("{gw}/v1/process"), &with_sub).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = get(&http, &format!("{gw}/v1/process"), &with_sub).await;
    assert_eq!(r.status, 402, "{}", r.text);
    assert_eq!(r.body["error"], "AllowanceExhausted", "{}", r.text);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        before + 2,
        "the refused request never reached the upstream"
    );
    let usage: Value = net
        .http
        .get(format!(
            "{}/subscriptions/{sub}/usage?network={NETWORK}",
            net.url
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(usage["used"], (2 * METERED).to_string(), "{usage}");

    // The one-time route: 402, then paid.
    let r = get(&http, &format!("{gw}/v1/quote"), &[]).await;
    assert_eq!(r.status, 402, "{}", r.text);
    assert_eq!(r.body["accepts"][0]["amount"], QUOTE_PRICE.to_string());
    assert!(
        r.body["accepts"][0]["service"].get("planId").is_none(),
        "{}",
        r.text
    );
    let proof = pay_402(&net, &r.body).await;
    let r = get(
        &http,
        &format!("{gw}/v1/quote"),
        &[("X-PAYMENT", proof.as_str())],
    )
    .await;
    assert_eq!((r.status, r.text.as_str()), (200, "upstream /v1/quote"));

    // X-Service-Sub on a route without a plan: a 402 that says why, never a 500.
    for id in [
        sub_hex.clone(),
        B256::repeat_byte(0x42).to_string(),
        "nonsense".to_owned(),
    ] {
        let r = get(
            &http,
            &format!("{gw}/v1/quote"),
            &[("X-Service-Sub", id.as_str())],
        )
        .await;
        assert_eq!(r.status, 402, "{id}: {}", r.text);
        assert_eq!(r.body["error"], "SubscriptionNotActive", "{}", r.text);
        let reason = r.body["reason"].as_str().unwrap();
        assert!(
            ["subscription_not_offered", "malformed_subscription_id"].contains(&reason),
            "{}",
            r.text
        );
        assert!(
            !r.body["message"].as_str().unwrap().is_empty(),
            "{}",
            r.text
        );
    }
    // A wrong id on the plan route: 402 with the reason.
    let r = get(
        &http,
        &format!("{gw}/v1/chat"),
        &[("X-Service-Sub", &B256::repeat_byte(0x42).to_string())],
    )
    .await;
    assert_eq!(r.status, 402, "{}", r.text);
    assert_eq!(r.body["reason"], "unknown_subscription", "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_routes_need_a_chain_and_a_live_plan() {
    // The facilitator publishes no rpcUrl.
    let net = testnet(false).await;
    let (key, plan) = provider_plan(&net, "gateway-no-rpc").await;
    let (up, _hits, _up) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let memos = format!("sqlite://{}", dir.path().join("memos.db").display());
    let route = |plan: B256| format!("[[routes]]\nprefix = \"/v1/chat\"\nplan = \"{plan}\"\n");
    let c = config(&net, "127.0.0.1:0", &up, &memos, "", &route(plan));
    let e = tollgate_gateway::router(&c, &Secrets::new())
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Invalid(_)), "{e:?}");
    assert!(
        msg.contains("gate.rpc_url_env") && msg.contains("public_rpc_url"),
        "{msg}"
    );
    // An explicit RPC URL serves instead.
    let rpc = net.fixture.rpc_url().unwrap().to_owned();
    let _app = tollgate_gateway::router(&c, &Secrets::new().rpc_url(rpc.clone()))
        .await
        .expect("with an RPC URL");
    // An unknown plan and a deprecated one stop the gateway at start.
    let unknown = B256::repeat_byte(0x99);
    let c = config(&net, "127.0.0.1:0", &up, &memos, "", &route(unknown));
    let e = tollgate_gateway::router(&c, &Secrets::new().rpc_url(rpc.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Gate(b) if matches!(**b, tollgate_gate::BuildError::UnknownPlan(id) if id == unknown)),
        "{e:?}"
    );
    let r = net
        .http
        .post(format!(
            "{}/plans/{plan}/deprecate?network={NETWORK}",
            net.url
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "deprecate");
    let c = config(&net, "127.0.0.1:0", &up, &memos, "", &route(plan));
    let e = tollgate_gateway::router(&c, &Secrets::new().rpc_url(rpc))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Gate(b) if matches!(**b, tollgate_gate::BuildError::PlanDeprecated(id) if id == plan)),
        "{e:?}"
    );
    assert!(e.to_string().contains("PlanDeprecated"), "{e}");
}

#[tokio::test]
async fn a_state_directory_that_cannot_be_created_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, "a file, not a directory").unwrap();
    let toml = format!(
        r#"upstream = "http://127.0.0.1:9"
[gate]
network = "base-sepolia"
token = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
pay_to = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
facilitator = "http://127.0.0.1:9"
memo_store = "sqlite://{}/state/memos.db"
[[routes]]
prefix = "/v1/quote"
price = "1"
"#,
        blocker.display()
    );
    let c = tollgate_gateway::Config::from_toml_str(&toml).unwrap();
    let e = tollgate_gateway::router(&c, &Secrets::new())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::StateDir { .. }), "{e:?}");
    let want = blocker.join("state").display().to_string();
    assert!(e.to_string().contains(&want), "{e} should name {want}");
}

#[tokio::test]
async fn x_service_sub_on_a_gateway_without_plans_is_a_402() {
    use tower::ServiceExt as _;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"upstream = "http://127.0.0.1:9"
[gate]
network = "base-sepolia"
token = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
pay_to = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
facilitator = "http://127.0.0.1:9"
memo_store = "sqlite://{}/memos.db"
[[routes]]
prefix = "/v1/quote"
price = "1"
"#,
        dir.path().display()
    );
    let c = tollgate_gateway::Config::from_toml_str(&toml).unwrap();
    let app = tollgate_gateway::router(&c, &Secrets::new()).await.unwrap();
    let req = axum::http::Request::get("/v1/quote")
        .header("X-Service-Sub", B256::repeat_byte(7).to_string())
        .body(axum::body::Body::empty())
        .unwrap();
    let res = app.oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let body = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"], "SubscriptionNotActive", "{body}");
    assert_eq!(body["reason"], "subscription_not_offered", "{body}");
    assert_eq!(
        body["message"], "this resource is not sold by subscription",
        "{body}"
    );
}
