//! Gas per operation on Circle's FiatToken v2.2 (issue 34 point 5): every money operation's
//! transaction, built as the facilitator builds it (the same contract bindings and calls), sent on
//! the USDC fixture (anvil as Base Sepolia, FiatToken behind its proxy at USDC's address) and
//! measured by its receipt's gas used, beside the floor: the plain `transferWithAuthorization`
//! (`v, r, s`) that x402's reference facilitator sends to USDC for one payment.
//!
//! The figures are reproducible: fixed keys (the standard mnemonic), fixed amounts, nonces, memos
//! and validity windows (signatures are RFC 6979, so the calldata is the same byte for byte), and
//! the same state before each operation (payers, payees and the fee recipient already hold USDC;
//! each authorization nonce is fresh). The table is printed and compared with `gas.snapshot`
//! beside this file: the test fails when an operation grows by more than [`TOLERANCE_PERCENT`] or
//! is missing; `TOLLGATE_GAS_SNAPSHOT=update` rewrites the snapshot. It checks that what the
//! facilitator itself sends for `/authorize` and x402 `/settle` costs what the table says, and
//! holds the targets ([`BATCH_TARGET_PERCENT`], [`ROUTER_TARGET_PERCENT`]) against the
//! node's opcode trace: a target is met, or its miss is out of `PaymentRouter`'s reach (with the
//! router's own frame at zero gas, USDC's work, the calldata and the base cost already exceed
//! it; BENCHMARKS.md has the figures). A miss that a cheaper router could turn into a pass fails.

use std::{collections::BTreeMap, fmt::Write as _, path::PathBuf};

use alloy::{
    primitives::{Address, B256, Bytes, U256},
    sol_types::SolCall,
};
use serde_json::{Value, json};
use tollgate_chain::{
    Chain, Confirmation, Receipt, TxRequest, WaitOptions,
    accounts::{DevAccount, dev_accounts},
    authorization::{
        Action, ActionKind, Permit, RouterPayment, Subscribe, TransferWithAuthorization, sign,
        sign_vrs, subscriptions_domain,
    },
    contracts::{self, PaymentRouter, Subscriptions, Token},
};
use tollgate_protocol::PaymentProof;
use tollgate_testkit::{
    ACCOUNTS, Fixture,
    harness::{FEE, PAYEE, PAYER, TestNet},
    usdc::{self, BASE_SEPOLIA_CHAIN_ID},
};

/// How much an operation may grow over its snapshot before the test fails, in percent.
const TOLERANCE_PERCENT: u64 = 2;
/// The target: a batched x402 settlement to one payee, per payment at batch size 8, at
/// most this percentage of the floor.
const BATCH_TARGET_PERCENT: u64 = 60;
/// The target: a one-time payment through the router at most this percentage of the
/// floor.
const ROUTER_TARGET_PERCENT: u64 = 120;
/// The environment variable that rewrites the snapshot (`update`).
const UPDATE_VAR: &str = "TOLLGATE_GAS_SNAPSHOT";

const NETWORK: &str = "base-sepolia";
/// The relayer sending the measured transactions (the facilitator's own, dev account 8, sends the
/// cross-checked ones), and the plans' provider and operator, as a facilitator's relayer is for
/// the plans it creates.
const SENDER: usize = 6;
/// The dev account that funds the payers.
const FUNDER: usize = 3;
/// The subscriber.
const SUBSCRIBER: usize = 2;
/// The fee recipient of the fixture's router (its deployer).
const FEE_RECIPIENT: usize = 0;
/// Fresh payers (keys of the standard mnemonic past the fixture's accounts and roles), funded
/// with USDC: one per payment, as payments come from different clients.
const PAYERS: usize = 1 + 1 + 1 + 8 + 32;
/// What each fresh payer is funded with.
const FUNDING: u64 = 100_000_000;
/// An x402 payment (one cent) and a router payment (half a dollar).
const X402_AMOUNT: u64 = 10_000;
const ROUTER_AMOUNT: u64 = 500_000;
/// Every validity window and deadline: from 0 to this fixed time (2100-01-01).
const VALID_BEFORE: u64 = 4_102_444_800;
/// The plan: one USDC a week, overage capped at a quarter per cycle, a permit for a year.
const PLAN_AMOUNT: u64 = 1_000_000;
const PLAN_INTERVAL: u64 = 7 * 24 * 3600;
const MAX_OVERAGE: u64 = 250_000;
const OVERAGE: u64 = 40_000;

