//! The facilitator's configuration: one TOML file, parsed into typed structs and validated once at
//! startup. Every table refuses unknown keys; every optional key has an explicit default (the
//! `DEFAULT_*` constants); every error names the key it is about.
//!
//! Secrets are never read from the environment by this crate. The config holds *where* each key
//! comes from ([`SecretSource`]: `env:VAR`, `file:PATH` or an inline 0x-hex key) and
//! [`Config::resolve`] turns the sources into keys with a lookup closure the binary supplies
//! (`|var| std::env::var(var).ok()`). Resolved keys live in [`Secret`], which prints as
//! `[redacted]`.
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

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

use alloy::{
    primitives::{Address, B256},
    signers::local::PrivateKeySigner,
};
use serde::{Deserialize, Deserializer, de};
use tollgate_protocol::{Amount, network};

use crate::webhooks::{SecretsKey, SecretsKeys};

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
    /// `[subscriptions]`: the renewal keeper and the on-chain batching of metered usage.
    pub subscriptions: SubscriptionsSection,
    /// `[webhooks]`: delivery of events to providers' endpoints.
    pub webhooks: WebhooksSection,
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

/// Where a webhook-secrets key comes from (`keys.webhook_secrets`): `"env:VAR"`, `"file:PATH"`
/// or an inline 64-hex-digit key, read like a [`SecretSource`].
pub type SecretsKeySource = KeySource<SecretsKey>;

/// `[fees]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Fees {
    /// `fees.settlement_fee`: charged per `/authorize` settlement, in the token's smallest unit;
    /// a decimal string (`"1000"`) or a TOML integer. Default [`DEFAULT_SETTLEMENT_FEE`]. It
    /// is committed to by the client's authorization nonce and taken out of the payment by the
    /// router.
    #[serde(deserialize_with = "de_amount")]
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
}

impl Default for Settlement {
    fn default() -> Self {
        Self {
            confirmation_timeout_ms: DEFAULT_CONFIRMATION_TIMEOUT_MS,
            max_validity_secs: DEFAULT_MAX_VALIDITY_SECS,
            proof_ttl_secs: DEFAULT_PROOF_TTL_SECS,
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
    #[serde(deserialize_with = "de_amount")]
    pub overage_batch_amount: Amount,
}

impl Default for SubscriptionsSection {
    fn default() -> Self {
        Self {
            keeper_interval_secs: crate::keeper::DEFAULT_INTERVAL.as_secs(),
            overage_batch_secs: crate::metering::DEFAULT_BATCH_INTERVAL.as_secs(),
            overage_batch_amount: Amount::from_units(crate::metering::DEFAULT_BATCH_AMOUNT),
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
    /// Whether `name` is one of the x402 V1 names built into `tollgate_protocol::network` (only
    /// those can be paid by unmodified x402 clients).
    pub builtin: bool,
}

/// A network's JSON-RPC endpoint. `Debug` and `Display` hide credentials, paths and queries
/// (provider API keys often travel there); [`RpcEndpoint::url`] gives the full URL.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RpcEndpoint {
    /// `"embedded"`: the in-process devnet chain the binary supplies.
    Embedded,
    /// A node's JSON-RPC URL.
    Url(String),
}

impl RpcEndpoint {
    /// The full URL, `None` for the embedded devnet.
    pub fn url(&self) -> Option<&str> {
        match self {
            Self::Embedded => None,
            Self::Url(url) => Some(url),
        }
    }
}

impl fmt::Debug for RpcEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded => f.write_str("Embedded"),
            Self::Url(url) => f.debug_tuple("Url").field(&redact_url(url, true)).finish(),
        }
    }
}

impl fmt::Display for RpcEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded => f.write_str("embedded"),
            Self::Url(url) => f.write_str(&redact_url(url, true)),
        }
    }
}

/// The store's database URL. `Debug` and `Display` hide a password in it; [`StoreUrl::as_str`]
/// gives the full URL.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(String);

impl StoreUrl {
    /// The full URL, password included.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is a PostgreSQL URL (otherwise SQLite).
    pub fn is_postgres(&self) -> bool {
        self.0.starts_with("postgres://") || self.0.starts_with("postgresql://")
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact_url(&self.0, false), f)
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0, false))
    }
}

/// A key that is written as hex in `[keys]`: a secp256k1 [`Secret`] or a [`SecretsKey`].
pub trait HexKey: Sized {
    /// Parses the key from hex; errors never contain the input.
    fn from_hex(s: &str) -> Result<Self, KeyError>;
}

