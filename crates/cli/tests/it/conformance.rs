//! The x402 conformance matrix: client × resource server × facilitator over Tollgate and the
//! unmodified reference packages (`@x402/*` 2.27.0 from npm, `x402` 2.25.0 from PyPI, pinned in
//! `scripts/install-tools`), x402 V2, on the devnet and on anvil, both running as `base-sepolia`
//! (`eip155:84532`). The V1 rows are in `interop.rs`.
//!
//! | client | resource server | facilitator | chains |
//! |---|---|---|---|
//! | `@x402/fetch` | Tollgate gate | Tollgate | devnet, anvil |
//! | PyPI `x402` | Tollgate gate | Tollgate | devnet |
//! | `@x402/fetch` | `@x402/express` | Tollgate | devnet, anvil |
//! | `@x402/fetch` | `@x402/hono` | Tollgate | devnet |
//! | `@x402/fetch` | `@x402/express` | reference (`@x402/core` + `@x402/evm`) | anvil |
//! | Tollgate agent | `@x402/express` | Tollgate | devnet |
//! | Tollgate agent | `@x402/express` | reference | anvil |
//!
//! Every row checks the on-chain balances (the price moves once, payer to payee), that a replay
//! of the very payment header is refused and moves nothing, and that a tampered payment (its
//! signed value raised after signing) is refused and moves nothing. Never skipped: without `node`,
//! the pinned packages or the pinned Python, the rows fail and say to run `scripts/install-tools`.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::primitives::{Address, B256, U256};
use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};
use tollgate_agent::{Agent, Amount, PayRequest, PaymentKind, SpendPolicy};
use tollgate_chain::{
    Chain,
    accounts::{DevAccount, dev_accounts},
    contracts::{self, Token},
    rpc::RpcChain,
};
use tollgate_gate::{Gate, PaymentGateLayer, Pricing};
use tollgate_protocol::PlanTerms;
use tollgate_testkit::Anvil;

use crate::{
    devnet::{Running, spawn_devnet},
    facilitator::{Facilitator, spawn_facilitator},
    interop::{CHAIN_ID, NETWORK, facilitator_config, scripts_with, weather_body},
};

const CAIP2: &str = "eip155:84532";
const PRICE: u64 = 250_000;
/// What the V2 scripts load.
const PACKAGES: [&str; 8] = [
    "@x402/core",
    "@x402/evm",
    "@x402/fetch",
    "@x402/express",
    "@x402/hono",
    "@x402/extensions",
    "viem",
    "express",
];
/// The reference facilitator's signer: a dev account with gas on both chains, never a payer.
const REFERENCE_SIGNER: usize = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Devnet,
    Anvil,
}

/// A chain running as `base-sepolia` with the contracts deployed and the dev accounts funded.
pub(crate) struct Net {
    _dir: tempfile::TempDir,
    _devnet: Option<Running>,
    _anvil: Option<Anvil>,
    dir: PathBuf,
    rpc_url: String,
    pub(crate) token: Address,
    router: Address,
    subscriptions: Address,
    pub(crate) chain: RpcChain,
    pub(crate) accounts: Vec<DevAccount>,
}

impl Net {
    pub(crate) async fn start(backend: Backend) -> Self {
        tollgate_chain::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let accounts = dev_accounts(10);
        let (devnet, anvil, rpc_url, token, router, subscriptions) = match backend {
            Backend::Devnet => {
                let devnet = spawn_devnet(
                    &dir.path().join("devnet"),
                    &["--network", NETWORK, "--chain-id", &CHAIN_ID.to_string()],
                )
                .await;
                let c = devnet.info.contracts;
                let url = devnet.info.rpc_url.clone().expect("devnet rpcUrl");
                (Some(devnet), None, url, c.token, c.router, c.subscriptions)
            }
            Backend::Anvil => {
                let anvil = Anvil::spawn_with(CHAIN_ID).await.expect("anvil");
                let (_, d, _) = tollgate_testkit::anvil_chain(&anvil).await.expect("deploy");
                let url = anvil.url().to_owned();
                (None, Some(anvil), url, d.token, d.router, d.subscriptions)
            }
        };
        let chain = tollgate_testkit::connect(&rpc_url, CHAIN_ID, &accounts)
            .await
            .unwrap();
        Self {
            dir: dir.path().to_owned(),
            _dir: dir,
            _devnet: devnet,
            _anvil: anvil,
            rpc_url,
            token,
            router,
            subscriptions,
            chain,
            accounts,
        }
    }

