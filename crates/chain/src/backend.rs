//! The chain seam: what the facilitator, gates and agents need from an EVM chain.

use std::{fmt, time::Duration};

use alloy::primitives::{Address, B256, Bytes, Log, U256};
use async_trait::async_trait;

use crate::{Error, Result};

/// A transaction to be signed by one of the backend's relayer keys and sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxRequest {
    /// The sender; the backend must hold its key ([`crate::Wallet`]).
    pub from: Address,
    /// The callee, or `None` to create a contract.
    pub to: Option<Address>,
    /// Calldata (or init code).
    pub data: Bytes,
    /// Wei sent along.
    pub value: U256,
    /// Gas limit; estimated (with a margin) when `None`.
    pub gas: Option<u64>,
}

impl TxRequest {
    /// A call of `to` with `data` from `from`.
    pub fn call(from: Address, to: Address, data: impl Into<Bytes>) -> Self {
        Self {
            from,
            to: Some(to),
            data: data.into(),
            ..Default::default()
        }
    }
}

/// What a mined transaction left behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The transaction's hash.
    pub tx_hash: B256,
    /// The block it was mined in.
    pub block_number: u64,
    /// That block's hash.
    pub block_hash: B256,
    /// That block's timestamp (seconds).
    pub block_timestamp: u64,
    /// The sender.
    pub from: Address,
    /// The callee (`None` for a creation).
    pub to: Option<Address>,
    /// The created contract, for a creation.
    pub contract_address: Option<Address>,
    /// `true` when execution succeeded.
    pub success: bool,
    /// Gas used by the transaction.
    pub gas_used: u64,
    /// Price paid per gas, in wei.
    pub effective_gas_price: u128,
    /// Logs emitted, in order.
    pub logs: Vec<Log>,
}

/// A log with its position on the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainLog {
    /// The log itself (address, topics, data).
    pub log: Log,
    /// The block it was emitted in.
    pub block_number: u64,
    /// The emitting transaction.
    pub tx_hash: B256,
    /// Index of the log in its block.
    pub log_index: u64,
}

/// A block's place in the chain: enough to tell that a block read before is still the one at
/// its height (no reorg since) and how the chain's clock stood at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRef {
    /// Its height.
    pub number: u64,
    /// Its hash.
    pub hash: B256,
    /// Its parent's hash.
    pub parent_hash: B256,
    /// Its timestamp (seconds).
    pub timestamp: u64,
}

/// A log query: an inclusive block range, an optional emitter and topic filters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// First block (inclusive).
    pub from_block: u64,
    /// Last block (inclusive); `None` means the latest.
    pub to_block: Option<u64>,
    /// Only logs from these addresses (any when empty).
    pub addresses: Vec<Address>,
    /// Per position, the accepted topic values (any when `None` or empty).
    pub topics: [Option<Vec<B256>>; 4],
}

impl LogFilter {
    /// Whether `log` passes the address and topic filters (the block range is not checked).
    pub fn matches(&self, log: &Log) -> bool {
        if !self.addresses.is_empty() && !self.addresses.contains(&log.address) {
            return false;
        }
        let topics = log.topics();
        self.topics.iter().enumerate().all(|(i, want)| match want {
            None => true,
            Some(values) if values.is_empty() => true,
            Some(values) => topics.get(i).is_some_and(|t| values.contains(t)),
        })
    }
}

/// How long and how deep to wait for a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitOptions {
    /// Blocks on top of the inclusion block, counting it (1 = included).
    pub confirmations: u64,
    /// Give up waiting after this long and report [`Confirmation::Pending`].
    pub timeout: Duration,
}

impl Default for WaitOptions {
    fn default() -> Self {
        Self {
            confirmations: 1,
            timeout: Duration::from_secs(30),
        }
    }
}

/// The outcome of a bounded wait for a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Confirmation {
    /// Mined (successfully or not) with the requested depth.
    Confirmed(Receipt),
    /// Broadcast, but not confirmed within the wait; poll again with the hash. Never a failure.
    Pending {
        /// The broadcast transaction.
        tx_hash: B256,
    },
}

impl Confirmation {
    /// The receipt when confirmed.
    pub fn receipt(&self) -> Option<&Receipt> {
        match self {
            Self::Confirmed(r) => Some(r),
            Self::Pending { .. } => None,
        }
    }
}