impl HexKey for Secret {
    fn from_hex(s: &str) -> Result<Self, KeyError> {
        Secret::from_hex(s)
    }
}

impl HexKey for SecretsKey {
    fn from_hex(s: &str) -> Result<Self, KeyError> {
        SecretsKey::from_hex(s)
    }
}

/// Where a key comes from, as written in `[keys]`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum KeySource<K> {
    /// `"env:VAR"`: the environment variable `VAR` (read through the lookup closure given to
    /// [`Config::resolve`]), holding the key as hex.
    Env(String),
    /// `"file:PATH"`: a file holding the key as hex (surrounding whitespace ignored). A relative
    /// path is relative to the process's working directory. On Unix the file must not be
    /// writable by group or others; readable by them is reported as a [`KeyWarning`].
    File(PathBuf),
    /// An inline `"0x…"` key. Allowed for development; [`Config::resolve`] reports it as a
    /// [`KeyWarning`] for the binary to log.
    Literal(K),
}

/// Where a secp256k1 key (a relayer's, the proof signer's) comes from.
pub type SecretSource = KeySource<Secret>;

impl<K: HexKey> KeySource<K> {
    /// Parses a source string. Anything that does not start with `env:` or `file:` is taken as an
    /// inline key; errors never contain the input.
    pub fn parse(s: &str) -> Result<Self, SecretSourceError> {
        if let Some(var) = s.strip_prefix("env:") {
            if var.is_empty()
                || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                || var.as_bytes()[0].is_ascii_digit()
            {
                return Err(SecretSourceError::EnvName);
            }
            Ok(Self::Env(var.to_owned()))
        } else if let Some(path) = s.strip_prefix("file:") {
            if path.trim().is_empty() {
                return Err(SecretSourceError::EmptyPath);
            }
            Ok(Self::File(PathBuf::from(path)))
        } else {
            K::from_hex(s)
                .map(Self::Literal)
                .map_err(SecretSourceError::Literal)
        }
    }

    /// Reads the key named by this source (`key` is its setting, for errors and warnings).
    fn resolve(
        &self,
        key: &str,
        lookup: &impl Fn(&str) -> Option<String>,
        warnings: &mut Vec<KeyWarning>,
    ) -> Result<K, ConfigError>
    where
        K: Clone,
    {
        let invalid = |error| ConfigError::InvalidKey {
            key: key.to_owned(),
            source_name: self.to_string(),
            error,
        };
        match self {
            Self::Literal(secret) => {
                warnings.push(KeyWarning::Inline {
                    key: key.to_owned(),
                });
                Ok(secret.clone())
            }
            Self::Env(var) => {
                let value = lookup(var).ok_or_else(|| ConfigError::SecretNotSet {
                    key: key.to_owned(),
                    var: var.clone(),
                })?;
                K::from_hex(&value).map_err(invalid)
            }
            Self::File(path) => {
                check_key_file(key, path, warnings)?;
                let value =
                    std::fs::read_to_string(path).map_err(|error| ConfigError::SecretFile {
                        key: key.to_owned(),
                        path: path.clone(),
                        error,
                    })?;
                K::from_hex(&value).map_err(invalid)
            }
        }
    }
}

impl SecretSource {
    /// Whether two sources certainly name the same key without resolving them (same variable,
    /// same path, same inline key).
    fn same_as(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Env(a), Self::Env(b)) => a == b,
            (Self::File(a), Self::File(b)) => a == b,
            (Self::Literal(a), Self::Literal(b)) => a.address() == b.address(),
            _ => false,
        }
    }
}

impl<K> fmt::Display for KeySource<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(var) => write!(f, "env:{var}"),
            Self::File(path) => write!(f, "file:{}", path.display()),
            Self::Literal(_) => f.write_str("[redacted inline key]"),
        }
    }
}

/// Why a `[keys]` value is not a key source. Never contains the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretSourceError {
    /// `env:` followed by something that is not a variable name.
    #[error("`env:` must be followed by a variable name (letters, digits, `_`)")]
    EnvName,
    /// `file:` with no path.
    #[error("`file:` must be followed by a path")]
    EmptyPath,
    /// Neither `env:` nor `file:`, and not a valid inline key.
    #[error(
        "expected \"env:VAR\", \"file:PATH\" or an inline 0x-hex key, and as an inline key: {0}"
    )]
    Literal(KeyError),
}

