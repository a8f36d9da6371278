//! The x402 V1 facilitator API with the exact V1 shapes.

use alloy::{
    primitives::{B256, U256},
    sol_types::SolEvent,
};
use serde_json::json;

use crate::support::{Backend, Harness, NETWORK};

async fn verify_then_settle_once(backend: Backend) {
    let h = Harness::new(backend).await;
    let pay_to = h.account(7).address;
    let payer = h.account(1).address;
    let before = (h.token_balance(payer).await, h.token_balance(pay_to).await);
    let req = h.requirements(pay_to, 10_000);
    let payload = h
        .x402_payload(1, pay_to, 10_000, B256::repeat_byte(0x21))
        .await;
    let body = json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": req });

    let (s, v) = h.post("/verify", &body).await;
    assert_eq!(s, 200);
    assert_eq!(
        v,
        json!({ "isValid": true, "payer": payer.to_checksum(None) })
    );

    let (s, r) = h.post("/settle", &body).await;
    assert_eq!(s, 200);
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["network"], NETWORK);
    assert_eq!(r["payer"], payer.to_checksum(None));
    let tx: B256 = r["transaction"].as_str().unwrap().parse().unwrap();
    assert!(r.get("errorReason").is_none());
    let receipt = h.fixture.chain.receipt(tx).await.unwrap().unwrap();
    assert!(receipt.success);
    // The x402 path takes no fee: the payee receives the whole amount.
    assert_eq!(h.token_balance(payer).await, before.0 - U256::from(10_000));
    assert_eq!(h.token_balance(pay_to).await, before.1 + U256::from(10_000));

    // Answered once, as x402's reference facilitator does: settling again is a failure naming
    // the original transaction, and moves nothing.
    let (_, again) = h.post("/settle", &body).await;
    assert_eq!(again["success"], false, "{again}");
    assert_eq!(again["errorReason"], "duplicate_settlement");
    assert_eq!(again["transaction"], r["transaction"]);
    assert_eq!(h.token_balance(pay_to).await, before.1 + U256::from(10_000));
    // Verifying a used authorization fails.
    let (_, v) = h.post("/verify", &body).await;
    assert_eq!(v["isValid"], false);
    assert_eq!(v["invalidReason"], "invalid_transaction_state");
}

async fn invalid_payments_get_v1_reasons(backend: Backend) {
    let h = Harness::new(backend).await;
    let pay_to = h.account(7).address;
    let req = h.requirements(pay_to, 10_000);
    let payload = h
        .x402_payload(2, pay_to, 10_000, B256::repeat_byte(0x22))
        .await;
    let before = h.token_balance(pay_to).await;

    let mut cases = Vec::new();
    let other_payee = h.requirements(h.account(6).address, 10_000);
    cases.push((
        "recipient mismatch",
        json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": other_payee }),
        "invalid_exact_evm_payload_recipient_mismatch",
    ));
    let pricier = h.requirements(pay_to, 20_000);
    cases.push((
        "value below the price",
        json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": pricier }),
        "invalid_exact_evm_payload_authorization_value",
    ));
    let mut wrong_net = serde_json::to_value(&req).unwrap();
    wrong_net["network"] = json!("base");
    let mut p_wrong_net = serde_json::to_value(&payload).unwrap();
    p_wrong_net["network"] = json!("base");
    cases.push(("unserved network", json!({ "x402Version": 1, "paymentPayload": p_wrong_net, "paymentRequirements": wrong_net }), "invalid_network"));
    let mut forged = serde_json::to_value(&payload).unwrap();
    forged["payload"]["authorization"]["from"] = json!(h.account(3).address);
    cases.push((
        "forged signer",
        json!({ "x402Version": 1, "paymentPayload": forged, "paymentRequirements": req }),
        "invalid_exact_evm_payload_signature",
    ));
    let mut scheme = serde_json::to_value(&payload).unwrap();
    scheme["scheme"] = json!("upto");
    cases.push((
        "unsupported scheme",
        json!({ "x402Version": 1, "paymentPayload": scheme, "paymentRequirements": req }),
        "unsupported_scheme",
    ));
    let huge = h
        .x402_payload(2, pay_to, 2_000_000_000_000, B256::repeat_byte(0x23))
        .await;
    let huge_req = h.requirements(pay_to, 2_000_000_000_000);
    cases.push((
        "insufficient funds",
        json!({ "x402Version": 1, "paymentPayload": huge, "paymentRequirements": huge_req }),
        "insufficient_funds",
    ));

    for (name, body, reason) in cases {
        let (s, v) = h.post("/verify", &body).await;
        assert_eq!(s, 200, "{name}");
        assert_eq!(v["isValid"], false, "{name}: {v}");
        assert_eq!(v["invalidReason"], reason, "{name}: {v}");
        let (_, r) = h.post("/settle", &body).await;
        assert_eq!(r["success"], false, "{name}: {r}");
        assert_eq!(r["errorReason"], reason, "{name}: {r}");
        assert_eq!(r["transaction"], "", "{name}: nothing is sent");
    }
    assert_eq!(h.token_balance(pay_to).await, before);

    let (s, supported) = h.get("/supported").await;
    assert_eq!(s, 200);
    assert_eq!(
        supported["kinds"][0],
        json!({ "x402Version": 1, "scheme": "exact", "network": NETWORK })
    );
}

