//! `X-PAYMENT` as a Tollgate payment proof: the gate's `parse_payment_proof` (lenient padding,
//! x402 payloads told apart) and the protocol's strict `PaymentProof::decode`.
//!
//! Invariants: no panic; a decoded proof re-encodes (`PaymentProof::encode`) to a value both
//! parsers read back to the same proof; whatever the strict decoder accepts the gate accepts too,
//! with the same result; the gate never accepts more than `MAX_PAYMENT_HEADER` bytes as a proof.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_gate::{ProofError, XPaymentError, parse_payment_proof};
use tollgate_protocol::{MAX_PAYMENT_HEADER, PaymentProof, ProofDecodeError};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let gate = parse_payment_proof(value);
    let strict = PaymentProof::decode(value);

    if let Ok(proof) = &gate {
        assert!(
            value.trim().len() <= MAX_PAYMENT_HEADER,
            "proof over the size limit accepted"
        );
        round_trip(proof);
    }
    if let Ok(proof) = &strict {
        assert_eq!(proof.version, 1);
        match &gate {
            Ok(p) => assert_eq!(p, proof, "the gate and the strict decoder disagree"),
            Err(e) => panic!("the strict decoder accepts what the gate refuses: {e:?}"),
        }
        round_trip(proof);
    }
    // Error rendering is part of the 402 answer: it must not panic either.
    if let Err(e) = &gate {
        let _ = (e.code(), e.to_string());
        if let ProofError::Decode(XPaymentError::TooLarge { len, max }) = e {
            assert!(len > max);
        }
    }
    if let Err(e) = &strict {
        let _ = e.to_string();
    }
});

fn round_trip(proof: &PaymentProof) {
    let encoded = proof.encode();
    if encoded.len() > MAX_PAYMENT_HEADER {
        // Re-encoding may grow a value that was just under the limit (e.g. a `0x` prefix added).
        assert!(matches!(
            PaymentProof::decode(&encoded),
            Err(ProofDecodeError::TooLarge(_))
        ));
        return;
    }
    assert_eq!(&PaymentProof::decode(&encoded).expect("re-decodes"), proof);
    assert_eq!(
        &parse_payment_proof(&encoded).expect("gate re-parses"),
        proof
    );
}