/// One measured operation: its snapshot name, what it sends, its gas and how many payments it
/// makes (0 for subscription bookkeeping).
#[derive(Debug)]
struct Measured {
    name: &'static str,
    what: &'static str,
    gas: u64,
    payments: u64,
}

/// The operations in table order.
const FLOOR: &str = "floor_transfer_with_authorization";
const X402_ALONE: &str = "x402_settle";
const BATCH_8: &str = "x402_batch_8";
const BATCH_32: &str = "x402_batch_32";
const ROUTER: &str = "router_settle";
const SUBSCRIBE: &str = "subscribe_with_permit";
const RENEWAL: &str = "renewal_collect";
const OVERAGE_CHARGE: &str = "overage_charge";
const PAUSE: &str = "pause";
const CANCEL: &str = "cancel";

#[tokio::test(flavor = "multi_thread")]
async fn gas_per_operation_on_fiat_token_against_the_snapshot_and_targets() {
    let (fixture, usdc) = usdc::fixture().await.expect("USDC on anvil");
    let ops = Ops::new(&fixture, usdc.url.clone()).await;
    let mut measured = Vec::new();
    let mut m = |name, what, receipt: &Receipt, payments| {
        measured.push(Measured {
            name,
            what,
            gas: receipt.gas_used,
            payments,
        });
    };

    let floor = ops.floor().await;
    m(
        FLOOR,
        "USDC.transferWithAuthorization(v, r, s), as x402's reference facilitator sends it",
        &floor,
        1,
    );
    let alone = ops.x402_alone().await;
    m(
        X402_ALONE,
        "USDC.transferWithAuthorization(bytes signature), what /settle sends for one payment",
        &alone,
        1,
    );
    let (batch_8, packed_8) = ops.batch(8).await;
    m(
        BATCH_8,
        "PaymentRouter.settleTransfers, 8 payers to one payee",
        &batch_8,
        8,
    );
    let (batch_32, _) = ops.batch(32).await;
    m(
        BATCH_32,
        "PaymentRouter.settleTransfers, 32 payers to one payee",
        &batch_32,
        32,
    );
    let router = ops.router_settle().await;
    m(
        ROUTER,
        "PaymentRouter.settle (fee split), what /authorize sends",
        &router,
        1,
    );
    let subs = ops.subscriptions().await;
    m(
        SUBSCRIBE,
        "Subscriptions.subscribeWithSig with USDC's EIP-2612 permit, first cycle pulled",
        &subs.subscribe,
        1,
    );
    m(
        RENEWAL,
        "Subscriptions.collect, the keeper's renewal",
        &subs.renewal,
        1,
    );
    m(
        OVERAGE_CHARGE,
        "Subscriptions.chargeOverage, by the plan's operator",
        &subs.overage,
        1,
    );
    m(
        PAUSE,
        "Subscriptions.pauseWithSig, relayed for the subscriber",
        &subs.pause,
        0,
    );
    m(
        CANCEL,
        "Subscriptions.cancelWithSig, relayed for the subscriber",
        &subs.cancel,
        0,
    );

    let floor_gas = floor.gas_used;
    eprintln!("{}", table(&measured, floor_gas));
    // Where the gas goes, from the node's opcode trace of the same calls.
    let mut traced = Vec::new();
    for (label, receipt) in [
        ("floor", &floor),
        ("batch of 8", &batch_8),
        ("router settle", &router),
    ] {
        let b = breakdown(&ops.url, receipt).await;
        eprintln!("{label}: {b}");
        traced.push(b);
    }
    let (batch_trace, router_trace) = (&traced[1], &traced[2]);

    // The facilitator itself sends what the table measures: its `/authorize` and x402 `/settle`
    // transactions go to the same contracts with the same calls and cost the same, give or take
    // the calldata of their own validity windows and signatures.
    let net = TestNet::builder()
        .fixture(fixture)
        .networks([NETWORK])
        .start()
        .await
        .expect("test network");
    let (authorize, settle) = facilitator_sends(&net).await;
    for (what, sent, measured) in [
        ("/authorize", &authorize, &router),
        ("x402 /settle", &settle, &alone),
    ] {
        assert_eq!(sent.to, measured.to, "{what} calls another contract");
        let (a, b) = (sent.gas_used, measured.gas_used);
        assert!(
            a.abs_diff(b) * 100 <= b,
            "{what}: the facilitator's transaction used {a} gas, the table says {b}"
        );
    }

    // The snapshot.
    let path = snapshot_path();
    let gas: BTreeMap<&str, u64> = measured.iter().map(|m| (m.name, m.gas)).collect();
    if std::env::var(UPDATE_VAR).as_deref() == Ok("update") {
        std::fs::write(&path, render_snapshot(&measured)).expect("write the snapshot");
        eprintln!("{}: rewritten", path.display());
    } else {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let failures = compare(&parse_snapshot(&text), &gas);
        assert!(
            failures.is_empty(),
            "gas snapshot {}:\n{}\n(after a deliberate change: {UPDATE_VAR}=update)",
            path.display(),
            failures.join("\n")
        );
    }

    // The targets. A target missed must be out of the router's reach: even with its own frame
    // (dispatch, decoding, encoding its calls into USDC, its event) at zero gas, what the token
    // does for the payments, the calldata the facilitator sends and the transaction's base cost
    // already exceed it. A miss that cutting the router could turn into a pass fails here.
    for (what, gas, payments, trace, target) in [
        (
            "batch of 8, per payment",
            batch_8.gas_used,
            8,
            batch_trace,
            BATCH_TARGET_PERCENT,
        ),
        (
            "router settle",
            router.gas_used,
            1,
            router_trace,
            ROUTER_TARGET_PERCENT,
        ),
    ] {
        let each = gas.div_ceil(payments);
        let limit = floor_gas * target / 100;
        if each <= limit {
            eprintln!(
                "{what}: {each} gas, {} of the floor: target {target} % met",
                percent(each, floor_gas)
            );
            continue;
        }
        let bound = (gas - trace.own_frame).div_ceil(payments);
        if payments == 8 {
            let packed = packed_8.div_ceil(8);
            let calldata = trace.calldata.div_ceil(8);
            let ideal = bound - calldata + packed;
            eprintln!(
                "{what}: with the transfers' calldata packed to their signed fields ({packed} \
                 instead of {calldata} per payment) as well, still {ideal} ({})",
                percent(ideal, floor_gas)
            );
        }
        eprintln!(
            "{what}: {each} gas, {} of the floor: target {target} % ({limit}) missed; with the \
             router's own frame at zero it would still be {bound} ({})",
            percent(each, floor_gas),
            percent(bound, floor_gas)
        );
        assert!(
            bound > limit,
            "{what}: {each} gas is {} of the floor ({floor_gas}), over the target {target} %, \
             and the router's own frame ({} gas) is what stands in the way: cut PaymentRouter",
            percent(each, floor_gas),
            trace.own_frame
        );
    }
}

