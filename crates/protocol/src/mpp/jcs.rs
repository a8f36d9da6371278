//! JSON canonicalization as mppx does it (ox's `Json.canonicalize` after `JSON.parse`): object
//! keys sorted by UTF-16 code units, no white space, strings as `JSON.stringify` writes them,
//! integers as their digits. This is RFC 8785 (JCS) for the values MPP carries (`js_number`
//! says what differs for other numbers). Keys are sorted here, whatever map serde_json was built
//! with.

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

/// How the number is written: an integer as its digits, which is how JavaScript prints every
/// integer up to 2^53 (all MPP's EVM request carries: chain ids, decimals). Any other number is
/// written as serde_json writes it, which can differ from JavaScript (`1e21` for its `1e+21`,
/// `31337.0` for its `31337`, and integers past 2^53 that JavaScript would round): such a
/// request still re-encodes to the same bytes here, it is only not mppx's canonical form. (No
/// floats: the workspace keeps them out of money code, see `tests/it/money_floats.rs`.)
fn js_number(n: &Number) -> String {
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_print_as_their_digits() {
        for (text, out) in [
            ("31337", "31337"),
            ("-42", "-42"),
            ("0", "0"),
            ("18446744073709551615", "18446744073709551615"),
            ("1.5", "1.5"),
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(canonicalize(&v), out, "{text}");
        }
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
