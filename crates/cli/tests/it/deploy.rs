//! `tollgate deploy` as a process on a fresh anvil running as Base Sepolia (chain id 84532), with
//! a Tollgate `Token` named as Base Sepolia's USDC ("USDC", version "2") standing in for it.

use std::process::Stdio;

use alloy::primitives::{Address, B256, U256};
use serde_json::Value;
use tollgate_chain::{
    Chain,
    accounts::{DevAccount, dev_accounts},
    contracts::{TokenParams, deploy},
    deploy::{Plan, expected_runtime_code},
};
use tollgate_testkit::{Anvil, connect};

use crate::facilitator::spawn_facilitator;

const BASE_SEPOLIA: u64 = 84532;

struct World {
    anvil: Anvil,
    chain: tollgate_chain::rpc::RpcChain,
    token: Address,
    deployer: DevAccount,
    dir: tempfile::TempDir,
}

impl World {
    async fn new() -> Self {
        tollgate_chain::install_crypto_provider();
        let anvil = Anvil::spawn_with(BASE_SEPOLIA).await.unwrap();
        let accounts = dev_accounts(2);
        let chain = connect(anvil.url(), BASE_SEPOLIA, &accounts).await.unwrap();
        let owner = accounts[0].address;
        let params = TokenParams {
            name: "USDC".into(),
            ..TokenParams::default()
        };
        let token = deploy(&chain, owner, owner, &params, &[], U256::ZERO)
            .await
            .unwrap()
            .token;
        Self {
            anvil,
            chain,
            token,
            deployer: accounts[1].clone(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs `tollgate deploy` on the anvil as base-sepolia with the token, the key in
    /// `TOLLGATE_DEPLOYER_KEY`, and `args`; returns (exit code, stdout, stderr).
    async fn deploy(&self, key: B256, args: &[&str]) -> (i32, String, String) {
        self.deploy_with_key("env:TOLLGATE_DEPLOYER_KEY", key, args)
            .await
    }

    /// [`Self::deploy`] with `--key source`.
    async fn deploy_with_key(
        &self,
        source: &str,
        key: B256,
        args: &[&str],
    ) -> (i32, String, String) {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.args(["deploy", "--rpc-url", self.anvil.url(), "--key", source])
            .args(args)
            .env("TOLLGATE_DEPLOYER_KEY", key.to_string())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        // Unless the caller names the network: base-sepolia with the stand-in token.
        if !args.contains(&"--network") {
            cmd.args([
                "--network",
                "base-sepolia",
                "--token",
                &self.token.to_string(),
            ]);
        }
        let out = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
            .await
            .expect("tollgate deploy finished")
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn nonce(&self) -> u64 {
        self.chain.nonce(self.deployer.address).await.unwrap()
    }
}

fn address(v: &Value) -> Address {
    v.as_str().unwrap().parse().unwrap()
}

/// A dry run prints the plan (the CREATE2 addresses, the gas) and sends nothing; a wrong network
/// for the chain and a deployer without gas are refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_checks_and_plans_before_sending() {
    let w = World::new().await;
    let key = w.deployer.private_key;
    let plan = Plan::new(w.token, w.deployer.address);

    let (code, out, err) = w.deploy(key, &["--dry-run"]).await;
    assert_eq!(code, 0, "{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["dryRun"], true);
    assert_eq!(address(&out["router"]), plan.router.address);
    assert_eq!(address(&out["subscriptions"]), plan.subscriptions.address);
    assert_eq!(out["tokenName"], "USDC");
    assert!(out["gasEstimate"].as_u64().unwrap() > 1_000_000, "{out}");
    assert_eq!(out["contracts"]["PaymentRouter"]["present"], false);
    assert_eq!(w.nonce().await, 0, "a dry run sends nothing");
    assert!(w.chain.code(plan.router.address).await.unwrap().is_empty());

    // The key from a file, as the facilitator reads it: one others may write is refused.
    let file = w.dir.path().join("deployer.key");
    std::fs::write(&file, format!("{key}\n")).unwrap();
    let source = format!("file:{}", file.display());
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, out, err) = w.deploy_with_key(&source, B256::ZERO, &["--dry-run"]).await;
    assert_eq!(code, 0, "{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(address(&out["deployer"]), w.deployer.address);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, _, err) = w.deploy_with_key(&source, B256::ZERO, &["--dry-run"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("writable by group or others"), "{err}");

    let (code, _, err) = w.deploy(key, &["--network", "base"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("chain id is 84532, not base's 8453"), "{err}");

    // The registry's USDC address holding a token of another EIP-712 name: refused.
    let usdc = tollgate_protocol::network::lookup("base-sepolia")
        .unwrap()
        .usdc
        .unwrap();
    let token_code = w.chain.code(w.token).await.unwrap();
    let set_code = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "anvil_setCode", "params": [usdc, token_code],
    });
    let answer: Value = reqwest::Client::new()
        .post(w.anvil.url())
        .json(&set_code)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    let (code, _, err) = w.deploy(key, &["--network", "base-sepolia"]).await;
    assert_ne!(code, 0);
    assert!(err.contains(r#"the registry says "USDC" and "2""#), "{err}");

    // A custom network needs --token; its token's domain is read and printed.
    let (code, _, err) = w.deploy(key, &["--network", "my-chain", "--dry-run"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("pass --token"), "{err}");
    let token = w.token.to_string();
    let custom = ["--network", "my-chain", "--token", &token, "--dry-run"];
    let (code, out, err) = w.deploy(key, &custom).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(r#"EIP-712 name "USDC", version "2""#), "{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(address(&out["router"]), plan.router.address);

    let broke = B256::repeat_byte(0x42);
    let (code, _, err) = w.deploy(broke, &[]).await;
    assert_ne!(code, 0);
    assert!(err.contains("fund it first"), "{err}");
    assert_eq!(w.nonce().await, 0);
    assert!(w.chain.code(plan.router.address).await.unwrap().is_empty());
}

/// A run deploys both contracts at their CREATE2 addresses with the expected code and writes a
/// facilitator config that serves them; a second run finds them and sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_is_deterministic_idempotent_and_configures_a_facilitator() {
    let w = World::new().await;
    let key = w.deployer.private_key;
    let plan = Plan::new(w.token, w.deployer.address);
    let config = w.dir.path().join("facilitator.toml");
    let config_arg = config.to_str().unwrap();

    // Two confirmations: blocks mined meanwhile (anvil mines only on transactions).
    let url = w.anvil.url().to_owned();
    let miner = tokio::spawn(async move {
        let client = reqwest::Client::new();
        let mine = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "evm_mine"});
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let _ = client.post(&url).json(&mine).send().await;
        }
    });
    let args = [
        "--write-config",
        config_arg,
        "--listen",
        "127.0.0.1:0",
        "--confirmations",
        "2",
    ];
    let (code, out, err) = w.deploy(key, &args).await;
    miner.abort();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("2 confirmation(s)"), "{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(address(&out["router"]), plan.router.address);
    assert_eq!(address(&out["subscriptions"]), plan.subscriptions.address);
    assert_eq!(w.nonce().await, 2);
    for (_, planned) in plan.contracts() {
        let code = w.chain.code(planned.address).await.unwrap();
        let expected = expected_runtime_code(&w.chain, planned.init_code.clone())
            .await
            .unwrap();
        assert!(!code.is_empty());
        assert_eq!(code, expected);
    }

    // Again: found, nothing sent; the config is kept without --force.
    let (code, out, err) = w.deploy(key, &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("nothing to send"), "{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["contracts"]["Subscriptions"]["present"], true);
    assert_eq!(w.nonce().await, 2);
    let (code, _, err) = w.deploy(key, &args).await;
    assert_ne!(code, 0);
    assert!(err.contains("--force"), "{err}");

    // The written config starts a facilitator that serves the deployment.
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(written.contains("env:TOLLGATE_RELAYER_KEY"), "{written}");
    assert!(written.contains("confirmations = 2"), "{written}");
    assert!(
        !written.contains(&key.to_string()[2..]),
        "no secret in the config"
    );
    let f = spawn_facilitator(&config, None).await;
    let doc: Value = reqwest::get(format!("{}/.well-known/tollgate", f.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let doc = doc.to_string().to_lowercase();
    for a in [plan.router.address, plan.subscriptions.address, w.token] {
        assert!(doc.contains(&a.to_string().to_lowercase()), "{a} in {doc}");
    }
}
