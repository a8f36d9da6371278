//! The facilitator's configuration: one TOML file, parsed into typed structs and validated once at
//! startup. Every table refuses unknown keys; every optional key has an explicit default (the
//! `DEFAULT_*` constants); every error names the key it is about.
//!
//! Secrets are never read from the environment by this crate. The config holds *where* each key
//! comes from ([`SecretSource`]: `env:VAR`, `file:PATH` or an inline 0x-hex key) and
//! [`Config::resolve`] turns the sources into keys with a lookup closure the binary supplies
//! (`|var| std::env::var(var).ok()`). Resolved keys live in [`Secret`], whose bytes are zeroed on drop and
//! never printed (`Debug` shows `[REDACTED]`, `Display` `[redacted]`).
//!
//! The module is split by responsibility: `raw` holds the TOML shape as read, `validate` turns
//! it into a [`Config`], `resolve` reads the keys through the injected lookup, and `secrets`
//! holds the values that must not be printed ([`Secret`], [`KeySource`], [`RpcUrl`],
//! [`StoreUrl`]), kept in [`secrecy`] boxes.
//!
//! ```
//! use tollgate_facilitator::config::Config;
//!
//! let config = Config::from_toml_str(r#"
//!     [keys]
//!     relayers = ["env:RELAYER_KEY"]
//!     proof = "env:PROOF_KEY"
//!
//!     [[networks]]
//!     name = "tollgate-devnet"
//!     chain_id = 31337
//!     rpc_url = "embedded"
//!     token = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
//!     router = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
//! "#)?;
//! assert_eq!(config.public_url, "http://127.0.0.1:8402");
//!
//! let env = |var: &str| match var {
//!     "RELAYER_KEY" => Some("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d".into()),
//!     "PROOF_KEY" => Some("0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a".into()),
//!     _ => None,
//! };
//! let keys = config.resolve(env)?;
//! assert!(!format!("{keys:?}").contains("59c6995e"));
//! # Ok::<(), tollgate_facilitator::config::ConfigError>(())
//! ```

mod error;
mod raw;
mod resolve;
pub(crate) mod secrets;
mod validate;

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    time::Duration,
};

use alloy::primitives::Address;
use serde::Deserialize;
use tollgate_protocol::{Amount, network};

use self::raw::RawConfig;
pub use self::{
    error::ConfigError,
    resolve::{KeyWarning, ResolvedKeys},
    secrets::{
        HexKey, KeyError, KeySource, RpcEndpoint, RpcUrl, Secret, SecretSource, SecretSourceError,
        SecretsKeySource, StoreUrl,
    },
};
use crate::store::RelayBounds;

/// Default `listen`: loopback, port 8402.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8402);
/// Default `store`: an SQLite database under `.tollgate/` in the working directory.
pub const DEFAULT_STORE: &str = "sqlite://.tollgate/facilitator.db";
/// Default `fees.settlement_fee`: 1000 smallest units (0.001 of a 6-decimal token).
pub const DEFAULT_SETTLEMENT_FEE: Amount = Amount::from_units(1000);
/// Default `settlement.confirmation_timeout_ms`.
pub const DEFAULT_CONFIRMATION_TIMEOUT_MS: u64 = 10_000;
/// Default `settlement.max_validity_secs`.
pub const DEFAULT_MAX_VALIDITY_SECS: u64 = 3600;
/// Default `settlement.proof_ttl_secs`.
pub const DEFAULT_PROOF_TTL_SECS: u64 = 600;
/// Default `limits.max_body_bytes`.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;
/// Default `networks[].token_name` for tokens the registry does not know: the EIP-712 domain name
/// of USDC on Base mainnet and of the Tollgate devnet token.
pub const DEFAULT_TOKEN_NAME: &str = "USD Coin";
/// Default `networks[].token_version`: the EIP-712 domain version of USDC.
pub const DEFAULT_TOKEN_VERSION: &str = "2";
/// Default `networks[].confirmations`: the settlement's own block.
pub const DEFAULT_CONFIRMATIONS: u64 = 1;
/// Default `subscriptions.relays_per_subscription_per_hour`: two pause/resume round trips.
pub const DEFAULT_RELAYS_PER_SUBSCRIPTION_PER_HOUR: u32 = 4;
/// Default `subscriptions.relays_per_subscriber_per_day`.
pub const DEFAULT_RELAYS_PER_SUBSCRIBER_PER_DAY: u32 = 24;

