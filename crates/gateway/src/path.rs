//! The one form of a request path that the gateway prices and forwards, and route matching on
//! it.
//!
//! Upstream servers do not agree on what a path names: most decode percent-escapes, many collapse
//! `//`, some fold case (Express by default, Go handlers using `strings.EqualFold`, werkzeug
//! with a custom converter) and some drop `;parameters` from a segment (Tomcat, Spring, Jetty).
//! The gateway therefore
//!
//! 1. brings the path to one canonical spelling ([`canonicalize`]): escapes of unreserved
//!    characters decoded, other escapes in upper-case hex, characters outside RFC 3986's `pchar`
//!    escaped, runs of `/` collapsed; paths that name different resources on different servers
//!    (dot segments, encoded `/` or `\`, raw `\`, encoded control characters) are refused;
//! 2. routes the canonical path twice ([`RouteTable::route`]): once as a strict upstream reads it
//!    (decoded, case-sensitive, `;` literal) and once as the loosest one does (case folded,
//!    `;parameters` dropped). A path that lands on different routes is refused: it would be
//!    priced by one route and could be served as another;
//! 3. forwards exactly the canonical path, so the upstream is asked for what was priced.

use std::fmt;

/// Why a path is refused before routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PathError {
    /// Not an origin-form path (`*`, or no leading `/`).
    NotAbsolute,
    /// A `.` or `..` segment, also percent-encoded or before a `;parameter`.
    DotSegment,
    /// A percent-encoded `/` or `\`, or a raw `\`.
    Separator,
    /// A (percent-encoded) control character.
    Control,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotAbsolute => "the path must start with /",
            Self::DotSegment => {
                "the path has a dot segment (. or ..), which servers resolve differently"
            }
            Self::Separator => {
                "the path has an encoded separator (%2F, %5C) or a backslash, which servers \
                 split differently"
            }
            Self::Control => "the path has an encoded control character",
        })
    }
}

/// A request path in canonical form, with its segments as the upstream will decode them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Canonical {
    /// The canonical spelling, forwarded to the upstream.
    path: String,
    /// The non-empty segments, fully percent-decoded.
    segments: Vec<Vec<u8>>,
}

impl Canonical {
    /// The canonical spelling.
    pub(crate) fn as_str(&self) -> &str {
        &self.path
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 `pchar` less unreserved and `%`: sub-delims, `:` and `@`, which keep their meaning
/// and so their spelling.
fn is_literal_delimiter(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' | b':' | b'@'
    )
}

fn hex_value(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

fn push_escaped(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(HEX[usize::from(b >> 4)] as char);
    out.push(HEX[usize::from(b & 15)] as char);
}

/// The canonical form of `path` (no query), or why it is refused.
pub(crate) fn canonicalize(path: &str) -> Result<Canonical, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let mut out = String::with_capacity(path.len());
    let mut segments = Vec::new();
    for raw in path.split('/').filter(|s| !s.is_empty()) {
        let bytes = raw.as_bytes();
        let mut spelled = String::with_capacity(raw.len());
        let mut decoded = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            let escaped = match (b, bytes.get(i + 1), bytes.get(i + 2)) {
                (b'%', Some(&h), Some(&l)) => {
                    hex_value(h).zip(hex_value(l)).map(|(h, l)| h << 4 | l)
                }
                _ => None,
            };
            let value = escaped.unwrap_or(b);
            if value == b'/' && escaped.is_some() || value == b'\\' {
                return Err(PathError::Separator);
            }
            if value < 0x20 || value == 0x7f {
                return Err(PathError::Control);
            }
            if is_unreserved(value) || (escaped.is_none() && is_literal_delimiter(b)) {
                spelled.push(value as char);
            } else {
                // Reserved characters that arrived escaped stay escaped (`%3B` is not `;`);
                // a `%` that starts no escape and bytes outside `pchar` are escaped.
                push_escaped(&mut spelled, value);
            }
            decoded.push(value);
            i += if escaped.is_some() { 3 } else { 1 };
        }
        let name = decoded.split(|&b| b == b';').next().unwrap_or_default();
        if name == b"." || name == b".." {
            return Err(PathError::DotSegment);
        }
        out.push('/');
        out.push_str(&spelled);
        segments.push(decoded);
    }
    if out.is_empty() || path.ends_with('/') {
        out.push('/');
    }
    Ok(Canonical {
        path: out,
        segments,
    })
}

/// A segment as the loosest upstream compares it: `;parameters` dropped and case folded (each
/// character upper- then lower-cased, which also folds `ſ` to `s` and the Kelvin sign to `k`, as
/// Unicode case-insensitive matching does). `None` when nothing is left: such a segment vanishes.
fn loose(segment: &[u8]) -> Option<Vec<u8>> {
    let name = segment.split(|&b| b == b';').next().unwrap_or_default();
    if name.is_empty() {
        return None;
    }
    Some(match std::str::from_utf8(name) {
        Ok(s) => s
            .chars()
            .flat_map(char::to_uppercase)
            .flat_map(char::to_lowercase)
            .collect::<String>()
            .into_bytes(),
        Err(_) => name.to_ascii_lowercase(),
    })
}

