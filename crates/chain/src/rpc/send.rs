//! Sending: EIP-1559 fees, gas estimation, and the relayer nonces (a per-sender lock over a
//! cached next nonce) across signing and broadcast.

use std::{
    borrow::Cow,
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::{
    consensus::TxEip1559,
    eips::{BlockNumberOrTag, Encodable2718},
    network::TransactionBuilder,
    primitives::{Address, B256, Bytes, TxKind},
    providers::Provider,
    rpc::types::TransactionRequest,
};

use super::{
    RpcChain,
    errors::{is_already_known, is_nonce_too_low},
    lock,
};
use crate::{Error, Result, TxRequest};

/// Priority fee used when the node does not implement `eth_maxPriorityFeePerGas` (1 gwei).
const FALLBACK_PRIORITY_FEE: u128 = 1_000_000_000;
/// How long a fee estimate is reused.
const FEE_TTL: Duration = Duration::from_secs(1);

/// EIP-1559 fees for the next transactions.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fees {
    max_fee_per_gas: u128,
    max_priority_fee_per_gas: u128,
}

/// A sender's next nonce, when known; guarded by the sender's send lock.
pub(super) type NonceSlot = Arc<tokio::sync::Mutex<Option<u64>>>;

impl RpcChain {
    /// Signs and broadcasts `tx` ([`crate::Chain::send`]): gas estimated unless given, the
    /// sender's next nonce taken under its lock, a stale nonce retried once.
    pub(super) async fn send_transaction(&self, tx: TxRequest) -> Result<B256> {
        if !self.wallet.contains(&tx.from) {
            return Err(Error::UnknownSigner(tx.from));
        }
        let gas = match tx.gas {
            Some(g) => g,
            None => self.estimate_gas(&tx).await?,
        };
        let fees = self.fees().await?;
        let unsigned = TxEip1559 {
            chain_id: self.chain_id,
            nonce: 0,
            gas_limit: gas,
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            to: tx.to.map_or(TxKind::Create, TxKind::Call),
            value: tx.value,
            input: tx.data,
            access_list: Default::default(),
        };

        let slot = self.nonce_slot(tx.from);
        let mut next = slot.lock().await;
        let nonce = match *next {
            Some(n) => n,
            None => self.pending_count(tx.from).await?,
        };
        let result = match self.broadcast(tx.from, unsigned.clone(), nonce).await {
            Err(Error::Rejected(m)) if is_nonce_too_low(&m) => {
                let fresh = self.pending_count(tx.from).await?;
                tracing::debug!(from = %tx.from, stale = nonce, fresh, "nonce too low; retrying with a fresh nonce");
                self.broadcast(tx.from, unsigned, fresh)
                    .await
                    .map(|h| (h, fresh))
            }
            other => other.map(|h| (h, nonce)),
        };
        match result {
            Ok((hash, used)) => {
                *next = Some(used + 1);
                Ok(hash)
            }
            Err(e) => {
                // The cached nonce or fees may be what the node refused: read both afresh next time.
                *next = None;
                *lock(&self.fees) = None;
                Err(e)
            }
        }
    }

    /// The latest block's timestamp and base fee.
    pub(super) async fn latest_header_fees(&self) -> Result<(u64, Option<u64>)> {
        let block = self
            .request(
                "eth_getBlockByNumber",
                self.provider.get_block_by_number(BlockNumberOrTag::Latest),
            )
            .await?
            .ok_or_else(|| Error::Unavailable("the node has no latest block".into()))?;
        self.observe_block(block.header.number, block.header.timestamp);
        Ok((block.header.timestamp, block.header.base_fee_per_gas))
    }

