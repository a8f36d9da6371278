//! x402 V2 and smart-contract wallets on Circle's USDC (FiatToken v2.2 behind its proxy at its
//! Base Sepolia address), on anvil run as Base Sepolia with 2 s blocks and 2 confirmations:
//! V2 payments settled alone and batched through the router's `settleTransfers` (one bad payment
//! in a batch answered for itself), and an EIP-1271 wallet (`contracts/test/OwnerWallet.sol`)
//! paying through x402 V1, V2 and `/authorize`. Each checks the balances on chain, the recorded
//! settlement and that nothing is reported paid that did not move.

use crate::usdc::{post, usdc_net};
use std::sync::Arc;

use alloy::{
    primitives::{Address, B256, Bytes, U256},
    sol,
    sol_types::{SolCall, SolConstructor, SolEvent},
};
use serde_json::{Value, json};
use tollgate_chain::{
    Confirmation, TxRequest, WaitOptions,
    accounts::DevAccount,
    authorization::{
        CancelAuthorization, ReceiveWithAuthorization, TransferWithAuthorization, router_nonce,
        sign,
    },
    contracts::{PaymentRouter, Token},
};
use tollgate_facilitator::{settlement_key, store::Settlement};
use tollgate_protocol::{
    Amount, Eip3009Authorization, PaymentProof, SettlementStatus, SignedPayment,
    x402::{
        ExactEvmAuthorization, ExactEvmPayload, PaymentPayload, PaymentRequirements,
        v2::{PaymentPayloadV2, PaymentRequirementsV2, ResourceInfo},
    },
};
use tollgate_testkit::{
    harness::{FEE, PAYEE, RELAYER, TestNet},
    usdc::{BASE_SEPOLIA_CHAIN_ID, FiatToken, USDC_BASE_SEPOLIA},
};

sol!(
    /// The test wallet: EIP-1271 `isValidSignature` answers yes for its owner's ECDSA signature.
    #[sol(all_derives)]
    OwnerWallet,
    "../../contracts/artifacts/test/OwnerWallet.json"
);

const NETWORK: &str = "base-sepolia";
const CAIP2: &str = "eip155:84532";

/// The requirements an x402 resource server on Base Sepolia builds for `amount` USDC units to
/// `pay_to` (V1).
fn requirements(pay_to: Address, amount: u64) -> PaymentRequirements {
    serde_json::from_value(json!({
        "scheme": "exact",
        "network": NETWORK,
        "maxAmountRequired": amount.to_string(),
        "resource": "http://127.0.0.1/v1/quote",
        "description": "a quote",
        "mimeType": "application/json",
        "payTo": pay_to,
        "maxTimeoutSeconds": 60,
        "asset": USDC_BASE_SEPOLIA,
        "extra": { "name": "USDC", "version": "2" }
    }))
    .unwrap()
}

/// An x402 `exact` payment of `amount` from `from` to `pay_to` as x402 clients sign it
/// (`TransferWithAuthorization` under USDC's domain, valid from ten minutes ago for a minute),
/// signed by `signer`: `from` itself, or a wallet's owner.
async fn exact(
    net: &TestNet,
    signer: &DevAccount,
    from: Address,
    pay_to: Address,
    amount: u64,
    nonce: B256,
) -> PaymentPayload {
    let now = net.now().await;
    let (valid_after, valid_before) = (now - 600, now + 60);
    let typed = TransferWithAuthorization {
        from,
        to: pay_to,
        value: U256::from(amount),
        validAfter: U256::from(valid_after),
        validBefore: U256::from(valid_before),
        nonce,
    };
    let signature = sign(&signer.signer(), &typed, &net.fixture.token_domain()).unwrap();
    PaymentPayload {
        x402_version: 1,
        scheme: "exact".into(),
        network: NETWORK.parse().unwrap(),
        payload: ExactEvmPayload {
            signature,
            authorization: ExactEvmAuthorization {
                from,
                to: pay_to,
                value: Amount::from_units(amount),
                valid_after: Amount::from_units(valid_after),
                valid_before: Amount::from_units(valid_before),
                nonce,
            },
        },
    }
}

