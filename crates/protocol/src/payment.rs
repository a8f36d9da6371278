//! The spec's one-time payment messages: the client's `signedPayment` for the facilitator's
//! `/authorize`, and the facilitator's signed payment proof that travels in `X-PAYMENT`.

use alloy::primitives::{Address, B256, Bytes};
use serde::{Deserialize, Serialize};

use crate::{Amount, Network, codec};

/// The body of `POST /authorize`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthorizeRequest {
    /// The client-signed transfer.
    pub signed_payment: SignedPayment,
    /// The URL of the resource the payment is for, as the client was offered it (the x402
    /// `resource` of the 402's terms). Optional and not signed: it labels the settlement in the
    /// provider's analytics and is not part of the payment or of its idempotency check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// A random 32-byte secret of the client's. The first request binds the settlement to it:
    /// a repeat of the request gets the proof only with the same `claim`, and the status URL
    /// carries `keccak256(claim)`, so someone who copies the signed authorization from the chain
    /// cannot collect the proof and spend it first. Optional (without it, whoever presents the
    /// signed payment gets the proof); not signed, not part of the idempotency check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Hash32>))]
    pub claim: Option<B256>,
}

/// A client-signed transfer: the terms it pays and the EIP-3009 authorization that pays them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignedPayment {
    /// Network name (e.g. `base-sepolia`).
    pub network: Network,
    /// Token contract.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub token: Address,
    /// The recipient named in the payment terms.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub pay_to: Address,
    /// The price, in the token's smallest unit (the facilitator's fee is taken from it).
    pub amount: Amount,
    /// The request reference from the 402 terms.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub memo: B256,
    /// The payer's EIP-3009 `ReceiveWithAuthorization` to the facilitator's router.
    pub authorization: Eip3009Authorization,
}

/// An EIP-3009 authorization with its signature (65 bytes `r ‖ s ‖ v`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Eip3009Authorization {
    /// The payer.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub from: Address,
    /// The payee of the authorization: the router for `/authorize`.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub to: Address,
    /// The amount authorized.
    pub value: Amount,
    /// Unix seconds; valid strictly after.
    pub valid_after: Amount,
    /// Unix seconds; valid strictly before.
    pub valid_before: Amount,
    /// 32-byte nonce; for the router, `keccak256(abi.encode(payTo, memo, fee))`.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub nonce: B256,
    /// The payer's EIP-712 signature.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
}

/// A payment proof: the facilitator's EIP-712 attestation that a payment settled on-chain. Sent
/// by clients as base64 JSON in `X-PAYMENT`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PaymentProof {
    /// Always 1.
    pub version: u8,
    /// Network name.
    pub network: Network,
    /// Chain id of the network.
    pub chain_id: u64,
    /// Token contract.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub token: Address,
    /// Who paid.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub payer: Address,
    /// Who was paid.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub pay_to: Address,
    /// Gross amount paid (the payee received `amount - fee`).
    pub amount: Amount,
    /// The facilitator's fee.
    pub fee: Amount,
    /// The request reference the payment was for.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub memo: B256,
    /// The settlement transaction.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub tx_hash: B256,
    /// Its block.
    pub block: u64,
    /// When the proof was issued (unix seconds).
    pub issued_at: u64,
    /// When the proof stops being accepted (unix seconds).
    pub expiry: u64,
    /// The facilitator's proof-signing address.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub signer: Address,
    /// EIP-712 signature over the fields above (see `tollgate_chain::authorization::ProofClaims`).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
}

/// Why an `X-PAYMENT` value is not a proof.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProofDecodeError {
    /// Larger than any proof can be.
    #[error("X-PAYMENT header of {0} bytes is too large")]
    TooLarge(usize),
    /// Not base64.
    #[error("X-PAYMENT is not base64: {0}")]
    Base64(String),
    /// Not the proof's JSON.
    #[error("X-PAYMENT is not a payment proof: {0}")]
    Json(String),
    /// A proof version this code does not know.
    #[error("unsupported proof version {0}")]
    Version(u8),
}

/// The largest `X-PAYMENT` value accepted (encoded).
pub const MAX_PAYMENT_HEADER: usize = 8 * 1024;

impl PaymentProof {
    /// The `X-PAYMENT` form: base64 (standard alphabet, padded) of the JSON.
    pub fn encode(&self) -> String {
        codec::encode(self)
    }

