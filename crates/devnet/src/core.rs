//! The devnet's core: the revm state database, its blocks and transactions, and the execution
//! of each transaction in a block of its own (with its journal record). Behind one lock in
//! [`Devnet`](crate::Devnet); the JSON-RPC server reads it through a [`CoreView`].

use std::{
    collections::{BTreeMap, HashMap},
    time::{SystemTime, UNIX_EPOCH},
};

use alloy::{
    consensus::{
        Header, Receipt as ConsensusReceipt, ReceiptEnvelope, ReceiptWithBloom, Transaction as _,
        TxEnvelope, TxType, proofs,
    },
    eips::{Encodable2718, eip2718::Decodable2718},
    primitives::{Address, B256, Bytes, Log, TxKind, U256, logs_bloom},
};
use revm::{
    Context, ExecuteCommitEvm, ExecuteEvm, MainBuilder, MainContext,
    context::{BlockEnv, CfgEnv, TxEnv, result::ExecutionResult},
    database::{CacheDB, EmptyDB},
    database_interface::DatabaseRef,
    primitives::hardfork::SpecId,
    state::AccountInfo,
};
use tollgate_chain::{
    ChainLog, Error, LogFilter, Receipt, Result,
    accounts::DevAccount,
    contracts::{Revert, deployment_txs},
};

use crate::{BASE_FEE, BLOCK_GAS_LIMIT, DEV_ETH, DEV_TOKENS, DevnetConfig, journal};

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
    pub(crate) fn is_success(&self) -> bool {
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
pub(crate) struct Block {
    pub(crate) header: Header,
    pub(crate) hash: B256,
    pub(crate) tx: Option<B256>,
    /// Journal sequence number of the record that made this block.
    pub(crate) seq: u64,
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
pub(crate) struct Core {
    pub(crate) db: CacheDB<EmptyDB>,
    pub(crate) block_env: BlockEnv,
    pub(crate) chain_id: u64,
    pub(crate) blocks: Vec<Block>,
    pub(crate) txs: HashMap<B256, TxEntry>,
    pub(crate) queued: HashMap<Address, BTreeMap<u64, (TxEnvelope, B256)>>,
    /// Seconds added to the wall clock by time travel.
    pub(crate) time_offset: u64,
    /// Sequence number of the last journal record.
    pub(crate) seq: u64,
    pub(crate) journal: Option<journal::Writer>,
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Read access to the devnet's blocks and transactions, limited to what is durable.
pub(crate) struct CoreView<'a> {
    pub(crate) core: &'a mut Core,
    pub(crate) durable: u64,
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
    pub(crate) fn genesis(
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

    pub(crate) fn account(&self, address: Address) -> AccountInfo {
        self.db
            .basic_ref(address)
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    pub(crate) fn pending_nonce(&self, address: Address) -> u64 {
        let mut n = self.account(address).nonce;
        if let Some(q) = self.queued.get(&address) {
            while q.contains_key(&n) {
                n += 1;
            }
        }
        n
    }

    pub(crate) fn code(&self, address: Address) -> Bytes {
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

    pub(crate) fn latest_visible(&self, durable: u64) -> u64 {
        let mut n = self.blocks.len() - 1;
        while n > 0 && self.blocks[n].seq > durable {
            n -= 1;
        }
        n as u64
    }

    pub(crate) fn next_timestamp(&self) -> u64 {
        let last = self.blocks.last().expect("genesis").header.timestamp;
        // Saturating: `evm_increaseTime` may have set the offset to anything up to `u64::MAX`.
        last.max(now_secs().saturating_add(self.time_offset))
    }

    /// Builds an EVM over the state for the current block and runs `env`; `commit` keeps the
    /// changes, `call` relaxes what `eth_call` relaxes (nonce check, base fee).
    pub(crate) fn execute(
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

    pub(crate) fn set_block(&mut self, number: u64, timestamp: u64) {
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

    pub(crate) fn tx_env(envelope: &TxEnvelope, sender: Address) -> TxEnv {
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
    pub(crate) fn include(
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

    pub(crate) fn increase_time(&mut self, seconds: u64) {
        self.time_offset = self.time_offset.saturating_add(seconds);
        self.seq += 1;
        if let Some(j) = &self.journal {
            j.append(self.seq, &journal::Record::TimeAdvance { seconds });
        }
    }

    pub(crate) fn mine(&mut self) {
        let timestamp = self.next_timestamp();
        self.seq += 1;
        if let Some(j) = &self.journal {
            j.append(self.seq, &journal::Record::Mine { timestamp });
        }
        self.push_empty_block(timestamp);
    }

    pub(crate) fn push_empty_block(&mut self, timestamp: u64) {
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

    pub(crate) fn replay(&mut self, record: journal::Record) -> Result<()> {
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

    pub(crate) fn simulate(
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

    pub(crate) fn logs(&self, filter: &LogFilter, latest: u64) -> Vec<ChainLog> {
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

    pub(crate) fn receipt(&self, hash: &B256) -> Option<Receipt> {
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
