//! The chain layer's error type.

use alloy::primitives::{Address, B256};

use crate::contracts::Revert;

/// Errors from the chain layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A contract call or transaction reverted; the reason is decoded where the contracts define it.
    #[error("execution reverted: {0}")]
    Revert(Revert),
    /// A mined transaction failed (status 0).
    #[error("transaction {tx_hash} reverted on-chain{}", .reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Reverted {
        /// The failed transaction.
        tx_hash: B256,
        /// The decoded reason, when a replay of the call could recover it.
        reason: Option<Revert>,
    },
    /// The node refused the transaction before execution (nonce, gas, fee, chain id, signature).
    #[error("transaction rejected: {0}")]
    Rejected(String),
    /// No signing key is held for this sender.
    #[error("no signing key for {0}")]
    UnknownSigner(Address),
    /// A local signer failed.
    #[error("signing failed: {0}")]
    Signer(#[from] alloy::signers::Error),
    /// Input that cannot be decoded (hex, RLP, signatures, sizes).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The node could not be reached, timed out or answered with a transport-level error.
    #[error("chain unavailable: {0}")]
    Unavailable(String),
    /// The fee market is above the backend's fee cap
    /// ([`RpcOptions::max_fee_per_gas`](crate::rpc::RpcOptions)): nothing was sent, and nothing
    /// would be mined at the price allowed. The node answered; it is not down.
    #[error(
        "the next block's base fee ({base_fee} wei/gas) is above the fee cap ({cap} wei/gas): \
         nothing is sent until it falls (or the cap, max_fee_gwei, is raised)"
    )]
    FeeCapExceeded {
        /// The next block's base fee, in wei per gas (saturated at `u64::MAX`, 18 ETH per gas).
        base_fee: u64,
        /// The cap, in wei per gas (saturated likewise).
        cap: u64,
    },
    /// The node answered with a JSON-RPC error that is not a revert.
    #[error("chain RPC error {code}: {message}")]
    Rpc {
        /// JSON-RPC error code.
        code: i64,
        /// JSON-RPC error message.
        message: String,
    },
    /// The operation is not supported by this backend (e.g. time travel on a public network).
    #[error("unsupported by this chain backend: {0}")]
    Unsupported(&'static str),
    /// The devnet's journal could not be read or written.
    #[error("devnet journal: {0}")]
    Journal(#[from] std::io::Error),
    /// The devnet journal does not belong to this devnet configuration.
    #[error("devnet journal mismatch: {0}")]
    JournalMismatch(String),
    /// The devnet has shut down.
    #[error("devnet stopped")]
    Stopped,
}

impl Error {
    /// The same error again, for the requests that waited on the one that met it (a reading
    /// shared by several): a fee cap or a node's JSON-RPC error as itself, the rest as the
    /// unavailability they are to those requests.
    pub(crate) fn again(&self) -> Error {
        match self {
            Error::FeeCapExceeded { base_fee, cap } => Error::FeeCapExceeded {
                base_fee: *base_fee,
                cap: *cap,
            },
            Error::Rpc { code, message } => Error::Rpc {
                code: *code,
                message: message.clone(),
            },
            Error::Unavailable(m) => Error::Unavailable(m.clone()),
            other => Error::Unavailable(other.to_string()),
        }
    }
}

/// Result alias for the chain layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;
