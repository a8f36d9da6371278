//! The secret-holding values of the config: where keys come from ([`KeySource`]), the keys
//! themselves ([`Secret`], and the webhook [`SecretsKey`]) and the URLs that may carry
//! credentials ([`RpcUrl`], [`StoreUrl`]).
//!
//! Key bytes and URLs are held in [`secrecy`] boxes, which zero them on drop and print as
//! `[REDACTED]`; the URLs print with their credentials hidden instead, so that logs still show
//! which node or database is meant.

use std::{fmt, path::PathBuf};

use alloy::{
    primitives::{Address, B256},
    signers::local::PrivateKeySigner,
};
use secrecy::{ExposeSecret as _, SecretSlice, SecretString};

use crate::webhooks::SecretsKey;

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

/// The hex digits of a key of `len` bytes: `0x` prefix optional, surrounding whitespace
/// ignored. Errors never contain the input.
pub(crate) fn key_digits(s: &str, len: usize) -> Result<&str, KeyError> {
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
    if digits.len() != 2 * len {
        return Err(KeyError::Length(digits.len()));
    }
    Ok(digits)
}

/// Where a key comes from, as written in `[keys]`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum KeySource<K> {
    /// `"env:VAR"`: the environment variable `VAR` (read through the lookup closure given to
    /// [`Config::resolve`](super::Config::resolve)), holding the key as hex.
    Env(String),
    /// `"file:PATH"`: a file holding the key as hex (surrounding whitespace ignored). A relative
    /// path is relative to the process's working directory. On Unix the file must not be
    /// writable by group or others; readable by them is reported as a
    /// [`KeyWarning`](super::KeyWarning).
    File(PathBuf),
    /// An inline `"0x…"` key. Allowed for development;
    /// [`Config::resolve`](super::Config::resolve) reports it as a
    /// [`KeyWarning`](super::KeyWarning) for the binary to log.
    Literal(K),
}

/// Where a secp256k1 key (a relayer's, the proof signer's) comes from.
pub type SecretSource = KeySource<Secret>;

/// Where a webhook-secrets key comes from (`keys.webhook_secrets`): `"env:VAR"`, `"file:PATH"`
/// or an inline 64-hex-digit key, read like a [`SecretSource`].
pub type SecretsKeySource = KeySource<SecretsKey>;

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
}

impl SecretSource {
    /// Whether two sources certainly name the same key without resolving them (same variable,
    /// same path, same inline key).
    pub(super) fn same_as(&self, other: &Self) -> bool {
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

/// A secp256k1 private key. The 32 key bytes are held in a [`SecretSlice`], which zeroes them
/// on drop and prints as `[REDACTED]` (`Debug` shows that and the key's address); `Display`
/// prints `[redacted]`.
#[derive(Clone, Debug)]
pub struct Secret {
    key: SecretSlice<u8>,
    address: Address,
}

impl Secret {
    /// Parses 64 hex digits, `0x` prefix optional, surrounding whitespace ignored.
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        let bytes: B256 = key_digits(s, 32)?.parse().map_err(|_| KeyError::NotHex)?;
        Self::from_bytes(&bytes)
    }

    /// From the 32 key bytes.
    pub fn from_bytes(bytes: &B256) -> Result<Self, KeyError> {
        let signer = PrivateKeySigner::from_bytes(bytes).map_err(|_| KeyError::OutOfRange)?;
        Ok(Self {
            key: bytes.to_vec().into(),
            address: signer.address(),
        })
    }

    /// The key's Ethereum address (not secret).
    pub fn address(&self) -> Address {
        self.address
    }

    /// A signer holding the key (it zeroes its copy on drop).
    pub fn signer(&self) -> PrivateKeySigner {
        PrivateKeySigner::from_slice(self.key.expose_secret())
            .unwrap_or_else(|_| unreachable!("checked when the secret was made"))
    }

    /// Consumes the secret into a signer.
    pub fn into_signer(self) -> PrivateKeySigner {
        self.signer()
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A JSON-RPC node URL, held in a [`SecretString`]: providers put API keys in its credentials,
/// path or query. `Debug` and `Display` show it with everything after the host (and a password)
/// hidden; [`RpcUrl::expose_secret`] gives the full URL.
#[derive(Clone)]
pub struct RpcUrl(SecretString);

impl RpcUrl {
    /// The full URL, credentials included.
    pub fn expose_secret(&self) -> &str {
        self.0.expose_secret()
    }
}

impl From<String> for RpcUrl {
    fn from(url: String) -> Self {
        Self(url.into())
    }
}

impl From<&str> for RpcUrl {
    fn from(url: &str) -> Self {
        Self(url.into())
    }
}

impl PartialEq for RpcUrl {
    fn eq(&self, other: &Self) -> bool {
        self.expose_secret() == other.expose_secret()
    }
}

impl Eq for RpcUrl {}

impl fmt::Debug for RpcUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact_url(self.expose_secret(), true), f)
    }
}

