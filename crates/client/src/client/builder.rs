//! [`ClientBuilder`]: the client's HTTP settings, its discovery cache and its API key.

use std::{fmt, sync::Arc, time::Duration};

use secrecy::{ExposeSecret as _, SecretString};

use super::{FacilitatorClient, Inner};
use crate::{Error, Result, discovery::DiscoveryCache};

/// Default bound on each request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound on connecting.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default lifetime of the cached discovery document.
pub const DEFAULT_DISCOVERY_TTL: Duration = Duration::from_secs(600);
/// Default minimum interval between two discovery fetches while a copy is held.
pub const DEFAULT_DISCOVERY_MIN_REFRESH: Duration = Duration::from_secs(30);
/// Default largest answer read.
pub const DEFAULT_MAX_ANSWER: usize = 4 * 1024 * 1024;

/// Builds a [`FacilitatorClient`] ([`FacilitatorClient::builder`]).
#[must_use]
pub struct ClientBuilder {
    base: String,
    api_key: Option<SecretString>,
    http: Option<reqwest::Client>,
    timeout: Duration,
    connect_timeout: Duration,
    user_agent: Option<String>,
    discovery_ttl: Option<Duration>,
    discovery_min_refresh: Duration,
    max_answer: usize,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base", &self.base)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("discovery_ttl", &self.discovery_ttl)
            .finish_non_exhaustive()
    }
}

impl FacilitatorClient {
    /// A builder for a client of the facilitator at `base_url`
    /// (`https://facilitator.example.com`).
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base: base_url.into(),
            api_key: None,
            http: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            user_agent: None,
            discovery_ttl: Some(DEFAULT_DISCOVERY_TTL),
            discovery_min_refresh: DEFAULT_DISCOVERY_MIN_REFRESH,
            max_answer: DEFAULT_MAX_ANSWER,
        }
    }
}

impl ClientBuilder {
    /// The provider's API key (`tg_…`, from [`FacilitatorClient::register`]), for the provider
    /// calls. Held in a [`SecretString`] (zeroed on drop, never printed by `Debug` or logged); an
    /// empty key is no key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key =
            Some(SecretString::from(key.into())).filter(|k| !k.expose_secret().is_empty());
        self
    }

    /// Uses this HTTP client (its timeouts, redirect policy and user agent) instead of building
    /// one; the timeouts and user agent given here are then ignored.
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// The bound on each request, body included (default [`DEFAULT_TIMEOUT`]); connecting is
    /// bounded by `connect` (default [`DEFAULT_CONNECT_TIMEOUT`], never more than `request`).
    pub fn timeouts(mut self, request: Duration, connect: Duration) -> Self {
        self.timeout = request;
        self.connect_timeout = connect;
        self
    }

    /// A `User-Agent` to send (default: none).
    pub fn user_agent(mut self, agent: impl Into<String>) -> Self {
        self.user_agent = Some(agent.into());
        self
    }

    /// How long the discovery document is used without asking again (`None`: until
    /// [`FacilitatorClient::forget_discovery`]), and at most how often it is fetched while a copy
    /// is held (on an unknown proof signer, or while the facilitator is unreachable, in which
    /// case the copy stays in use). Default [`DEFAULT_DISCOVERY_TTL`] and
    /// [`DEFAULT_DISCOVERY_MIN_REFRESH`].
    pub fn discovery_cache(mut self, ttl: Option<Duration>, min_refresh: Duration) -> Self {
        self.discovery_ttl = ttl;
        self.discovery_min_refresh = min_refresh;
        self
    }

    /// The largest answer body read (default [`DEFAULT_MAX_ANSWER`]); a larger one is
    /// [`Error::TooLarge`].
    pub fn max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer = bytes;
        self
    }

    /// The client. Checks the base URL (absolute http(s)); a trailing `/` is dropped. Redirects
    /// are not followed by a client built here.
    pub fn build(self) -> Result<FacilitatorClient> {
        let base = check_base_url(&self.base)?;
        let http = match self.http {
            Some(http) => http,
            None => {
                // reqwest is built without a bundled TLS provider: install ring's.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let mut b = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .timeout(self.timeout)
                    .connect_timeout(self.connect_timeout.min(self.timeout));
                if let Some(agent) = self.user_agent {
                    b = b.user_agent(agent);
                }
                b.build().map_err(Error::Build)?
            }
        };
        Ok(FacilitatorClient {
            inner: Arc::new(Inner {
                base,
                http,
                api_key: self.api_key,
                max_answer: self.max_answer,
                discovery: DiscoveryCache::new(self.discovery_ttl, self.discovery_min_refresh),
            }),
        })
    }
}

fn check_base_url(url: &str) -> Result<String> {
    let invalid = |problem: &str| Error::InvalidUrl {
        url: url.to_owned(),
        problem: problem.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
        return Err(invalid("not an absolute http(s) URL"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid("a base URL has no query or fragment"));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_api_key() {
        let key = format!("tg_{}", "5a".repeat(32));
        let builder = FacilitatorClient::builder("http://127.0.0.1:9").api_key(key.clone());
        let shown = format!("{builder:?}");
        assert!(
            !shown.contains(&key) && shown.contains("api_key"),
            "{shown}"
        );
        let client = builder.build().unwrap();
        assert!(client.has_api_key());
        let shown = format!("{client:?} {client:#?}");
        assert!(
            !shown.contains(&key) && shown.contains("api_key"),
            "{shown}"
        );
    }
}
