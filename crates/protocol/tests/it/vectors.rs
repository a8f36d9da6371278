//! Golden vectors: messages as the coinbase `x402@1.2.0` package sends them (see
//! `tests/vectors/README.md`), read with our types and written back unchanged.

use std::{fs, path::PathBuf};

use alloy::primitives::{Address, B256, address};
use base64::{Engine as _, engine::general_purpose::STANDARD};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tollgate_protocol::{
    Amount, network,
    x402::{
        Eip712Extra, ErrorReason, PaymentPayload, PaymentRequiredResponse, PaymentRequirements,
        SettleRequest, SettleResponse, SettlementResponseHeader, SupportedKind, SupportedResponse,
        VerifyRequest, VerifyResponse, check_exact_evm,
    },
};

/// `Date.now()` when the vectors were generated, in seconds.
const SIGNED_AT: u64 = 1_750_000_000;
const PAYER: Address = address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");

fn read(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(name: &str) -> Value {
    serde_json::from_str(&read(name)).unwrap()
}

/// Reads a vector as `T`, writes it back, and requires the same JSON with no `null` in it.
fn round_trip<T: Serialize + DeserializeOwned>(name: &str) -> T {
    let original = json(name);
    let typed: T =
        serde_json::from_value(original.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let text = serde_json::to_string(&typed).unwrap();
    assert!(!text.contains("null"), "{name}: {text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        original,
        "{name}"
    );
    typed
}

#[test]
fn every_vector_round_trips() {
    round_trip::<PaymentRequiredResponse>("payment_required.json");
    round_trip::<PaymentPayload>("payment_payload.json");
    round_trip::<VerifyRequest>("verify_request.json");
    round_trip::<SettleRequest>("settle_request.json");
    round_trip::<VerifyResponse>("verify_response_valid.json");
    round_trip::<VerifyResponse>("verify_response_invalid.json");
    round_trip::<SettleResponse>("settle_response_success.json");
    round_trip::<SettleResponse>("settle_response_failure.json");
    round_trip::<SupportedResponse>("supported_response.json");
}

#[test]
fn the_x402_fetch_header_decodes_and_checks_out() {
    let header = read("x_payment.b64");
    let payload = PaymentPayload::decode_header(&header).unwrap();
    let expected: PaymentPayload = serde_json::from_value(json("payment_payload.json")).unwrap();
    assert_eq!(payload, expected);
    assert_eq!(payload.payload.authorization.from, PAYER);
    assert_eq!(payload.payload.signature.len(), 65);

    // Our encoding carries the same JSON.
    let ours: Value =
        serde_json::from_slice(&STANDARD.decode(payload.encode_header()).unwrap()).unwrap();
    assert_eq!(ours, json("payment_payload.json"));

    let body: PaymentRequiredResponse =
        serde_json::from_value(json("payment_required.json")).unwrap();
    let requirements = &body.accepts[0];
    assert!(requirements.matches(&payload));
    assert_eq!(check_exact_evm(&payload, requirements, SIGNED_AT), Ok(()));
    // validBefore is SIGNED_AT + 60: 55 s later, less than the 6 s of slack remain.
    assert_eq!(
        check_exact_evm(&payload, requirements, SIGNED_AT + 55),
        Err(ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore)
    );
}

#[test]
fn the_x402_express_402_body_is_what_we_build() {
    let base_sepolia = network::lookup("base-sepolia").unwrap();
    let ours = PaymentRequiredResponse::new(
        vec![PaymentRequirements {
            scheme: "exact".into(),
            network: base_sepolia.into(),
            max_amount_required: Amount::from_units(10_000),
            resource: "https://api.example.com/weather".into(),
            description: "Access to weather data".into(),
            mime_type: "application/json".into(),
            pay_to: address!("0x209693bc6afc0c5328ba36faf03c514ef312287c"),
            max_timeout_seconds: 60,
            asset: base_sepolia.usdc.unwrap(),
            output_schema: Some(
                serde_json::json!({"input": {"type": "http", "method": "GET", "discoverable": true}}),
            ),
            extra: Some(
                Eip712Extra {
                    name: base_sepolia.usdc_name.unwrap().into(),
                    version: network::USDC_EIP712_VERSION.into(),
                }
                .to_value(),
            ),
        }],
        Some("X-PAYMENT header is required".into()),
    );
    for entry in &ours.accepts {
        entry.check_x402_v1_compatible().unwrap();
    }
    // Addresses go out EIP-55 checksummed, as viem's getAddress writes them.
    assert_eq!(
        serde_json::to_value(&ours).unwrap(),
        json("payment_required.json")
    );
}

#[test]
fn facilitator_answers_we_build_match_the_vectors() {
    let tx: B256 = "0x9c3b7e0d4f2a1b6c8e5d7f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c"
        .parse()
        .unwrap();
    let cases = [
        (
            serde_json::to_value(VerifyResponse::valid(PAYER)),
            "verify_response_valid.json",
        ),
        (
            serde_json::to_value(VerifyResponse::invalid(
                ErrorReason::InvalidExactEvmPayloadSignature,
                Some(PAYER),
            )),
            "verify_response_invalid.json",
        ),
        (
            serde_json::to_value(SettleResponse::success(tx, "base-sepolia", PAYER)),
            "settle_response_success.json",
        ),
        (
            serde_json::to_value(SettleResponse::failure(
                ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore,
                "base-sepolia",
                Some(PAYER),
                None,
            )),
            "settle_response_failure.json",
        ),
    ];
    for (ours, name) in cases {
        assert_eq!(ours.unwrap(), json(name), "{name}");
    }

    let supported = SupportedResponse {
        kinds: vec![SupportedKind::exact("base-sepolia")],
        ..SupportedResponse::default()
    };
    assert_eq!(
        serde_json::to_value(&supported).unwrap()["kinds"][0],
        json("supported_response.json")["kinds"][0]
    );

    let request: VerifyRequest = serde_json::from_value(json("verify_request.json")).unwrap();
    let rebuilt = VerifyRequest::new(
        request.payment_payload.clone(),
        request.payment_requirements.clone(),
    );
    assert_eq!(rebuilt, request);
}

#[test]
fn the_settlement_header_matches_x402() {
    let settle: SettleResponse =
        serde_json::from_value(json("settle_response_success.json")).unwrap();
    let header = SettlementResponseHeader::from(&settle);
    assert_eq!(
        SettlementResponseHeader::decode(&read("x_payment_response.b64")).unwrap(),
        header
    );
    // Same JSON (key order aside) as x402's settleResponseHeader.
    let ours: Value = serde_json::from_slice(&STANDARD.decode(header.encode()).unwrap()).unwrap();
    assert_eq!(ours, json("settle_response_success.json"));
}

#[test]
fn solana_kinds_are_read_but_named_non_evm() {
    let supported: SupportedResponse =
        serde_json::from_value(json("supported_response.json")).unwrap();
    let sol = &supported.kinds[1];
    assert_eq!(
        sol.extra.as_ref().unwrap()["feePayer"],
        "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"
    );
    assert!(!network::lookup(&sol.network).unwrap().evm);
}
