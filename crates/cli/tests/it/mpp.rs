//! MPP (the Machine Payments Protocol, the `Payment` HTTP authentication scheme) rows of the
//! conformance matrix: the unmodified reference SDK, `mppx` 0.11.0 (pinned with its viem in
//! `.tools/mpp` by `scripts/install-tools`), on one end or both, settling through Tollgate's
//! facilitator, on the devnet and on anvil running as `base-sepolia` (`eip155:84532`), and (the
//! gate) on Circle's FiatToken v2.2 deployed on anvil at USDC's Base Sepolia address.
//!
//! | client | resource server | facilitator | chains |
//! |---|---|---|---|
//! | `mppx` (`mpp-pay.mjs`) | `mppx` EVM `charge` (`mpp-server.mjs`) | Tollgate | devnet, anvil |
//! | `mppx` (`mpp-pay.mjs`) | Tollgate gate (MPP beside x402) | Tollgate | devnet, anvil |
//! | `mppx` (`mpp-pay.mjs`) | Tollgate gate (MPP, a one-time price) | Tollgate | Circle's FiatToken v2.2 on anvil (2 s blocks, 2 confirmations) |
//! | `mppx` (`mpp-pay.mjs`) | `tollgate gateway` (a route with `mpp = true`) | Tollgate | devnet |
//! | Tollgate agent, `tollgate pay` (x402 V2) | `mppx` EVM `charge` (`mpp-server.mjs`) | Tollgate | devnet (agent: also anvil) |
//!
//! (The JS `paymentGate({mpp: true})` paid by `mpp-pay.mjs`, and the JS `Agent` paying
//! `mpp-server.mjs` by x402 V2, are rows of the Node package's tests:
//! `crates/node/test/mpp-gate.test.mjs`, `crates/node/test/mpp-agent.test.mjs`.)
//!
//! An mppx EVM `charge` server cannot settle on its own: given `x402: {facilitator}` it sends the
//! ERC-3009 credential to the facilitator as x402 V2 `POST /verify` then `POST /settle`, and its
//! `Payment-Receipt` names the settlement transaction. Each row checks that the price moves once,
//! payer to payee, in that transaction (the token's own `transferWithAuthorization`, under the
//! nonce mppx binds to the challenge: `keccak256(id ‖ realm)`); that the server served once; and
//! that the very credential replayed, and the credential with its signed value raised, are
//! refused with a problem+json 402 and a fresh challenge, moving nothing; and that the
//! facilitator's refusals of that credential sent again, `/verify`'s and `/settle`'s, have the
//! shape mppx parses (else it answers 500 instead of 402). An mppx EVM `charge` server also
//! offers x402 V2 on every 402 (`PAYMENT-REQUIRED`), and Tollgate's agent, offered both, pays
//! x402: its rows check that it paid with `PAYMENT-SIGNATURE`, which mppx takes, and that the
//! header replayed or tampered with is refused. Never skipped: without
//! `node` or the pinned `.tools/mpp` tree the rows fail and say to run `scripts/install-tools`.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, U256, keccak256},
    sol_types::SolEvent,
};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tollgate_agent::{Agent, Amount, PayRequest, PaymentKind, SpendPolicy};
use tollgate_chain::{Chain, contracts::Token};
use tollgate_gate::{Gate, Pricing};
use tollgate_protocol::x402::v2::{PaymentPayloadV2, PaymentRequiredV2};
use tollgate_testkit::{
    harness::{PAYER, TestNet},
    peer::{INSTALL_TOOLS, node, tools_dir},
    usdc,
};

use crate::{
    conformance::{Backend, GateServer, Net, NodeServer},
    interop::{CHAIN_ID, NETWORK, repo_root, weather_body},
};

const PRICE: u64 = 250_000;
/// The packages of the `.tools/mpp` tree the MPP scripts load.
const MPP_PACKAGES: [&str; 2] = ["mppx", "viem"];
/// The realm the server names in its challenges (and so in the ERC-3009 nonce).
const REALM: &str = "tollgate.test";
const PROBLEMS: &str = "https://paymentauth.org/problems/";