    pub(crate) async fn balance(&self, account: Address) -> U256 {
        contracts::read(&self.chain, self.token, &Token::balanceOfCall { account })
            .await
            .unwrap()
    }

    /// `payer`'s and `pay_to`'s token balances.
    pub(crate) async fn balances(&self, payer: Address, pay_to: Address) -> (U256, U256) {
        (self.balance(payer).await, self.balance(pay_to).await)
    }

    /// Asserts that `price` moved exactly once since `before` ([`Net::balances`]), `payer` to
    /// `pay_to`.
    pub(crate) async fn assert_moved_once(
        &self,
        payer: Address,
        pay_to: Address,
        before: (U256, U256),
        price: u64,
    ) {
        let price = U256::from(price);
        assert_eq!(
            self.balances(payer, pay_to).await,
            (before.0 - price, before.1 + price),
            "the price moved once, payer to payee"
        );
    }

    /// `tollgate facilitator` on this chain.
    pub(crate) async fn tollgate_facilitator(&self) -> Facilitator {
        let config = facilitator_config(
            &self.dir,
            &self.rpc_url,
            self.token,
            self.router,
            self.subscriptions,
        );
        spawn_facilitator(&config, None).await
    }

    /// The reference facilitator (`x402v2-facilitator.mjs`, `@x402/core` + `@x402/evm`) on this
    /// chain, with a nonce manager (so that its own settlements do not collide).
    async fn reference_facilitator(&self, scripts: &Path) -> NodeServer {
        let key = self.accounts[REFERENCE_SIGNER].private_key.to_string();
        NodeServer::spawn(
            scripts,
            "x402v2-facilitator.mjs",
            &[
                "--rpc-url",
                &self.rpc_url,
                "--private-key",
                &key,
                "--network",
                CAIP2,
                "--nonce-manager",
            ],
        )
        .await
    }

    /// The reference facilitator (`reference`) or Tollgate's, running until dropped.
    async fn facilitator(&self, scripts: &Path, reference: bool) -> AnyFacilitator {
        if reference {
            AnyFacilitator::Reference(self.reference_facilitator(scripts).await)
        } else {
            AnyFacilitator::Tollgate(self.tollgate_facilitator().await)
        }
    }

    /// An unmodified `@x402/express` (or `@x402/hono`) server selling `GET /weather`.
    async fn reference_server(
        &self,
        scripts: &Path,
        script: &str,
        facilitator: &str,
        pay_to: Address,
    ) -> NodeServer {
        NodeServer::spawn(
            scripts,
            script,
            &[
                "--facilitator",
                facilitator,
                "--pay-to",
                &pay_to.to_string(),
                "--network",
                CAIP2,
                "--asset",
                &self.token.to_string(),
                "--price",
                &PRICE.to_string(),
            ],
        )
        .await
    }
}

/// A running facilitator of either kind.
enum AnyFacilitator {
    Tollgate(Facilitator),
    Reference(NodeServer),
}

impl AnyFacilitator {
    fn url(&self) -> &str {
        match self {
            Self::Tollgate(f) => &f.url,
            Self::Reference(f) => &f.url,
        }
    }
}

/// A node server script, listening on a free port (`LISTENING <port>`).
pub(crate) struct NodeServer {
    _child: Child,
    pub(crate) url: String,
}

