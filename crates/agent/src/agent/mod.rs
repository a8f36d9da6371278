//! [`Agent`]: a key, a spending policy, and the one-time payment sequence.
//!
//! The sequence itself is [`Agent::pay`] (`pay`); an offer is paid either through a Tollgate
//! facilitator (`tollgate`) or as plain x402 (`x402`); after a declined proof, `recover` finds
//! the proof of the payment already made; `http` sends the requests and reads the answers.

mod builder;
mod http;
#[cfg(feature = "mcp")]
mod mcp;
mod mpp;
mod pay;
mod recover;
mod tollgate;
mod x402;

use std::{
    collections::HashMap,
    fmt,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::{
    primitives::{Address, B256},
    signers::local::Secp256k1Signer,
};
use tollgate_client::FacilitatorClient;
use tollgate_protocol::{Amount, ErrorCode};

use crate::{Error, Result, SpendPolicy, on_subscription::Held, policy::Budget};

pub use builder::AgentBuilder;
#[cfg(feature = "mcp")]
pub use mcp::ToolCall;
pub use tollgate_protocol::headers::{
    PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE,
};

/// The largest 402 body the agent reads (a hostile server cannot make it buffer more).
pub const DEFAULT_MAX_402_BODY: usize = 64 * 1024;
/// The largest final response body the agent reads by default.
pub const DEFAULT_MAX_BODY: usize = 16 * 1024 * 1024;
/// The shortest validity the agent gives any authorization (room for settlement).
const MIN_VALIDITY_SECS: u64 = 30;
/// How far back `validAfter` is set (clock skew between the agent and the chain).
const VALID_AFTER_SKEW_SECS: u64 = 600;

/// A paying client: a local key, a mandatory [`SpendPolicy`], and the budget spent so far.
///
/// Cheap to clone; clones share the key, the budget, the facilitator cache and the subscriptions
/// held, so the budget holds across every clone and every concurrent [`Agent::pay`]. The key
/// never appears in `Debug` output or logs.
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) signer: Secp256k1Signer,
    pub(crate) address: Address,
    pub(crate) policy: SpendPolicy,
    pub(crate) budget: Arc<Budget>,
    pub(crate) http: reqwest::Client,
    chain_ids: HashMap<String, u64>,
    /// EIP-712 domains (name, version) of tokens, by chain id and address, for MPP challenges.
    token_domains: HashMap<(u64, Address), (String, String)>,
    pub(crate) facilitators: Option<Vec<String>>,
    pub(crate) settle_timeout: Duration,
    pub(crate) max_402_body: usize,
    max_body: usize,
    /// One client per facilitator base URL (with its discovery cache).
    pub(super) clients: Mutex<HashMap<String, FacilitatorClient>>,
    pub(crate) held: Held,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("address", &self.inner.address)
            .field("policy", &self.inner.policy)
            .field("spent", &self.inner.budget.used())
            .finish_non_exhaustive()
    }
}

/// Parses a hex private key (32 bytes, `0x` optional, surrounding whitespace ignored).
pub fn signer_from_hex(key: &str) -> Result<Secp256k1Signer> {
    let bytes: B256 = key.trim().parse().map_err(|_| Error::InvalidKey)?;
    Secp256k1Signer::from_bytes(&bytes).map_err(|_| Error::InvalidKey)
}

/// Reads a hex private key from a file (as [`signer_from_hex`]).
pub fn signer_from_file(path: impl AsRef<Path>) -> Result<Secp256k1Signer> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::KeyFile {
        path: path.to_owned(),
        source,
    })?;
    signer_from_hex(&text)
}

impl Agent {
    /// An agent with default settings and a hex private key.
    pub fn from_hex_key(key: &str, policy: SpendPolicy) -> Result<Self> {
        Self::builder(signer_from_hex(key)?, policy).build()
    }

    /// An agent with default settings and a hex private key read from `path`.
    pub fn from_key_file(path: impl AsRef<Path>, policy: SpendPolicy) -> Result<Self> {
        Self::builder(signer_from_file(path)?, policy).build()
    }

    /// The paying address.
    pub fn address(&self) -> Address {
        self.inner.address
    }

    /// The policy.
    pub fn policy(&self) -> &SpendPolicy {
        &self.inner.policy
    }

    /// Spent so far, including payments in flight.
    pub fn spent(&self) -> Amount {
        self.inner.budget.used()
    }

    /// What is left of the total budget.
    pub fn remaining(&self) -> Amount {
        self.inner.budget.remaining()
    }
}

pub(crate) use tollgate_protocol::unix_now;

/// An error and its causes on one line, for logs.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The spec's error name a 402 `error` carries, if it is one (x402's `insufficient_funds` reads
/// as `InsufficientFunds`).
pub(crate) fn spec_code(reason: &str) -> Option<ErrorCode> {
    ErrorCode::parse(reason)
}
