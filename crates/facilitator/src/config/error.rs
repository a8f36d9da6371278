//! [`ConfigError`]: why a configuration cannot be used.

use std::path::PathBuf;

use super::{KeyError, SecretSourceError};

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
