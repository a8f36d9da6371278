//! `tollgate facilitator --check` as a library call ([`check::check`]) against anvil (which runs
//! the `eth_call` with state overrides the code comparison needs): a good config passes every check; each fault fails its own check with the fix;
//! [`start::build`] refuses a wrong chain id and a missing contract.

use alloy::{
    primitives::{Address, B256},
    sol_types::SolConstructor,
};
use tollgate_chain::{TxRequest, WaitOptions, contracts::PaymentRouter};
use tollgate_facilitator::{
    check::{self, Check, CheckOptions, Report, Status},
    config::Config,
    start::{self, StartError},
};
use tollgate_testkit::{Backend, Fixture};

/// What a network section is made of; each test changes one part.
struct Net {
    chain_id: u64,
    rpc_url: String,
    fallbacks: Vec<String>,
    public_rpc_url: Option<String>,
    token: Address,
    token_name: &'static str,
    router: Address,
    subscriptions: Option<Address>,
    fee_recipient: Option<Address>,
}

impl Net {
    fn good(f: &Fixture) -> Self {
        let url = f.rpc_url().unwrap().to_owned();
        Self {
            chain_id: 31337,
            rpc_url: url.clone(),
            fallbacks: Vec::new(),
            public_rpc_url: Some(url),
            token: f.deployment.token,
            token_name: "USD Coin",
            router: f.deployment.router,
            subscriptions: Some(f.deployment.subscriptions),
            fee_recipient: Some(f.accounts[0].address),
        }
    }

    fn config(&self, f: &Fixture, relayer: B256, store: Option<&str>) -> Config {
        let mut toml = store
            .map(|s| format!("store = \"{s}\"\n"))
            .unwrap_or_default();
        if let Some(r) = self.fee_recipient {
            toml.push_str(&format!("[fees]\nfee_recipient = \"{r}\"\n"));
        }
        toml.push_str(&format!(
            r#"
[keys]
relayers = ["{relayer}"]
proof = "{proof}"
[[networks]]
name = "tollgate-devnet"
chain_id = {chain_id}
rpc_url = "{rpc_url}"
rpc_fallback_urls = {fallbacks:?}
token = "{token}"
token_name = "{token_name}"
router = "{router}"
"#,
            proof = f.accounts[9].private_key,
            chain_id = self.chain_id,
            rpc_url = self.rpc_url,
            fallbacks = self.fallbacks,
            token = self.token,
            token_name = self.token_name,
            router = self.router,
        ));
        if let Some(s) = self.subscriptions {
            toml.push_str(&format!("subscriptions = \"{s}\"\n"));
        }
        if let Some(u) = &self.public_rpc_url {
            toml.push_str(&format!("public_rpc_url = \"{u}\"\n"));
        }
        Config::from_toml_str(&toml).unwrap()
    }
}

async fn run(f: &Fixture, net: &Net) -> Report {
    run_with(f, net, f.accounts[8].private_key).await
}

async fn run_with(f: &Fixture, net: &Net, relayer: B256) -> Report {
    let config = net.config(f, relayer, None);
    let keys = config.resolve(|_| None).unwrap();
    check::check(&config, &keys, &CheckOptions::default()).await
}

/// The one failing finding of `check` in `report`, every other finding ok.
fn only_failure(report: &Report, what: Check) -> &check::Finding {
    let failed: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.status != Status::Ok)
        .collect();
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(failed[0].check, what, "{report}");
    assert_eq!(failed[0].status, Status::Fail, "{report}");
    assert!(!report.passed(), "{report}");
    failed[0]
}

#[tokio::test]
async fn check_passes_a_good_config_and_names_every_check() {
    let f = Fixture::new(Backend::Anvil).await.unwrap();
    let report = run(&f, &Net::good(&f)).await;
    assert!(report.passed(), "{report}");
    assert!(
        report.findings.iter().all(|x| x.status == Status::Ok),
        "{report}"
    );
    for what in [
        Check::Endpoint,
        Check::Token,
        Check::TokenDomain,
        Check::Router,
        Check::Subscriptions,
        Check::Relayer,
        Check::PublicRpcUrl,
    ] {
        assert!(
            report.findings.iter().any(|x| x.check == what),
            "{what:?} missing: {report}"
        );
    }
}

