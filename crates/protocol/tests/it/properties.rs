//! Property tests of [`Amount`]: every `uint256` survives its decimal and JSON forms, and the
//! parser follows its rules exactly (digits only, at most 78 of them, at most `uint256::MAX`;
//! leading zeros are accepted) with the typed error for each way to be wrong, never a panic.

use std::cmp::Ordering;

use alloy::primitives::U256;
use proptest::prelude::*;
use tollgate_protocol::{Amount, AmountError};

/// Any `uint256`, with the edges (zero, small numbers, powers of ten and their neighbours, the
/// top of the range) drawn far more often than uniform limbs would draw them.
fn any_u256() -> impl Strategy<Value = U256> {
    prop_oneof![
        any::<[u64; 4]>().prop_map(U256::from_limbs),
        any::<u64>().prop_map(U256::from),
        any::<u128>().prop_map(U256::from),
        (0..=77usize, -1i8..=1).prop_map(|(exp, delta)| {
            let p = U256::from(10u8).pow(U256::from(exp));
            match delta {
                -1 => p - U256::from(1u8),
                0 => p,
                _ => p + U256::from(1u8),
            }
        }),
        (0..=1_000u64).prop_map(|d| U256::MAX - U256::from(d)),
    ]
}

/// What the parser must answer for `s`, computed without `U256`'s own parser: the value is built
/// digit by digit with checked arithmetic.
fn oracle(s: &str) -> Result<U256, AmountError> {
    if s.is_empty() {
        return Err(AmountError::Empty);
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AmountError::NotAnInteger(s.chars().take(40).collect()));
    }
    // `uint256::MAX` has 78 digits; longer strings are refused unread (leading zeros included).
    if s.len() > 78 {
        return Err(AmountError::Overflow(s.to_owned()));
    }
    let ten = U256::from(10u8);
    s.bytes()
        .try_fold(U256::ZERO, |acc, b| {
            acc.checked_mul(ten)?.checked_add(U256::from(b - b'0'))
        })
        .ok_or_else(|| AmountError::Overflow(s.to_owned()))
}

/// Strings that are almost amounts: a canonical decimal with one thing wrong with it.
fn near_miss() -> impl Strategy<Value = String> {
    let digits = any_u256().prop_map(|v| v.to_string());
    let junk = prop_oneof![
        Just("-"),
        Just("+"),
        Just(" "),
        Just("\t"),
        Just("\n"),
        Just("."),
        Just(","),
        Just("_"),
        Just("e"),
        Just("E"),
        Just("e6"),
        Just("x"),
        Just("0x"),
        Just("a"),
        Just("\u{0661}"), // ARABIC-INDIC DIGIT ONE: a digit, not an ASCII one.
        Just("\u{ff11}"), // FULLWIDTH DIGIT ONE.
        Just("\u{0}"),
    ];
    (digits, junk, any::<prop::sample::Index>()).prop_map(|(d, j, at)| {
        let at = at.index(d.len() + 1);
        let mut s = d;
        s.insert_str(at, j);
        s
    })
}

/// Strings of ASCII digits around the 78-digit boundary, leading zeros included.
fn digit_strings() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,90}",
        "0{0,10}[1-9][0-9]{0,80}",
        "[0-9]{77,80}",
        // 78 digits, the top one at least 1: from 10^77 up to 10^78 - 1, past uint256 half the time.
        "[1-9][0-9]{77}",
        (0..20usize, any_u256()).prop_map(|(zeros, v)| format!("{}{v}", "0".repeat(zeros))),
    ]
}