/// The facilitator's configuration, validated. Build it with [`Config::from_toml_str`] or
/// [`Config::load`]; the fields may be adjusted afterwards (flags over file), but the parsers are
/// the only constructors, so a `Config` starts out valid.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// `listen`: the socket address the HTTP server binds. Default [`DEFAULT_LISTEN`].
    pub listen: SocketAddr,
    /// `public_url`: the facilitator's externally reachable base URL (`http(s)://host[:port]`,
    /// no trailing slash), used to build status URLs and published in discovery documents.
    /// Default: `http://<listen>`, with an unspecified address (`0.0.0.0`, `::`) replaced by
    /// loopback, so set it whenever the facilitator is reached from another machine.
    pub public_url: String,
    /// `store`: the database URL, `sqlite:...` or `postgres://...` (`postgresql://`). Default
    /// [`DEFAULT_STORE`].
    pub store: StoreUrl,
    /// `[keys]`: where the relayer and proof-signing keys come from.
    pub keys: Keys,
    /// `[fees]`: the facilitator's fee.
    pub fees: Fees,
    /// `[settlement]`: timeouts and validity bounds of settlements and proofs.
    pub settlement: Settlement,
    /// `[limits]`: request limits.
    pub limits: Limits,
    /// `[server]`: slow-client timeouts, header size, connection cap and the per-client rate
    /// limit of the HTTP server (see [`tollgate_server::ServerConfig`]).
    pub server: tollgate_server::Limits,
    /// `[subscriptions]`: the renewal keeper, the on-chain batching of metered usage and the
    /// bounds on relayed lifecycle calls.
    pub subscriptions: SubscriptionsSection,
    /// `[webhooks]`: delivery of events to providers' endpoints.
    pub webhooks: WebhooksSection,
    /// `[replicas]`: working beside other replicas on one PostgreSQL store.
    pub replicas: ReplicasSection,
    /// `[[networks]]`: the chains settled on, at least one, names unique (after aliases).
    pub networks: Vec<Network>,
}

/// `[keys]`: the sources of the facilitator's secp256k1 keys. Each value is a [`SecretSource`]
/// string: `"env:VAR"`, `"file:PATH"` or an inline `"0x…"` key.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Keys {
    /// `keys.relayers`: one or more keys that submit settlement transactions and pay their gas
    /// (several allow parallel settlement: each has its own nonce sequence). Required, non-empty,
    /// pairwise distinct.
    pub relayers: Vec<SecretSource>,
    /// `keys.proof`: the key that signs payment proofs (its address is published as a proof
    /// signer). Required; must differ from every relayer key, so that a leaked hot relayer key
    /// cannot forge proofs.
    pub proof: SecretSource,
    /// `keys.webhook_secrets`: the 32-byte key (64 hex digits) webhook endpoints' signing
    /// secrets are encrypted with at rest. Optional, but without it no webhook endpoint can be
    /// added, and a store that holds webhook secrets refuses to start.
    pub webhook_secrets: Option<SecretsKeySource>,
    /// `keys.webhook_secrets_previous`: keys `webhook_secrets` replaced (a key rotation): the
    /// secrets sealed under them are re-encrypted under `webhook_secrets` at startup, after
    /// which they can be removed. Default empty; requires `webhook_secrets`.
    pub webhook_secrets_previous: Vec<SecretsKeySource>,
}

