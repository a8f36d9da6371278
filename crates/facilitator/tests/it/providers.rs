//! Provider self-registration, API keys and plans over real HTTP, against the devnet.

use alloy::{
    primitives::{Address, B256, U256, keccak256},
    signers::{SignerSync, local::Secp256k1Signer},
    sol_types::SolCall,
};
use serde_json::{Value, json};
use tollgate_chain::{
    Error as ChainError, Revert, TxRequest, WaitOptions,
    contracts::{self, Subscriptions, Token},
};

use crate::support::{Backend, Harness, NETWORK};

async fn devnet() -> Harness {
    Harness::new(Backend::Devnet).await
}

async fn challenge(h: &Harness, address: Address) -> String {
    let (s, v) = h
        .post("/providers/challenge", &json!({ "address": address }))
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(v["expiresAt"].as_u64().unwrap() > h.now().await);
    v["challenge"].as_str().unwrap().to_owned()
}

fn sign(signer: &Secp256k1Signer, text: &str) -> String {
    let sig = signer.sign_message_sync(text.as_bytes()).unwrap();
    alloy::primitives::hex::encode_prefixed(sig.as_bytes())
}

async fn register_with(
    h: &Harness,
    address: Address,
    challenge: &str,
    signature: &str,
) -> (u16, Value) {
    h.post(
        "/providers/register",
        &json!({ "address": address, "challenge": challenge, "signature": signature }),
    )
    .await
}

/// Registers `signer` and returns its API key.
async fn register(h: &Harness, signer: &Secp256k1Signer) -> String {
    let text = challenge(h, signer.address()).await;
    let (s, v) = register_with(h, signer.address(), &text, &sign(signer, &text)).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["provider"], json!(signer.address()));
    let key = v["apiKey"].as_str().unwrap().to_owned();
    assert!(key.starts_with("tg_") && key.len() == 67, "{key}");
    key
}