/// The `tests/interop` scripts directory, after checking for `node` and the pinned `.tools/mpp`
/// packages: a missing one fails the test with the install command.
fn mpp_scripts() -> PathBuf {
    node();
    let modules = tools_dir().join("mpp/node_modules");
    for package in MPP_PACKAGES {
        let manifest = modules.join(package).join("package.json");
        assert!(
            manifest.is_file(),
            "this test needs the pinned npm package `{package}` (in .tools/mpp), and {} is \
             missing: run {INSTALL_TOOLS}",
            manifest.display()
        );
    }
    repo_root().join("tests/interop")
}

/// Runs `mpp-pay.mjs <url> <key> --replay --tamper` on [`CHAIN_ID`] for a token whose EIP-712
/// domain is `token_name`, version `2` (the devnet's `USD Coin`, or Circle's `USDC`), and
/// returns its JSON line.
async fn run_mpp_pay(scripts: &Path, url: &str, key: B256, token_name: &str) -> Value {
    let mut cmd = Command::new(node());
    cmd.arg(scripts.join("mpp-pay.mjs"))
        .arg(url)
        .arg(key.to_string())
        .args(["--token-name", token_name, "--token-version", "2"])
        .args(["--chain-id", &CHAIN_ID.to_string(), "--replay", "--tamper"])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("mpp-pay.mjs timed out")
        .expect("run mpp-pay.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mpp-pay.mjs {url} failed ({}):\nstderr: {}\nstdout: {stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().expect("mpp-pay.mjs printed nothing");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// Asserts that a follow-up credential (`replay` or `tamper`) was refused the MPP way: 402, a
/// problem+json body of type `expected` with no receipt, and a fresh `Payment` challenge.
fn assert_refused(out: &Value, which: &str, expected: &str) {
    let answer = &out[which];
    assert_eq!(answer["status"], 402, "{which} is refused: {out}");
    assert_eq!(
        answer["problem"]["type"],
        format!("{PROBLEMS}{expected}"),
        "{which}: {out}"
    );
    assert_eq!(answer["problem"]["status"], 402, "{which}: {out}");
    assert_eq!(answer["wwwAuthenticate"], true, "{which}: {out}");
    assert!(answer["receipt"].is_null(), "{which}: {out}");
}

/// The x402 V2 `/verify` and `/settle` body an mppx EVM charge server sends its facilitator for
/// the credential `mpp-pay.mjs` reports (mppx's `EvmCharge.toPaymentRequirements`: no
/// `resource`, `extra` with `assetTransferMethod`).
fn mppx_facilitator_body(out: &Value) -> Value {
    let (request, payload) = (&out["challenge"]["request"], &out["payload"]);
    let accepted = json!({
        "amount": request["amount"],
        "asset": request["currency"],
        "extra": {"assetTransferMethod": "eip3009", "name": "USD Coin", "version": "2"},
        "maxTimeoutSeconds": 300,
        "network": format!("eip155:{}", request["methodDetails"]["chainId"]),
        "payTo": request["recipient"],
        "scheme": "exact",
    });
    let authorization = json!({
        "from": payload["from"],
        "nonce": payload["nonce"],
        "to": payload["to"],
        "validAfter": payload["validAfter"],
        "validBefore": payload["validBefore"],
        "value": payload["value"],
    });
    json!({
        "paymentPayload": {
            "accepted": accepted,
            "payload": {"authorization": authorization, "signature": payload["signature"]},
            "x402Version": 2,
        },
        "paymentRequirements": accepted,
        "x402Version": 2,
    })
}

/// Asserts that `out` (an `mpp-pay.mjs` run by `payer` against a route selling [`PRICE`] of
/// `token` on `chain` to `pay_to` under `realm`) was paid and served: the challenge it paid names the route's terms,
/// and its receipt the transaction that moved the price once, payer to payee, by the token's
/// own `transferWithAuthorization` under the nonce bound to the challenge. Returns that
/// transaction.
async fn assert_paid(
    (chain, token): (&dyn Chain, Address),
    out: &Value,
    payer: Address,
    pay_to: Address,
    realm: &str,
) -> B256 {
    // Paid and served.
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["body"], weather_body(), "{out}");
    assert!(
        out["credential"]
            .as_str()
            .is_some_and(|c| c.starts_with("Payment ")),
        "{out}"
    );
    // The challenge it paid: the server's terms, in atomic units, on this chain and token.
    let challenge = &out["challenge"];
    assert_eq!(challenge["method"], "evm", "{out}");
    assert_eq!(challenge["intent"], "charge", "{out}");
    assert_eq!(challenge["realm"], realm, "{out}");
    let request = &challenge["request"];
    assert_eq!(request["amount"], PRICE.to_string(), "{out}");
    let currency: Address = request["currency"].as_str().unwrap().parse().unwrap();
    assert_eq!(currency, token, "{out}");
    let recipient: Address = request["recipient"].as_str().unwrap().parse().unwrap();
    assert_eq!(recipient, pay_to, "{out}");
    assert_eq!(request["methodDetails"]["chainId"], CHAIN_ID, "{out}");
    assert_eq!(
        request["methodDetails"]["credentialTypes"],
        json!(["authorization"]),
        "{out}"
    );
    // The receipt names the settlement transaction.
    let receipt = &out["receipt"];
    assert_eq!(receipt["status"], "success", "{out}");
    assert_eq!(receipt["method"], "evm", "{out}");
    let tx: B256 = receipt["reference"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("the receipt's reference is a transaction hash: {out}"));

    // On chain: that transaction is the token's transferWithAuthorization of the price, payer to
    // payee, under the nonce mppx derives from the challenge.
    let nonce = keccak256(format!(
        "{}{}",
        challenge["id"].as_str().unwrap(),
        challenge["realm"].as_str().unwrap()
    ));
    assert_eq!(
        assert_transferred((chain, token), tx, payer, pay_to).await,
        nonce,
        "the ERC-3009 nonce is bound to the challenge"
    );

    tx
}

/// Asserts that `tx` on `chain` is `token`'s `transferWithAuthorization` of [`PRICE`], `payer`
/// to `pay_to`, and nothing else; returns the ERC-3009 nonce it used.
async fn assert_transferred(
    (chain, token): (&dyn Chain, Address),
    tx: B256,
    payer: Address,
    pay_to: Address,
) -> B256 {
    let mined = chain.receipt(tx).await.unwrap().expect("mined");
    assert!(mined.success, "{mined:?}");
    assert_eq!(mined.to, Some(token), "settled by the token's EIP-3009");
    let token_logs = || mined.logs.iter().filter(|l| l.address == token);
    let transfers: Vec<_> = token_logs()
        .filter_map(|l| Token::Transfer::decode_log(l).ok())
        .collect();
    assert_eq!(transfers.len(), 1, "{mined:?}");
    assert_eq!(
        (transfers[0].from, transfers[0].to, transfers[0].value),
        (payer, pay_to, U256::from(PRICE))
    );
    let used: Vec<_> = token_logs()
        .filter_map(|l| Token::AuthorizationUsed::decode_log(l).ok())
        .map(|u| (u.authorizer, u.nonce))
        .collect();
    assert_eq!(used.len(), 1, "{mined:?}");
    assert_eq!(used[0].0, payer, "{mined:?}");
    used[0].1
}

/// An unmodified mppx EVM `charge` server (`mpp-server.mjs`) selling `GET /weather` for
/// [`PRICE`] to `pay_to` under [`REALM`], settling through `facilitator`.
async fn mppx_server(net: &Net, scripts: &Path, facilitator: &str, pay_to: Address) -> NodeServer {
    NodeServer::spawn(
        scripts,
        "mpp-server.mjs",
        &[
            "--facilitator",
            facilitator,
            "--pay-to",
            &pay_to.to_string(),
            "--chain-id",
            &CHAIN_ID.to_string(),
            "--asset",
            &net.token.to_string(),
            "--token-name",
            "USD Coin",
            "--token-version",
            "2",
            "--price",
            &PRICE.to_string(),
            "--decimals",
            "6",
            "--realm",
            REALM,
        ],
    )
    .await
}

/// `mpp-pay.mjs` → `mpp-server.mjs` → Tollgate's facilitator.
async fn mppx_client_pays_mppx_server(backend: Backend) {
    let scripts = mpp_scripts();
    let net = Net::start(backend).await;
    let facilitator = net.tollgate_facilitator().await;
    let pay_to = Address::repeat_byte(0x94);
    let server = mppx_server(&net, &scripts, &facilitator.url, pay_to).await;
    let payer = &net.accounts[4];
    let before = net.balances(payer.address, pay_to).await;
    let url = format!("{}/weather", server.url);
    let out = run_mpp_pay(&scripts, &url, payer.private_key, "USD Coin").await;

    let tx = assert_paid((&net.chain, net.token), &out, payer.address, pay_to, REALM).await;

    // The replayed credential reaches the facilitator (mppx keeps no replay store), whose /verify
    // refuses the spent nonce: verification-failed. The tampered one never gets that far: mppx
    // compares its value with the challenge's amount first (verification-failed as well).
    assert_refused(&out, "replay", "verification-failed");
    assert_eq!(
        out["replay"]["problem"]["detail"],
        "Payment verification failed: invalid_transaction_state.",
        "the facilitator's /verify refused the spent nonce: {out}"
    );
    assert_refused(&out, "tamper", "verification-failed");
    assert_eq!(
        out["tamper"]["problem"]["detail"],
        "Payment verification failed: EVM authorization amount mismatch.",
        "{out}"
    );

    // What mppx would get from the facilitator for that credential once more (the body its
    // x402 client sends, byte for byte in shape): refusals it can parse, `/verify` an
    // `isValid: false`, and `/settle` (reached when two copies pass `/verify` at once) a
    // `success: false` with a non-empty `network` and a string `transaction`, which mppx
    // requires even of a failure (else it answers 500 internal-payment-error).
    let body = mppx_facilitator_body(&out);
    let http = reqwest::Client::new();
    let verify: Value = http
        .post(format!("{}/verify", facilitator.url))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(verify["isValid"], false, "{verify}");
    assert_eq!(
        verify["invalidReason"], "invalid_transaction_state",
        "{verify}"
    );
    let settle: Value = http
        .post(format!("{}/settle", facilitator.url))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(settle["success"], false, "{settle}");
    assert_eq!(settle["errorReason"], "duplicate_settlement", "{settle}");
    assert_eq!(settle["network"], format!("eip155:{CHAIN_ID}"), "{settle}");
    assert_eq!(
        settle["transaction"],
        tx.to_string(),
        "names the original: {settle}"
    );

    // Moved exactly once; served once.
    assert_eq!(server.served().await, 1, "served once");
    net.assert_moved_once(payer.address, pay_to, before, PRICE)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mppx_client_pays_mppx_server_through_tollgate_facilitator_on_devnet() {
    mppx_client_pays_mppx_server(Backend::Devnet).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mppx_client_pays_mppx_server_through_tollgate_facilitator_on_anvil() {
    mppx_client_pays_mppx_server(Backend::Anvil).await;
}

/// `mpp-pay.mjs` → the Tollgate gate, offering MPP beside x402 (and a plan) on the same route →
/// the Tollgate facilitator. The very credential replayed is refused as used
/// (`invalid-challenge`), the one with its signed value raised as not paying the challenge
/// (`verification-failed`); neither moves anything.
async fn mppx_client_pays_tollgate_gate(backend: Backend) {
    let scripts = mpp_scripts();
    let net = Net::start(backend).await;
    let facilitator = net.tollgate_facilitator().await;
    let pay_to = Address::repeat_byte(0x95);
    let gate = GateServer::spawn_with(&net, &facilitator.url, pay_to, true).await;
    let payer = &net.accounts[4];
    let before = net.balances(payer.address, pay_to).await;
    let url = format!("{}/weather", gate.url);
    let out = run_mpp_pay(&scripts, &url, payer.private_key, "USD Coin").await;
    let realm = gate.url.trim_start_matches("http://");
    assert_paid((&net.chain, net.token), &out, payer.address, pay_to, realm).await;
    assert_refused(&out, "replay", "invalid-challenge");
    assert_refused(&out, "tamper", "verification-failed");
    assert_eq!(gate.hits.load(Ordering::SeqCst), 1, "served once");
    net.assert_moved_once(payer.address, pay_to, before, PRICE)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mppx_client_pays_tollgate_gate_on_devnet() {
    mppx_client_pays_tollgate_gate(Backend::Devnet).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mppx_client_pays_tollgate_gate_on_anvil() {
    mppx_client_pays_tollgate_gate(Backend::Anvil).await;
}

/// `mpp-pay.mjs` → the Tollgate gate (MPP on, a one-time price) → a Tollgate facilitator settling
/// on Circle's FiatToken v2.2, deployed on anvil at USDC's Base Sepolia address (its EIP-712
/// domain `USDC`, `2`), a block every 2 s and 2 confirmations: the paid request is held until
/// the settlement confirms (the gate's default `pending_hold`, 15 s), then served with the
/// receipt of the proxy's own `transferWithAuthorization`. Replayed and tampered credentials
/// are refused as on the other chains, and move nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mppx_client_pays_tollgate_gate_on_circles_usdc() {
    let scripts = mpp_scripts();
    let (fixture, _usdc) = usdc::fixture().await.expect("USDC on anvil");
    let net = TestNet::builder()
        .fixture(fixture)
        .networks([NETWORK])
        .confirmations(2)
        .start()
        .await
        .expect("test network");
    net.mine_every(2).await;
    assert_eq!(net.token(), usdc::USDC_BASE_SEPOLIA);
    assert_eq!(net.chain_id(), CHAIN_ID);
    let pay_to = Address::repeat_byte(0x98);
    let gate = Gate::builder()
        .network(NETWORK)
        .token(net.token(), usdc::NAME, usdc::VERSION)
        .pay_to(pay_to)
        .facilitator(&net.url)
        .build()
        .await
        .expect("gate");
    let gate = GateServer::serve(gate.payment_gate([Pricing::one_time(PRICE)]).mpp(true)).await;
    let payer = net.account(PAYER);
    let before = (
        net.token_balance(payer.address).await,
        net.token_balance(pay_to).await,
    );
    let url = format!("{}/weather", gate.url);
    let out = run_mpp_pay(&scripts, &url, payer.private_key, usdc::NAME).await;
    let realm = gate.url.trim_start_matches("http://");
    let on_chain = (&*net.fixture.chain, net.token());
    assert_paid(on_chain, &out, payer.address, pay_to, realm).await;
    assert_refused(&out, "replay", "invalid-challenge");
    assert_refused(&out, "tamper", "verification-failed");
    assert_eq!(gate.hits.load(Ordering::SeqCst), 1, "served once");
    assert_eq!(
        net.token_balance(pay_to).await,
        before.1 + U256::from(PRICE)
    );
    assert_eq!(
        net.token_balance(payer.address).await,
        before.0 - U256::from(PRICE)
    );
}

/// Asserts that an mppx server refused a `PAYMENT-SIGNATURE` the MPP way (it answers x402
/// payments with its own refusals): 402, a fresh challenge, a `verification-failed` problem
/// with `detail`, no receipt of either kind.
async fn assert_x402_refused(response: reqwest::Response, detail: &str) {
    assert_eq!(response.status(), 402, "{detail}");
    let headers = response.headers().clone();
    assert!(headers.contains_key("www-authenticate"), "{headers:?}");
    assert!(headers.contains_key("payment-required"), "{headers:?}");
    assert!(!headers.contains_key("payment-receipt"), "{headers:?}");
    assert!(!headers.contains_key("payment-response"), "{headers:?}");
    let problem: Value = response.json().await.unwrap();
    assert_eq!(
        problem["type"],
        format!("{PROBLEMS}verification-failed"),
        "{problem}"
    );
    assert_eq!(problem["detail"], detail, "{problem}");
}

/// The Tollgate agent → `mpp-server.mjs` → Tollgate's facilitator. An mppx EVM charge server
/// offers x402 V2 beside MPP on every 402 (`PAYMENT-REQUIRED`, its `accepts` built from the
/// same route), and the agent prefers x402 when offered both: it pays with `PAYMENT-SIGNATURE`,
/// which mppx accepts when `accepted` deep-equals its requirements and `resource.url` is the
/// request's. That header replayed (mppx keeps no replay store: the facilitator's `/verify`
/// refuses the spent nonce), or re-sent with its value raised, is refused and moves nothing.
/// With `cli`, `tollgate pay --json` pays the same server once more the same way.
async fn agent_pays_mppx_server(backend: Backend, cli: bool) {
    let scripts = mpp_scripts();
    let net = Net::start(backend).await;
    let facilitator = net.tollgate_facilitator().await;
    let pay_to = Address::repeat_byte(0x96);
    let server = mppx_server(&net, &scripts, &facilitator.url, pay_to).await;
    let payer = &net.accounts[5];
    let before = net.balances(payer.address, pay_to).await;
    let weather = format!("{}/weather", server.url);

    let policy = SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(10 * PRICE))
        .networks([NETWORK])
        .tokens([net.token])
        .payees([pay_to]);
    let agent = Agent::from_hex_key(&payer.private_key.to_string(), policy).unwrap();
    let response = agent.pay(PayRequest::get(&weather).unwrap()).await.unwrap();
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.json::<Value>().unwrap(), weather_body());
    // Paid by x402 V2, not by an MPP credential.
    // mppx answers with both receipts: its own and x402's.
    assert!(
        response.headers.contains_key("payment-receipt"),
        "{response:?}"
    );
    let payment = response.payment.expect("the agent paid");
    assert_eq!(payment.kind, PaymentKind::X402, "{payment:?}");
    assert_eq!(payment.x402_version, Some(2), "{payment:?}");
    assert_eq!(payment.header_name(), "payment-signature");
    assert_eq!(payment.amount, Amount::from_units(PRICE));
    let sent = PaymentPayloadV2::decode_header(&payment.header).unwrap();
    // What mppx checks: `accepted` is its own terms (its `PAYMENT-REQUIRED` offer, echoed
    // whole, `extra.assetTransferMethod` included), `resource.url` the request's.
    let offered = reqwest::get(&weather).await.unwrap();
    assert_eq!(offered.status(), 402);
    let offered =
        PaymentRequiredV2::decode_header(offered.headers()["payment-required"].to_str().unwrap())
            .unwrap();
    assert_eq!(
        offered.accepts,
        std::slice::from_ref(&sent.accepted),
        "{offered:?}"
    );
    let url = sent.resource.as_ref().map(|r| r.url.as_str());
    assert!(url.is_none_or(|u| u == weather), "{sent:?}");
    let settlement = payment.settlement.clone().expect("PAYMENT-RESPONSE");
    assert!(settlement.success, "{settlement:?}");
    assert_eq!(settlement.network, format!("eip155:{CHAIN_ID}"));
    let tx: B256 = settlement.transaction.parse().unwrap();
    let nonce = assert_transferred((&net.chain, net.token), tx, payer.address, pay_to).await;
    assert_eq!(nonce, sent.payload.authorization.nonce);
    assert_eq!(agent.spent(), Amount::from_units(PRICE));

    // Replay and tamper with the header the agent sent: a 402 with a fresh challenge each.
    let http = reqwest::Client::new();
    let replay = http
        .get(&weather)
        .header("payment-signature", &payment.header)
        .send()
        .await
        .unwrap();
    // Replayed: mppx's checks pass, the facilitator's /verify refuses the spent nonce.
    assert_x402_refused(
        replay,
        "Payment verification failed: invalid_transaction_state.",
    )
    .await;
    let mut tampered = sent.clone();
    tampered.payload.authorization.value = (PRICE + 1).into();
    tampered.payload.authorization.nonce = B256::repeat_byte(0x56);
    let tamper = http
        .get(&weather)
        .header("payment-signature", tampered.encode_header())
        .send()
        .await
        .unwrap();
    // Tampered: mppx compares the signed value with its price first.
    assert_x402_refused(
        tamper,
        "Payment verification failed: EVM authorization amount mismatch.",
    )
    .await;

    assert_eq!(server.served().await, 1, "served once");
    net.assert_moved_once(payer.address, pay_to, before, PRICE)
        .await;
    if !cli {
        return;
    }

    // `tollgate pay` pays the same way, and says so.
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["pay", &weather, "--max", "0.25", "--json", "--key"])
        .arg(payer.private_key.to_string())
        .env_remove("TOLLGATE_LOG")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("tollgate pay finished")
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("; x402 V2"), "{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(
        serde_json::from_str::<Value>(out["body"].as_str().unwrap()).unwrap(),
        weather_body()
    );
    let paid = &out["payment"];
    assert_eq!(paid["kind"], "x402", "{out}");
    assert_eq!(paid["x402Version"], 2, "{out}");
    assert_eq!(paid["amount"], PRICE.to_string(), "{out}");
    assert!(paid["mppReceipt"].is_null(), "{out}");
    assert_eq!(paid["settlement"]["success"], true, "{out}");
    let tx: B256 = paid["settlement"]["transaction"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("the settlement transaction: {out}"));
    assert_transferred((&net.chain, net.token), tx, payer.address, pay_to).await;
    assert_eq!(server.served().await, 2);
    assert_eq!(net.balance(pay_to).await, before.1 + U256::from(2 * PRICE));
    assert_eq!(
        net.balance(payer.address).await,
        before.0 - U256::from(2 * PRICE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tollgate_agent_pays_mppx_server_through_tollgate_facilitator_on_devnet() {
    Box::pin(agent_pays_mppx_server(Backend::Devnet, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tollgate_agent_pays_mppx_server_through_tollgate_facilitator_on_anvil() {
    Box::pin(agent_pays_mppx_server(Backend::Anvil, false)).await;
}

/// An upstream API serving `GET /weather` to whoever reaches it; counts how often it ran.
async fn upstream() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = axum::Router::new().route(
        "/weather",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { axum::Json(weather_body()) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, hits, server)
}

/// `tollgate gateway` in front of `upstream`, selling `/weather` for [`PRICE`] to `pay_to` by
/// x402 and MPP (`mpp = true`) through `facilitator`; returns it and its port once it answers.
async fn spawn_gateway(
    net: &Net,
    dir: &Path,
    facilitator: &str,
    upstream: &str,
    pay_to: Address,
) -> (Child, u16) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:{port}"
upstream = "{upstream}"
[gate]
network = "{NETWORK}"
token = "{token}"
token_name = "USD Coin"
token_version = "2"
pay_to = "{pay_to}"
facilitator = "{facilitator}"
memo_store = "sqlite://{memos}"
[[routes]]
prefix = "/weather"
price = "{PRICE}"
mpp = true
description = "Today's weather"
[[routes]]
prefix = "/healthz"
free = true
"#,
            token = net.token,
            memos = dir.join("memos.db").display(),
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["gateway", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    // The upstream has no /healthz: any answer from the gateway means it is up.
    while reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
        .await
        .is_err()
    {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the gateway exited (stderr above)"
        );
        assert!(Instant::now() < deadline, "the gateway did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, port)
}

/// `mpp-pay.mjs` → `tollgate gateway` (a route with `mpp = true`) → Tollgate's facilitator.
/// The very credential replayed is refused as used (`invalid-challenge`), the one with its
/// signed value raised as not paying the challenge (`verification-failed`); the upstream runs
/// once and the price moves once.
async fn mppx_client_pays_tollgate_gateway(backend: Backend) {
    let scripts = mpp_scripts();
    let net = Net::start(backend).await;
    let facilitator = net.tollgate_facilitator().await;
    let pay_to = Address::repeat_byte(0x97);
    let (upstream_url, hits, _upstream) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (_gateway, port) =
        spawn_gateway(&net, dir.path(), &facilitator.url, &upstream_url, pay_to).await;
    let payer = &net.accounts[4];
    let before = net.balances(payer.address, pay_to).await;
    let url = format!("http://127.0.0.1:{port}/weather");
    let out = run_mpp_pay(&scripts, &url, payer.private_key, "USD Coin").await;
    assert_paid(
        (&net.chain, net.token),
        &out,
        payer.address,
        pay_to,
        &format!("127.0.0.1:{port}"),
    )
    .await;
    assert_refused(&out, "replay", "invalid-challenge");
    assert_refused(&out, "tamper", "verification-failed");
    assert_eq!(hits.load(Ordering::SeqCst), 1, "the upstream served once");
    net.assert_moved_once(payer.address, pay_to, before, PRICE)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mppx_client_pays_tollgate_gateway_on_devnet() {
    mppx_client_pays_tollgate_gateway(Backend::Devnet).await;
}
