//! `X-PAYMENT` as an x402 V1 `exact` payment payload, read the way the gate's layer reads it:
//! `parse_payment_proof` first, and on `X402Payload { x402_version: Some(1) }`
//! `PaymentPayload::decode_header`, then the stateless `check_exact_evm` against a fixed offer.
//!
//! Invariants: no panic; a payload `decode_header` accepts is one the proof parser routes to the
//! x402 path; a decoded payload re-encodes (`encode_header`) to one that decodes to the same
//! value; reason codes render.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tollgate_gate::{ProofError, parse_payment_proof};
use tollgate_protocol::x402::{
    self, MAX_PAYLOAD_HEADER, PayloadDecodeError, PaymentPayload, PaymentRequirements,
};

/// The requirements of the golden vector (crates/protocol/tests/vectors/payment_required.json).
static REQUIREMENTS: LazyLock<PaymentRequirements> = LazyLock::new(|| {
    serde_json::from_str(
        r#"{"scheme":"exact","network":"base-sepolia","maxAmountRequired":"10000",
        "resource":"https://api.example.com/weather","description":"","mimeType":"",
        "payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,
        "asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "extra":{"name":"USDC","version":"2"}}"#,
    )
    .expect("requirements parse")
});

/// The golden vector's signing time, so that its validity window is open.
const NOW: u64 = 1_750_000_000;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let routed_to_x402 = matches!(
        parse_payment_proof(value),
        Err(ProofError::X402Payload {
            x402_version: Some(1)
        })
    );
    // The layer calls `decode_header` only when routed; call it always, to check the routing.
    match PaymentPayload::decode_header(value) {
        Ok(payload) => {
            assert!(
                routed_to_x402,
                "a valid x402 payload is not routed to the x402 path"
            );
            assert_eq!(payload.x402_version, 1);
            let encoded = payload.encode_header();
            if encoded.len() <= MAX_PAYLOAD_HEADER {
                let again = PaymentPayload::decode_header(&encoded).expect("re-decodes");
                assert_eq!(again, payload);
            } else {
                assert!(matches!(
                    PaymentPayload::decode_header(&encoded),
                    Err(PayloadDecodeError::TooLarge(_))
                ));
            }
            let _ = REQUIREMENTS.matches(&payload);
            match x402::check_exact_evm(&payload, &REQUIREMENTS, NOW) {
                Ok(()) => {
                    let auth = &payload.payload.authorization;
                    assert_eq!(auth.to, REQUIREMENTS.pay_to);
                    assert!(auth.value >= REQUIREMENTS.max_amount_required);
                }
                Err(reason) => {
                    let _ = (reason.as_str(), reason.to_string());
                }
            }
        }
        Err(e) => {
            let _ = (e.reason().as_str(), e.to_string());
        }
    }
});