    /// EIP-1559 fees: twice the latest base fee plus the node's suggested tip; cached briefly.
    async fn fees(&self) -> Result<Fees> {
        if let Some((at, fees)) = *lock(&self.fees)
            && at.elapsed() < FEE_TTL
        {
            return Ok(fees);
        }
        let priority = match self
            .request(
                "eth_maxPriorityFeePerGas",
                self.provider.get_max_priority_fee_per_gas(),
            )
            .await
        {
            Ok(p) => p,
            Err(Error::Rpc { .. }) => FALLBACK_PRIORITY_FEE,
            Err(e) => return Err(e),
        };
        let (_, base_fee) = self.latest_header_fees().await?;
        let base_fee = match base_fee {
            Some(b) => u128::from(b),
            // A node without EIP-1559 blocks: its gas price stands in for the base fee.
            None => {
                self.request("eth_gasPrice", self.provider.get_gas_price())
                    .await?
            }
        };
        let fees = Fees {
            max_fee_per_gas: base_fee.saturating_mul(2).saturating_add(priority),
            max_priority_fee_per_gas: priority,
        };
        *lock(&self.fees) = Some((Instant::now(), fees));
        Ok(fees)
    }

    fn nonce_slot(&self, from: Address) -> NonceSlot {
        lock(&self.nonces).entry(from).or_default().clone()
    }

    /// Drops every cached next nonce not in use by a send right now.
    pub(super) fn forget_nonces(&self) {
        for slot in lock(&self.nonces).values() {
            if let Ok(mut next) = slot.try_lock() {
                *next = None;
            }
        }
    }

    /// Drops the cached next nonce of `from` (waiting for a send of it in progress).
    pub(super) fn forget_nonce_of(&self, from: Address) {
        let slot = self.nonce_slot(from);
        if let Ok(mut next) = slot.try_lock() {
            *next = None;
            return;
        }
        // A send in progress holds the slot: the next one after it reads afresh.
        tokio::spawn(async move {
            *slot.lock().await = None;
        });
    }

    /// The account's transaction count, pending transactions included: its next nonce.
    pub(super) async fn pending_count(&self, account: Address) -> Result<u64> {
        self.request(
            "eth_getTransactionCount",
            self.provider.get_transaction_count(account).pending(),
        )
        .await
    }

    /// What sending `tx` would cost at most: the gas limit [`crate::Chain::send`] would give it
    /// (the node's estimate with the margin) and the max fee per gas it would offer. A call that
    /// would revert is [`Error::Revert`].
    pub async fn gas_cost(&self, tx: &TxRequest) -> Result<(u64, u128)> {
        let gas = match tx.gas {
            Some(g) => g,
            None => self.estimate_gas(tx).await?,
        };
        Ok((gas, self.fees().await?.max_fee_per_gas))
    }

    async fn estimate_gas(&self, tx: &TxRequest) -> Result<u64> {
        let mut request = TransactionRequest::default()
            .with_from(tx.from)
            .with_input(tx.data.clone())
            .with_value(tx.value);
        request.to = Some(tx.to.map_or(TxKind::Create, TxKind::Call));
        let estimate = self
            .request("eth_estimateGas", self.provider.estimate_gas(request))
            .await?;
        Ok(estimate.saturating_mul(self.options.gas_multiplier_percent) / 100)
    }

    /// Signs `unsigned` (with `nonce`) and broadcasts it; `Ok(Err(e))` is a node refusal.
    async fn broadcast(&self, from: Address, mut unsigned: TxEip1559, nonce: u64) -> Result<B256> {
        unsigned.nonce = nonce;
        let envelope = self.wallet.sign(from, unsigned)?;
        let hash = *envelope.tx_hash();
        let raw = envelope.encoded_2718();
        let result: Result<B256> = self
            .request(
                "eth_sendRawTransaction",
                self.provider
                    .raw_request(Cow::Borrowed("eth_sendRawTransaction"), (Bytes::from(raw),)),
            )
            .await;
        match result {
            Ok(returned) => {
                if returned != hash {
                    tracing::warn!(%hash, %returned, "the node reported another hash for our transaction");
                }
                Ok(hash)
            }
            Err(Error::Rejected(m)) if is_already_known(&m) => Ok(hash),
            Err(e) => Err(e),
        }
    }
}
