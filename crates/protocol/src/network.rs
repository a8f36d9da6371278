//! The built-in x402 V1 network registry: the network names the coinbase `x402@1.2.0` package
//! (and so `x402-fetch@1.2.0`) accepts, with their chain ids and default USDC.
//!
//! Source: `NetworkSchema`, `EvmNetworkToChainId`, `SvmNetworkToChainId` in
//! `typescript/packages/x402/src/types/shared/network.ts` and the USDC `config` in
//! `src/types/shared/evm/config.ts`, as published in `x402@1.2.0`.
//!
//! Names are case-sensitive, as x402's are. `<name>-mainnet` is accepted as an alias of a
//! mainnet name (`base-mainnet` → `base`) by [`lookup`] and [`canonical_name`], but x402 V1
//! clients only know the canonical names: anything put on the wire for them goes through
//! [`canonical_name`] first. Networks outside this list (a devnet, a chain x402 does not name) are
//! configured by name and chain id elsewhere; they cannot be paid by unmodified x402 V1 clients.

use std::{fmt, str::FromStr};

use alloy::primitives::{Address, address};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A network x402 V1 knows by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct KnownNetwork {
    /// The x402 V1 name (`base-sepolia`).
    pub name: &'static str,
    /// The EIP-155 chain id. For a non-EVM network, x402's own stand-in number (Solana: 101 and
    /// 103), which is no EIP-155 chain id and is never returned by [`by_chain_id`].
    pub chain_id: u64,
    /// Whether the network is an EVM chain. Tollgate settles on EVM networks only; the others are
    /// listed so that errors can say "not an EVM network" instead of "unknown network".
    pub evm: bool,
    /// Whether the network is a test network.
    pub testnet: bool,
    /// The USDC contract x402 uses by default on this network, where it lists one (EVM only).
    pub usdc: Option<Address>,
    /// That contract's EIP-712 domain name as x402 lists it (`extra.name` of a default
    /// requirement; the domain version is `"2"` for all of them).
    pub usdc_name: Option<&'static str>,
}

impl KnownNetwork {
    const fn evm(
        name: &'static str,
        chain_id: u64,
        testnet: bool,
        usdc: Address,
        usdc_name: &'static str,
    ) -> Self {
        Self {
            name,
            chain_id,
            evm: true,
            testnet,
            usdc: Some(usdc),
            usdc_name: Some(usdc_name),
        }
    }

    const fn non_evm(name: &'static str, chain_id: u64, testnet: bool) -> Self {
        Self {
            name,
            chain_id,
            evm: false,
            testnet,
            usdc: None,
            usdc_name: None,
        }
    }
}

/// The EIP-712 domain version of every default USDC in [`KNOWN_NETWORKS`].
pub const USDC_EIP712_VERSION: &str = "2";

/// Every network name x402 V1 (`x402@1.2.0`) accepts, in the package's order.
pub const KNOWN_NETWORKS: &[KnownNetwork] = &[
    KnownNetwork::evm(
        "abstract",
        2741,
        false,
        address!("0x84a71ccd554cc1b02749b35d22f684cc8ec987e1"),
        "Bridged USDC",
    ),
    KnownNetwork::evm(
        "abstract-testnet",
        11124,
        true,
        address!("0xe4C7fBB0a626ed208021ccabA6Be1566905E2dFc"),
        "Bridged USDC",
    ),
    KnownNetwork::evm(
        "base-sepolia",
        84532,
        true,
        address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
        "USDC",
    ),
    KnownNetwork::evm(
        "base",
        8453,
        false,
        address!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
        "USD Coin",
    ),
    KnownNetwork::evm(
        "avalanche-fuji",
        43113,
        true,
        address!("0x5425890298aed601595a70AB815c96711a31Bc65"),
        "USD Coin",
    ),
    KnownNetwork::evm(
        "avalanche",
        43114,
        false,
        address!("0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E"),
        "USD Coin",
    ),
    KnownNetwork::evm(
        "iotex",
        4689,
        false,
        address!("0xcdf79194c6c285077a58da47641d4dbe51f63542"),
        "Bridged USDC",
    ),
    KnownNetwork::non_evm("solana-devnet", 103, true),
    KnownNetwork::non_evm("solana", 101, false),
    KnownNetwork::evm(
        "sei",
        1329,
        false,
        address!("0xe15fc38f6d8c56af07bbcbe3baf5708a2bf42392"),
        "USDC",
    ),
    KnownNetwork::evm(
        "sei-testnet",
        1328,
        true,
        address!("0x4fcf1784b31630811181f670aea7a7bef803eaed"),
        "USDC",
    ),
    KnownNetwork::evm(
        "polygon",
        137,
        false,
        address!("0x3c499c542cef5e3811e1192ce70d8cc03d5c3359"),
        "USD Coin",
    ),
    KnownNetwork::evm(
        "polygon-amoy",
        80002,
        true,
        address!("0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582"),
        "USDC",
    ),
    KnownNetwork::evm(
        "peaq",
        3338,
        false,
        address!("0xbbA60da06c2c5424f03f7434542280FCAd453d10"),
        "USDC",
    ),
    KnownNetwork::evm(
        "story",
        1514,
        false,
        address!("0xF1815bd50389c46847f0Bda824eC8da914045D14"),
        "Bridged USDC",
    ),
    KnownNetwork::evm(
        "educhain",
        41923,
        false,
        address!("0x12a272A581feE5577A5dFa371afEB4b2F3a8C2F8"),
        "Bridged USDC (Stargate)",
    ),
    KnownNetwork::evm(
        "skale-base-sepolia",
        324705682,
        true,
        address!("0x2e08028E3C4c2356572E096d8EF835cD5C6030bD"),
        "Bridged USDC (SKALE Bridge)",
    ),
];

