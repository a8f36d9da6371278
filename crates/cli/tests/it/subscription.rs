//! `tollgate pay --subscribe` and `tollgate subscription …` as processes, against a route sold by
//! subscription (and one-time) on the devnet, with a real facilitator: the subscription is made
//! once and reused from the agent's state file, a named subscription that is refused is never
//! turned into a one-time payment unless asked, the lifecycle is gasless; and the one amount
//! notation of every amount flag.

use std::{
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use axum::{Router, routing::get};
use tollgate_chain::{
    LogFilter, TxRequest, WaitOptions,
    contracts::{self, Subscriptions, Token},
};
use tollgate_gate::{Amount, Gate, PlanTerms, Pricing};
use tollgate_testkit::{Backend, Fixture};

const NETWORK: &str = "tollgate-devnet";
const PRICE: u64 = 500_000;
const FEE: u64 = 1_000;
const SUBSCRIBER: usize = 1;
const PROVIDER: usize = 5;
const PAYEE: usize = 7;
/// The plan's amount per cycle.
const AMOUNT: u64 = 2_000_000;
const INTERVAL: u64 = 7 * 24 * 3600;

struct World {
    fixture: Fixture,
    facilitator: String,
    /// `/v1/report`, sold by the plan and one-time at [`PRICE`].
    report: String,
    plan: B256,
    dir: tempfile::TempDir,
    _servers: Vec<tokio::task::JoinHandle<()>>,
}

impl World {
    async fn new() -> Self {
        tollgate_chain::install_crypto_provider();
        let fixture = Fixture::new(Backend::Devnet).await.expect("chain fixture");
        let dir = tempfile::tempdir().unwrap();
        let (facilitator, f) = crate::pay::serve_facilitator(&fixture, dir.path()).await;
        let plan = create_plan(&fixture).await;
        let d = fixture.deployment;
        let gate = Gate::builder()
            .network(NETWORK)
            .token(d.token, "USD Coin", "2")
            .pay_to(fixture.accounts[PAYEE].address)
            .facilitator(&facilitator)
            .subscriptions(Arc::clone(&fixture.chain), d.subscriptions)
            .subscription_poll_interval(Duration::from_millis(200))
            .plan_terms(PlanTerms {
                plan_id: plan,
                amount: Amount::from_units(AMOUNT),
                interval: INTERVAL,
                token: d.token,
            })
            .build()
            .await
            .unwrap();
        let app = Router::new()
            .route("/v1/report", get(|| async { r#"{"report":"ok"}"# }))
            .route_layer(
                gate.payment_gate([Pricing::subscription(plan), Pricing::one_time(PRICE)]),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let report = format!("http://{}/v1/report", listener.local_addr().unwrap());
        let a = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        std::fs::write(
            dir.path().join("agent.key"),
            fixture.accounts[SUBSCRIBER].private_key.to_string(),
        )
        .unwrap();
        Self {
            fixture,
            facilitator,
            report,
            plan,
            dir,
            _servers: vec![f, a],
        }
    }

    fn address(&self, i: usize) -> Address {
        self.fixture.accounts[i].address
    }

    fn key_file(&self) -> String {
        self.dir.path().join("agent.key").display().to_string()
    }

    fn state_file(&self) -> std::path::PathBuf {
        self.dir.path().join("agent.state.json")
    }

    async fn balance(&self, who: Address) -> U256 {
        contracts::read(
            &*self.fixture.chain,
            self.fixture.deployment.token,
            &Token::balanceOfCall { account: who },
        )
        .await
        .unwrap()
    }

    /// How many subscriptions the contract created.
    async fn created(&self) -> usize {
        let filter = LogFilter {
            from_block: 0,
            to_block: None,
            addresses: vec![self.fixture.deployment.subscriptions],
            topics: [
                Some(vec![Subscriptions::SubscriptionCreated::SIGNATURE_HASH]),
                None,
                None,
                None,
            ],
        };
        self.fixture.chain.logs(&filter).await.unwrap().len()
    }

    /// Sends `call` to the subscriptions contract as [`SUBSCRIBER`] (paying gas).
    async fn as_subscriber(&self, call: impl SolCall) {
        self.fixture
            .chain
            .send_and_wait(
                TxRequest::call(
                    self.address(SUBSCRIBER),
                    self.fixture.deployment.subscriptions,
                    call.abi_encode(),
                ),
                WaitOptions::default(),
            )
            .await
            .unwrap();
    }

    /// Runs `tollgate ARGS` (no key in the environment); returns (exit code, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.args(args)
            .env_remove("TOLLGATE_KEY")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .expect("tollgate finished")
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `tollgate pay REPORT --key-file KEY ARGS`.
    async fn pay(&self, args: &[&str]) -> (i32, String, String) {
        let key = self.key_file();
        let mut all = vec!["pay", &self.report, "--key-file", &key];
        all.extend_from_slice(args);
        self.run(&all).await
    }

    /// `tollgate subscription ACTION [ID] --facilitator URL --key-file KEY`, its JSON answer.
    async fn subscription(&self, action: &str, id: Option<B256>) -> serde_json::Value {
        let id = id.map(|id| id.to_string());
        let key = self.key_file();
        let mut args = vec!["subscription", action];
        args.extend(id.as_deref());
        args.extend(["--facilitator", &self.facilitator]);
        if action != "show" {
            args.extend(["--key-file", &key]);
        }
        let (code, stdout, stderr) = self.run(&args).await;
        assert_eq!(code, 0, "{action}: {stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{action}: {e}: {stdout}"))
    }
}

/// A plan of [`PROVIDER`]'s billing [`AMOUNT`] to [`PAYEE`] every [`INTERVAL`], on-chain.
async fn create_plan(fixture: &Fixture) -> B256 {
    let subs = fixture.deployment.subscriptions;
    let provider = fixture.accounts[PROVIDER].address;
    let call = Subscriptions::createPlanCall {
        token: fixture.deployment.token,
        payTo: fixture.accounts[PAYEE].address,
        amount: U256::from(AMOUNT),
        interval: INTERVAL,
        operator: Address::ZERO,
        salt: B256::repeat_byte(3),
    };
    fixture
        .chain
        .send_and_wait(
            TxRequest::call(provider, subs, call.abi_encode()),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    contracts::read(
        &*fixture.chain,
        subs,
        &Subscriptions::planIdForCall {
            provider,
            salt: B256::repeat_byte(3),
        },
    )
    .await
    .unwrap()
}

/// The subscription id in a `subscribed ID: …` or `served on subscription ID …` summary.
fn subscription_in(stderr: &str) -> B256 {
    stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("subscribed ")
                .or_else(|| l.strip_prefix("served on subscription "))
        })
        .and_then(|rest| rest.get(..66))
        .unwrap_or_else(|| panic!("no subscription in: {stderr}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_subscribes_once_reuses_it_and_never_falls_back_unasked() {
    let w = World::new().await;
    let (me, payee) = (w.address(SUBSCRIBER), w.address(PAYEE));
    let (mine0, payee0) = (w.balance(me).await, w.balance(payee).await);

    // Without --subscribe: one-time (and `units:` is an amount like any other).
    let (code, stdout, stderr) = w.pay(&["--max", "units:500000"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, concat!(r#"{"report":"ok"}"#, "\n"));
    assert!(stderr.contains("paid 0.500000 (500000 units)"), "{stderr}");
    assert_eq!(w.balance(me).await, mine0 - U256::from(PRICE));
    assert!(!w.state_file().exists(), "no state without --subscribe");

    // --subscribe over the plan's amount: refused by the policy, one-time instead.
    let (code, _, stderr) = w
        .pay(&["--max", "0.50", "--subscribe", "--max-per-cycle", "1.99"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("paid 0.500000"), "{stderr}");
    assert_eq!(w.created().await, 0);
    let mine1 = w.balance(me).await;
    assert_eq!(mine1, mine0 - U256::from(2 * PRICE));

    // --subscribe within it: subscribes once, the first cycle billed, the state file written.
    let subscribe = ["--max", "0.50", "--subscribe", "--max-per-cycle", "2.00"];
    let (code, stdout, stderr) = w.pay(&subscribe).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, concat!(r#"{"report":"ok"}"#, "\n"));
    assert!(
        stderr.contains("first cycle 2.000000 (2000000 units)"),
        "{stderr}"
    );
    let id = subscription_in(&stderr);
    assert_eq!(w.created().await, 1);
    assert_eq!(w.balance(me).await, mine1 - U256::from(AMOUNT));
    let state = std::fs::read_to_string(w.state_file()).unwrap();
    assert!(
        state.contains(&id.to_string()) && state.contains(&w.plan.to_string()),
        "{state}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(w.state_file())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // A later run reuses it from the state file: nothing paid, nothing created.
    let (code, _, stderr) = w.pay(&subscribe).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("served on subscription"), "{stderr}");
    assert_eq!(subscription_in(&stderr), id);
    assert_eq!(w.created().await, 1);
    assert_eq!(w.balance(me).await, mine1 - U256::from(AMOUNT));
    // The provider got two one-time payments and one cycle.
    assert_eq!(
        w.balance(payee).await,
        payee0 + U256::from(2 * (PRICE - FEE) + AMOUNT)
    );

    // Named and paused: refused by name, nothing paid…
    w.as_subscriber(Subscriptions::pauseCall { id }).await;
    let header = format!("X-Service-Sub: {id}");
    let named = ["-H", header.as_str(), "--max", "0.50"];
    let before = w.balance(me).await;
    let started = Instant::now();
    let stderr = loop {
        let (code, _, stderr) = w.pay(&named).await;
        if code != 0 {
            assert_eq!(code, 4, "{stderr}");
            break stderr;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never refused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(stderr.contains("SubscriptionNotActive"), "{stderr}");
    assert!(stderr.contains("--fallback-one-time"), "a hint: {stderr}");
    assert!(!stderr.contains("paid "), "{stderr}");
    assert_eq!(w.balance(me).await, before);

    // …unless asked: exactly one one-time payment.
    let mut fallback = named.to_vec();
    fallback.push("--fallback-one-time");
    let (code, stdout, stderr) = w.pay(&fallback).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, concat!(r#"{"report":"ok"}"#, "\n"));
    assert_eq!(stderr.matches("paid 0.500000").count(), 1, "{stderr}");
    assert_eq!(w.balance(me).await, before - U256::from(PRICE));
    assert_eq!(w.created().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amounts_take_one_notation_on_every_flag() {
    let w = World::new().await;
    let plan = w.plan.to_string();
    // Bare integers are ambiguous, anything else is not an amount: usage errors, nothing paid.
    let me = w.address(SUBSCRIBER);
    let before = w.balance(me).await;
    for args in [
        &["--max", "5"][..],
        &["--max", "500000"][..],
        &["--budget", "1e6"][..],
        &["--max", "0.1234567"][..],
        &["--subscribe", "--max-overage", "300000"][..],
        &["--subscribe", "--max-per-cycle", "units:"][..],
        &["--raise-overage-to", "1,00"][..],
    ] {
        let (code, _, stderr) = w.pay(args).await;
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("units:500000"), "{args:?}: {stderr}");
    }
    let key = w.key_file();
    let (code, _, stderr) = w
        .run(&[
            "subscribe",
            "--plan",
            &plan,
            "--max-overage",
            "300000",
            "--facilitator",
            &w.facilitator,
            "--key-file",
            &key,
        ])
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("ambiguous"), "{stderr}");
    assert_eq!(w.balance(me).await, before);

    // Tokens and units mean the same: subscribe with 0.30 of overage, raise to units:1000000.
    let (code, stdout, stderr) = w
        .run(&[
            "subscribe",
            "--plan",
            &plan,
            "--max-overage",
            "0.30",
            "--max",
            "units:2000000",
            "--facilitator",
            &w.facilitator,
            "--key-file",
            &key,
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let sub: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(sub["allowance"]["cap"], "300000");
    let id = sub["id"].as_str().unwrap().to_owned();
    let (code, stdout, stderr) = w
        .run(&[
            "subscribe",
            "--raise",
            &id,
            "--max-overage",
            "units:1000000",
            "--max",
            "0.70",
            "--facilitator",
            &w.facilitator,
            "--key-file",
            &key,
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let raised: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(raised["allowance"]["cap"], "1000000");
    // `tollgate subscribe` remembered it: `pay --subscribe` serves on it at once.
    let (code, _, stderr) = w.pay(&["--subscribe", "--max-per-cycle", "2.00"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(subscription_in(&stderr).to_string(), id);
    assert_eq!(w.created().await, 1);

    // Every --help states the notation.
    for cmd in [&["pay", "--help"][..], &["subscribe", "--help"][..]] {
        let (code, stdout, _) = w.run(cmd).await;
        assert_eq!(code, 0);
        assert!(stdout.contains("units:500000"), "{cmd:?}: {stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lifecycle_is_gasless_from_the_cli() {
    let w = World::new().await;
    let me = w.address(SUBSCRIBER);
    let (code, _, stderr) = w.pay(&["--subscribe", "--max-per-cycle", "2.00"]).await;
    assert_eq!(code, 0, "{stderr}");
    let id = subscription_in(&stderr);
    let eth = w.fixture.chain.balance(me).await.unwrap();

    // Listed (signed by the key), shown (no key).
    let list = w.subscription("list", None).await;
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.to_string()]);
    assert_eq!(w.subscription("show", Some(id)).await["status"], "ACTIVE");

    // Paused: refused by name; resumed: served again.
    assert_eq!(w.subscription("pause", Some(id)).await["status"], "PAUSED");
    assert_eq!(
        w.subscription("pause", Some(id)).await["status"],
        "PAUSED",
        "again: idempotent"
    );
    let header = format!("X-Service-Sub: {id}");
    let started = Instant::now();
    loop {
        let (code, _, stderr) = w.pay(&["-H", &header]).await;
        if code == 4 && stderr.contains("SubscriptionNotActive") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never refused: {stderr}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(w.subscription("resume", Some(id)).await["status"], "ACTIVE");
    let started = Instant::now();
    loop {
        let (code, stdout, stderr) = w.pay(&["-H", &header]).await;
        if code == 0 {
            assert_eq!(stdout, concat!(r#"{"report":"ok"}"#, "\n"));
            // The summary names what served it, not "no payment asked".
            assert!(
                stderr.contains(&format!("served on subscription {id}")),
                "{stderr}"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never served: {stderr}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Cancelled: final, forgotten by the state file; the next --subscribe subscribes anew.
    assert_eq!(
        w.subscription("cancel", Some(id)).await["status"],
        "CANCELLED"
    );
    let state = std::fs::read_to_string(w.state_file()).unwrap();
    assert!(!state.contains(&id.to_string()), "{state}");
    let key = w.key_file();
    let (code, _, stderr) = w
        .run(&[
            "subscription",
            "pause",
            &id.to_string(),
            "--facilitator",
            &w.facilitator,
            "--key-file",
            &key,
        ])
        .await;
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("SubscriptionNotActive"), "{stderr}");
    // The subscriber paid no gas for any of it.
    assert_eq!(w.fixture.chain.balance(me).await.unwrap(), eth);

    let (code, _, stderr) = w.pay(&["--subscribe", "--max-per-cycle", "2.00"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_ne!(subscription_in(&stderr), id);
    assert_eq!(w.created().await, 2);
}

/// Beyond the facilitator's bound on relayed lifecycle calls (by default four per subscription
/// per hour), `tollgate subscription pause` fails with the facilitator's refusal and says when
/// to try again; nothing was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifecycle_call_over_the_bound_says_when_to_retry() {
    let w = World::new().await;
    let (code, _, stderr) = w.pay(&["--subscribe", "--max-per-cycle", "2.00"]).await;
    assert_eq!(code, 0, "{stderr}");
    let id = subscription_in(&stderr);
    for action in ["pause", "resume", "pause", "resume"] {
        w.subscription(action, Some(id)).await;
    }
    let key = w.key_file();
    let (code, stdout, stderr) = w
        .run(&[
            "subscription",
            "pause",
            &id.to_string(),
            "--facilitator",
            &w.facilitator,
            "--key-file",
            &key,
        ])
        .await;
    assert_eq!((code, stdout.as_str()), (4, ""), "{stderr}");
    assert!(
        stderr.contains("rate limited by the facilitator") && stderr.contains("(retry after "),
        "{stderr}"
    );
    assert_eq!(
        w.subscription("show", Some(id)).await["status"],
        "ACTIVE",
        "nothing was sent"
    );
}