/// Any string: arbitrary Unicode, and the near misses and digit strings above with whitespace
/// around them (what a lenient reader would trim).
fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        ".{0,100}",
        near_miss(),
        digit_strings(),
        (digit_strings(), "[ \t\r\n]{1,2}", any::<bool>()).prop_map(|(d, ws, before)| if before {
            ws + &d
        } else {
            d + &ws
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Display is the canonical decimal (U256's own), and parsing it gives the value back.
    #[test]
    fn display_parse_round_trips(v in any_u256()) {
        let shown = Amount(v).to_string();
        prop_assert_eq!(&shown, &v.to_string());
        prop_assert!(shown == "0" || !shown.starts_with('0'), "{shown}");
        prop_assert!(shown.len() <= 78);
        prop_assert_eq!(shown.parse::<Amount>(), Ok(Amount(v)));
    }

    /// The wire form is a JSON string of the decimal, and reads back to the same value.
    #[test]
    fn serde_round_trips(v in any_u256()) {
        let json = serde_json::to_string(&Amount(v)).unwrap();
        prop_assert_eq!(&json, &format!("\"{v}\""));
        prop_assert_eq!(serde_json::from_str::<Amount>(&json).unwrap(), Amount(v));
    }

    /// A JSON number is never an amount, whatever its value.
    #[test]
    fn json_numbers_are_refused(n in any::<u64>(), f in any::<f64>()) {
        prop_assert!(serde_json::from_str::<Amount>(&n.to_string()).is_err());
        if let Ok(number) = serde_json::to_string(&f) {
            prop_assert!(serde_json::from_str::<Amount>(&number).is_err());
        }
    }

    /// Strings of digits: the value when it fits (leading zeros accepted, within 78 digits),
    /// `Overflow` otherwise.
    #[test]
    fn digit_strings_follow_the_rules(s in digit_strings()) {
        let parsed = s.parse::<Amount>().map(Amount::get);
        prop_assert_eq!(&parsed, &oracle(&s));
        if let Ok(v) = parsed {
            // Accepted leading zeros never reach the wire: the value displays canonically.
            let canonical = match s.trim_start_matches('0') {
                "" => "0",
                rest => rest,
            };
            prop_assert_eq!(Amount(v).to_string(), canonical);
        }
    }

    /// A canonical decimal with a sign, whitespace, a point, an exponent, a hex prefix, a
    /// separator, a non-ASCII digit or a NUL anywhere in it is `NotAnInteger`.
    #[test]
    fn near_misses_are_not_integers(s in near_miss()) {
        prop_assert_eq!(
            s.parse::<Amount>(),
            Err(AmountError::NotAnInteger(s.chars().take(40).collect()))
        );
    }

    /// Hex, with or without its prefix, is refused unless it happens to be all decimal digits.
    #[test]
    fn hex_is_not_decimal(v in any_u256()) {
        let hex = format!("{v:#x}");
        prop_assert!(matches!(hex.parse::<Amount>(), Err(AmountError::NotAnInteger(_))));
        let bare = format!("{v:x}");
        prop_assert_eq!(bare.parse::<Amount>(), oracle(&bare).map(Amount));
    }

    /// Any string at all: exactly the oracle's answer (so never a panic), the same through
    /// serde, and an error payload that stays short for non-digits.
    #[test]
    fn any_string_is_answered_exactly(s in any_string()) {
        let parsed = s.parse::<Amount>();
        prop_assert_eq!(&parsed, &oracle(&s).map(Amount));
        if let Err(AmountError::NotAnInteger(shown)) = &parsed {
            prop_assert!(shown.chars().count() <= 40);
        }
        let via_serde = serde_json::from_value::<Amount>(serde_json::Value::String(s.clone()));
        prop_assert_eq!(via_serde.is_ok(), parsed.is_ok());
        if let (Ok(a), Ok(b)) = (via_serde, parsed) {
            prop_assert_eq!(a, b);
        }
    }

    /// `Amount`'s order (what the gate's `paid < price` check uses) is the numeric order of the
    /// values, which for canonical decimals is "shorter is smaller, then digit by digit".
    #[test]
    fn order_is_numeric(a in any_u256(), b in any_u256()) {
        let (x, y) = (Amount(a), Amount(b));
        prop_assert_eq!(x.cmp(&y), a.cmp(&b));
        let (sa, sb) = (x.to_string(), y.to_string());
        let by_text = sa.len().cmp(&sb.len()).then_with(|| sa.cmp(&sb));
        prop_assert_eq!(x.cmp(&y), by_text);
        prop_assert_eq!(x == y, by_text == Ordering::Equal);
    }

    /// `from_units` and `From<u64>` are the value itself.
    #[test]
    fn from_units_is_exact(n in any::<u64>()) {
        prop_assert_eq!(Amount::from_units(n).get(), U256::from(n));
        prop_assert_eq!(Amount::from(n), Amount::from_units(n));
        prop_assert_eq!(Amount::from_units(n).to_string(), n.to_string());
    }
}

/// The boundary itself, spelled out (the strategies above reach it, this pins it).
#[test]
fn boundary_of_uint256() {
    let max = U256::MAX.to_string();
    assert_eq!(max.len(), 78);
    assert_eq!(max.parse::<Amount>(), Ok(Amount(U256::MAX)));
    let over = "115792089237316195423570985008687907853269984665640564039457584007913129639936";
    assert_eq!(
        over.parse::<Amount>(),
        Err(AmountError::Overflow(over.to_owned()))
    );
    assert_eq!(oracle(over), Err(AmountError::Overflow(over.to_owned())));
    assert_eq!("".parse::<Amount>(), Err(AmountError::Empty));
}
