//! The [`Devnet`] handle: its configuration, start-up (genesis, journal replay, the journal
//! writer), the transaction pool in front of the core, time travel and durability waits.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use alloy::{
    consensus::{Transaction as _, TxEnvelope, TxType, transaction::SignerRecoverable},
    eips::eip2718::Decodable2718,
    primitives::{Address, B256, Bytes, U256},
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tollgate_chain::{
    Error, Result, Wallet,
    accounts::{DEV_ACCOUNT_COUNT, DevAccount, dev_accounts},
    contracts::{Deployment, TokenParams, deployment_addresses},
};

use crate::{
    BLOCK_GAS_LIMIT,
    core::{Core, CoreView, Simulation, now_secs},
    journal,
};

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

/// The embedded devnet. Implements [`Chain`](tollgate_chain::Chain), signing with the dev accounts' keys and any keys
/// added with [`Devnet::add_signers`]. Create it with [`Devnet::start`].
pub struct Devnet {
    pub(crate) core: Mutex<Core>,
    pub(crate) durable: watch::Receiver<u64>,
    /// Set when there is no journal: every record is durable at once.
    pub(crate) durable_tx: watch::Sender<u64>,
    pub(crate) config: DevnetConfig,
    pub(crate) accounts: Vec<DevAccount>,
    pub(crate) deployment: Deployment,
    pub(crate) wallet: Mutex<Wallet>,
    /// Per-sender nonce locks for [`Chain::send`](tollgate_chain::Chain::send), so concurrent sends never collide.
    pub(crate) send_locks: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<()>>>>,
    pub(crate) genesis_timestamp: u64,
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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

    /// The dev accounts (funded with [`DEV_ETH`](crate::DEV_ETH) and [`DEV_TOKENS`](crate::DEV_TOKENS)).
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

    /// Adds signing keys (e.g. a facilitator's relayer) that [`Chain::send`](tollgate_chain::Chain::send) may use.
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
    pub(crate) fn submit(&self, envelope: TxEnvelope, sender: Address) -> Result<B256> {
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

    pub(crate) fn durable_seq(&self) -> u64 {
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

    pub(crate) fn signer_lock(&self, from: Address) -> Arc<tokio::sync::Mutex<()>> {
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

#[cfg(test)]
mod tests {
    use alloy::{consensus::TxEip1559, primitives::TxKind};

    use super::*;
    use crate::BASE_FEE;

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