#[tokio::test]
async fn check_fails_each_fault_with_its_fix() {
    let f = Fixture::new(Backend::Anvil).await.unwrap();

    // The node serves another chain.
    let report = run(
        &f,
        &Net {
            chain_id: 1234,
            ..Net::good(&f)
        },
    )
    .await;
    let bad = report
        .findings
        .iter()
        .find(|x| x.check == Check::Endpoint && x.status == Status::Fail)
        .unwrap_or_else(|| panic!("{report}"));
    assert!(bad.fatal, "{bad}");
    assert!(bad.to_string().contains("chain id 31337"), "{bad}");
    assert!(bad.to_string().contains("chain_id"), "{bad}");

    // No contract at the router's address.
    let nowhere = Address::repeat_byte(0x42);
    let report = run(
        &f,
        &Net {
            router: nowhere,
            ..Net::good(&f)
        },
    )
    .await;
    let bad = only_failure(&report, Check::Router);
    assert!(bad.fatal);
    assert_eq!(bad.key, "networks[0].router");
    assert!(bad.message.contains("no contract"), "{bad}");
    assert!(bad.fix.as_deref().unwrap().contains("deploy"), "{bad}");

    // A router deployed for another token.
    let deployer = f.accounts[0].address;
    let init = [
        PaymentRouter::BYTECODE.as_ref(),
        &PaymentRouter::constructorCall {
            token_: nowhere,
            feeRecipient_: deployer,
        }
        .abi_encode(),
    ]
    .concat();
    let created = f
        .chain
        .send_and_wait(
            TxRequest {
                from: deployer,
                to: None,
                data: init.into(),
                gas: Some(6_000_000),
                ..Default::default()
            },
            WaitOptions::default(),
        )
        .await
        .unwrap();
    let other_router = created.receipt().unwrap().contract_address.unwrap();
    let report = run(
        &f,
        &Net {
            router: other_router,
            ..Net::good(&f)
        },
    )
    .await;
    let bad = only_failure(&report, Check::Router);
    assert!(!bad.fatal);
    assert!(bad.message.contains(&nowhere.to_string()), "{bad}");

    // A router paying fees to another recipient than fees.fee_recipient says.
    let report = run(
        &f,
        &Net {
            fee_recipient: Some(f.accounts[1].address),
            ..Net::good(&f)
        },
    )
    .await;
    let bad = only_failure(&report, Check::Router);
    assert!(
        bad.fix.as_deref().unwrap().contains("fees.fee_recipient"),
        "{bad}"
    );

    // A contract at the subscriptions address that is not ours (the token's code).
    let report = run(
        &f,
        &Net {
            subscriptions: Some(f.deployment.token),
            ..Net::good(&f)
        },
    )
    .await;
    let bad = only_failure(&report, Check::Subscriptions);
    assert!(!bad.fatal);
    assert!(
        bad.message.contains("not the one our contract leaves"),
        "{bad}"
    );

    // The token's EIP-712 domain is not the configured one.
    let report = run(
        &f,
        &Net {
            token_name: "USDC",
            ..Net::good(&f)
        },
    )
    .await;
    let bad = only_failure(&report, Check::TokenDomain);
    assert!(
        bad.fix
            .as_deref()
            .unwrap()
            .contains("token_name = \"USD Coin\""),
        "{bad}"
    );

    // A relayer without gas.
    let report = run_with(&f, &Net::good(&f), B256::repeat_byte(0x17)).await;
    let bad = only_failure(&report, Check::Relayer);
    assert!(bad.key.starts_with("keys.relayers[0]"), "{bad}");
    assert!(bad.message.contains("floor"), "{bad}");

    // A fallback node nobody answers at.
    let report = run(
        &f,
        &Net {
            fallbacks: vec!["http://127.0.0.1:1".into()],
            ..Net::good(&f)
        },
    )
    .await;
    let bad = only_failure(&report, Check::Endpoint);
    assert_eq!(bad.key, "networks[0].rpc_fallback_urls[0]");
    assert!(!bad.fatal);

    // The primary node down: reported; the rest read through the fallback, the gas price too.
    let report = run(
        &f,
        &Net {
            rpc_url: "http://127.0.0.1:1".into(),
            fallbacks: vec![f.rpc_url().unwrap().to_owned()],
            ..Net::good(&f)
        },
    )
    .await;
    let bad = only_failure(&report, Check::Endpoint);
    assert_eq!(bad.key, "networks[0].rpc_url");
    let relayer = report
        .findings
        .iter()
        .find(|x| x.check == Check::Relayer)
        .unwrap();
    assert!(
        relayer.message.contains("100 settlements x 300000 gas"),
        "{relayer}"
    );

    // Subscriptions sold without a public RPC URL: a warning, not a failure.
    let report = run(
        &f,
        &Net {
            public_rpc_url: None,
            ..Net::good(&f)
        },
    )
    .await;
    assert!(report.passed(), "{report}");
    let warned: Vec<_> = report
        .findings
        .iter()
        .filter(|x| x.status != Status::Ok)
        .collect();
    assert_eq!(warned.len(), 1, "{report}");
    assert_eq!(warned[0].check, Check::PublicRpcUrl);
    assert_eq!(warned[0].status, Status::Warn);
    assert!(warned[0].fix.as_deref().unwrap().contains("public_rpc_url"));
}

