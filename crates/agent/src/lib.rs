#![doc = include_str!("../README.md")]

mod agent;
mod error;
mod facilitator;
mod on_subscription;
mod policy;
mod raise;
mod request;
mod subscribe;
mod terms;

pub use agent::{
    Agent, AgentBuilder, DEFAULT_MAX_402_BODY, DEFAULT_MAX_BODY, X_PAYMENT, X_PAYMENT_RESPONSE,
    signer_from_file, signer_from_hex,
};
pub use error::{Error, Malformed, Refusal, Result};
pub use on_subscription::X_SERVICE_SUB;
pub use policy::{SpendPolicy, SubscriptionPolicy};
pub use raise::RaiseAllowance;
pub use request::{PaidResponse, PayRequest, Payment, PaymentKind};
pub use subscribe::{PERMIT_CYCLES, Subscribe, Subscription};

pub use alloy::primitives::{Address, B256};
pub use alloy::signers::local::Secp256k1Signer;
pub use reqwest::{Method, StatusCode, Url, header};
pub use tollgate_protocol::{Amount, SubscriptionStatus};
