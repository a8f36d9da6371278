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

mod journal;
pub mod server;

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy::{
    consensus::{
        Header, Receipt as ConsensusReceipt, ReceiptEnvelope, ReceiptWithBloom, Transaction as _,
        TxEip1559, TxEnvelope, TxType, proofs, transaction::SignerRecoverable,
    },
    eips::{Encodable2718, eip2718::Decodable2718},
    primitives::{Address, B256, Bytes, Log, TxKind, U256, logs_bloom},
};
use async_trait::async_trait;
use revm::{
    Context, ExecuteCommitEvm, ExecuteEvm, MainBuilder, MainContext,
    context::{BlockEnv, CfgEnv, TxEnv, result::ExecutionResult},
    database::{CacheDB, EmptyDB},
    database_interface::DatabaseRef,
    primitives::hardfork::SpecId,
    state::AccountInfo,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use tollgate_chain::{
    Chain, ChainLog, Confirmation, Error, LogFilter, Receipt, Result, TxRequest, WaitOptions,
    Wallet,
    accounts::{DEV_ACCOUNT_COUNT, DevAccount, dev_accounts},
    contracts::{Deployment, Revert, TokenParams, deployment_addresses, deployment_txs},
};

/// Fixed base fee of every devnet block (1 gwei), as geth and anvil start.
pub const BASE_FEE: u64 = 1_000_000_000;
/// Gas limit of every devnet block.
pub const BLOCK_GAS_LIMIT: u64 = 30_000_000;
/// Ether given to each dev account: 10,000 ETH.
pub const DEV_ETH: U256 = U256::from_limbs([0x19e0_c9ba_b240_0000, 0x21e, 0, 0]);
/// Tokens given to each dev account: 1,000,000 tokens of 6 decimals.
pub const DEV_TOKENS: U256 = U256::from_limbs([1_000_000_000_000, 0, 0, 0]);
/// Most transactions one sender may have waiting for a nonce gap to fill.
const MAX_QUEUED_PER_SENDER: usize = 1024;
/// Future-nonce transactions held for all senders together: a garbled signature recovers to a
/// random sender, so without it a client could grow the pool without bound.
const MAX_QUEUED_SENDERS: usize = 4096;
/// Largest raw transaction accepted (128 KiB, as geth).
const MAX_TX_BYTES: usize = 128 * 1024;

/// How to build a devnet.
#[derive(Clone, Debug)]
pub struct DevnetConfig {
    /// Chain id (default 31337).
    pub chain_id: u64,
    /// The network name gates and clients use for it (default `tollgate-devnet`).
    pub network: String,
    /// Where the journal lives; `None` runs without one (nothing survives the process).
    pub state_dir: Option<PathBuf>,
    /// Token name, symbol and EIP-712 version.
    pub token: TokenParams,
    /// How many dev accounts to derive and fund.
    pub accounts: u32,
}

impl Default for DevnetConfig {
    fn default() -> Self {
        Self {
            chain_id: 31337,
            network: "tollgate-devnet".into(),
            state_dir: None,
            token: TokenParams::default(),
            accounts: DEV_ACCOUNT_COUNT,
        }
    }
}

/// What the journal's first record pins: a restart must rebuild the same genesis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Identity {
    chain_id: u64,
    network: String,
    token: TokenParams,
    accounts: u32,
    genesis_timestamp: u64,
}

/// The outcome of a simulated call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Simulation {
    /// Returned normally.
    Success {
        /// Return data.
        output: Bytes,
        /// Gas used.
        gas_used: u64,
    },
    /// Reverted with this data.
    Revert(Bytes),
    /// Halted (out of gas, invalid opcode, ...).
    Halt(String),
}

impl Simulation {
    fn is_success(&self) -> bool {
        matches!(self, Self::Success { .. })
    }

    /// Output and gas used, or the decoded revert as an error.
    pub fn into_result(self) -> Result<(Bytes, u64)> {
        match self {
            Self::Success { output, gas_used } => Ok((output, gas_used)),
            Self::Revert(data) => Err(Error::Revert(Revert::decode(&data))),
            Self::Halt(reason) => Err(Error::Revert(Revert::Halt(reason))),
        }
    }
}

/// A block: its header (hash computed from it) and its one transaction, if any.
#[derive(Debug)]
struct Block {
    header: Header,
    hash: B256,
    tx: Option<B256>,
    /// Journal sequence number of the record that made this block.
    seq: u64,
}

/// An included transaction with its outcome.
#[derive(Debug)]
pub(crate) struct TxEntry {
    pub(crate) envelope: TxEnvelope,
    pub(crate) sender: Address,
    pub(crate) block: u64,
    pub(crate) success: bool,
    pub(crate) gas_used: u64,
    pub(crate) logs: Vec<Log>,
    pub(crate) contract_address: Option<Address>,
    pub(crate) effective_gas_price: u128,
    /// Index of its first log in the block (always 0: one transaction per block).
    pub(crate) seq: u64,
}

