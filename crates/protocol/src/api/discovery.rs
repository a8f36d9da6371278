//! `GET /.well-known/tollgate`: what a facilitator publishes about itself.

use std::collections::BTreeMap;

use alloy::primitives::Address;
use serde::{Deserialize, Serialize};

use crate::{Amount, network};

/// The path of the discovery document.
pub const WELL_KNOWN_PATH: &str = "/.well-known/tollgate";

/// How the router nonce of an `/authorize` authorization is derived, as the document states it.
pub const NONCE_DERIVATION: &str = "keccak256(abi.encode(payTo, memo, fee))";

/// `GET /.well-known/tollgate`: per network, the chain id, token, router and subscriptions
/// addresses, the fee, the chain's clock; and the proof-signer addresses. An agent reads it to
/// learn where to authorize and what nonce to derive, a gate to verify proofs offline.
///
/// Fields are declared in the order they are written (alphabetical).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WellKnown {
    /// The facilitator's public base URL.
    pub facilitator: String,
    /// Per network name.
    pub networks: BTreeMap<String, NetworkInfo>,
    /// How the router nonce is derived ([`NONCE_DERIVATION`]).
    pub nonce: String,
    /// Addresses whose proof signatures the facilitator stands behind.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::openapi::Address>))]
    pub proof_signers: Vec<Address>,
    /// Always 1.
    pub x402_version: u8,
}

/// One network a facilitator settles on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct NetworkInfo {
    /// EIP-155 chain id.
    pub chain_id: u64,
    /// The chain's clock (unix seconds) when the document was served: clients sign validity
    /// windows by it. Absent from facilitators that do not publish it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_time: Option<u64>,
    /// Confirmation depth the facilitator waits for.
    pub confirmations: u64,
    /// The token's decimals.
    pub decimals: u8,
    /// The fee per `/authorize` settlement, which the router nonce commits to.
    pub fee: Amount,
    /// The payment router an `/authorize` authorization pays.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub router: Address,
    /// A public JSON-RPC endpoint of the chain (`http(s)://`, no credentials) that gates may read
    /// subscriptions from, if the facilitator publishes one. Absent otherwise: the facilitator's
    /// own node URL is never published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc_url: Option<String>,
    /// The subscriptions contract, if the network has one (`null` otherwise).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Address>))]
    pub subscriptions: Option<Address>,
    /// The token settled.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub token: Address,
    /// Its EIP-712 domain name.
    pub token_name: String,
    /// Its EIP-712 domain version.
    pub token_version: String,
}

impl WellKnown {
    /// The entry for `name`: exact, or the same network under an alias (`base` and
    /// `base-mainnet`).
    pub fn network(&self, name: &str) -> Option<&NetworkInfo> {
        self.networks.get(name).or_else(|| {
            self.networks
                .iter()
                .find(|(n, _)| network::same_network(n, name))
                .map(|(_, info)| info)
        })
    }

    /// The network name and entry of the facilitator's only network with a subscriptions
    /// contract, if exactly one has one.
    pub fn only_subscription_network(&self) -> Option<(&str, &NetworkInfo)> {
        let mut with = self
            .networks
            .iter()
            .filter(|(_, i)| i.subscriptions.is_some());
        match (with.next(), with.next()) {
            (Some((n, i)), None) => Some((n.as_str(), i)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_reads_and_writes_the_published_shape() {
        let json = serde_json::json!({
            "facilitator": "http://127.0.0.1:8402",
            "networks": {
                "base-sepolia": {
                    "chainId": 84532,
                    "chainTime": 1_800_000_000u64,
                    "confirmations": 1,
                    "decimals": 6,
                    "fee": "1000",
                    "router": "0x1111111111111111111111111111111111111111",
                    "rpcUrl": "https://sepolia.base.org",
                    "subscriptions": null,
                    "token": "0x2222222222222222222222222222222222222222",
                    "tokenName": "USDC",
                    "tokenVersion": "2"
                }
            },
            "nonce": NONCE_DERIVATION,
            "proofSigners": ["0x3333333333333333333333333333333333333333"],
            "x402Version": 1
        });
        let wk: WellKnown = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&wk).unwrap(), json);
        assert_eq!(wk.network("base-sepolia").unwrap().chain_id, 84532);
        assert_eq!(
            wk.network("base-sepolia").unwrap().rpc_url.as_deref(),
            Some("https://sepolia.base.org")
        );
        assert!(wk.only_subscription_network().is_none());
        // Written in alphabetical order, as the facilitator always has.
        let text = serde_json::to_string(&wk).unwrap();
        assert!(text.starts_with(r#"{"facilitator":"#), "{text}");
        assert!(text.contains(r#"{"chainId":84532,"chainTime":"#), "{text}");
    }
}
