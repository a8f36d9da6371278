//! The `Payment-Receipt` header of a paid response.

use serde::{Deserialize, Serialize};

use super::{METHOD_EVM, MppError, b64url, request::decode_object, time::parse_rfc3339};

/// The `Payment-Receipt` of a paid response: base64url (no padding) of
/// `{"method","reference","status":"success","timestamp"}`, plus, from Tollgate, the
/// `challengeId` and `chainId` draft-evm-charge-01 lists (mppx 0.11.0 sends neither; its schema
/// lets them through). Reading ignores unknown fields and, as mppx does, refuses a `status`
/// other than `success` and a `timestamp` that is not RFC 3339.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// The payment method (`evm`).
    pub method: String,
    /// The method's reference: for `evm`, the settlement's transaction hash.
    pub reference: String,
    /// Always `success` (failures are 402 problems).
    pub status: String,
    /// When it was settled, RFC 3339 ([`rfc3339_millis`](super::rfc3339_millis)).
    pub timestamp: String,
    /// The id of the challenge paid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge_id: Option<String>,
    /// The chain the payment settled on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<u64>,
    /// The request's `externalId`, echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
}

/// The only receipt status.
const SUCCESS: &str = "success";

impl Receipt {
    /// A successful `evm` receipt for the transaction `reference`, settled at `unix_ms`.
    pub fn evm(reference: impl Into<String>, unix_ms: u64) -> Self {
        Self {
            method: METHOD_EVM.to_owned(),
            reference: reference.into(),
            status: SUCCESS.to_owned(),
            timestamp: super::rfc3339_millis(unix_ms),
            challenge_id: None,
            chain_id: None,
            external_id: None,
        }
    }

    /// The header value.
    pub fn encode(&self) -> String {
        b64url(serde_json::to_vec(self).expect("a receipt serializes"))
    }

    /// Reads a header value (either base64 alphabet, padding optional).
    pub fn decode(s: &str) -> Result<Self, MppError> {
        let wrap = |e| MppError::Receipt(Box::new(e));
        let value = decode_object("receipt", s, 16 * 1024).map_err(wrap)?;
        let receipt: Self = serde_json::from_value(value).map_err(|source| {
            wrap(MppError::Json {
                what: "receipt",
                source,
            })
        })?;
        if receipt.status != SUCCESS {
            return Err(wrap(MppError::InvalidParam {
                name: "status",
                why: "not \"success\"",
            }));
        }
        parse_rfc3339(&receipt.timestamp).map_err(wrap)?;
        Ok(receipt)
    }
}