    /// Parses the `X-PAYMENT` form of a proof, with [`crate::decode_x_payment`] (the one
    /// decoder of `X-PAYMENT`): anything but a version 1 proof is an error.
    pub fn decode(header: &str) -> Result<Self, ProofDecodeError> {
        use crate::{XPayment, XPaymentError};
        if header.len() > MAX_PAYMENT_HEADER {
            return Err(ProofDecodeError::TooLarge(header.len()));
        }
        match crate::decode_x_payment(header) {
            Ok(XPayment::Proof(proof)) => Ok(*proof),
            Ok(XPayment::X402(_) | XPayment::X402V2(_) | XPayment::UnsupportedVersion { .. })
            | Err(XPaymentError::MalformedPayload(_) | XPaymentError::MalformedV2Payload(_)) => {
                Err(ProofDecodeError::Json(
                    "an x402 payment payload, not a payment proof".into(),
                ))
            }
            Err(XPaymentError::TooLarge { len, .. }) => Err(ProofDecodeError::TooLarge(len)),
            Err(XPaymentError::NotBase64(e)) => Err(ProofDecodeError::Base64(e.to_string())),
            Err(XPaymentError::NotJson(e) | XPaymentError::MalformedProof(e)) => {
                Err(ProofDecodeError::Json(e.to_string()))
            }
            Err(XPaymentError::UnknownProofVersion(Some(v))) => Err(u8::try_from(v).map_or_else(
                |_| ProofDecodeError::Json(format!("unknown proof version {v}")),
                ProofDecodeError::Version,
            )),
            Err(XPaymentError::UnknownProofVersion(None)) => {
                Err(ProofDecodeError::Json("no integer proof version".into()))
            }
        }
    }
}

/// The answer of `POST /authorize` once the transfer is confirmed (HTTP 200).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuthorizeResponse {
    /// `"confirmed"`.
    pub status: SettlementStatus,
    /// The proof, base64, ready for `X-PAYMENT`.
    pub proof: String,
    /// The proof's fields, decoded.
    pub payment: PaymentProof,
}

/// The answer of `POST /authorize` when the transfer was broadcast but not yet confirmed (HTTP
/// 202), and of `GET` on its status URL until it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PendingResponse {
    /// `"pending"`.
    pub status: SettlementStatus,
    /// The broadcast transaction.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Hash32>))]
    pub tx_hash: Option<B256>,
    /// Where to poll: `GET` returns 200 with the proof once confirmed.
    pub status_url: String,
}

/// Where a settlement stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SettlementStatus {
    /// Accepted, not yet broadcast.
    Received,
    /// Broadcast.
    Submitted,
    /// Broadcast, confirmation not seen in time; still being watched.
    Pending,
    /// Mined and confirmed; the proof is issued.
    Confirmed,
    /// Failed for good (reverted, or refused before broadcast).
    Failed,
}

impl SettlementStatus {
    /// The name stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Received => "received",
            Self::Submitted => "submitted",
            Self::Pending => "pending",
            Self::Confirmed => "confirmed",
            Self::Failed => "failed",
        }
    }

    /// From the stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "received" => Self::Received,
            "submitted" => Self::Submitted,
            "pending" => Self::Pending,
            "confirmed" => Self::Confirmed,
            "failed" => Self::Failed,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::proof;

    #[test]
    fn proof_round_trips_through_the_header_form() {
        let p = proof();
        assert_eq!(PaymentProof::decode(&p.encode()).unwrap(), p);
    }

    #[test]
    fn proof_golden_json() {
        let v = serde_json::to_value(proof()).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "amount",
                "block",
                "chainId",
                "expiry",
                "fee",
                "issuedAt",
                "memo",
                "network",
                "payTo",
                "payer",
                "signature",
                "signer",
                "token",
                "txHash",
                "version"
            ]
        );
        assert_eq!(v["amount"], "500000");
        assert_eq!(v["payTo"], Address::repeat_byte(3).to_checksum(None));
    }

    #[test]
    fn bad_headers_are_typed() {
        assert!(matches!(
            PaymentProof::decode("***"),
            Err(ProofDecodeError::Base64(_))
        ));
        assert!(matches!(
            PaymentProof::decode("aGVsbG8="),
            Err(ProofDecodeError::Json(_))
        ));
        assert!(matches!(
            PaymentProof::decode(&"A".repeat(MAX_PAYMENT_HEADER + 1)),
            Err(ProofDecodeError::TooLarge(_))
        ));
        let mut p = proof();
        p.version = 2;
        assert!(matches!(
            PaymentProof::decode(&p.encode()),
            Err(ProofDecodeError::Version(2))
        ));
    }

    #[test]
    fn signed_payment_rejects_unknown_fields_and_bad_amounts() {
        let good = r#"{"signedPayment":{"network":"base","token":"0x0101010101010101010101010101010101010101","payTo":"0x0101010101010101010101010101010101010101","amount":"5","memo":"0x0404040404040404040404040404040404040404040404040404040404040404","authorization":{"from":"0x0101010101010101010101010101010101010101","to":"0x0101010101010101010101010101010101010101","value":"5","validAfter":"0","validBefore":"10","nonce":"0x0404040404040404040404040404040404040404040404040404040404040404","signature":"0x00"}}}"#;
        serde_json::from_str::<AuthorizeRequest>(good).unwrap();
        assert!(
            serde_json::from_str::<AuthorizeRequest>(
                &good.replace("\"amount\":\"5\"", "\"amount\":5")
            )
            .is_err()
        );
        assert!(
            serde_json::from_str::<AuthorizeRequest>(
                &good.replace("\"network\"", "\"extra\":1,\"network\"")
            )
            .is_err()
        );
    }
}
