//! The README's "Go live on Base Sepolia", run verbatim: the `sh` block after `<!-- golive -->`,
//! one command at a time through `bash -c`, against a Base Sepolia lookalike: anvil with chain id
//! 84532, blocks every 2 s, and Circle's FiatToken v2.2 behind its proxy at USDC's Base Sepolia
//! address, with none of Tollgate's contracts ([`tollgate_testkit::usdc::token_only`]). Only what
//! a reader sets differs: the RPC URL, the funded keys (dev accounts standing in for keys funded
//! from faucets), where payments go, the upstream API and free ports.
//!
//! `tollgate deploy` plans, deploys (2 confirmations) and writes the facilitator config, and a
//! second run sends nothing; `tollgate facilitator --check` passes on it; the facilitator and
//! `tollgate gateway` serve; `tollgate pay` pays a request, and the FiatToken balances on chain
//! moved by exactly the price. Then unmodified x402 clients from npm (`x402-fetch` 1.2.0, V1;
//! `@x402/fetch`, V2) and the npm package's README agent example pay the same gateway. The gas of
//! each transaction sent is measured and printed, and the README's figures are checked against
//! it (within 2 %).

// The transcript (each command, its exit status and output) and the measured gas go to stderr,
// which the test runner shows when the test fails (and with --no-capture).
#![allow(clippy::print_stderr)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::primitives::{Address, U256, keccak256};
use axum::{Router, routing::get};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tollgate_chain::{
    contracts::{self, Token},
    deploy::{Plan, expected_runtime_code},
};
use tollgate_testkit::usdc::{self, USDC_BASE_SEPOLIA};

/// The route's price in the README's gateway.toml: 0.10 USDC.
const PRICE: u64 = 100_000;
/// The facilitator's fee on a one-time payment (0.001), taken by the router for its fee
/// recipient (the deployer).
const FEE: u64 = 1_000;
/// The dev accounts standing in for the reader's funded keys.
const DEPLOYER: usize = 2;
const RELAYER: usize = 8;
const PAYER: usize = 1;

/// The README's `sh` block after `marker`: one command per line, with heredocs and `\`
/// continuations joined, comment lines and blank lines left out.
pub(crate) fn readme_commands(marker: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let (_, after) = readme
        .split_once(marker)
        .unwrap_or_else(|| panic!("the README marks the section with {marker}"));
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .expect("a ```sh block right after the marker");
    let block = &block[..block.find("\n```").expect("the block's end")];
    let mut commands = Vec::new();
    let mut lines = block.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut command = line.to_owned();
        if let Some((_, tag)) = line.split_once("<<") {
            let tag = tag.trim().trim_matches(['\'', '"']).to_owned();
            for next in lines.by_ref() {
                command.push('\n');
                command.push_str(next);
                if next.trim() == tag {
                    break;
                }
            }
        }
        while command.ends_with('\\') {
            command.pop();
            command.push_str(lines.next().expect("a continued line"));
        }
        commands.push(command);
    }
    commands
}

/// What a command did.
#[derive(Debug)]
struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Output {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }

    #[track_caller]
    fn ok(self) -> Self {
        assert_eq!(self.code, 0, "failed: {}\n{}", self.stdout, self.stderr);
        self
    }
}

/// Walks the README's commands in order: each step names what it expects the next command to
/// be, so an edit of the README that this test does not know fails here, by line.
struct Walk {
    commands: std::vec::IntoIter<String>,
    dir: PathBuf,
    env: BTreeMap<String, String>,
    background: Vec<Child>,
}

impl Walk {
    fn next(&mut self, starts_with: &str) -> String {
        let command = self.commands.next().expect("more README commands");
        assert!(
            command.starts_with(starts_with),
            "the README's next command is {command:?}, expected {starts_with:?}…"
        );
        command
    }

    /// `export NAME=…` (a value the reader sets): takes `value`, as the reader would.
    fn set(&mut self, name: &str, value: impl Into<String>) {
        let command = self.next(&format!("export {name}="));
        let value = value.into();
        eprintln!("$ {command}\n  ({name}={value})");
        self.env.insert(name.to_owned(), value);
    }

    /// `export NAME=…` evaluated by bash, verbatim.
    async fn export(&mut self, name: &str) -> String {
        let command = self.next(&format!("export {name}="));
        let out = self
            .bash(&format!("{command}\nprintf %s \"${name}\""))
            .await
            .ok();
        eprintln!("$ {command}");
        self.env.insert(name.to_owned(), out.stdout.clone());
        out.stdout
    }

