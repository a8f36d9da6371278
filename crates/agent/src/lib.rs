#![doc = include_str!("../README.md")]

/// The `facilitator(url)` and `network(name)` setters of a request type with the fields
/// `facilitator: Option<String>` and `network: Option<String>` (the subscription calls).
macro_rules! facilitator_and_network {
    ($request:ty) => {
        impl $request {
            /// Through this facilitator.
            #[must_use]
            pub fn facilitator(mut self, url: impl Into<String>) -> Self {
                self.facilitator = Some(url.into());
                self
            }

            /// On this network.
            #[must_use]
            pub fn network(mut self, network: impl Into<String>) -> Self {
                self.network = Some(network.into());
                self
            }
        }
    };
}
pub(crate) use facilitator_and_network;

mod agent;
mod error;
mod facilitator;
mod lifecycle;
mod on_subscription;
mod policy;
mod raise;
mod request;
mod state;
mod subscribe;
mod terms;

#[cfg(feature = "mcp")]
pub use agent::ToolCall;
pub use agent::{
    Agent, AgentBuilder, DEFAULT_MAX_402_BODY, DEFAULT_MAX_BODY, PAYMENT_REQUIRED,
    PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE, signer_from_file,
    signer_from_hex,
};
pub use error::{Error, Malformed, Refusal, Result};
pub use lifecycle::SubscriptionRef;
pub use on_subscription::X_SERVICE_SUB;
pub use policy::{SpendPolicy, SubscriptionPolicy};
pub use raise::RaiseAllowance;
pub use request::{PaidResponse, PayRequest, Payment, PaymentKind};
pub use state::default_state_file;
pub use subscribe::{PERMIT_CYCLES, Subscribe, Subscription};

pub use alloy::primitives::{Address, B256};
pub use alloy::signers::local::Secp256k1Signer;
pub use reqwest::{Method, StatusCode, Url, header};
/// MPP's wire types the agent hands back: the decoded `Payment-Receipt` of an MPP payment
/// ([`Payment::mpp_receipt`]) and the problem a server refuses a credential with
/// ([`Error::PaymentProblem`]).
pub use tollgate_protocol::mpp::{Problem as MppProblem, Receipt as MppReceipt};
pub use tollgate_protocol::{Amount, SubscriptionStatus};

/// Hooks for the fuzz targets in `fuzz/`. Not a stable API: hidden from the docs, and it may
/// change or go away in any release.
#[doc(hidden)]
pub mod __fuzz {
    /// Parses a 402 body as [`crate::Agent`] does. Returns how many `accepts` entries the body
    /// lists and how many of them the agent can read, or `None` when the body is refused.
    pub fn parse_402(body: &[u8]) -> Option<(usize, usize)> {
        crate::terms::parse(body, None)
            .ok()
            .map(|terms| (terms.offered, terms.offers.len()))
    }
}
