//! The one decoder of `X-PAYMENT` values: a Tollgate payment proof, an x402 V1 payment payload,
//! or a payload of an x402 version this code does not speak.

use serde_json::Value;

use crate::{
    MAX_PAYMENT_HEADER, PaymentProof, codec,
    x402::{MAX_PAYLOAD_HEADER, PayloadDecodeError, PaymentPayload, v2::PaymentPayloadV2},
};

/// What an `X-PAYMENT` value carries ([`decode_x_payment`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XPayment {
    /// A Tollgate payment proof (version 1), issued by a facilitator's `/authorize`.
    Proof(Box<PaymentProof>),
    /// An x402 V1 payment payload, to settle through a facilitator's `/verify` and `/settle`.
    X402(Box<PaymentPayload>),
    /// An x402 V2 payment payload (`PAYMENT-SIGNATURE`).
    X402V2(Box<PaymentPayloadV2>),
    /// An x402 payment payload of another version (neither 1 nor 2), or whose
    /// `x402Version` is not an integer.
    UnsupportedVersion {
        /// The payload's `x402Version`, when it is an integer.
        x402_version: Option<u64>,
    },
}

/// Why an `X-PAYMENT` value could not be read. Each way has its own variant and a stable
/// [`code`](Self::code).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XPaymentError {
    /// Longer than any payment header is read ([`MAX_PAYLOAD_HEADER`]), or than a proof can be
    /// ([`MAX_PAYMENT_HEADER`]) once the value is known to be one.
    #[error("X-PAYMENT header of {len} bytes is too large (at most {max})")]
    TooLarge {
        /// The value's length.
        len: usize,
        /// The limit that applied.
        max: usize,
    },
    /// Not base64 (standard alphabet; padding optional).
    #[error("X-PAYMENT is not base64")]
    NotBase64(#[source] base64::DecodeError),
    /// Base64, but not JSON.
    #[error("X-PAYMENT is not base64-encoded JSON")]
    NotJson(#[source] serde_json::Error),
    /// No `x402Version` (so meant as a proof), and a proof `version` other than 1 (or none that
    /// is an integer).
    #[error("unsupported payment proof version {0:?}; only version 1 is known")]
    UnknownProofVersion(Option<u64>),
    /// A version 1 proof of the wrong shape (a field missing, mistyped or unknown).
    #[error("X-PAYMENT is not a payment proof")]
    MalformedProof(#[source] serde_json::Error),
    /// `x402Version: 1`, but not the shape of an x402 V1 payment payload.
    #[error("X-PAYMENT is not an x402 payment payload")]
    MalformedPayload(#[source] PayloadDecodeError),
    /// `x402Version: 2`, but not the shape of an x402 V2 payment payload.
    #[error("PAYMENT-SIGNATURE is not an x402 V2 payment payload")]
    MalformedV2Payload(#[source] serde_json::Error),
}

impl XPaymentError {
    /// A stable snake_case code (the `reason` a gate's 402 names).
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "header_too_large",
            Self::NotBase64(_) => "header_not_base64",
            Self::NotJson(_) => "header_not_json",
            Self::UnknownProofVersion(_) => "unknown_proof_version",
            Self::MalformedProof(_) => "malformed_proof",
            Self::MalformedPayload(_) | Self::MalformedV2Payload(_) => "malformed_x402_payload",
        }
    }
}

/// Reads an `X-PAYMENT` value: base64 (standard alphabet, padding optional, surrounding
/// whitespace ignored) of JSON. A JSON object with `x402Version` is an x402 payment payload
/// (V1 and V2 are decoded; another version is [`XPayment::UnsupportedVersion`]); anything else must be a
/// version 1 Tollgate proof. x402 payloads may be up to [`MAX_PAYLOAD_HEADER`] long (smart-wallet
/// signatures), proofs up to [`MAX_PAYMENT_HEADER`].
///
/// ```
/// use tollgate_protocol::{XPayment, XPaymentError, decode_x_payment};
/// assert!(matches!(decode_x_payment("not base64!"), Err(XPaymentError::NotBase64(_))));
/// // base64 of {"x402Version":3}
/// assert_eq!(
///     decode_x_payment("eyJ4NDAyVmVyc2lvbiI6M30=").unwrap(),
///     XPayment::UnsupportedVersion { x402_version: Some(3) }
/// );
/// ```
pub fn decode_x_payment(value: &str) -> Result<XPayment, XPaymentError> {
    let value = value.trim();
    let json: Value = codec::decode(value, MAX_PAYLOAD_HEADER).map_err(|e| match e {
        codec::DecodeError::TooLarge(len) => XPaymentError::TooLarge {
            len,
            max: MAX_PAYLOAD_HEADER,
        },
        codec::DecodeError::Base64(e) => XPaymentError::NotBase64(e),
        codec::DecodeError::Json(e) => XPaymentError::NotJson(e),
    })?;
    if let Some(version) = json.get("x402Version") {
        return match version.as_u64() {
            Some(1) => serde_json::from_value(json)
                .map(|p| XPayment::X402(Box::new(p)))
                .map_err(|e| XPaymentError::MalformedPayload(PayloadDecodeError::Json(e))),
            Some(2) => serde_json::from_value(json)
                .map(|p| XPayment::X402V2(Box::new(p)))
                .map_err(XPaymentError::MalformedV2Payload),
            x402_version => Ok(XPayment::UnsupportedVersion { x402_version }),
        };
    }
    if value.len() > MAX_PAYMENT_HEADER {
        return Err(XPaymentError::TooLarge {
            len: value.len(),
            max: MAX_PAYMENT_HEADER,
        });
    }
    match json.get("version").and_then(Value::as_u64) {
        Some(1) => {}
        other => return Err(XPaymentError::UnknownProofVersion(other)),
    }
    serde_json::from_value(json)
        .map(|p| XPayment::Proof(Box::new(p)))
        .map_err(XPaymentError::MalformedProof)
}

#[cfg(test)]
mod tests {
    use base64::{Engine as _, engine::general_purpose::STANDARD};

    use super::*;
    use crate::fixtures::proof;

    fn enc(v: &Value) -> String {
        STANDARD.encode(v.to_string())
    }

    #[test]
    fn proofs_padded_or_not_and_x402_payloads_are_told_apart() {
        let p = proof();
        let unpadded = p.encode().trim_end_matches('=').to_owned();
        for header in [p.encode(), unpadded, format!(" {} ", p.encode())] {
            assert_eq!(
                decode_x_payment(&header).unwrap(),
                XPayment::Proof(Box::new(p.clone()))
            );
        }
        let v3 = enc(&serde_json::json!({"x402Version": 3, "payload": {}}));
        assert_eq!(
            decode_x_payment(&v3).unwrap(),
            XPayment::UnsupportedVersion {
                x402_version: Some(3)
            }
        );
        let bad_v2 = enc(&serde_json::json!({"x402Version": 2, "payload": {}}));
        assert!(matches!(
            decode_x_payment(&bad_v2),
            Err(XPaymentError::MalformedV2Payload(_))
        ));
        let odd = enc(&serde_json::json!({"x402Version": "1"}));
        assert_eq!(
            decode_x_payment(&odd).unwrap(),
            XPayment::UnsupportedVersion { x402_version: None }
        );
        let bad_v1 = enc(&serde_json::json!({"x402Version": 1, "scheme": "exact"}));
        let e = decode_x_payment(&bad_v1).unwrap_err();
        assert!(matches!(e, XPaymentError::MalformedPayload(_)), "{e:?}");
        assert_eq!(e.code(), "malformed_x402_payload");
    }

    #[test]
    fn each_way_to_be_wrong_is_typed() {
        assert!(matches!(
            decode_x_payment(&"A".repeat(MAX_PAYLOAD_HEADER + 1)),
            Err(XPaymentError::TooLarge {
                max: MAX_PAYLOAD_HEADER,
                ..
            })
        ));
        let mut big = serde_json::to_value(proof()).unwrap();
        big["network"] = "x".repeat(MAX_PAYMENT_HEADER).into();
        assert!(matches!(
            decode_x_payment(&enc(&big)),
            Err(XPaymentError::TooLarge {
                max: MAX_PAYMENT_HEADER,
                ..
            })
        ));
        assert!(matches!(
            decode_x_payment("%%%"),
            Err(XPaymentError::NotBase64(_))
        ));
        assert!(matches!(
            decode_x_payment("aGVsbG8="),
            Err(XPaymentError::NotJson(_))
        ));
        let mut v2 = serde_json::to_value(proof()).unwrap();
        v2["version"] = 2.into();
        assert!(matches!(
            decode_x_payment(&enc(&v2)),
            Err(XPaymentError::UnknownProofVersion(Some(2)))
        ));
        assert!(matches!(
            decode_x_payment(&enc(&serde_json::json!({"hello": 1}))),
            Err(XPaymentError::UnknownProofVersion(None))
        ));
        let mut bad = serde_json::to_value(proof()).unwrap();
        bad["amount"] = 5.into();
        assert!(matches!(
            decode_x_payment(&enc(&bad)),
            Err(XPaymentError::MalformedProof(_))
        ));
    }
}
