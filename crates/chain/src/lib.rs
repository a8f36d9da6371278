//! Tollgate's chain layer: the contracts (bindings generated from the committed artifacts), EIP-712
//! ([`authorization`], [`proof`]), and one seam, [`Chain`], with its JSON-RPC backend:
//!
//! - [`rpc::RpcChain`]: any EVM node over JSON-RPC (anvil in tests, Base in production), with relayer
//!   nonce management, fee estimation, a bounded receipt wait and confirmation depth.
//!
//! The other backend, the embedded revm devnet (`tollgate_devnet::Devnet`), lives in its own crate
//! so that the SDKs built on this one compile no EVM and no server.
//!
//! Reverts are decoded into [`Revert`], which carries the contracts' custom errors (the spec's
//! `InsufficientFunds`, `SubscriptionNotActive`, `AllowanceExhausted`, `PlanDeprecated` among them).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod accounts;
pub mod authorization;
mod backend;
pub mod contracts;
pub mod deploy;
mod error;
pub mod failover;
pub mod proof;
pub mod rpc;
mod wallet;
pub mod worker;

pub use backend::{
    BlockRef, Chain, ChainLog, Confirmation, LogFilter, Receipt, TxRequest, WaitOptions,
};
pub use contracts::{Deployment, Revert};
pub use error::{Error, Result};
pub use wallet::Wallet;

// Enabled for its TLS features (HTTPS node URLs through alloy's transport).
use reqwest as _;

/// Installs the process-wide TLS crypto provider (rustls with ring) that every HTTPS client in
/// Tollgate uses. reqwest is built without a bundled provider (no aws-lc C build), so any
/// `reqwest::Client` built before this panics. Idempotent; [`rpc::RpcChain::connect`] calls it.
pub fn install_crypto_provider() {
    // An error only means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub use alloy::primitives::{Address, B256, Bytes, Log, U256};

#[cfg(test)]
use tempfile as _;
#[cfg(test)]
use tollgate_testkit as _;