/// Why a string is not a secp256k1 private key. Never contains the string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Nothing but whitespace.
    #[error("the key is empty")]
    Empty,
    /// Characters other than hex digits (after an optional `0x`).
    #[error("the key is not hexadecimal")]
    NotHex,
    /// Not 32 bytes.
    #[error("the key has {0} hex digits, expected 64 (32 bytes)")]
    Length(usize),
    /// 32 bytes, but zero or not below the secp256k1 group order.
    #[error("the key is not a valid secp256k1 private key")]
    OutOfRange,
}

/// A secp256k1 private key. `Debug` and `Display` print `[redacted]`; the key bytes are held by
/// the signer, which zeroes them on drop.
#[derive(Clone)]
pub struct Secret(PrivateKeySigner);

impl Secret {
    /// Parses 64 hex digits, `0x` prefix optional, surrounding whitespace ignored.
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(KeyError::Empty);
        }
        let digits = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .unwrap_or(s);
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(KeyError::NotHex);
        }
        if digits.len() != 64 {
            return Err(KeyError::Length(digits.len()));
        }
        let bytes: B256 = digits.parse().map_err(|_| KeyError::NotHex)?;
        Self::from_bytes(&bytes)
    }

    /// From the 32 key bytes.
    pub fn from_bytes(bytes: &B256) -> Result<Self, KeyError> {
        PrivateKeySigner::from_bytes(bytes)
            .map(Self)
            .map_err(|_| KeyError::OutOfRange)
    }

    /// The key's Ethereum address (not secret).
    pub fn address(&self) -> Address {
        self.0.address()
    }

    /// The signer holding the key.
    pub fn signer(&self) -> &PrivateKeySigner {
        &self.0
    }

    /// Consumes the secret into its signer.
    pub fn into_signer(self) -> PrivateKeySigner {
        self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The keys of `[keys]`, read and checked by [`Config::resolve`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ResolvedKeys {
    /// The relayer keys, in configuration order.
    pub relayers: Vec<Secret>,
    /// The proof-signing key.
    pub proof: Secret,
    /// `keys.webhook_secrets` (with `keys.webhook_secrets_previous`), for
    /// [`Settings::webhook_secrets`](crate::Settings).
    pub webhook_secrets: Option<SecretsKeys>,
    /// Things the binary should log as warnings (inline keys, key files readable by others).
    pub warnings: Vec<KeyWarning>,
}

/// A key that resolved but is kept less safely than it should be.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyWarning {
    /// The key is written inline in the config.
    Inline {
        /// The key's config path (`keys.proof`, `keys.relayers[0]`).
        key: String,
    },
    /// The key file can be read by its group or by others (Unix).
    FileReadableByOthers {
        /// The key's config path.
        key: String,
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

impl fmt::Display for KeyWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inline { key } => write!(
                f,
                "`{key}` is an inline key in the config file; prefer \"env:VAR\" or \"file:PATH\""
            ),
            Self::FileReadableByOthers { key, path, mode } => write!(
                f,
                "`{key}`: key file {} is readable by group or others (mode {mode:03o}); chmod 600 it",
                path.display()
            ),
        }
    }
}