/// The measured transactions, on one fixture.
struct Ops<'a> {
    fixture: &'a Fixture,
    chain: &'a dyn Chain,
    url: String,
    sender: Address,
    payers: Vec<DevAccount>,
    next_payer: std::cell::Cell<usize>,
}

/// The subscription path's receipts.
struct SubscriptionReceipts {
    subscribe: Receipt,
    renewal: Receipt,
    overage: Receipt,
    pause: Receipt,
    cancel: Receipt,
}

impl<'a> Ops<'a> {
    /// Funds [`PAYERS`] fresh payers with USDC from [`FUNDER`].
    async fn new(fixture: &'a Fixture, url: String) -> Self {
        let first = ACCOUNTS + 7; // past the fixture's dev accounts and FiatToken's roles
        let payers = dev_accounts(first + PAYERS as u32)[first as usize..].to_vec();
        let ops = Self {
            fixture,
            chain: &*fixture.chain,
            url,
            sender: fixture.address(SENDER),
            payers,
            next_payer: std::cell::Cell::new(0),
        };
        for p in &ops.payers {
            let call = Token::transferCall {
                to: p.address,
                value: U256::from(FUNDING),
            };
            ops.send_from(fixture.address(FUNDER), ops.token(), call.abi_encode())
                .await;
        }
        ops
    }

    fn token(&self) -> Address {
        self.fixture.deployment.token
    }

    /// The next fresh payer.
    fn payer(&self) -> &DevAccount {
        let i = self.next_payer.get();
        self.next_payer.set(i + 1);
        &self.payers[i]
    }

    async fn send(&self, to: Address, data: Vec<u8>) -> Receipt {
        self.send_from(self.sender, to, data).await
    }