/// The mutable heart of the devnet, behind one lock. The EVM itself is not `Send`; it is built
/// per execution over the state database (cheap next to executing a transaction).
struct Core {
    db: CacheDB<EmptyDB>,
    block_env: BlockEnv,
    chain_id: u64,
    blocks: Vec<Block>,
    txs: HashMap<B256, TxEntry>,
    queued: HashMap<Address, BTreeMap<u64, (TxEnvelope, B256)>>,
    /// Seconds added to the wall clock by time travel.
    time_offset: u64,
    /// Sequence number of the last journal record.
    seq: u64,
    journal: Option<journal::Writer>,
}

/// The embedded devnet. Implements [`Chain`], signing with the dev accounts' keys and any keys
/// added with [`Devnet::add_signers`]. Create it with [`Devnet::start`].
pub struct Devnet {
    core: Mutex<Core>,
    durable: watch::Receiver<u64>,
    /// Set when there is no journal: every record is durable at once.
    durable_tx: watch::Sender<u64>,
    config: DevnetConfig,
    accounts: Vec<DevAccount>,
    deployment: Deployment,
    wallet: Mutex<Wallet>,
    /// Per-sender nonce locks for [`Chain::send`], so concurrent sends never collide.
    send_locks: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<()>>>>,
    genesis_timestamp: u64,
}

impl std::fmt::Debug for Devnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devnet")
            .field("chain_id", &self.config.chain_id)
            .field("network", &self.config.network)
            .field("deployment", &self.deployment)
            .finish_non_exhaustive()
    }
}

/// Summary of a started devnet, as written to `devnet.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DevnetInfo {
    /// Chain id.
    pub chain_id: u64,
    /// Network name.
    pub network: String,
    /// The JSON-RPC URL, when served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_url: Option<String>,
    /// Contract addresses.
    pub contracts: Deployment,
    /// Funded dev accounts.
    pub accounts: Vec<AccountInfoJson>,
}