/// An x402 V1 `/verify` or `/settle` body.
fn v1_body(payload: &PaymentPayload, pay_to: Address, amount: u64) -> Value {
    json!({
        "x402Version": 1,
        "paymentPayload": payload,
        "paymentRequirements": requirements(pay_to, amount),
    })
}

/// The same payment as an x402 V2 body, as `@x402/express` posts it.
fn v2_body(payload: &PaymentPayload, pay_to: Address, amount: u64) -> Value {
    let v1 = requirements(pay_to, amount);
    let accepted = PaymentRequirementsV2::from_v1(&v1, &CAIP2.parse().unwrap());
    let v2 = PaymentPayloadV2 {
        x402_version: 2,
        resource: Some(ResourceInfo {
            url: v1.resource.clone(),
            description: Some(v1.description.clone()),
            mime_type: Some(v1.mime_type.clone()),
        }),
        accepted: accepted.clone(),
        payload: payload.payload.clone(),
        extensions: None,
    };
    json!({ "x402Version": 2, "paymentPayload": v2, "paymentRequirements": accepted })
}

/// The settlement recorded for `payer`'s authorization `nonce`, if any.
async fn recorded(net: &TestNet, payer: Address, nonce: B256) -> Option<Settlement> {
    let key = settlement_key(BASE_SEPOLIA_CHAIN_ID, USDC_BASE_SEPOLIA, payer, nonce);
    net.facilitator.store().settlement(key).await.unwrap()
}

/// Asserts that `answer` is a success of `amount` from `payer` to `pay_to`: its transaction
/// mined, carrying exactly that transfer, and recorded confirmed with it. The transaction.
async fn settled(
    net: &TestNet,
    answer: &Value,
    payer: Address,
    pay_to: Address,
    amount: u64,
    nonce: B256,
) -> B256 {
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["payer"], payer.to_checksum(None), "{answer}");
    let tx: B256 = answer["transaction"].as_str().unwrap().parse().unwrap();
    let receipt = net.fixture.chain.receipt(tx).await.unwrap().unwrap();
    assert!(receipt.success, "{tx}");
    let carried = receipt.logs.iter().any(|l| {
        l.address == USDC_BASE_SEPOLIA
            && Token::Transfer::decode_log(l)
                .is_ok_and(|t| t.from == payer && t.to == pay_to && t.value == U256::from(amount))
    });
    assert!(
        carried,
        "the receipt of {tx} carries this payment's transfer"
    );
    let row = recorded(net, payer, nonce).await.expect("a settlement row");
    assert_eq!(row.status, SettlementStatus::Confirmed, "{row:?}");
    assert_eq!(row.tx_hash, Some(tx), "{row:?}");
    assert_eq!(
        (row.new.payer, row.new.pay_to, row.new.amount.get()),
        (payer, pay_to, U256::from(amount))
    );
    tx
}

/// Asserts that `answer` (a `/settle`'s) is a refusal for `reason` naming no transaction.
fn refused(answer: &Value, reason: &str) {
    assert_eq!(answer["success"], false, "{answer}");
    assert_eq!(answer["errorReason"], reason, "{answer}");
    assert!(
        answer.get("transaction").is_none_or(|t| t == ""),
        "{answer}"
    );
}

