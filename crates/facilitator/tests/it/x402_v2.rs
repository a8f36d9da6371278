//! The x402 V2 facilitator API beside V1: V2 bodies at `/verify` and `/settle` settle through
//! the V1 path (one row, one transfer per authorization, whichever version asks), answers name
//! the network by its CAIP-2 id, and a `payment-identifier` is an idempotency key.

use alloy::primitives::{Address, B256, U256};
use serde_json::{Value, json};
use tollgate_protocol::x402::v2::{PaymentPayloadV2, PaymentRequirementsV2, ResourceInfo};

use crate::support::{Backend, Harness, NETWORK};

fn caip2(h: &Harness) -> String {
    format!("eip155:{}", h.chain_id())
}

/// A V2 body for `amount` to `pay_to` signed by `payer` with `nonce`, as `@x402/express` posts
/// it; `id` adds a `payment-identifier`.
async fn v2_body(
    h: &Harness,
    payer: usize,
    pay_to: Address,
    amount: u64,
    nonce: B256,
    id: Option<&str>,
) -> Value {
    let v1 = h.requirements(pay_to, amount);
    let requirements = PaymentRequirementsV2::from_v1(&v1, &caip2(h).parse().unwrap());
    let signed = h.x402_payload(payer, pay_to, amount, nonce).await;
    let payload = PaymentPayloadV2 {
        x402_version: 2,
        resource: Some(ResourceInfo {
            url: v1.resource.clone(),
            description: Some(v1.description.clone()),
            mime_type: Some(v1.mime_type.clone()),
        }),
        accepted: requirements.clone(),
        payload: signed.payload,
        extensions: id.map(|id| {
            serde_json::Map::from_iter([(
                "payment-identifier".to_owned(),
                json!({ "info": { "required": false, "id": id } }),
            )])
        }),
    };
    json!({ "x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirements })
}

async fn v2_verify_then_settle_once(backend: Backend) {
    let h = Harness::new(backend).await;
    let (payer, pay_to) = (h.account(1).address, h.account(7).address);
    let before = h.token_balance(pay_to).await;
    let body = v2_body(&h, 1, pay_to, 10_000, B256::repeat_byte(0x31), None).await;

    let (s, v) = h.post("/verify", &body).await;
    assert_eq!(s, 200);
    assert_eq!(
        v,
        json!({ "isValid": true, "payer": payer.to_checksum(None) })
    );
    let (s, r) = h.post("/settle", &body).await;
    assert_eq!(s, 200);
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["network"], caip2(&h), "V2 answers name the CAIP-2 id");
    assert_eq!(r["payer"], payer.to_checksum(None));
    let tx: B256 = r["transaction"].as_str().unwrap().parse().unwrap();
    assert!(h.fixture.chain.receipt(tx).await.unwrap().unwrap().success);
    assert_eq!(h.token_balance(pay_to).await, before + U256::from(10_000));

    // Again, in V2 or as its V1 twin: one authorization, one settlement.
    let (_, again) = h.post("/settle", &body).await;
    assert_eq!(again["errorReason"], "duplicate_settlement", "{again}");
    assert_eq!(again["transaction"], r["transaction"]);
    let p: PaymentPayloadV2 = serde_json::from_value(body["paymentPayload"].clone()).unwrap();
    let v1 = json!({
        "x402Version": 1,
        "paymentPayload": p.to_v1(&NETWORK.parse().unwrap()),
        "paymentRequirements": h.requirements(pay_to, 10_000),
    });
    let (_, twin) = h.post("/settle", &v1).await;
    assert_eq!(twin["success"], false, "{twin}");
    assert_eq!(h.token_balance(pay_to).await, before + U256::from(10_000));
}

async fn v2_refusals_move_nothing(backend: Backend) {
    let h = Harness::new(backend).await;
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    let good = v2_body(&h, 2, pay_to, 10_000, B256::repeat_byte(0x32), None).await;
    type Tamper = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "accepted is not the requirement",
            Box::new(|b| b["paymentPayload"]["accepted"]["amount"] = json!("9999")),
            "invalid_payment_requirements",
        ),
        (
            "a chain this facilitator does not serve",
            Box::new(|b| {
                b["paymentRequirements"]["network"] = json!("eip155:1");
                b["paymentPayload"]["accepted"]["network"] = json!("eip155:1");
            }),
            "invalid_network",
        ),
        (
            "not an EVM network",
            Box::new(|b| {
                let n = json!("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp");
                b["paymentRequirements"]["network"] = n.clone();
                b["paymentPayload"]["accepted"]["network"] = n;
            }),
            "invalid_network",
        ),
        (
            "value raised after signing",
            Box::new(|b| {
                b["paymentPayload"]["payload"]["authorization"]["value"] = json!("20000");
            }),
            "invalid_exact_evm_payload_signature",
        ),
        (
            "a payload of another version",
            Box::new(|b| b["paymentPayload"]["x402Version"] = json!(1)),
            "invalid_x402_version",
        ),
        (
            "a malformed payment identifier",
            Box::new(|b| {
                b["paymentPayload"]["extensions"] =
                    json!({ "payment-identifier": { "info": { "id": "short" } } });
            }),
            "invalid_payload",
        ),
    ];
    for (name, tamper, reason) in cases {
        let mut body = good.clone();
        tamper(&mut body);
        let (s, r) = h.post("/settle", &body).await;
        assert_eq!(s, 200, "{name}");
        assert_eq!(r["success"], false, "{name}: {r}");
        assert_eq!(r["errorReason"], reason, "{name}: {r}");
        assert_eq!(r["transaction"], "", "{name}: nothing is sent");
        if reason != "invalid_payload" {
            let (_, v) = h.post("/verify", &body).await;
            assert_eq!(v["invalidReason"], reason, "{name}: {v}");
        }
    }
    let (s, r) = h.post("/settle", &json!({ "x402Version": 3 })).await;
    assert_eq!(s, 400, "{r}");
    assert_eq!(h.token_balance(pay_to).await, before);
    // The untampered payment still settles.
    let (_, r) = h.post("/settle", &good).await;
    assert_eq!(r["success"], true, "{r}");
}

