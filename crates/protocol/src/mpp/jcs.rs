//! JSON canonicalization as mppx does it (ox's `Json.canonicalize` after `JSON.parse`): object
//! keys sorted by UTF-16 code units, no white space, strings as `JSON.stringify` writes them,
//! numbers as JavaScript prints the double they parse to. This is RFC 8785 (JCS) for the
//! values MPP carries. Keys are sorted here, whatever map serde_json was built with.

use std::fmt::Write as _;

use serde_json::{Number, Value};

/// The canonical text of `value`.
pub(crate) fn canonicalize(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&js_number(n)),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// `JSON.stringify(s)`: serde_json escapes the same characters (`"`, `\`, the C0 controls,
/// `\b\f\n\r\t` by name and the rest as lowercase `\u00xx`).
fn write_string(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).expect("a string serializes"));
}

/// 2^53: integers up to it are exact doubles and print as themselves.
const MAX_SAFE: u64 = 1 << 53;

/// How JavaScript prints the number `JSON.parse` makes of `n` (ECMA-262 Number::toString).
fn js_number(n: &Number) -> String {
    if let Some(u) = n.as_u64().filter(|u| *u <= MAX_SAFE) {
        return u.to_string();
    }
    if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= MAX_SAFE) {
        return i.to_string();
    }
    js_double(n.as_f64().unwrap_or(f64::NAN))
}

/// ECMA-262 Number::toString(10) of a finite double (`-0` prints as `0`).
pub(crate) fn js_double(v: f64) -> String {
    if v == 0.0 {
        return "0".to_owned();
    }
    if !v.is_finite() {
        // JSON has no such numbers; serde_json never parses one.
        return "null".to_owned();
    }
    let sign = if v < 0.0 { "-" } else { "" };
    // Rust's `{:e}` writes the shortest digits that round-trip, as ECMA-262 asks.
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` writes an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i32 = exp.parse().expect("`{:e}` writes an integer exponent");
    let k = i32::try_from(digits.len()).expect("at most 17 digits");
    let n = exp + 1;
    let mut out = String::from(sign);
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = n - 1;
        let _ = write!(out, "e{}{}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        for (v, js) in [
            (1.0, "1"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (-0.0, "0"),
            (2.5e300, "2.5e+300"),
        ] {
            assert_eq!(js_double(v), js, "{v}");
        }
        let big: Value = serde_json::from_str("18446744073709551615").unwrap();
        assert_eq!(canonicalize(&big), "18446744073709552000");
        let safe: Value = serde_json::from_str("9007199254740992").unwrap();
        assert_eq!(canonicalize(&safe), "9007199254740992");
        let neg: Value = serde_json::from_str("-42").unwrap();
        assert_eq!(canonicalize(&neg), "-42");
        let float_int: Value = serde_json::from_str("31337.0").unwrap();
        assert_eq!(canonicalize(&float_int), "31337");
    }

    #[test]
    fn keys_sort_by_utf16_units_and_nothing_is_spaced() {
        // U+1F600 (0xD83D 0xDE00 in UTF-16) sorts before U+FF61, the reverse of their UTF-8
        // order.
        let v: Value = serde_json::from_str(
            r#"{"b": [1, {"z": null, "a": true}], "a": "x\u0001\"", "😀": 1, "｡": 2}"#,
        )
        .unwrap();
        assert_eq!(
            canonicalize(&v),
            r#"{"a":"x\u0001\"","b":[1,{"a":true,"z":null}],"😀":1,"｡":2}"#
        );
    }
}
