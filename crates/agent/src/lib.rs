#![doc = include_str!("../README.md")]

mod agent;
mod error;
mod facilitator;
mod policy;
mod request;
mod subscribe;
mod terms;

pub use agent::{
    Agent, AgentBuilder, DEFAULT_MAX_402_BODY, DEFAULT_MAX_BODY, X_PAYMENT, X_PAYMENT_RESPONSE,
    signer_from_file, signer_from_hex,
};
pub use error::{Error, Malformed, Refusal, Result};
pub use policy::SpendPolicy;
pub use request::{PaidResponse, PayRequest, Payment, PaymentKind};
pub use subscribe::{PERMIT_CYCLES, Subscribe, Subscription};

pub use alloy::signers::local::Secp256k1Signer;
pub use reqwest::{Method, StatusCode, Url, header};
pub use tollgate_protocol::{Amount, SubscriptionStatus};
