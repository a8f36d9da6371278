//! Memos: the spec's request reference, issued per 402 and checked without a database.
//!
//! A memo is 32 bytes: `expiry (u64 BE) ‖ salt (8 random bytes) ‖ mac (16 bytes)`, where
//! `mac = keccak256(domain ‖ secret ‖ method ‖ path ‖ price ‖ payTo ‖ network ‖ token ‖ expiry ‖
//! salt)[..16]`. Variable-length fields are length-prefixed, so no two inputs share an encoding;
//! keccak256 has no length extension, so the secret-prefix MAC is sound. A memo therefore binds
//! the method, the resource path, the price, the payee, the network and the token, and carries
//! its own expiry; only the once-only set (the memo store) needs storage.

use std::fmt;

use alloy::primitives::{Address, B256, keccak256};
use tollgate_protocol::{Amount, network};

/// Domain separation for the MAC input.
const DOMAIN: &[u8] = b"tollgate-gate/memo/v1";

/// The 32-byte secret memos are MACed with. Never printed.
#[derive(Clone)]
pub(crate) struct MemoSecret(pub(crate) [u8; 32]);

impl fmt::Debug for MemoSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoSecret(<redacted>)")
    }
}

/// What a memo binds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemoTerms<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) price: Amount,
    pub(crate) pay_to: Address,
    pub(crate) network: &'a str,
    pub(crate) token: Address,
}

/// Why a memo does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoCheck {
    /// The MAC does not match these terms.
    Forged,
    /// The MAC matches, but the expiry has passed.
    Expired(u64),
}

fn mac(secret: &MemoSecret, terms: &MemoTerms<'_>, expiry: u64, salt: &[u8]) -> [u8; 16] {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(DOMAIN);
    buf.extend_from_slice(&secret.0);
    let mut field = |b: &[u8]| {
        buf.extend_from_slice(&(b.len() as u32).to_be_bytes());
        buf.extend_from_slice(b);
    };
    field(terms.method.as_bytes());
    field(terms.path.as_bytes());
    field(&terms.price.get().to_be_bytes::<32>());
    field(terms.pay_to.as_slice());
    // `base-mainnet` and `base` are one network.
    field(
        network::canonical_name(terms.network)
            .unwrap_or(terms.network)
            .as_bytes(),
    );
    field(terms.token.as_slice());
    field(&expiry.to_be_bytes());
    field(salt);
    let h = keccak256(&buf);
    let mut out = [0; 16];
    out.copy_from_slice(&h[..16]);
    out
}

/// A fresh memo for `terms`, valid until `expiry` (unix seconds).
pub(crate) fn issue(secret: &MemoSecret, terms: &MemoTerms<'_>, expiry: u64) -> B256 {
    let salt = B256::random();
    issue_with_salt(secret, terms, expiry, &salt[..8])
}

fn issue_with_salt(secret: &MemoSecret, terms: &MemoTerms<'_>, expiry: u64, salt: &[u8]) -> B256 {
    let mut memo = [0u8; 32];
    memo[..8].copy_from_slice(&expiry.to_be_bytes());
    memo[8..16].copy_from_slice(salt);
    memo[16..].copy_from_slice(&mac(secret, terms, expiry, salt));
    B256::from(memo)
}

/// Checks that `memo` was issued for `terms` and is not expired at `now`; returns its expiry.
pub(crate) fn check(
    secret: &MemoSecret,
    terms: &MemoTerms<'_>,
    memo: &B256,
    now: u64,
) -> Result<u64, MemoCheck> {
    let expiry = expiry_of(memo);
    let expected = mac(secret, terms, expiry, &memo[8..16]);
    // Constant time over the 16 bytes.
    let diff = expected
        .iter()
        .zip(&memo[16..])
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if diff != 0 {
        return Err(MemoCheck::Forged);
    }
    if expiry <= now {
        return Err(MemoCheck::Expired(expiry));
    }
    Ok(expiry)
}

/// The expiry a memo claims (unauthenticated until [`check`]).
pub(crate) fn expiry_of(memo: &B256) -> u64 {
    let mut e = [0u8; 8];
    e.copy_from_slice(&memo[..8]);
    u64::from_be_bytes(e)
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_750_000_000;

    fn terms() -> MemoTerms<'static> {
        MemoTerms {
            method: "GET",
            path: "/v1/quote",
            price: Amount::from_units(500_000),
            pay_to: Address::repeat_byte(2),
            network: "base",
            token: Address::repeat_byte(1),
        }
    }

    #[test]
    fn layout_and_round_trip() {
        let s = MemoSecret([7; 32]);
        let m = issue(&s, &terms(), NOW + 300);
        assert_eq!(expiry_of(&m), NOW + 300);
        assert_eq!(check(&s, &terms(), &m, NOW), Ok(NOW + 300));
        // Two memos for the same terms differ (salt).
        assert_ne!(m, issue(&s, &terms(), NOW + 300));
        // Deterministic given the salt.
        let a = issue_with_salt(&s, &terms(), NOW + 1, &[1; 8]);
        assert_eq!(a, issue_with_salt(&s, &terms(), NOW + 1, &[1; 8]));
        // `base-mainnet` is `base`.
        let alias = MemoTerms {
            network: "base-mainnet",
            ..terms()
        };
        assert_eq!(check(&s, &alias, &m, NOW), Ok(NOW + 300));
    }

    #[test]
    fn every_bound_field_matters() {
        let s = MemoSecret([7; 32]);
        let m = issue(&s, &terms(), NOW + 300);
        let t = terms();
        let others = [
            MemoTerms {
                method: "POST",
                ..t
            },
            MemoTerms {
                path: "/v1/other",
                ..t
            },
            MemoTerms {
                price: Amount::from_units(499_999),
                ..t
            },
            MemoTerms {
                pay_to: Address::repeat_byte(3),
                ..t
            },
            MemoTerms {
                network: "base-sepolia",
                ..t
            },
            MemoTerms {
                token: Address::repeat_byte(9),
                ..t
            },
        ];
        for (i, o) in others.iter().enumerate() {
            assert_eq!(check(&s, o, &m, NOW), Err(MemoCheck::Forged), "case {i}");
        }
        // Another secret (another gate, or a forger).
        assert_eq!(
            check(&MemoSecret([8; 32]), &t, &m, NOW),
            Err(MemoCheck::Forged)
        );
        // Moving the expiry breaks the MAC.
        let mut moved = m;
        moved.0[7] ^= 1;
        assert_eq!(check(&s, &t, &moved, NOW), Err(MemoCheck::Forged));
        // A genuine memo past its time.
        assert_eq!(
            check(&s, &t, &m, NOW + 300),
            Err(MemoCheck::Expired(NOW + 300))
        );
        // Length prefixes: moving a byte between fields changes the MAC.
        let a = MemoTerms {
            method: "GE",
            path: "T/v1/quote",
            ..t
        };
        assert_eq!(check(&s, &a, &m, NOW), Err(MemoCheck::Forged));
    }

    #[test]
    fn debug_redacts_the_secret() {
        assert_eq!(
            format!("{:?}", MemoSecret([7; 32])),
            "MemoSecret(<redacted>)"
        );
    }
}
