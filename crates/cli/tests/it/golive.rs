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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_go_live_on_base_sepolia_deploys_serves_and_is_paid_in_usdc() {
    let Deployed {
        net,
        chain,
        node,
        rpc_url: _,
        dir,
        mut w,
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
    } = deploy_and_check().await;
    let usdc_balance = |who: Address| {
        let chain = Arc::clone(&chain);
        async move { usdc_of(&*chain, who).await }
    };
    // Served: the facilitator, the gateway in front of the API.
    w.spawn(
        "tollgate facilitator --config facilitator.toml",
        "facilitator",
    );
    w.run("cat > gateway.toml").await.ok();
    w.spawn("tollgate gateway --config gateway.toml", "gateway");
    let offer = w
        .run_until(
            "curl -si http://$GW/v1/quote",
            Duration::from_secs(60),
            |o| o.code == 0 && o.stdout.starts_with("HTTP/1.1 402"),
            |o| o.code == 7, // not listening yet
        )
        .await;
    assert!(
        offer
            .stdout
            .to_lowercase()
            .contains(&USDC_BASE_SEPOLIA.to_string().to_lowercase()),
        "the 402 asks for USDC: {}",
        offer.stdout
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    // Paid: the payer's USDC to the payee, less the fee to the fee recipient; no gas paid by
    // either.
    let (payer0, payee0, fees0) = (
        usdc_balance(payer.address).await,
        usdc_balance(pay_to).await,
        usdc_balance(deployer.address).await,
    );
    assert_eq!(payee0, U256::ZERO);
    let payer_eth = chain.balance(payer.address).await.unwrap();
    let relayer_block = node.block_number().await;
    let relayer_nonce = chain.nonce(relayer.address).await.unwrap();
    let paid = w.run("tollgate pay http://$GW/v1/quote").await;
    assert_eq!(paid.code, 0, "{paid:?}\n{}", w.logs());
    assert!(
        paid.stdout.contains(r#"{"served":"/v1/quote"}"#),
        "{paid:?}"
    );
    assert!(paid.stderr.contains("paid 0.100000"), "{}", paid.stderr);
    w.done();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(
        usdc_balance(payer.address).await,
        payer0 - U256::from(PRICE),
        "the payer paid the price"
    );
    assert_eq!(
        usdc_balance(pay_to).await,
        U256::from(PRICE - FEE),
        "the payee got the price less the fee"
    );
    assert_eq!(
        usdc_balance(deployer.address).await,
        fees0 + U256::from(FEE),
        "the fee recipient got the fee"
    );
    assert_eq!(chain.balance(payer.address).await.unwrap(), payer_eth);
    assert_eq!(chain.balance(pay_to).await.unwrap(), U256::ZERO);

    // What it cost: one relayer transaction, the router payment.
    assert_eq!(
        chain.nonce(relayer.address).await.unwrap(),
        relayer_nonce + 1,
        "one settlement"
    );
    let sent = node.gas_used_by(relayer.address, relayer_block).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1, plan.router.address, "sent to the router");
    let payment_gas = sent[0].2;
    eprintln!(
        "gas: deployment estimate {estimate}, deployment used {deploy_gas}, router payment on \
         FiatToken v2.2 {payment_gas} ({})",
        sent[0].0
    );
    assert_about("takes the fee) uses", payment_gas);
    assert_about("deploying both contracts uses", deploy_gas);
    // What 0.01 ETH pays for at 0.01 gwei.
    assert_about(
        "0.01 ETH pays for",
        10_u64.pow(16) / (payment_gas * 10_u64.pow(7)),
    );

    // Unmodified x402 clients from npm pay the same gateway on FiatToken, V1 (`x402-fetch`) and
    // V2 (`@x402/fetch`): the full price to the payee (x402 takes no fee), one relayer
    // transaction each, `transferWithAuthorization` on USDC itself.
    let packages = ["x402", "x402-fetch", "viem", "@x402/fetch", "@x402/evm"];
    {
        let scripts = crate::interop::scripts_with(&packages);
        let url = format!("http://{gw}/v1/quote");
        let clients = [
            ("x402-fetch-pay.mjs", 3, vec![PRICE.to_string()]),
            ("x402v2-fetch-pay.mjs", 4, vec![]),
        ];
        for (script, who, extra) in clients {
            let client = net.accounts[who].clone();
            let (client0, payee0) = (
                usdc_balance(client.address).await,
                usdc_balance(pay_to).await,
            );
            let block = node.block_number().await;
            let nonce = chain.nonce(relayer.address).await.unwrap();
            let mut cmd = Command::new(tollgate_testkit::peer::node());
            cmd.arg(scripts.join(script))
                .arg(&url)
                .arg(client.private_key.to_string())
                .args(&extra)
                .stdin(Stdio::null())
                .kill_on_drop(true);
            let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
                .await
                .unwrap_or_else(|_| panic!("{script} timed out"))
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{script} failed: {}\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr),
                w.logs()
            );
            let line: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
            assert_eq!(line["status"], 200, "{script}: {line}");
            assert_eq!(line["body"]["served"], "/v1/quote", "{script}: {line}");
            assert_eq!(line["paymentResponse"]["success"], true, "{script}: {line}");
            assert_eq!(
                usdc_balance(client.address).await,
                client0 - U256::from(PRICE),
                "{script}: the client paid the price"
            );
            assert_eq!(
                usdc_balance(pay_to).await,
                payee0 + U256::from(PRICE),
                "{script}: the payee got all of it"
            );
            assert_eq!(chain.nonce(relayer.address).await.unwrap(), nonce + 1);
            let sent = node.gas_used_by(relayer.address, block).await;
            assert_eq!(sent.len(), 1, "{sent:?}");
            assert_eq!(
                sent[0].1, USDC_BASE_SEPOLIA,
                "{script}: sent to USDC itself"
            );
            eprintln!(
                "gas: x402 settlement ({script}) on FiatToken v2.2 {} ({})",
                sent[0].2, sent[0].0
            );
            assert_about("no fee) uses", sent[0].2);
        }
        assert_eq!(hits.load(Ordering::SeqCst), 3);

        // The project's npm package: its README's agent example, verbatim, pays the gateway
        // through the facilitator (the router, with the fee), as `tollgate pay` did.
        let client = net.accounts[5].clone();
        let (client0, payee0, fees0) = (
            usdc_balance(client.address).await,
            usdc_balance(pay_to).await,
            usdc_balance(deployer.address).await,
        );
        let block = node.block_number().await;
        let out = npm_agent_example(&url, &client.private_key.to_string()).await;
        assert!(out.starts_with("200 "), "{out}");
        assert!(out.contains("/v1/quote"), "{out}");
        assert!(out.contains(&format!("paid {PRICE} units, tx 0x")), "{out}");
        assert_eq!(
            usdc_balance(client.address).await,
            client0 - U256::from(PRICE)
        );
        assert_eq!(usdc_balance(pay_to).await, payee0 + U256::from(PRICE - FEE));
        assert_eq!(
            usdc_balance(deployer.address).await,
            fees0 + U256::from(FEE)
        );
        let sent = node.gas_used_by(relayer.address, block).await;
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0].1, plan.router.address, "sent to the router");
        eprintln!(
            "gas: router payment (the npm package's Agent) on FiatToken v2.2 {} ({})",
            sent[0].2, sent[0].0
        );
        assert_about("held no USDC yet and", sent[0].2);
        assert_eq!(hits.load(Ordering::SeqCst), 4);
    }

    // A config written again for the deployment (a lost facilitator.toml): nothing sent; the
    // Subscriptions block is not known to this run, which says so in the config and on stderr,
    // and the config still passes the check.
    let rewritten = w
        .bash(
            "tollgate deploy --rpc-url $RPC_URL --key env:TOLLGATE_DEPLOYER_KEY \
             --network base-sepolia --listen $FAC --write-config again.toml",
        )
        .await
        .ok();
    assert!(
        rewritten.stderr.contains("nothing to send")
            && rewritten.stderr.contains("set start_block in again.toml"),
        "{}",
        rewritten.stderr
    );
    assert_eq!(chain.nonce(deployer.address).await.unwrap(), nonce0 + 2);
    let again = std::fs::read_to_string(dir.path().join("again.toml")).unwrap();
    assert!(again.contains("# start_block = 0\n"), "{again}");
    assert!(!again.contains("\nstart_block"), "{again}");
    assert!(again.contains("# public_rpc_url = "), "{again}");
    let check = w
        .bash("tollgate facilitator --config again.toml --check")
        .await;
    assert_eq!(check.code, 0, "{check:?}");
    drop(w);
}

