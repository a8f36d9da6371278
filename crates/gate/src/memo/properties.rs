//! Property tests of memos: an issued memo verifies for exactly its terms before its expiry, and
//! every other field, bit, secret or time is refused with the right [`MemoCheck`].

use alloy::primitives::{Address, B256, U256};
use proptest::prelude::*;
use tollgate_protocol::{Amount, network};

use super::{MemoCheck, MemoSecret, MemoTerms, check, expiry_of, issue, issue_with_salt};

/// Terms owned by the test (`MemoTerms` borrows).
#[derive(Clone, Debug)]
struct Terms {
    method: String,
    path: String,
    price: U256,
    pay_to: Address,
    network: String,
    token: Address,
}

impl Terms {
    fn memo_terms(&self) -> MemoTerms<'_> {
        MemoTerms {
            method: &self.method,
            path: &self.path,
            price: Amount(self.price),
            pay_to: self.pay_to,
            network: &self.network,
            token: self.token,
        }
    }
}

/// What the memo binds of a network name: `base-mainnet` and `base` are one network.
fn network_key(name: &str) -> &str {
    network::canonical_name(name).unwrap_or(name)
}

fn any_u256() -> impl Strategy<Value = U256> {
    prop_oneof![
        any::<[u64; 4]>().prop_map(U256::from_limbs),
        any::<u64>().prop_map(U256::from),
        Just(U256::ZERO),
        Just(U256::MAX),
    ]
}

fn any_address() -> impl Strategy<Value = Address> {
    any::<[u8; 20]>().prop_map(Address::from)
}

fn any_method() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(&["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"][..])
            .prop_map(str::to_owned),
        ".{0,12}",
    ]
}

fn any_path() -> impl Strategy<Value = String> {
    prop_oneof!["/[a-z0-9/._?=&-]{0,40}", ".{0,40}"]
}

fn any_network() -> impl Strategy<Value = String> {
    let known: Vec<String> = network::KNOWN_NETWORKS
        .iter()
        .flat_map(|n| [n.name.to_owned(), format!("{}-mainnet", n.name)])
        .collect();
    prop_oneof![prop::sample::select(known), "[a-z-]{0,16}", ".{0,16}"]
}

fn any_terms() -> impl Strategy<Value = Terms> {
    (
        any_method(),
        any_path(),
        any_u256(),
        any_address(),
        any_network(),
        any_address(),
    )
        .prop_map(|(method, path, price, pay_to, network, token)| Terms {
            method,
            path,
            price,
            pay_to,
            network,
            token,
        })
}

/// An expiry and a time strictly before it.
fn before_expiry() -> impl Strategy<Value = (u64, u64)> {
    (1..=u64::MAX).prop_flat_map(|expiry| {
        (
            Just(expiry),
            prop_oneof![0..expiry, Just(expiry - 1), Just(0)],
        )
    })
}

/// One field of the terms, replaced by another value.
#[derive(Clone, Debug)]
enum Change {
    Method(String),
    Path(String),
    Price(U256),
    PayTo(Address),
    Network(String),
    Token(Address),
}

fn any_change() -> impl Strategy<Value = Change> {
    prop_oneof![
        any_method().prop_map(Change::Method),
        any_path().prop_map(Change::Path),
        any_u256().prop_map(Change::Price),
        any_address().prop_map(Change::PayTo),
        any_network().prop_map(Change::Network),
        any_address().prop_map(Change::Token),
    ]
}

