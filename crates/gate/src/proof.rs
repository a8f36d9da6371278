//! `parse_payment_proof`: the spec's `parsePaymentProof`.

use tollgate_protocol::{PaymentProof, XPayment, XPaymentError, decode_x_payment};

use crate::ProofError;

/// Parses the value of an `X-PAYMENT` header as a Tollgate payment proof (base64 JSON, as
/// [`PaymentProof::encode`] writes it), with the protocol's one `X-PAYMENT` decoder
/// ([`tollgate_protocol::decode_x_payment`]).
///
/// A value the decoder cannot read is [`ProofError::Decode`], with the decoder's typed
/// [`XPaymentError`]; an x402 payment payload (JSON with `x402Version`) is reported as
/// [`ProofError::X402Payload`] so that a caller can route it to the x402 path instead. This only parses: [`crate::Gate::verify_payment_proof`] checks the proof.
///
/// ```
/// use tollgate_gate::{ProofError, XPaymentError, parse_payment_proof};
/// assert!(matches!(
///     parse_payment_proof("not base64!"),
///     Err(ProofError::Decode(XPaymentError::NotBase64(_)))
/// ));
/// // base64 of {"x402Version":1}
/// assert!(matches!(
///     parse_payment_proof("eyJ4NDAyVmVyc2lvbiI6MX0="),
///     Err(ProofError::X402Payload { x402_version: Some(1) })
/// ));
/// ```
pub fn parse_payment_proof(header_value: &str) -> Result<PaymentProof, ProofError> {
    match decode_x_payment(header_value) {
        Ok(XPayment::Proof(proof)) => Ok(*proof),
        Ok(XPayment::X402(_)) | Err(XPaymentError::MalformedPayload(_)) => {
            Err(ProofError::X402Payload {
                x402_version: Some(1),
            })
        }
        Ok(XPayment::X402V2(_)) | Err(XPaymentError::MalformedV2Payload(_)) => {
            Err(ProofError::X402Payload {
                x402_version: Some(2),
            })
        }
        Ok(XPayment::UnsupportedVersion { x402_version }) => {
            Err(ProofError::X402Payload { x402_version })
        }
        Err(e) => Err(ProofError::Decode(e)),
    }
}

#[cfg(test)]
mod tests {
    use base64::{Engine as _, engine::general_purpose::STANDARD};
    use serde_json::{Value, json};
    use tollgate_protocol::{MAX_PAYMENT_HEADER, x402::MAX_PAYLOAD_HEADER};

    use super::*;

    fn enc(v: &Value) -> String {
        STANDARD.encode(v.to_string())
    }

    /// A version 1 proof as a facilitator writes it (not validly signed: only parsed here).
    fn proof_json() -> Value {
        let hex = |byte: u8, len: usize| format!("0x{}", format!("{byte:02x}").repeat(len));
        let (address, hash) = (|b| hex(b, 20), |b| hex(b, 32));
        json!({
            "version": 1, "network": "base-sepolia", "chainId": 84532,
            "token": address(1), "payer": address(2), "payTo": address(3),
            "amount": "500000", "fee": "1000", "memo": hash(4), "txHash": hash(5),
            "block": 7, "issuedAt": 1_700_000_000u64, "expiry": 1_700_000_600u64,
            "signer": address(6), "signature": hex(9, 65),
        })
    }

    /// What the decoder reads as a proof, or refuses, the gate parses or refuses alike (the
    /// decoder's own cases are tested in tollgate-protocol).
    #[test]
    fn proofs_and_refusals_are_the_decoders() {
        let proof = proof_json();
        let parsed = parse_payment_proof(&enc(&proof)).expect("a proof parses");
        assert_eq!(parse_payment_proof(&parsed.encode()).unwrap(), parsed);
        let with = |field: &str, value: Value| {
            let mut p = proof.clone();
            p[field] = value;
            enc(&p)
        };
        for header in [
            enc(&proof),
            enc(&proof).trim_end_matches('=').to_owned(),
            with("version", 2.into()),
            with("amount", 5.into()),
            with("network", "x".repeat(MAX_PAYMENT_HEADER).into()),
            enc(&json!({"hello": 1})),
            "A".repeat(MAX_PAYLOAD_HEADER + 1),
            "%%%".into(),
            "aGVsbG8=".into(),
        ] {
            match (parse_payment_proof(&header), decode_x_payment(&header)) {
                (Ok(parsed), Ok(XPayment::Proof(decoded))) => assert_eq!(parsed, *decoded),
                (Err(ProofError::Decode(e)), Err(decoded)) => assert_eq!(e.code(), decoded.code()),
                other => panic!("{header:.40}: {other:?}"),
            }
        }
    }

    /// Anything with `x402Version` is routed to the x402 path, a malformed V1 payload too.
    #[test]
    fn x402_payloads_are_routed() {
        for (payload, version) in [
            (json!({"x402Version": 1, "scheme": "exact"}), Some(1)),
            (json!({"x402Version": 2, "payload": {}}), Some(2)),
            (json!({"x402Version": "1"}), None),
        ] {
            let e = parse_payment_proof(&enc(&payload)).unwrap_err();
            assert!(
                matches!(e, ProofError::X402Payload { x402_version } if x402_version == version),
                "{payload}: {e:?}"
            );
            assert_eq!(e.code(), "x402_payload");
        }
    }
}