/// Runs the agent example of the npm package's README (`crates/node/README.md`, the block after
/// `<!-- example: agent -->`) verbatim with node, `require('tollgate')` resolving to the package
/// in `crates/node`, with `AGENT_KEY` and `URL` set; its stdout. The native addon is built first
/// when it is missing, as `scripts/test` builds it (in the workspace's target directory).
async fn npm_agent_example(url: &str, key: &str) -> String {
    let package = crate::interop::repo_root().join("crates/node");
    if !package.join("native/binding.js").is_file() {
        eprintln!("building the npm package's native addon (crates/node/scripts/build.mjs)");
        let built = tokio::time::timeout(
            Duration::from_secs(1800),
            Command::new(tollgate_testkit::peer::node())
                .arg(package.join("scripts/build.mjs"))
                .env("TOLLGATE_NODE_SHARED_TARGET", "1")
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .status(),
        )
        .await
        .expect("the addon built in time")
        .unwrap();
        assert!(built.success(), "crates/node/scripts/build.mjs failed");
    }
    let readme = std::fs::read_to_string(package.join("README.md")).unwrap();
    let example = readme
        .split_once("<!-- example: agent -->")
        .expect("crates/node/README.md marks its agent example")
        .1
        .trim_start()
        .strip_prefix("```js\n")
        .expect("a ```js block after the marker");
    let example = &example[..example.find("\n```").expect("the block's end")];
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("node_modules")).unwrap();
    std::os::unix::fs::symlink(&package, dir.path().join("node_modules/tollgate")).unwrap();
    std::fs::write(dir.path().join("agent.js"), example).unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new(tollgate_testkit::peer::node())
            .arg("agent.js")
            .current_dir(dir.path())
            .env("AGENT_KEY", key)
            .env("URL", url)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the npm agent example finished in time")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the npm agent example failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "$ node agent.js (crates/node/README.md)\n  {}",
        stdout.trim()
    );
    stdout
}