/// An account in [`DevnetInfo`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountInfoJson {
    /// Address (checksummed).
    pub address: Address,
    /// Private key (a well-known test key).
    pub private_key: B256,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the EVM half-committed (commits are atomic
    // per transaction), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Devnet {
    /// Builds genesis, replays the journal of `config.state_dir` (if any), and starts the journal
    /// writer. A torn last record from a crash is dropped with a warning.
    pub fn start(config: DevnetConfig) -> Result<Arc<Self>> {
        let accounts = dev_accounts(config.accounts.max(1));
        let deployer = accounts[0].address;
        let (opened, path) = match &config.state_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                let path = dir.join("devnet.journal");
                (Some(journal::open(&path)?), Some(path))
            }
            None => (None, None),
        };
        let genesis_timestamp = match opened.as_ref().and_then(|o| o.identity.as_ref()) {
            Some(raw) => {
                let stored: Identity = serde_json::from_slice(raw).map_err(|e| {
                    Error::JournalMismatch(format!("unreadable identity record: {e}"))
                })?;
                let wanted = Identity {
                    genesis_timestamp: stored.genesis_timestamp,
                    ..identity(&config, 0)
                };
                if stored != wanted {
                    return Err(Error::JournalMismatch(format!(
                        "{} was created for chain id {} ({}), token {:?}, {} accounts; \
                         start with the same settings or use another state directory",
                        path.as_ref()
                            .map(|p| p.display().to_string())
                            .unwrap_or_default(),
                        stored.chain_id,
                        stored.network,
                        stored.token.name,
                        stored.accounts
                    )));
                }
                stored.genesis_timestamp
            }
            None => now_secs(),
        };

        let mut core = Core::genesis(&config, &accounts, genesis_timestamp)?;
        let (durable_tx, durable) = watch::channel(0);
        let deployment = deployment_addresses(deployer, 0);

        if let Some(mut opened) = opened {
            if opened.identity.is_none() {
                let id =
                    serde_json::to_vec(&identity(&config, genesis_timestamp)).expect("serializes");
                journal::write_identity(&mut opened.file, &id)?;
            }
            let replayed = opened.records.len();
            for record in std::mem::take(&mut opened.records) {
                core.replay(record)?;
            }
            if replayed > 0 {
                tracing::info!(
                    records = replayed,
                    blocks = core.blocks.len() - 1,
                    dropped_tail_bytes = opened.dropped_tail,
                    "devnet state restored from journal"
                );
            }
            durable_tx.send_replace(core.seq);
            core.journal = Some(journal::Writer::start(opened.file, durable_tx.clone()));
        }

        let wallet = Wallet::from_keys(accounts.iter().map(|a| a.private_key))?;
        Ok(Arc::new(Self {
            core: Mutex::new(core),
            durable,
            durable_tx,
            config,
            accounts,
            deployment,
            wallet: Mutex::new(wallet),
            send_locks: Mutex::default(),
            genesis_timestamp,
        }))
    }

    /// The dev accounts (funded with [`DEV_ETH`] and [`DEV_TOKENS`]).
    pub fn accounts(&self) -> &[DevAccount] {
        &self.accounts
    }

    /// The contract addresses.
    pub fn deployment(&self) -> Deployment {
        self.deployment
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &DevnetConfig {
        &self.config
    }

    /// Genesis block timestamp.
    pub fn genesis_timestamp(&self) -> u64 {
        self.genesis_timestamp
    }

    /// The summary written to `devnet.json`.
    pub fn info(&self, rpc_url: Option<String>) -> DevnetInfo {
        DevnetInfo {
            chain_id: self.config.chain_id,
            network: self.config.network.clone(),
            rpc_url,
            contracts: self.deployment,
            accounts: self
                .accounts
                .iter()
                .map(|a| AccountInfoJson {
                    address: a.address,
                    private_key: a.private_key,
                })
                .collect(),
        }
    }

    /// Adds signing keys (e.g. a facilitator's relayer) that [`Chain::send`] may use.
    pub fn add_signers(&self, keys: impl IntoIterator<Item = B256>) -> Result<()> {
        let added = Wallet::from_keys(keys)?;
        let mut wallet = lock(&self.wallet);
        *wallet = wallet.merged(&added);
        Ok(())
    }

    /// Accepts a signed EIP-2718 transaction (legacy, EIP-2930 or EIP-1559) as
    /// `eth_sendRawTransaction` does and returns its hash. It executes at once, or waits in the
    /// pool when its nonce is ahead of the sender's.
    pub fn send_raw(&self, raw: &[u8]) -> Result<B256> {
        if raw.len() > MAX_TX_BYTES {
            return Err(Error::InvalidInput(format!(
                "transaction of {} bytes exceeds {MAX_TX_BYTES}",
                raw.len()
            )));
        }
        let envelope = TxEnvelope::decode_2718(&mut &raw[..])
            .map_err(|e| Error::InvalidInput(format!("transaction decoding: {e}")))?;
        let sender = envelope
            .recover_signer()
            .map_err(|e| Error::InvalidInput(format!("transaction signature: {e}")))?;
        self.submit(envelope, sender)
    }

    /// Accepts a transaction whose sender is already known (signed by this process).
    fn submit(&self, envelope: TxEnvelope, sender: Address) -> Result<B256> {
        match envelope.tx_type() {
            TxType::Legacy | TxType::Eip2930 | TxType::Eip1559 => {}
            other => {
                return Err(Error::Rejected(format!(
                    "transaction type {other:?} is not supported by the devnet"
                )));
            }
        }
        if let Some(id) = envelope.chain_id()
            && id != self.config.chain_id
        {
            {
                return Err(Error::Rejected(format!(
                    "chain id {id} does not match the devnet's {}",
                    self.config.chain_id
                )));
            }
        }
        let hash = *envelope.tx_hash();
        let mut core = lock(&self.core);
        if core.txs.contains_key(&hash) {
            return Ok(hash);
        }
        let expected = core.account(sender).nonce;
        let nonce = envelope.nonce();
        if nonce < expected {
            return Err(Error::Rejected(format!(
                "nonce too low: {nonce} < {expected} for {sender}"
            )));
        }
        if nonce > expected {
            if !core.queued.contains_key(&sender) && core.queued.len() >= MAX_QUEUED_SENDERS {
                return Err(Error::Rejected(
                    "too many senders with queued transactions".into(),
                ));
            }
            let queue = core.queued.entry(sender).or_default();
            if queue.len() >= MAX_QUEUED_PER_SENDER {
                return Err(Error::Rejected(format!(
                    "too many queued transactions from {sender}"
                )));
            }
            queue.insert(nonce, (envelope, hash));
            return Ok(hash);
        }
        let timestamp = core.next_timestamp();
        core.include(envelope, sender, timestamp, true)?;
        // Fill from the pool what the new nonce unblocked.
        loop {
            let next = core.account(sender).nonce;
            let Some(queue) = core.queued.get_mut(&sender) else {
                break;
            };
            let Some((envelope, _)) = queue.remove(&next) else {
                break;
            };
            if queue.is_empty() {
                core.queued.remove(&sender);
            }
            let timestamp = core.next_timestamp();
            if let Err(e) = core.include(envelope, sender, timestamp, true) {
                tracing::debug!(%sender, nonce = next, error = %e, "queued transaction dropped");
            }
        }
        if core.journal.is_none() {
            self.durable_tx.send_replace(core.seq);
        }
        Ok(hash)
    }

    fn durable_seq(&self) -> u64 {
        *self.durable.borrow()
    }

    /// Executes a call against the latest state without committing; a revert keeps its raw data.
    pub fn simulate(
        &self,
        from: Option<Address>,
        to: Option<Address>,
        data: Bytes,
        value: U256,
        gas: Option<u64>,
    ) -> Result<Simulation> {
        let mut core = lock(&self.core);
        core.simulate(from.unwrap_or_default(), to, data, value, gas)
    }

    /// Estimates the gas a transaction needs (binary search over the limit, as geth).
    pub fn estimate_gas(
        &self,
        from: Option<Address>,
        to: Option<Address>,
        data: Bytes,
        value: U256,
    ) -> Result<u64> {
        let mut core = lock(&self.core);
        let from = from.unwrap_or_default();
        let used = core
            .simulate(from, to, data.clone(), value, None)?
            .into_result()?
            .1;
        // Refunds and the 63/64 rule can make the needed limit larger than the gas used: try a
        // margin first (as geth's optimistic estimate), and search upwards only if it fails.
        let ok = |core: &mut Core, gas: u64| matches!(core.simulate(from, to, data.clone(), value, Some(gas)), Ok(s) if s.is_success());
        let first_try = (used + used / 4 + 2_300).min(BLOCK_GAS_LIMIT);
        if ok(&mut core, first_try) {
            return Ok(first_try);
        }
        let (mut lo, mut hi) = (first_try, BLOCK_GAS_LIMIT);
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if ok(&mut core, mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Ok(hi)
    }

    /// The latest durable block number.
    pub fn latest_block(&self) -> u64 {
        let durable = self.durable_seq();
        let core = lock(&self.core);
        core.latest_visible(durable)
    }

    /// Moves the clock forward by `seconds` and mines a block at the new time; returns when durable.
    pub async fn advance_time(&self, seconds: u64) -> Result<()> {
        let seq = {
            let mut core = lock(&self.core);
            core.increase_time(seconds);
            core.mine();
            if core.journal.is_none() {
                self.durable_tx.send_replace(core.seq);
            }
            core.seq
        };
        self.wait_durable(seq, Duration::from_secs(30)).await
    }

    /// Moves the clock forward without mining (`evm_increaseTime`); returns the total offset.
    pub fn increase_time(&self, seconds: u64) -> u64 {
        let mut core = lock(&self.core);
        core.increase_time(seconds);
        if core.journal.is_none() {
            self.durable_tx.send_replace(core.seq);
        }
        core.time_offset
    }

    /// Mines an empty block (`evm_mine`).
    pub fn mine(&self) -> u64 {
        let mut core = lock(&self.core);
        core.mine();
        if core.journal.is_none() {
            self.durable_tx.send_replace(core.seq);
        }
        core.blocks.len() as u64 - 1
    }

    /// Waits until everything recorded so far is durable.
    pub async fn flush(&self) -> Result<()> {
        let seq = lock(&self.core).seq;
        self.wait_durable(seq, Duration::from_secs(30)).await
    }

    async fn wait_durable(&self, seq: u64, timeout: Duration) -> Result<()> {
        let mut rx = self.durable.clone();
        match tokio::time::timeout(timeout, rx.wait_for(|d| *d >= seq)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(Error::Stopped),
            Err(_) => Err(Error::Unavailable(
                "the devnet journal did not become durable in time".into(),
            )),
        }
    }

    /// Reads with the core locked (for the JSON-RPC server).
    pub(crate) fn with_core<R>(&self, f: impl FnOnce(&CoreView<'_>) -> R) -> R {
        let durable = self.durable_seq();
        let mut core = lock(&self.core);
        f(&CoreView {
            core: &mut core,
            durable,
        })
    }

    fn signer_lock(&self, from: Address) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.send_locks).entry(from).or_default().clone()
    }

    /// The hash of the block at `number`, if visible.
    pub fn block_hash(&self, number: u64) -> Option<B256> {
        self.with_core(|v| v.block(number).map(|b| b.hash))
    }
}

