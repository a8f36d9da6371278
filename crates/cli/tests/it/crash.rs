//! Crash at every step: `tollgate facilitator` (a test build, which carries failpoints) is aborted
//! at each labelled step of a flow (`TOLLGATE_FAILPOINT`, see `tollgate_facilitator::fault`),
//! restarted on the same store and chain, and the flow is finished the way a real client would
//! finish it (the same request again). Then the invariants: every payment settled exactly once on
//! chain, the store agrees, the client holds a valid proof, and an agent paying through a
//! facilitator that dies mid-payment pays once.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use alloy::primitives::{Address, B256, U256};
use serde_json::{Value, json};
use tollgate_agent::{Agent, Amount, PayRequest, SpendPolicy};
use tollgate_chain::{
    Chain,
    accounts::dev_accounts,
    contracts::{self, Token},
};
use tollgate_facilitator::fault::FAILPOINTS;
use tollgate_protocol::PaymentProof;

use crate::{
    devnet::{Running, spawn_devnet},
    facilitator::{
        Facilitator, payment_with_memo, register_provider, spawn_facilitator, write_config,
    },
};

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Waits for the armed facilitator to abort; it must not exit cleanly.
async fn aborted(f: &mut Facilitator, step: &str) {
    let status = tokio::time::timeout(Duration::from_secs(20), f.child.wait())
        .await
        .unwrap_or_else(|_| panic!("{step}: the facilitator did not reach its failpoint"))
        .unwrap();
    assert!(!status.success(), "{step}: exited cleanly ({status})");
}

/// A `tollgate devnet` process, and the config of a facilitator on it with its store beside it.
struct Scene {
    _devnet: Running,
    dir: tempfile::TempDir,
    rpc_url: String,
    c: tollgate_chain::Deployment,
    config: std::path::PathBuf,
    chain: tollgate_chain::rpc::RpcChain,
    accounts: Vec<tollgate_chain::accounts::DevAccount>,
}

impl Scene {
    /// `extra` TOML goes into the facilitator's config.
    async fn start(extra: &str) -> Self {
        tollgate_chain::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let devnet = spawn_devnet(&dir.path().join("devnet"), &[]).await;
        let rpc_url = devnet.info.rpc_url.clone().unwrap();
        let c = devnet.info.contracts;
        let config = write_config(dir.path(), &rpc_url, &c, extra);
        let accounts = dev_accounts(10);
        let chain = tollgate_testkit::connect(&rpc_url, 31337, &accounts)
            .await
            .unwrap();
        Self {
            _devnet: devnet,
            dir,
            rpc_url,
            c,
            config,
            chain,
            accounts,
        }
    }

