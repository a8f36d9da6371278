//! The client's x402 V1 payment ([`PaymentPayload`]): an `exact` EVM authorization and its
//! signature, carried base64 in `X-PAYMENT`.

use alloy::primitives::{Address, B256, Bytes};
use serde::{Deserialize, Serialize};

use super::{ErrorReason, MAX_PAYLOAD_HEADER};
use crate::{Amount, XPayment, XPaymentError, codec};

/// An x402 V1 payment: what a client sends, base64 JSON, in `X-PAYMENT`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayload {
    /// `1`.
    pub x402_version: u8,
    /// `"exact"`.
    pub scheme: String,
    /// The network name, copied by the client from the requirements it paid.
    pub network: crate::Network,
    /// The signed authorization.
    pub payload: ExactEvmPayload,
}

/// The `exact` scheme's EVM payload: an EIP-3009 `transferWithAuthorization` and its signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExactEvmPayload {
    /// 65-byte `r ‖ s ‖ v` for an EOA; longer for smart wallets (EIP-1271, ERC-6492 wrapped).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
    /// What was signed.
    pub authorization: ExactEvmAuthorization,
}

/// EIP-3009 `TransferWithAuthorization` fields, numbers as decimal strings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExactEvmAuthorization {
    /// The payer.
    #[serde(with = "super::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub from: Address,
    /// The recipient; must equal the requirements' `payTo`.
    #[serde(with = "super::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub to: Address,
    /// The amount, in the asset's smallest unit.
    pub value: Amount,
    /// Unix seconds; the transfer is valid strictly after (x402 clients send `now - 600`).
    pub valid_after: Amount,
    /// Unix seconds; the transfer is valid strictly before (`now + maxTimeoutSeconds`).
    pub valid_before: Amount,
    /// Random 32 bytes.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub nonce: B256,
}

/// Why an `X-PAYMENT` value is not an x402 V1 payment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadDecodeError {
    /// Longer than [`MAX_PAYLOAD_HEADER`].
    #[error("X-PAYMENT header of {0} bytes is too large (at most {MAX_PAYLOAD_HEADER})")]
    TooLarge(usize),
    /// Not base64.
    #[error("X-PAYMENT is not base64")]
    Base64(#[source] base64::DecodeError),
    /// Not JSON, or JSON of another shape.
    #[error("X-PAYMENT is not an x402 payment payload")]
    Json(#[source] serde_json::Error),
    /// No integer `x402Version`.
    #[error("X-PAYMENT has no x402Version")]
    MissingVersion,
    /// A version other than 1 (an x402 V2 payload is read by
    /// [`PaymentPayloadV2`](super::v2::PaymentPayloadV2)).
    #[error("x402Version {0} is not an x402 V1 payload")]
    UnsupportedVersion(u64),
}

impl PayloadDecodeError {
    /// The x402 reason code to answer with.
    pub fn reason(&self) -> ErrorReason {
        match self {
            Self::MissingVersion | Self::UnsupportedVersion(_) => ErrorReason::InvalidX402Version,
            Self::TooLarge(_) | Self::Base64(_) | Self::Json(_) => ErrorReason::InvalidPayload,
        }
    }
}

impl PaymentPayload {
    /// The `X-PAYMENT` form: base64 (standard alphabet, padded) of the JSON, as x402 clients
    /// send it.
    pub fn encode_header(&self) -> String {
        codec::encode(self)
    }

    /// Parses an `X-PAYMENT` value as an x402 V1 payment, with [`crate::decode_x_payment`] (the
    /// one decoder of `X-PAYMENT`): anything but an x402 V1 payload is an error. The version is
    /// checked before the shape, so an x402 V2 payload is reported as
    /// [`PayloadDecodeError::UnsupportedVersion`] rather than as malformed.
    pub fn decode_header(header: &str) -> Result<Self, PayloadDecodeError> {
        // Measured with any surrounding white space, before the decoder trims it.
        if header.len() > MAX_PAYLOAD_HEADER {
            return Err(PayloadDecodeError::TooLarge(header.len()));
        }
        match crate::decode_x_payment(header) {
            Ok(XPayment::X402(payload)) => Ok(*payload),
            Ok(XPayment::UnsupportedVersion {
                x402_version: Some(v),
            }) => Err(PayloadDecodeError::UnsupportedVersion(v)),
            Ok(XPayment::X402V2(_)) | Err(XPaymentError::MalformedV2Payload(_)) => {
                Err(PayloadDecodeError::UnsupportedVersion(2))
            }
            // No integer `x402Version`: read as a proof, or as nothing the decoder knows (the
            // proof size limit applies only to values without `x402Version`).
            Ok(XPayment::UnsupportedVersion { x402_version: None } | XPayment::Proof(_))
            | Err(
                XPaymentError::TooLarge { .. }
                | XPaymentError::UnknownProofVersion(_)
                | XPaymentError::MalformedProof(_),
            ) => Err(PayloadDecodeError::MissingVersion),
            Err(XPaymentError::NotBase64(e)) => Err(PayloadDecodeError::Base64(e)),
            Err(XPaymentError::NotJson(e)) => Err(PayloadDecodeError::Json(e)),
            Err(XPaymentError::MalformedPayload(e)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::{Engine as _, engine::general_purpose::STANDARD};
    use serde_json::{Value, json};

    use crate::fixtures::payload;

    use super::*;

    #[test]
    fn header_round_trip() {
        let p = payload();
        assert_eq!(
            PaymentPayload::decode_header(&p.encode_header()).unwrap(),
            p
        );
        // Unpadded input is accepted too.
        let unpadded = p.encode_header().trim_end_matches('=').to_owned();
        assert_eq!(PaymentPayload::decode_header(&unpadded).unwrap(), p);
    }

    #[test]
    fn header_errors_are_typed() {
        assert!(matches!(
            PaymentPayload::decode_header("***"),
            Err(PayloadDecodeError::Base64(_))
        ));
        assert!(matches!(
            PaymentPayload::decode_header("aGVsbG8="),
            Err(PayloadDecodeError::Json(_))
        ));
        let big = "A".repeat(MAX_PAYLOAD_HEADER + 1);
        assert!(matches!(
            PaymentPayload::decode_header(&big),
            Err(PayloadDecodeError::TooLarge(_))
        ));
        let enc = |v: Value| STANDARD.encode(v.to_string());
        // An x402 V2 payload has another shape; its version is what gets reported.
        let v2 = json!({"x402Version": 2, "accepted": {"scheme": "exact", "network": "eip155:84532"}, "payload": {}});
        let err = PaymentPayload::decode_header(&enc(v2)).unwrap_err();
        assert!(matches!(err, PayloadDecodeError::UnsupportedVersion(2)));
        assert_eq!(err.reason(), ErrorReason::InvalidX402Version);
        let none = json!({"scheme": "exact"});
        assert!(matches!(
            PaymentPayload::decode_header(&enc(none)),
            Err(PayloadDecodeError::MissingVersion)
        ));
        let mut bad = serde_json::to_value(payload()).unwrap();
        bad["payload"]["authorization"]["value"] = json!(10000);
        let err = PaymentPayload::decode_header(&enc(bad)).unwrap_err();
        assert!(matches!(err, PayloadDecodeError::Json(_)));
        assert_eq!(err.reason(), ErrorReason::InvalidPayload);
    }
}