/// The suffix accepted as an alias of a mainnet name.
const MAINNET_SUFFIX: &str = "-mainnet";

/// The network a name stands for: an x402 V1 name, or `<name>-mainnet` for a mainnet one.
/// Case-sensitive (`Base` is unknown), as x402 is.
pub fn lookup(name: &str) -> Option<&'static KnownNetwork> {
    if let Some(known) = exact(name) {
        return Some(known);
    }
    let base = name.strip_suffix(MAINNET_SUFFIX)?;
    exact(base).filter(|n| !n.testnet)
}

fn exact(name: &str) -> Option<&'static KnownNetwork> {
    KNOWN_NETWORKS.iter().find(|n| n.name == name)
}

/// The EVM network x402 V1 names for an EIP-155 chain id.
pub fn by_chain_id(chain_id: u64) -> Option<&'static KnownNetwork> {
    KNOWN_NETWORKS
        .iter()
        .find(|n| n.evm && n.chain_id == chain_id)
}

/// The x402 V1 spelling of a network name (`base-mainnet` → `base`); `None` for a name x402 does
/// not know.
pub fn canonical_name(name: &str) -> Option<&'static str> {
    lookup(name).map(|n| n.name)
}

/// Whether x402 V1 clients accept `name` as it is in a `network` field (aliases are not).
pub fn is_x402_v1_name(name: &str) -> bool {
    exact(name).is_some()
}

/// Whether two network values denote the same network: equal, or both known (x402 V1 names,
/// aliases or CAIP-2 ids) with the same chain (`base`, `base-mainnet` and `eip155:8453`). A
/// custom name is the same only as itself.
pub fn same_network(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    if let (Some(x), Some(y)) = (canonical_name(a), canonical_name(b)) {
        return x == y;
    }
    match (
        a.contains(':') || b.contains(':'),
        chain_id_of(a),
        chain_id_of(b),
    ) {
        (true, Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The CAIP-2 namespace of EVM chains (`eip155:<chain id>`), which x402 V2 writes in `network`.
pub const EIP155: &str = "eip155";

/// The CAIP-2 id of an EVM chain: `eip155:84532`. Custom networks (a devnet) have one too
/// (`eip155:31337`), which is how x402 V2 names them.
pub fn caip2(chain_id: u64) -> String {
    format!("{EIP155}:{chain_id}")
}

/// The CAIP-2 id of a known network name, V1 spelling or alias (`base-sepolia` →
/// `eip155:84532`); `None` for a name x402 does not know or a non-EVM one.
pub fn caip2_of(name: &str) -> Option<String> {
    lookup(name).filter(|n| n.evm).map(|n| caip2(n.chain_id))
}

/// Why a `network` value names no EVM chain.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkError {
    /// Neither an x402 V1 name nor a CAIP-2 id.
    #[error(
        "unknown network {0:?}: expected an x402 V1 name (base, base-sepolia, …) or a CAIP-2 id \
         (eip155:84532)"
    )]
    Unknown(String),
    /// A CAIP-2 id of a namespace other than `eip155`, or a V1 name of a non-EVM network.
    #[error("network {0:?} is not an EVM chain (only eip155 networks settle here)")]
    NotEvm(String),
    /// `eip155:` with a reference that is no chain id.
    #[error("network {0:?}: the CAIP-2 reference after \"eip155:\" must be a decimal chain id")]
    BadChainId(String),
    /// Not the form of any network value: empty, longer than [`MAX_NETWORK_LEN`], or neither a
    /// name (lowercase letters, digits and `-`, not at either end) nor a CAIP-2 id
    /// (`namespace:reference`). Refused where a [`Network`] enters ([`Network::parse`]).
    #[error(
        "network {0:?} is malformed: expected a network name (lowercase letters, digits and `-`, \
         at most 64) such as base-sepolia, or a CAIP-2 id such as eip155:84532"
    )]
    Malformed(String),
}

