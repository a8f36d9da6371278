//! Receipts: reading them (with their block's timestamp, cached), and waiting for one to reach
//! the requested depth.

use std::time::Duration;

use alloy::{primitives::B256, providers::Provider, rpc::types::TransactionReceipt};

use super::{RpcChain, lock};
use crate::{Chain, Confirmation, Error, Receipt, Result, WaitOptions};

/// Most block timestamps remembered (by block hash) before the cache is cleared.
const TIMESTAMP_CACHE: usize = 4096;

impl RpcChain {
    /// Waits for `tx_hash` to be `opts.confirmations` deep ([`Chain::wait`]).
    pub(super) async fn wait_confirmed(
        &self,
        tx_hash: B256,
        opts: WaitOptions,
    ) -> Result<Confirmation> {
        let poll = async {
            // Most nodes (anvil, L2 sequencers) include a transaction within milliseconds: poll
            // soon, then back off to the configured interval.
            let mut delay = Duration::from_millis(2).min(self.options.poll_interval);
            loop {
                match self.confirmed(tx_hash, opts.confirmations).await {
                    Ok(Some(receipt)) => return Ok(receipt),
                    Ok(None) => {}
                    // A node that is briefly unreachable is not a failed wait: keep polling.
                    Err(Error::Unavailable(e)) => {
                        tracing::debug!(%tx_hash, error = %e, "receipt poll failed")
                    }
                    Err(e) => return Err(e),
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(self.options.poll_interval);
            }
        };
        match tokio::time::timeout(opts.timeout, poll).await {
            Ok(Ok(receipt)) => Ok(Confirmation::Confirmed(receipt)),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                // Perhaps the node dropped it: then the cached next nonce would leave a gap that
                // stalls every later transaction of the sender. Read nonces afresh (the node's
                // pending count, which includes what it still holds) for the next sends.
                self.forget_nonces();
                Ok(Confirmation::Pending { tx_hash })
            }
        }
    }

    /// The timestamp of the block `hash` (cached: a block's timestamp never changes).
    async fn block_timestamp(&self, hash: B256) -> Result<u64> {
        if let Some(t) = lock(&self.timestamps).get(&hash) {
            return Ok(*t);
        }
        let header = self
            .request("eth_getBlockByHash", self.provider.get_header_by_hash(hash))
            .await?
            .ok_or_else(|| Error::Unavailable(format!("block {hash} is unknown to the node")))?;
        self.remember_timestamp(hash, header.timestamp);
        Ok(header.timestamp)
    }

    fn remember_timestamp(&self, hash: B256, timestamp: u64) {
        let mut cache = lock(&self.timestamps);
        if cache.len() >= TIMESTAMP_CACHE {
            cache.clear();
        }
        cache.insert(hash, timestamp);
    }

    /// Our receipt from the node's, `None` while it is not mined.
    pub(super) async fn convert_receipt(&self, r: TransactionReceipt) -> Result<Option<Receipt>> {
        // A receipt without a block is not mined (some nodes answer for pending transactions).
        let (Some(block_number), Some(block_hash)) = (r.block_number, r.block_hash) else {
            return Ok(None);
        };
        let logs = r.inner.logs();
        let block_timestamp = match logs.iter().find_map(|l| l.block_timestamp) {
            Some(t) => t,
            None => self.block_timestamp(block_hash).await?,
        };
        Ok(Some(Receipt {
            tx_hash: r.transaction_hash,
            block_number,
            block_hash,
            block_timestamp,
            from: r.from,
            to: r.to,
            contract_address: r.contract_address,
            success: r.status(),
            gas_used: r.gas_used,
            effective_gas_price: r.effective_gas_price,
            logs: logs.iter().map(|l| l.inner.clone()).collect(),
        }))
    }

    /// One wait step: the receipt when it has the requested depth and is still in the same block.
    async fn confirmed(&self, tx_hash: B256, confirmations: u64) -> Result<Option<Receipt>> {
        let Some(receipt) = self.receipt(tx_hash).await? else {
            return Ok(None);
        };
        if confirmations <= 1 {
            // Included is deep enough.
            return Ok(Some(receipt));
        }
        let latest = self.block_number().await?;
        if latest
            .saturating_add(1)
            .saturating_sub(receipt.block_number)
            < confirmations.max(1)
        {
            return Ok(None);
        }
        // The depth is reached: make sure the transaction was not reorged out meanwhile.
        match self.receipt(tx_hash).await? {
            Some(again) if again.block_hash == receipt.block_hash => Ok(Some(again)),
            _ => Ok(None),
        }
    }
}
