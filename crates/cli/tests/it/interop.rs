//! Interop with unmodified third-party x402 V1 peers from npm, pinned in `scripts/install-tools`
//! (`x402@1.2.0`, `x402-fetch@1.2.0`, `x402-express@1.2.0`): an `x402-express` server settles
//! through a `tollgate facilitator`, and an `x402-fetch` client pays it, on the devnet running as
//! `base-sepolia` (chain id 84532). The node scripts are in `tests/interop/`.
//!
//! Without `node` (Node 20) the tests fail with the install command, never skip. With node but
//! without the pinned packages the test fails and says to run `scripts/install-tools`.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use alloy::primitives::{Address, B256, U256};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};
use tollgate_agent::{Agent, Amount, PayRequest, PaymentKind, SpendPolicy};
use tollgate_chain::{
    Chain,
    accounts::dev_accounts,
    contracts::{self, Token},
    rpc::RpcChain,
};
use tollgate_devnet::{DEV_TOKENS, DevnetInfo};

use crate::{
    devnet::{Running, spawn_devnet},
    facilitator::{Facilitator, spawn_facilitator},
};

pub(crate) const NETWORK: &str = "base-sepolia";
pub(crate) const CHAIN_ID: u64 = 84532;
/// Above x402-fetch's default cap of 0.1 token, so the client's `maxValue` must be raised.
const PRICE: u64 = 250_000;
/// The packages the node scripts load (pinned in `scripts/install-tools`).
const PACKAGES: [&str; 5] = ["x402", "x402-fetch", "x402-express", "viem", "express"];

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The `tests/interop` scripts directory, after checking for `node` and the pinned packages
/// (a missing one fails the test with the install command, never skips it).
fn interop_scripts() -> PathBuf {
    scripts_with(&PACKAGES)
}

/// [`interop_scripts`] for scripts that load `packages`.
pub(crate) fn scripts_with(packages: &[&str]) -> PathBuf {
    tollgate_testkit::peer::interop_scripts(packages)
}

/// A facilitator config for the devnet running as `base-sepolia`, with the devnet's token (not
/// the registry's USDC) under the EIP-712 domain `USD Coin` / `2`.
fn write_facilitator_config(dir: &Path, info: &DevnetInfo) -> PathBuf {
    let c = &info.contracts;
    let rpc_url = info.rpc_url.as_deref().expect("devnet rpcUrl");
    facilitator_config(dir, rpc_url, c.token, c.router, c.subscriptions)
}

/// A facilitator config for the chain at `rpc_url` running as `base-sepolia`, with these
/// contracts, the token under the EIP-712 domain `USD Coin` / `2`.
pub(crate) fn facilitator_config(
    dir: &Path,
    rpc_url: &str,
    token: Address,
    router: Address,
    subs: Address,
) -> PathBuf {
    let config = dir.join("facilitator.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:0"
store = "sqlite://{store}"
[keys]
relayers = ["env:TOLLGATE_RELAYER_KEY"]
proof = "env:TOLLGATE_PROOF_KEY"
[[networks]]
name = "{NETWORK}"
chain_id = {CHAIN_ID}
rpc_url = "{rpc_url}"
token = "{token}"
token_name = "USD Coin"
token_version = "2"
router = "{router}"
subscriptions = "{subs}"
"#,
            store = dir.join("facilitator.db").display(),
        ),
    )
    .unwrap();
    config
}

/// `tests/interop/x402-express-server.mjs`, listening on a free port.
struct ExpressServer {
    _child: Child,
    url: String,
}

async fn spawn_x402_express(
    scripts: &Path,
    facilitator_url: &str,
    pay_to: Address,
    token: Address,
    price: u64,
) -> ExpressServer {
    spawn_x402_express_slow(scripts, facilitator_url, pay_to, token, price, 0).await
}

