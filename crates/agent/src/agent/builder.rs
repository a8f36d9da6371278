//! [`AgentBuilder`]: an [`Agent`]'s settings, and the HTTP client it is built with.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::signers::local::Secp256k1Signer;

use super::{Agent, DEFAULT_MAX_402_BODY, DEFAULT_MAX_BODY, Inner};
use crate::{Result, SpendPolicy, on_subscription::Held, policy::Budget};

impl Agent {
    /// A builder for an agent paying with `signer` under `policy`.
    pub fn builder(signer: Secp256k1Signer, policy: SpendPolicy) -> AgentBuilder {
        AgentBuilder {
            signer,
            policy,
            chain_ids: HashMap::new(),
            facilitators: None,
            request_timeout: Duration::from_secs(30),
            settle_timeout: Duration::from_secs(60),
            max_402_body: DEFAULT_MAX_402_BODY,
            max_body: DEFAULT_MAX_BODY,
        }
    }
}

/// Builds an [`Agent`].
#[derive(Debug)]
#[must_use]
pub struct AgentBuilder {
    signer: Secp256k1Signer,
    policy: SpendPolicy,
    chain_ids: HashMap<String, u64>,
    facilitators: Option<Vec<String>>,
    request_timeout: Duration,
    settle_timeout: Duration,
    max_402_body: usize,
    max_body: usize,
}

impl AgentBuilder {
    /// Teaches the agent a network x402 V1 does not name (a devnet), for paying generic x402
    /// servers on it; Tollgate facilitators publish their chain ids themselves.
    pub fn network(mut self, name: impl Into<String>, chain_id: u64) -> Self {
        self.chain_ids.insert(name.into(), chain_id);
        self
    }

    /// Only pay through these facilitators (base URLs). Options naming another facilitator are
    /// paid as plain x402 to their `payTo` instead, so the money reaches no address the policy
    /// has not seen (a facilitator names the router the agent signs to). Default: any.
    pub fn facilitators(mut self, urls: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.facilitators = Some(
            urls.into_iter()
                .map(|u| u.into().trim_end_matches('/').to_owned())
                .collect(),
        );
        self
    }

    /// Timeout of each HTTP request (default 30 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long to wait for a pending settlement to confirm (default 60 s).
    pub fn settle_timeout(mut self, timeout: Duration) -> Self {
        self.settle_timeout = timeout;
        self
    }

    /// The largest final response body read (default 16 MiB).
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The agent. Redirects are not followed, so a payment header is never replayed to
    /// another origin.
    pub fn build(self) -> Result<Agent> {
        tollgate_chain::install_crypto_provider();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.request_timeout)
            .connect_timeout(self.request_timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("tollgate-agent/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let address = self.signer.address();
        Ok(Agent {
            inner: Arc::new(Inner {
                signer: self.signer,
                address,
                budget: Budget::new(self.policy.total_budget),
                policy: self.policy,
                http,
                chain_ids: self.chain_ids,
                facilitators: self.facilitators,
                settle_timeout: self.settle_timeout,
                max_402_body: self.max_402_body,
                max_body: self.max_body,
                clients: Mutex::new(HashMap::new()),
                held: Held::default(),
            }),
        })
    }
}