/// `terms` with `change` applied, or `None` when the change leaves the bound value as it was.
fn changed(terms: &Terms, change: Change) -> Option<Terms> {
    let mut t = terms.clone();
    let differs = match change {
        Change::Method(m) => {
            let d = m != t.method;
            t.method = m;
            d
        }
        Change::Path(p) => {
            let d = p != t.path;
            t.path = p;
            d
        }
        Change::Price(p) => {
            let d = p != t.price;
            t.price = p;
            d
        }
        Change::PayTo(a) => {
            let d = a != t.pay_to;
            t.pay_to = a;
            d
        }
        Change::Network(n) => {
            let d = network_key(&n) != network_key(&t.network);
            t.network = n;
            d
        }
        Change::Token(a) => {
            let d = a != t.token;
            t.token = a;
            d
        }
    };
    differs.then_some(t)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Issued for these terms, checked before the expiry: accepted, with the expiry it carries.
    #[test]
    fn issued_memo_verifies_before_expiry(
        terms in any_terms(),
        secret in any::<[u8; 32]>(),
        (expiry, now) in before_expiry(),
        salt in any::<[u8; 8]>(),
    ) {
        let s = MemoSecret(secret);
        let t = terms.memo_terms();
        let random = issue(&s, &t, expiry);
        prop_assert_eq!(expiry_of(&random), expiry);
        prop_assert_eq!(check(&s, &t, &random, now), Ok(expiry));
        let salted = issue_with_salt(&s, &t, expiry, &salt);
        prop_assert_eq!(&salted[8..16], &salt[..]);
        prop_assert_eq!(check(&s, &t, &salted, now), Ok(expiry));
        // The alias of the network is the network.
        if let Some(canonical) = network::canonical_name(&terms.network) {
            let alias = MemoTerms { network: canonical, ..t };
            prop_assert_eq!(check(&s, &alias, &salted, now), Ok(expiry));
        }
    }

    /// Any single field changed: `Forged`, before or after the expiry alike.
    #[test]
    fn any_changed_field_is_forged(
        terms in any_terms(),
        change in any_change(),
        secret in any::<[u8; 32]>(),
        (expiry, now) in before_expiry(),
        late in any::<bool>(),
    ) {
        let other = changed(&terms, change);
        prop_assume!(other.is_some());
        let other = other.unwrap();
        let s = MemoSecret(secret);
        let memo = issue(&s, &terms.memo_terms(), expiry);
        let at = if late { expiry } else { now };
        prop_assert_eq!(check(&s, &other.memo_terms(), &memo, at), Err(MemoCheck::Forged));
    }

    /// Moving the boundary between method and path (same bytes, split elsewhere): `Forged`.
    #[test]
    fn method_path_boundary_is_bound(
        terms in any_terms(),
        secret in any::<[u8; 32]>(),
        split in any::<prop::sample::Index>(),
    ) {
        let joined = format!("{}{}", terms.method, terms.path);
        let boundaries: Vec<usize> = (0..=joined.len())
            .filter(|&i| joined.is_char_boundary(i) && i != terms.method.len())
            .collect();
        prop_assume!(!boundaries.is_empty());
        let at = boundaries[split.index(boundaries.len())];
        let moved = Terms {
            method: joined[..at].to_owned(),
            path: joined[at..].to_owned(),
            ..terms.clone()
        };
        let s = MemoSecret(secret);
        let memo = issue(&s, &terms.memo_terms(), u64::MAX);
        prop_assert_eq!(check(&s, &moved.memo_terms(), &memo, 0), Err(MemoCheck::Forged));
    }

    /// Any one of the 256 bits flipped (expiry, salt or MAC): `Forged`.
    #[test]
    fn any_flipped_bit_is_forged(
        terms in any_terms(),
        secret in any::<[u8; 32]>(),
        (expiry, now) in before_expiry(),
        bit in 0..256usize,
    ) {
        let s = MemoSecret(secret);
        let t = terms.memo_terms();
        let memo = issue(&s, &t, expiry);
        let mut flipped = memo;
        flipped.0[bit / 8] ^= 1 << (bit % 8);
        prop_assert_eq!(check(&s, &t, &flipped, now), Err(MemoCheck::Forged));
        // Whatever expiry the flipped memo now claims.
        prop_assert_eq!(check(&s, &t, &flipped, expiry_of(&flipped).saturating_sub(1)), Err(MemoCheck::Forged));
    }

    /// Checked with another secret (another gate, a forger, or one bit off): `Forged`.
    #[test]
    fn another_secret_is_forged(
        terms in any_terms(),
        secret in any::<[u8; 32]>(),
        random in any::<[u8; 32]>(),
        bit in prop::option::of(0..256usize),
        (expiry, now) in before_expiry(),
    ) {
        let other = match bit {
            Some(bit) => {
                let mut o = secret;
                o[bit / 8] ^= 1 << (bit % 8);
                o
            }
            None => random,
        };
        prop_assume!(secret != other);
        let t = terms.memo_terms();
        let memo = issue(&MemoSecret(secret), &t, expiry);
        prop_assert_eq!(check(&MemoSecret(other), &t, &memo, now), Err(MemoCheck::Forged));
    }

    /// A genuine memo at or after its expiry: `Expired` with that expiry.
    #[test]
    fn expired_memo_is_expired(
        terms in any_terms(),
        secret in any::<[u8; 32]>(),
        expiry in any::<u64>(),
        late in prop_oneof![0..10u64, any::<u64>()],
    ) {
        let s = MemoSecret(secret);
        let t = terms.memo_terms();
        let memo = issue(&s, &t, expiry);
        let now = expiry.saturating_add(late);
        prop_assert_eq!(check(&s, &t, &memo, expiry), Err(MemoCheck::Expired(expiry)));
        prop_assert_eq!(check(&s, &t, &memo, now), Err(MemoCheck::Expired(expiry)));
    }

    /// A memo of random bytes is never accepted.
    #[test]
    fn random_memos_are_forged(
        terms in any_terms(),
        secret in any::<[u8; 32]>(),
        memo in any::<[u8; 32]>(),
        now in any::<u64>(),
    ) {
        let memo = B256::from(memo);
        prop_assert_eq!(
            check(&MemoSecret(secret), &terms.memo_terms(), &memo, now),
            Err(MemoCheck::Forged)
        );
    }
}
