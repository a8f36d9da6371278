//! Token amounts on the wire: decimal strings of integers in the token's smallest unit.

use std::{fmt, str::FromStr};

use alloy::primitives::U256;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount in the token's smallest unit (6 decimals: `500000` is 0.50 token). On the wire it is
/// a decimal string of an integer (`"500000"`); parsing rejects signs, decimals, exponents, hex,
/// leading `+`, whitespace and anything beyond `uint256`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(pub U256);

/// Why an amount string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AmountError {
    /// Empty string.
    #[error("amount is empty")]
    Empty,
    /// Something other than the digits 0-9.
    #[error(
        "amount {0:?} is not a decimal integer string (digits only, in the token's smallest unit)"
    )]
    NotAnInteger(String),
    /// More than uint256 can hold.
    #[error("amount {0:?} exceeds uint256")]
    Overflow(String),
}

impl Amount {
    /// Zero.
    pub const ZERO: Self = Self(U256::ZERO);

    /// From a whole number of smallest units.
    pub const fn from_units(units: u64) -> Self {
        Self(U256::from_limbs([units, 0, 0, 0]))
    }

    /// The value.
    pub const fn get(self) -> U256 {
        self.0
    }
}

impl From<U256> for Amount {
    fn from(v: U256) -> Self {
        Self(v)
    }
}

impl From<u64> for Amount {
    fn from(v: u64) -> Self {
        Self::from_units(v)
    }
}

/// Why an amount in the people's notation ([`Amount::parse_notation`]) was refused; its message
/// says how to write one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} {why}: write tokens with a decimal point (0.50, 5.00) or units with a prefix (units:500000)"
)]
pub struct NotationError {
    text: String,
    why: String,
}

impl NotationError {
    fn new(text: &str, why: impl Into<String>) -> Self {
        Self {
            text: text.to_owned(),
            why: why.into(),
        }
    }

    /// Whether the text was a bare integer (tokens or units?).
    pub fn is_ambiguous(&self) -> bool {
        self.why.starts_with("is ambiguous")
    }
}

impl Amount {
    /// Reads the one notation of amounts people write (the CLI, the gateway's config, the
    /// Node.js SDK): tokens with a decimal point (`0.50`, `5.00`, `.25`, `2.`; at most
    /// `decimals` decimals) or the token's smallest unit with a `units:` prefix (`units:500000`).
    /// A bare integer (`5`) is refused as ambiguous rather than guessed: one reader's 5 tokens is
    /// another's 5 units, and an amount bounds money.
    ///
    /// ```
    /// use tollgate_protocol::Amount;
    /// assert_eq!(Amount::parse_notation("0.50", 6), Ok(Amount::from_units(500_000)));
    /// assert_eq!(Amount::parse_notation("units:42", 6), Ok(Amount::from_units(42)));
    /// assert!(Amount::parse_notation("5", 6).unwrap_err().is_ambiguous());
    /// ```
    pub fn parse_notation(s: &str, decimals: u8) -> Result<Self, NotationError> {
        let err = |why: &str| NotationError::new(s, why);
        let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if let Some(units) = s.strip_prefix("units:") {
            if units.is_empty() || !digits(units) {
                return Err(err("is not a whole number of units"));
            }
            return units
                .parse()
                .map_err(|e: AmountError| err(&format!("({e})")));
        }
        let Some((whole, frac)) = s.split_once('.') else {
            return Err(err(if digits(s) && !s.is_empty() {
                "is ambiguous (tokens or units?)"
            } else {
                "is not an amount"
            }));
        };
        if whole.is_empty() && frac.is_empty() || !digits(whole) || !digits(frac) {
            return Err(err("is not an amount"));
        }
        let places = usize::from(decimals);
        if frac.len() > places {
            return Err(err(&format!("has more than {decimals} decimals")));
        }
        let units = format!("{whole}{frac:0<places$}");
        let units = units.trim_start_matches('0');
        if units.is_empty() {
            return Ok(Self::ZERO);
        }
        units
            .parse()
            .map_err(|e: AmountError| err(&format!("({e})")))
    }

    /// The amount in tokens of `decimals` decimals, every decimal written: `0.500000`.
    pub fn to_tokens(self, decimals: u8) -> String {
        let places = usize::from(decimals);
        let s = format!("{:0>width$}", self.to_string(), width = places + 1);
        let (whole, frac) = s.split_at(s.len() - places);
        if frac.is_empty() {
            whole.to_owned()
        } else {
            format!("{whole}.{frac}")
        }
    }
}

impl FromStr for Amount {
    type Err = AmountError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(AmountError::Empty);
        }
        if s.len() > 78 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(if s.bytes().all(|b| b.is_ascii_digit()) {
                AmountError::Overflow(s.to_owned())
            } else {
                AmountError::NotAnInteger(truncate(s))
            });
        }
        U256::from_str_radix(s, 10)
            .map(Self)
            .map_err(|_| AmountError::Overflow(s.to_owned()))
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for Amount {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Amount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a decimal integer string in the token's smallest unit, e.g. \"500000\"",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Amount, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_decimal_integers() {
        assert_eq!(
            "500000".parse::<Amount>().unwrap(),
            Amount::from_units(500_000)
        );
        assert_eq!("0".parse::<Amount>().unwrap(), Amount::ZERO);
        let max = U256::MAX.to_string();
        assert_eq!(max.parse::<Amount>().unwrap().get(), U256::MAX);
        for bad in ["", "-1", "+1", "1.5", "1e6", "0x10", " 1", "1 ", "١"] {
            assert!(bad.parse::<Amount>().is_err(), "{bad:?}");
        }
        let over = format!("{max}0");
        assert!(matches!(
            over.parse::<Amount>(),
            Err(AmountError::Overflow(_))
        ));
        assert!(matches!(
            "115792089237316195423570985008687907853269984665640564039457584007913129639936"
                .parse::<Amount>(),
            Err(AmountError::Overflow(_))
        ));
    }

    #[test]
    fn wire_form_is_a_string() {
        let a = Amount::from_units(500_000);
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"500000\"");
        assert_eq!(serde_json::from_str::<Amount>("\"500000\"").unwrap(), a);
        assert!(
            serde_json::from_str::<Amount>("500000").is_err(),
            "a JSON number is refused"
        );
    }
}