async fn post_auth(h: &Harness, path: &str, key: Option<&str>, body: &Value) -> (u16, Value) {
    let mut r = h.http.post(format!("{}{path}", h.url)).json(body);
    if let Some(key) = key {
        r = r.bearer_auth(key);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn plan_body(amount: u64, key: &str) -> Value {
    json!({ "network": NETWORK, "amount": amount.to_string(), "interval": 3600, "idempotencyKey": key })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_checks_signature_and_challenge() {
    let h = devnet().await;
    let me = h.account(3).signer();
    let other = h.account(4).signer();

    // A signature by someone else: 401, and the challenge stays usable.
    let text = challenge(&h, me.address()).await;
    let (s, v) = register_with(&h, me.address(), &text, &sign(&other, &text)).await;
    assert_eq!(s, 401, "{v}");
    assert_eq!(v["error"]["code"], "Unauthorized");
    // Garbage signature: 401 too.
    let (s, _) = register_with(&h, me.address(), &text, "0x1234").await;
    assert_eq!(s, 401);

    // Good: a key, once.
    let (s, v) = register_with(&h, me.address(), &text, &sign(&me, &text)).await;
    assert_eq!(s, 201, "{v}");
    // Reused challenge: refused.
    let (s, v) = register_with(&h, me.address(), &text, &sign(&me, &text)).await;
    assert_eq!(s, 401, "{v}");

    // A challenge issued to `me`, presented (and signed) by another address: refused.
    let text = challenge(&h, me.address()).await;
    let (s, _) = register_with(&h, other.address(), &text, &sign(&other, &text)).await;
    assert_eq!(s, 401);

    // Unknown challenge (never issued), correctly signed: refused.
    let forged = text.replace("Nonce: 0x", "Nonce: 0xff");
    let (s, _) = register_with(&h, me.address(), &forged, &sign(&me, &forged)).await;
    assert_eq!(s, 401);

    // Expired challenge: refused.
    let expired = "Tollgate provider registration\nexpired";
    let now = h.now().await;
    h.facilitator
        .store()
        .insert_provider_challenge(keccak256(expired), me.address(), now - 1, now - 400)
        .await
        .unwrap();
    let (s, v) = register_with(&h, me.address(), expired, &sign(&me, expired)).await;
    assert_eq!(s, 401, "{v}");

    // Malformed requests are 400s in the one error shape.
    let (s, v) = h
        .post("/providers/challenge", &json!({ "address": "nope" }))
        .await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["code"], "InvalidField");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_authenticate_and_revoke() {
    let h = devnet().await;
    let key = register(&h, &h.account(3).signer()).await;
    let body = plan_body(0, "auth");

    for (k, what) in [
        (None, "missing"),
        (Some("tg_00"), "wrong"),
        (Some(""), "empty"),
    ] {
        let (s, v) = post_auth(&h, "/plans", k, &body).await;
        assert_eq!(s, 401, "{what}: {v}");
        assert_eq!(v["error"]["code"], "Unauthorized", "{what}");
    }
    // Not Bearer.
    let r = h
        .http
        .post(format!("{}/plans", h.url))
        .header("authorization", format!("Basic {key}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);

    // The key works (the zero amount is refused after authentication).
    let (s, v) = post_auth(&h, "/plans", Some(&key), &body).await;
    assert_eq!(s, 422, "{v}");
    assert_eq!(v["error"]["code"], "InvalidPlan");

    let (s, v) = post_auth(&h, "/providers/keys/revoke", Some(&key), &json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["revoked"], true);
    let (s, v) = post_auth(&h, "/plans", Some(&key), &body).await;
    assert_eq!(s, 401, "revoked: {v}");
    let (s, _) = post_auth(&h, "/providers/keys/revoke", Some(&key), &json!({})).await;
    assert_eq!(s, 401);
}

/// Every operation the OpenAPI document marks as needing an API key refuses a request with no
/// key, a wrong key and a revoked key alike: 401 `Unauthorized` before anything else is looked at
/// (the dashboard sends a browser without a key to its login form instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_provider_endpoint_refuses_missing_wrong_and_revoked_keys() {
    let h = devnet().await;
    let revoked = register(&h, &h.account(3).signer()).await;
    let (s, _) = post_auth(&h, "/providers/keys/revoke", Some(&revoked), &json!({})).await;
    assert_eq!(s, 200);
    let wrong = format!("tg_{}", "ab".repeat(32));

    let (s, doc) = h.get("/openapi.json").await;
    assert_eq!(s, 200);
    let mut checked = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            if op["security"].as_array().is_none_or(|s| s.is_empty()) {
                continue;
            }
            let url = format!(
                "{}{}",
                h.url,
                path.replace("{id}", &format!("0x{}", "11".repeat(32)))
                    .replace("{event_id}", "evt_1")
            );
            let method: reqwest::Method = method.to_uppercase().parse().unwrap();
            for (key, what) in [
                (None, "missing"),
                (Some(wrong.as_str()), "wrong"),
                (Some(revoked.as_str()), "revoked"),
            ] {
                let mut r = h.http.request(method.clone(), &url).json(&json!({}));
                if let Some(key) = key {
                    r = r.bearer_auth(key);
                }
                let r = r.send().await.unwrap();
                let status = r.status().as_u16();
                if path == "/dashboard" && key.is_none() {
                    assert_eq!(status, 303, "{method} {path}: {what}");
                    continue;
                }
                assert_eq!(status, 401, "{method} {path}: {what}");
                if path != "/dashboard" {
                    let v: Value = r.json().await.unwrap();
                    assert_eq!(
                        v["error"]["code"], "Unauthorized",
                        "{method} {path}: {what}"
                    );
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} operations need a key?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_create_show_deprecate() {
    let h = devnet().await;
    let provider = h.account(3).signer();
    let key = register(&h, &provider).await;
    let subs = h.fixture.deployment.subscriptions;

    let (s, plan) = post_auth(&h, "/plans", Some(&key), &plan_body(250_000, "basic")).await;
    assert_eq!(s, 201, "{plan}");
    let plan_id: B256 = plan["planId"].as_str().unwrap().parse().unwrap();
    assert_eq!(plan["network"], NETWORK);
    assert_eq!(plan["amount"], "250000");
    assert_eq!(plan["interval"], 3600);
    assert_eq!(plan["payTo"], json!(provider.address()));
    assert_eq!(plan["provider"], json!(provider.address()));
    assert_eq!(plan["deprecated"], false);

    // The on-chain terms match.
    let onchain = contracts::read(
        &*h.fixture.chain,
        subs,
        &Subscriptions::plansCall { planId: plan_id },
    )
    .await
    .unwrap();
    assert_eq!(onchain.token, h.fixture.deployment.token);
    assert_eq!(onchain.payTo, provider.address());
    assert_eq!(onchain.amount, U256::from(250_000));
    assert_eq!(onchain.interval, 3600);
    assert!(!onchain.deprecated);
    let relayer = h.account(crate::support::RELAYER).address;
    assert_eq!((onchain.provider, onchain.operator), (relayer, relayer));

    // The same idempotency key again: the same plan, nothing new.
    let block = h.fixture.chain.block_number().await.unwrap();
    let (s, again) = post_auth(&h, "/plans", Some(&key), &plan_body(250_000, "basic")).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again, plan);
    assert_eq!(h.fixture.chain.block_number().await.unwrap(), block);

    // Show (public).
    let (s, shown) = h.get(&format!("/plans/{plan_id}?network={NETWORK}")).await;
    assert_eq!(s, 200);
    assert_eq!(shown, plan);
    let (s, _) = h.get(&format!("/plans/{plan_id}")).await;
    assert_eq!(s, 200, "the only network is the default");
    let (s, v) = h.get(&format!("/plans/{}", B256::repeat_byte(9))).await;
    assert_eq!(s, 404, "{v}");
    let (s, _) = h.get("/plans/xyz").await;
    assert_eq!(s, 400);

    // Another provider may not deprecate it.
    let intruder = register(&h, &h.account(4).signer()).await;
    let path = format!("/plans/{plan_id}/deprecate");
    let (s, v) = post_auth(&h, &path, Some(&intruder), &json!({})).await;
    assert_eq!(s, 403, "{v}");
    assert_eq!(v["error"]["code"], "Forbidden");
    let (s, _) = post_auth(&h, &path, None, &json!({})).await;
    assert_eq!(s, 401);

    // A subscriber can join before deprecation.
    let subscriber = h.account(5).address;
    approve(&h, subscriber).await;
    subscribe(&h, subscriber, plan_id).await.expect("open plan");

    // The owner deprecates it (idempotently).
    let (s, v) = post_auth(&h, &path, Some(&key), &json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["deprecated"], true);
    let (s, v) = post_auth(&h, &path, Some(&key), &json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["deprecated"], true);

    // Subscribing on-chain now reverts PlanDeprecated.
    match subscribe(&h, subscriber, plan_id).await {
        Err(ChainError::Revert(Revert::PlanDeprecated { plan_id: p })) => assert_eq!(p, plan_id),
        other => panic!("expected PlanDeprecated, got {other:?}"),
    }
}

/// The start of the "an agent provides" loop: a fresh key, never a dev account, registers with
/// no human step and publishes a plan that pays itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_agent_registers_and_publishes_a_plan_paying_itself() {
    let h = devnet().await;
    let agent = Secp256k1Signer::random();
    assert!(
        h.fixture
            .accounts
            .iter()
            .all(|a| a.address != agent.address())
    );
    let key = register(&h, &agent).await;
    let body = json!({
        "network": NETWORK, "amount": "1000", "idempotencyKey": "agent-plan",
        "payTo": agent.address()
    });
    let (s, plan) = post_auth(&h, "/plans", Some(&key), &body).await;
    assert_eq!(s, 201, "{plan}");
    assert_eq!(plan["payTo"], json!(agent.address()));
    assert_eq!(plan["provider"], json!(agent.address()));
    assert_eq!(plan["interval"], 2_592_000, "the default interval: 30 days");
}

async fn approve(h: &Harness, who: Address) {
    let call = Token::approveCall {
        spender: h.fixture.deployment.subscriptions,
        value: U256::from(1_000_000_000u64),
    };
    h.fixture
        .chain
        .send_and_wait(
            TxRequest::call(who, h.fixture.deployment.token, call.abi_encode()),
            WaitOptions::default(),
        )
        .await
        .unwrap();
}

async fn subscribe(h: &Harness, who: Address, plan_id: B256) -> Result<(), ChainError> {
    let call = Subscriptions::subscribeCall {
        planId: plan_id,
        maxOverage: U256::ZERO,
    };
    h.fixture
        .chain
        .send_and_wait(
            TxRequest::call(who, h.fixture.deployment.subscriptions, call.abi_encode()),
            WaitOptions::default(),
        )
        .await
        .map(drop)
}
