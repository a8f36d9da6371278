//! `tollgate pay` against an MPP-only server (`tollgate_testkit::mpp::MppServer`, settling
//! through a real facilitator on the devnet): it pays the EVM `charge` challenge once and
//! reports MPP and the server's receipt.

use std::process::Stdio;

use tollgate_chain::U256;
use tollgate_testkit::{
    harness::{DEVNET_NETWORK, PAYEE, PAYER, TestNet},
    mpp::{MppServer, MppTerms},
};

const PRICE: u64 = 500_000;

/// Runs `tollgate pay ARGS` with the payer's key in `TOLLGATE_KEY`; returns (exit code, stdout,
/// stderr).
async fn pay(net: &TestNet, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("pay")
        .args(args)
        .env("TOLLGATE_KEY", net.account(PAYER).private_key.to_string())
        .env_remove("TOLLGATE_LOG")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), out)
        .await
        .expect("tollgate pay finished")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_pays_an_mpp_only_server_once_and_prints_its_receipt() {
    let net = TestNet::builder()
        .networks([DEVNET_NETWORK])
        .start()
        .await
        .expect("test network");
    let (payer, payee) = (net.address(PAYER), net.address(PAYEE));
    let server = MppServer::start(MppTerms::new(
        &net.url,
        DEVNET_NETWORK,
        net.chain_id(),
        net.token(),
        payee,
        PRICE,
    ))
    .await;
    let url = server.paid_url();
    let before = (
        net.token_balance(payer).await,
        net.token_balance(payee).await,
    );

    // Without a facilitator to learn the token's EIP-712 domain from: refused, nothing sent.
    let (code, stdout, stderr) = pay(&net, &[&url, "--max", "0.50"]).await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("EIP-712 name and version"), "{stderr}");
    assert!(server.credentials().is_empty());

    // Over --max: refused by the policy, nothing sent.
    let (code, _, stderr) = pay(&net, &[&url, "--max", "0.40", "--facilitator", &net.url]).await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("per-request cap"), "{stderr}");
    assert!(server.credentials().is_empty());

    // Paid once, through the facilitator's domain and clock.
    let (code, stdout, stderr) = pay(
        &net,
        &[&url, "--max", "0.50", "--facilitator", &net.url, "--json"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let out: serde_json::Value = serde_json::from_str(&stdout).expect(&stdout);
    assert_eq!(out["status"], 200);
    assert_eq!(out["body"], r#"{"quote":42}"#);
    assert!(out["headers"]["payment-receipt"].is_string(), "{out}");
    let p = &out["payment"];
    assert_eq!(p["kind"], "mpp", "{out}");
    assert_eq!(p["amount"], PRICE.to_string());
    assert_eq!(p["network"], DEVNET_NETWORK);
    let receipt = &p["mppReceipt"];
    assert_eq!(receipt["method"], "evm", "{out}");
    assert_eq!(receipt["status"], "success");
    let tx = p["txHash"].as_str().expect("the transaction");
    assert_eq!(receipt["reference"], tx);
    assert!(receipt["timestamp"].is_string());
    let challenge_id = receipt["challengeId"].as_str().expect("the challenge paid");
    // The summary names MPP and the receipt.
    assert!(
        stderr.contains("paid 0.500000 (500000 units)")
            && stderr.contains(&format!("MPP; receipt evm {tx} at "))
            && stderr.contains(&format!("for challenge {challenge_id}")),
        "{stderr}"
    );

    assert_eq!(server.credentials().len(), 1, "one credential");
    assert_eq!(server.served(), 1);
    assert_eq!(net.token_balance(payer).await, before.0 - U256::from(PRICE));
    assert_eq!(net.token_balance(payee).await, before.1 + U256::from(PRICE));
}
