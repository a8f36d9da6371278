//! [`FacilitatorClient`]: the typed calls of the facilitator's HTTP API, by area:
//! one-time payments and x402 ([`settlements`]), plans and subscriptions ([`subscriptions`]),
//! provider registration ([`providers`]), webhooks, events and analytics ([`reporting`]); the
//! settings in [`builder`] and the shared plumbing in [`http`].

use std::{fmt, sync::Arc};

use secrecy::SecretString;

use crate::{Result, discovery::DiscoveryCache};

mod builder;
mod http;
mod providers;
mod reporting;
mod settlements;
mod subscriptions;

pub use builder::{
    ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DISCOVERY_MIN_REFRESH, DEFAULT_DISCOVERY_TTL,
    DEFAULT_MAX_ANSWER, DEFAULT_TIMEOUT,
};
pub use http::read_limited;
pub(crate) use http::unix_now;
pub use settlements::Authorization;

/// A client of one facilitator. Cheap to clone: clones share the HTTP connections and the
/// discovery cache.
///
/// Every call is one HTTP request (no retries: callers that resend decide when; every
/// facilitator operation is idempotent per signed body or idempotency key). Provider calls
/// (plans, usage, webhooks, analytics, key revocation) present the API key given to the
/// builder as `Authorization: Bearer`; no other call sends it.
#[derive(Clone)]
pub struct FacilitatorClient {
    pub(crate) inner: Arc<Inner>,
}

/// What clones of a [`FacilitatorClient`] share.
pub(crate) struct Inner {
    base: String,
    http: reqwest::Client,
    api_key: Option<SecretString>,
    max_answer: usize,
    pub(crate) discovery: DiscoveryCache,
}

impl fmt::Debug for FacilitatorClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FacilitatorClient")
            .field("base", &self.inner.base)
            .field(
                "api_key",
                &self.inner.api_key.as_ref().map(|_| "<redacted>"),
            )
            .field("max_answer", &self.inner.max_answer)
            .field("discovery", &self.inner.discovery)
            .finish_non_exhaustive()
    }
}

impl FacilitatorClient {
    /// A client of the facilitator at `base_url` with the defaults.
    pub fn new(base_url: impl Into<String>) -> Result<Self> {
        Self::builder(base_url).build()
    }

    /// The facilitator's base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// Whether the client holds a provider API key.
    pub fn has_api_key(&self) -> bool {
        self.inner.api_key.is_some()
    }
}
