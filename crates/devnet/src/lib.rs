//! Tollgate's embedded devnet: revm in process executing the real contract bytecode, behind the
//! [`tollgate_chain::Chain`] seam.
//!
//! - Genesis is deterministic from the [`DevnetConfig`]: the dev accounts of the standard test
//!   mnemonic are funded with ether, the contracts are deployed from account 0 at fixed addresses
//!   ([`tollgate_chain::contracts::deployment_addresses`]) and every account receives tokens.
//! - Automine: each accepted transaction is executed at once in a block of its own. Transactions
//!   with a future nonce wait in a small per-sender pool until the gap is filled.
//! - Durable: each block is appended to a journal in the state directory; a flusher
//!   thread fsyncs batches (group commit). A transaction's receipt becomes visible only once its
//!   record is durable, so nothing a client saw confirmed can be lost by a crash. A restart replays
//!   the journal and restores every balance, nonce, plan and subscription exactly.
//! - Time travel: [`Devnet::advance_time`] moves the clock and mines a block.
//! - [`server`] serves standard Ethereum JSON-RPC over HTTP.
//!
//! The journal's format: length-prefixed, checksummed records after a magic header; the first
//! record pins the devnet's identity (chain id, network, token, accounts, genesis time).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod chain;
mod core;
mod handle;
mod journal;
pub mod server;

use alloy::primitives::U256;

pub use crate::core::Simulation;
pub(crate) use crate::core::{BlockView, CoreView, TxEntry};
pub use handle::{AccountInfoJson, Devnet, DevnetConfig, DevnetInfo};

/// Fixed base fee of every devnet block (1 gwei), as geth and anvil start.
pub const BASE_FEE: u64 = 1_000_000_000;
/// Gas limit of every devnet block.
pub const BLOCK_GAS_LIMIT: u64 = 30_000_000;
/// Ether given to each dev account: 10,000 ETH.
pub const DEV_ETH: U256 = U256::from_limbs([0x19e0_c9ba_b240_0000, 0x21e, 0, 0]);
/// Tokens given to each dev account: 1,000,000 tokens of 6 decimals.
pub const DEV_TOKENS: U256 = U256::from_limbs([1_000_000_000_000, 0, 0, 0]);
