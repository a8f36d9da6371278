//! A payment whose settlement is pending, and the retry token that keeps it for its payer.
//!
//! Once a facilitator broadcasts an x402 settlement, the whole authorization (signature
//! included) is public calldata: anyone can rebuild the payer's `X-PAYMENT` from the chain. So a
//! gate never serves a pending payment to whoever presents it; it serves it only to a retry that
//! echoes the payment's [`RetryToken`], a secret that only the payer's request received (or
//! chose). Over HTTP the token travels in [`X-PAYMENT-RETRY`](crate::headers::X_PAYMENT_RETRY);
//! over MCP in `_meta["tollgate/payment-retry"]` ([`super::MCP_PAYMENT_RETRY_META`]), and the
//! pending tool result is a [`SettlementPending`] in `structuredContent`.

use std::{fmt, str::FromStr};

use alloy::primitives::B256;
use serde::{Deserialize, Serialize};

/// The secret that entitles a retry to a pending payment: 32 random bytes, written `0x` and 64
/// hex digits. `Debug` hides it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryToken(B256);

impl RetryToken {
    /// A fresh random token.
    pub fn random() -> Self {
        Self(B256::random())
    }

    /// The token's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0.0
    }
}

impl From<B256> for RetryToken {
    /// A token of these bytes (one derived from a secret the payer holds, as an MPP gate
    /// derives it from the credential's challenge).
    fn from(bytes: B256) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for RetryToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RetryToken(..)")
    }
}

impl fmt::Display for RetryToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A retry token that is not `0x` and 64 hex digits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a retry token is 0x and 64 hex digits")]
pub struct RetryTokenError;

impl FromStr for RetryToken {
    type Err = RetryTokenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hex = s.strip_prefix("0x").ok_or(RetryTokenError)?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(RetryTokenError);
        }
        hex.parse::<B256>().map(Self).map_err(|_| RetryTokenError)
    }
}

impl Serialize for RetryToken {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RetryToken {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The answer to a paying request whose settlement was sent but is not confirmed yet: the
/// `structuredContent` of an MCP tool result (with `isError: true`), and the facts of an HTTP
/// 503 `SettlementPending` (whose token is in the `X-PAYMENT-RETRY` header).
///
/// The payer sends the same payment again with `retryToken` after `retryAfter` seconds, and is
/// served once the settlement is confirmed; it never pays again for this call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SettlementPending {
    /// Always [`SettlementPending::CODE`].
    pub error: String,
    /// What happened and what to do, for people.
    pub message: String,
    /// The settlement transaction, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<B256>,
    /// The token the retry must carry; absent when this answer does not hold the payment (a
    /// request that is not the payment's holder learns nothing it could take it with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_token: Option<RetryToken>,
    /// Seconds to wait before the retry.
    pub retry_after: u64,
}

impl SettlementPending {
    /// The `error` of a pending settlement (the gate's 503 code too).
    pub const CODE: &'static str = crate::ApiErrorCode::SettlementPending.as_str();

    /// A pending settlement's answer.
    pub fn new(
        message: impl Into<String>,
        transaction: Option<B256>,
        retry_token: Option<RetryToken>,
        retry_after: u64,
    ) -> Self {
        Self {
            error: Self::CODE.to_owned(),
            message: message.into(),
            transaction,
            retry_token,
            retry_after,
        }
    }

    /// Reads a pending answer from JSON (an MCP tool result's `structuredContent`): `None` when
    /// it is not one.
    pub fn from_value(value: &serde_json::Value) -> Option<Self> {
        if value.get("error")?.as_str()? != Self::CODE {
            return None;
        }
        serde_json::from_value(value.clone()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_what_it_writes_and_refuses_anything_else() {
        let t = RetryToken::random();
        assert_eq!(t.to_string().parse::<RetryToken>(), Ok(t));
        assert_ne!(RetryToken::random(), t);
        assert_eq!(format!("{t:?}"), "RetryToken(..)");
        for bad in [
            "",
            "0x",
            &t.to_string()[2..],
            &format!("{t}0"),
            &t.to_string()[..65],
            &format!("0x{}", "g".repeat(64)),
            &format!("0X{}", &t.to_string()[2..]),
        ] {
            assert_eq!(bad.parse::<RetryToken>(), Err(RetryTokenError), "{bad:?}");
        }
    }

    #[test]
    fn a_pending_answer_round_trips_and_is_told_from_other_results() {
        let p = SettlementPending::new(
            "wait",
            Some(B256::repeat_byte(7)),
            Some(RetryToken::random()),
            5,
        );
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["error"], "SettlementPending");
        assert_eq!(v["retryAfter"], 5);
        assert!(v["retryToken"].as_str().unwrap().starts_with("0x"));
        assert_eq!(SettlementPending::from_value(&v), Some(p));
        let bare = SettlementPending::new("wait", None, None, 1);
        let v = serde_json::to_value(&bare).unwrap();
        assert!(v.get("retryToken").is_none() && v.get("transaction").is_none());
        assert_eq!(SettlementPending::from_value(&v), Some(bare));
        assert_eq!(
            SettlementPending::from_value(&serde_json::json!({"error": "InvalidPaymentProof"})),
            None
        );
        assert_eq!(
            SettlementPending::from_value(&serde_json::json!({"x402Version": 1})),
            None
        );
    }
}