fn identity(config: &DevnetConfig, genesis_timestamp: u64) -> Identity {
    Identity {
        chain_id: config.chain_id,
        network: config.network.clone(),
        token: config.token.clone(),
        accounts: config.accounts.max(1),
        genesis_timestamp,
    }
}

/// Read access to the devnet's blocks and transactions, limited to what is durable.
pub(crate) struct CoreView<'a> {
    core: &'a mut Core,
    durable: u64,
}

impl CoreView<'_> {
    pub(crate) fn latest(&self) -> u64 {
        self.core.latest_visible(self.durable)
    }
    pub(crate) fn block(&self, number: u64) -> Option<BlockView<'_>> {
        let b = self.core.blocks.get(number as usize)?;
        (b.seq <= self.durable).then_some(BlockView {
            header: &b.header,
            hash: b.hash,
            tx: b.tx,
        })
    }
    pub(crate) fn block_by_hash(&self, hash: B256) -> Option<BlockView<'_>> {
        // Blocks are few enough to scan from the end; lookups by hash are rare.
        self.core
            .blocks
            .iter()
            .rev()
            .find(|b| b.hash == hash && b.seq <= self.durable)
            .map(|b| BlockView {
                header: &b.header,
                hash: b.hash,
                tx: b.tx,
            })
    }
    pub(crate) fn tx(&self, hash: &B256) -> Option<&TxEntry> {
        self.core.txs.get(hash).filter(|t| t.seq <= self.durable)
    }
    pub(crate) fn account(&self, address: Address) -> AccountInfo {
        self.core.account(address)
    }
    pub(crate) fn pending_nonce(&self, address: Address) -> u64 {
        self.core.pending_nonce(address)
    }
    pub(crate) fn storage(&self, address: Address, slot: U256) -> U256 {
        self.core.db.storage_ref(address, slot).unwrap_or_default()
    }
    pub(crate) fn code(&self, address: Address) -> Bytes {
        self.core.code(address)
    }
    pub(crate) fn logs(&self, filter: &LogFilter) -> Vec<ChainLog> {
        self.core
            .logs(filter, self.core.latest_visible(self.durable))
    }
}