/// Webhook deliveries as received: headers and body.
type Deliveries = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn serve_hooks() -> (String, Deliveries) {
    let got: Deliveries = Arc::default();
    let kept = Arc::clone(&got);
    let app = Router::new().route(
        "/hooks",
        post(move |headers: HeaderMap, body: Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                kept.lock().unwrap().push((headers, body));
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, got)
}

fn served(out: &Output, path: &str) -> bool {
    out.code == 0 && out.stdout.contains(&format!(r#"{{"served":"{path}"}}"#))
}

fn refused(out: &Output, reason: &str) -> bool {
    out.code == 4 && out.stderr.contains(reason)
}

fn units(v: &Value) -> U256 {
    v.as_str()
        .unwrap_or_else(|| panic!("an amount: {v}"))
        .parse()
        .unwrap()
}

/// The plan's amount a cycle: 1.00 USDC.
const PLAN_AMOUNT: u64 = 1_000_000;
/// The plan's cycle: a week.
const INTERVAL: u64 = 604_800;
/// A metered call: 0.10 from the overage allowance.
const METERED: u64 = 100_000;

/// Subscriptions through the go-live deployment: after the chapter's `tollgate deploy` and with
/// `tollgate facilitator` (its keeper every second, webhooks on) and `tollgate gateway` running as
/// processes on FiatToken v2.2 (2 s blocks, 2 confirmations), a fresh provider key registers and
/// publishes a plan with the CLI, a gateway sells it (a plan route and a metered one); the
/// subscriber subscribes with `tollgate subscribe` (gasless: USDC's EIP-2612 `permit`), is served
/// on the subscription, meters its overage to the cap, raises it, is charged the overage on chain
/// and renewed by the keeper after a week (anvil time travel), pauses, resumes and cancels, all
/// with the CLI. At the end, the USDC that left the subscriber is what reached the payee, is what
/// the chain's `Transfer` events, the webhooks (each delivered once, signed) and the analytics
/// report, each amount billed once; the subscriber spent no ETH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_live_subscriptions_on_fiat_token_through_the_cli_and_the_gateway() {
    let Deployed {
        net: _net,
        chain,
        node,
        rpc_url,
        dir,
        mut w,
        hits,
        deployer: _,
        relayer,
        payer,
        pay_to,
        plan: deployment,
        gw: _,
        nonce0: _,
        estimate: _,
        deploy_gas: _,
    } = deploy_and_check().await;
    let chain = &*chain;
    let subscriber = payer.address;
    let (hook, deliveries) = serve_hooks().await;

    // The operator turns on what subscriptions need in the config `tollgate deploy` wrote: a
    // key sealing webhook secrets, loopback webhook targets (the test's receiver), and a keeper
    // running every second.
    let config_path = dir.path().join("facilitator.toml");
    let config = std::fs::read_to_string(&config_path).unwrap();
    let proof_line = "proof = \"env:TOLLGATE_PROOF_KEY\"\n";
    assert!(config.contains(proof_line), "{config}");
    let config = config.replace(
        proof_line,
        &format!("{proof_line}webhook_secrets = \"env:TOLLGATE_WEBHOOK_SECRETS\"\n"),
    ) + "\n[subscriptions]\nkeeper_interval_secs = 1\n\n[webhooks]\nallow_private_targets = true\n";
    std::fs::write(&config_path, config).unwrap();
    w.env.insert(
        "TOLLGATE_WEBHOOK_SECRETS".to_owned(),
        alloy::hex::encode(keccak256(b"tollgate go-live webhook secrets")),
    );
    w.spawn(
        "tollgate facilitator --config facilitator.toml",
        "facilitator",
    );
    w.env.insert("HOOK".to_owned(), hook);
    w.env.insert("RPC".to_owned(), rpc_url);
    w.sh_until(
        "curl -sf http://$FAC/readyz",
        Duration::from_secs(60),
        |o| o.code == 0,
        |o| o.code == 7 || o.code == 22, // not listening, or not ready yet
    )
    .await;

    // The provider: a fresh key, registered with a signature; its plan pays $PAY_TO.
    w.sh("openssl rand -hex 32 > provider.key").await.ok();
    let register = w
        .sh("tollgate provider register --facilitator http://$FAC --key-file provider.key > api-key")
        .await
        .ok();
    let provider: Address = register
        .stderr
        .split("registered provider ")
        .nth(1)
        .and_then(|rest| rest.get(..42))
        .unwrap_or_else(|| panic!("no address in: {}", register.stderr))
        .parse()
        .unwrap();
    let api_key = std::fs::read_to_string(dir.path().join("api-key")).unwrap();
    w.env
        .insert("TOLLGATE_API_KEY".to_owned(), api_key.trim().to_owned());
    let endpoint = w
        .sh("tollgate webhooks create --facilitator http://$FAC --url $HOOK")
        .await
        .ok()
        .json();
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{endpoint}");
    let plan = w
        .sh(&format!(
            "tollgate plan create --facilitator http://$FAC --network base-sepolia --amount 1.00 \
             --interval {INTERVAL} --pay-to $PAY_TO --idempotency-key weekly"
        ))
        .await
        .ok()
        .json();
    assert_eq!(plan["amount"], PLAN_AMOUNT.to_string(), "{plan}");
    let plan_id = plan["planId"].as_str().unwrap().to_owned();
    w.env.insert("PLAN".to_owned(), plan_id.clone());

    // The gateway: the chapter's, with the plan's routes and the provider's API key (metering).
    let readme_gateway = w.next("cat > gateway.toml");
    let gateway = readme_gateway
        .replace(
            "facilitator = \"http://$FAC\"\n",
            "facilitator = \"http://$FAC\"\napi_key_env = \"TOLLGATE_API_KEY\"\n",
        )
        .replace(
            "\nEOF",
            "\n[[routes]]\nprefix = \"/v1/report\"\nplan = \"$PLAN\"\n\
             [[routes]]\nprefix = \"/v1/process\"\nplan = \"$PLAN\"\nmetered = \"0.10\"\nEOF",
        );
    assert!(
        gateway.contains("api_key_env") && gateway.contains("metered"),
        "{gateway}"
    );
    w.sh(&gateway).await.ok();
    w.spawn("tollgate gateway --config gateway.toml &", "gateway");
    let offer = w
        .sh_until(
            "curl -si http://$GW/v1/report",
            Duration::from_secs(60),
            |o| o.code == 0 && o.stdout.starts_with("HTTP/1.1 402"),
            |o| o.code == 7,
        )
        .await;
    assert!(
        offer.stdout.contains(&plan_id),
        "the 402 offers the plan: {}",
        offer.stdout
    );

    // Subscribed with the CLI: a permit and an intent signed, the first cycle billed.
    let (subscriber0, payee0) = (
        usdc_of(chain, subscriber).await,
        usdc_of(chain, pay_to).await,
    );
    assert_eq!(payee0, U256::ZERO);
    let subscriber_eth = chain.balance(subscriber).await.unwrap();
    let permit_nonce = || async {
        contracts::read(
            chain,
            USDC_BASE_SEPOLIA,
            &Token::noncesCall { owner: subscriber },
        )
        .await
        .unwrap()
    };
    let allowance = || async {
        contracts::read(
            chain,
            USDC_BASE_SEPOLIA,
            &Token::allowanceCall {
                owner: subscriber,
                spender: deployment.subscriptions.address,
            },
        )
        .await
        .unwrap()
    };
    assert_eq!(permit_nonce().await, U256::ZERO);
    assert_eq!(allowance().await, U256::ZERO);
    let block0 = node.block_number().await;
    let sub = w
        .sh("tollgate subscribe --plan $PLAN --max 1.00 --max-overage 0.30 --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(sub["status"], "ACTIVE", "{sub}");
    assert_eq!(sub["planId"], plan_id.as_str(), "{sub}");
    assert_eq!(sub["allowance"]["cap"], "300000", "{sub}");
    let sub_id = sub["id"].as_str().unwrap().to_owned();
    let first_paid_through = sub["paidThrough"].as_u64().unwrap();
    w.env.insert("SUB".to_owned(), sub_id.clone());
    let mut paid = PLAN_AMOUNT;
    // Gasless: the CLI's permit, consumed on chain (FiatToken's nonce), let the Subscriptions
    // contract take 12 cycles of the plan and the overage cap; it took the first cycle.
    assert_eq!(permit_nonce().await, U256::from(1), "one permit used");
    let permitted = U256::from(12 * (PLAN_AMOUNT + 300_000));
    assert_eq!(allowance().await, permitted - U256::from(paid));
    assert_eq!(
        usdc_of(chain, subscriber).await,
        subscriber0 - U256::from(paid)
    );
    assert_eq!(usdc_of(chain, pay_to).await, U256::from(paid));

    // Served on it; metered to the cap; raised; served again. Metering moves nothing yet.
    let report = w
        .sh("tollgate pay http://$GW/v1/report -H \"X-Service-Sub: $SUB\"")
        .await;
    assert!(served(&report, "/v1/report"), "{report:?}\n{}", w.logs());
    assert!(!report.stderr.contains("paid "), "{}", report.stderr);
    let process = "tollgate pay http://$GW/v1/process -H \"X-Service-Sub: $SUB\"";
    for _ in 0..3 {
        let out = w.sh(process).await;
        assert!(served(&out, "/v1/process"), "{out:?}\n{}", w.logs());
    }
    let exhausted = w.sh(process).await;
    assert!(refused(&exhausted, "AllowanceExhausted"), "{exhausted:?}");
    let raised = w
        .sh("tollgate subscribe --raise $SUB --max-overage 0.50 --max 0.20 --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(raised["allowance"]["cap"], "500000", "{raised}");
    let again = w.sh(process).await;
    assert!(served(&again, "/v1/process"), "{again:?}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        5,
        "the upstream served each admitted request"
    );
    assert_eq!(
        usdc_of(chain, subscriber).await,
        subscriber0 - U256::from(paid)
    );

    // A week later: the keeper charges the overage on chain, then renews.
    for method in [
        format!(r#""evm_increaseTime","params":[{INTERVAL}]"#),
        r#""evm_mine","params":[]"#.to_owned(),
    ] {
        let out = w
            .sh(&format!(
                r#"curl -s -H 'content-type: application/json' -d '{{"jsonrpc":"2.0","id":1,"method":{method}}}' $RPC"#
            ))
            .await
            .ok();
        assert!(out.stdout.contains("\"result\""), "{out:?}");
    }
    let renewed = w
        .sh_until(
            "tollgate subscription show $SUB --facilitator http://$FAC",
            Duration::from_secs(60),
            |o| {
                o.code == 0
                    && serde_json::from_str::<Value>(&o.stdout).is_ok_and(|s| {
                        s["paidThrough"]
                            .as_u64()
                            .is_some_and(|p| p >= first_paid_through + INTERVAL)
                    })
            },
            |o| o.code == 0 && o.json()["paidThrough"].as_u64() == Some(first_paid_through),
        )
        .await;
    assert_eq!(renewed.json()["status"], "ACTIVE");
    paid += 4 * METERED + PLAN_AMOUNT;
    let started = Instant::now();
    while usdc_of(chain, subscriber).await != subscriber0 - U256::from(paid) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the overage and the renewal: paid {} of {paid}\n{}",
            subscriber0 - usdc_of(chain, subscriber).await,
            w.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Paused: refused; resumed: served; cancelled: refused.
    let report = "tollgate pay http://$GW/v1/report -H \"X-Service-Sub: $SUB\"";
    let paused = w
        .sh("tollgate subscription pause $SUB --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(paused["status"], "PAUSED", "{paused}");
    w.sh_until(
        report,
        Duration::from_secs(15),
        |o| refused(o, "SubscriptionNotActive"),
        |o| served(o, "/v1/report"), // until the gate's cache hears of it
    )
    .await;
    let resumed = w
        .sh("tollgate subscription resume $SUB --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(resumed["status"], "ACTIVE", "{resumed}");
    w.sh_until(
        report,
        Duration::from_secs(15),
        |o| served(o, "/v1/report"),
        |o| refused(o, "SubscriptionNotActive"),
    )
    .await;
    let cancelled = w
        .sh("tollgate subscription cancel $SUB --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(cancelled["status"], "CANCELLED", "{cancelled}");
    w.sh_until(
        report,
        Duration::from_secs(15),
        |o| refused(o, "SubscriptionNotActive"),
        |o| served(o, "/v1/report"),
    )
    .await;

    // The chain: what left the subscriber reached the payee, nothing more (the keeper, running
    // every second through the pause, resume and cancel, billed nothing again); the subscriber,
    // the provider and the payee spent no ETH; the relayer paid every transaction.
    assert_eq!(
        usdc_of(chain, subscriber).await,
        subscriber0 - U256::from(paid)
    );
    assert_eq!(usdc_of(chain, pay_to).await, U256::from(paid));
    assert_eq!(
        chain.balance(subscriber).await.unwrap(),
        subscriber_eth,
        "no gas"
    );
    assert_eq!(chain.balance(provider).await.unwrap(), U256::ZERO);
    assert_eq!(chain.balance(pay_to).await.unwrap(), U256::ZERO);
    assert_eq!(
        chain.nonce(subscriber).await.unwrap(),
        0,
        "the subscriber sent nothing"
    );
    assert!(chain.nonce(relayer.address).await.unwrap() > 0);
    assert_eq!(
        allowance().await,
        permitted - U256::from(paid),
        "every billing went through the permitted allowance"
    );
    assert_eq!(
        permit_nonce().await,
        U256::from(1),
        "the raise needed no permit"
    );

    // The chain's USDC Transfer events out of the subscriber since it subscribed: each to the
    // payee, one per billing.
    let transfer = keccak256(b"Transfer(address,address,uint256)");
    let logs = node
        .call(
            "eth_getLogs",
            json!([{
                "fromBlock": format!("{block0:#x}"),
                "toBlock": "latest",
                "address": USDC_BASE_SEPOLIA,
                "topics": [transfer, subscriber.into_word()],
            }]),
        )
        .await;
    let mut transfers: Vec<U256> = logs
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let to = Address::from_word(l["topics"][2].as_str().unwrap().parse().unwrap());
            assert_eq!(to, pay_to, "{l}");
            l["data"].as_str().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(
        transfers,
        [PLAN_AMOUNT, 4 * METERED, PLAN_AMOUNT].map(U256::from),
        "the first cycle, the overage charged before the renewal, the renewal"
    );
    transfers.sort();
    assert_eq!(
        transfers.iter().sum::<U256>(),
        U256::from(paid),
        "{transfers:?}"
    );

    // The webhooks: each event once, signed; the billings they report are the transfers.
    let expected = BTreeMap::from([
        ("allowance.exhausted", 1),
        ("allowance.raised", 1),
        ("plan.created", 1),
        ("subscription.cancelled", 1),
        ("subscription.created", 1),
        ("subscription.paused", 1),
        ("subscription.renewed", 1),
        ("subscription.resumed", 1),
    ]);
    let started = Instant::now();
    let (seen, mut billed) = loop {
        let mut ids = std::collections::BTreeSet::new();
        let mut seen = BTreeMap::<String, usize>::new();
        let mut billed = Vec::new();
        for (headers, body) in deliveries.lock().unwrap().iter() {
            let delivery = tollgate_gate::verify_webhook(headers, body, &secret)
                .unwrap_or_else(|e| panic!("a bad signature ({e}): {body:?}"));
            let event = delivery.event().unwrap();
            assert!(ids.insert(event.id.clone()), "delivered twice: {body:?}");
            let json: Value = serde_json::from_slice(body).unwrap();
            if matches!(
                event.r#type.as_str(),
                "subscription.created" | "subscription.renewed" | "allowance.charged"
            ) {
                billed.push(units(&json["data"]["amount"]));
            }
            if event.r#type != "allowance.charged" {
                *seen.entry(event.r#type.clone()).or_default() += 1;
            }
        }
        let done = seen
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<BTreeMap<_, _>>()
            == expected
            && billed.iter().sum::<U256>() == U256::from(paid);
        if done || started.elapsed() > Duration::from_secs(30) {
            break (seen, billed);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let seen: BTreeMap<&str, usize> = seen.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(seen, expected, "webhooks received");
    billed.sort();
    eprintln!("billed on chain (USDC Transfer events): {transfers:?}; by webhook: {billed:?}");
    assert_eq!(
        billed, transfers,
        "each billing reported once, as it moved on chain"
    );

    // The analytics: the same money, by kind, and the lifecycle's counts.
    let a = w
        .sh("curl -sf -H \"authorization: Bearer $TOLLGATE_API_KEY\" \"http://$FAC/analytics?range=24h\"")
        .await
        .ok()
        .json();
    let revenue = &a["revenue"]["total"];
    assert_eq!(
        units(&revenue["subscriptionFirstCycle"]),
        U256::from(PLAN_AMOUNT),
        "{a}"
    );
    assert_eq!(units(&revenue["renewal"]), U256::from(PLAN_AMOUNT), "{a}");
    assert_eq!(units(&revenue["overage"]), U256::from(4 * METERED), "{a}");
    assert_eq!(units(&revenue["gross"]), U256::from(paid), "{a}");
    let s = &a["subscriptions"];
    for (field, n) in [
        ("new", 1),
        ("renewed", 1),
        ("renewalFailed", 0),
        ("pausedInRange", 1),
        ("resumedInRange", 1),
        ("cancelledInRange", 1),
        ("cancelled", 1),
    ] {
        assert_eq!(s[field], n, "{field}: {s}");
    }
    assert_eq!(units(&a["metered"]["used"]), U256::from(4 * METERED), "{a}");
    assert_eq!(
        units(&a["metered"]["charged"]),
        U256::from(4 * METERED),
        "{a}"
    );
    assert_eq!(a["metered"]["raised"], 1, "{a}");
    drop(w);
}