#[tokio::test]
async fn start_refuses_a_wrong_chain_id_and_a_missing_contract() {
    let f = Fixture::new(Backend::Anvil).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("f.db").display());
    let build = |net: Net| {
        let config = net.config(&f, f.accounts[8].private_key, Some(&store));
        async move {
            let keys = config.resolve(|_| None).unwrap();
            start::build(&config, &keys, start::settings(&config), None).await
        }
    };
    let e = build(Net {
        chain_id: 1234,
        ..Net::good(&f)
    })
    .await
    .unwrap_err();
    assert!(matches!(e, StartError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("tollgate-devnet"), "{e}");
    assert!(e.to_string().contains("chain id 31337"), "{e}");

    let e = build(Net {
        subscriptions: Some(Address::repeat_byte(0x42)),
        ..Net::good(&f)
    })
    .await
    .unwrap_err();
    assert!(matches!(e, StartError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("networks[0].subscriptions"), "{e}");

    build(Net::good(&f)).await.unwrap();
}

/// Contracts deployed by `tollgate deploy` (CREATE2 through the deterministic deployment proxy,
/// for another fee recipient) pass with their code compared, as do the fixture's (CREATE).
#[tokio::test]
async fn check_compares_the_code_of_a_deterministic_deployment() {
    use tollgate_chain::deploy::{Plan, deploy};

    let f = Fixture::new(Backend::Anvil).await.unwrap();
    let recipient = f.accounts[2].address;
    let plan = Plan::new(f.deployment.token, recipient);
    deploy(
        f.chain.as_ref(),
        f.accounts[0].address,
        &plan,
        WaitOptions::default(),
    )
    .await
    .unwrap();
    let report = run(
        &f,
        &Net {
            router: plan.router.address,
            subscriptions: Some(plan.subscriptions.address),
            fee_recipient: Some(recipient),
            ..Net::good(&f)
        },
    )
    .await;
    assert!(
        report.findings.iter().all(|x| x.status == Status::Ok),
        "{report}"
    );
    let compared = report
        .findings
        .iter()
        .filter(|x| x.message.contains("with the expected code"))
        .count();
    assert_eq!(compared, 2, "{report}");
}
