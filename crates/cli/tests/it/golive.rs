//! The book's "Going live on Base Sepolia" (`docs/src/run/go-live.md`), run verbatim: the `sh`
//! block after `<!-- golive -->`, one command at a time through `bash -c`, against a Base Sepolia
//! lookalike: anvil with chain id 84532, blocks every 2 s, and Circle's FiatToken v2.2 behind its
//! proxy at USDC's Base Sepolia address, with none of Tollgate's contracts
//! ([`tollgate_testkit::usdc::token_only`]). Only what a reader sets differs: the RPC URL, the
//! funded keys (dev accounts standing in for keys funded from faucets), where payments go, the
//! upstream API and free ports.
//!
//! `tollgate deploy` plans, deploys (2 confirmations) and writes the facilitator config, and a
//! second run sends nothing; `tollgate facilitator --check` passes on it; the facilitator and
//! `tollgate gateway` serve; `tollgate pay` pays a request, and the FiatToken balances on chain
//! moved by exactly the price. Then unmodified x402 clients from npm (`x402-fetch` 1.2.0, V1;
//! `@x402/fetch`, V2) and the npm package's README agent example pay the same gateway. The gas of
//! each transaction sent is measured and printed, and the chapter's figures are checked against
//! it (within 2 %).
//!
//! A second test sells subscriptions on the same deployment: after the block's `tollgate deploy`
//! and `tollgate facilitator`, a plan published and sold through `tollgate gateway`, and the
//! subscriber's whole lifecycle with the CLI (subscribe with USDC's permit, metered overage,
//! raise, a keeper renewal, pause, resume, cancel), held to the chain's `Transfer` events, the
//! webhooks and the analytics.

// The transcript (each command, its exit status and output) and the measured gas go to stderr,
// which the test runner shows when the test fails (and with --no-capture).
#![allow(clippy::print_stderr)]