async fn concurrent_settles_transfer_once(backend: Backend) {
    let h = std::sync::Arc::new(Harness::new(backend).await);
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    let req = h.requirements(pay_to, 10_000);
    let payload = h
        .x402_payload(3, pay_to, 10_000, B256::repeat_byte(0x24))
        .await;
    let body = json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": req });
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (h, body) = (h.clone(), body.clone());
        tasks.push(tokio::spawn(
            async move { h.post("/settle", &body).await.1 },
        ));
    }
    let mut txs = std::collections::HashSet::new();
    let mut successes = 0;
    for t in tasks {
        let r = t.await.unwrap();
        if r["success"] == true {
            successes += 1;
        } else {
            assert_eq!(r["errorReason"], "duplicate_settlement", "{r}");
        }
        txs.insert(r["transaction"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        successes, 1,
        "exactly one of 20 concurrent settles succeeds"
    );
    assert_eq!(txs.len(), 1, "every answer names the one transaction");
    assert_eq!(h.token_balance(pay_to).await, before + U256::from(10_000));
    // And every later one fails too.
    let (_, later) = h.post("/settle", &body).await;
    assert_eq!(later["success"], false);
    assert_eq!(later["errorReason"], "duplicate_settlement");
}

/// Two authorizations from one payer with one nonce: B pays the provider 1.00, A pays the
/// attacker 1 unit. Settling A must never make a settle of B answer success.
async fn settle_answers_only_for_the_settled_payload(backend: Backend) {
    let h = Harness::new(backend).await;
    let provider = h.account(7).address;
    let attacker = h.account(6).address;
    let nonce = B256::repeat_byte(0x31);
    let b = h.x402_payload(1, provider, 1_000_000, nonce).await;
    let a = h.x402_payload(1, attacker, 1, nonce).await;
    let body_b = json!({ "x402Version": 1, "paymentPayload": b, "paymentRequirements": h.requirements(provider, 1_000_000) });
    let body_a = json!({ "x402Version": 1, "paymentPayload": a, "paymentRequirements": h.requirements(attacker, 1) });
    let provider_before = h.token_balance(provider).await;

    let (_, v) = h.post("/verify", &body_b).await;
    assert_eq!(v["isValid"], true, "{v}");
    let (_, ra) = h.post("/settle", &body_a).await;
    assert_eq!(ra["success"], true, "{ra}");
    for _ in 0..2 {
        let (_, rb) = h.post("/settle", &body_b).await;
        assert_eq!(rb["success"], false, "B was never settled: {rb}");
        assert_eq!(rb["errorReason"], "invalid_transaction_state", "{rb}");
        assert_ne!(
            rb["transaction"], ra["transaction"],
            "A's transaction is not B's"
        );
    }
    // The same payment under other requirements (another resource) is not the settled one either.
    let mut other = h.requirements(attacker, 1);
    other.resource = "http://127.0.0.1/v1/other".into();
    let (_, r) = h
        .post(
            "/settle",
            &json!({ "x402Version": 1, "paymentPayload": a, "paymentRequirements": other }),
        )
        .await;
    assert_eq!(r["success"], false, "{r}");
    assert_eq!(r["errorReason"], "invalid_transaction_state");
    assert_eq!(
        h.token_balance(provider).await,
        provider_before,
        "the provider received nothing"
    );

    // B's nonce settled outside this facilitator's store (a fresh store over the same chain):
    // found on chain, but the transfer there is A's, so B is still refused.
    let (other_facilitator, _dir) = h.facilitator_with_fresh_store().await;
    let req_b: tollgate_protocol::x402::SettleRequest = serde_json::from_value(body_b).unwrap();
    let rb = other_facilitator.x402().settle(&req_b, None).await;
    assert!(!rb.success, "{rb:?}");
    assert_eq!(rb.transaction, "", "A's transaction is not named for B");
    let req_a: tollgate_protocol::x402::SettleRequest = serde_json::from_value(body_a).unwrap();
    let ra2 = other_facilitator.x402().settle(&req_a, None).await;
    assert!(
        !ra2.success,
        "settled by someone else: not this facilitator's success"
    );
    assert_eq!(ra2.error_reason.unwrap().as_str(), "duplicate_settlement");
    assert_eq!(ra2.transaction, ra["transaction"].as_str().unwrap());
}

/// The first settler, named by its `Idempotency-Key`, gets its outcome again after a lost answer;
/// anyone else gets `duplicate_settlement`.
async fn idempotency_key_retries_get_the_first_outcome(backend: Backend) {
    let h = Harness::new(backend).await;
    let pay_to = h.account(7).address;
    let payload = h
        .x402_payload(2, pay_to, 10_000, B256::repeat_byte(0x32))
        .await;
    let body = json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": h.requirements(pay_to, 10_000) });
    let settle = |key: Option<&'static str>| {
        let mut r = h.http.post(format!("{}/settle", h.url)).json(&body);
        if let Some(k) = key {
            r = r.header("Idempotency-Key", k);
        }
        async move {
            r.send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    let first = settle(Some("gate-secret-1")).await;
    assert_eq!(first["success"], true, "{first}");
    let again = settle(Some("gate-secret-1")).await;
    assert_eq!(again, first, "the same settler gets the first outcome");
    for other in [settle(Some("someone-else")).await, settle(None).await] {
        assert_eq!(other["success"], false, "{other}");
        assert_eq!(other["errorReason"], "duplicate_settlement");
        assert_eq!(other["transaction"], first["transaction"]);
    }
}

/// A payload signed under a made-up EIP-712 domain (announced in `extra`) is refused before
/// anything is stored or sent; a failed row is never confirmed by another payload with its nonce;
/// zero prices and authorizations valid for years are refused.
async fn only_real_payments_are_stored_or_confirmed(backend: Backend) {
    use tollgate_chain::authorization::{TransferWithAuthorization, sign, token_domain};
    let h = Harness::new(backend).await;
    let pay_to = h.account(7).address;
    let payer = h.account(4);
    let nonce = B256::repeat_byte(0x33);
    let now = h.now().await;
    let auth = TransferWithAuthorization {
        from: payer.address,
        to: pay_to,
        value: U256::from(250_000_000u64),
        validAfter: U256::from(now - 600),
        validBefore: U256::from(now + 60),
        nonce,
    };
    let fake = token_domain(
        "Fake Coin",
        "9",
        h.fixture.chain.chain_id(),
        h.fixture.deployment.token,
    );
    let signature = sign(&payer.signer(), &auth, &fake).unwrap();
    let mut fake_payload = h.x402_payload(4, pay_to, 250_000_000, nonce).await;
    fake_payload.payload.signature = signature;
    fake_payload.payload.authorization.valid_after =
        tollgate_protocol::Amount::from_units(now - 600);
    fake_payload.payload.authorization.valid_before =
        tollgate_protocol::Amount::from_units(now + 60);
    let mut fake_req = h.requirements(pay_to, 250_000_000);
    fake_req.extra = Some(json!({ "name": "Fake Coin", "version": "9" }));
    let body = json!({ "x402Version": 1, "paymentPayload": fake_payload, "paymentRequirements": fake_req });
    let (_, v) = h.post("/verify", &body).await;
    assert_eq!(v["isValid"], false, "{v}");
    assert_eq!(v["invalidReason"], "invalid_payment_requirements");
    let (_, r) = h.post("/settle", &body).await;
    assert_eq!(r["success"], false);
    assert_eq!(r["transaction"], "");
    // Without the forged `extra`, the signature does not hold under the real domain.
    let mut plain = body.clone();
    plain["paymentRequirements"]["extra"] = json!({ "name": "USD Coin", "version": "2" });
    let (_, r) = h.post("/settle", &plain).await;
    assert_eq!(
        r["errorReason"], "invalid_exact_evm_payload_signature",
        "{r}"
    );
    let key = tollgate_facilitator::settlement_key(
        h.fixture.chain.chain_id(),
        h.fixture.deployment.token,
        payer.address,
        nonce,
    );
    let store = h.facilitator.store();
    assert!(
        store.settlement(key).await.unwrap().is_none(),
        "nothing stored"
    );

    // A failed row for a 250.00 payment (as an older version stored it) and a later, valid
    // 1-unit payment with the same nonce: refused, the row stays failed, nothing moves.
    let row = tollgate_facilitator::store::NewSettlement {
        key,
        kind: tollgate_facilitator::store::SettlementKind::X402,
        request_hash: alloy::primitives::keccak256(b"the forged payload"),
        network: NETWORK.into(),
        chain_id: h.fixture.chain.chain_id(),
        token: h.fixture.deployment.token,
        payer: payer.address,
        pay_to,
        amount: tollgate_protocol::Amount::from_units(250_000_000),
        fee: tollgate_protocol::Amount::ZERO,
        memo: B256::ZERO,
        nonce,
        valid_before: now + 60,
        request: "{}".into(),
        resource: Some("http://127.0.0.1/v1/quote".into()),
        claim_hash: None,
        created_at: now,
    };
    store.insert_settlement(&row).await.unwrap();
    store
        .mark_failed(key, "invalid_transaction_state: reverted", now)
        .await
        .unwrap();
    let before = h.token_balance(pay_to).await;
    let one_unit = h.x402_payload(4, pay_to, 1, nonce).await;
    let body = json!({ "x402Version": 1, "paymentPayload": one_unit, "paymentRequirements": h.requirements(pay_to, 1) });
    let (_, r) = h.post("/settle", &body).await;
    assert_eq!(r["success"], false, "{r}");
    assert_eq!(r["errorReason"], "invalid_transaction_state");
    let stored = store.settlement(key).await.unwrap().unwrap();
    assert_eq!(stored.status, tollgate_protocol::SettlementStatus::Failed);
    assert_eq!(stored.tx_hash, None);
    assert_eq!(h.token_balance(pay_to).await, before);

    // Zero prices, and authorizations valid for years.
    let zero = h.x402_payload(4, pay_to, 0, B256::repeat_byte(0x34)).await;
    let body = json!({ "x402Version": 1, "paymentPayload": zero, "paymentRequirements": h.requirements(pay_to, 0) });
    let (_, v) = h.post("/verify", &body).await;
    assert_eq!(v["invalidReason"], "invalid_payment_requirements", "{v}");
    let (_, r) = h.post("/settle", &body).await;
    assert_eq!(r["success"], false);
    assert_eq!(r["transaction"], "");
    let mut long = h.x402_payload(4, pay_to, 10, B256::repeat_byte(0x35)).await;
    let years = now + 5 * 365 * 86_400;
    let auth = TransferWithAuthorization {
        from: payer.address,
        to: pay_to,
        value: U256::from(10),
        validAfter: U256::from(now - 600),
        validBefore: U256::from(years),
        nonce: B256::repeat_byte(0x35),
    };
    let real = token_domain(
        "USD Coin",
        "2",
        h.fixture.chain.chain_id(),
        h.fixture.deployment.token,
    );
    long.payload.signature = sign(&payer.signer(), &auth, &real).unwrap();
    long.payload.authorization.valid_after = tollgate_protocol::Amount::from_units(now - 600);
    long.payload.authorization.valid_before = tollgate_protocol::Amount::from_units(years);
    let body = json!({ "x402Version": 1, "paymentPayload": long, "paymentRequirements": h.requirements(pay_to, 10) });
    let (_, r) = h.post("/settle", &body).await;
    assert_eq!(
        r["errorReason"], "invalid_exact_evm_payload_authorization_valid_before",
        "{r}"
    );
    assert_eq!(h.token_balance(pay_to).await, before);
}

/// Many payments settled at once (batched into shared transactions when they come together):
/// each answered success once, with a transaction whose receipt carries its own transfer, and
/// the balances moved by exactly the payments.
async fn payments_settled_at_once_each_move_once(backend: Backend) {
    let h = std::sync::Arc::new(Harness::new(backend).await);
    let pay_to = h.account(7).address;
    let payers = [1usize, 2, 3, 4];
    let mut before = Vec::new();
    for &p in &payers {
        before.push(h.token_balance(h.account(p).address).await);
    }
    let payee_before = h.token_balance(pay_to).await;
    let mut bodies = Vec::new();
    for i in 0..24u64 {
        let payer = payers[i as usize % payers.len()];
        let amount = 1_000 + i;
        let mut nonce = [0x5a; 32];
        nonce[31] = i as u8;
        let payload = h
            .x402_payload(payer, pay_to, amount, B256::from(nonce))
            .await;
        let body = json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": h.requirements(pay_to, amount) });
        bodies.push((payer, amount, body));
    }
    let mut tasks = Vec::new();
    for (_, _, body) in &bodies {
        let (h, body) = (h.clone(), body.clone());
        tasks.push(tokio::spawn(
            async move { h.post("/settle", &body).await.1 },
        ));
    }
    let mut txs = std::collections::HashSet::new();
    for ((payer, amount, _), task) in bodies.iter().zip(tasks) {
        let r = task.await.unwrap();
        assert_eq!(r["success"], true, "{r}");
        let tx: B256 = r["transaction"].as_str().unwrap().parse().unwrap();
        let receipt = h.fixture.chain.receipt(tx).await.unwrap().unwrap();
        let carried = receipt.logs.iter().any(|l| {
            tollgate_chain::contracts::Token::Transfer::decode_log(l).is_ok_and(|t| {
                t.from == h.account(*payer).address
                    && t.to == pay_to
                    && t.value == U256::from(*amount)
            })
        });
        assert!(
            carried,
            "the receipt of {tx} carries this payment's transfer"
        );
        txs.insert(tx);
    }
    eprintln!("24 payments settled in {} transactions", txs.len());
    let total: u64 = bodies.iter().map(|(_, a, _)| a).sum();
    assert_eq!(
        h.token_balance(pay_to).await,
        payee_before + U256::from(total)
    );
    for (i, &p) in payers.iter().enumerate() {
        let paid: u64 = bodies
            .iter()
            .filter(|(payer, _, _)| *payer == p)
            .map(|(_, a, _)| a)
            .sum();
        assert_eq!(
            h.token_balance(h.account(p).address).await,
            before[i] - U256::from(paid)
        );
    }
    // Each answered success once.
    for (_, _, body) in &bodies {
        let (_, again) = h.post("/settle", body).await;
        assert_eq!(again["errorReason"], "duplicate_settlement", "{again}");
    }
}

/// Replicas on one store, each payment settled at two of them at once (a resource server's
/// `/settle` of a replayed payment, balanced to two replicas): it moves once and is answered
/// `success` once. Replicas share no lock: the store's confirmation decides whose success it
/// is.
async fn the_same_payment_at_two_replicas_is_answered_success_once(backend: Backend) {
    let h = Harness::new(backend).await;
    let replica = h.replica(&[NETWORK], 6).unwrap();
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    const PAYMENTS: u64 = 12;
    for i in 0..PAYMENTS {
        let req = h
            .settle_request(
                1 + (i % 3) as usize,
                pay_to,
                1_000,
                B256::repeat_byte(0x90 + i as u8),
            )
            .await;
        let (a, b) = tokio::join!(
            h.facilitator.x402().settle(&req, None),
            replica.x402().settle(&req, None)
        );
        let (won, lost) = match (a.success, b.success) {
            (true, false) => (a, b),
            (false, true) => (b, a),
            _ => panic!("payment {i}: one success, not {a:?} and {b:?}"),
        };
        // The other is told it was settled, naming the transaction, even when it came while
        // that transaction was only in the node's pending block (seen by its simulation, not
        // yet by the logs).
        assert_eq!(
            lost.error_reason.as_ref().map(|r| r.as_str()),
            Some("duplicate_settlement"),
            "payment {i}: {lost:?}"
        );
        assert_eq!(lost.transaction, won.transaction, "payment {i}");
    }
    assert_eq!(
        h.token_balance(pay_to).await,
        before + U256::from(PAYMENTS * 1_000)
    );
}

/// Replicas on one store, the first settler's retry (the same payload and `Idempotency-Key`)
/// balanced to another replica while the first attempt is still settling (its answer lost on
/// the way, say): both are answered `success` with the one transaction. An answer of failure
/// here would tell an agent its payment did not go through while it did, and it would pay
/// again.
async fn a_first_settlers_retry_at_another_replica_gets_its_success(backend: Backend) {
    let h = Harness::new(backend).await;
    let replica = h.replica(&[NETWORK], 6).unwrap();
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    const PAYMENTS: u64 = 12;
    for i in 0..PAYMENTS {
        let req = h
            .settle_request(
                1 + (i % 3) as usize,
                pay_to,
                1_000,
                B256::repeat_byte(0xc0 + i as u8),
            )
            .await;
        let settler = Some(B256::repeat_byte(0x5e));
        let (a, b) = tokio::join!(
            h.facilitator.x402().settle(&req, settler),
            replica.x402().settle(&req, settler)
        );
        assert!(a.success && b.success, "payment {i}: {a:?} and {b:?}");
        assert_eq!(a.transaction, b.transaction, "payment {i}");
    }
    assert_eq!(
        h.token_balance(pay_to).await,
        before + U256::from(PAYMENTS * 1_000)
    );
}

/// Replicas on one store, two payloads with one nonce (different amounts) settled at once, one
/// at each: the one recorded first is the payment; the other is refused
/// (`invalid_transaction_state`) and never sent, so the chain's transfer is the recorded one
/// and is answered `success`.
async fn two_payloads_with_one_nonce_at_two_replicas_settle_the_recorded_one(backend: Backend) {
    let h = Harness::new(backend).await;
    let replica = h.replica(&[NETWORK], 6).unwrap();
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    let mut moved = U256::ZERO;
    for i in 0..12u8 {
        let nonce = B256::repeat_byte(0xb0 + i);
        let small = h.settle_request(2, pay_to, 1_000, nonce).await;
        let large = h.settle_request(2, pay_to, 2_000, nonce).await;
        let (a, b) = tokio::join!(
            h.facilitator.x402().settle(&small, None),
            replica.x402().settle(&large, None)
        );
        let (won, amount, lost) = match (a.success, b.success) {
            (true, false) => (a, 1_000, b),
            (false, true) => (b, 2_000, a),
            _ => panic!("payment {i}: one success, not {a:?} and {b:?}"),
        };
        assert_eq!(
            lost.error_reason.as_ref().map(|r| r.as_str()),
            Some("invalid_transaction_state"),
            "payment {i}: {lost:?}"
        );
        assert_ne!(lost.transaction, won.transaction, "payment {i}");
        moved += U256::from(amount);
        let key = tollgate_protocol::api::authorize::settlement_key(
            h.chain_id(),
            h.fixture.deployment.token,
            h.account(2).address,
            nonce,
        );
        let row = h
            .facilitator
            .store()
            .settlement(key)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            row.new.amount.get(),
            U256::from(amount),
            "payment {i}: the row is the payment that moved"
        );
    }
    assert_eq!(h.token_balance(pay_to).await, before + moved);
}

crate::on_backends!(
    a_first_settlers_retry_at_another_replica_gets_its_success,
    two_payloads_with_one_nonce_at_two_replicas_settle_the_recorded_one,
    the_same_payment_at_two_replicas_is_answered_success_once,
    payments_settled_at_once_each_move_once,
    verify_then_settle_once,
    invalid_payments_get_v1_reasons,
    concurrent_settles_transfer_once,
    settle_answers_only_for_the_settled_payload,
    idempotency_key_retries_get_the_first_outcome,
    only_real_payments_are_stored_or_confirmed
);

/// A settlement left pending (a slow chain) and then finished by someone else repeating the
/// payload: the success stays the first settler's, who named itself with `Idempotency-Key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_settlement_is_answered_to_its_first_settler() {
    let h = Harness::with(Backend::Anvil, |s| {
        s.confirmation_timeout = std::time::Duration::from_millis(300);
    })
    .await;
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    let payload = h
        .x402_payload(5, pay_to, 10_000, B256::repeat_byte(0x36))
        .await;
    let body = json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": h.requirements(pay_to, 10_000) });
    let settle = |key: Option<&'static str>| {
        let mut r = h.http.post(format!("{}/settle", h.url)).json(&body);
        if let Some(k) = key {
            r = r.header("Idempotency-Key", k);
        }
        async move {
            r.send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    h.anvil("evm_setAutomine", json!([false])).await;
    let pending = settle(Some("gate-1")).await;
    assert_eq!(pending["success"], false, "{pending}");
    assert_eq!(pending["errorReason"], "invalid_transaction_state");
    let tx = pending["transaction"].as_str().unwrap().to_owned();
    assert!(!tx.is_empty(), "the pending answer names its transaction");
    h.anvil("evm_mine", json!([])).await;
    h.anvil("evm_setAutomine", json!([true])).await;

    let other = settle(None).await;
    assert_eq!(
        other["success"], false,
        "not the first settler's success: {other}"
    );
    assert_eq!(other["errorReason"], "duplicate_settlement");
    assert_eq!(other["transaction"], tx.as_str());
    let first = settle(Some("gate-1")).await;
    assert_eq!(first["success"], true, "{first}");
    assert_eq!(first["transaction"], tx.as_str());
    assert_eq!(h.token_balance(pay_to).await, before + U256::from(10_000));
}

/// Payments that wait while a transaction is on its way go in one batch. In it, one
/// payment can fail while the others go through (here two payments of one payer whose balance
/// covers one): the failed one is answered for itself (`insufficient_funds`, nothing moved),
/// and the others with the batch's transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_that_fails_in_a_batch_is_answered_for_itself() {
    let h = std::sync::Arc::new(Harness::new(Backend::Anvil).await);
    let pay_to = h.account(7).address;
    let payee_before = h.token_balance(pay_to).await;
    // Each payment signed and settled on a task of its own: (its body, the answer).
    let settle = |payer, amount, nonce| h.settle_on_task(payer, pay_to, amount, nonce);
    let spender = h.account(4).address;
    let half: u64 = (h.token_balance(spender).await * U256::from(6) / U256::from(10))
        .try_into()
        .unwrap();

    // Blocks wait: the first payment goes alone and stays unmined.
    h.anvil("evm_setAutomine", json!([false])).await;
    let first = settle(1, 1_000, 0x61);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // These three wait for it to be mined, together.
    let third = settle(3, 3_000, 0x63);
    let spend_a = settle(4, half, 0x64);
    let spend_b = settle(4, half, 0x65);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    h.anvil("evm_mine", json!([])).await;
    h.anvil("evm_setAutomine", json!([true])).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    h.anvil("evm_mine", json!([])).await;

    let mut answers = Vec::new();
    let mut bodies = Vec::new();
    for task in [first, third, spend_a, spend_b] {
        let (body, answer) = task.await.unwrap();
        bodies.push(body);
        answers.push(answer);
    }
    for r in &answers[..2] {
        assert_eq!(r["success"], true, "{r}");
    }
    let spent: Vec<_> = answers[2..]
        .iter()
        .filter(|r| r["success"] == true)
        .collect();
    let refused: Vec<_> = answers[2..]
        .iter()
        .filter(|r| r["success"] != true)
        .collect();
    assert_eq!((spent.len(), refused.len()), (1, 1), "{answers:?}");
    assert_eq!(
        refused[0]["errorReason"], "insufficient_funds",
        "{}",
        refused[0]
    );
    assert!(
        refused[0].get("transaction").is_none_or(|t| t == ""),
        "{}",
        refused[0]
    );

    // The three that waited together went in one router transaction.
    assert_eq!(
        answers[1]["transaction"], spent[0]["transaction"],
        "{answers:?}"
    );
    let batch: B256 = answers[1]["transaction"].as_str().unwrap().parse().unwrap();
    let receipt = h.fixture.chain.receipt(batch).await.unwrap().unwrap();
    assert_eq!(receipt.to, Some(h.fixture.deployment.router));
    assert_ne!(answers[0]["transaction"], answers[1]["transaction"]);

    assert_eq!(
        h.token_balance(pay_to).await,
        payee_before + U256::from(1_000 + 3_000 + half)
    );
    // The refused payment stays refused.
    let refused_body = if answers[2]["success"] == true {
        &bodies[3]
    } else {
        &bodies[2]
    };
    let (_, refused_again) = h.post("/settle", refused_body).await;
    assert_eq!(
        refused_again["errorReason"], "insufficient_funds",
        "{refused_again}"
    );
}

