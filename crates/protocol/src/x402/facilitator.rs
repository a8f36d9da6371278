//! The x402 V1 facilitator API (`POST /verify`, `POST /settle`, `GET /supported`) and the
//! `X-PAYMENT-RESPONSE` header a paid response carries.

use alloy::primitives::{Address, B256};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    ErrorReason, MAX_PAYLOAD_HEADER, PaymentPayload, PaymentRequirements, SCHEME_EXACT,
    X402_VERSION,
};
use crate::codec;

fn v1() -> u8 {
    X402_VERSION
}

/// The body of `POST /verify` (and of `POST /settle`: [`SettleRequest`]), as x402's
/// `useFacilitator` sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyRequest {
    /// The payload's version (x402 sends it; read as 1 when absent).
    #[serde(default = "v1")]
    pub x402_version: u8,
    /// The client's payment.
    pub payment_payload: PaymentPayload,
    /// The requirements it is meant to meet.
    pub payment_requirements: PaymentRequirements,
}

impl VerifyRequest {
    /// A V1 request.
    pub fn new(payment_payload: PaymentPayload, payment_requirements: PaymentRequirements) -> Self {
        Self {
            x402_version: payment_payload.x402_version,
            payment_payload,
            payment_requirements,
        }
    }
}

/// The body of `POST /settle`: the same as `/verify`'s.
pub type SettleRequest = VerifyRequest;

/// The answer of `POST /verify`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    /// Whether the payment would settle.
    pub is_valid: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<ErrorReason>,
    /// The payer (`authorization.from`); the coinbase facilitator sends it on both outcomes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::checksummed_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Address>))]
    pub payer: Option<Address>,
}

impl VerifyResponse {
    /// A valid payment by `payer`.
    pub fn valid(payer: Address) -> Self {
        Self {
            is_valid: true,
            invalid_reason: None,
            payer: Some(payer),
        }
    }

    /// A refused payment.
    pub fn invalid(reason: ErrorReason, payer: Option<Address>) -> Self {
        Self {
            is_valid: false,
            invalid_reason: Some(reason),
            payer,
        }
    }
}

/// The answer of `POST /settle`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// Whether the transfer is on chain.
    pub success: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<ErrorReason>,
    /// The payer.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::checksummed_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Address>))]
    pub payer: Option<Address>,
    /// The transaction hash (`0x` + 64 hex); `""` when nothing was sent.
    pub transaction: String,
    /// The network name, copied from the payload.
    ///
    /// A `String`, not a [`crate::Network`]: x402 facilitators answer a failed settlement with
    /// `""` here, and the answer must stay readable then.
    pub network: String,
}

impl SettleResponse {
    /// A settled payment.
    pub fn success(transaction: B256, network: impl Into<String>, payer: Address) -> Self {
        Self {
            success: true,
            error_reason: None,
            payer: Some(payer),
            transaction: transaction.to_string(),
            network: network.into(),
        }
    }

    /// A failed settlement; `transaction` is the reverted transaction, if one was sent.
    pub fn failure(
        reason: ErrorReason,
        network: impl Into<String>,
        payer: Option<Address>,
        transaction: Option<B256>,
    ) -> Self {
        Self {
            success: false,
            error_reason: Some(reason),
            payer,
            transaction: transaction.map(|t| t.to_string()).unwrap_or_default(),
            network: network.into(),
        }
    }

    /// The transaction hash, when `transaction` holds one.
    pub fn tx_hash(&self) -> Option<B256> {
        self.transaction.parse().ok()
    }
}

/// The answer of `GET /supported`: V1's `kinds`, and V2's `extensions` and `signers` (absent
/// from a V1 facilitator's answer, read as empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SupportedResponse {
    /// What the facilitator settles, V1 kinds (network names) and V2 kinds (CAIP-2 ids).
    pub kinds: Vec<SupportedKind>,
    /// The x402 V2 extensions the facilitator implements (`payment-identifier`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// The addresses that send settlement transactions, by CAIP-2 pattern (`eip155:*`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = std::collections::BTreeMap<String, Vec<crate::openapi::Address>>))]
    pub signers: std::collections::BTreeMap<String, Vec<Address>>,
}

