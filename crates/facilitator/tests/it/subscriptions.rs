//! `POST /subscriptions`, `GET /subscriptions/{id}` and `GET /subscriptions/quote`: the relayed
//! `subscribeWithSig` on the devnet, its idempotency, and the refusals that create nothing.

use alloy::{
    primitives::{Address, B256, U256},
    signers::local::Secp256k1Signer,
    sol_types::SolCall,
};
use serde_json::{Value, json};
use tollgate_chain::{
    TxRequest, WaitOptions,
    authorization::{Permit, Subscribe, sign, subscriptions_domain, token_domain},
    contracts::{self, Subscriptions, Token},
};

use crate::support::{Backend, Harness, NETWORK};

const PROVIDER: usize = 5;
const PAY_TO: usize = 6;
const SUBSCRIBER: usize = 2;
const AMOUNT: u64 = 1_000_000;
const MAX_OVERAGE: u64 = 250_000;
const INTERVAL: u64 = 30 * 24 * 3600;

/// Creates a plan on-chain from the provider account and returns its id.
async fn create_plan(h: &Harness, salt: u8) -> B256 {
    let f = &h.fixture;
    let provider = h.account(PROVIDER).address;
    let call = Subscriptions::createPlanCall {
        token: f.deployment.token,
        payTo: h.account(PAY_TO).address,
        amount: U256::from(AMOUNT),
        interval: INTERVAL,
        operator: Address::ZERO,
        salt: B256::repeat_byte(salt),
    };
    f.chain
        .send_and_wait(
            TxRequest::call(provider, f.deployment.subscriptions, call.abi_encode()),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    contracts::read(
        f.chain.as_ref(),
        f.deployment.subscriptions,
        &Subscriptions::planIdForCall {
            provider,
            salt: B256::repeat_byte(salt),
        },
    )
    .await
    .unwrap()
}

async fn deprecate(h: &Harness, plan_id: B256) {
    let f = &h.fixture;
    let call = Subscriptions::deprecatePlanCall { planId: plan_id };
    f.chain
        .send_and_wait(
            TxRequest::call(
                h.account(PROVIDER).address,
                f.deployment.subscriptions,
                call.abi_encode(),
            ),
            WaitOptions::default(),
        )
        .await
        .unwrap();
}

async fn subscriber_nonce(h: &Harness, who: Address) -> U256 {
    contracts::read(
        h.fixture.chain.as_ref(),
        h.fixture.deployment.subscriptions,
        &Subscriptions::noncesCall { subscriber: who },
    )
    .await
    .unwrap()
}

/// The body an agent posts: a `Subscribe` intent with the current nonce and a permit for twelve
/// cycles.
async fn request(h: &Harness, signer: &Secp256k1Signer, plan_id: B256) -> Value {
    let f = &h.fixture;
    let who = signer.address();
    let now = h.now().await;
    let chain_id = f.chain.chain_id();
    let subs = f.deployment.subscriptions;
    let intent = Subscribe {
        planId: plan_id,
        subscriber: who,
        maxOverage: U256::from(MAX_OVERAGE),
        nonce: subscriber_nonce(h, who).await,
        deadline: U256::from(now + 600),
    };
    let signature = sign(signer, &intent, &subscriptions_domain(chain_id, subs)).unwrap();
    let permit_nonce = contracts::read(
        f.chain.as_ref(),
        f.deployment.token,
        &Token::noncesCall { owner: who },
    )
    .await
    .unwrap();
    let value = U256::from((AMOUNT + MAX_OVERAGE) * 12);
    let permit = Permit {
        owner: who,
        spender: subs,
        value,
        nonce: permit_nonce,
        deadline: U256::from(now + 3600),
    };
    let permit_sig = sign(
        signer,
        &permit,
        &token_domain("USD Coin", "2", chain_id, f.deployment.token),
    )
    .unwrap();
    json!({
        "network": NETWORK,
        "planId": plan_id,
        "subscriber": who,
        "maxOverage": MAX_OVERAGE.to_string(),
        "deadline": now + 600,
        "signature": signature,
        "permit": { "value": value.to_string(), "deadline": now + 3600, "signature": permit_sig },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_relays_bills_the_first_cycle_and_is_idempotent() {
    let h = Harness::new(Backend::Devnet).await;
    let plan_id = create_plan(&h, 1).await;
    let signer = h.account(SUBSCRIBER).signer();
    let who = signer.address();
    let pay_to = h.account(PAY_TO).address;
    let (s0, p0) = (h.token_balance(who).await, h.token_balance(pay_to).await);

    let (status, quote) = h
        .get(&format!(
            "/subscriptions/quote?network={NETWORK}&planId={plan_id}&subscriber={who}"
        ))
        .await;
    assert_eq!(status, 200, "{quote}");
    assert_eq!(quote["plan"]["amount"], AMOUNT.to_string());
    assert_eq!(quote["plan"]["deprecated"], false);
    assert_eq!(quote["nonce"], "0");

    let body = request(&h, &signer, plan_id).await;
    let before = h.now().await;
    let (status, sub) = h.post("/subscriptions", &body).await;
    assert_eq!(status, 200, "{sub}");
    assert_eq!(sub["status"], "ACTIVE");
    assert_eq!(sub["planId"], json!(plan_id));
    assert_eq!(sub["cycle"], 1);
    assert_eq!(sub["allowance"]["cap"], MAX_OVERAGE.to_string());
    assert_eq!(sub["allowance"]["remaining"], MAX_OVERAGE.to_string());
    let paid_through = sub["paidThrough"].as_u64().unwrap();
    assert!(
        (before + INTERVAL - 5..=before + INTERVAL + 60).contains(&paid_through),
        "{paid_through} vs {before} + {INTERVAL}"
    );
    assert!(sub["txHash"].is_string());
    assert_eq!(h.token_balance(pay_to).await, p0 + U256::from(AMOUNT));
    assert_eq!(h.token_balance(who).await, s0 - U256::from(AMOUNT));
    let id = sub["id"].as_str().unwrap().to_owned();

    // The same request again: the same subscription, no second charge.
    let (status, again) = h.post("/subscriptions", &body).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["id"], sub["id"]);
    assert_eq!(again["txHash"], sub["txHash"]);
    assert_eq!(h.token_balance(pay_to).await, p0 + U256::from(AMOUNT));
    assert_eq!(subscriber_nonce(&h, who).await, U256::from(1));

    let (status, shown) = h
        .get(&format!("/subscriptions/{id}?network={NETWORK}"))
        .await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["status"], "ACTIVE");
    assert_eq!(shown["paidThrough"], sub["paidThrough"]);
    let (status, _) = h
        .get(&format!("/subscriptions/{}", B256::repeat_byte(0x77)))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprecated_plans_take_no_new_subscriptions() {
    let h = Harness::new(Backend::Devnet).await;
    let plan_id = create_plan(&h, 2).await;
    deprecate(&h, plan_id).await;
    let signer = h.account(SUBSCRIBER).signer();
    let pay_to = h.account(PAY_TO).address;
    let p0 = h.token_balance(pay_to).await;
    let body = request(&h, &signer, plan_id).await;
    let (status, reply) = h.post("/subscriptions", &body).await;
    assert_eq!(status, 422, "{reply}");
    assert_eq!(reply["error"]["code"], "PlanDeprecated");
    assert_eq!(h.token_balance(pay_to).await, p0);
    assert_eq!(subscriber_nonce(&h, signer.address()).await, U256::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poor_subscriber_gets_insufficient_funds_and_nothing_is_created() {
    let h = Harness::new(Backend::Devnet).await;
    let plan_id = create_plan(&h, 3).await;
    let poor = Secp256k1Signer::random();
    let body = request(&h, &poor, plan_id).await;
    let (status, reply) = h.post("/subscriptions", &body).await;
    assert_eq!(status, 402, "{reply}");
    assert_eq!(reply["error"]["code"], "InsufficientFunds");
    assert_eq!(subscriber_nonce(&h, poor.address()).await, U256::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_signatures_and_unknown_plans_are_refused() {
    let h = Harness::new(Backend::Devnet).await;
    let plan_id = create_plan(&h, 4).await;
    let signer = h.account(SUBSCRIBER).signer();
    let mut body = request(&h, &signer, plan_id).await;
    body["maxOverage"] = json!("1");
    let (status, reply) = h.post("/subscriptions", &body).await;
    assert_eq!(status, 422, "{reply}");
    assert_eq!(reply["error"]["code"], "InvalidSignature");

    let body = request(&h, &signer, B256::repeat_byte(0x99)).await;
    let (status, reply) = h.post("/subscriptions", &body).await;
    assert_eq!(status, 422, "{reply}");
    assert_eq!(reply["error"]["code"], "UnknownPlan");

    let mut body = request(&h, &signer, plan_id).await;
    body["network"] = json!("nowhere");
    let (status, reply) = h.post("/subscriptions", &body).await;
    assert_eq!(status, 422, "{reply}");
    assert_eq!(subscriber_nonce(&h, signer.address()).await, U256::ZERO);
}