/// The relayer's ether: unchanged while nothing is sent.
async fn relayer_gas(net: &TestNet) -> U256 {
    net.fixture
        .chain
        .balance(net.address(RELAYER))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn x402_v2_verify_and_settle_on_fiat_token_once() {
    let (net, _usdc) = usdc_net().await;
    let (payer, pay_to) = (net.address(1), net.address(PAYEE));
    let before = (
        net.token_balance(payer).await,
        net.token_balance(pay_to).await,
    );
    let amount = 10_000;
    let nonce = B256::repeat_byte(0x61);
    let payload = exact(&net, net.account(1), payer, pay_to, amount, nonce).await;
    let body = v2_body(&payload, pay_to, amount);

    let (s, v) = post(&net, "/verify", &body).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({ "isValid": true, "payer": payer.to_checksum(None) })
    );
    assert!(
        recorded(&net, payer, nonce).await.is_none(),
        "verify records nothing"
    );

    let (s, r) = post(&net, "/settle", &body).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["network"], CAIP2, "{r}");
    let tx = settled(&net, &r, payer, pay_to, amount, nonce).await;
    let receipt = net.fixture.chain.receipt(tx).await.unwrap().unwrap();
    assert_eq!(
        receipt.to,
        Some(USDC_BASE_SEPOLIA),
        "alone: FiatToken's own call"
    );
    // Two confirmations: the block on top of the settlement's is mined.
    assert!(net.fixture.chain.block_number().await.unwrap() > receipt.block_number);
    assert_eq!(
        (
            net.token_balance(payer).await,
            net.token_balance(pay_to).await
        ),
        (before.0 - U256::from(amount), before.1 + U256::from(amount))
    );

    // Once: again in V2 or as its V1 twin, it names the first transaction and moves nothing.
    let (_, again) = post(&net, "/settle", &body).await;
    assert_eq!(again["errorReason"], "duplicate_settlement", "{again}");
    assert_eq!(again["transaction"], r["transaction"]);
    let (_, twin) = post(&net, "/settle", &v1_body(&payload, pay_to, amount)).await;
    assert_eq!(twin["success"], false, "{twin}");
    let (_, v) = post(&net, "/verify", &body).await;
    assert_eq!(v["invalidReason"], "invalid_transaction_state", "{v}");
    assert_eq!(
        net.token_balance(pay_to).await,
        before.1 + U256::from(amount)
    );
}

/// The pending transactions in anvil's pool.
async fn pending(net: &TestNet) -> Vec<Value> {
    let pool = net.rpc("txpool_content", json!([])).await;
    pool["pending"]
        .as_object()
        .into_iter()
        .flat_map(|by_sender| by_sender.values())
        .filter_map(Value::as_object)
        .flat_map(|by_nonce| by_nonce.values().cloned())
        .collect()
}

/// The transfers of the pending router batches (`settleTransfers`).
async fn pending_batches(net: &TestNet, router: Address) -> Vec<Vec<PaymentRouter::Transfer>> {
    pending(net)
        .await
        .iter()
        .filter(|tx| tx["to"].as_str().and_then(|a| a.parse::<Address>().ok()) == Some(router))
        .filter_map(|tx| {
            let input: Bytes = tx["input"].as_str()?.parse().ok()?;
            PaymentRouter::settleTransfersCall::abi_decode(&input)
                .ok()
                .map(|c| c.transfers)
        })
        .collect()
}