/// One (version, scheme, network) a facilitator settles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    /// `1` or `2`.
    pub x402_version: u8,
    /// `"exact"`.
    pub scheme: String,
    /// The network: a V1 name in a V1 kind, a CAIP-2 id in a V2 kind.
    ///
    /// A `String`, not a [`crate::Network`]: this is read from foreign x402 facilitators'
    /// `/supported`, which may list networks in forms we do not know; refusing one would make
    /// the whole answer unreadable. A kind we cannot use is skipped where it is read.
    pub network: String,
    /// Scheme-specific data (a JSON object; Solana facilitators put `feePayer` here).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::object_or_null"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extra: Option<Value>,
}

impl SupportedKind {
    /// `exact` on `network`, V1.
    pub fn exact(network: impl Into<String>) -> Self {
        Self {
            x402_version: X402_VERSION,
            scheme: SCHEME_EXACT.to_owned(),
            network: network.into(),
            extra: None,
        }
    }

    /// `exact` on the CAIP-2 network `caip2`, V2.
    pub fn exact_v2(caip2: impl Into<String>) -> Self {
        Self {
            x402_version: super::v2::X402_VERSION_2,
            ..Self::exact(caip2)
        }
    }
}

/// The `X-PAYMENT-RESPONSE` header of a paid response: base64 JSON of the settlement.
/// x402-express sends its whole [`SettleResponse`] here; unknown fields are ignored on input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettlementResponseHeader {
    /// `true` on a paid response.
    pub success: bool,
    /// The settlement transaction hash.
    pub transaction: String,
    /// The network name.
    ///
    /// A `String`, not a [`crate::Network`]: this header comes from foreign x402 servers, whose
    /// network strings may be in forms we do not know; refusing one would make a paid response
    /// unreadable.
    pub network: String,
    /// The payer.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::checksummed_opt"
    )]
    pub payer: Option<Address>,
}

/// Why an `X-PAYMENT-RESPONSE` value could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettlementHeaderError {
    /// Longer than [`MAX_PAYLOAD_HEADER`].
    #[error("X-PAYMENT-RESPONSE header of {0} bytes is too large")]
    TooLarge(usize),
    /// Not base64.
    #[error("X-PAYMENT-RESPONSE is not base64")]
    Base64(#[source] base64::DecodeError),
    /// Not the settlement's JSON.
    #[error("X-PAYMENT-RESPONSE is not a settlement response")]
    Json(#[source] serde_json::Error),
}

impl SettlementResponseHeader {
    /// The header value.
    pub fn encode(&self) -> String {
        codec::encode(self)
    }

    /// Reads a header value.
    pub fn decode(header: &str) -> Result<Self, SettlementHeaderError> {
        codec::decode(header, MAX_PAYLOAD_HEADER).map_err(|e| match e {
            codec::DecodeError::TooLarge(len) => SettlementHeaderError::TooLarge(len),
            codec::DecodeError::Base64(e) => SettlementHeaderError::Base64(e),
            codec::DecodeError::Json(e) => SettlementHeaderError::Json(e),
        })
    }
}

impl From<&SettleResponse> for SettlementResponseHeader {
    fn from(r: &SettleResponse) -> Self {
        Self {
            success: r.success,
            transaction: r.transaction.clone(),
            network: r.network.clone(),
            payer: r.payer,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn payer_may_be_empty_on_input() {
        let v: VerifyResponse = serde_json::from_value(
            json!({"isValid": false, "invalidReason": "invalid_scheme", "payer": ""}),
        )
        .unwrap();
        assert_eq!(v.payer, None);
        let s: SettleResponse = serde_json::from_value(
            json!({"success": false, "errorReason": "invalid_scheme", "transaction": "", "network": "base", "payer": null}),
        )
        .unwrap();
        assert_eq!((s.payer, s.tx_hash()), (None, None));
    }

    #[test]
    fn settlement_header_round_trip() {
        let s = SettleResponse::success(
            B256::repeat_byte(0x5a),
            "base-sepolia",
            Address::repeat_byte(2),
        );
        let h = SettlementResponseHeader::from(&s);
        let back = SettlementResponseHeader::decode(&h.encode()).unwrap();
        assert_eq!(back, h);
        assert_eq!(s.tx_hash(), Some(B256::repeat_byte(0x5a)));
        assert!(matches!(
            SettlementResponseHeader::decode("%%"),
            Err(SettlementHeaderError::Base64(_))
        ));
    }
}