    async fn balance(&self, who: Address) -> U256 {
        contracts::read(
            &self.chain,
            self.c.token,
            &Token::balanceOfCall { account: who },
        )
        .await
        .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorize_settles_exactly_once_whatever_step_it_dies_at() {
    let s = Scene::start("").await;
    let (c, config, accounts, chain) = (s.c, s.config.clone(), &s.accounts, &s.chain);
    let pay_to = Address::repeat_byte(0x99);
    let balance = || s.balance(pay_to);
    let http = reqwest::Client::new();
    let steps: Vec<&str> = FAILPOINTS
        .iter()
        .copied()
        .filter(|f| f.starts_with("authorize."))
        .collect();
    assert_eq!(steps.len(), 4);

    for (i, step) in steps.iter().enumerate() {
        let settled_before = U256::from(499_000 * i as u64);
        let memo = B256::repeat_byte(0x10 + i as u8);
        let body = json!({
            "signedPayment": payment_with_memo(31337, c.token, c.router, pay_to, now(), memo)
        });
        // 1. The facilitator dies at the step; the client gets no answer.
        let mut crashing = spawn_facilitator(&config, Some(step)).await;
        let reply = http
            .post(format!("{}/authorize", crashing.url))
            .json(&body)
            .send()
            .await;
        assert!(
            reply.is_err() || !reply.unwrap().status().is_success(),
            "{step}: answered"
        );
        aborted(&mut crashing, step).await;
        let on_chain = balance().await;
        if *step == "authorize.after-insert" {
            assert_eq!(on_chain, settled_before, "{step}: nothing broadcast yet");
        } else {
            assert_eq!(
                on_chain,
                settled_before + U256::from(499_000),
                "{step}: settled"
            );
        }

        // 2. Restarted on the same store, the same request gets a proof of one settlement.
        let fresh = spawn_facilitator(&config, None).await;
        let reply = http
            .post(format!("{}/authorize", fresh.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200, "{step}");
        let reply: Value = reply.json().await.unwrap();
        let proof = PaymentProof::decode(reply["proof"].as_str().unwrap()).unwrap();
        assert_eq!((proof.pay_to, proof.memo), (pay_to, memo), "{step}");
        assert_eq!(
            tollgate_chain::proof::recover(&proof).unwrap(),
            accounts[9].address
        );
        // 3. Again: the same proof; still exactly one transfer; the store says confirmed with
        //    the transaction the chain has.
        let again: Value = http
            .post(format!("{}/authorize", fresh.url))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(again["proof"], reply["proof"], "{step}");
        assert_eq!(
            balance().await,
            settled_before + U256::from(499_000),
            "{step}: exactly once"
        );
        let key = tollgate_facilitator::settlement_key(
            31337,
            c.token,
            accounts[3].address,
            body["signedPayment"]["authorization"]["nonce"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap(),
        );
        let status: Value = http
            .get(format!("{}/settlements/{key}", fresh.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(status["status"], "confirmed", "{step}: {status}");
        let receipt = chain.receipt(proof.tx_hash).await.unwrap().expect("mined");
        assert!(receipt.success, "{step}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_pays_once_through_a_facilitator_that_dies_mid_payment() {
    let s = Scene::start(&format!("listen = \"127.0.0.1:{}\"", crate::free_port())).await;
    let (c, config, accounts) = (s.c, s.config.clone(), &s.accounts);
    let pay_to = Address::repeat_byte(0x77);
    let mut crashing = spawn_facilitator(&config, Some("authorize.after-receipt")).await;

    // A real gate in front of a handler that counts what it serves.
    let gate = tollgate_gate::Gate::builder()
        .network("tollgate-devnet")
        .token(c.token, "USD Coin", "2")
        .pay_to(pay_to)
        .facilitator(&crashing.url)
        .build()
        .await
        .unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&served);
    let app = axum::Router::new()
        .route(
            "/r",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { "paid content" }
            }),
        )
        .route_layer(gate.payment_gate([tollgate_gate::Pricing::one_time(500_000)]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}/r", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let agent = Agent::from_hex_key(
        &accounts[4].private_key.to_string(),
        SpendPolicy::new(
            Amount::from_units(1_000_000),
            Amount::from_units(10_000_000),
        ),
    )
    .unwrap();
    let paying = tokio::spawn({
        let agent = agent.clone();
        async move { agent.pay(PayRequest::get(&api).unwrap()).await }
    });
    // The facilitator settles on chain and dies before it records the proof; the agent keeps
    // sending the same signed authorization until a facilitator answers again.
    aborted(&mut crashing, "authorize.after-receipt").await;
    let _fresh = spawn_facilitator(&config, None).await;
    let paid = tokio::time::timeout(Duration::from_secs(90), paying)
        .await
        .expect("the agent finished")
        .unwrap()
        .expect("paid");
    assert_eq!(paid.status, 200);
    assert_eq!(&paid.body[..], b"paid content");
    assert_eq!(served.load(Ordering::SeqCst), 1);
    assert_eq!(agent.spent(), Amount::from_units(500_000), "paid once");
    assert_eq!(s.balance(pay_to).await, U256::from(499_000), "settled once");
}

/// JSON-RPC on the devnet process (time travel).
async fn rpc(http: &reqwest::Client, url: &str, method: &str, params: Value) -> Value {
    let r: Value = http
        .post(url)
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(r.get("error").is_none(), "{method}: {r}");
    r["result"].clone()
}

/// Polls `check` every 200 ms until it holds (60 s at most).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Subscribe, deduct, the on-chain overage charge, renewals and webhook delivery, each aborted at
/// each of its failpoints and finished after a restart: one subscription per signed intent, one
/// deduction per idempotency key, every charge and every cycle billed exactly once on chain, and
/// every event delivered at least once under one `webhook-id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_metering_renewals_and_webhooks_survive_a_crash_at_every_step() {
    use std::{collections::HashMap, sync::Mutex};
    use tollgate_agent::Subscribe;
    use tollgate_chain::contracts::Subscriptions;

    let port = crate::free_port();
    let s = Scene::start(&format!(
        "listen = \"127.0.0.1:{port}\"\n\
         [subscriptions]\nkeeper_interval_secs = 1\noverage_batch_amount = 1\noverage_batch_secs = 1\n\
         [webhooks]\nallow_private_targets = true\n"
    ))
    .await;
    let (c, config, accounts, chain, dir) = (s.c, s.config.clone(), &s.accounts, &s.chain, &s.dir);
    // The same facilitator without its keeper, for the steps that must not race it.
    let quiet = dir.path().join("facilitator-no-keeper.toml");
    std::fs::write(
        &quiet,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("keeper_interval_secs = 1", "keeper_interval_secs = 0"),
    )
    .unwrap();
    let http = reqwest::Client::new();
    let fac = format!("http://127.0.0.1:{port}");
    let balance = |who: Address| s.balance(who);
    let post = |path: String, body: Value, key: Option<String>| {
        let (http, fac) = (http.clone(), fac.clone());
        async move {
            let mut r = http.post(format!("{fac}{path}")).json(&body);
            if let Some(k) = key {
                r = r.bearer_auth(k);
            }
            r.send().await
        }
    };
    let json_of = |r: reqwest::Result<reqwest::Response>| async move {
        let r = r.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        r.json::<Value>().await.unwrap()
    };

    // Setup on a healthy facilitator: a provider, its plan (1.00 per hour, to itself), a webhook
    // receiver that logs every delivery's webhook-id.
    let mut running = spawn_facilitator(&config, None).await;
    let provider = &accounts[5];
    let key = register_provider(&http, &fac, &provider.signer()).await;
    let deliveries: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&deliveries);
    let receiver = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let log = Arc::clone(&log);
            async move {
                let id = headers["webhook-id"].to_str().unwrap().to_owned();
                log.lock().unwrap().push(id);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, receiver).await });

    // The endpoint exists before any event, so every event has a delivery.
    let endpoint = json_of(
        post(
            "/webhooks/endpoints".into(),
            json!({ "url": hook }),
            Some(key.clone()),
        )
        .await,
    )
    .await;
    assert!(endpoint["id"].is_string());
    let plan = json_of(
        post(
            "/plans".into(),
            json!({ "network": "tollgate-devnet", "amount": "1000000", "interval": 3600,
                    "idempotencyKey": "crash-plan" }),
            Some(key.clone()),
        )
        .await,
    )
    .await;
    let plan_id: B256 = plan["planId"].as_str().unwrap().parse().unwrap();
    // 1. Subscribe, dying after the broadcast and after the receipt: the agent sends the same
    //    signed intent again and gets the one subscription it created.
    let mut subscriptions = Vec::new();
    for (step, who) in [
        ("subscribe.after-broadcast", 6),
        ("subscribe.after-receipt", 7),
    ] {
        drop(running);
        let mut crashing = spawn_facilitator(&config, Some(step)).await;
        let agent = Agent::from_hex_key(
            &accounts[who].private_key.to_string(),
            SpendPolicy::new(
                Amount::from_units(10_000_000),
                Amount::from_units(100_000_000),
            ),
        )
        .unwrap();
        let before = balance(accounts[who].address).await;
        let subscribing = tokio::spawn({
            let (agent, fac) = (agent.clone(), fac.clone());
            async move {
                agent
                    .subscribe(
                        Subscribe::new(plan_id, Amount::from_units(5_000_000)).facilitator(&fac),
                    )
                    .await
            }
        });
        aborted(&mut crashing, step).await;
        running = spawn_facilitator(&config, None).await;
        let sub = tokio::time::timeout(Duration::from_secs(90), subscribing)
            .await
            .expect("subscribed in time")
            .unwrap()
            .unwrap_or_else(|e| panic!("{step}: {e}"));
        let nonce: U256 = contracts::read(
            chain,
            c.subscriptions,
            &Subscriptions::noncesCall {
                subscriber: accounts[who].address,
            },
        )
        .await
        .unwrap();
        assert_eq!(
            nonce,
            U256::from(1),
            "{step}: one subscription signed and created"
        );
        assert_eq!(
            before - balance(accounts[who].address).await,
            U256::from(1_000_000),
            "{step}: the first cycle billed once"
        );
        subscriptions.push((sub.id, who));
    }
    let (sub_id, subscriber) = subscriptions[0];
    let subscriber = accounts[subscriber].address;

    // 2. A deduction, dying after its commit: the same idempotency key again answers the same
    //    ledger, nothing deducted twice.
    drop(running);
    let mut crashing = spawn_facilitator(&quiet, Some("deduct.after-commit")).await;
    let usage_path = format!("/subscriptions/{sub_id}/usage");
    let deduct = json!({ "amount": "100", "idempotencyKey": "crash-1" });
    let reply = post(usage_path.clone(), deduct.clone(), Some(key.clone())).await;
    assert!(reply.is_err() || !reply.unwrap().status().is_success());
    aborted(&mut crashing, "deduct.after-commit").await;
    running = spawn_facilitator(&quiet, None).await;
    let v = json_of(post(usage_path.clone(), deduct.clone(), Some(key.clone())).await).await;
    assert_eq!(v["used"], "100", "deducted once: {v}");
    // 3. The keeper's overage charge, dying once it began and once the chain confirmed it.
    let before = balance(subscriber).await;
    drop(running);
    let mut crashing = spawn_facilitator(&config, Some("charge.after-begin")).await;
    aborted(&mut crashing, "charge.after-begin").await;
    running = spawn_facilitator(&config, None).await;
    let usage = || {
        let (http, fac, key, path) = (http.clone(), fac.clone(), key.clone(), usage_path.clone());
        async move {
            http.get(format!("{fac}{path}"))
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    eventually("the first charge", || async {
        usage().await["charged"] == "100"
    })
    .await;
    assert_eq!(usage().await["used"], "100", "deducted once");
    assert_eq!(
        before - balance(subscriber).await,
        U256::from(100),
        "charged once"
    );
    drop(running);
    let mut crashing = spawn_facilitator(&config, Some("charge.after-receipt")).await;
    let v = json_of(
        post(
            usage_path.clone(),
            json!({ "amount": "250", "idempotencyKey": "crash-2" }),
            Some(key.clone()),
        )
        .await,
    )
    .await;
    assert_eq!(v["used"], "350");
    aborted(&mut crashing, "charge.after-receipt").await;
    running = spawn_facilitator(&config, None).await;
    eventually("the second charge", || async {
        usage().await["charged"] == "350"
    })
    .await;
    assert_eq!(
        before - balance(subscriber).await,
        U256::from(350),
        "each charge once"
    );

    // 4. Renewals, dying after the collect was broadcast and after its receipt: the chain's
    //    cycle moves by one per period and the subscriber pays each cycle once.
    for (n, step) in ["renew.after-broadcast", "renew.after-receipt"]
        .into_iter()
        .enumerate()
    {
        drop(running);
        let before = balance(subscriber).await;
        rpc(&http, &s.rpc_url, "evm_increaseTime", json!([3_601])).await;
        rpc(&http, &s.rpc_url, "evm_mine", json!([])).await;
        let mut crashing = spawn_facilitator(&config, Some(step)).await;
        aborted(&mut crashing, step).await;
        running = spawn_facilitator(&config, None).await;
        let cycle = || async {
            contracts::read(
                chain,
                c.subscriptions,
                &Subscriptions::subscriptionsCall { id: sub_id },
            )
            .await
            .unwrap()
            .cycle
        };
        let want = 2 + n as u32;
        eventually(step, || async { cycle().await >= want }).await;
        // Another keeper run finds nothing more to collect.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(cycle().await, want, "{step}: one cycle per period");
        assert_eq!(
            before - balance(subscriber).await,
            U256::from(1_000_000),
            "{step}: the cycle billed once"
        );
    }

    // The store's renewal log agrees with the chain, also for the cycle whose record the crash
    // cut off (the keeper records renewals from the chain's logs too).
    let store = tollgate_facilitator::store::open(&format!(
        "sqlite://{}",
        dir.path().join("facilitator.db").display()
    ))
    .await
    .unwrap();
    eventually("the renewals recorded", || async {
        store
            .renewals("tollgate-devnet", sub_id)
            .await
            .unwrap()
            .iter()
            .map(|r| r.cycle)
            .collect::<Vec<_>>()
            == [2, 3]
    })
    .await;

    // 5. Webhooks: the receiver gets events, the facilitator dies before recording that;
    //    after the restart every event arrives (again), always under its own webhook-id. A new
    //    plan makes sure there is an event to deliver.
    drop(running);
    let mut crashing = spawn_facilitator(&config, Some("webhook.after-send")).await;
    let _ = post(
        "/plans".into(),
        json!({ "network": "tollgate-devnet", "amount": "2000000", "interval": 3600,
                "idempotencyKey": "crash-plan-2" }),
        Some(key.clone()),
    )
    .await;
    aborted(&mut crashing, "webhook.after-send").await;
    let sent_before_crash = deliveries.lock().unwrap().len();
    assert!(sent_before_crash > 0, "delivered before the crash");
    running = spawn_facilitator(&config, None).await;
    let events: Value = http
        .get(format!("{fac}/events?limit=500"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<String> = events["data"]
        .as_array()
        .or(events.as_array())
        .expect("events")
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(ids.len() >= 5, "{events}");
    // Every event arrives, and what the crash cut off arrives again under the same id (the
    // receiver logged it before the facilitator died, the restarted one sends it again).
    let redelivered = || {
        let seen = deliveries.lock().unwrap().clone();
        let mut count: HashMap<String, usize> = HashMap::new();
        for id in seen {
            *count.entry(id).or_default() += 1;
        }
        count.values().any(|&n| n >= 2)
    };
    eventually("every event delivered, the cut-off ones twice", || async {
        let seen = deliveries.lock().unwrap().clone();
        ids.iter().all(|id| seen.contains(id)) && redelivered()
    })
    .await;
    let seen = deliveries.lock().unwrap().clone();
    assert!(
        seen.iter().all(|id| ids.contains(id)),
        "only ids of real events"
    );
    drop(running);
}

/// The x402 `/settle` a resource server calls, aborted at each of its steps: the server's retry
/// with the same payload and `Idempotency-Key` answers success with the one transfer on chain;
/// anyone else repeating it gets `duplicate_settlement` naming that transfer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_settle_transfers_exactly_once_whatever_step_it_dies_at() {
    use tollgate_chain::authorization::{TransferWithAuthorization, sign, token_domain};

    let s = Scene::start("").await;
    let (c, config, accounts, chain) = (s.c, s.config.clone(), &s.accounts, &s.chain);
    let pay_to = Address::repeat_byte(0x55);
    let payer = &accounts[2];
    let http = reqwest::Client::new();
    let steps: Vec<&str> = FAILPOINTS
        .iter()
        .copied()
        .filter(|f| f.starts_with("settle."))
        .collect();
    assert_eq!(steps.len(), 3);
    for (i, step) in steps.iter().enumerate() {
        let nonce = B256::repeat_byte(0x20 + i as u8);
        let now = now();
        let auth = TransferWithAuthorization {
            from: payer.address,
            to: pay_to,
            value: U256::from(10_000),
            validAfter: U256::from(now - 600),
            validBefore: U256::from(now + 600),
            nonce,
        };
        let signature = sign(
            &payer.signer(),
            &auth,
            &token_domain("USD Coin", "2", 31337, c.token),
        )
        .unwrap();
        let body = json!({
            "x402Version": 1,
            "paymentPayload": {
                "x402Version": 1, "scheme": "exact", "network": "tollgate-devnet",
                "payload": {
                    "signature": signature,
                    "authorization": {
                        "from": payer.address, "to": pay_to, "value": "10000",
                        "validAfter": (now - 600).to_string(), "validBefore": (now + 600).to_string(),
                        "nonce": nonce,
                    }
                }
            },
            "paymentRequirements": {
                "scheme": "exact", "network": "tollgate-devnet", "maxAmountRequired": "10000",
                "resource": "http://127.0.0.1/r", "description": "", "mimeType": "application/json",
                "payTo": pay_to, "maxTimeoutSeconds": 60, "asset": c.token,
                "extra": { "name": "USD Coin", "version": "2" }
            }
        });
        let mut crashing = spawn_facilitator(&config, Some(step)).await;
        let reply = http
            .post(format!("{}/settle", crashing.url))
            .header("Idempotency-Key", "resource-server-1")
            .json(&body)
            .send()
            .await;
        assert!(
            reply.is_err() || !reply.unwrap().status().is_success(),
            "{step}: answered"
        );
        aborted(&mut crashing, step).await;
        let fresh = spawn_facilitator(&config, None).await;
        for attempt in 0..2 {
            let reply: Value = http
                .post(format!("{}/settle", fresh.url))
                .header("Idempotency-Key", "resource-server-1")
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(reply["success"], true, "{step} #{attempt}: {reply}");
            let tx: B256 = reply["transaction"].as_str().unwrap().parse().unwrap();
            assert!(chain.receipt(tx).await.unwrap().expect("mined").success);
        }
        let other: Value = http
            .post(format!("{}/settle", fresh.url))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(other["success"], false, "{step}: {other}");
        assert_eq!(other["errorReason"], "duplicate_settlement", "{step}");
        assert_eq!(
            s.balance(pay_to).await,
            U256::from(10_000 * (i as u64 + 1)),
            "{step}: exactly once"
        );
    }
}

/// Each failpoint the facilitator declares is exercised by a test in this file.
#[test]
fn every_failpoint_is_crashed_at() {
    let tests = include_str!("crash.rs");
    let body = &tests[..tests.find("fn every_failpoint_is_crashed_at").unwrap()];
    for f in FAILPOINTS {
        let prefix = f.split('.').next().unwrap();
        assert!(
            body.contains(&format!("\"{f}\""))
                || body.contains(&format!("f.starts_with(\"{prefix}.\")")),
            "no crash test reaches {f}"
        );
    }
}