async fn until<F: AsyncFn() -> bool>(what: &str, f: F) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !f().await {
        assert!(
            std::time::Instant::now() < deadline,
            "waited too long for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Sends `data` to `to` from `from` (a dev account, or any account anvil impersonates) with a
/// tip far above the relayer's, so that it is mined ahead of the facilitator's pending
/// transactions in the next block. Its hash.
async fn ahead(net: &TestNet, from: Address, to: Address, data: Vec<u8>) -> B256 {
    net.rpc("anvil_impersonateAccount", json!([from])).await;
    let hash = net
        .rpc(
            "eth_sendTransaction",
            json!([{
                "from": from,
                "to": to,
                "data": Bytes::from(data),
                "gas": "0x30000",
                "maxFeePerGas": "0x174876e800",        // 100 gwei
                "maxPriorityFeePerGas": "0xba43b7400", // 50 gwei
            }]),
        )
        .await;
    serde_json::from_value(hash).unwrap()
}

/// Concurrent x402 V2 settlements on FiatToken batched through the router's `settleTransfers`:
/// each settled exactly once. Two payments of the batch go bad while it waits to be mined: one
/// authorization is cancelled by its signer (FiatToken's `cancelAuthorization`, after `/verify`)
/// and one payer is blacklisted, both mined in the batch's block ahead of it. Each is answered
/// failed for itself (`invalid_transaction_state`, `invalid_payment`), recorded failed, and moves
/// nothing, while the others go through. A payer blacklisted after `/verify`, before its
/// `/settle`, is refused before anything is sent (`invalid_payment`) and is not recorded.
#[tokio::test(flavor = "multi_thread")]
async fn x402_v2_batched_on_fiat_token_one_bad_payment_fails_alone() {
    let (net, usdc) = usdc_net().await;
    let net = Arc::new(net);
    let chain = &*net.fixture.chain;
    let router = usdc.deployment.router;
    let pay_to = net.address(PAYEE);
    let amount = 10_000u64;
    // 6 goes first, alone; 1, 2, 3 and 4 wait for it and go together; in their block, 3 is
    // blacklisted and 4's authorization cancelled ahead of them; 5 is blacklisted before.
    let (alone, together) = (6usize, [1usize, 2, 3, 4]);
    let (blacklisted_in_batch, cancelled, blacklisted) = (3usize, 4usize, 5usize);
    let nonce = |who: usize| B256::repeat_byte(0x70 + who as u8);
    let mut bodies = std::collections::BTreeMap::new();
    let mut balances = std::collections::BTreeMap::new();
    for who in 1..=6 {
        let from = net.address(who);
        let p = exact(&net, net.account(who), from, pay_to, amount, nonce(who)).await;
        let body = v2_body(&p, pay_to, amount);
        let (_, v) = post(&net, "/verify", &body).await;
        assert_eq!(v["isValid"], true, "{who}: {v}");
        bodies.insert(who, body);
        balances.insert(who, net.token_balance(from).await);
    }
    let payee_before = net.token_balance(pay_to).await;
    usdc.blacklist(chain, net.address(blacklisted))
        .await
        .unwrap();

    // Blocks wait (mined below, one at a time): the first payment goes alone and stays
    // unmined; the others come while it is on its way and go together.
    net.rpc("evm_setIntervalMining", json!([0])).await;
    let settle = |who: usize| {
        let (net, body) = (Arc::clone(&net), bodies[&who].clone());
        tokio::spawn(async move { post(&net, "/settle", &body).await.1 })
    };
    let first = settle(alone);
    let relayer = net.address(RELAYER);
    until("the first payment's transaction", async || {
        pending(&net).await.iter().any(|tx| {
            tx["to"].as_str().and_then(|a| a.parse::<Address>().ok()) == Some(USDC_BASE_SEPOLIA)
                && tx["from"].as_str().and_then(|a| a.parse::<Address>().ok()) == Some(relayer)
        })
    })
    .await;
    let mut tasks: Vec<_> = together.iter().map(|&who| (who, settle(who))).collect();
    tasks.push((blacklisted, settle(blacklisted)));
    // Every payment of the four on its way in a batch.
    until("the batch", async || {
        let batched: Vec<Address> = pending_batches(&net, router)
            .await
            .into_iter()
            .flatten()
            .map(|t| t.from)
            .collect();
        together
            .iter()
            .all(|&who| batched.contains(&net.address(who)))
    })
    .await;

    // The signer cancels 4's authorization, and the blacklister blacklists 3, each with a higher
    // tip: mined ahead of the batch.
    let signer = net.account(cancelled);
    let cancel = Token::cancelAuthorization_1Call {
        authorizer: signer.address,
        nonce: nonce(cancelled),
        signature: sign(
            &signer.signer(),
            &CancelAuthorization {
                authorizer: signer.address,
                nonce: nonce(cancelled),
            },
            &net.fixture.token_domain(),
        )
        .unwrap(),
    };
    let cancel_tx = ahead(&net, signer.address, USDC_BASE_SEPOLIA, cancel.abi_encode()).await;
    let blacklist = FiatToken::blacklistCall {
        account: net.address(blacklisted_in_batch),
    };
    let blacklist_tx = ahead(
        &net,
        usdc.roles.blacklister.address,
        USDC_BASE_SEPOLIA,
        blacklist.abi_encode(),
    )
    .await;
    net.rpc("evm_mine", json!([])).await;
    net.mine_every(2).await;

    let cancelled_in = chain.receipt(cancel_tx).await.unwrap().unwrap();
    assert!(cancelled_in.success);
    let blacklisted_in = chain.receipt(blacklist_tx).await.unwrap().unwrap();
    assert!(blacklisted_in.success);
    assert!(
        usdc.is_blacklisted(chain, net.address(blacklisted_in_batch))
            .await
            .unwrap()
    );
    let first = first.await.unwrap();
    settled(
        &net,
        &first,
        net.address(alone),
        pay_to,
        amount,
        nonce(alone),
    )
    .await;
    let mut answers = std::collections::BTreeMap::new();
    for (who, task) in tasks {
        answers.insert(who, task.await.unwrap());
    }
    let mut batch_txs = std::collections::HashSet::new();
    for who in [1, 2] {
        let tx = settled(
            &net,
            &answers[&who],
            net.address(who),
            pay_to,
            amount,
            nonce(who),
        )
        .await;
        batch_txs.insert(tx);
    }
    // 1 and 2 in the router's batches (one, unless the machine spread their requests apart),
    // mined in the block of the cancellation and the blacklisting, after them: the batches
    // carried 3 and 4 too, and the token refused them.
    let mut receipts = Vec::new();
    for tx in batch_txs {
        let receipt = chain.receipt(tx).await.unwrap().unwrap();
        assert_eq!(receipt.to, Some(router), "{tx}");
        assert_eq!(receipt.block_number, cancelled_in.block_number, "{tx}");
        assert_eq!(receipt.block_number, blacklisted_in.block_number, "{tx}");
        assert_ne!(first["transaction"], json!(tx));
        receipts.push(receipt);
    }
    for (who, reason) in [
        (cancelled, "invalid_transaction_state"),
        (blacklisted_in_batch, "invalid_payment"),
    ] {
        let moved = receipts
            .iter()
            .flat_map(|r| &r.logs)
            .any(|l| Token::Transfer::decode_log(l).is_ok_and(|t| t.from == net.address(who)));
        assert!(!moved, "{who}'s payment moved nothing in the batch");
        // Answered for itself, recorded failed, never as settled.
        refused(&answers[&who], reason);
        let row = recorded(&net, net.address(who), nonce(who))
            .await
            .expect("its row");
        assert_eq!(row.status, SettlementStatus::Failed, "{row:?}");
        assert!(
            row.error.as_deref().is_some_and(|e| e.starts_with(reason)),
            "{row:?}"
        );
    }
    // The blacklisted one: refused before anything is sent, not recorded.
    refused(&answers[&blacklisted], "invalid_payment");
    assert!(
        recorded(&net, net.address(blacklisted), nonce(blacklisted))
            .await
            .is_none()
    );

    // The balances: exactly the three that settled.
    assert_eq!(
        net.token_balance(pay_to).await,
        payee_before + U256::from(3 * amount)
    );
    for who in 1..=6 {
        let paid = if [cancelled, blacklisted, blacklisted_in_batch].contains(&who) {
            U256::ZERO
        } else {
            U256::from(amount)
        };
        assert_eq!(
            net.token_balance(net.address(who)).await,
            balances[&who] - paid,
            "payer {who}"
        );
    }
    // Each settled exactly once; the refusals stay refusals.
    for who in [alone, 1, 2] {
        let (_, again) = post(&net, "/settle", &bodies[&who]).await;
        assert_eq!(
            again["errorReason"], "duplicate_settlement",
            "{who}: {again}"
        );
    }
    let (_, again) = post(&net, "/settle", &bodies[&cancelled]).await;
    refused(&again, "invalid_transaction_state");
    for who in [blacklisted, blacklisted_in_batch] {
        let (_, again) = post(&net, "/settle", &bodies[&who]).await;
        refused(&again, "invalid_payment");
    }
    assert_eq!(
        net.token_balance(pay_to).await,
        payee_before + U256::from(3 * amount)
    );
}

/// An `OwnerWallet` owned by dev account `owner`, deployed by dev account 0 and funded with
/// `funds` USDC by dev account `funder` (a plain FiatToken `transfer`).
async fn wallet(net: &TestNet, owner: usize, funder: usize, funds: u64) -> Address {
    let chain = &*net.fixture.chain;
    let init = [
        OwnerWallet::BYTECODE.to_vec(),
        OwnerWallet::constructorCall {
            owner_: net.address(owner),
        }
        .abi_encode(),
    ]
    .concat();
    let create = TxRequest {
        from: net.address(0),
        to: None,
        data: init.into(),
        gas: Some(1_000_000),
        ..TxRequest::default()
    };
    let wallet = match chain.send_and_wait(create, WaitOptions::default()).await {
        Ok(Confirmation::Confirmed(r)) if r.success => r.contract_address.unwrap(),
        other => panic!("deploying the wallet: {other:?}"),
    };
    assert!(!chain.code(wallet).await.unwrap().is_empty());
    let fund = Token::transferCall {
        to: wallet,
        value: U256::from(funds),
    };
    let sent = chain
        .send_and_wait(
            TxRequest::call(net.address(funder), USDC_BASE_SEPOLIA, fund.abi_encode()),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    assert!(matches!(sent, Confirmation::Confirmed(r) if r.success));
    assert_eq!(net.token_balance(wallet).await, U256::from(funds));
    wallet
}

/// An EIP-1271 wallet as the payer of x402 V1 and V2 payments on FiatToken v2.2: its owner signs
/// the `TransferWithAuthorization` whose `from` is the wallet, and FiatToken (its
/// `SignatureChecker`) asks the wallet. Each is verified and settled exactly once, moving the
/// wallet's USDC. A signature the wallet does not accept (not its owner's) is refused
/// `invalid_exact_evm_payload_signature` before any gas is spent, nothing moved, nothing
/// recorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_smart_wallet_pays_x402_v1_and_v2_on_fiat_token() {
    const OWNER: usize = 2;
    const STRANGER: usize = 3;
    let (net, _usdc) = usdc_net().await;
    let from = wallet(&net, OWNER, 4, 1_000_000).await;
    let pay_to = net.address(PAYEE);
    let owner = net.account(OWNER);
    let owner_before = net.token_balance(owner.address).await;

    // A signature the wallet refuses: a stranger's, and the owner's over another amount.
    let payee_before = net.token_balance(pay_to).await;
    let gas_before = relayer_gas(&net).await;
    let stranger_nonce = B256::repeat_byte(0x90);
    let stranger = exact(
        &net,
        net.account(STRANGER),
        from,
        pay_to,
        10_000,
        stranger_nonce,
    )
    .await;
    let mut altered = exact(&net, owner, from, pay_to, 10_000, B256::repeat_byte(0x91)).await;
    altered.payload.authorization.value = Amount::from_units(20_000);
    for (what, payload, amount) in [
        ("stranger", &stranger, 10_000),
        ("altered", &altered, 20_000),
    ] {
        for body in [
            v1_body(payload, pay_to, amount),
            v2_body(payload, pay_to, amount),
        ] {
            let (s, v) = post(&net, "/verify", &body).await;
            assert_eq!(s, 200, "{what}: {v}");
            assert_eq!(v["isValid"], false, "{what}: {v}");
            assert_eq!(
                v["invalidReason"], "invalid_exact_evm_payload_signature",
                "{what}: {v}"
            );
            let (s, r) = post(&net, "/settle", &body).await;
            assert_eq!(s, 200, "{what}: {r}");
            refused(&r, "invalid_exact_evm_payload_signature");
        }
        let nonce = payload.payload.authorization.nonce;
        assert!(recorded(&net, from, nonce).await.is_none(), "{what}");
    }
    assert_eq!(
        relayer_gas(&net).await,
        gas_before,
        "no gas spent on a refusal"
    );
    assert_eq!(net.token_balance(from).await, U256::from(1_000_000));
    assert_eq!(net.token_balance(pay_to).await, payee_before);

    // The owner's signature: V1, then V2, each once.
    let mut paid = 0;
    for (version, amount, n) in [(1, 10_000u64, 0x92u8), (2, 20_000, 0x93)] {
        let nonce = B256::repeat_byte(n);
        let payload = exact(&net, owner, from, pay_to, amount, nonce).await;
        let body = if version == 1 {
            v1_body(&payload, pay_to, amount)
        } else {
            v2_body(&payload, pay_to, amount)
        };
        let (s, v) = post(&net, "/verify", &body).await;
        assert_eq!(s, 200, "V{version}: {v}");
        assert_eq!(
            v,
            json!({ "isValid": true, "payer": from.to_checksum(None) }),
            "V{version}"
        );
        let (s, r) = post(&net, "/settle", &body).await;
        assert_eq!(s, 200, "V{version}: {r}");
        settled(&net, &r, from, pay_to, amount, nonce).await;
        paid += amount;
        assert_eq!(
            net.token_balance(from).await,
            U256::from(1_000_000 - paid),
            "V{version}"
        );
        assert_eq!(
            net.token_balance(pay_to).await,
            payee_before + U256::from(paid)
        );
        let (_, again) = post(&net, "/settle", &body).await;
        assert_eq!(again["errorReason"], "duplicate_settlement", "{again}");
        assert_eq!(again["transaction"], r["transaction"]);
    }

    // Beside payers' own signatures, settled at once: theirs may go together in a router
    // batch; the wallet's goes alone (FiatToken's own call, its gas estimated), once.
    let mut tasks = Vec::new();
    for (who, n) in [(0usize, 0x94u8), (5, 0x95), (6, 0x96)] {
        let (signer, payer) = if who == 0 {
            (owner, from)
        } else {
            (net.account(who), net.address(who))
        };
        let nonce = B256::repeat_byte(n);
        let payload = exact(&net, signer, payer, pay_to, 5_000, nonce).await;
        let body = v2_body(&payload, pay_to, 5_000);
        let (url, http) = (net.url.clone(), net.http.clone());
        let task = tokio::spawn(async move {
            let r = http.post(format!("{url}/settle")).json(&body).send();
            r.await.unwrap().json::<Value>().await.unwrap()
        });
        tasks.push((payer, nonce, task));
    }
    for (payer, nonce, task) in tasks {
        let r = task.await.unwrap();
        let tx = settled(&net, &r, payer, pay_to, 5_000, nonce).await;
        if payer == from {
            let receipt = net.fixture.chain.receipt(tx).await.unwrap().unwrap();
            assert_eq!(
                receipt.to,
                Some(USDC_BASE_SEPOLIA),
                "the wallet's goes alone"
            );
        }
        paid += 5_000;
    }
    assert_eq!(
        net.token_balance(from).await,
        U256::from(1_000_000 - 20_000 - 10_000 - 5_000)
    );
    assert_eq!(
        net.token_balance(owner.address).await,
        owner_before,
        "the wallet paid, not its owner"
    );
    assert_eq!(
        net.token_balance(pay_to).await,
        payee_before + U256::from(paid)
    );
}

/// A router payment (`/authorize`) whose payer is an EIP-1271 wallet: its owner signs the
/// `ReceiveWithAuthorization` to the router with the wallet as `from`, as an agent signs its
/// own. It settles exactly once, moving the price from the wallet and splitting it; a signature
/// the wallet refuses is refused with a typed error before any gas is spent, nothing moved,
/// nothing recorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_smart_wallet_pays_through_authorize_on_fiat_token() {
    const OWNER: usize = 2;
    const STRANGER: usize = 3;
    let (net, usdc) = usdc_net().await;
    let from = wallet(&net, OWNER, 4, 1_000_000).await;
    let router = usdc.deployment.router;
    let (pay_to, fee_recipient) = (net.address(PAYEE), net.address(0));
    let balances = async || {
        (
            net.token_balance(from).await,
            net.token_balance(pay_to).await,
            net.token_balance(fee_recipient).await,
        )
    };
    let price = 500_000u64;
    let payment = async |signer: usize, memo: B256| {
        let now = net.now().await;
        let auth = ReceiveWithAuthorization {
            from,
            to: router,
            value: U256::from(price),
            validAfter: U256::from(now - 60),
            validBefore: U256::from(now + 300),
            nonce: router_nonce(pay_to, memo, U256::from(FEE)),
        };
        let signature = sign(
            &net.account(signer).signer(),
            &auth,
            &net.fixture.token_domain(),
        )
        .unwrap();
        SignedPayment {
            network: NETWORK.parse().unwrap(),
            token: USDC_BASE_SEPOLIA,
            pay_to,
            amount: Amount::from_units(price),
            memo,
            authorization: Eip3009Authorization {
                from,
                to: router,
                value: Amount::from_units(price),
                valid_after: Amount::from_units(now - 60),
                valid_before: Amount::from_units(now + 300),
                nonce: auth.nonce,
                signature,
            },
        }
    };
    let (w0, t0, f0) = balances().await;

    // Refused by the wallet: a stranger's signature.
    let gas_before = relayer_gas(&net).await;
    let bad = payment(STRANGER, B256::repeat_byte(0xa1)).await;
    let (s, a) = post(&net, "/authorize", &json!({ "signedPayment": bad })).await;
    assert_eq!(
        (s, &a["error"]["code"]),
        (422, &json!("InvalidSignature")),
        "{a}"
    );
    assert!(a.get("proof").is_none(), "{a}");
    assert!(
        recorded(&net, from, bad.authorization.nonce)
            .await
            .is_none(),
        "{a}"
    );
    assert_eq!(
        relayer_gas(&net).await,
        gas_before,
        "no gas spent on a refusal"
    );
    assert_eq!(balances().await, (w0, t0, f0));

    // The owner's signature.
    let good = payment(OWNER, B256::repeat_byte(0xa2)).await;
    let body = json!({ "signedPayment": good });
    let (s, reply) = post(&net, "/authorize", &body).await;
    assert_eq!(s, 200, "{reply}");
    assert_eq!(reply["status"], "confirmed", "{reply}");
    let proof = PaymentProof::decode(reply["proof"].as_str().unwrap()).unwrap();
    assert_eq!(
        (
            proof.payer,
            proof.pay_to,
            proof.amount.get(),
            proof.fee.get()
        ),
        (from, pay_to, U256::from(price), U256::from(FEE))
    );
    let receipt = net
        .fixture
        .chain
        .receipt(proof.tx_hash)
        .await
        .unwrap()
        .unwrap();
    assert!(receipt.success);
    assert_eq!(receipt.to, Some(router));
    let row = recorded(&net, from, good.authorization.nonce)
        .await
        .expect("its row");
    assert_eq!(row.status, SettlementStatus::Confirmed, "{row:?}");
    assert_eq!(row.tx_hash, Some(proof.tx_hash));
    assert_eq!(
        balances().await,
        (
            w0 - U256::from(price),
            t0 + U256::from(price - FEE),
            f0 + U256::from(FEE)
        )
    );
    // Once: the same payment again is the same proof, nothing moves.
    let (s, again) = post(&net, "/authorize", &body).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["proof"], reply["proof"]);
    assert_eq!(balances().await.0, w0 - U256::from(price));
}