use crate::readme::{self, Output, Walk};
use std::{
    collections::BTreeMap,
    path::Path,
    process::Stdio,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::primitives::{Address, U256, keccak256};
use axum::{
    Router,
    body::Bytes,
    http::{HeaderMap, StatusCode},
    routing::{get, post},
};
use serde_json::{Value, json};
use tokio::process::Command;
use tollgate_chain::{
    contracts::{self, Token},
    deploy::{Plan, expected_runtime_code},
};
use tollgate_testkit::usdc::{self, USDC_BASE_SEPOLIA};

mod one_time;
mod subscriptions;

/// The go-live chapter's page in the book.
const GO_LIVE: &str = "docs/src/run/go-live.md";

/// The route's price in the go-live chapter's gateway.toml: 0.10 USDC.
const PRICE: u64 = 100_000;
/// The facilitator's fee on a one-time payment (0.001), taken by the router for its fee
/// recipient (the deployer).
const FEE: u64 = 1_000;
/// The dev accounts standing in for the reader's funded keys.
const DEPLOYER: usize = 2;
const RELAYER: usize = 8;
const PAYER: usize = 1;

/// The upstream API: counts the requests it serves.
async fn serve_upstream() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = Router::new().route(
        "/{*path}",
        get(move |uri: axum::http::Uri| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                format!(r#"{{"served":"{}"}}"#, uri.path())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, hits)
}

/// The `tollgate` binary's directory first on `PATH`, as after the chapter's build step.
fn path_with_tollgate() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_tollgate")).parent().unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// JSON-RPC to the node, for what [`Chain`] does not read (blocks with their transactions,
/// receipts' gas).
struct Node {
    http: reqwest::Client,
    url: String,
}

impl Node {
    async fn call(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let r: Value = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    async fn block_number(&self) -> u64 {
        hex_u64(&self.call("eth_blockNumber", json!([])).await)
    }

    /// The transactions `from` sent in blocks `from_block..=latest`, in order: (hash, to, gas
    /// used).
    async fn gas_used_by(&self, from: Address, from_block: u64) -> Vec<(String, Address, u64)> {
        let mut found = Vec::new();
        for n in from_block..=self.block_number().await {
            let block = self
                .call("eth_getBlockByNumber", json!([format!("{n:#x}"), true]))
                .await;
            for tx in block["transactions"].as_array().unwrap() {
                let sender: Address = tx["from"].as_str().unwrap().parse().unwrap();
                if sender == from {
                    let hash = tx["hash"].as_str().unwrap().to_owned();
                    let to: Address = tx["to"].as_str().unwrap().parse().unwrap();
                    let gas = self.gas_used(&hash).await;
                    found.push((hash, to, gas));
                }
            }
        }
        found
    }

    async fn gas_used(&self, tx: &str) -> u64 {
        let receipt = self.call("eth_getTransactionReceipt", json!([tx])).await;
        assert_eq!(receipt["status"], "0x1", "{receipt}");
        hex_u64(&receipt["gasUsed"])
    }
}

fn hex_u64(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// A figure the go-live chapter (`docs/src/run/go-live.md`) states: the first number after
/// `label` in it (its whitespace collapsed), e.g. 129000 in "… router uses about 129,000 gas".
/// Commas are ignored.
fn readme_figure(label: &str) -> u64 {
    let section = readme::repo_file(GO_LIVE)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let after = section
        .split_once(label)
        .unwrap_or_else(|| panic!("the go-live section says {label:?}"))
        .1;
    let digits: String = after
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|e| panic!("no figure after {label:?} ({e})"))
}

/// The go-live chapter's figure after `label` is within 2 % of `measured`.
#[track_caller]
fn assert_about(label: &str, measured: u64) {
    let stated = readme_figure(label);
    assert!(
        measured.abs_diff(stated) * 50 <= stated,
        "{GO_LIVE} says {label:?} about {stated}; measured {measured}: update it"
    );
}

/// The go-live chapter's block up to the facilitator: what the reader sets, `tollgate deploy`
/// (the plan, the deployment, again), and `tollgate facilitator --check`, each checked.
struct Deployed {
    net: usdc::TokenOnly,
    chain: Arc<dyn tollgate_chain::Chain>,
    node: Node,
    rpc_url: String,
    dir: tempfile::TempDir,
    w: Walk,
    hits: Arc<AtomicUsize>,
    deployer: tollgate_chain::accounts::DevAccount,
    relayer: tollgate_chain::accounts::DevAccount,
    payer: tollgate_chain::accounts::DevAccount,
    pay_to: Address,
    plan: Plan,
    gw: String,
    nonce0: u64,
    estimate: u64,
    deploy_gas: u64,
}

async fn deploy_and_check() -> Deployed {
    tollgate_chain::install_crypto_provider();
    let commands = readme::commands(GO_LIVE, "<!-- golive -->");
    let net = usdc::token_only(Some(2)).await.unwrap();
    let chain = Arc::clone(&net.chain);
    let rpc_url = net.anvil.url().to_owned();
    let node = Node {
        http: reqwest::Client::new(),
        url: rpc_url.clone(),
    };
    let (upstream, hits) = serve_upstream().await;
    let deployer = net.accounts[DEPLOYER].clone();
    let relayer = net.accounts[RELAYER].clone();
    let payer = net.accounts[PAYER].clone();
    // Where the payments go: an address of the reader's with nothing on it yet.
    let pay_to = Address::from_word(keccak256(b"tollgate go-live payee"));
    let plan = Plan::new(USDC_BASE_SEPOLIA, deployer.address);
    let fac = format!("127.0.0.1:{}", crate::free_port());
    let gw = format!("127.0.0.1:{}", crate::free_port());

    let dir = tempfile::tempdir().unwrap();
    let mut w = Walk::new(
        commands,
        dir.path().to_owned(),
        BTreeMap::from([
            ("PATH".to_owned(), path_with_tollgate()),
            ("HOME".to_owned(), dir.path().display().to_string()),
        ]),
    );

    // What the reader sets.
    w.set("RPC_URL", rpc_url.clone());
    w.set("PUBLIC_RPC_URL", rpc_url.clone());
    w.set("TOLLGATE_DEPLOYER_KEY", deployer.private_key.to_string());
    w.set("TOLLGATE_RELAYER_KEY", relayer.private_key.to_string());
    let proof = w.export("TOLLGATE_PROOF_KEY").await;
    let proof = tollgate_agent::signer_from_hex(&proof)
        .expect("the proof key line makes a key")
        .address();
    assert_ne!(proof, relayer.address);
    w.set("TOLLGATE_KEY", payer.private_key.to_string());
    w.set("PAY_TO", pay_to.to_string());
    w.set("UPSTREAM", upstream);
    w.set("FAC", fac.clone());
    w.set("GW", gw.clone());

    // The plan: nothing sent.
    let nonce0 = chain.nonce(deployer.address).await.unwrap();
    let dry = w.run("tollgate deploy").await.ok().json();
    assert_eq!(dry["dryRun"], true, "{dry}");
    assert_eq!(dry["chainId"], usdc::BASE_SEPOLIA_CHAIN_ID);
    assert_eq!(dry["tokenName"], "USDC");
    assert_eq!(dry["tokenVersion"], "2");
    assert_eq!(
        dry["router"].as_str().unwrap().parse::<Address>().unwrap(),
        plan.router.address
    );
    let estimate = dry["gasEstimate"].as_u64().unwrap();
    assert_eq!(chain.nonce(deployer.address).await.unwrap(), nonce0);
    assert!(chain.code(plan.router.address).await.unwrap().is_empty());

    // The deployment: both contracts, their code, 2 confirmations, the config.
    let block0 = node.block_number().await;
    let deployed = w.run("tollgate deploy").await.ok();
    assert!(
        deployed.stderr.contains("2 confirmation(s)"),
        "{}",
        deployed.stderr
    );
    let deployed = deployed.json();
    assert_eq!(chain.nonce(deployer.address).await.unwrap(), nonce0 + 2);
    let mut deploy_gas = 0;
    for (name, planned) in plan.contracts() {
        let at: Address = deployed["contracts"][name]["address"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(at, planned.address, "{name}");
        let code = chain.code(at).await.unwrap();
        let expected = expected_runtime_code(&*chain, planned.init_code.clone())
            .await
            .unwrap();
        assert!(!code.is_empty(), "{name}");
        assert_eq!(code, expected, "{name}'s code");
        let tx = deployed["contracts"][name]["tx"].as_str().unwrap();
        let block = deployed["contracts"][name]["block"].as_u64().unwrap();
        assert!(
            node.block_number().await > block,
            "{name}: buried under a block"
        );
        deploy_gas += node.gas_used(tx).await;
    }
    let config = std::fs::read_to_string(dir.path().join("facilitator.toml")).unwrap();
    assert!(config.contains("confirmations = 2"), "{config}");
    assert!(
        config.contains(&format!("public_rpc_url = \"{rpc_url}\"")),
        "{config}"
    );
    let start_block = deployed["contracts"]["Subscriptions"]["block"]
        .as_u64()
        .unwrap();
    assert!(
        config.contains(&format!("start_block = {start_block}\n")),
        "{config}"
    );
    assert!(config.contains(&format!("listen = \"{fac}\"")), "{config}");
    assert!(
        !config.contains(&deployer.private_key.to_string()[2..])
            && !config.contains(&relayer.private_key.to_string()[2..]),
        "no key in the config"
    );
    assert!(node.block_number().await > block0);

    // Again: found, nothing sent.
    let again = w.run("tollgate deploy").await.ok();
    assert!(again.stderr.contains("nothing to send"), "{}", again.stderr);
    assert_eq!(again.json()["contracts"]["Subscriptions"]["present"], true);
    assert_eq!(chain.nonce(deployer.address).await.unwrap(), nonce0 + 2);

    // The check passes: nothing fails.
    let check = w
        .run("tollgate facilitator --config facilitator.toml --check")
        .await;
    assert_eq!(check.code, 0, "{check:?}");
    assert!(
        check.stdout.lines().all(|l| l.starts_with("ok ")),
        "every check ok: {}",
        check.stdout
    );
    for what in ["chain id", "PaymentRouter", "Subscriptions", "relayer"] {
        assert!(
            check.stdout.to_lowercase().contains(&what.to_lowercase()),
            "the check names {what}: {}",
            check.stdout
        );
    }

    Deployed {
        net,
        chain,
        node,
        rpc_url,
        dir,
        w,
        hits,
        deployer,
        relayer,
        payer,
        pay_to,
        plan,
        gw,
        nonce0,
        estimate,
        deploy_gas,
    }
}

/// `who`'s USDC on chain.
async fn usdc_of(chain: &dyn tollgate_chain::Chain, who: Address) -> U256 {
    contracts::read(
        chain,
        USDC_BASE_SEPOLIA,
        &Token::balanceOfCall { account: who },
    )
    .await
    .unwrap()
}