impl NodeServer {
    pub(crate) async fn spawn(scripts: &Path, script: &str, args: &[&str]) -> Self {
        let mut child = Command::new(tollgate_testkit::peer::node())
            .arg(scripts.join(script))
            .args(["--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn node {script}: {e}"));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("{script} did not start in time"))
                .unwrap()
                .unwrap_or_else(|| panic!("{script} exited before listening (stderr above)"));
            if let Some(port) = line.strip_prefix("LISTENING ") {
                let url = format!("http://127.0.0.1:{}", port.trim());
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return Self { _child: child, url };
            }
        }
    }

    /// How often the paid handler ran (`GET /stats`).
    pub(crate) async fn served(&self) -> u64 {
        let stats: Value = reqwest::get(format!("{}/stats", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        stats["served"].as_u64().unwrap()
    }
}

/// The plan the Tollgate gate offers beside its price (its terms only: no reference client can
/// subscribe, and none should try).
const PLAN: B256 = B256::repeat_byte(0x5e);

/// A Tollgate gate (the SDK layer) selling `GET /weather` for [`PRICE`] one-time or by
/// subscription to [`PLAN`], settling through `facilitator`; counts how often the handler ran.
pub(crate) struct GateServer {
    pub(crate) url: String,
    pub(crate) hits: Arc<AtomicUsize>,
    _server: tokio::task::JoinHandle<()>,
}

impl GateServer {
    async fn spawn(net: &Net, facilitator: &str, pay_to: Address) -> Self {
        Self::spawn_with(net, facilitator, pay_to, false).await
    }

    /// [`GateServer::spawn`], with MPP offered beside x402 when `mpp`.
    pub(crate) async fn spawn_with(
        net: &Net,
        facilitator: &str,
        pay_to: Address,
        mpp: bool,
    ) -> Self {
        let gate = Gate::builder()
            .network(NETWORK)
            .token(net.token, "USD Coin", "2")
            .pay_to(pay_to)
            .facilitator(facilitator)
            .plan_terms(PlanTerms {
                plan_id: PLAN,
                amount: Amount::from_units(5_000_000),
                interval: 30 * 24 * 3600,
                token: net.token,
            })
            .build()
            .await
            .unwrap();
        assert_eq!(gate.caip2().map(|n| n.as_str()), Some(CAIP2));
        Self::serve(
            gate.payment_gate([Pricing::one_time(PRICE), Pricing::subscription(PLAN)])
                .mpp(mpp),
        )
        .await
    }

    /// `GET /weather` behind `layer` (described as today's weather, served as JSON), on
    /// loopback.
    pub(crate) async fn serve(layer: PaymentGateLayer) -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        let app = axum::Router::new()
            .route(
                "/weather",
                axum::routing::get(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { axum::Json(weather_body()) }
                }),
            )
            .route_layer(
                layer
                    .description("Today's weather")
                    .mime_type("application/json"),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            hits,
            _server: server,
        }
    }
}

impl Drop for GateServer {
    fn drop(&mut self) {
        self._server.abort();
    }
}

/// Runs a client script (`x402v2-fetch-pay.mjs` with node, `x402v2_client.py` with the pinned
/// Python) with `--replay --tamper` and returns its JSON line.
async fn run_client(scripts: &Path, script: &str, url: &str, key: B256) -> Value {
    let mut cmd = if script.ends_with(".py") {
        Command::new(tollgate_testkit::peer::python_venv())
    } else {
        Command::new(tollgate_testkit::peer::node())
    };
    cmd.arg(scripts.join(script))
        .arg(url)
        .arg(key.to_string())
        .args(["--replay", "--tamper"])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{script} timed out"))
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} {url} failed ({}):\nstderr: {}\nstdout: {stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().expect("the client printed nothing");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// Asserts what a client script reports: paid in V2, served, settled on `eip155:84532` by the
/// payer; the replay and the tampered payment refused with no settlement. Returns the
/// settlement transaction.
fn assert_paid_once(out: &Value, payer: Address) -> B256 {
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["x402Version"], 2, "paid in x402 V2: {out}");
    assert_eq!(out["sentHeader"], "PAYMENT-SIGNATURE", "{out}");
    assert_eq!(out["body"], weather_body(), "{out}");
    let settled = &out["paymentResponse"];
    assert_eq!(settled["success"], true, "{out}");
    assert_eq!(settled["network"], CAIP2, "{out}");
    let settled_payer: Address = settled["payer"].as_str().unwrap().parse().unwrap();
    assert_eq!(settled_payer, payer, "{out}");
    for refused in ["replay", "tamper"] {
        assert_eq!(out[refused]["status"], 402, "{refused} is refused: {out}");
        assert_ne!(out[refused]["body"], weather_body(), "{refused}: {out}");
        assert_ne!(
            out[refused]["paymentResponse"]["success"], true,
            "{refused}: {out}"
        );
    }
    settled["transaction"].as_str().unwrap().parse().unwrap()
}