/// A route prefix, checked and split for matching.
#[derive(Clone, Debug)]
pub(crate) struct Prefix {
    /// As configured, without a trailing `/` (`/` for the root).
    pub(crate) path: String,
    strict: Vec<Vec<u8>>,
    loose: Vec<Vec<u8>>,
}

impl Prefix {
    /// Checks a configured prefix: it must be written canonically (what [`canonicalize`]
    /// returns, a trailing `/` aside) and have no `;` (which some upstreams cut at).
    pub(crate) fn parse(prefix: &str) -> Result<Self, String> {
        let canonical = canonicalize(prefix).map_err(|e| format!("{prefix:?}: {e}"))?;
        let trimmed = prefix.trim_end_matches('/');
        let path = if trimmed.is_empty() { "/" } else { trimmed };
        if canonical.as_str().trim_end_matches('/') != trimmed {
            return Err(format!(
                "{prefix:?} is not written canonically; write {:?}",
                canonical.as_str()
            ));
        }
        if canonical.segments.iter().any(|s| s.contains(&b';')) {
            return Err(format!("{prefix:?} has a ';'"));
        }
        let loose = canonical.segments.iter().filter_map(|s| loose(s)).collect();
        Ok(Self {
            path: path.to_owned(),
            strict: canonical.segments,
            loose,
        })
    }

    /// Whether two prefixes cover the same paths for some upstream.
    pub(crate) fn overlaps(&self, other: &Self) -> bool {
        self.loose == other.loose
    }
}

/// Where a path goes.
#[derive(Debug)]
pub(crate) enum Routed<'a, T> {
    /// To this route (`None`: no route covers it).
    To(Option<&'a T>),
    /// The strict and the loose reading disagree: to `strict` for an upstream that compares
    /// exactly, to `loose` for one that folds case or drops `;parameters`.
    Ambiguous {
        /// The route of the exact reading (`None`: unmatched).
        strict: Option<&'a str>,
        /// The route of the loose reading.
        loose: Option<&'a str>,
    },
}

/// Route prefixes with their targets; the longest matching prefix, segment by segment, wins.
#[derive(Debug)]
pub(crate) struct RouteTable<T> {
    routes: Vec<(Prefix, T)>,
}

impl<T> RouteTable<T> {
    /// A table over `routes`, whose prefixes pairwise do not [`Prefix::overlaps`].
    pub(crate) fn new(routes: Vec<(Prefix, T)>) -> Self {
        Self { routes }
    }

    fn longest(
        &self,
        key: impl Fn(&Prefix) -> bool,
        len: impl Fn(&Prefix) -> usize,
    ) -> Option<usize> {
        self.routes
            .iter()
            .enumerate()
            .filter(|(_, (p, _))| key(p))
            .max_by_key(|(_, (p, _))| len(p))
            .map(|(i, _)| i)
    }

