//! One-time payments through the facilitator: `POST /authorize`, its status URL
//! `GET /settlements/{key}?token=`, and `POST /proofs/verify`.

use alloy::primitives::{Address, B256, U256, keccak256};
use serde::{Deserialize, Serialize};

use crate::PaymentProof;
pub use crate::payment::{
    AuthorizeRequest, AuthorizeResponse, Eip3009Authorization, PendingResponse, SettlementStatus,
    SignedPayment,
};

/// The idempotency key of an EIP-3009 authorization, one per (chain, token, payer, nonce):
/// `keccak256(abi.encode(chainId, token, from, nonce))`. A settlement's status URL is
/// `/settlements/{key}`.
pub fn settlement_key(chain_id: u64, token: Address, from: Address, nonce: B256) -> B256 {
    let mut words = [0u8; 128];
    words[..32].copy_from_slice(&U256::from(chain_id).to_be_bytes::<32>());
    words[44..64].copy_from_slice(token.as_slice());
    words[76..96].copy_from_slice(from.as_slice());
    words[96..].copy_from_slice(nonce.as_slice());
    keccak256(words)
}

/// The query of `GET /settlements/{key}`: `token = keccak256(claim)` when the settlement was
/// authorized with a `claim`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(deny_unknown_fields)]
pub struct StatusQuery {
    /// `keccak256(claim)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<crate::openapi::Hash32>))]
    pub token: Option<B256>,
}

/// The body of `POST /proofs/verify`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct VerifyProofRequest {
    /// The proof as `X-PAYMENT` carries it (base64 JSON).
    pub proof: String,
}

/// The answer of `POST /proofs/verify` (always HTTP 200 for a readable request).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyProofResponse {
    /// Whether this facilitator issued the proof for a confirmed settlement, unexpired.
    pub valid: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The proof's fields, when it decoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<PaymentProof>,
}

#[cfg(test)]
mod tests {
    use alloy::sol_types::SolValue;

    use super::*;

    #[test]
    fn the_settlement_key_is_the_abi_encoded_tuple_hash() {
        let (token, from, nonce) = (
            Address::repeat_byte(1),
            Address::repeat_byte(2),
            B256::repeat_byte(3),
        );
        assert_eq!(
            settlement_key(84532, token, from, nonce),
            keccak256((U256::from(84532u64), token, from, nonce).abi_encode())
        );
    }
}