async fn payment_identifiers_are_idempotency_keys(backend: Backend) {
    let h = Harness::new(backend).await;
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    let id = "pay_7d5d747be160e280504c099d984bcfe0";
    let first = v2_body(&h, 3, pay_to, 10_000, B256::repeat_byte(0x41), Some(id)).await;
    let (_, r) = h.post("/settle", &first).await;
    assert_eq!(r["success"], true, "{r}");
    // The same payload under its id: the first outcome again (not duplicate_settlement).
    let (_, again) = h.post("/settle", &first).await;
    assert_eq!(again["success"], true, "{again}");
    assert_eq!(again["transaction"], r["transaction"]);
    // Another payload under the same id: refused, nothing sent.
    let other = v2_body(&h, 3, pay_to, 10_000, B256::repeat_byte(0x42), Some(id)).await;
    let (_, conflict) = h.post("/settle", &other).await;
    assert_eq!(
        conflict["errorReason"], "payment_identifier_conflict",
        "{conflict}"
    );
    assert_eq!(conflict["transaction"], "");
    // Another payer's id of the same spelling is its own.
    let theirs = v2_body(&h, 4, pay_to, 10_000, B256::repeat_byte(0x43), Some(id)).await;
    let (_, r) = h.post("/settle", &theirs).await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(h.token_balance(pay_to).await, before + U256::from(20_000));

    // An id whose payment was refused moves to the next payload.
    let id2 = "pay_0123456789abcdef0123";
    let mut refused = v2_body(&h, 3, pay_to, 10_000, B256::repeat_byte(0x44), Some(id2)).await;
    refused["paymentPayload"]["payload"]["authorization"]["value"] = json!("10001");
    refused["paymentPayload"]["accepted"]["amount"] = json!("10001");
    refused["paymentRequirements"]["amount"] = json!("10001");
    let (_, r) = h.post("/settle", &refused).await;
    assert_eq!(r["success"], false, "{r}");
    let next = v2_body(&h, 3, pay_to, 10_000, B256::repeat_byte(0x45), Some(id2)).await;
    let (_, r) = h.post("/settle", &next).await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(h.token_balance(pay_to).await, before + U256::from(30_000));

    // So does an id whose payment the chain refused (more than the payer holds): a refusal
    // found by simulating the transfer binds nothing either.
    let id3 = "pay_underfunded_0123456789";
    let held: u64 = h
        .token_balance(h.account(3).address)
        .await
        .try_into()
        .unwrap();
    let broke = v2_body(&h, 3, pay_to, held + 1, B256::repeat_byte(0x46), Some(id3)).await;
    let (_, r) = h.post("/settle", &broke).await;
    assert_eq!(r["errorReason"], "insufficient_funds", "{r}");
    let next = v2_body(&h, 3, pay_to, 10_000, B256::repeat_byte(0x47), Some(id3)).await;
    let (_, r) = h.post("/settle", &next).await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(h.token_balance(pay_to).await, before + U256::from(40_000));
}

/// Two different payloads under one payment identifier, sent at once: one settles, the other is
/// refused, whichever comes first; the payer pays once.
async fn one_identifier_settles_one_payload_under_concurrency(backend: Backend) {
    let h = std::sync::Arc::new(Harness::new(backend).await);
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    let id = "pay_concurrent_0123456789";
    let mut bodies = Vec::new();
    for n in 0..6u8 {
        bodies.push(v2_body(&h, 5, pay_to, 10_000, B256::repeat_byte(0x50 + n), Some(id)).await);
    }
    let tasks: Vec<_> = bodies
        .into_iter()
        .map(|body| {
            let h = std::sync::Arc::clone(&h);
            tokio::spawn(async move { h.post("/settle", &body).await.1 })
        })
        .collect();
    let mut successes = 0;
    for t in tasks {
        let r = t.await.unwrap();
        if r["success"] == true {
            successes += 1;
        } else {
            assert_eq!(r["errorReason"], "payment_identifier_conflict", "{r}");
        }
    }
    assert_eq!(successes, 1);
    assert_eq!(h.token_balance(pay_to).await, before + U256::from(10_000));
}

crate::on_backends!(
    v2_verify_then_settle_once,
    v2_refusals_move_nothing,
    payment_identifiers_are_idempotency_keys,
    one_identifier_settles_one_payload_under_concurrency
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supported_lists_both_versions_extensions_and_signers() {
    let h = Harness::new(Backend::Devnet).await;
    let (s, supported) = h.get("/supported").await;
    assert_eq!(s, 200);
    assert_eq!(
        supported["kinds"],
        json!([
            { "x402Version": 1, "scheme": "exact", "network": NETWORK },
            { "x402Version": 2, "scheme": "exact", "network": caip2(&h) },
        ])
    );
    assert_eq!(supported["extensions"], json!(["payment-identifier"]));
    let signers = supported["signers"]["eip155:*"].as_array().unwrap();
    assert!(!signers.is_empty(), "{supported}");
}