    async fn send_from(&self, from: Address, to: Address, data: Vec<u8>) -> Receipt {
        let tx = TxRequest {
            gas: Some(8_000_000),
            ..TxRequest::call(from, to, data)
        };
        match self.chain.send_and_wait(tx, WaitOptions::default()).await {
            Ok(Confirmation::Confirmed(r)) if r.success => r,
            other => panic!("a transaction to {to} failed: {other:?}"),
        }
    }

    /// A fresh payer's `TransferWithAuthorization` of `amount` to the payee, nonce `nonce`.
    fn exact(&self, payer: &DevAccount, amount: u64, nonce: B256) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: payer.address,
            to: self.fixture.address(PAYEE),
            value: U256::from(amount),
            validAfter: U256::ZERO,
            validBefore: U256::from(VALID_BEFORE),
            nonce,
        }
    }

    /// The floor: `transferWithAuthorization(..., v, r, s)` sent straight to USDC.
    async fn floor(&self) -> Receipt {
        let payer = self.payer();
        let auth = self.exact(payer, X402_AMOUNT, B256::repeat_byte(0xf1));
        let vrs = sign_vrs(&payer.signer(), &auth, &self.fixture.token_domain()).unwrap();
        let call = Token::transferWithAuthorization_1Call {
            from: auth.from,
            to: auth.to,
            value: auth.value,
            validAfter: auth.validAfter,
            validBefore: auth.validBefore,
            nonce: auth.nonce,
            v: vrs.v,
            r: vrs.r,
            s: vrs.s,
        };
        self.paid(self.send(self.token(), call.abi_encode()).await, 1)
            .await
    }

    /// One x402 payment as the facilitator settles it alone: the `bytes signature` overload sent
    /// straight to USDC (`x402.rs`'s `transfer_call`).
    async fn x402_alone(&self) -> Receipt {
        let payer = self.payer();
        let auth = self.exact(payer, X402_AMOUNT, B256::repeat_byte(0xa1));
        let signature = sign(&payer.signer(), &auth, &self.fixture.token_domain()).unwrap();
        let call = Token::transferWithAuthorization_0Call {
            from: auth.from,
            to: auth.to,
            value: auth.value,
            validAfter: auth.validAfter,
            validBefore: auth.validBefore,
            nonce: auth.nonce,
            signature,
        };
        self.paid(self.send(self.token(), call.abi_encode()).await, 1)
            .await
    }

    /// `n` x402 payments from `n` fresh payers to one payee in one `settleTransfers`
    /// (`batch.rs`'s call).
    async fn batch(&self, n: usize) -> (Receipt, u64) {
        let domain = self.fixture.token_domain();
        let transfers: Vec<_> = (0..n)
            .map(|i| {
                let payer = self.payer();
                // Random-looking, as x402 clients' nonces are (32 bytes of calldata each).
                let nonce = alloy::primitives::keccak256(format!("gas batch {n} {i}"));
                let auth = self.exact(payer, X402_AMOUNT, nonce);
                let signature = sign(&payer.signer(), &auth, &domain).unwrap();
                PaymentRouter::Transfer {
                    from: auth.from,
                    to: auth.to,
                    value: auth.value,
                    validAfter: auth.validAfter,
                    validBefore: auth.validBefore,
                    nonce: auth.nonce,
                    signature,
                }
            })
            .collect();
        let packed = transfers.iter().map(packed_calldata_gas).sum();
        let call = PaymentRouter::settleTransfersCall { transfers };
        let r = self
            .send(self.fixture.deployment.router, call.abi_encode())
            .await;
        (self.paid(r, n).await, packed)
    }

    /// A one-time payment through the router with the facilitator's fee
    /// (`settle/mod.rs`'s `settle_call`).
    async fn router_settle(&self) -> Receipt {
        let payer = self.payer();
        let payment = RouterPayment {
            from: payer.address,
            pay_to: self.fixture.address(PAYEE),
            amount: U256::from(ROUTER_AMOUNT),
            fee: U256::from(FEE),
            memo: B256::repeat_byte(0x5e),
            valid_after: U256::ZERO,
            valid_before: U256::from(VALID_BEFORE),
        };
        let router = self.fixture.deployment.router;
        let auth = payment.authorization(router);
        let signature = sign(&payer.signer(), &auth, &self.fixture.token_domain()).unwrap();
        let fee_recipient = self.fixture.address(FEE_RECIPIENT);
        let before = self.balance(fee_recipient).await;
        let r = self
            .send(router, payment.settle_call(signature).abi_encode())
            .await;
        assert_eq!(self.balance(fee_recipient).await, before + U256::from(FEE));
        assert_eq!(self.balance(router).await, U256::ZERO);
        r
    }

    /// The subscription path, as the facilitator relays it: a plan (provider and operator the
    /// sender), `subscribeWithSig` with USDC's permit, the keeper's `collect` once the week is
    /// paid, an overage charge in the new cycle, then `pauseWithSig` and `cancelWithSig`.
    async fn subscriptions(&self) -> SubscriptionReceipts {
        let subs = self.fixture.deployment.subscriptions;
        let sub_domain = subscriptions_domain(BASE_SEPOLIA_CHAIN_ID, subs);
        let subscriber = self.fixture.account(SUBSCRIBER);
        let who = subscriber.address;
        let signer = subscriber.signer();
        let salt = B256::repeat_byte(0x91);
        let create = Subscriptions::createPlanCall {
            token: self.token(),
            payTo: self.fixture.address(PAYEE),
            amount: U256::from(PLAN_AMOUNT),
            interval: PLAN_INTERVAL,
            operator: self.sender,
            salt,
        };
        self.send(subs, create.abi_encode()).await;
        let plan_id = self
            .read(
                subs,
                &Subscriptions::planIdForCall {
                    provider: self.sender,
                    salt,
                },
            )
            .await;

        let nonce = self
            .read(subs, &Subscriptions::noncesCall { subscriber: who })
            .await;
        let permit_nonce = self
            .read(self.token(), &Token::noncesCall { owner: who })
            .await;
        let permit_value = U256::from((PLAN_AMOUNT + MAX_OVERAGE) * 52);
        let permit = Permit {
            owner: who,
            spender: subs,
            value: permit_value,
            nonce: permit_nonce,
            deadline: U256::from(VALID_BEFORE),
        };
        let permit_signature = sign(&signer, &permit, &self.fixture.token_domain()).unwrap();
        let intent = Subscribe {
            planId: plan_id,
            subscriber: who,
            maxOverage: U256::from(MAX_OVERAGE),
            nonce,
            deadline: U256::from(VALID_BEFORE),
        };
        let signature = sign(&signer, &intent, &sub_domain).unwrap();
        let call = Subscriptions::subscribeWithSigCall {
            planId: plan_id,
            subscriber: who,
            maxOverage: U256::from(MAX_OVERAGE),
            deadline: U256::from(VALID_BEFORE),
            signature,
            permitValue: permit_value,
            permitDeadline: U256::from(VALID_BEFORE),
            permitSignature: permit_signature,
        };
        let before = self.balance(who).await;
        let subscribe = self.send(subs, call.abi_encode()).await;
        assert_eq!(self.balance(who).await, before - U256::from(PLAN_AMOUNT));
        let id = self
            .read(
                subs,
                &Subscriptions::subscriptionIdForCall {
                    planId: plan_id,
                    subscriber: who,
                    nonce,
                },
            )
            .await;

        // Renewal once the paid week is over: the keeper's call.
        self.chain.advance_time(PLAN_INTERVAL + 10).await.unwrap();
        let renewal = self
            .send(
                subs,
                Subscriptions::collectCall { id, cycle: 2 }.abi_encode(),
            )
            .await;
        assert_eq!(
            self.balance(who).await,
            before - U256::from(2 * PLAN_AMOUNT)
        );

        let charge = Subscriptions::chargeOverageCall {
            id,
            cycle: 2,
            amount: U256::from(OVERAGE),
            r#ref: B256::repeat_byte(0x0c),
        };
        let overage = self.send(subs, charge.abi_encode()).await;
        assert_eq!(
            self.balance(who).await,
            before - U256::from(2 * PLAN_AMOUNT + OVERAGE)
        );

        let relayed = async |kind: ActionKind| {
            let nonce = self
                .read(subs, &Subscriptions::noncesCall { subscriber: who })
                .await;
            let deadline = U256::from(VALID_BEFORE);
            let action = Action::new(id, kind, U256::ZERO, nonce, deadline);
            let signature = sign(&signer, &action, &sub_domain).unwrap();
            let data = match kind {
                ActionKind::Pause => Subscriptions::pauseWithSigCall {
                    id,
                    deadline,
                    signature,
                }
                .abi_encode(),
                _ => Subscriptions::cancelWithSigCall {
                    id,
                    deadline,
                    signature,
                }
                .abi_encode(),
            };
            self.send(subs, data).await
        };
        let pause = relayed(ActionKind::Pause).await;
        let cancel = relayed(ActionKind::Cancel).await;
        let status = self.read(subs, &Subscriptions::statusCall { id }).await;
        assert_eq!(status.state, 3, "cancelled");
        SubscriptionReceipts {
            subscribe,
            renewal,
            overage,
            pause,
            cancel,
        }
    }

    /// `r`, once its logs show exactly `n` authorizations used (a batch skips a transfer that
    /// fails, and its transaction still succeeds).
    async fn paid(&self, r: Receipt, n: usize) -> Receipt {
        let used = r
            .logs
            .iter()
            .filter(|l| l.topics().first() == Some(&AUTHORIZATION_USED))
            .count();
        assert_eq!(
            used, n,
            "{} of {n} authorizations used in {}",
            used, r.tx_hash
        );
        r
    }

    async fn balance(&self, who: Address) -> U256 {
        self.fixture.token_balance(who).await.unwrap()
    }

    async fn read<C: SolCall>(&self, to: Address, call: &C) -> C::Return {
        contracts::read(self.chain, to, call).await.unwrap()
    }
}