/// [`spawn_x402_express`] with a paid handler that takes `delay_ms`.
async fn spawn_x402_express_slow(
    scripts: &Path,
    facilitator_url: &str,
    pay_to: Address,
    token: Address,
    price: u64,
    delay_ms: u64,
) -> ExpressServer {
    let mut child = Command::new(tollgate_testkit::peer::node())
        .arg(scripts.join("x402-express-server.mjs"))
        .args(["--port", "0", "--facilitator", facilitator_url])
        .args(["--delay-ms", &delay_ms.to_string()])
        .args(["--pay-to", &pay_to.to_string(), "--network", NETWORK])
        .args(["--asset", &token.to_string()])
        .args(["--token-name", "USD Coin", "--token-version", "2"])
        .args(["--price", &price.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn node x402-express-server.mjs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .expect("x402-express server did not start in time")
            .unwrap()
            .expect("x402-express server exited before listening (its stderr is above)");
        if let Some(port) = line.strip_prefix("LISTENING ") {
            let url = format!("http://127.0.0.1:{}", port.trim());
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return ExpressServer { _child: child, url };
        }
    }
}

/// Runs `tests/interop/x402-fetch-pay.mjs` and returns its JSON line
/// (`{status, body, paymentResponse[, replay]}`).
async fn x402_fetch_pay(
    scripts: &Path,
    url: &str,
    key: B256,
    max_value: u64,
    replay: bool,
) -> Value {
    let mut cmd = Command::new(tollgate_testkit::peer::node());
    cmd.arg(scripts.join("x402-fetch-pay.mjs"))
        .arg(url)
        .arg(key.to_string())
        .arg(max_value.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if replay {
        cmd.arg("--replay");
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("x402-fetch-pay.mjs timed out")
        .expect("run node x402-fetch-pay.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "x402-fetch-pay.mjs {url} failed ({}):\nstderr: {}\nstdout: {stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .last()
        .expect("x402-fetch-pay.mjs printed nothing");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// Asserts a successful x402 settlement response and returns its transaction hash.
fn settled_tx(response: &Value, payer: Address) -> B256 {
    let settlement = &response["paymentResponse"];
    assert_eq!(settlement["success"], true, "{response}");
    assert_eq!(settlement["network"], NETWORK, "{response}");
    let settled_payer: Address = settlement["payer"]
        .as_str()
        .unwrap_or_else(|| panic!("no payer: {response}"))
        .parse()
        .unwrap();
    assert_eq!(settled_payer, payer, "{response}");
    settlement["transaction"]
        .as_str()
        .unwrap_or_else(|| panic!("no transaction: {response}"))
        .parse()
        .unwrap_or_else(|e| panic!("transaction is not a 32-byte hash ({e}): {response}"))
}

/// The devnet as `base-sepolia`, a facilitator for it, and a chain client.
struct Stack {
    _dir: tempfile::TempDir,
    _devnet: Running,
    facilitator: Facilitator,
    chain: RpcChain,
    token: Address,
}

async fn start_stack() -> Stack {
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let devnet = spawn_devnet(
        &dir.path().join("devnet"),
        &["--network", NETWORK, "--chain-id", &CHAIN_ID.to_string()],
    )
    .await;
    assert_eq!(devnet.info.chain_id, CHAIN_ID);
    let config = write_facilitator_config(dir.path(), &devnet.info);
    let facilitator = spawn_facilitator(&config, None).await;
    let chain = tollgate_testkit::connect(
        devnet.info.rpc_url.as_deref().unwrap(),
        CHAIN_ID,
        &dev_accounts(10),
    )
    .await
    .unwrap();
    Stack {
        token: devnet.info.contracts.token,
        _dir: dir,
        _devnet: devnet,
        facilitator,
        chain,
    }
}

impl Stack {
    async fn balance(&self, account: Address) -> U256 {
        contracts::read(&self.chain, self.token, &Token::balanceOfCall { account })
            .await
            .unwrap()
    }
}

pub(crate) fn weather_body() -> Value {
    json!({"report": {"weather": "sunny", "temperature": 70}})
}

/// An unmodified x402-express server settles through a Tollgate facilitator, and an unmodified
/// x402-fetch client pays it: exactly the price moves once per payment, and a replayed
/// `X-PAYMENT` header moves nothing and never reaches the handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_fetch_pays_x402_express_through_the_facilitator() {
    let scripts = interop_scripts();
    let stack = start_stack().await;
    let (chain, token) = (&stack.chain, stack.token);
    let accounts = dev_accounts(10);
    let payer = &accounts[2];
    let pay_to = Address::repeat_byte(0x77);
    let balance = |account| stack.balance(account);
    assert_eq!(balance(pay_to).await, U256::ZERO);
    assert_eq!(balance(payer.address).await, DEV_TOKENS);

    let server = spawn_x402_express(&scripts, &stack.facilitator.url, pay_to, token, PRICE).await;
    let weather = format!("{}/weather", server.url);
    let http = reqwest::Client::new();

    // The unpaid request: x402-express's own 402, naming the devnet's token as the asset.
    let unpaid = http.get(&weather).send().await.unwrap();
    assert_eq!(unpaid.status(), 402);
    let unpaid: Value = unpaid.json().await.unwrap();
    assert_eq!(unpaid["x402Version"], 1, "{unpaid}");
    let offer = &unpaid["accepts"][0];
    assert_eq!(offer["network"], NETWORK, "{unpaid}");
    assert_eq!(offer["asset"], token.to_string(), "{unpaid}");
    assert_eq!(offer["maxAmountRequired"], PRICE.to_string(), "{unpaid}");
    assert_eq!(offer["extra"], json!({"name": "USD Coin", "version": "2"}));

    // 1. x402-fetch pays; then the very X-PAYMENT header it sent is replayed.
    let first = x402_fetch_pay(&scripts, &weather, payer.private_key, 1_000_000, true).await;
    assert_eq!(first["status"], 200, "{first}");
    let expected_body = weather_body();
    assert_eq!(first["body"], expected_body, "{first}");
    let first_tx = settled_tx(&first, payer.address);
    let receipt = chain
        .receipt(first_tx)
        .await
        .unwrap()
        .expect("the settlement transaction is mined");
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.to, Some(token), "settled by the token's EIP-3009");
    let replay = &first["replay"];
    assert_eq!(
        replay["status"], 402,
        "a replayed X-PAYMENT is refused: {first}"
    );
    assert_eq!(replay["paymentResponse"], Value::Null, "{first}");
    assert_ne!(replay["body"], expected_body, "{first}");
    assert_eq!(balance(pay_to).await, U256::from(PRICE), "paid once");
    assert_eq!(
        balance(payer.address).await,
        DEV_TOKENS - U256::from(PRICE),
        "charged exactly the price, once"
    );

    // 2. A second request pays again, under a fresh nonce and in its own transaction.
    let second = x402_fetch_pay(&scripts, &weather, payer.private_key, 1_000_000, false).await;
    assert_eq!(second["status"], 200, "{second}");
    assert_eq!(second["body"], expected_body, "{second}");
    let second_tx = settled_tx(&second, payer.address);
    assert_ne!(second_tx, first_tx);
    assert_eq!(balance(pay_to).await, U256::from(2 * PRICE));
    assert_eq!(
        balance(payer.address).await,
        DEV_TOKENS - U256::from(2 * PRICE)
    );

    // The paid handler ran once per payment; the replay never reached it.
    let stats: Value = http
        .get(format!("{}/stats", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["served"], 2, "{stats}");
}

/// One `X-PAYMENT` (signed by the real x402 client library) sent by 20 concurrent requests to an
/// unmodified x402-express server whose handler takes 500 ms, settling through the Tollgate
/// facilitator: x402-express verifies every copy, runs the handler, then settles; the facilitator
/// answers exactly one settle with success and the others with `duplicate_settlement`, so the
/// resource is served once and paid once (before: 20 × 200 for one payment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replays_to_x402_express_are_served_once() {
    let scripts = interop_scripts();
    let stack = start_stack().await;
    let accounts = dev_accounts(10);
    let payer = &accounts[3];
    let pay_to = Address::repeat_byte(0x78);
    let server = spawn_x402_express_slow(
        &scripts,
        &stack.facilitator.url,
        pay_to,
        stack.token,
        PRICE,
        500,
    )
    .await;
    let weather = format!("{}/weather", server.url);
    let mut cmd = Command::new(tollgate_testkit::peer::node());
    cmd.arg(scripts.join("x402-replay.mjs"))
        .arg(&weather)
        .arg(payer.private_key.to_string())
        .arg("20")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("x402-replay.mjs timed out")
        .expect("run node x402-replay.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "x402-replay.mjs failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let statuses: Vec<u64> = result["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(statuses.len(), 20);
    let served: Vec<usize> = (0..20).filter(|&i| statuses[i] == 200).collect();
    assert_eq!(served.len(), 1, "served exactly once: {result}");
    assert!(statuses.iter().all(|&s| s == 200 || s == 402), "{result}");
    assert_eq!(result["bodies"][served[0]], weather_body());
    let tx = settled_tx(
        &json!({ "paymentResponse": result["paymentResponses"][served[0]] }),
        payer.address,
    );
    assert!(stack.chain.receipt(tx).await.unwrap().unwrap().success);
    assert_eq!(stack.balance(pay_to).await, U256::from(PRICE), "paid once");
    assert_eq!(
        stack.balance(payer.address).await,
        DEV_TOKENS - U256::from(PRICE),
        "charged once"
    );
}

/// The Tollgate agent SDK pays an unmodified x402-express server (a generic x402 V1 server, so
/// a plain `exact` payload to `payTo`), settled by the Tollgate facilitator behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_pays_x402_express_through_the_facilitator() {
    let scripts = interop_scripts();
    let stack = start_stack().await;
    let token = stack.token;
    let payer = &dev_accounts(10)[3];
    let pay_to = Address::repeat_byte(0x78);
    let server = spawn_x402_express(&scripts, &stack.facilitator.url, pay_to, token, PRICE).await;

    let policy = SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(10 * PRICE))
        .networks([NETWORK])
        .tokens([token])
        .payees([pay_to]);
    let agent = Agent::from_hex_key(&payer.private_key.to_string(), policy).unwrap();
    let weather = format!("{}/weather", server.url);
    let response = agent.pay(PayRequest::get(&weather).unwrap()).await.unwrap();
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.json::<Value>().unwrap(), weather_body());
    let payment = response.payment.expect("the agent paid");
    assert_eq!(payment.kind, PaymentKind::X402);
    assert_eq!(payment.amount, Amount::from_units(PRICE));
    assert_eq!(payment.network, NETWORK);
    assert_eq!(
        (payment.token, payment.payer, payment.pay_to),
        (token, payer.address, pay_to)
    );
    let settlement = payment.settlement.expect("X-PAYMENT-RESPONSE");
    assert!(settlement.success, "{settlement:?}");
    assert_eq!(settlement.payer, Some(payer.address));
    let tx: B256 = settlement.transaction.parse().unwrap();
    assert_eq!(payment.tx_hash, Some(tx));
    let receipt = stack.chain.receipt(tx).await.unwrap().expect("mined");
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
    assert_eq!(stack.balance(pay_to).await, U256::from(PRICE));
    assert_eq!(
        stack.balance(payer.address).await,
        DEV_TOKENS - U256::from(PRICE)
    );
}

/// An unmodified x402-fetch client pays `/v1/quote` of `tollgate dev` running as `base-sepolia`:
/// the price moves from the payer to the provider exactly once per payment, and a replayed
/// `X-PAYMENT` header is refused and moves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_fetch_pays_tollgate_dev_quote() {
    let scripts = interop_scripts();
    tollgate_chain::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("dev.json");
    let _dev = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["dev", "--port-base", "0", "--state-dir"])
        .arg(dir.path())
        .args(["--network", NETWORK, "--chain-id", &CHAIN_ID.to_string()])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tollgate dev");
    let deadline = Instant::now() + Duration::from_secs(30);
    let info: Value = loop {
        if let Ok(bytes) = std::fs::read(&summary)
            && let Ok(info) = serde_json::from_slice::<Value>(&bytes)
        {
            break info;
        }
        assert!(
            Instant::now() < deadline,
            "tollgate dev did not write dev.json"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(info["chainId"], CHAIN_ID, "{info}");
    assert_eq!(info["network"], NETWORK, "{info}");
    let field = |key: &str| {
        info[key]
            .as_str()
            .unwrap_or_else(|| panic!("dev.json has no {key}: {info}"))
            .to_owned()
    };
    let quote = format!("{}/v1/quote", field("apiUrl"));
    let token: Address = info["contracts"]["token"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let payer = crate::dev::payer(&info);
    let payer_address: Address = payer["address"].as_str().unwrap().parse().unwrap();
    let payer_key: B256 = payer["privateKey"].as_str().unwrap().parse().unwrap();
    let chain = tollgate_testkit::connect(&field("rpcUrl"), CHAIN_ID, &dev_accounts(10))
        .await
        .unwrap();
    let balance = |account: Address| {
        let chain = &chain;
        async move {
            contracts::read(chain, token, &Token::balanceOfCall { account })
                .await
                .unwrap()
        }
    };

    // The terms, as any x402 V1 client reads them.
    let unpaid = reqwest::get(&quote).await.unwrap();
    assert_eq!(unpaid.status(), 402);
    let unpaid: Value = unpaid.json().await.unwrap();
    let offer = &unpaid["accepts"][0];
    assert_eq!(offer["network"], NETWORK, "{unpaid}");
    let pay_to: Address = offer["payTo"].as_str().unwrap().parse().unwrap();
    let price: U256 = offer["maxAmountRequired"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(price > U256::ZERO, "{unpaid}");
    let (pay_to_before, payer_before) = (balance(pay_to).await, balance(payer_address).await);

    let first = x402_fetch_pay(&scripts, &quote, payer_key, 1_000_000, true).await;
    assert_eq!(first["status"], 200, "{first}");
    assert!(first["body"].is_object(), "a JSON quote: {first}");
    let first_tx = settled_tx(&first, payer_address);
    let receipt = chain.receipt(first_tx).await.unwrap().expect("mined");
    assert!(receipt.success, "{receipt:?}");
    let replay = &first["replay"];
    assert_eq!(
        replay["status"], 402,
        "a replayed X-PAYMENT is refused: {first}"
    );
    assert_eq!(replay["paymentResponse"], Value::Null, "{first}");
    assert_eq!(balance(pay_to).await, pay_to_before + price);
    assert_eq!(balance(payer_address).await, payer_before - price);

    let second = x402_fetch_pay(&scripts, &quote, payer_key, 1_000_000, false).await;
    assert_eq!(second["status"], 200, "{second}");
    assert_ne!(settled_tx(&second, payer_address), first_tx);
    assert_eq!(balance(pay_to).await, pay_to_before + price * U256::from(2));
    assert_eq!(
        balance(payer_address).await,
        payer_before - price * U256::from(2)
    );

    // A route sold by subscription *and* one-time (`/v1/report`): the generic client reads the
    // 402 with its subscription offer and pays one-time, uninterrupted. On an x402 V1 network
    // every entry it parses is `exact` (x402-fetch refuses a 402 with any other scheme); a client
    // that names the schemes it reads (`X-Service-Schemes`, as Tollgate's agents do) gets one
    // entry per scheme.
    let report = format!("{}/v1/report", field("apiUrl"));
    let schemes = |body: &Value| -> Vec<String> {
        body["accepts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["scheme"].as_str().unwrap().to_owned())
            .collect()
    };
    let unpaid: Value = reqwest::get(&report).await.unwrap().json().await.unwrap();
    assert_eq!(schemes(&unpaid), ["exact"], "{unpaid}");
    assert_eq!(
        unpaid["accepts"][0]["service"]["subscriptionScheme"], true,
        "{unpaid}"
    );
    let every: Value = reqwest::Client::new()
        .get(&report)
        .header("X-Service-Schemes", "exact, subscription")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(schemes(&every), ["exact", "subscription"], "{every}");
    let before = balance(payer_address).await;
    let paid = x402_fetch_pay(&scripts, &report, payer_key, 1_000_000, false).await;
    assert_eq!(paid["status"], 200, "{paid}");
    assert_eq!(paid["body"]["report"], "daily", "{paid}");
    assert_eq!(balance(payer_address).await, before - U256::from(1_000_000));
}