/// A payment goes in a batch only once its row is recorded. Here one payer's row takes most of
/// a second to insert and is then refused (a trigger in the SQLite file): the batch that leaves
/// meanwhile goes without it, and its transfer never happens, while the payment waiting with it
/// (recorded) goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_whose_row_is_not_recorded_is_never_sent() {
    let dir = tempfile::tempdir().unwrap();
    let store = tollgate_testkit::harness::sqlite_store(&dir, "facilitator.db")
        .await
        .unwrap();
    let h = std::sync::Arc::new(Harness::with_store(Backend::Anvil, store).await);
    let raw = sqlx::SqlitePool::connect(&format!(
        "sqlite://{}",
        dir.path().join("facilitator.db").display()
    ))
    .await
    .unwrap();
    let refused = h.account(4).address;
    // The payer's address is ours, not input.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TRIGGER refuse_slowly BEFORE INSERT ON settlements \
         WHEN NEW.payer = '{}' BEGIN \
         SELECT count(*) FROM (WITH RECURSIVE n(x) AS \
         (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 2000000) SELECT x FROM n); \
         SELECT RAISE(ABORT, 'refused by the test'); END",
        alloy::hex::encode_prefixed(refused)
    )))
    .execute(&raw)
    .await
    .unwrap();
    let pay_to = h.account(7).address;
    let payee_before = h.token_balance(pay_to).await;
    let refused_before = h.token_balance(refused).await;
    let settle = |payer, amount, nonce| h.settle_on_task(payer, pay_to, amount, nonce);
    let pause = |ms| tokio::time::sleep(std::time::Duration::from_millis(ms));

    // Blocks wait: one payment goes alone and stays unmined.
    h.anvil("evm_setAutomine", json!([false])).await;
    let alone = settle(1, 1_000, 0x71);
    pause(300).await;
    // Two wait for it: one recorded at once, one whose row is slow to insert, and refused.
    // The first has waited `batch::HOLD` long before that row is written: both go in the next
    // batch, which leaves without the refused one.
    let recorded = settle(5, 5_000, 0x75);
    let payer5 = alloy::hex::encode_prefixed(h.account(5).address);
    while sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM settlements WHERE payer = ?")
        .bind(&payer5)
        .fetch_one(&raw)
        .await
        .unwrap()
        == 0
    {
        pause(5).await;
    }
    let unrecorded = settle(4, 4_000, 0x74);
    pause(1_500).await;
    h.anvil("evm_setAutomine", json!([true])).await;
    h.anvil("evm_mine", json!([])).await;

    let (alone, recorded) = (alone.await.unwrap().1, recorded.await.unwrap().1);
    for r in [&alone, &recorded] {
        assert_eq!(r["success"], true, "{r}");
    }
    let unrecorded = unrecorded.await.unwrap().1;
    assert_eq!(unrecorded["success"], false, "{unrecorded}");
    assert_eq!(unrecorded["errorReason"], "unexpected_settle_error");
    assert!(
        unrecorded.get("transaction").is_none_or(|t| t == ""),
        "{unrecorded}"
    );
    // Nothing of the refused payment moved.
    assert_eq!(h.token_balance(refused).await, refused_before);
    assert_eq!(
        h.token_balance(pay_to).await,
        payee_before + U256::from(1_000 + 5_000)
    );
    raw.close().await;
}

