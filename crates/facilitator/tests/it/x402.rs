//! The x402 V1 facilitator API with the exact V1 shapes.

use alloy::primitives::{B256, U256};
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

    // Idempotent: settling again returns the same transaction and moves nothing.
    let (_, again) = h.post("/settle", &body).await;
    assert_eq!(again["success"], true);
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
        supported,
        json!({ "kinds": [{ "x402Version": 1, "scheme": "exact", "network": NETWORK }] })
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
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r["success"], true, "{r}");
        txs.insert(r["transaction"].as_str().unwrap().to_owned());
    }
    assert_eq!(txs.len(), 1);
    assert_eq!(h.token_balance(pay_to).await, before + U256::from(10_000));
}

crate::on_backends!(
    verify_then_settle_once,
    invalid_payments_get_v1_reasons,
    concurrent_settles_transfer_once
);