impl fmt::Display for RpcUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(self.expose_secret(), true))
    }
}

/// A network's JSON-RPC endpoint. `Debug` and `Display` hide credentials, paths and queries
/// (provider API keys often travel there); [`RpcEndpoint::url`] gives the full URL.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RpcEndpoint {
    /// `"embedded"`: the in-process devnet chain the binary supplies.
    Embedded,
    /// A node's JSON-RPC URL.
    Url(RpcUrl),
}

impl RpcEndpoint {
    /// The full URL, `None` for the embedded devnet.
    pub fn url(&self) -> Option<&str> {
        match self {
            Self::Embedded => None,
            Self::Url(url) => Some(url.expose_secret()),
        }
    }
}

impl fmt::Display for RpcEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded => f.write_str("embedded"),
            Self::Url(url) => fmt::Display::fmt(url, f),
        }
    }
}

/// The store's database URL, held in a [`SecretString`]. `Debug` and `Display` hide a password
/// in it; [`StoreUrl::as_str`] gives the full URL.
#[derive(Clone)]
pub struct StoreUrl(SecretString);

impl StoreUrl {
    pub(super) fn new(url: String) -> Self {
        Self(url.into())
    }

    /// The full URL, password included.
    pub fn as_str(&self) -> &str {
        self.0.expose_secret()
    }

    /// Whether this is a PostgreSQL URL (otherwise SQLite).
    pub fn is_postgres(&self) -> bool {
        self.as_str().starts_with("postgres://") || self.as_str().starts_with("postgresql://")
    }
}

impl PartialEq for StoreUrl {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for StoreUrl {}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact_url(self.as_str(), false), f)
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(self.as_str(), false))
    }
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
    use std::path::Path;

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
    fn url_types_print_redacted_and_expose_in_full() {
        let rpc = RpcEndpoint::Url("https://user:pw@node.example/v2/SECRET?k=SECRET".into());
        assert_eq!(
            format!("{rpc:?}"),
            r#"Url("https://user:***@node.example/***")"#
        );
        assert_eq!(rpc.to_string(), "https://user:***@node.example/***");
        assert_eq!(
            rpc.url(),
            Some("https://user:pw@node.example/v2/SECRET?k=SECRET")
        );
        assert_eq!(format!("{:?}", RpcEndpoint::Embedded), "Embedded");
        let store = StoreUrl::new("postgres://app:hunter2@db/tollgate".into());
        assert_eq!(format!("{store:?}"), r#""postgres://app:***@db/tollgate""#);
        assert_eq!(store.to_string(), "postgres://app:***@db/tollgate");
        assert_eq!(store.as_str(), "postgres://app:hunter2@db/tollgate");
    }

    #[test]
    fn secrets_parse_without_echo() {
        let k = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let s = Secret::from_hex(&format!(" 0x{k}\n")).unwrap();
        let shown = format!("{s:?} {s:#?} {s}");
        assert!(!shown.contains(&k[..8]), "{shown}");
        assert!(
            shown.contains("[REDACTED]") && shown.ends_with(" [redacted]"),
            "{shown}"
        );
        assert_eq!(Secret::from_hex(k).unwrap().address(), s.address());
        assert_eq!(s.signer().to_bytes().to_string(), format!("0x{k}"));
        assert_eq!(s.clone().into_signer().address(), s.address());
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
