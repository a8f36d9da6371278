//! The EVM charge `request` object and the `opaque` route binding.

use std::collections::BTreeMap;

use alloy::primitives::Address;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{CREDENTIAL_AUTHORIZATION, MAX_REQUEST_LEN, MppError, b64_lenient, b64url, jcs, wire};
use crate::Amount;

/// The `request` of an EVM `charge` challenge: what to pay, to whom, on which chain. On the wire
/// it is base64url (no padding) of its JCS form, byte for byte what mppx writes: keys sorted,
/// no white space, EIP-55 addresses, the amount a decimal string and the chain id a number:
///
/// ```text
/// {"amount":"10000","currency":"0x5FbD…0aa3","methodDetails":{"chainId":31337,
///  "credentialTypes":["authorization"],"decimals":6},"recipient":"0x7099…79c8"}
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChargeRequest {
    /// The price, in the token's smallest unit (mppx compares the payload's `value` with it
    /// exactly).
    pub amount: Amount,
    /// The ERC-3009 token (and the EIP-712 domain's `verifyingContract`).
    #[serde(with = "wire::address")]
    pub currency: Address,
    /// Who is paid (the authorization's `to`).
    #[serde(with = "wire::address")]
    pub recipient: Address,
    /// The chain and the accepted credential types.
    pub method_details: EvmMethodDetails,
    /// A description bound into the request (mppx's route option; absent if `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The merchant's own reference (mppx's `externalId`; absent if `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
}

/// `methodDetails` of an EVM charge request. Fields this version does not model
/// (`permit2Address`, `splits`, a later draft's `memo`…) are kept in [`EvmMethodDetails::extra`],
/// so that a request read from elsewhere writes back to the same bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvmMethodDetails {
    /// The EIP-155 chain id (a JSON number).
    pub chain_id: u64,
    /// The credential types the server accepts; mppx 0.11.0 knows only
    /// [`CREDENTIAL_AUTHORIZATION`]. Left out when empty (mppx reads it as optional and always
    /// writes it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credential_types: Vec<String>,
    /// The token's decimals.
    pub decimals: u8,
    /// Every other field, as received.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl EvmMethodDetails {
    /// Details accepting the `authorization` credential only, as mppx issues them.
    pub fn authorization(chain_id: u64, decimals: u8) -> Self {
        Self {
            chain_id,
            credential_types: vec![CREDENTIAL_AUTHORIZATION.to_owned()],
            decimals,
            extra: BTreeMap::new(),
        }
    }
}

impl ChargeRequest {
    /// A request for `amount` of `currency` to `recipient` on `chain_id`, payable with an
    /// `authorization` credential, with no description or external id.
    pub fn new(
        amount: Amount,
        currency: Address,
        recipient: Address,
        chain_id: u64,
        decimals: u8,
    ) -> Self {
        Self {
            amount,
            currency,
            recipient,
            method_details: EvmMethodDetails::authorization(chain_id, decimals),
            description: None,
            external_id: None,
        }
    }

    /// The JCS text of the request (what [`ChargeRequest::encode`] encodes).
    pub fn to_jcs(&self) -> String {
        jcs::canonicalize(&serde_json::to_value(self).expect("a charge request serializes"))
    }

    /// The `request` auth-param: base64url, no padding, of [`ChargeRequest::to_jcs`].
    pub fn encode(&self) -> String {
        b64url(self.to_jcs())
    }

    /// Reads a `request` auth-param (either base64 alphabet, padding optional). Refuses one
    /// longer than [`MAX_REQUEST_LEN`], and one that is not an EVM charge request (mppx's
    /// schema: decimal amount, `0x` addresses, numeric chain id).
    pub fn decode(s: &str) -> Result<Self, MppError> {
        let value = decode_object("request", s, MAX_REQUEST_LEN)?;
        serde_json::from_value(value).map_err(|source| MppError::Json {
            what: "request",
            source,
        })
    }

