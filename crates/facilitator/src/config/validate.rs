//! Turning the TOML shape ([`raw`](super::raw)) into a [`Config`]: ranges, forms, required keys
//! that depend on others, built-in network defaults, duplicates. Every error names its key.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use alloy::primitives::Address;
use tollgate_protocol::network;

use super::{
    Config, ConfigError, DEFAULT_TOKEN_NAME, Keys, Network, RpcEndpoint, RpcUrl, SecretSource,
    SecretsKeySource, StoreUrl,
    raw::{RawConfig, RawKeys, RawNetwork},
};

fn nonzero(key: impl FnOnce() -> String, address: Address) -> Result<Address, ConfigError> {
    if address.is_zero() {
        Err(ConfigError::ZeroAddress { key: key() })
    } else {
        Ok(address)
    }
}

impl RawConfig {
    pub(super) fn validate(self) -> Result<Config, ConfigError> {
        let public_url = match self.public_url {
            Some(url) => validate_http_url(&url).ok_or_else(|| ConfigError::InvalidValue {
                key: "public_url".into(),
                reason: "expected an http:// or https:// base URL with a host and no query or fragment",
            })?,
            None => default_public_url(self.listen),
        };

        if !(self.store.starts_with("sqlite:")
            || self.store.starts_with("postgres://")
            || self.store.starts_with("postgresql://"))
        {
            return Err(ConfigError::InvalidValue {
                key: "store".into(),
                reason: "expected a `sqlite:` or `postgres://` URL",
            });
        }

        let keys = self.keys.validate()?;

        if let Some(recipient) = self.fees.fee_recipient {
            nonzero(|| "fees.fee_recipient".into(), recipient)?;
        }
        if self.settlement.max_validity_secs == 0 {
            return Err(ConfigError::InvalidValue {
                key: "settlement.max_validity_secs".into(),
                reason: "must be positive",
            });
        }
        if self.settlement.proof_ttl_secs == 0 {
            return Err(ConfigError::InvalidValue {
                key: "settlement.proof_ttl_secs".into(),
                reason: "must be positive",
            });
        }
        if self.settlement.relayer_floor_settlements == 0 {
            return Err(ConfigError::InvalidValue {
                key: "settlement.relayer_floor_settlements".into(),
                reason: "must be positive",
            });
        }
        for (key, value) in [
            (
                "subscriptions.relays_per_subscription_per_hour",
                self.subscriptions.relays_per_subscription_per_hour,
            ),
            (
                "subscriptions.relays_per_subscriber_per_day",
                self.subscriptions.relays_per_subscriber_per_day,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::InvalidValue {
                    key: key.into(),
                    reason: "must be positive (a subscriber must be able to pause and resume)",
                });
            }
        }
        if self.limits.max_body_bytes == 0 {
            return Err(ConfigError::InvalidValue {
                key: "limits.max_body_bytes".into(),
                reason: "must be positive",
            });
        }
        let server = self
            .server
            .limits()
            .map_err(|e| ConfigError::InvalidValue {
                key: format!("server.{}", e.field),
                reason: e.reason,
            })?;
        if server.request_timeout <= self.settlement.confirmation_timeout() {
            return Err(ConfigError::InvalidValue {
                key: "server.request_timeout_secs".into(),
                reason: "must exceed settlement.confirmation_timeout_ms (else /authorize answers 408 before 202)",
            });
        }

        if self.networks.is_empty() {
            return Err(ConfigError::Missing {
                key: "networks".into(),
                why: ": configure at least one [[networks]]",
            });
        }
        let mut networks: Vec<Network> = Vec::with_capacity(self.networks.len());
        for (i, raw) in self.networks.into_iter().enumerate() {
            let network = raw.validate(i)?;
            if let Some(j) = networks.iter().position(|n| n.name == network.name) {
                return Err(ConfigError::DuplicateNetwork {
                    key: format!("networks[{i}].name"),
                    name: network.name,
                    first: format!("networks[{j}].name"),
                });
            }
            networks.push(network);
        }

        Ok(Config {
            listen: self.listen,
            public_url,
            store: StoreUrl::new(self.store),
            keys,
            fees: self.fees,
            settlement: self.settlement,
            limits: self.limits,
            server,
            subscriptions: self.subscriptions,
            webhooks: self.webhooks,
            replicas: self.replicas,
            networks,
        })
    }
}