/// The calldata gas of a transfer packed as tightly as its signed fields allow (payer, value,
/// validity window, nonce and the 65-byte signature, with the payee once per batch elsewhere):
/// what no encoding of a batch can go under.
fn packed_calldata_gas(t: &PaymentRouter::Transfer) -> u64 {
    let words = [t.value, t.validAfter, t.validBefore].map(|w| w.to_be_bytes::<32>());
    let bytes = t
        .from
        .iter()
        .chain(words.iter().flatten())
        .chain(t.nonce.iter())
        .chain(t.signature.iter());
    bytes.map(|&x| if x == 0 { 4 } else { 16 }).sum()
}

/// `keccak256("AuthorizationUsed(address,bytes32)")`.
const AUTHORIZATION_USED: B256 =
    alloy::primitives::b256!("98de503528ee59b575ef0c0a2576a82497bfc029a5685b209e9ec333479b10a5");

/// One `/authorize` and one x402 `/settle` through the facilitator: their receipts.
async fn facilitator_sends(net: &TestNet) -> (Receipt, Receipt) {
    let pay_to = net.address(PAYEE);
    let sp = net
        .signed_payment(
            NETWORK,
            PAYER,
            pay_to,
            ROUTER_AMOUNT,
            B256::repeat_byte(0x5f),
        )
        .await;
    let reply = post(net, "/authorize", &json!({ "signedPayment": sp })).await;
    assert_eq!(reply["status"], "confirmed", "{reply}");
    let proof = PaymentProof::decode(reply["proof"].as_str().unwrap()).unwrap();
    let authorize = net
        .fixture
        .chain
        .receipt(proof.tx_hash)
        .await
        .unwrap()
        .unwrap();

    let payload = net
        .x402_payload(NETWORK, PAYER, pay_to, X402_AMOUNT, B256::repeat_byte(0xa2))
        .await;
    let body = json!({
        "x402Version": 1,
        "paymentPayload": payload,
        "paymentRequirements": {
            "scheme": "exact",
            "network": NETWORK,
            "maxAmountRequired": X402_AMOUNT.to_string(),
            "resource": "http://127.0.0.1/v1/quote",
            "description": "a quote",
            "mimeType": "application/json",
            "payTo": pay_to,
            "maxTimeoutSeconds": 60,
            "asset": net.token(),
            "extra": { "name": "USDC", "version": "2" }
        }
    });
    let r = post(net, "/settle", &body).await;
    assert_eq!(r["success"], true, "{r}");
    let tx: B256 = r["transaction"].as_str().unwrap().parse().unwrap();
    let settle = net.fixture.chain.receipt(tx).await.unwrap().unwrap();
    (authorize, settle)
}