/// `[fees]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Fees {
    /// `fees.settlement_fee`: charged per `/authorize` settlement, in the token's smallest unit;
    /// a decimal string (`"1000"`) or a TOML integer. Default [`DEFAULT_SETTLEMENT_FEE`]. It
    /// is committed to by the client's authorization nonce and taken out of the payment by the
    /// router.
    #[serde(deserialize_with = "raw::de_amount")]
    pub settlement_fee: Amount,
    /// `fees.fee_recipient`: informational only (published in discovery documents); the router's
    /// fee recipient is fixed when it is deployed. Optional; not the zero address.
    pub fee_recipient: Option<Address>,
}

impl Default for Fees {
    fn default() -> Self {
        Self {
            settlement_fee: DEFAULT_SETTLEMENT_FEE,
            fee_recipient: None,
        }
    }
}

/// `[settlement]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Settlement {
    /// `settlement.confirmation_timeout_ms`: how long `/authorize` waits for confirmation before
    /// answering `202 pending` with a status URL. `0` answers `202` as soon as the transaction is
    /// broadcast. Default [`DEFAULT_CONFIRMATION_TIMEOUT_MS`].
    pub confirmation_timeout_ms: u64,
    /// `settlement.max_validity_secs`: authorizations whose `validBefore` lies further than this
    /// in the future are refused (they would tie up the payer's nonce for too long). Positive.
    /// Default [`DEFAULT_MAX_VALIDITY_SECS`].
    pub max_validity_secs: u64,
    /// `settlement.proof_ttl_secs`: a proof's `expiry` is its issuance time plus this. Positive.
    /// Default [`DEFAULT_PROOF_TTL_SECS`].
    pub proof_ttl_secs: u64,
    /// `settlement.relayer_floor_settlements`: a relayer holding less gas than this many
    /// settlements at the current max fee is reported (`/readyz`, the
    /// `tollgate_relayer_below_floor` gauge, a `relayer.low_balance` webhook event to the
    /// endpoints of `fees.fee_recipient`'s provider account) and fails `--check`; one that
    /// cannot pay a single settlement is passed over, and with none left payments answer 503
    /// before anything is written. Positive. Default 100.
    pub relayer_floor_settlements: u64,
    /// `settlement.token_view`: whether x402 `/verify` may answer from each network's view of
    /// the token, kept block by block from its logs, instead of simulating every payment on the
    /// node (a round trip each): a payer and payee simulated once are verified without calling
    /// the node while the view is fresh. It polls the node every 500 ms while verifications
    /// come (one to three calls a poll, and none after a minute without one). SECURITY.md,
    /// "`/verify` from the token's view", has its rules. Default `true`.
    pub token_view: bool,
}

impl Default for Settlement {
    fn default() -> Self {
        Self {
            confirmation_timeout_ms: DEFAULT_CONFIRMATION_TIMEOUT_MS,
            max_validity_secs: DEFAULT_MAX_VALIDITY_SECS,
            proof_ttl_secs: DEFAULT_PROOF_TTL_SECS,
            relayer_floor_settlements: crate::funds::DEFAULT_FLOOR_SETTLEMENTS,
            token_view: true,
        }
    }
}

impl Settlement {
    /// `confirmation_timeout_ms` as a duration.
    pub fn confirmation_timeout(&self) -> Duration {
        Duration::from_millis(self.confirmation_timeout_ms)
    }

    /// `max_validity_secs` as a duration.
    pub fn max_validity(&self) -> Duration {
        Duration::from_secs(self.max_validity_secs)
    }

    /// `proof_ttl_secs` as a duration.
    pub fn proof_ttl(&self) -> Duration {
        Duration::from_secs(self.proof_ttl_secs)
    }
}