/// A block as the JSON-RPC server sees it.
pub(crate) struct BlockView<'a> {
    pub(crate) header: &'a Header,
    pub(crate) hash: B256,
    pub(crate) tx: Option<B256>,
}

impl Core {
    fn genesis(
        config: &DevnetConfig,
        accounts: &[DevAccount],
        genesis_timestamp: u64,
    ) -> Result<Self> {
        let mut db = CacheDB::new(EmptyDB::new());
        for a in accounts {
            db.insert_account_info(
                a.address,
                AccountInfo {
                    balance: DEV_ETH,
                    ..Default::default()
                },
            );
        }
        let header = Header {
            number: 0,
            timestamp: genesis_timestamp,
            gas_limit: BLOCK_GAS_LIMIT,
            base_fee_per_gas: Some(BASE_FEE),
            ..Default::default()
        };
        let hash = header.hash_slow();
        let mut core = Self {
            db,
            block_env: BlockEnv::default(),
            chain_id: config.chain_id,
            blocks: vec![Block {
                header,
                hash,
                tx: None,
                seq: 0,
            }],
            txs: HashMap::new(),
            queued: HashMap::new(),
            time_offset: 0,
            seq: 0,
            journal: None,
        };
        // Deploy and mint as part of genesis state (like a genesis alloc): the same transactions
        // `contracts::deploy` sends to other nodes, executed in the genesis block's context.
        let deployer = accounts[0].address;
        let holders: Vec<Address> = accounts.iter().map(|a| a.address).collect();
        for tx in deployment_txs(deployer, deployer, &config.token, &holders, DEV_TOKENS, 0) {
            core.set_block(0, genesis_timestamp);
            let nonce = core.account(tx.from).nonce;
            let env = TxEnv {
                tx_type: 2,
                caller: tx.from,
                gas_limit: tx.gas.unwrap_or(BLOCK_GAS_LIMIT),
                gas_price: u128::from(BASE_FEE),
                gas_priority_fee: Some(0),
                kind: tx.to.map_or(TxKind::Create, TxKind::Call),
                value: tx.value,
                data: tx.data,
                nonce,
                chain_id: Some(config.chain_id),
                ..Default::default()
            };
            match core.execute(env, true, false) {
                Ok(ExecutionResult::Success { .. }) => {}
                other => {
                    return Err(Error::Rejected(format!(
                        "devnet genesis deployment failed: {other:?}"
                    )));
                }
            }
        }
        Ok(core)
    }

