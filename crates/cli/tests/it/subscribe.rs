//! `tollgate subscribe` as a process: subscribing to a plan and raising the subscription's
//! overage cap through a real facilitator on the devnet.

use std::process::Stdio;

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::SolCall,
};
use tollgate_chain::{
    TxRequest, WaitOptions,
    contracts::{self, Subscriptions},
};
use tollgate_testkit::{Backend, Fixture};

const SUBSCRIBER: usize = 1;
const PROVIDER: usize = 5;
const PAYEE: usize = 7;
const AMOUNT: u64 = 2_000_000;

struct World {
    fixture: Fixture,
    facilitator: String,
    _dir: tempfile::TempDir,
    _server: tokio::task::JoinHandle<()>,
}

impl World {
    async fn new() -> Self {
        tollgate_chain::install_crypto_provider();
        let fixture = Fixture::new(Backend::Devnet).await.expect("chain fixture");
        let dir = tempfile::tempdir().unwrap();
        let (facilitator_url, server) = crate::pay::serve_facilitator(&fixture, dir.path()).await;
        Self {
            fixture,
            facilitator: facilitator_url,
            _dir: dir,
            _server: server,
        }
    }

    fn address(&self, i: usize) -> Address {
        self.fixture.accounts[i].address
    }

    /// A plan of [`PROVIDER`]'s, billing [`AMOUNT`] a week to [`PAYEE`], created on-chain.
    async fn create_plan(&self) -> B256 {
        let subs = self.fixture.deployment.subscriptions;
        let call = Subscriptions::createPlanCall {
            token: self.fixture.deployment.token,
            payTo: self.address(PAYEE),
            amount: U256::from(AMOUNT),
            interval: 7 * 24 * 3600,
            operator: Address::ZERO,
            salt: B256::repeat_byte(1),
        };
        self.fixture
            .chain
            .send_and_wait(
                TxRequest::call(self.address(PROVIDER), subs, call.abi_encode()),
                WaitOptions::default(),
            )
            .await
            .unwrap();
        contracts::read(
            &*self.fixture.chain,
            subs,
            &Subscriptions::planIdForCall {
                provider: self.address(PROVIDER),
                salt: B256::repeat_byte(1),
            },
        )
        .await
        .unwrap()
    }

    /// `remainingAllowance(id)` on-chain (the cap, while nothing was charged).
    async fn cap_on_chain(&self, id: B256) -> U256 {
        contracts::read(
            &*self.fixture.chain,
            self.fixture.deployment.subscriptions,
            &Subscriptions::remainingAllowanceCall { id },
        )
        .await
        .unwrap()
    }

    /// Runs `tollgate subscribe ARGS --facilitator URL` as [`SUBSCRIBER`] (key from
    /// `TOLLGATE_KEY`); returns (exit code, stdout, stderr).
    async fn subscribe(&self, args: &[&str]) -> (i32, String, String) {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.arg("subscribe")
            .args(args)
            .args(["--facilitator", &self.facilitator])
            .env(
                "TOLLGATE_KEY",
                self.fixture.accounts[SUBSCRIBER].private_key.to_string(),
            )
            .env("NO_COLOR", "1")
            .env_remove("TOLLGATE_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
            .await
            .expect("tollgate subscribe finished")
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_then_raise_the_cap() {
    let w = World::new().await;
    let plan = w.create_plan().await.to_string();

    // Subscribe with a cap of 0.3 token.
    let (code, stdout, stderr) = w
        .subscribe(&["--plan", &plan, "--max-overage", "0.30", "--max", "2.00"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let sub: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(sub["status"], "ACTIVE");
    assert_eq!(sub["allowance"]["cap"], "300000");
    let id = sub["id"].as_str().unwrap().to_owned();

    // Raise it to 1.0 (an increase of 0.7, within --max 0.70).
    let (code, stdout, stderr) = w
        .subscribe(&[
            "--raise",
            &id,
            "--max-overage",
            "units:1000000",
            "--max",
            "0.70",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let raised: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(raised["id"], id.as_str());
    assert_eq!(raised["planId"], plan.as_str());
    assert_eq!(raised["allowance"]["cap"], "1000000");
    assert_eq!(
        w.cap_on_chain(id.parse().unwrap()).await,
        U256::from(1_000_000)
    );

    // The same cap again: refused, exit 4, nothing printed.
    let (code, stdout, stderr) = w
        .subscribe(&["--raise", &id, "--max-overage", "1.00"])
        .await;
    assert_eq!(code, 4, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("AllowanceNotRaised"), "{stderr}");

    // An increase over --max: refused by the policy, exit 3.
    let (code, _, stderr) = w
        .subscribe(&["--raise", &id, "--max-overage", "3.00", "--max", "1.00"])
        .await;
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(
        w.cap_on_chain(id.parse().unwrap()).await,
        U256::from(1_000_000)
    );

    // Usage errors: --raise with --plan, --raise without --max-overage, neither.
    for args in [
        &["--raise", &id, "--plan", &plan, "--max-overage", "5.00"][..],
        &["--raise", &id][..],
        &["--max-overage", "5.00"][..],
    ] {
        let (code, _, stderr) = w.subscribe(args).await;
        assert_eq!(code, 2, "{args:?}: {stderr}");
    }

    // `--help` documents the raise.
    let (code, stdout, _) = w.subscribe(&["--help"]).await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("--raise <SUBSCRIPTION_ID>") && stdout.contains("raiseAllowanceWithSig"),
        "{stdout}"
    );
}

/// The report: `tollgate subscribe --raise` answered `"txHash": null` though the raise
/// was mined, and both forms logged INFO lines. Now every field is filled (the creating
/// transaction, then the raise's), stderr has one summary line, and -v brings the logs back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_is_quiet_and_a_raise_reports_its_transaction() {
    let w = World::new().await;
    let plan = w.create_plan().await.to_string();
    let mined = |tx: &serde_json::Value| {
        let tx: B256 = tx
            .as_str()
            .unwrap_or_else(|| panic!("a txHash: {tx}"))
            .parse()
            .unwrap();
        let chain = std::sync::Arc::clone(&w.fixture.chain);
        async move { chain.receipt(tx).await.unwrap().expect("mined").success }
    };

    let (code, stdout, stderr) = w
        .subscribe(&["--plan", &plan, "--max-overage", "0.30", "--max", "2.00"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let sub: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(mined(&sub["txHash"]).await, "{sub}");
    let id = sub["id"].as_str().unwrap().to_owned();
    assert_eq!(
        stderr.lines().count(),
        1,
        "one summary line, no logs: {stderr}"
    );
    assert!(stderr.starts_with(&format!("subscribed {id}")), "{stderr}");

    let (code, stdout, stderr) = w
        .subscribe(&["--raise", &id, "--max-overage", "1.00", "--max", "0.70"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let raised: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(raised["allowance"]["cap"], "1000000");
    assert!(mined(&raised["txHash"]).await, "{raised}");
    assert_ne!(
        raised["txHash"], sub["txHash"],
        "the raise's own transaction"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with(&format!("raised {id}")), "{stderr}");

    let (code, _, stderr) = w
        .subscribe(&[
            "--raise",
            &id,
            "--max-overage",
            "2.00",
            "--max",
            "1.00",
            "-v",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains(" INFO "), "-v shows info logs: {stderr}");
}
