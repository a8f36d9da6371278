//! `WWW-Authenticate` and `Authorization` syntax as mppx reads and writes it
//! (`Challenge.serialize`, `Challenge.deserializeList`, `Credential.extractPaymentScheme`).

use std::fmt::Write as _;

use super::{MppError, SCHEME};

/// `name="value"`, escaped so that the header value is visible ASCII: `\` and `"` get a
/// backslash, and every character outside `0x20..=0x7E` is written `\uXXXX` (UTF-16 units,
/// lowercase hex). mppx writes characters above U+00FF that way and refuses CR and LF; writing
/// every non-ASCII and control character the same way keeps `to_header_value` infallible and
/// its output legal in any HTTP library, and mppx's parser reads it back identically.
pub(super) fn auth_param(out: &mut String, name: &str, value: &str) {
    if !out.ends_with(' ') {
        out.push_str(", ");
    }
    out.push_str(name);
    out.push_str("=\"");
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

fn is_ws(b: u8) -> bool {
    b.is_ascii_whitespace()
}

/// Whether `value[i..]` starts with the scheme token (any case) followed by white space.
fn starts_with_scheme(value: &[u8], i: usize) -> bool {
    let token = SCHEME.as_bytes();
    value.len() > i + token.len()
        && value[i..i + token.len()].eq_ignore_ascii_case(token)
        && is_ws(value[i + token.len()])
}

/// Where each `Payment` challenge starts: the scheme token outside quoted strings, at the start
/// or after a comma (mppx `findSchemeStarts`).
fn scheme_starts(value: &str) -> Vec<usize> {
    let b = value.as_bytes();
    let mut starts = Vec::new();
    let (mut in_quotes, mut escaped) = (false, false);
    for i in 0..b.len() {
        let c = b[i];
        if in_quotes {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_quotes = false;
            }
            continue;
        }
        if c == b'"' {
            in_quotes = true;
            continue;
        }
        if !starts_with_scheme(b, i) {
            continue;
        }
        let before = b[..i].iter().rposition(|c| !is_ws(*c));
        if before.is_some_and(|j| b[j] != b',') {
            continue;
        }
        starts.push(i);
    }
    starts
}

/// The auth-params of each `Payment` challenge in `value`, each up to the next one (mppx
/// `deserializeList`; params of a following other scheme are cut off by [`parse_params`]).
pub(super) fn payment_chunks(value: &str) -> Vec<&str> {
    let starts = scheme_starts(value);
    starts
        .iter()
        .enumerate()
        .map(|(n, &start)| {
            let end = starts.get(n + 1).copied().unwrap_or(value.len());
            value[start + SCHEME.len()..end].trim_start()
        })
        .collect()
}

/// The auth-params of one challenge, names lowercased, in order (mppx `parseAuthParams`): a
/// token or quoted-string value each; parsing stops at a name with no `=` (the next scheme).
pub(super) fn parse_params(input: &str) -> Result<Vec<(String, String)>, MppError> {
    let b = input.as_bytes();
    let mut out: Vec<(String, String)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (is_ws(b[i]) || b[i] == b',') {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let key_start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-') {
            i += 1;
        }
        let key = input[key_start..i].to_ascii_lowercase();
        if key.is_empty() {
            return Err(MppError::Params("an auth-param has no name".into()));
        }
        while i < b.len() && is_ws(b[i]) {
            i += 1;
        }
        if b.get(i) != Some(&b'=') {
            break;
        }
        i += 1;
        while i < b.len() && is_ws(b[i]) {
            i += 1;
        }
        let value = if b.get(i) == Some(&b'"') {
            let (value, next) = quoted(input, i + 1)?;
            i = next;
            value
        } else {
            let end = input[i..].find(',').map_or(b.len(), |n| i + n);
            let value = input[i..end].trim().to_owned();
            i = end;
            value
        };
        if out.iter().any(|(k, _)| *k == key) {
            return Err(MppError::Params(format!("duplicate parameter {key:?}")));
        }
        out.push((key, value));
    }
    Ok(out)
}

/// A quoted string's value from just past its opening quote, and the index past its closing
/// quote. `\x` is `x`; `\uXXXX` is that UTF-16 unit (surrogate pairs combined).
fn quoted(input: &str, start: usize) -> Result<(String, usize), MppError> {
    let mut units: Vec<u16> = Vec::new();
    let mut chars = input[start..].char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => {
                let value = String::from_utf16(&units).map_err(|_| {
                    MppError::Params("a \\u escape is an unpaired surrogate".into())
                })?;
                return Ok((value, start + at + 1));
            }
            '\\' => {
                let Some((_, e)) = chars.next() else { break };
                let hex = input.get(start + at + 2..start + at + 6);
                match hex.filter(|h| e == 'u' && h.bytes().all(|b| b.is_ascii_hexdigit())) {
                    Some(hex) => {
                        units.push(u16::from_str_radix(hex, 16).expect("four hex digits"));
                        for _ in 0..4 {
                            chars.next();
                        }
                    }
                    None => units.extend(e.encode_utf16(&mut [0; 2]).iter()),
                }
            }
            c => units.extend(c.encode_utf16(&mut [0; 2]).iter()),
        }
    }
    Err(MppError::Params("unterminated quoted string".into()))
}

/// The `Payment` credential token in an `Authorization` value that may list several schemes,
/// comma-separated (mppx `Credential.extractPaymentScheme`, then its `^Payment\s+(.+)$`).
pub(super) fn credential_token(value: &str) -> Option<&str> {
    value.split(',').map(str::trim).find_map(|part| {
        let b = part.as_bytes();
        if b.len() > SCHEME.len()
            && b[..SCHEME.len()].eq_ignore_ascii_case(SCHEME.as_bytes())
            && is_ws(b[SCHEME.len()])
        {
            Some(part[SCHEME.len()..].trim_start())
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_strings_unescape() {
        let input = r#"a\"b\\c\u00e9\ud83d\ude00, d" rest"#;
        let (v, next) = quoted(input, 0).unwrap();
        assert_eq!(v, "a\"b\\cé😀, d");
        assert_eq!(&input[next..], " rest");
        assert!(quoted(r#"abc"#, 0).is_err());
        assert!(quoted(r#"\ud83d""#, 0).is_err());
    }

    #[test]
    fn escaping_round_trips() {
        let nasty = "a\"b\\c, d=\"e\" é 😀 \r\n\t end";
        let mut out = String::from("Payment ");
        auth_param(&mut out, "description", nasty);
        assert!(out.bytes().all(|b| (0x20..0x7f).contains(&b)), "{out}");
        let params = parse_params(payment_chunks(&out)[0]).unwrap();
        assert_eq!(params, vec![("description".to_owned(), nasty.to_owned())]);
    }

    #[test]
    fn credential_token_finds_the_payment_scheme() {
        assert_eq!(credential_token("Payment abc"), Some("abc"));
        assert_eq!(credential_token("Bearer x, payment  abc "), Some("abc"));
        assert_eq!(credential_token("Bearer x"), None);
        assert_eq!(credential_token("Paymentabc"), None);
        assert_eq!(credential_token("Payment"), None);
    }
}