    fn account(&self, address: Address) -> AccountInfo {
        self.db
            .basic_ref(address)
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    fn pending_nonce(&self, address: Address) -> u64 {
        let mut n = self.account(address).nonce;
        if let Some(q) = self.queued.get(&address) {
            while q.contains_key(&n) {
                n += 1;
            }
        }
        n
    }

    fn code(&self, address: Address) -> Bytes {
        let info = self.account(address);
        match info.code {
            Some(code) => code.original_bytes(),
            None => self
                .db
                .code_by_hash_ref(info.code_hash)
                .map(|c| c.original_bytes())
                .unwrap_or_default(),
        }
    }

    fn latest_visible(&self, durable: u64) -> u64 {
        let mut n = self.blocks.len() - 1;
        while n > 0 && self.blocks[n].seq > durable {
            n -= 1;
        }
        n as u64
    }

    fn next_timestamp(&self) -> u64 {
        let last = self.blocks.last().expect("genesis").header.timestamp;
        // Saturating: `evm_increaseTime` may have set the offset to anything up to `u64::MAX`.
        last.max(now_secs().saturating_add(self.time_offset))
    }

    /// Builds an EVM over the state for the current block and runs `env`; `commit` keeps the
    /// changes, `call` relaxes what `eth_call` relaxes (nonce check, base fee).
    fn execute(
        &mut self,
        env: TxEnv,
        commit: bool,
        call: bool,
    ) -> std::result::Result<ExecutionResult, String> {
        let mut block = self.block_env.clone();
        if call {
            block.basefee = 0;
        }
        let chain_id = self.chain_id;
        let mut evm = Context::mainnet()
            .with_db(&mut self.db)
            .with_block(block)
            .modify_cfg_chained(|cfg: &mut CfgEnv| {
                cfg.chain_id = chain_id;
                cfg.set_spec_and_mainnet_gas_params(SpecId::CANCUN);
                cfg.disable_nonce_check = call;
            })
            .build_mainnet();
        if commit {
            evm.transact_commit(env).map_err(|e| e.to_string())
        } else {
            evm.transact(env)
                .map(|r| r.result)
                .map_err(|e| e.to_string())
        }
    }

    fn set_block(&mut self, number: u64, timestamp: u64) {
        self.block_env = BlockEnv {
            number: U256::from(number),
            timestamp: U256::from(timestamp),
            gas_limit: BLOCK_GAS_LIMIT,
            basefee: BASE_FEE,
            difficulty: U256::ZERO,
            prevrandao: Some(B256::ZERO),
            ..Default::default()
        };
    }

    fn tx_env(envelope: &TxEnvelope, sender: Address) -> TxEnv {
        let (gas_price, priority) = match envelope.tx_type() {
            TxType::Eip1559 => (
                envelope.max_fee_per_gas(),
                envelope.max_priority_fee_per_gas(),
            ),
            _ => (envelope.gas_price().unwrap_or_default(), None),
        };
        TxEnv {
            tx_type: envelope.tx_type() as u8,
            caller: sender,
            gas_limit: envelope.gas_limit(),
            gas_price,
            gas_priority_fee: priority,
            kind: envelope.kind(),
            value: envelope.value(),
            data: envelope.input().clone(),
            nonce: envelope.nonce(),
            chain_id: envelope.chain_id(),
            access_list: envelope.access_list().cloned().unwrap_or_default(),
            ..Default::default()
        }
    }

    /// Executes `envelope` in a new block and records it. `journal`: append it to the journal
    /// (false while replaying).
    fn include(
        &mut self,
        envelope: TxEnvelope,
        sender: Address,
        timestamp: u64,
        journal: bool,
    ) -> Result<()> {
        let number = self.blocks.len() as u64;
        self.set_block(number, timestamp);
        let env = Self::tx_env(&envelope, sender);
        let result = self.execute(env, true, false).map_err(Error::Rejected)?;
        let (success, gas_used, logs, contract_address) = match result {
            ExecutionResult::Success {
                gas, logs, output, ..
            } => (true, gas.tx_gas_used(), logs, output.address().copied()),
            ExecutionResult::Revert { gas, logs, .. } => (false, gas.tx_gas_used(), logs, None),
            ExecutionResult::Halt { gas, logs, .. } => (false, gas.tx_gas_used(), logs, None),
        };
        let effective_gas_price = envelope.effective_gas_price(Some(BASE_FEE));
        let hash = *envelope.tx_hash();
        let receipt = ReceiptEnvelope::from_typed(
            envelope.tx_type(),
            ReceiptWithBloom::new(
                ConsensusReceipt {
                    status: success.into(),
                    cumulative_gas_used: gas_used,
                    logs: logs.clone(),
                },
                logs_bloom(logs.iter()),
            ),
        );
        let parent = self.blocks.last().expect("genesis");
        let header = Header {
            parent_hash: parent.hash,
            number,
            timestamp,
            gas_limit: BLOCK_GAS_LIMIT,
            gas_used,
            base_fee_per_gas: Some(BASE_FEE),
            transactions_root: proofs::calculate_transaction_root(std::slice::from_ref(&envelope)),
            receipts_root: proofs::calculate_receipt_root(std::slice::from_ref(&receipt)),
            logs_bloom: receipt.logs_bloom().to_owned(),
            ..Default::default()
        };
        self.seq += 1;
        let seq = self.seq;
        if journal && let Some(j) = &self.journal {
            {
                j.append(
                    seq,
                    &journal::Record::Tx {
                        timestamp,
                        sender,
                        raw: envelope.encoded_2718().into(),
                    },
                );
            }
        }
        let block_hash = header.hash_slow();
        self.blocks.push(Block {
            header,
            hash: block_hash,
            tx: Some(hash),
            seq,
        });
        self.txs.insert(
            hash,
            TxEntry {
                envelope,
                sender,
                block: number,
                success,
                gas_used,
                logs,
                contract_address,
                effective_gas_price,
                seq,
            },
        );
        Ok(())
    }

    fn increase_time(&mut self, seconds: u64) {
        self.time_offset = self.time_offset.saturating_add(seconds);
        self.seq += 1;
        if let Some(j) = &self.journal {
            j.append(self.seq, &journal::Record::TimeAdvance { seconds });
        }
    }

    fn mine(&mut self) {
        let timestamp = self.next_timestamp();
        self.seq += 1;
        if let Some(j) = &self.journal {
            j.append(self.seq, &journal::Record::Mine { timestamp });
        }
        self.push_empty_block(timestamp);
    }

    fn push_empty_block(&mut self, timestamp: u64) {
        let parent = self.blocks.last().expect("genesis");
        let header = Header {
            parent_hash: parent.hash,
            number: self.blocks.len() as u64,
            timestamp,
            gas_limit: BLOCK_GAS_LIMIT,
            base_fee_per_gas: Some(BASE_FEE),
            ..Default::default()
        };
        let hash = header.hash_slow();
        self.blocks.push(Block {
            header,
            hash,
            tx: None,
            seq: self.seq,
        });
    }

    fn replay(&mut self, record: journal::Record) -> Result<()> {
        match record {
            journal::Record::Tx {
                timestamp,
                sender,
                raw,
            } => {
                let envelope = TxEnvelope::decode_2718(&mut &raw[..]).map_err(|e| {
                    Error::JournalMismatch(format!("undecodable transaction in journal: {e}"))
                })?;
                self.include(envelope, sender, timestamp, false)?;
            }
            journal::Record::TimeAdvance { seconds } => {
                self.time_offset = self.time_offset.saturating_add(seconds);
                self.seq += 1;
            }
            journal::Record::Mine { timestamp } => {
                self.seq += 1;
                self.push_empty_block(timestamp);
            }
        }
        Ok(())
    }

    fn simulate(
        &mut self,
        from: Address,
        to: Option<Address>,
        data: Bytes,
        value: U256,
        gas: Option<u64>,
    ) -> Result<Simulation> {
        let number = self.blocks.len() as u64;
        let timestamp = self.next_timestamp();
        self.set_block(number, timestamp);
        let nonce = self.account(from).nonce;
        let env = TxEnv {
            tx_type: 0,
            caller: from,
            gas_limit: gas.unwrap_or(BLOCK_GAS_LIMIT),
            gas_price: 0,
            kind: to.map_or(TxKind::Create, TxKind::Call),
            value,
            data,
            nonce,
            chain_id: Some(self.chain_id),
            ..Default::default()
        };
        Ok(
            match self.execute(env, false, true).map_err(Error::Rejected)? {
                ExecutionResult::Success { gas, output, .. } => Simulation::Success {
                    output: output.into_data(),
                    gas_used: gas.tx_gas_used(),
                },
                ExecutionResult::Revert { output, .. } => Simulation::Revert(output),
                ExecutionResult::Halt { reason, .. } => Simulation::Halt(format!("{reason:?}")),
            },
        )
    }

    fn logs(&self, filter: &LogFilter, latest: u64) -> Vec<ChainLog> {
        let to = filter.to_block.unwrap_or(latest).min(latest);
        let mut out = Vec::new();
        if filter.from_block > to {
            return out;
        }
        for block in &self.blocks[filter.from_block as usize..=to as usize] {
            let Some(tx) = block.tx else { continue };
            let entry = &self.txs[&tx];
            for (i, log) in entry.logs.iter().enumerate() {
                if filter.matches(log) {
                    out.push(ChainLog {
                        log: log.clone(),
                        block_number: entry.block,
                        tx_hash: tx,
                        log_index: i as u64,
                    });
                }
            }
        }
        out
    }

    fn receipt(&self, hash: &B256) -> Option<Receipt> {
        let entry = self.txs.get(hash)?;
        let block = &self.blocks[entry.block as usize];
        Some(Receipt {
            tx_hash: *hash,
            block_number: entry.block,
            block_hash: block.hash,
            block_timestamp: block.header.timestamp,
            from: entry.sender,
            to: entry.envelope.to(),
            contract_address: entry.contract_address,
            success: entry.success,
            gas_used: entry.gas_used,
            effective_gas_price: entry.effective_gas_price,
            logs: entry.logs.clone(),
        })
    }
}

#[async_trait]
impl Chain for Devnet {
    fn chain_id(&self) -> u64 {
        self.config.chain_id
    }

