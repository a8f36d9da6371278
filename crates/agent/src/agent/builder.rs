//! [`AgentBuilder`]: an [`Agent`]'s settings, and the HTTP client it is built with.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::{primitives::Address, signers::local::Secp256k1Signer};

use super::{Agent, DEFAULT_MAX_402_BODY, DEFAULT_MAX_BODY, Inner};
use crate::{Result, SpendPolicy, on_subscription::Held, policy::Budget, state::StateFile};

impl Agent {
    /// A builder for an agent paying with `signer` under `policy`.
    pub fn builder(signer: Secp256k1Signer, policy: SpendPolicy) -> AgentBuilder {
        AgentBuilder {
            signer,
            policy,
            chain_ids: HashMap::new(),
            token_domains: HashMap::new(),
            facilitators: None,
            request_timeout: Duration::from_secs(30),
            settle_timeout: Duration::from_secs(60),
            max_402_body: DEFAULT_MAX_402_BODY,
            max_body: DEFAULT_MAX_BODY,
            state_file: None,
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
    token_domains: HashMap<(u64, Address), (String, String)>,
    facilitators: Option<Vec<String>>,
    request_timeout: Duration,
    settle_timeout: Duration,
    max_402_body: usize,
    max_body: usize,
    state_file: Option<PathBuf>,
}

impl AgentBuilder {
    /// Teaches the agent a network x402 V1 does not name (a devnet), for paying generic x402
    /// servers on it; Tollgate facilitators publish their chain ids themselves.
    pub fn network(mut self, name: impl Into<String>, chain_id: u64) -> Self {
        self.chain_ids.insert(name.into(), chain_id);
        self
    }

    /// Teaches the agent the EIP-712 domain (`name`, `version`) of `token` on chain `chain_id`,
    /// for paying MPP `charge` challenges in it: an MPP challenge names the token but not its
    /// domain. Needed only for a token no facilitator the agent reads settles (their discovery
    /// documents name the domain) and whose chain has no JSON-RPC endpoint the agent knows (it
    /// reads the token's `eip712Domain()` there). A wrong domain signs an authorization the
    /// token refuses: nothing is paid.
    pub fn token_domain(
        mut self,
        chain_id: u64,
        token: Address,
        name: impl Into<String>,
        version: impl Into<String>,
    ) -> Self {
        self.token_domains
            .insert((chain_id, token), (name.into(), version.into()));
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

    /// Remembers the subscriptions the agent holds in `path` (a small JSON file, created when
    /// missing, rewritten atomically with mode 0600 on every change), so that a later agent with
    /// the same key and file serves on them instead of subscribing again. The CLI keeps it beside
    /// the key file ([`default_state_file`](crate::default_state_file)). Default: in memory only.
    ///
    /// [`build`](Self::build) reads it, and refuses a file it cannot read or that holds another
    /// key's subscriptions ([`Error::StateFile`](crate::Error::StateFile)).
    pub fn state_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_file = Some(path.into());
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
        let state = self
            .state_file
            .map(|path| StateFile::open(path, address))
            .transpose()?;
        Ok(Agent {
            inner: Arc::new(Inner {
                signer: self.signer,
                address,
                budget: Budget::new(self.policy.total_budget),
                policy: self.policy,
                http,
                chain_ids: self.chain_ids,
                token_domains: self.token_domains,
                facilitators: self.facilitators,
                settle_timeout: self.settle_timeout,
                max_402_body: self.max_402_body,
                max_body: self.max_body,
                clients: Mutex::new(HashMap::new()),
                held: Held::new(state),
            }),
        })
    }
}