/// Payloads whose `/verify` answers are known: (body, the `invalidReason`, or `None` for valid).
/// Two payloads with one nonce (both valid: neither is used yet), one already settled, one its
/// payer cannot cover, one signed by someone else, and `good` plain ones.
async fn verify_cases(h: &Harness, good: u8) -> Vec<(serde_json::Value, Option<&'static str>)> {
    let pay_to = h.account(7).address;
    let body = |payload: &tollgate_protocol::x402::PaymentPayload, amount| json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": h.requirements(pay_to, amount) });
    let mut cases = Vec::new();
    for i in 0..good {
        let payer = 1 + usize::from(i % 4);
        let payload = h
            .x402_payload(payer, pay_to, 1_000, B256::repeat_byte(0x80 + i))
            .await;
        cases.push((body(&payload, 1_000), None));
    }
    for amount in [2_000, 3_000] {
        let twin = h
            .x402_payload(5, pay_to, amount, B256::repeat_byte(0x7a))
            .await;
        cases.push((body(&twin, amount), None));
    }
    let settled = h
        .x402_payload(6, pay_to, 4_000, B256::repeat_byte(0x7b))
        .await;
    let (_, r) = h.post("/settle", &body(&settled, 4_000)).await;
    assert_eq!(r["success"], true, "{r}");
    cases.push((body(&settled, 4_000), Some("invalid_transaction_state")));
    let unfunded = h
        .x402_payload(2, pay_to, 2_000_000_000_000, B256::repeat_byte(0x7c))
        .await;
    cases.push((
        body(&unfunded, 2_000_000_000_000),
        Some("insufficient_funds"),
    ));
    let mut forged = serde_json::to_value(
        h.x402_payload(3, pay_to, 1_000, B256::repeat_byte(0x7d))
            .await,
    )
    .unwrap();
    forged["payload"]["authorization"]["from"] = json!(h.account(4).address);
    cases.push((
        json!({ "x402Version": 1, "paymentPayload": forged, "paymentRequirements": h.requirements(pay_to, 1_000) }),
        Some("invalid_exact_evm_payload_signature"),
    ));
    cases
}