/// The EIP-155 chain id a `network` value names: an x402 V1 name or alias (`base-sepolia`), or a
/// CAIP-2 id (`eip155:84532`, also for chains x402 does not name, such as a devnet's
/// `eip155:31337`). Custom V1-style names (`tollgate-devnet`) are configured elsewhere and are
/// [`NetworkError::Unknown`] here.
pub fn chain_id_of(network: &str) -> Result<u64, NetworkError> {
    if let Some((namespace, reference)) = network.split_once(':') {
        if namespace != EIP155 {
            return Err(NetworkError::NotEvm(network.to_owned()));
        }
        let valid = !reference.is_empty()
            && reference.len() <= 20
            && reference.bytes().all(|b| b.is_ascii_digit())
            && !(reference.len() > 1 && reference.starts_with('0'));
        return reference
            .parse()
            .ok()
            .filter(|id| valid && *id > 0)
            .ok_or_else(|| NetworkError::BadChainId(network.to_owned()));
    }
    match lookup(network) {
        Some(n) if n.evm => Ok(n.chain_id),
        Some(_) => Err(NetworkError::NotEvm(network.to_owned())),
        None => Err(NetworkError::Unknown(network.to_owned())),
    }
}

/// The longest `network` value a [`Network`] takes (a configured custom name is at most this
/// long; a CAIP-2 id at most 41 bytes).
pub const MAX_NETWORK_LEN: usize = 64;

/// A `network` value as it travels on the wire: an x402 V1 name (`base-sepolia`) or its
/// `-mainnet` alias, a CAIP-2 id (`eip155:84532`, how x402 V2 names networks), or a custom
/// network's configured name (`tollgate-devnet`).
///
/// [`Network::parse`] (and so deserialization) checks the *form* only, and keeps the value
/// exactly as received, so it serializes back unchanged: whether the network is served is the
/// receiver's question (a facilitator serves the networks it is configured with), answered with
/// its own error. The forms:
///
/// - a name: 1 to [`MAX_NETWORK_LEN`] lowercase ASCII letters, digits and `-`, not starting or
///   ending with `-` (every x402 V1 name, and what a facilitator accepts as a custom name);
/// - a CAIP-2 id: a namespace of 3 to 8 lowercase letters, digits and `-`, `:`, and a reference
///   of 1 to 32 letters, digits, `-` and `_`; an `eip155` reference must be a chain id
///   ([`chain_id_of`]).
///
/// ```
/// use tollgate_protocol::network::Network;
///
/// let n: Network = "base-sepolia".parse().unwrap();
/// assert_eq!(n.caip2().as_deref(), Some("eip155:84532"));
/// let v2: Network = "eip155:84532".parse().unwrap();
/// assert_eq!(v2.v1_name(), Some("base-sepolia"));
/// assert!(n.same_as(&v2));
/// assert!("eip155:abc".parse::<Network>().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Network(String);

impl Network {
    /// `value` if it has the form of a network value (see [`Network`]), kept as it is.
    pub fn parse(value: impl Into<String>) -> Result<Self, NetworkError> {
        let value = value.into();
        if well_formed(&value) {
            Ok(Self(value))
        } else if value.starts_with("eip155:") && value.len() <= MAX_NETWORK_LEN {
            Err(NetworkError::BadChainId(value))
        } else {
            Err(NetworkError::Malformed(value))
        }
    }

    /// The CAIP-2 id of an EVM chain (`eip155:<chain id>`). Infallible: every chain id but 0
    /// is well-formed, and 0 is refused by [`chain_id_of`] where it is read.
    pub fn eip155(chain_id: u64) -> Self {
        Self(caip2(chain_id))
    }