async fn post(net: &TestNet, path: &str, body: &Value) -> Value {
    net.http
        .post(format!("{}{path}", net.url))
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `part` as a percentage of `whole`, one decimal.
fn percent(part: u64, whole: u64) -> String {
    format!("{:.1} %", part as f64 * 100.0 / whole as f64)
}

/// The table: operation, gas, gas per payment and its share of the floor.
fn table(measured: &[Measured], floor: u64) -> String {
    let mut out = format!(
        "gas per operation on FiatToken v2.2 (floor: {floor}, one transferWithAuthorization)\n\
         {:<36} {:>9} {:>12} {:>9}  what is sent\n",
        "operation", "gas", "per payment", "of floor"
    );
    for m in measured {
        let (each, share) = match m.payments {
            0 => ("-".to_owned(), "-".to_owned()),
            n => {
                let each = m.gas.div_ceil(n);
                (each.to_string(), percent(each, floor))
            }
        };
        let _ = writeln!(
            out,
            "{:<36} {:>9} {:>12} {:>9}  {}",
            m.name, m.gas, each, share, m.what
        );
    }
    out
}

// ------------------------------------------------------------------ the snapshot

fn snapshot_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/gas.snapshot")
}

fn render_snapshot(measured: &[Measured]) -> String {
    let mut out = String::from(
        "# Gas used per operation on FiatToken v2.2 (crates/facilitator/tests/it/gas.rs).\n\
         # The test fails when one grows by more than 2 % or is missing;\n\
         # TOLLGATE_GAS_SNAPSHOT=update cargo nextest run -p tollgate-facilitator gas rewrites it.\n",
    );
    for m in measured {
        let _ = writeln!(out, "{} {}", m.name, m.gas);
    }
    out
}