    /// Routes `path`.
    pub(crate) fn route(&self, path: &Canonical) -> Routed<'_, T> {
        let loose_path: Vec<Vec<u8>> = path.segments.iter().filter_map(|s| loose(s)).collect();
        let strict = self.longest(|p| path.segments.starts_with(&p.strict), |p| p.strict.len());
        let loose = self.longest(|p| loose_path.starts_with(&p.loose), |p| p.loose.len());
        if strict == loose {
            Routed::To(strict.map(|i| &self.routes[i].1))
        } else {
            let name = |i: Option<usize>| i.map(|i| self.routes[i].0.path.as_str());
            Routed::Ambiguous {
                strict: name(strict),
                loose: name(loose),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_spelling() {
        for (raw, canonical) in [
            ("/", "/"),
            ("//", "/"),
            ("/v1/quote", "/v1/quote"),
            ("/v1/quote/", "/v1/quote/"),
            ("//v1///quote//", "/v1/quote/"),
            ("/v1/%70remium", "/v1/premium"),
            ("/%70%61%69%64", "/paid"),
            ("/%7e%2D%2e%5F", "/~-._"),
            ("/a%2ab", "/a%2Ab"),
            ("/a*b;c=d:e@f", "/a*b;c=d:e@f"),
            ("/a%3Bb", "/a%3Bb"),
            ("/q%25", "/q%25"),
            ("/bad%zz%4", "/bad%25zz%254"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/café", "/caf%C3%A9"),
            ("/a\"b{c}", "/a%22b%7Bc%7D"),
            ("/a.b/..c/c../...", "/a.b/..c/c../..."),
            ("/.well-known/x", "/.well-known/x"),
        ] {
            assert_eq!(canonicalize(raw).unwrap().as_str(), canonical, "{raw}");
        }
    }

    #[test]
    fn paths_that_servers_resolve_differently_are_refused() {
        for (bad, why) in [
            ("*", PathError::NotAbsolute),
            ("v1", PathError::NotAbsolute),
            ("/free/../paid", PathError::DotSegment),
            ("/free/..", PathError::DotSegment),
            ("/free/./paid", PathError::DotSegment),
            ("/free/%2e%2e/paid", PathError::DotSegment),
            ("/free/%2E%2e/paid", PathError::DotSegment),
            ("/free/.%2E/paid", PathError::DotSegment),
            ("/free/%2e/paid", PathError::DotSegment),
            ("/free/..;/paid", PathError::DotSegment),
            ("/free/.;x=1/paid", PathError::DotSegment),
            ("/free%2f..%2fpaid", PathError::Separator),
            ("/free/..%2Fpaid", PathError::Separator),
            ("/free/..%5cpaid", PathError::Separator),
            ("/free/..\\paid", PathError::Separator),
            ("/free\\..\\paid", PathError::Separator),
            ("/paid%00", PathError::Control),
            ("/paid%0a", PathError::Control),
            ("/paid%7F", PathError::Control),
        ] {
            assert_eq!(canonicalize(bad), Err(why), "{bad}");
        }
    }

    fn table(prefixes: &[&str]) -> RouteTable<String> {
        RouteTable::new(
            prefixes
                .iter()
                .map(|p| (Prefix::parse(p).unwrap(), (*p).to_owned()))
                .collect(),
        )
    }

    fn route(table: &RouteTable<String>, path: &str) -> Result<Option<String>, ()> {
        match table.route(&canonicalize(path).unwrap()) {
            Routed::To(t) => Ok(t.cloned()),
            Routed::Ambiguous { .. } => Err(()),
        }
    }

    #[test]
    fn longest_prefix_by_segment() {
        let t = table(&["/", "/v1", "/v1/premium", "/paid/"]);
        assert_eq!(route(&t, "/v1/premium/x"), Ok(Some("/v1/premium".into())));
        assert_eq!(route(&t, "/v1/%70remium"), Ok(Some("/v1/premium".into())));
        assert_eq!(route(&t, "/v1//premium"), Ok(Some("/v1/premium".into())));
        assert_eq!(route(&t, "/v1/premiums"), Ok(Some("/v1".into())));
        assert_eq!(route(&t, "/v1/Other"), Ok(Some("/v1".into())));
        assert_eq!(route(&t, "/v1premium"), Ok(Some("/".into())));
        assert_eq!(route(&t, "/paid"), Ok(Some("/paid/".into())));
        assert_eq!(route(&t, "/"), Ok(Some("/".into())));
        let t = table(&["/v1"]);
        assert_eq!(route(&t, "/elsewhere"), Ok(None));
        assert_eq!(route(&t, "/Elsewhere;x"), Ok(None));
    }

    #[test]
    fn case_and_parameter_variants_of_a_route_are_ambiguous() {
        let t = table(&["/v1", "/v1/premium", "/paid", "/v1/search"]);
        for path in [
            "/v1/PREMIUM",
            "/V1/premium",
            "/V1/x",
            "/PAID",
            "/pa%49d",
            "/paid;jsessionid=1",
            "/;x/paid",
            "/v1;x/premium",
            "/v1/premium;x/y",
            "/v1/%C5%BFearch", // ſ folds to s
        ] {
            assert_eq!(route(&t, path), Err(()), "{path}");
        }
        // Other characters are not folded away: a zero-width space keeps the path under /v1.
        assert_eq!(route(&t, "/v1/premium%E2%80%8B"), Ok(Some("/v1".into())));
        // Mixed case below a route, or on no route at all, is not ambiguous.
        assert_eq!(route(&t, "/v1/premium/ABC"), Ok(Some("/v1/premium".into())));
        assert_eq!(route(&t, "/Elsewhere"), Ok(None));
        // A route with non-ASCII letters folds them too.
        let t = table(&["/caf%C3%A9"]);
        assert_eq!(route(&t, "/CAF%C3%89"), Err(()));
        assert_eq!(route(&t, "/café/x"), Ok(Some("/caf%C3%A9".into())));
        // The Kelvin sign folds to k.
        let t = table(&["/kv"]);
        assert_eq!(route(&t, "/%E2%84%AAv"), Err(()));
    }

    #[test]
    fn prefixes_are_written_canonically() {
        assert_eq!(Prefix::parse("/").unwrap().path, "/");
        assert_eq!(Prefix::parse("/v1/quote/").unwrap().path, "/v1/quote");
        for (bad, needle) in [
            ("v1", "start with /"),
            ("/v1//quote", "write \"/v1/quote\""),
            ("/v1/%70remium", "write \"/v1/premium\""),
            ("/v1/../x", "dot segment"),
            ("/v1;x", "';'"),
            ("/v1%3Bx", "';'"),
        ] {
            let err = Prefix::parse(bad).unwrap_err();
            assert!(err.contains(needle), "{bad}: {err}");
        }
        let a = Prefix::parse("/v1/Premium").unwrap();
        assert!(a.overlaps(&Prefix::parse("/v1/premium/").unwrap()));
        assert!(!a.overlaps(&Prefix::parse("/v1").unwrap()));
    }
}