/// A configuration that cannot be used. Every variant names the offending key (as a path such as
/// `networks[1].chain_id`) or the file; none contains a secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// Not TOML, or not the config's shape: an unknown key, a missing required key, a value of
    /// the wrong type. The message shows the line, the column and the offending key.
    #[error(
        "invalid config{}: {}",
        path.as_ref().map(|p| format!(" file {}", p.display())).unwrap_or_default(),
        error.to_string().trim_end()
    )]
    Parse {
        /// The file, when loaded from one.
        path: Option<PathBuf>,
        /// The TOML error, with the span of the offending key or value ([`toml::de::Error::span`]).
        error: Box<toml::de::Error>,
    },
    /// A required key, or a required collection that is empty.
    #[error("`{key}` is required{why}")]
    Missing {
        /// The key.
        key: String,
        /// Why, when it depends on other keys (starts with a separator).
        why: &'static str,
    },
    /// A value out of its allowed range or form.
    #[error("`{key}`: {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// What is allowed.
        reason: &'static str,
    },
    /// The zero address where a contract or recipient is required.
    #[error("`{key}` is the zero address")]
    ZeroAddress {
        /// The key.
        key: String,
    },
    /// Two `[[networks]]` with the same name (after aliases such as `base-mainnet` → `base`).
    #[error("`{key}`: network `{name}` is already configured at `{first}`")]
    DuplicateNetwork {
        /// The later entry's `name` key.
        key: String,
        /// The canonical network name.
        name: String,
        /// The earlier entry's `name` key.
        first: String,
    },
    /// A built-in network name with a different `chain_id`.
    #[error("`{key}`: network `{network}` has chain id {expected}, not {found}")]
    ChainIdMismatch {
        /// The `chain_id` key.
        key: String,
        /// The canonical network name.
        network: String,
        /// The registry's chain id.
        expected: u64,
        /// The configured one.
        found: u64,
    },
    /// A known x402 network that is not an EVM chain.
    #[error(
        "`{key}`: network `{network}` is not an EVM chain; Tollgate settles on EVM chains only"
    )]
    NotEvm {
        /// The `name` key.
        key: String,
        /// The canonical network name.
        network: String,
    },
    /// A `[keys]` value that is not a key source, or an inline key that is not a key.
    #[error("`{key}`: {error}")]
    InvalidSecretSource {
        /// The key.
        key: String,
        /// Why.
        error: SecretSourceError,
    },
    /// A key read from its source is not a secp256k1 private key.
    #[error("`{key}` ({source_name}): {error}")]
    InvalidKey {
        /// The key.
        key: String,
        /// Where it was read from (`env:VAR`, `file:PATH`).
        source_name: String,
        /// Why.
        error: KeyError,
    },
    /// `env:VAR` names an unset variable.
    #[error("`{key}`: environment variable {var} is not set")]
    SecretNotSet {
        /// The key.
        key: String,
        /// The variable.
        var: String,
    },
    /// `file:PATH` cannot be read.
    #[error("`{key}`: cannot read key file {}: {error}", path.display())]
    SecretFile {
        /// The key.
        key: String,
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// `file:PATH` is writable by group or others (Unix), so someone else could swap the key.
    #[error("`{key}`: key file {} is writable by group or others (mode {mode:03o}); chmod 600 it", path.display())]
    InsecureKeyFile {
        /// The key.
        key: String,
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Two key entries hold the same key: the proof key equals a relayer key, or two relayer
    /// entries are the same key.
    #[error(
        "`{key}` is the same key as `{other}`; the proof key and every relayer key must be distinct"
    )]
    SameKey {
        /// The later key.
        key: String,
        /// The earlier key it repeats.
        other: String,
    },
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

    /// Reads the keys of `[keys]`: environment variables through `lookup` (the binary passes
    /// `|var| std::env::var(var).ok()`), files from disk. Checks that each is a valid secp256k1
    /// key and that all are distinct. Errors and `Debug` output never contain a key.
    pub fn resolve(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<ResolvedKeys, ConfigError> {
        let mut warnings = Vec::new();
        let mut relayers = Vec::with_capacity(self.keys.relayers.len());
        for (i, source) in self.keys.relayers.iter().enumerate() {
            let key = format!("keys.relayers[{i}]");
            let secret = source.resolve(&key, &lookup, &mut warnings)?;
            if let Some(j) = relayers
                .iter()
                .position(|r: &Secret| r.address() == secret.address())
            {
                return Err(ConfigError::SameKey {
                    key,
                    other: format!("keys.relayers[{j}]"),
                });
            }
            relayers.push(secret);
        }
        let proof = self
            .keys
            .proof
            .resolve("keys.proof", &lookup, &mut warnings)?;
        if let Some(i) = relayers.iter().position(|r| r.address() == proof.address()) {
            return Err(ConfigError::SameKey {
                key: "keys.proof".into(),
                other: format!("keys.relayers[{i}]"),
            });
        }
        let webhook_secrets = match &self.keys.webhook_secrets {
            None => None,
            Some(source) => {
                let current = source.resolve("keys.webhook_secrets", &lookup, &mut warnings)?;
                let mut previous = Vec::with_capacity(self.keys.webhook_secrets_previous.len());
                for (i, source) in self.keys.webhook_secrets_previous.iter().enumerate() {
                    let key = format!("keys.webhook_secrets_previous[{i}]");
                    previous.push(source.resolve(&key, &lookup, &mut warnings)?);
                }
                Some(SecretsKeys::new(current).with_previous(previous))
            }
        };
        Ok(ResolvedKeys {
            relayers,
            proof,
            webhook_secrets,
            warnings,
        })
    }
}

