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
    devnet::spawn_devnet,
    facilitator::{Facilitator, payment_with_memo, spawn_facilitator, write_config},
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorize_settles_exactly_once_whatever_step_it_dies_at() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let devnet = spawn_devnet(&dir.path().join("devnet"), &[]).await;
    let rpc_url = devnet.info.rpc_url.clone().unwrap();
    let c = devnet.info.contracts;
    let config = write_config(dir.path(), &rpc_url, &c, "");
    let accounts = dev_accounts(10);
    let chain = tollgate_testkit::connect(&rpc_url, 31337, &accounts)
        .await
        .unwrap();
    let pay_to = Address::repeat_byte(0x99);
    let balance = || async {
        contracts::read(&chain, c.token, &Token::balanceOfCall { account: pay_to })
            .await
            .unwrap()
    };
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
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let devnet = spawn_devnet(&dir.path().join("devnet"), &[]).await;
    let rpc_url = devnet.info.rpc_url.clone().unwrap();
    let c = devnet.info.contracts;
    // The facilitator comes back at the same address, as behind a stable hostname.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = write_config(
        dir.path(),
        &rpc_url,
        &c,
        &format!("listen = \"127.0.0.1:{port}\""),
    );
    let accounts = dev_accounts(10);
    let chain = tollgate_testkit::connect(&rpc_url, 31337, &accounts)
        .await
        .unwrap();
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
    let balance = contracts::read(&chain, c.token, &Token::balanceOfCall { account: pay_to })
        .await
        .unwrap();
    assert_eq!(balance, U256::from(499_000), "settled once");
}