    /// Whether the request accepts an `authorization` credential (mppx's clients and servers
    /// both require it).
    pub fn accepts_authorization(&self) -> bool {
        self.method_details
            .credential_types
            .iter()
            .any(|t| t == CREDENTIAL_AUTHORIZATION)
    }

    /// Whether the request splits the payment between recipients (`methodDetails.splits`), which
    /// an `authorization` credential cannot pay: mppx refuses such a request for it.
    pub fn has_splits(&self) -> bool {
        self.method_details.extra.contains_key("splits")
    }
}

/// Base64 JSON of an object, at most `max` characters.
pub(super) fn decode_object(what: &'static str, s: &str, max: usize) -> Result<Value, MppError> {
    if s.len() > max {
        return Err(MppError::TooLarge {
            what,
            len: s.len(),
            max,
        });
    }
    let bytes = b64_lenient(s).map_err(|source| MppError::Base64 { what, source })?;
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|source| MppError::Json { what, source })?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(MppError::InvalidParam {
            name: what,
            why: "not a JSON object",
        })
    }
}

/// Whether `s` is exactly base64url (no padding) of the JCS form of the JSON object it decodes
/// to: what mppx's `Challenge.verify` HMACs in place of the echoed `request`.
pub(super) fn is_canonical_object(s: &str) -> bool {
    decode_object("request", s, MAX_REQUEST_LEN)
        .is_ok_and(|value| b64url(jcs::canonicalize(&value)) == s)
}

/// What a Tollgate gate binds into a challenge's `opaque`: an object of strings (the route's
/// method and resource, and a random salt that makes every challenge unique). On the wire it is
/// base64url (no padding) of its JCS form, as mppx writes `opaque` from its `meta`; the
/// challenge id's HMAC covers it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Opaque(pub BTreeMap<String, String>);

impl Opaque {
    /// The `opaque` auth-param.
    pub fn encode(&self) -> String {
        b64url(jcs::canonicalize(
            &serde_json::to_value(&self.0).expect("a string map serializes"),
        ))
    }

    /// Reads an `opaque` auth-param: base64 (either alphabet, padding optional) of a JSON object
    /// of strings.
    pub fn decode(s: &str) -> Result<Self, MppError> {
        let value = decode_object("opaque", s, MAX_REQUEST_LEN)?;
        serde_json::from_value(value)
            .map(Self)
            .map_err(|source| MppError::Json {
                what: "opaque",
                source,
            })
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Sets `key` (builder style).
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.insert(key.into(), value.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use alloy::primitives::address;

    use super::*;

    #[test]
    fn writes_the_jcs_form_mppx_writes() {
        let r = ChargeRequest::new(
            Amount::from_units(10_000),
            address!("0x5FbDB2315678afecb367f032d93F642f64180aa3"),
            address!("0x70997970c51812dc3a010c7d01b50e44d17b79c8"),
            31337,
            6,
        );
        assert_eq!(
            r.to_jcs(),
            r#"{"amount":"10000","currency":"0x5FbDB2315678afecb367f032d93F642f64180aa3","methodDetails":{"chainId":31337,"credentialTypes":["authorization"],"decimals":6},"recipient":"0x70997970c51812dC3a010C7d01B50E44D17b79c8"}"#
        );
        assert!(r.accepts_authorization() && !r.has_splits());
        assert_eq!(ChargeRequest::decode(&r.encode()).unwrap(), r);
    }

    #[test]
    fn opaque_is_sorted_string_json() {
        let o = Opaque::default()
            .with("resource", "/weather")
            .with("method", "GET");
        let text = String::from_utf8(b64_lenient(&o.encode()).unwrap()).unwrap();
        assert_eq!(text, r#"{"method":"GET","resource":"/weather"}"#);
        assert_eq!(
            Opaque::decode(&o.encode()).unwrap().get("method"),
            Some("GET")
        );
        assert!(Opaque::decode(&b64url(r#"{"n":1}"#)).is_err());
        assert!(Opaque::decode(&b64url("[]")).is_err());
    }
}