impl RawKeys {
    fn validate(self) -> Result<Keys, ConfigError> {
        let parse = |key: String, s: &str| {
            SecretSource::parse(s).map_err(|error| ConfigError::InvalidSecretSource { key, error })
        };
        if self.relayers.is_empty() {
            return Err(ConfigError::Missing {
                key: "keys.relayers".into(),
                why: ": list at least one relayer key",
            });
        }
        let mut relayers: Vec<SecretSource> = Vec::with_capacity(self.relayers.len());
        for (i, s) in self.relayers.iter().enumerate() {
            let source = parse(format!("keys.relayers[{i}]"), s)?;
            if let Some(j) = relayers.iter().position(|r| r.same_as(&source)) {
                return Err(ConfigError::SameKey {
                    key: format!("keys.relayers[{i}]"),
                    other: format!("keys.relayers[{j}]"),
                });
            }
            relayers.push(source);
        }
        let proof = parse("keys.proof".into(), &self.proof)?;
        if let Some(i) = relayers.iter().position(|r| r.same_as(&proof)) {
            return Err(ConfigError::SameKey {
                key: "keys.proof".into(),
                other: format!("keys.relayers[{i}]"),
            });
        }
        let webhook_secrets = self
            .webhook_secrets
            .as_deref()
            .map(|s| {
                SecretsKeySource::parse(s).map_err(|error| ConfigError::InvalidSecretSource {
                    key: "keys.webhook_secrets".into(),
                    error,
                })
            })
            .transpose()?;
        if webhook_secrets.is_none() && !self.webhook_secrets_previous.is_empty() {
            return Err(ConfigError::Missing {
                key: "keys.webhook_secrets".into(),
                why: " when keys.webhook_secrets_previous is set",
            });
        }
        let webhook_secrets_previous = self
            .webhook_secrets_previous
            .iter()
            .enumerate()
            .map(|(i, s)| {
                SecretsKeySource::parse(s).map_err(|error| ConfigError::InvalidSecretSource {
                    key: format!("keys.webhook_secrets_previous[{i}]"),
                    error,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Keys {
            relayers,
            proof,
            webhook_secrets,
            webhook_secrets_previous,
        })
    }
}

impl RawNetwork {
    fn validate(self, i: usize) -> Result<Network, ConfigError> {
        let key = |field: &str| format!("networks[{i}].{field}");
        let known = network::lookup(&self.name);
        let (name, chain_id, usdc) = match known {
            Some(known) => {
                if !known.evm {
                    return Err(ConfigError::NotEvm {
                        key: key("name"),
                        network: known.name.to_owned(),
                    });
                }
                if let Some(found) = self.chain_id
                    && found != known.chain_id
                {
                    return Err(ConfigError::ChainIdMismatch {
                        key: key("chain_id"),
                        network: known.name.to_owned(),
                        expected: known.chain_id,
                        found,
                    });
                }
                (
                    known.name.to_owned(),
                    known.chain_id,
                    known.usdc.zip(known.usdc_name),
                )
            }
            None => {
                if !valid_custom_name(&self.name) {
                    return Err(ConfigError::InvalidValue {
                        key: key("name"),
                        reason: "a custom network name is 1 to 64 lowercase letters, digits and `-`, \
                                 not starting or ending with `-`",
                    });
                }
                let chain_id = self.chain_id.ok_or_else(|| ConfigError::Missing {
                    key: key("chain_id"),
                    why: " for a network name that is not a built-in x402 network",
                })?;
                (self.name, chain_id, None)
            }
        };
        if chain_id == 0 {
            return Err(ConfigError::InvalidValue {
                key: key("chain_id"),
                reason: "must be positive",
            });
        }

        let token = match self.token.or(usdc.map(|(address, _)| address)) {
            Some(token) => nonzero(|| key("token"), token)?,
            None => {
                return Err(ConfigError::Missing {
                    key: key("token"),
                    why: " for a network with no built-in USDC address",
                });
            }
        };
        let router = nonzero(|| key("router"), self.router)?;
        let subscriptions = self
            .subscriptions
            .map(|a| nonzero(|| key("subscriptions"), a))
            .transpose()?;

        let node_url = |url: &str| {
            ["http://", "https://", "ws://", "wss://"].iter().any(|s| {
                url.len() > s.len()
                    && url
                        .get(..s.len())
                        .is_some_and(|p| p.eq_ignore_ascii_case(s))
            })
        };
        let rpc = if self.rpc_url == "embedded" {
            RpcEndpoint::Embedded
        } else if node_url(&self.rpc_url) {
            RpcEndpoint::Url(self.rpc_url.into())
        } else {
            return Err(ConfigError::InvalidValue {
                key: key("rpc_url"),
                reason: "expected an http(s):// or ws(s):// URL, or \"embedded\"",
            });
        };
        if rpc == RpcEndpoint::Embedded && !self.rpc_fallback_urls.is_empty() {
            return Err(ConfigError::InvalidValue {
                key: key("rpc_fallback_urls"),
                reason: "the embedded devnet has no other node",
            });
        }
        let mut rpc_fallbacks = Vec::with_capacity(self.rpc_fallback_urls.len());
        for (j, url) in self.rpc_fallback_urls.into_iter().enumerate() {
            if !node_url(&url) {
                return Err(ConfigError::InvalidValue {
                    key: key(&format!("rpc_fallback_urls[{j}]")),
                    reason: "expected an http(s):// or ws(s):// URL",
                });
            }
            rpc_fallbacks.push(RpcUrl::from(url));
        }

        // Published to every client: a plain http(s) URL, never one with credentials in it.
        let public_rpc_url = self
            .public_rpc_url
            .map(|url| {
                validate_http_url(&url).ok_or_else(|| ConfigError::InvalidValue {
                    key: key("public_rpc_url"),
                    reason: "expected a public http:// or https:// URL with a host, no user \
                             info, query or fragment (it is published in discovery)",
                })
            })
            .transpose()?;

        // The registry knows the EIP-712 name of its own USDC (Base Sepolia's signs as "USDC").
        let token_name = match (self.token_name, usdc) {
            (Some(name), _) => name,
            (None, Some((address, name))) if address == token => name.to_owned(),
            (None, _) => DEFAULT_TOKEN_NAME.to_owned(),
        };
        if token_name.trim().is_empty() {
            return Err(ConfigError::InvalidValue {
                key: key("token_name"),
                reason: "must not be empty",
            });
        }
        if self.token_version.trim().is_empty() {
            return Err(ConfigError::InvalidValue {
                key: key("token_version"),
                reason: "must not be empty",
            });
        }
        if self.confirmations == 0 {
            return Err(ConfigError::InvalidValue {
                key: key("confirmations"),
                reason: "must be at least 1",
            });
        }
        let max_fee_per_gas = match self.max_fee_gwei {
            None => None,
            Some(g) if g.is_finite() && g > 0.0 && g <= 1e9 => Some((g * 1e9).round() as u128),
            Some(_) => {
                return Err(ConfigError::InvalidValue {
                    key: key("max_fee_gwei"),
                    reason: "expected a number of gwei above 0 (e.g. 0.5 on Base, 50 on Ethereum)",
                });
            }
        };

        Ok(Network {
            name,
            chain_id,
            rpc,
            rpc_fallbacks,
            public_rpc_url,
            token,
            token_name,
            token_version: self.token_version,
            router,
            subscriptions,
            confirmations: self.confirmations,
            start_block: self.start_block,
            max_fee_per_gas,
            builtin: known.is_some(),
        })
    }
}

fn valid_custom_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// `http(s)://host[:port][/path]`, returned without a trailing slash.
fn validate_http_url(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty()
        || host.contains('@')
        || url.contains(['?', '#'])
        || url.contains(char::is_whitespace)
    {
        return None;
    }
    Some(url.trim_end_matches('/').to_owned())
}

fn default_public_url(listen: SocketAddr) -> String {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, listen.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_public_url_replaces_unspecified_addresses() {
        assert_eq!(
            default_public_url("0.0.0.0:8402".parse().unwrap()),
            "http://127.0.0.1:8402"
        );
        assert_eq!(
            default_public_url("[::]:80".parse().unwrap()),
            "http://[::1]:80"
        );
        assert_eq!(
            default_public_url("10.0.0.2:8402".parse().unwrap()),
            "http://10.0.0.2:8402"
        );
    }

    #[test]
    fn the_public_rpc_url_is_a_plain_http_url_and_never_the_private_one() {
        let config = |extra: &str| {
            super::super::Config::from_toml_str(&format!(
                r#"
[keys]
relayers = ["env:RELAYER"]
proof = "env:PROOF"
[[networks]]
name = "tollgate-devnet"
chain_id = 31337
rpc_url = "https://user:secret@node.example/key"
token = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
router = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
{extra}
"#
            ))
        };
        // Not defaulted to rpc_url.
        assert_eq!(config("").unwrap().networks[0].public_rpc_url, None);
        let c = config(r#"public_rpc_url = "https://rpc.example/""#).unwrap();
        assert_eq!(
            c.networks[0].public_rpc_url.as_deref(),
            Some("https://rpc.example")
        );
        for bad in [
            "https://user:pw@rpc.example",
            "wss://rpc.example",
            "https://rpc.example/?key=1",
            "rpc.example",
        ] {
            let e = config(&format!("public_rpc_url = \"{bad}\"")).unwrap_err();
            let text = e.to_string();
            assert!(text.contains("networks[0].public_rpc_url"), "{text}");
            assert!(!text.contains("pw@"), "{text}");
        }
    }
}
