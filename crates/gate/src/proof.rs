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
        Ok(XPayment::UnsupportedVersion { x402_version }) => {
            Err(ProofError::X402Payload { x402_version })
        }
        Err(e) => Err(ProofError::Decode(e)),
    }
}

#[cfg(test)]
mod tests {
    use alloy::primitives::{Address, B256, Bytes};
    use base64::{Engine as _, engine::general_purpose::STANDARD};
    use tollgate_protocol::{Amount, MAX_PAYMENT_HEADER, x402::MAX_PAYLOAD_HEADER};

    use super::*;

    fn proof() -> PaymentProof {
        PaymentProof {
            version: 1,
            network: "base-sepolia".into(),
            chain_id: 84532,
            token: Address::repeat_byte(1),
            payer: Address::repeat_byte(2),
            pay_to: Address::repeat_byte(3),
            amount: Amount::from_units(500_000),
            fee: Amount::from_units(1_000),
            memo: B256::repeat_byte(4),
            tx_hash: B256::repeat_byte(5),
            block: 7,
            issued_at: 1_700_000_000,
            expiry: 1_700_000_600,
            signer: Address::repeat_byte(6),
            signature: Bytes::from(vec![9; 65]),
        }
    }

    fn enc(v: serde_json::Value) -> String {
        STANDARD.encode(v.to_string())
    }

    #[test]
    fn round_trip_padded_and_not() {
        let p = proof();
        assert_eq!(parse_payment_proof(&p.encode()).unwrap(), p);
        let unpadded = p.encode().trim_end_matches('=').to_owned();
        assert_eq!(parse_payment_proof(&unpadded).unwrap(), p);
    }

    #[test]
    fn each_way_to_be_wrong_is_typed() {
        assert!(matches!(
            parse_payment_proof(&"A".repeat(MAX_PAYLOAD_HEADER + 1)),
            Err(ProofError::Decode(XPaymentError::TooLarge {
                max: MAX_PAYLOAD_HEADER,
                ..
            }))
        ));
        // Larger than a proof can be, and not an x402 payload.
        let mut big = serde_json::to_value(proof()).unwrap();
        big["network"] = "x".repeat(MAX_PAYMENT_HEADER).into();
        assert!(matches!(
            parse_payment_proof(&enc(big)),
            Err(ProofError::Decode(XPaymentError::TooLarge {
                max: MAX_PAYMENT_HEADER,
                ..
            }))
        ));
        assert!(matches!(
            parse_payment_proof("%%%"),
            Err(ProofError::Decode(XPaymentError::NotBase64(_)))
        ));
        assert!(matches!(
            parse_payment_proof("aGVsbG8="),
            Err(ProofError::Decode(XPaymentError::NotJson(_)))
        ));
        let mut v2 = serde_json::to_value(proof()).unwrap();
        v2["version"] = 2.into();
        assert!(matches!(
            parse_payment_proof(&enc(v2)),
            Err(ProofError::Decode(XPaymentError::UnknownProofVersion(
                Some(2)
            )))
        ));
        assert!(matches!(
            parse_payment_proof(&enc(serde_json::json!({"hello": 1}))),
            Err(ProofError::Decode(XPaymentError::UnknownProofVersion(None)))
        ));
        let mut bad = serde_json::to_value(proof()).unwrap();
        bad["amount"] = 5.into();
        let e = parse_payment_proof(&enc(bad)).unwrap_err();
        assert!(
            matches!(e, ProofError::Decode(XPaymentError::MalformedProof(_))),
            "{e:?}"
        );
        assert_eq!(e.code(), "malformed_proof");
        let x = enc(serde_json::json!({"x402Version": 2, "payload": {}}));
        assert!(matches!(
            parse_payment_proof(&x),
            Err(ProofError::X402Payload {
                x402_version: Some(2)
            })
        ));
    }
}