    fn bash_command(&self, command: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.args(["-euo", "pipefail", "-c", command])
            .current_dir(&self.dir)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    async fn bash(&self, command: &str) -> Output {
        let out = tokio::time::timeout(
            Duration::from_secs(180),
            self.bash_command(command).output(),
        )
        .await
        .unwrap_or_else(|_| panic!("timed out: {command}"))
        .unwrap();
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs the next command, which must start with `starts_with`.
    async fn run(&mut self, starts_with: &str) -> Output {
        let command = self.next(starts_with);
        let out = self.bash(&command).await;
        eprintln!(
            "$ {command}\n  exit {}\n  stdout: {}\n  stderr: {}",
            out.code,
            out.stdout.trim(),
            out.stderr.trim()
        );
        out
    }

    /// Runs the next command again until `done` holds, at most `within`; every earlier attempt
    /// must satisfy `meanwhile`.
    async fn run_until(
        &mut self,
        starts_with: &str,
        within: Duration,
        done: impl Fn(&Output) -> bool,
        meanwhile: impl Fn(&Output) -> bool,
    ) -> Output {
        let command = self.next(starts_with);
        let started = Instant::now();
        for attempt in 1.. {
            let out = self.bash(&command).await;
            if done(&out) {
                eprintln!(
                    "$ {command}\n  exit {} at attempt {attempt}\n  stdout: {}\n  stderr: {}",
                    out.code,
                    out.stdout.trim(),
                    out.stderr.trim()
                );
                return out;
            }
            assert!(
                meanwhile(&out),
                "{command}: unexpected at attempt {attempt}: {out:?}\n{}",
                self.logs()
            );
            assert!(
                started.elapsed() < within,
                "{command}: not done in {within:?}: {out:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        unreachable!()
    }

    /// Starts the next command, which ends in `&`, as a background process of this test; its
    /// stderr goes to `<name>.log` in the directory.
    fn spawn(&mut self, starts_with: &str, name: &str) {
        let command = self.next(starts_with);
        let foreground = command
            .trim_end()
            .strip_suffix('&')
            .expect("a background command")
            .to_owned();
        eprintln!("$ {command}");
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let child = self
            .bash_command(&format!("exec {foreground}"))
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.background.push(child);
    }

    /// The background processes' logs, for failure messages.
    fn logs(&self) -> String {
        ["facilitator", "gateway"]
            .iter()
            .map(|name| {
                let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {name}.log (tail) ---\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn done(&mut self) {
        let rest: Vec<String> = self.commands.by_ref().collect();
        assert!(
            rest.is_empty(),
            "README commands this test does not know: {rest:?}"
        );
    }
}

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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The `tollgate` binary's directory first on `PATH`, as after the README's build step.
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

/// A figure the README states: the first number after `label` in the go-live section (its
/// whitespace collapsed), e.g. 129000 in "… router uses about 129,000 gas". Commas are ignored.
fn readme_figure(label: &str) -> u64 {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let section = readme
        .split_once("## Go live on Base Sepolia")
        .expect("the go-live section")
        .1
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

/// The README's figure after `label` is within 2 % of `measured`.
#[track_caller]
fn assert_about(label: &str, measured: u64) {
    let stated = readme_figure(label);
    assert!(
        measured.abs_diff(stated) * 50 <= stated,
        "the README says {label:?} about {stated}; measured {measured}: update the README"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_go_live_on_base_sepolia_deploys_serves_and_is_paid_in_usdc() {
    tollgate_chain::install_crypto_provider();
    let commands = readme_commands("<!-- golive -->");
    let net = usdc::token_only(Some(2)).await.unwrap();
    let chain = Arc::clone(&net.chain);
    let rpc_url = net.anvil.url().to_owned();
    let node = Node {
        http: reqwest::Client::new(),
        url: rpc_url.clone(),
    };
    let usdc_balance = |who: Address| {
        let chain = Arc::clone(&chain);
        async move {
            contracts::read(
                &*chain,
                USDC_BASE_SEPOLIA,
                &Token::balanceOfCall { account: who },
            )
            .await
            .unwrap()
        }
    };
    let (upstream, hits) = serve_upstream().await;
    let deployer = net.accounts[DEPLOYER].clone();
    let relayer = net.accounts[RELAYER].clone();
    let payer = net.accounts[PAYER].clone();
    // Where the payments go: an address of the reader's with nothing on it yet.
    let pay_to = Address::from_word(keccak256(b"tollgate go-live payee"));
    let plan = Plan::new(USDC_BASE_SEPOLIA, deployer.address);
    let fac = format!("127.0.0.1:{}", free_port());
    let gw = format!("127.0.0.1:{}", free_port());

    let dir = tempfile::tempdir().unwrap();
    let mut w = Walk {
        commands: commands.into_iter(),
        dir: dir.path().to_owned(),
        env: BTreeMap::from([
            ("PATH".to_owned(), path_with_tollgate()),
            ("HOME".to_owned(), dir.path().display().to_string()),
        ]),
        background: Vec::new(),
    };

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
    if let Some(scripts) = crate::interop::scripts_with(&packages) {
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
            let mut cmd = Command::new("node");
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
    drop(w.background);
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
            Command::new("node")
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
        Command::new("node")
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
