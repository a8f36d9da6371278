//! `tollgate facilitator` as a process: killed between broadcast and reply, restarted on the same
//! store, it answers the same request with a proof, and exactly one transfer exists.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use alloy::primitives::{Address, B256, U256};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};
use tollgate_chain::{
    accounts::dev_accounts,
    authorization::{ReceiveWithAuthorization, router_nonce, sign, token_domain},
    contracts::{self, Token},
};
use tollgate_protocol::{Amount, Eip3009Authorization, PaymentProof, SignedPayment};

use crate::devnet::spawn_devnet;

pub(crate) struct Facilitator {
    pub(crate) child: Child,
    pub(crate) url: String,
}

pub(crate) async fn spawn_facilitator(config: &Path, fault: bool) -> Facilitator {
    let accounts = dev_accounts(10);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(["facilitator", "--config"])
        .arg(config)
        .env("TOLLGATE_RELAYER_KEY", accounts[8].private_key.to_string())
        .env("TOLLGATE_PROOF_KEY", accounts[9].private_key.to_string())
        .env("TOLLGATE_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if fault {
        cmd.env("TOLLGATE_FAULT", "crash-after-broadcast");
    }
    let mut child = cmd.spawn().expect("spawn tollgate facilitator");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .expect("facilitator did not start in time")
            .unwrap()
            .expect("facilitator exited before listening");
        if let Some(rest) = line.split("public_url=").nth(1) {
            let url = rest.split_whitespace().next().unwrap().to_owned();
            // Keep draining stderr so the child never blocks on a full pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Facilitator { child, url };
        }
    }
}

fn payment(
    chain_id: u64,
    token: Address,
    router: Address,
    pay_to: Address,
    now: u64,
) -> SignedPayment {
    let payer = &dev_accounts(10)[3];
    let memo = B256::repeat_byte(0x5a);
    let auth = ReceiveWithAuthorization {
        from: payer.address,
        to: router,
        value: U256::from(500_000),
        validAfter: U256::from(now - 60),
        validBefore: U256::from(now + 600),
        nonce: router_nonce(pay_to, memo, U256::from(1_000)),
    };
    let signature = sign(
        &payer.signer(),
        &auth,
        &token_domain("USD Coin", "2", chain_id, token),
    )
    .unwrap();
    SignedPayment {
        network: "tollgate-devnet".into(),
        token,
        pay_to,
        amount: Amount::from_units(500_000),
        memo,
        authorization: Eip3009Authorization {
            from: payer.address,
            to: router,
            value: Amount::from_units(500_000),
            valid_after: Amount::from_units(now - 60),
            valid_before: Amount::from_units(now + 600),
            nonce: auth.nonce,
            signature,
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_broadcast_and_reply_settles_once() {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let devnet = spawn_devnet(&dir.path().join("devnet"), &[]).await;
    let rpc_url = devnet.info.rpc_url.clone().unwrap();
    let c = devnet.info.contracts;
    let config = dir.path().join("facilitator.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:0"
store = "sqlite://{store}"
[keys]
relayers = ["env:TOLLGATE_RELAYER_KEY"]
proof = "env:TOLLGATE_PROOF_KEY"
[[networks]]
name = "tollgate-devnet"
chain_id = 31337
rpc_url = "{rpc_url}"
token = "{token}"
router = "{router}"
subscriptions = "{subs}"
"#,
            store = dir.path().join("facilitator.db").display(),
            token = c.token,
            router = c.router,
            subs = c.subscriptions,
        ),
    )
    .unwrap();

    let accounts = dev_accounts(10);
    let chain = tollgate_testkit::connect(&rpc_url, 31337, &accounts)
        .await
        .unwrap();
    let pay_to = Address::repeat_byte(0x99);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let body =
        serde_json::json!({ "signedPayment": payment(31337, c.token, c.router, pay_to, now) });
    let http = reqwest::Client::new();

    // 1. The facilitator broadcasts, then dies before it can answer.
    let mut crashing = spawn_facilitator(&config, true).await;
    let reply = http
        .post(format!("{}/authorize", crashing.url))
        .json(&body)
        .send()
        .await;
    assert!(
        reply.is_err() || !reply.unwrap().status().is_success(),
        "the crashing facilitator must not answer"
    );
    let status = tokio::time::timeout(Duration::from_secs(10), crashing.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(!status.success(), "aborted");
    let balance = || async {
        contracts::read(&chain, c.token, &Token::balanceOfCall { account: pay_to })
            .await
            .unwrap()
    };
    assert_eq!(
        balance().await,
        U256::from(499_000),
        "the broadcast settled on-chain"
    );

    // 2. Restarted on the same store, the same request gets the proof of that settlement.
    let fresh = spawn_facilitator(&config, false).await;
    let reply = http
        .post(format!("{}/authorize", fresh.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let reply: serde_json::Value = reply.json().await.unwrap();
    let proof = PaymentProof::decode(reply["proof"].as_str().unwrap()).unwrap();
    assert_eq!(proof.pay_to, pay_to);
    assert_eq!(
        tollgate_chain::proof::recover(&proof).unwrap(),
        accounts[9].address
    );
    // 3. Again: the same proof, and still exactly one transfer.
    let again: serde_json::Value = http
        .post(format!("{}/authorize", fresh.url))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["proof"], reply["proof"]);
    assert_eq!(balance().await, U256::from(499_000));
    let (ok, _) = (
        http.get(format!("{}/readyz", fresh.url))
            .send()
            .await
            .unwrap()
            .status(),
        (),
    );
    assert_eq!(ok, 200);
}
