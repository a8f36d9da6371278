//! `[server]` in a service's TOML config.

use std::time::Duration;

use serde::Deserialize;

use crate::{ClientAddress, Limits, MIN_HEADER_BYTES, RateLimit};

/// The `[server]` section of the facilitator's and the gateway's configs: [`Limits`] in TOML.
///
/// ```toml
/// [server]
/// header_read_timeout_secs = 10
/// request_timeout_secs = 30
/// max_header_bytes = 16384
/// max_headers = 64
/// max_connections = 4096
/// rate_per_second = 50        # per client; 0 turns rate limiting off
/// rate_burst = 100
/// client_address = "peer"     # or "x-forwarded-for" behind a reverse proxy that sets it
/// rate_limit_private = false  # also limit loopback and private-network clients
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ServerConfig {
    /// `header_read_timeout_secs`: see [`Limits::header_read_timeout`]. Positive. Default 10.
    pub header_read_timeout_secs: u64,
    /// `request_timeout_secs`: see [`Limits::request_timeout`]. Positive. Default 30.
    pub request_timeout_secs: u64,
    /// `max_header_bytes`: see [`Limits::max_header_bytes`]. At least 8192. Default 16384.
    pub max_header_bytes: usize,
    /// `max_headers`: see [`Limits::max_headers`]. Positive. Default 64.
    pub max_headers: usize,
    /// `max_connections`: see [`Limits::max_connections`]. Positive. Default 4096.
    pub max_connections: usize,
    /// `rate_per_second`: requests per second per client; `0` turns the limit off. Default 50.
    pub rate_per_second: u32,
    /// `rate_burst`: requests at once per client. Positive when limiting. Default 100.
    pub rate_burst: u32,
    /// `client_address`: `"peer"` or `"x-forwarded-for"`, see [`ClientAddress`]. Default peer.
    pub client_address: ClientAddress,
    /// `rate_limit_private`: limit loopback and private-network clients too. Default false.
    pub rate_limit_private: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let limits = Limits::default();
        let rate = RateLimit::default();
        Self {
            header_read_timeout_secs: limits.header_read_timeout.as_secs(),
            request_timeout_secs: limits.request_timeout.as_secs(),
            max_header_bytes: limits.max_header_bytes,
            max_headers: limits.max_headers,
            max_connections: limits.max_connections,
            rate_per_second: rate.per_second,
            rate_burst: rate.burst,
            client_address: rate.client,
            rate_limit_private: rate.limit_private,
        }
    }
}

impl ServerConfig {
    /// The limits, or the first invalid field.
    pub fn limits(&self) -> Result<Limits, InvalidField> {
        let invalid = |field, reason| Err(InvalidField { field, reason });
        let positive = [
            ("header_read_timeout_secs", self.header_read_timeout_secs),
            ("request_timeout_secs", self.request_timeout_secs),
            ("max_headers", self.max_headers as u64),
            ("max_connections", self.max_connections as u64),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return invalid(field, "must be positive");
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            return invalid("max_header_bytes", "must be at least 8192");
        }
        if self.rate_per_second > 0 && self.rate_burst == 0 {
            return invalid("rate_burst", "must be positive when rate_per_second is set");
        }
        let rate_limit = (self.rate_per_second > 0).then(|| {
            RateLimit::per_second(self.rate_per_second, self.rate_burst)
                .client(self.client_address)
                .limit_private(self.rate_limit_private)
        });
        Ok(Limits {
            header_read_timeout: Duration::from_secs(self.header_read_timeout_secs),
            request_timeout: Duration::from_secs(self.request_timeout_secs),
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
            max_connections: self.max_connections,
            rate_limit,
        })
    }
}

/// A [`ServerConfig`] field with a value out of range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidField {
    /// The field, as named in the TOML.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl std::fmt::Display for InvalidField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.field, self.reason)
    }
}

impl std::error::Error for InvalidField {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_library_defaults() {
        assert_eq!(ServerConfig::default().limits().unwrap(), Limits::default());
    }

    #[test]
    fn fields_parse_and_bad_values_are_named() {
        let c: ServerConfig = toml::from_str(
            "rate_per_second = 0\nclient_address = \"x-forwarded-for\"\nrequest_timeout_secs = 5",
        )
        .unwrap();
        let limits = c.limits().unwrap();
        assert_eq!(limits.rate_limit, None);
        assert_eq!(limits.request_timeout, Duration::from_secs(5));
        for (toml, field) in [
            ("request_timeout_secs = 0", "request_timeout_secs"),
            ("max_header_bytes = 100", "max_header_bytes"),
            ("rate_burst = 0", "rate_burst"),
            ("max_connections = 0", "max_connections"),
        ] {
            let c: ServerConfig = toml::from_str(toml).unwrap();
            assert_eq!(c.limits().unwrap_err().field, field, "{toml}");
        }
        assert!(toml::from_str::<ServerConfig>("rate = 1").is_err());
        assert!(toml::from_str::<ServerConfig>("client_address = \"forwarded\"").is_err());
    }
}