/// `[limits]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Limits {
    /// `limits.max_body_bytes`: larger request bodies are refused with 413. Positive. Default
    /// [`DEFAULT_MAX_BODY_BYTES`].
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// `[subscriptions]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct SubscriptionsSection {
    /// `subscriptions.keeper_interval_secs`: how often the keeper indexes new subscriptions,
    /// renews the due ones and charges metered usage. `0` disables the keeper (renewals and
    /// overage charges then wait for another replica's). Default 5.
    pub keeper_interval_secs: u64,
    /// `subscriptions.overage_batch_secs`: a cycle's metered usage is charged on-chain once its
    /// oldest uncharged deduction is this old. Default 60.
    pub overage_batch_secs: u64,
    /// `subscriptions.overage_batch_amount`: ... or once its uncharged usage reaches this amount
    /// (the token's smallest unit; a decimal string or an integer). Usage left at the end of a
    /// cycle is always charged before the renewal. Default `"1000000"`.
    #[serde(deserialize_with = "raw::de_amount")]
    pub overage_batch_amount: Amount,
    /// `subscriptions.relays_per_subscription_per_hour`: the subscriber's lifecycle calls
    /// (pause, resume, cancel) the facilitator relays, at its own gas, for one subscription
    /// within any hour. One more is refused with 429 `RateLimited` and `Retry-After` before
    /// anything is sent; a repeat that sends nothing (the same signed call, or an action whose
    /// target state holds) is neither counted nor refused, and a subscription's first cancel is
    /// never refused (still counted). Positive. Default
    /// [`DEFAULT_RELAYS_PER_SUBSCRIPTION_PER_HOUR`].
    pub relays_per_subscription_per_hour: u32,
    /// `subscriptions.relays_per_subscriber_per_day`: the same, for one subscriber over all its
    /// subscriptions on a network, within any day. Counted in the store, so replicas sharing
    /// one store share the bounds. Positive. Default [`DEFAULT_RELAYS_PER_SUBSCRIBER_PER_DAY`].
    pub relays_per_subscriber_per_day: u32,
}

impl Default for SubscriptionsSection {
    fn default() -> Self {
        Self {
            keeper_interval_secs: crate::keeper::DEFAULT_INTERVAL.as_secs(),
            overage_batch_secs: crate::metering::DEFAULT_BATCH_INTERVAL.as_secs(),
            overage_batch_amount: Amount::from_units(crate::metering::DEFAULT_BATCH_AMOUNT),
            relays_per_subscription_per_hour: DEFAULT_RELAYS_PER_SUBSCRIPTION_PER_HOUR,
            relays_per_subscriber_per_day: DEFAULT_RELAYS_PER_SUBSCRIBER_PER_DAY,
        }
    }
}

impl SubscriptionsSection {
    /// The bounds on relayed lifecycle transactions these keys describe.
    pub fn relay_bounds(&self) -> RelayBounds {
        RelayBounds {
            per_subscription: self.relays_per_subscription_per_hour,
            subscription_window: Duration::from_secs(3600),
            per_subscriber: self.relays_per_subscriber_per_day,
            subscriber_window: Duration::from_secs(24 * 3600),
        }
    }
}

/// `[webhooks]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct WebhooksSection {
    /// `webhooks.timeout_secs`: how long one delivery attempt may take. Default 10.
    pub timeout_secs: u64,
    /// `webhooks.allow_private_targets`: let providers register loopback and private addresses
    /// (the SSRF guard refuses them otherwise). Only for development. Default false.
    pub allow_private_targets: bool,
}

impl Default for WebhooksSection {
    fn default() -> Self {
        Self {
            timeout_secs: crate::webhooks::DEFAULT_TIMEOUT.as_secs(),
            allow_private_targets: false,
        }
    }
}

/// `[replicas]`: several replicas on one store (PostgreSQL) share relayer accounts, the keeper,
/// the reconciler and webhook queues through leases in the store (see
/// [`crate::replica`]). Every replica is configured with every relayer key.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ReplicasSection {
    /// `replicas.lease_ttl_secs`: how long a replica's lease runs without renewal; a replica
    /// that dies passes its relayer accounts and the keeper on after this long. Default 15.
    pub lease_ttl_secs: u64,
    /// `replicas.id`: this replica's name in the store's leases (and `/readyz`). Default: the
    /// host name, the process id and a random suffix.
    pub id: Option<String>,
}