/// Refuses a key file others can write; warns about one others can read.
#[cfg(unix)]
fn check_key_file(
    key: &str,
    path: &Path,
    warnings: &mut Vec<KeyWarning>,
) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt as _;
    let metadata = std::fs::metadata(path).map_err(|error| ConfigError::SecretFile {
        key: key.to_owned(),
        path: path.to_owned(),
        error,
    })?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(ConfigError::InsecureKeyFile {
            key: key.to_owned(),
            path: path.to_owned(),
            mode,
        });
    }
    if mode & 0o044 != 0 {
        warnings.push(KeyWarning::FileReadableByOthers {
            key: key.to_owned(),
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_key_file(
    _key: &str,
    _path: &Path,
    _warnings: &mut Vec<KeyWarning>,
) -> Result<(), ConfigError> {
    Ok(())
}

// ---- the TOML shape, before validation ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default = "default_listen")]
    listen: SocketAddr,
    #[serde(default)]
    public_url: Option<String>,
    #[serde(default = "default_store")]
    store: String,
    keys: RawKeys,
    #[serde(default)]
    fees: Fees,
    #[serde(default)]
    settlement: Settlement,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    server: tollgate_server::ServerConfig,
    #[serde(default)]
    subscriptions: SubscriptionsSection,
    #[serde(default)]
    webhooks: WebhooksSection,
    #[serde(default)]
    networks: Vec<RawNetwork>,
}

/// Kept as strings until validation so that a malformed inline key is reported by a typed error
/// that does not quote it (a TOML error would print the offending line).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeys {
    relayers: Vec<String>,
    proof: String,
    #[serde(default)]
    webhook_secrets: Option<String>,
    #[serde(default)]
    webhook_secrets_previous: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    name: String,
    #[serde(default)]
    chain_id: Option<u64>,
    rpc_url: String,
    #[serde(default)]
    token: Option<Address>,
    #[serde(default)]
    token_name: Option<String>,
    #[serde(default = "default_token_version")]
    token_version: String,
    router: Address,
    #[serde(default)]
    subscriptions: Option<Address>,
    #[serde(default = "default_confirmations")]
    confirmations: u64,
    #[serde(default)]
    start_block: u64,
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
fn de_amount<'de, D: Deserializer<'de>>(d: D) -> Result<Amount, D::Error> {
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

fn nonzero(key: impl FnOnce() -> String, address: Address) -> Result<Address, ConfigError> {
    if address.is_zero() {
        Err(ConfigError::ZeroAddress { key: key() })
    } else {
        Ok(address)
    }
}

impl RawConfig {
    fn validate(self) -> Result<Config, ConfigError> {
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
            store: StoreUrl(self.store),
            keys,
            fees: self.fees,
            settlement: self.settlement,
            limits: self.limits,
            server,
            subscriptions: self.subscriptions,
            webhooks: self.webhooks,
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

        let rpc = if self.rpc_url == "embedded" {
            RpcEndpoint::Embedded
        } else if ["http://", "https://", "ws://", "wss://"].iter().any(|s| {
            self.rpc_url.len() > s.len()
                && self
                    .rpc_url
                    .get(..s.len())
                    .is_some_and(|p| p.eq_ignore_ascii_case(s))
        }) {
            RpcEndpoint::Url(self.rpc_url)
        } else {
            return Err(ConfigError::InvalidValue {
                key: key("rpc_url"),
                reason: "expected an http(s):// or ws(s):// URL, or \"embedded\"",
            });
        };

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

        Ok(Network {
            name,
            chain_id,
            rpc,
            token,
            token_name,
            token_version: self.token_version,
            router,
            subscriptions,
            confirmations: self.confirmations,
            start_block: self.start_block,
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

/// Hides the password of `scheme://user:password@host/...`, and with `hide_path` also whatever
/// follows the host (RPC providers put API keys in paths and queries).
fn redact_url(url: &str, hide_path: bool) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_owned(),
    };
    let tail = if hide_path && !tail.is_empty() && tail != "/" {
        "/***"
    } else {
        tail
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/tollgate", false),
            "postgres://app:***@db:5432/tollgate"
        );
        assert_eq!(
            redact_url("sqlite://.tollgate/facilitator.db", false),
            "sqlite://.tollgate/facilitator.db"
        );
        assert_eq!(
            redact_url("https://base-sepolia.g.alchemy.com/v2/SECRET", true),
            "https://base-sepolia.g.alchemy.com/***"
        );
        assert_eq!(
            redact_url("http://127.0.0.1:8545", true),
            "http://127.0.0.1:8545"
        );
        assert_eq!(redact_url("sqlite::memory:", false), "sqlite::memory:");
    }

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
    fn secrets_parse_without_echo() {
        let k = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let s = Secret::from_hex(&format!(" 0x{k}\n")).unwrap();
        assert_eq!(format!("{s:?} {s}"), "[redacted] [redacted]");
        assert_eq!(Secret::from_hex(k).unwrap().address(), s.address());
        assert_eq!(Secret::from_hex("").unwrap_err(), KeyError::Empty);
        assert_eq!(Secret::from_hex("0x12").unwrap_err(), KeyError::Length(2));
        assert_eq!(
            Secret::from_hex(&format!("0x{}", "zz".repeat(32))).unwrap_err(),
            KeyError::NotHex
        );
        assert_eq!(
            Secret::from_hex(&"00".repeat(32)).unwrap_err(),
            KeyError::OutOfRange
        );
        assert_eq!(
            Secret::from_hex(&"ff".repeat(32)).unwrap_err(),
            KeyError::OutOfRange
        );
    }

    #[test]
    fn the_webhook_secrets_key_resolves_without_echo() {
        let base = r#"
            [[networks]]
            name = "tollgate-devnet"
            chain_id = 31337
            rpc_url = "embedded"
            token = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
            router = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
        "#;
        let relayer = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let proof = "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
        let keys = |extra: &str| {
            format!("[keys]\nrelayers = [\"0x{relayer}\"]\nproof = \"0x{proof}\"\n{extra}\n{base}")
        };
        let hex = "ab".repeat(32);
        let old = "cd".repeat(32);
        let config = Config::from_toml_str(&keys(&format!(
            "webhook_secrets = \"env:WH\"\nwebhook_secrets_previous = [\"0x{old}\"]"
        )))
        .unwrap();
        assert!(
            matches!(&config.keys.webhook_secrets, Some(SecretsKeySource::Env(v)) if v == "WH")
        );
        let resolved = config
            .resolve(|var| (var == "WH").then(|| hex.clone()))
            .unwrap();
        let printed = format!("{config:?} {resolved:?}");
        assert!(
            !printed.contains("abab") && !printed.contains("cdcd"),
            "{printed}"
        );
        assert!(resolved.warnings.contains(&KeyWarning::Inline {
            key: "keys.webhook_secrets_previous[0]".into()
        }));
        let sealed = SecretsKeys::new(SecretsKey::from_hex(&old).unwrap())
            .seal("we_x", "whsec_x")
            .unwrap();
        assert_eq!(
            resolved
                .webhook_secrets
                .unwrap()
                .open("we_x", &sealed)
                .unwrap(),
            "whsec_x",
            "a previous key still opens"
        );

        let e = config.resolve(|_| None).unwrap_err();
        assert!(e.to_string().contains("keys.webhook_secrets"), "{e}");
        let e = config
            .resolve(|_| Some("0x12".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("keys.webhook_secrets") && !e.contains("0x12"),
            "{e}"
        );
        let e = Config::from_toml_str(&keys(&format!("webhook_secrets_previous = [\"0x{old}\"]")))
            .unwrap_err();
        assert!(
            e.to_string().contains("`keys.webhook_secrets` is required"),
            "{e}"
        );
        let e = Config::from_toml_str(&keys("webhook_secrets = \"0xzz\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("keys.webhook_secrets") && !e.contains("0xzz"),
            "{e}"
        );
        let none = Config::from_toml_str(&keys("")).unwrap();
        assert!(none.resolve(|_| None).unwrap().webhook_secrets.is_none());
    }

    #[test]
    fn secret_sources_parse() {
        assert!(
            matches!(SecretSource::parse("env:TOLLGATE_KEY"), Ok(SecretSource::Env(v)) if v == "TOLLGATE_KEY")
        );
        assert!(
            matches!(SecretSource::parse("file:/run/key"), Ok(SecretSource::File(p)) if p == Path::new("/run/key"))
        );
        assert_eq!(
            SecretSource::parse("env:").unwrap_err(),
            SecretSourceError::EnvName
        );
        assert_eq!(
            SecretSource::parse("env:1X").unwrap_err(),
            SecretSourceError::EnvName
        );
        assert_eq!(
            SecretSource::parse("file: ").unwrap_err(),
            SecretSourceError::EmptyPath
        );
        assert_eq!(
            SecretSource::parse("evn:X").unwrap_err(),
            SecretSourceError::Literal(KeyError::NotHex)
        );
    }
}