/// `operation gas` lines; `#` starts a comment. A malformed line is kept as a name with no
/// figure, so that it fails the comparison rather than vanish.
fn parse_snapshot(text: &str) -> BTreeMap<String, Option<u64>> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next().unwrap_or("").to_owned();
            let gas = words.next().and_then(|g| g.parse().ok());
            (name, gas.filter(|_| words.next().is_none()))
        })
        .collect()
}

/// What fails against the snapshot: an operation measured but not in it, one in it but no longer
/// measured, a malformed figure, and one that grew by more than [`TOLERANCE_PERCENT`].
fn compare(
    snapshot: &BTreeMap<String, Option<u64>>,
    measured: &BTreeMap<&str, u64>,
) -> Vec<String> {
    let mut failures = Vec::new();
    for (&name, &gas) in measured {
        match snapshot.get(name) {
            None => failures.push(format!("{name}: {gas} gas, missing from the snapshot")),
            Some(None) => failures.push(format!("{name}: no figure in the snapshot")),
            Some(Some(before)) if gas * 100 > before * (100 + TOLERANCE_PERCENT) => {
                failures.push(format!(
                    "{name}: {gas} gas, up {} on the snapshot's {before} (more than {TOLERANCE_PERCENT} %)",
                    percent(gas - before, *before)
                ));
            }
            Some(Some(_)) => {}
        }
    }
    for name in snapshot.keys() {
        if !measured.contains_key(name.as_str()) {
            failures.push(format!("{name}: in the snapshot but not measured"));
        }
    }
    failures
}

#[test]
fn the_snapshot_fails_on_growth_over_two_percent_and_on_a_missing_operation() {
    let snapshot = parse_snapshot("# comment\na 10000\nb 10000 # trailing\nc 5000\nd x\n");
    let measured: BTreeMap<&str, u64> = [("a", 10_200), ("b", 10_201), ("d", 1), ("e", 7)]
        .into_iter()
        .collect();
    let failures = compare(&snapshot, &measured);
    assert_eq!(
        failures,
        [
            "b: 10201 gas, up 2.0 % on the snapshot's 10000 (more than 2 %)",
            "d: no figure in the snapshot",
            "e: 7 gas, missing from the snapshot",
            "c: in the snapshot but not measured",
        ]
    );
    // Shrinking is fine; so is growth within 2 %.
    let ok: BTreeMap<&str, u64> = [("a", 9_000), ("b", 10_200), ("c", 5_100)]
        .into_iter()
        .collect();
    let snapshot = parse_snapshot("a 10000\nb 10000\nc 5000\n");
    assert!(compare(&snapshot, &ok).is_empty());
}

// ------------------------------------------------------------------ the breakdown

/// Where a transaction's gas went, from the node's opcode trace (`debug_traceTransaction`):
/// intrinsic and calldata, storage reads and writes, logs, hashing, the `ecrecover` precompile,
/// calls (account access and forwarding), other account access, the rest of the EVM's work, and
/// the refund.
#[derive(Debug, Default)]
struct Breakdown {
    intrinsic: u64,
    calldata: u64,
    sstore: u64,
    sload: u64,
    logs: u64,
    keccak: u64,
    ecrecover: u64,
    calls: u64,
    account: u64,
    other: u64,
    refund: i64,
    /// Of the execution: what the transaction's own contract spent in its frame (outside the
    /// calls it made), and what the calls it made consumed (for the router: the token's work).
    own_frame: u64,
    called: u64,
}