/// An EVM chain as Tollgate uses it: read state, simulate calls, send relayer-signed transactions,
/// wait for them boundedly, read logs. Implemented by the embedded devnet (`tollgate_devnet::Devnet`) and
/// [`crate::rpc::RpcChain`]; held as `Arc<dyn Chain>`.
#[async_trait]
pub trait Chain: Send + Sync + fmt::Debug + 'static {
    /// The chain id.
    fn chain_id(&self) -> u64;

    /// The addresses whose keys this backend holds for signing.
    fn signers(&self) -> Vec<Address>;

    /// The latest block number.
    async fn block_number(&self) -> Result<u64>;

    /// The latest block's timestamp, in seconds (the chain's clock).
    async fn timestamp(&self) -> Result<u64>;

    /// The native (gas) balance of an account.
    async fn balance(&self, account: Address) -> Result<U256>;

    /// The next nonce of an account (its transaction count, pending ones included).
    async fn nonce(&self, account: Address) -> Result<u64>;

    /// Code deployed at an address.
    async fn code(&self, account: Address) -> Result<Bytes>;

    /// Executes a call against the latest state without committing; reverts become
    /// [`Error::Revert`].
    async fn call(&self, from: Option<Address>, to: Address, data: Bytes) -> Result<Bytes>;

    /// Executes a call like [`Chain::call`], with each account of `accounts` replaced by a fresh
    /// one holding the given code (nonce 0, empty storage) for this call only (an `eth_call` with
    /// state overrides). A backend that cannot run one answers [`Error::Unsupported`].
    async fn call_with_code(
        &self,
        to: Address,
        data: Bytes,
        accounts: Vec<(Address, Bytes)>,
    ) -> Result<Bytes> {
        let _ = (to, data, accounts);
        Err(Error::Unsupported("eth_call with state overrides"))
    }

    /// Block `number`'s place in the chain (the latest block's when `None`); `None` when the
    /// node has no such block. A backend that cannot tell answers [`Error::Unsupported`].
    async fn block_ref(&self, number: Option<u64>) -> Result<Option<BlockRef>> {
        let _ = number;
        Err(Error::Unsupported("block headers"))
    }

    /// Executes a call like [`Chain::call`] (no sender) against the state right after the block
    /// whose hash is `block` (an EIP-1898 block hash: that block, not whatever is at its height
    /// after a reorg). A backend that cannot answers [`Error::Unsupported`].
    async fn call_at(&self, to: Address, data: Bytes, block: B256) -> Result<Bytes> {
        let _ = (to, data, block);
        Err(Error::Unsupported("eth_call at a block"))
    }

    /// The most a transaction sent now would offer per gas (its EIP-1559 max fee), in wei: what
    /// a relayer must hold per unit of gas to send it. [`Error::FeeCapExceeded`] when the fee
    /// market is above the backend's fee cap (nothing would be sent). A backend that cannot tell
    /// answers [`Error::Unsupported`].
    async fn max_fee_per_gas(&self) -> Result<u128> {
        Err(Error::Unsupported("fee estimates"))
    }

    /// Signs `tx` with the sender's key and broadcasts it. A call that would revert is refused
    /// before broadcast with [`Error::Revert`] (the gas estimate simulates it).
    async fn send(&self, tx: TxRequest) -> Result<B256>;

    /// The receipt of a mined transaction, if any (regardless of depth).
    async fn receipt(&self, tx_hash: B256) -> Result<Option<Receipt>>;

    /// Whether the node knows the transaction, mined (at any depth) or waiting to be. One it
    /// does not know was dropped (or reorged out and not queued again) and may be sent again.
    async fn knows_transaction(&self, tx_hash: B256) -> Result<bool>;

    /// Logs matching a filter.
    async fn logs(&self, filter: &LogFilter) -> Result<Vec<ChainLog>>;

    /// Waits boundedly for a transaction to be mined with the requested depth. A timeout yields
    /// [`Confirmation::Pending`], never an error; so does a node that fails every poll until
    /// then (a failed poll says nothing of a transaction that was sent).
    async fn wait(&self, tx_hash: B256, opts: WaitOptions) -> Result<Confirmation>;

    /// Drops whatever next nonce of `account` the backend has cached, so that its next send
    /// reads the node's pending count: the account was just taken over from another process (a
    /// replica that sent from it before). A backend that keeps no cache does nothing.
    fn forget_nonce(&self, account: Address) {
        let _ = account;
    }

    /// Moves the chain's clock forward (devnets only: the embedded devnet, or anvil's
    /// `evm_increaseTime` + `evm_mine`).
    async fn advance_time(&self, seconds: u64) -> Result<()>;

    /// Sends and waits; a mined-but-failed transaction becomes [`Error::Reverted`].
    async fn send_and_wait(&self, tx: TxRequest, opts: WaitOptions) -> Result<Confirmation> {
        let hash = self.send(tx).await?;
        match self.wait(hash, opts).await? {
            Confirmation::Confirmed(r) if !r.success => Err(Error::Reverted {
                tx_hash: r.tx_hash,
                reason: None,
            }),
            other => Ok(other),
        }
    }
}
