//! The `Authorization: Payment <token>` credential and its EVM `authorization` payload.

use alloy::primitives::{Address, B256, Bytes, U256};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    CREDENTIAL_AUTHORIZATION, Challenge, MAX_CREDENTIAL_LEN, MppError, SCHEME, b64_lenient, b64url,
    params, wire,
};
use crate::{
    Amount, Network,
    x402::{ExactEvmAuthorization, ExactEvmPayload, PaymentPayload, SCHEME_EXACT, X402_VERSION},
};

/// An `authorization` credential's payload: an EIP-3009 `TransferWithAuthorization` and its
/// signature. On the wire (mppx's `AuthorizationPayloadSchema`):
/// `{"from","nonce","signature","to","type":"authorization","validAfter","validBefore","value"}`,
/// addresses `0x` and 40 hex digits (written EIP-55), the nonce `0x` and 64, the numbers decimal
/// strings. Reading refuses any other `type`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PayloadWire", into = "PayloadWire")]
pub struct AuthorizationPayload {
    /// The payer.
    pub from: Address,
    /// The recipient; must be the request's `recipient`.
    pub to: Address,
    /// The amount in the token's smallest unit; must be the request's `amount`.
    pub value: U256,
    /// Unix seconds; valid strictly after (mppx clients send `0`).
    pub valid_after: U256,
    /// Unix seconds; valid strictly before (mppx clients send the challenge's `expires`).
    pub valid_before: U256,
    /// [`Challenge::authorization_nonce`] of the challenge paid.
    pub nonce: B256,
    /// The EIP-712 signature: 65 bytes `r ‖ s ‖ v` for an EOA (longer for smart wallets).
    pub signature: Bytes,
}

/// The payload's JSON, keys in alphabetical order as mppx's clients write them.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PayloadWire {
    #[serde(with = "wire::address")]
    from: Address,
    #[serde(with = "wire::b256")]
    nonce: B256,
    signature: Signature,
    #[serde(with = "wire::address")]
    to: Address,
    r#type: String,
    #[serde(with = "wire::decimal")]
    valid_after: U256,
    #[serde(with = "wire::decimal")]
    valid_before: U256,
    #[serde(with = "wire::decimal")]
    value: U256,
}

/// `^0x[0-9a-fA-F]+$` of whole bytes.
struct Signature(Bytes);

impl Serialize for Signature {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.strip_prefix("0x") {
            Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => hex
                .parse::<Bytes>()
                .map(Self)
                .map_err(serde::de::Error::custom),
            _ => Err(serde::de::Error::custom(
                "the signature is not 0x and hex digits",
            )),
        }
    }
}

impl TryFrom<PayloadWire> for AuthorizationPayload {
    type Error = String;

    fn try_from(w: PayloadWire) -> Result<Self, String> {
        if w.r#type != CREDENTIAL_AUTHORIZATION {
            return Err(format!(
                "payload type {:?} is not {CREDENTIAL_AUTHORIZATION:?}",
                w.r#type
            ));
        }
        Ok(Self {
            from: w.from,
            to: w.to,
            value: w.value,
            valid_after: w.valid_after,
            valid_before: w.valid_before,
            nonce: w.nonce,
            signature: w.signature.0,
        })
    }
}

impl From<AuthorizationPayload> for PayloadWire {
    fn from(p: AuthorizationPayload) -> Self {
        Self {
            from: p.from,
            nonce: p.nonce,
            signature: Signature(p.signature),
            to: p.to,
            r#type: CREDENTIAL_AUTHORIZATION.to_owned(),
            valid_after: p.valid_after,
            valid_before: p.valid_before,
            value: p.value,
        }
    }
}

impl AuthorizationPayload {
    /// The same signed authorization as an x402 `exact` EVM payload (identical fields; the
    /// EIP-712 message is the same).
    pub fn to_exact_evm(&self) -> ExactEvmPayload {
        ExactEvmPayload {
            signature: self.signature.clone(),
            authorization: ExactEvmAuthorization {
                from: self.from,
                to: self.to,
                value: Amount(self.value),
                valid_after: Amount(self.valid_after),
                valid_before: Amount(self.valid_before),
                nonce: self.nonce,
            },
        }
    }

