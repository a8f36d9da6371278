//! The one notation of amounts on the command line: tokens with a decimal point (`0.50`, `5.00`,
//! `.25`; at most 6 decimals) or the token's smallest unit with a `units:` prefix
//! (`units:500000`). Every amount flag parses with [`parse`].
//!
//! A bare integer (`5`, `500000`) is refused rather than guessed: one reader's 5 tokens is
//! another's 5 units, and an amount bounds money.

use tollgate_agent::Amount;

/// What every amount flag's `--help` says about the notation.
pub(crate) const NOTATION: &str = "Amounts are tokens with a decimal point (0.50, 5.00; at most 6 decimals, 1.00 = 1000000 \
units) or units of the token's smallest unit with a prefix (units:500000).";

/// The token's decimals.
const DECIMALS: u8 = 6;

/// Parses an amount in the CLI's notation (see the module docs; [`Amount::parse_notation`]).
pub(crate) fn parse(s: &str) -> Result<Amount, String> {
    Amount::parse_notation(s, DECIMALS).map_err(|e| e.to_string())
}

/// Units as tokens, 6 decimals: `0.500000`.
pub(crate) fn tokens(a: Amount) -> String {
    a.to_tokens(DECIMALS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_units_parse_to_the_same_amounts() {
        for (text, units) in [
            ("1.00", 1_000_000),
            ("0.5", 500_000),
            ("0.50", 500_000),
            ("2.", 2_000_000),
            (".000001", 1),
            ("0.0", 0),
            ("12.345678", 12_345_678),
            ("units:500000", 500_000),
            ("units:0", 0),
            ("units:000123", 123),
        ] {
            assert_eq!(parse(text), Ok(Amount::from_units(units)), "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_the_notation() {
        for bad in [
            "",
            ".",
            "5",
            "500000",
            "1.0000001",
            "-1",
            "1e6",
            "0x10",
            "1,5",
            " 1.0",
            "units:",
            "units:1.5",
            "units:-1",
            "units: 1",
            "UNITS:1",
            "tokens:1.0",
            "1.0.0",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("units:500000"), "{bad:?}: {e}");
        }
        assert!(parse("5").unwrap_err().contains("ambiguous"));
        // Beyond 256 bits.
        assert!(parse(&format!("units:{}", "9".repeat(80))).is_err());
    }

    #[test]
    fn tokens_render_with_six_decimals() {
        assert_eq!(tokens(Amount::from_units(500_000)), "0.500000");
        assert_eq!(tokens(Amount::from_units(12_345_678)), "12.345678");
        assert_eq!(tokens(Amount::ZERO), "0.000000");
    }
}
