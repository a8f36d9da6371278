//! The TOML shape as read, before validation: every table refuses unknown keys, every optional
//! key has its serde default. [`validate`](super::validate) turns it into a
//! [`Config`](super::Config).

use std::{fmt, net::SocketAddr};

use alloy::primitives::Address;
use serde::{Deserialize, Deserializer, de};
use tollgate_protocol::Amount;

use super::{
    DEFAULT_CONFIRMATIONS, DEFAULT_LISTEN, DEFAULT_STORE, DEFAULT_TOKEN_VERSION, Fees, Limits,
    ReplicasSection, Settlement, SubscriptionsSection, WebhooksSection,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default = "default_listen")]
    pub(super) listen: SocketAddr,
    #[serde(default)]
    pub(super) public_url: Option<String>,
    #[serde(default = "default_store")]
    pub(super) store: String,
    pub(super) keys: RawKeys,
    #[serde(default)]
    pub(super) fees: Fees,
    #[serde(default)]
    pub(super) settlement: Settlement,
    #[serde(default)]
    pub(super) limits: Limits,
    #[serde(default)]
    pub(super) server: tollgate_server::ServerConfig,
    #[serde(default)]
    pub(super) subscriptions: SubscriptionsSection,
    #[serde(default)]
    pub(super) webhooks: WebhooksSection,
    #[serde(default)]
    pub(super) replicas: ReplicasSection,
    #[serde(default)]
    pub(super) networks: Vec<RawNetwork>,
}

/// Kept as strings until validation so that a malformed inline key is reported by a typed error
/// that does not quote it (a TOML error would print the offending line).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKeys {
    pub(super) relayers: Vec<String>,
    pub(super) proof: String,
    #[serde(default)]
    pub(super) webhook_secrets: Option<String>,
    #[serde(default)]
    pub(super) webhook_secrets_previous: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNetwork {
    pub(super) name: String,
    #[serde(default)]
    pub(super) chain_id: Option<u64>,
    pub(super) rpc_url: String,
    #[serde(default)]
    pub(super) rpc_fallback_urls: Vec<String>,
    #[serde(default)]
    pub(super) public_rpc_url: Option<String>,
    #[serde(default)]
    pub(super) token: Option<Address>,
    #[serde(default)]
    pub(super) token_name: Option<String>,
    #[serde(default = "default_token_version")]
    pub(super) token_version: String,
    pub(super) router: Address,
    #[serde(default)]
    pub(super) subscriptions: Option<Address>,
    #[serde(default = "default_confirmations")]
    pub(super) confirmations: u64,
    #[serde(default)]
    pub(super) start_block: u64,
    #[serde(default)]
    pub(super) max_fee_gwei: Option<f64>,
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN
}
fn default_store() -> String {
    DEFAULT_STORE.to_owned()
}
fn default_token_version() -> String {
    DEFAULT_TOKEN_VERSION.to_owned()
}
fn default_confirmations() -> u64 {
    DEFAULT_CONFIRMATIONS
}

/// An amount as a decimal string or a non-negative TOML integer.
pub(super) fn de_amount<'de, D: Deserializer<'de>>(d: D) -> Result<Amount, D::Error> {
    struct Visitor;
    impl de::Visitor<'_> for Visitor {
        type Value = Amount;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(
                "an amount in the token's smallest unit: a decimal string (\"1000\") or an integer",
            )
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Amount, E> {
            v.parse().map_err(E::custom)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Amount, E> {
            Ok(Amount::from_units(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Amount, E> {
            u64::try_from(v)
                .map(Amount::from_units)
                .map_err(|_| E::custom("an amount cannot be negative"))
        }
    }
    d.deserialize_any(Visitor)
}