impl std::fmt::Display for Breakdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "intrinsic {} + calldata {} + SSTORE {} + SLOAD {} + logs {} + keccak {} + ecrecover {} \
             + calls {} + account access {} + other EVM {} - refund {} (execution: {} in the \
             called contracts, {} in the sent-to contract's own frame)",
            self.intrinsic,
            self.calldata,
            self.sstore,
            self.sload,
            self.logs,
            self.keccak,
            self.ecrecover,
            self.calls,
            self.account,
            self.other,
            self.refund,
            self.called,
            self.own_frame
        )
    }
}

async fn rpc(url: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let r: Value = reqwest::Client::new()
        .post(url)
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

async fn breakdown(url: &str, receipt: &Receipt) -> Breakdown {
    let tx = rpc(url, "eth_getTransactionByHash", json!([receipt.tx_hash])).await;
    let input: Bytes = serde_json::from_value(tx["input"].clone()).unwrap();
    // The same call on the state it ran on (anvil keeps no opcode trace of mined transactions
    // unless started with `--steps-tracing`; it re-executes a call on request).
    let call = json!({ "from": tx["from"], "to": tx["to"], "data": input, "gas": tx["gas"] });
    let parent = format!("{:#x}", receipt.block_number - 1);
    let trace = rpc(
        url,
        "debug_traceCall",
        json!([call, parent, {
            "disableStack": true, "disableMemory": true, "disableStorage": true
        }]),
    )
    .await;
    assert_eq!(
        trace["gas"].as_u64(),
        Some(receipt.gas_used),
        "the traced call used other gas than {}",
        receipt.tx_hash
    );
    let steps = trace["structLogs"].as_array().cloned().unwrap_or_default();
    let field = |s: &Value, k: &str| s[k].as_u64().unwrap_or(0);
    let mut b = Breakdown {
        intrinsic: 21_000,
        calldata: input.iter().map(|&x| if x == 0 { 4 } else { 16 }).sum(),
        ..Breakdown::default()
    };
    let mut executed = 0;
    for (i, s) in steps.iter().enumerate() {
        let op = s["op"].as_str().unwrap_or("");
        let (depth, gas, cost) = (field(s, "depth"), field(s, "gas"), field(s, "gasCost"));
        if depth == 1 {
            executed = field(&steps[0], "gas") - (gas - cost.min(gas));
        }
        match op {
            "SSTORE" => b.sstore += cost,
            "SLOAD" => b.sload += cost,
            o if o.starts_with("LOG") => b.logs += cost,
            "KECCAK256" => b.keccak += cost,
            "EXTCODESIZE" | "EXTCODEHASH" | "EXTCODECOPY" | "BALANCE" => b.account += cost,
            "CALL" | "STATICCALL" | "DELEGATECALL" | "CALLCODE" => {
                // What the call consumed at this depth, less what ran inside the callee.
                let back = steps[i + 1..]
                    .iter()
                    .position(|n| field(n, "depth") == depth)
                    .map(|j| i + 1 + j);
                let Some(back) = back else { continue };
                let consumed = gas - field(&steps[back], "gas");
                if depth == 1 {
                    b.called += consumed;
                }
                if back == i + 1 {
                    // No steps inside: a precompile (here, ecrecover at 0x01).
                    b.ecrecover += consumed;
                } else {
                    let inner = &steps[i + 1..back];
                    let first = field(&inner[0], "gas");
                    let last = inner.last().unwrap();
                    let used = first
                        - (field(last, "gas") - field(last, "gasCost").min(field(last, "gas")));
                    b.calls += consumed.saturating_sub(used);
                }
            }
            _ => {}
        }
    }
    // The rest of what the top frame consumed (calls' forwarded gas is in the callees' steps).
    let named = b.sstore + b.sload + b.logs + b.keccak + b.ecrecover + b.calls + b.account;
    b.other = executed.saturating_sub(named);
    b.own_frame = executed.saturating_sub(b.called);
    b.refund = (b.intrinsic + b.calldata + executed) as i64 - receipt.gas_used as i64;
    b
}