/// A reference client pays a server; the price moves once and the server's handler runs once.
async fn client_row(net: &Net, scripts: &Path, client: &str, url: &str, pay_to: Address) -> B256 {
    let payer = &net.accounts[2];
    let before = net.balances(payer.address, pay_to).await;
    let out = run_client(scripts, client, url, payer.private_key).await;
    let tx = assert_paid_once(&out, payer.address);
    let receipt = net.chain.receipt(tx).await.unwrap().expect("mined");
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(
        receipt.to,
        Some(net.token),
        "settled by the token's EIP-3009"
    );
    net.assert_moved_once(payer.address, pay_to, before, PRICE)
        .await;
    tx
}

/// `@x402/fetch` (or the Python client) → the Tollgate gate → the Tollgate facilitator.
async fn reference_client_pays_tollgate_gate(backend: Backend, client: &str) {
    let scripts = scripts_with(&PACKAGES);
    let net = Net::start(backend).await;
    let facilitator = net.tollgate_facilitator().await;
    let pay_to = Address::repeat_byte(0x91);
    let gate = GateServer::spawn(&net, &facilitator.url, pay_to).await;
    let url = format!("{}/weather", gate.url);
    // The route sells a plan beside its price. Asked by a client that reads every scheme, the
    // 402 lists one entry per scheme; the V2 header, which the reference client reads, lists
    // the exact one only (the plan rides in Tollgate's extension).
    let listed = reqwest::Client::new()
        .get(&url)
        .header("X-Service-Schemes", "exact, subscription")
        .send()
        .await
        .unwrap();
    let v2 = listed.headers()["payment-required"]
        .to_str()
        .unwrap()
        .to_owned();
    let v2 = tollgate_protocol::x402::v2::PaymentRequiredV2::decode_header(&v2).unwrap();
    assert!(v2.accepts.iter().all(|e| e.scheme == "exact"), "{v2:?}");
    let body: Value = listed.json().await.unwrap();
    let schemes: Vec<&str> = body["accepts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["scheme"].as_str().unwrap())
        .collect();
    assert_eq!(schemes, ["exact", "subscription"], "{body}");
    client_row(&net, &scripts, client, &url, pay_to).await;
    assert_eq!(gate.hits.load(Ordering::SeqCst), 1, "served once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_fetch_v2_pays_tollgate_gate_on_devnet() {
    reference_client_pays_tollgate_gate(Backend::Devnet, "x402v2-fetch-pay.mjs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_fetch_v2_pays_tollgate_gate_on_anvil() {
    reference_client_pays_tollgate_gate(Backend::Anvil, "x402v2-fetch-pay.mjs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_x402_v2_pays_tollgate_gate_on_devnet() {
    reference_client_pays_tollgate_gate(Backend::Devnet, "x402v2_client.py").await;
}

/// `@x402/fetch` → an unmodified V2 resource server → the Tollgate facilitator or the
/// reference one.
async fn x402_fetch_pays_reference_server(backend: Backend, server: &str, reference: bool) {
    let scripts = scripts_with(&PACKAGES);
    let net = Net::start(backend).await;
    let facilitator = net.facilitator(&scripts, reference).await;
    let facilitator_url = facilitator.url().to_owned();
    let pay_to = Address::repeat_byte(0x92);
    let server = net
        .reference_server(&scripts, server, &facilitator_url, pay_to)
        .await;
    let url = format!("{}/weather", server.url);
    client_row(&net, &scripts, "x402v2-fetch-pay.mjs", &url, pay_to).await;
    assert_eq!(server.served().await, 1, "served once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_fetch_v2_pays_x402_express_through_tollgate_facilitator_on_devnet() {
    x402_fetch_pays_reference_server(Backend::Devnet, "x402v2-express-server.mjs", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_fetch_v2_pays_x402_express_through_tollgate_facilitator_on_anvil() {
    x402_fetch_pays_reference_server(Backend::Anvil, "x402v2-express-server.mjs", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_fetch_v2_pays_x402_hono_through_tollgate_facilitator_on_devnet() {
    x402_fetch_pays_reference_server(Backend::Devnet, "x402v2-hono-server.mjs", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_fetch_v2_pays_x402_express_through_reference_facilitator_on_anvil() {
    x402_fetch_pays_reference_server(Backend::Anvil, "x402v2-express-server.mjs", true).await;
}

/// The Tollgate agent → `@x402/express` (V2 only) → the Tollgate facilitator or the reference
/// one: it reads `PAYMENT-REQUIRED`, pays with `PAYMENT-SIGNATURE` within its policy, and
/// reports V2. Its payment header replayed, or re-sent with the value raised, is refused.
async fn agent_pays_x402_express(backend: Backend, reference: bool) {
    let scripts = scripts_with(&PACKAGES);
    let net = Net::start(backend).await;
    let facilitator = net.facilitator(&scripts, reference).await;
    let facilitator_url = facilitator.url().to_owned();
    let pay_to = Address::repeat_byte(0x93);
    let server = net
        .reference_server(
            &scripts,
            "x402v2-express-server.mjs",
            &facilitator_url,
            pay_to,
        )
        .await;
    let payer = &net.accounts[3];
    let before = net.balances(payer.address, pay_to).await;
    let weather = format!("{}/weather", server.url);

    // The policy names the network by its V1 name: the same network as eip155:84532.
    let policy = SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(10 * PRICE))
        .networks([NETWORK])
        .tokens([net.token])
        .payees([pay_to]);
    let agent = Agent::from_hex_key(&payer.private_key.to_string(), policy).unwrap();
    let response = agent.pay(PayRequest::get(&weather).unwrap()).await.unwrap();
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.json::<Value>().unwrap(), weather_body());
    let payment = response.payment.expect("the agent paid");
    assert_eq!(payment.kind, PaymentKind::X402);
    assert_eq!(payment.x402_version, Some(2), "reported as V2");
    assert_eq!(payment.header_name(), "payment-signature");
    assert_eq!(payment.amount, Amount::from_units(PRICE));
    let settlement = payment.settlement.clone().expect("PAYMENT-RESPONSE");
    assert!(settlement.success, "{settlement:?}");
    assert_eq!(settlement.network, CAIP2);
    let tx: B256 = settlement.transaction.parse().unwrap();
    assert!(net.chain.receipt(tx).await.unwrap().expect("mined").success);
    assert_eq!(agent.spent(), Amount::from_units(PRICE));

    // A policy that does not allow the network refuses before paying.
    let elsewhere =
        SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(PRICE)).networks(["base"]);
    let refused = Agent::from_hex_key(&payer.private_key.to_string(), elsewhere)
        .unwrap()
        .pay(PayRequest::get(&weather).unwrap())
        .await;
    assert!(refused.is_err(), "{refused:?}");

    // Replay and tamper with the header the agent sent.
    let http = reqwest::Client::new();
    let replay = http
        .get(&weather)
        .header("payment-signature", &payment.header)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 402, "a replay is refused");
    let mut tampered =
        tollgate_protocol::x402::v2::PaymentPayloadV2::decode_header(&payment.header).unwrap();
    tampered.payload.authorization.value = (PRICE + 1).into();
    tampered.payload.authorization.nonce = B256::repeat_byte(0x55);
    let tamper = http
        .get(&weather)
        .header("payment-signature", tampered.encode_header())
        .send()
        .await
        .unwrap();
    assert_eq!(tamper.status(), 402, "a tampered payment is refused");

    assert_eq!(server.served().await, 1, "served once");
    net.assert_moved_once(payer.address, pay_to, before, PRICE)
        .await;

    // `tollgate pay` reports the version it paid in.
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["pay", &weather, "--max", "0.25", "--key"])
        .arg(payer.private_key.to_string())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("paid 0.250000 (250000 units)"), "{stderr}");
    assert!(stderr.contains("; x402 V2"), "{stderr}");
    assert_eq!(server.served().await, 2);
    assert_eq!(net.balance(pay_to).await, before.1 + U256::from(2 * PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_pays_x402_express_v2_through_tollgate_facilitator_on_devnet() {
    Box::pin(agent_pays_x402_express(Backend::Devnet, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_pays_x402_express_v2_through_reference_facilitator_on_anvil() {
    Box::pin(agent_pays_x402_express(Backend::Anvil, true)).await;
}