/// Posts every case's `/verify` at once and checks each answer.
async fn verify_all_at_once(
    h: &std::sync::Arc<Harness>,
    cases: &[(serde_json::Value, Option<&'static str>)],
) {
    let tasks: Vec<_> = cases
        .iter()
        .map(|(body, _)| {
            let (h, body) = (h.clone(), body.clone());
            tokio::spawn(async move { h.post("/verify", &body).await.1 })
        })
        .collect();
    for ((body, reason), task) in cases.iter().zip(tasks) {
        let v = task.await.unwrap();
        let nonce = &body["paymentPayload"]["payload"]["authorization"]["nonce"];
        match reason {
            None => assert_eq!(v["isValid"], true, "{nonce}: {v}"),
            Some(reason) => {
                assert_eq!(v["isValid"], false, "{nonce}: {v}");
                assert_eq!(v["invalidReason"], *reason, "{nonce}: {v}");
            }
        }
    }
}

/// A facilitator on anvil through a chain of its own, whose JSON-RPC calls are counted.
async fn counted_on_anvil() -> (
    std::sync::Arc<Harness>,
    std::sync::Arc<tollgate_chain::rpc::RpcChain>,
) {
    tollgate_chain::install_crypto_provider();
    let fixture = tollgate_testkit::Fixture::new(Backend::Anvil)
        .await
        .expect("anvil");
    let chain = std::sync::Arc::new(
        tollgate_chain::rpc::RpcChain::connect(
            fixture.rpc_url().unwrap(),
            tollgate_testkit::dev_wallet(
                &fixture.accounts[crate::support::RELAYER..=crate::support::RELAYER],
            )
            .unwrap(),
            tollgate_chain::rpc::RpcOptions {
                chain_id: Some(fixture.chain.chain_id()),
                ..Default::default()
            },
        )
        .await
        .unwrap(),
    );
    let h = Harness::assemble(fixture, chain.clone(), 1, None, |_| {}).await;
    (std::sync::Arc::new(h), chain)
}

/// Verifications that come together are simulated together, in one router call
/// (`simulateTransfers`) per batch rather than one `eth_call` each, and each is answered
/// exactly as it is alone: two payloads with one nonce both valid, a settled one, an
/// unfunded one and a forged one each with its own reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifications_that_come_together_are_each_answered_as_alone() {
    let (h, chain) = counted_on_anvil().await;
    let cases = verify_cases(&h, 28).await;
    // One at a time: each simulated alone.
    for case in &cases {
        verify_all_at_once(&h, std::slice::from_ref(case)).await;
    }
    let calls = || chain.calls().get("eth_call").copied().unwrap_or(0);
    let before = calls();
    for _ in 0..3 {
        verify_all_at_once(&h, &cases).await;
    }
    let together = calls() - before;
    eprintln!(
        "{} verifications at once, 3 times: {together} eth_calls",
        cases.len()
    );
    // Alone, one `eth_call` each; together, here ~14 for 99. Two thirds leaves room for a
    // loaded machine, where fewer arrive while a batch is on its way.
    let verifications = 3 * cases.len() as u64;
    assert!(
        together * 3 <= verifications * 2,
        "{together} eth_calls for {verifications} verifications"
    );
}

/// A `PaymentRouter` deployed before `simulateTransfers` (here: code that reverts every call)
/// makes no verification fail: the first batch falls back to each alone, and every simulation
/// goes alone from then on (one `eth_call` per verification, none to the router).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_without_simulate_transfers_leaves_verifications_answered() {
    let (h, chain) = counted_on_anvil().await;
    let cases = verify_cases(&h, 12).await;
    let router = h.fixture.deployment.router;
    // PUSH1 0 PUSH1 0 REVERT.
    h.anvil("anvil_setCode", json!([router, "0x60006000fd"]))
        .await;
    let calls = || chain.calls().get("eth_call").copied().unwrap_or(0);
    // Until a batch has formed and been refused (then each of it went alone as well: more
    // calls than verifications; a round whose verifications all came alone tries none).
    let mut rounds = 0;
    loop {
        let before = calls();
        verify_all_at_once(&h, &cases).await;
        rounds += 1;
        if calls() - before > cases.len() as u64 {
            break;
        }
        assert!(rounds < 20, "no batch formed in {rounds} rounds");
    }
    for _ in 0..2 {
        let before = calls();
        verify_all_at_once(&h, &cases).await;
        assert_eq!(calls() - before, cases.len() as u64, "each alone, once");
    }
}