    /// Its x402 V1 twin, which a facilitator settles: `x402Version` 1, scheme `exact`, on
    /// `network`.
    pub fn to_x402_payload(&self, network: Network) -> PaymentPayload {
        PaymentPayload {
            x402_version: X402_VERSION,
            scheme: SCHEME_EXACT.to_owned(),
            network,
            payload: self.to_exact_evm(),
        }
    }

    /// The payload of an x402 `exact` EVM authorization (the inverse of
    /// [`AuthorizationPayload::to_exact_evm`]).
    pub fn from_exact_evm(exact: &ExactEvmPayload) -> Self {
        let a = &exact.authorization;
        Self {
            from: a.from,
            to: a.to,
            value: a.value.get(),
            valid_after: a.valid_after.get(),
            valid_before: a.valid_before.get(),
            nonce: a.nonce,
            signature: exact.signature.clone(),
        }
    }
}

/// A `Payment` credential: the challenge paid, echoed as received, the signed payload and the
/// payer's `did:pkh`. On the wire, `Authorization: Payment <base64url(JSON)>` with the JSON
/// `{"challenge":{…},"payload":{…},"source":"did:pkh:eip155:<chain id>:<EIP-55 from>"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Credential {
    /// The challenge paid, as received (`request` and `opaque` byte for byte).
    pub challenge: Challenge,
    /// The signed authorization.
    pub payload: AuthorizationPayload,
    /// `did:pkh:eip155:<chain id>:<EIP-55 from>` ([`Credential::source_for`]); optional.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl Credential {
    /// The token: base64url (no padding) of the credential's JSON.
    pub fn encode(&self) -> String {
        b64url(serde_json::to_vec(self).expect("a credential serializes"))
    }

    /// Reads a token (either base64 alphabet, padding optional, at most
    /// [`MAX_CREDENTIAL_LEN`]). As mppx tells them apart: a token that is not base64 JSON of an
    /// object with a well-formed `challenge` (and a string `source`, if any) is
    /// [`MppError::MalformedCredential`]; one whose `payload` is missing or is not an
    /// `authorization` payload is [`MppError::InvalidPayload`], which carries the challenge.
    pub fn decode(token: &str) -> Result<Self, MppError> {
        let malformed = |e| MppError::MalformedCredential(Box::new(e));
        let what = "credential";
        let token = token.trim();
        if token.len() > MAX_CREDENTIAL_LEN {
            return Err(malformed(MppError::TooLarge {
                what,
                len: token.len(),
                max: MAX_CREDENTIAL_LEN,
            }));
        }
        let bytes =
            b64_lenient(token).map_err(|source| malformed(MppError::Base64 { what, source }))?;
        let json = |source| malformed(MppError::Json { what, source });
        let mut value: Value = serde_json::from_slice(&bytes).map_err(json)?;
        let Some(object) = value.as_object_mut() else {
            return Err(malformed(MppError::InvalidParam {
                name: what,
                why: "not a JSON object",
            }));
        };
        let challenge = object
            .remove("challenge")
            .ok_or(malformed(MppError::MissingParam("challenge")))?;
        let challenge: Challenge = serde_json::from_value(challenge).map_err(json)?;
        let source = match object.remove("source") {
            None | Some(Value::Null) => None,
            Some(source) => Some(serde_json::from_value(source).map_err(json)?),
        };
        let payload = object.remove("payload").unwrap_or(Value::Null);
        let payload =
            serde_json::from_value(payload).map_err(|source| MppError::InvalidPayload {
                challenge: Box::new(challenge.clone()),
                source,
            })?;
        Ok(Self {
            challenge,
            payload,
            source,
        })
    }

    /// The credential in an `Authorization` value: the `Payment` scheme (any case) among
    /// possibly comma-separated schemes (mppx `Credential.extractPaymentScheme`). `None` if
    /// there is none.
    pub fn from_authorization(value: &str) -> Option<Result<Self, MppError>> {
        params::credential_token(value).map(Self::decode)
    }

    /// The `Authorization` value: `Payment <token>`.
    pub fn to_header_value(&self) -> String {
        format!("{SCHEME} {}", self.encode())
    }

    /// The `source` of a credential paid by `from` on `chain_id`:
    /// `did:pkh:eip155:<chain id>:<EIP-55 from>`.
    pub fn source_for(chain_id: u64, from: Address) -> String {
        format!("did:pkh:eip155:{chain_id}:{}", from.to_checksum(None))
    }
}