    fn signers(&self) -> Vec<Address> {
        lock(&self.wallet).addresses()
    }

    async fn block_number(&self) -> Result<u64> {
        Ok(self.latest_block())
    }

    async fn timestamp(&self) -> Result<u64> {
        Ok(self.with_core(|v| {
            v.block(v.latest())
                .map(|b| b.header.timestamp)
                .unwrap_or_default()
        }))
    }

    async fn balance(&self, account: Address) -> Result<U256> {
        Ok(lock(&self.core).account(account).balance)
    }

    async fn nonce(&self, account: Address) -> Result<u64> {
        Ok(lock(&self.core).pending_nonce(account))
    }

    async fn code(&self, account: Address) -> Result<Bytes> {
        Ok(lock(&self.core).code(account))
    }

    async fn call(&self, from: Option<Address>, to: Address, data: Bytes) -> Result<Bytes> {
        self.simulate(from, Some(to), data, U256::ZERO, None)?
            .into_result()
            .map(|(out, _)| out)
    }

    async fn send(&self, tx: TxRequest) -> Result<B256> {
        let wallet = lock(&self.wallet).clone();
        if !wallet.contains(&tx.from) {
            return Err(Error::UnknownSigner(tx.from));
        }
        let gas = match tx.gas {
            Some(g) => g,
            None => self.estimate_gas(Some(tx.from), tx.to, tx.data.clone(), tx.value)?,
        };
        let send_lock = self.signer_lock(tx.from);
        let _guard = send_lock.lock().await;
        let nonce = lock(&self.core).pending_nonce(tx.from);
        let unsigned = TxEip1559 {
            chain_id: self.config.chain_id,
            nonce,
            gas_limit: gas,
            max_fee_per_gas: u128::from(BASE_FEE) * 2,
            max_priority_fee_per_gas: 0,
            to: tx.to.map_or(TxKind::Create, TxKind::Call),
            value: tx.value,
            input: tx.data,
            access_list: Default::default(),
        };
        let envelope = wallet.sign(tx.from, unsigned)?;
        self.submit(envelope, tx.from)
    }