    /// The value as received.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value as received.
    pub fn into_string(self) -> String {
        self.0
    }

    /// Whether the value is a CAIP-2 id (`namespace:reference`) rather than a name.
    pub fn is_caip2(&self) -> bool {
        self.0.contains(':')
    }

    /// The x402 V1 network it names, by name, alias or `eip155` id.
    pub fn known(&self) -> Option<&'static KnownNetwork> {
        match chain_id_of(&self.0) {
            Ok(id) if self.is_caip2() => by_chain_id(id),
            _ => lookup(&self.0),
        }
    }

    /// The EIP-155 chain id ([`chain_id_of`]): known names and `eip155` ids; a custom name is
    /// [`NetworkError::Unknown`] (its chain id is configured elsewhere).
    pub fn chain_id(&self) -> Result<u64, NetworkError> {
        chain_id_of(&self.0)
    }

    /// The CAIP-2 id (x402 V2's spelling): the value itself if it is an `eip155` id, that of a
    /// known EVM name or alias, `None` for a custom name or a non-EVM network.
    pub fn caip2(&self) -> Option<String> {
        if self.is_caip2() {
            return chain_id_of(&self.0).ok().map(|_| self.0.clone());
        }
        caip2_of(&self.0)
    }

    /// The x402 V1 name (x402 V1's spelling): the canonical name of a known name or alias, the
    /// name of a known chain's `eip155` id, `None` for a custom name or an unnamed chain.
    pub fn v1_name(&self) -> Option<&'static str> {
        self.known().map(|n| n.name)
    }

    /// Whether `other` denotes the same network ([`same_network`]).
    pub fn same_as(&self, other: &str) -> bool {
        same_network(&self.0, other)
    }
}