impl Default for ReplicasSection {
    fn default() -> Self {
        Self {
            lease_ttl_secs: crate::replica::DEFAULT_LEASE_TTL.as_secs(),
            id: None,
        }
    }
}

/// `[[networks]]`: one chain and the token settled on it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Network {
    /// `name`: an x402 V1 network name (`base`, `base-sepolia`, …; aliases such as
    /// `base-mainnet` are stored under their canonical name) or a custom name
    /// (lowercase letters, digits and `-`, e.g. `tollgate-devnet`).
    pub name: String,
    /// `chain_id`: required for custom names; optional for built-in names, where it must equal
    /// the registry's chain id.
    pub chain_id: u64,
    /// `rpc_url`: an `http(s)://` or `ws(s)://` JSON-RPC endpoint, or `"embedded"` for the
    /// in-process devnet the binary supplies.
    pub rpc: RpcEndpoint,
    /// `rpc_fallback_urls`: other nodes of the same chain, in order of preference, that reads
    /// and sends fail over to while `rpc_url` cannot be reached (see
    /// [`tollgate_chain::failover`]). Default: none.
    pub rpc_fallbacks: Vec<RpcUrl>,
    /// `public_rpc_url`: a public `http(s)://` JSON-RPC endpoint of the same chain, without
    /// credentials, published in discovery as `rpcUrl` so that gates can check subscriptions
    /// with no RPC setting of their own. Optional; never defaulted to `rpc_url`.
    pub public_rpc_url: Option<String>,
    /// `token`: the EIP-3009 token contract. Default for built-in names: the registry's USDC;
    /// required for custom names.
    pub token: Address,
    /// `token_name`: the token's EIP-712 domain name. Default: the registry's name for its USDC
    /// when `token` is that USDC (`"USDC"` on `base-sepolia`, `"USD Coin"` on `base`), otherwise
    /// [`DEFAULT_TOKEN_NAME`].
    pub token_name: String,
    /// `token_version`: the token's EIP-712 domain version. Default [`DEFAULT_TOKEN_VERSION`].
    pub token_version: String,
    /// `router`: the `PaymentRouter` deployed for this token. Required.
    pub router: Address,
    /// `subscriptions`: the `Subscriptions` contract, if subscriptions are offered. Optional.
    pub subscriptions: Option<Address>,
    /// `confirmations`: blocks a settlement must be buried under (1 = its own block) before a
    /// proof is issued. At least 1. Default [`DEFAULT_CONFIRMATIONS`].
    pub confirmations: u64,
    /// `start_block`: the first block the renewal keeper reads the subscriptions contract's logs
    /// from on a fresh store (its deployment block, on a long chain). Default 0.
    pub start_block: u64,
    /// `max_fee_gwei`: the most a transaction of this network's relayers may offer per gas, in
    /// gwei (e.g. `0.5`); held as wei. Default: none (what the fee market asks). While the base
    /// fee is above it nothing is sent (payments answer 503), and a transaction priced out by a
    /// base-fee rise is re-priced up to it, not beyond.
    pub max_fee_per_gas: Option<u128>,
    /// Whether `name` is one of the x402 V1 names built into `tollgate_protocol::network` (only
    /// those can be paid by unmodified x402 clients).
    pub builtin: bool,
}

impl Config {
    /// Parses and validates a TOML document.
    pub fn from_toml_str(s: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(s).map_err(|error| ConfigError::Parse {
            path: None,
            error: Box::new(error),
        })?;
        raw.validate()
    }

    /// Reads, parses and validates a TOML file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::from_toml_str(&text).map_err(|e| match e {
            ConfigError::Parse { path: None, error } => ConfigError::Parse {
                path: Some(path.to_owned()),
                error,
            },
            other => other,
        })
    }

    /// The configured network called `name`, aliases accepted (`base-mainnet` finds `base`).
    pub fn network(&self, name: &str) -> Option<&Network> {
        let name = network::canonical_name(name).unwrap_or(name);
        self.networks.iter().find(|n| n.name == name)
    }
}