    async fn receipt(&self, tx_hash: B256) -> Result<Option<Receipt>> {
        let durable = self.durable_seq();
        let core = lock(&self.core);
        Ok(core
            .txs
            .get(&tx_hash)
            .filter(|t| t.seq <= durable)
            .and_then(|_| core.receipt(&tx_hash)))
    }

    async fn knows_transaction(&self, tx_hash: B256) -> Result<bool> {
        let core = lock(&self.core);
        Ok(core.txs.contains_key(&tx_hash)
            || core
                .queued
                .values()
                .any(|q| q.values().any(|(_, h)| *h == tx_hash)))
    }

    async fn logs(&self, filter: &LogFilter) -> Result<Vec<ChainLog>> {
        Ok(self.with_core(|v| v.logs(filter)))
    }

    async fn wait(&self, tx_hash: B256, opts: WaitOptions) -> Result<Confirmation> {
        let deadline = tokio::time::Instant::now() + opts.timeout;
        let mut rx = self.durable.clone();
        loop {
            let durable = *rx.borrow_and_update();
            {
                let core = lock(&self.core);
                // The devnet is final at inclusion (one producer, no reorgs), so any requested
                // depth is met once the block is durable.
                if core.txs.get(&tx_hash).is_some_and(|t| t.seq <= durable) {
                    return Ok(Confirmation::Confirmed(
                        core.receipt(&tx_hash).expect("entry exists"),
                    ));
                }
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Stopped),
                Err(_) => return Ok(Confirmation::Pending { tx_hash }),
            }
        }
    }

    async fn advance_time(&self, seconds: u64) -> Result<()> {
        Devnet::advance_time(self, seconds).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `devnet_jsonrpc` fuzz target: after `evm_increaseTime` by `u64::MAX`, the next
    /// block's timestamp overflowed (a panic under overflow checks, which left every later block,
    /// send and call panicking too; without them, a clock wrapped into the past).
    #[test]
    fn time_travel_to_the_end_of_time_saturates() {
        let devnet = Devnet::start(DevnetConfig::default()).unwrap();
        assert_eq!(devnet.increase_time(u64::MAX), u64::MAX);
        let n = devnet.mine();
        let timestamp = devnet.with_core(|v| v.block(n).unwrap().header.timestamp);
        assert_eq!(timestamp, u64::MAX);
        // The chain still works at the end of time.
        assert_eq!(devnet.mine(), n + 1);
    }

    /// Future-nonce transactions from ever new senders (what garbled signatures recover to) are
    /// refused once the pool holds `MAX_QUEUED_SENDERS` senders.
    #[test]
    fn the_pool_of_future_transactions_is_bounded_across_senders() {
        let devnet = Devnet::start(DevnetConfig::default()).unwrap();
        let keys: Vec<B256> = (1..=MAX_QUEUED_SENDERS as u64 + 1)
            .map(|i| B256::from(U256::from(i) + U256::from(1u64 << 40)))
            .collect();
        let wallet = Wallet::from_keys(keys).unwrap();
        let queued = |from: Address| {
            let tx = TxEip1559 {
                chain_id: devnet.config.chain_id,
                nonce: 5,
                gas_limit: 21_000,
                max_fee_per_gas: u128::from(BASE_FEE) * 2,
                max_priority_fee_per_gas: 0,
                to: TxKind::Call(Address::ZERO),
                value: U256::ZERO,
                input: Bytes::new(),
                access_list: Default::default(),
            };
            devnet.submit(wallet.sign(from, tx).unwrap(), from)
        };
        let senders = wallet.addresses();
        for from in &senders[..MAX_QUEUED_SENDERS] {
            queued(*from).unwrap();
        }
        assert!(matches!(
            queued(senders[MAX_QUEUED_SENDERS]),
            Err(Error::Rejected(_))
        ));
        // A sender already waiting may still queue more.
        assert!(queued(senders[0]).is_ok());
    }
}