/// The form check of [`Network::parse`].
fn well_formed(value: &str) -> bool {
    if value.is_empty() || value.len() > MAX_NETWORK_LEN {
        return false;
    }
    match value.split_once(':') {
        None => {
            value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !value.starts_with('-')
                && !value.ends_with('-')
        }
        Some((namespace, reference)) => {
            (3..=8).contains(&namespace.len())
                && namespace
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && (1..=32).contains(&reference.len())
                && reference
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && (namespace != EIP155 || chain_id_of(value).is_ok())
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl std::ops::Deref for Network {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Network {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Network {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl FromStr for Network {
    type Err = NetworkError;

    fn from_str(s: &str) -> Result<Self, NetworkError> {
        Self::parse(s)
    }
}

impl TryFrom<String> for Network {
    type Error = NetworkError;

    fn try_from(s: String) -> Result<Self, NetworkError> {
        Self::parse(s)
    }
}

impl TryFrom<&str> for Network {
    type Error = NetworkError;

    fn try_from(s: &str) -> Result<Self, NetworkError> {
        Self::parse(s)
    }
}

impl From<Network> for String {
    fn from(n: Network) -> Self {
        n.0
    }
}

impl From<&KnownNetwork> for Network {
    fn from(n: &KnownNetwork) -> Self {
        Self(n.name.to_owned())
    }
}

impl PartialEq<str> for Network {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Network {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for Network {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<Network> for String {
    fn eq(&self, other: &Network) -> bool {
        *self == other.0
    }
}

impl PartialEq<Network> for str {
    fn eq(&self, other: &Network) -> bool {
        self == other.0
    }
}

impl PartialEq<Network> for &str {
    fn eq(&self, other: &Network) -> bool {
        *self == other.0
    }
}

impl Serialize for Network {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(s.into_owned()).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_network_in_either_notation() {
        assert!(same_network("base-sepolia", "eip155:84532"));
        assert!(same_network("eip155:8453", "base-mainnet"));
        assert!(same_network("eip155:31337", "eip155:31337"));
        assert!(!same_network("base", "eip155:84532"));
        assert!(!same_network("tollgate-devnet", "eip155:31337"));
        assert!(!same_network("solana", "eip155:101"));
    }

    #[test]
    fn caip2_ids_map_to_and_from_v1_names() {
        assert_eq!(caip2_of("base-sepolia").as_deref(), Some("eip155:84532"));
        assert_eq!(caip2_of("base-mainnet").as_deref(), Some("eip155:8453"));
        assert_eq!(caip2_of("solana"), None);
        assert_eq!(caip2_of("tollgate-devnet"), None);
        assert_eq!(caip2(31337), "eip155:31337");
        for n in KNOWN_NETWORKS.iter().filter(|n| n.evm) {
            let id = caip2_of(n.name).unwrap();
            assert_eq!(chain_id_of(&id), Ok(n.chain_id), "{id}");
            assert_eq!(chain_id_of(n.name), Ok(n.chain_id), "{}", n.name);
            assert_eq!(by_chain_id(n.chain_id).map(|k| k.name), Some(n.name));
        }
        assert_eq!(chain_id_of("eip155:31337"), Ok(31337));
        assert_eq!(
            chain_id_of("solana"),
            Err(NetworkError::NotEvm("solana".into()))
        );
        for bad in [
            "eip155:",
            "eip155:0",
            "eip155:01",
            "eip155:-1",
            "eip155:1a",
            "eip155:99999999999999999999999",
        ] {
            assert_eq!(
                chain_id_of(bad),
                Err(NetworkError::BadChainId(bad.into())),
                "{bad}"
            );
        }
        assert!(matches!(
            chain_id_of("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"),
            Err(NetworkError::NotEvm(_))
        ));
        let unknown = chain_id_of("Base").unwrap_err();
        assert!(unknown.to_string().contains("eip155:84532"), "{unknown}");
    }

    #[test]
    fn ids_match_the_x402_package() {
        let expected = [
            ("abstract", 2741),
            ("abstract-testnet", 11124),
            ("base-sepolia", 84532),
            ("base", 8453),
            ("avalanche-fuji", 43113),
            ("avalanche", 43114),
            ("iotex", 4689),
            ("sei", 1329),
            ("sei-testnet", 1328),
            ("polygon", 137),
            ("polygon-amoy", 80002),
            ("peaq", 3338),
            ("story", 1514),
            ("educhain", 41923),
            ("skale-base-sepolia", 324705682),
        ];
        for (name, id) in expected {
            let n = lookup(name).unwrap_or_else(|| panic!("{name} is known"));
            assert!(n.evm, "{name}");
            assert_eq!(n.chain_id, id, "{name}");
            assert!(n.usdc.is_some() && n.usdc_name.is_some(), "{name}");
            assert_eq!(by_chain_id(id).map(|n| n.name), Some(name));
            assert!(is_x402_v1_name(name));
        }
        assert_eq!(
            KNOWN_NETWORKS.iter().filter(|n| n.evm).count(),
            expected.len()
        );
        assert_eq!(
            KNOWN_NETWORKS.len(),
            expected.len() + 2,
            "plus solana and solana-devnet"
        );
    }

    #[test]
    fn names_are_unique_and_testnets_flagged() {
        for (i, a) in KNOWN_NETWORKS.iter().enumerate() {
            for b in &KNOWN_NETWORKS[i + 1..] {
                assert_ne!(a.name, b.name);
                assert!(
                    !(a.evm && b.evm && a.chain_id == b.chain_id),
                    "{} / {}",
                    a.name,
                    b.name
                );
            }
        }
        for name in [
            "base-sepolia",
            "avalanche-fuji",
            "sei-testnet",
            "polygon-amoy",
            "abstract-testnet",
            "skale-base-sepolia",
            "solana-devnet",
        ] {
            assert!(lookup(name).unwrap().testnet, "{name}");
        }
        for name in [
            "base",
            "avalanche",
            "polygon",
            "sei",
            "iotex",
            "abstract",
            "peaq",
            "story",
            "educhain",
            "solana",
        ] {
            assert!(!lookup(name).unwrap().testnet, "{name}");
        }
    }

    #[test]
    fn mainnet_aliases_resolve_to_the_mainnet_name() {
        assert_eq!(canonical_name("base-mainnet"), Some("base"));
        assert_eq!(canonical_name("polygon-mainnet"), Some("polygon"));
        assert_eq!(canonical_name("avalanche-mainnet"), Some("avalanche"));
        assert_eq!(lookup("base-mainnet").map(|n| n.chain_id), Some(8453));
        assert_eq!(canonical_name("base"), Some("base"));
        // Aliases are ours; x402 clients would refuse them on the wire.
        assert!(!is_x402_v1_name("base-mainnet"));
        // No alias for a testnet, nor a doubled suffix.
        assert_eq!(lookup("base-sepolia-mainnet"), None);
        assert_eq!(lookup("base-mainnet-mainnet"), None);
        assert!(same_network("base", "base-mainnet"));
        assert!(same_network("devnet", "devnet"));
        assert!(!same_network("base", "base-sepolia"));
    }

    #[test]
    fn lookup_is_case_sensitive_and_exact() {
        for name in [
            "Base",
            "BASE",
            "base ",
            "",
            "-mainnet",
            "eip155:8453",
            "ethereum",
            "optimism-sepolia",
            "lisk",
        ] {
            assert_eq!(lookup(name), None, "{name:?}");
            assert!(!is_x402_v1_name(name), "{name:?}");
        }
    }

    #[test]
    fn solana_is_known_but_not_evm() {
        let sol = lookup("solana").unwrap();
        assert!(!sol.evm);
        assert_eq!(sol.usdc, None);
        assert!(is_x402_v1_name("solana-devnet"));
        assert_eq!(canonical_name("solana-mainnet"), Some("solana"));
        assert_eq!(
            by_chain_id(101),
            None,
            "x402's solana numbers are no EIP-155 ids"
        );
    }

    #[test]
    fn default_usdc() {
        let base = lookup("base").unwrap();
        assert_eq!(
            base.usdc,
            Some(address!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"))
        );
        assert_eq!(base.usdc_name, Some("USD Coin"));
        assert_eq!(lookup("base-sepolia").unwrap().usdc_name, Some("USDC"));
    }

    #[test]
    fn network_values_of_every_form_in_use_parse_and_keep_their_spelling() {
        for ok in [
            "base",
            "base-sepolia",
            "base-mainnet",
            "solana",
            "skale-base-sepolia",
            "tollgate-devnet",
            "devnet",
            "anvil",
            "x",
            "eip155:8453",
            "eip155:84532",
            "eip155:31337",
            "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
            &"a".repeat(MAX_NETWORK_LEN),
        ] {
            let n = Network::parse(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
            assert_eq!(n.as_str(), ok);
            assert_eq!(serde_json::to_value(&n).unwrap(), ok);
            let read: Network = serde_json::from_value(ok.into()).unwrap();
            assert_eq!(read, n);
        }
        let v1 = Network::parse("base-sepolia").unwrap();
        assert_eq!(v1.caip2().as_deref(), Some("eip155:84532"));
        assert_eq!(v1.v1_name(), Some("base-sepolia"));
        assert_eq!(v1.chain_id(), Ok(84532));
        let alias = Network::parse("base-mainnet").unwrap();
        assert_eq!(alias.v1_name(), Some("base"));
        assert_eq!(alias.caip2().as_deref(), Some("eip155:8453"));
        let v2 = Network::parse("eip155:8453").unwrap();
        assert_eq!(v2.v1_name(), Some("base"));
        assert_eq!(v2.caip2().as_deref(), Some("eip155:8453"));
        assert!(v2.same_as("base") && alias.same_as("base"));
        let devnet = Network::parse("tollgate-devnet").unwrap();
        assert_eq!((devnet.caip2(), devnet.v1_name()), (None, None));
        let chain = Network::eip155(31337);
        assert_eq!(chain, "eip155:31337");
        assert_eq!(
            (chain.caip2().as_deref(), chain.v1_name()),
            (Some("eip155:31337"), None)
        );
        assert_eq!(Network::parse("solana").unwrap().caip2(), None);
    }

    #[test]
    fn malformed_network_values_are_refused_with_a_typed_error() {
        for bad in [
            "",
            " ",
            "base ",
            " base",
            "Base",
            "BASE",
            "base_sepolia",
            "base.sepolia",
            "-base",
            "base-",
            "ünïcode-net",
            "base\n",
            ":",
            ":8453",
            "EIP155:8453",
            "ab:1",
            "namespace9:1",
            "solana:",
            "solana:abc def",
            &"a".repeat(MAX_NETWORK_LEN + 1),
            &format!("solana:{}", "a".repeat(33)),
        ] {
            let err = Network::parse(bad).unwrap_err();
            assert_eq!(err, NetworkError::Malformed(bad.into()), "{bad:?}");
            assert!(
                serde_json::from_value::<Network>(bad.into()).is_err(),
                "{bad:?}"
            );
        }
        for bad in [
            "eip155:abc",
            "eip155:",
            "eip155:0",
            "eip155:01",
            "eip155:-1",
        ] {
            assert_eq!(
                Network::parse(bad),
                Err(NetworkError::BadChainId(bad.into())),
                "{bad:?}"
            );
        }
        assert!(serde_json::from_value::<Network>(serde_json::json!(8453)).is_err());
    }
}
