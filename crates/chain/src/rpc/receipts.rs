//! Receipts: reading them (with their block's timestamp, cached), and waiting for one to reach
//! the requested depth.

use std::time::Duration;

use alloy::{primitives::B256, providers::Provider, rpc::types::TransactionReceipt};

use super::{RpcChain, lock};
use crate::{Chain, Confirmation, Error, Receipt, Result, WaitOptions};

/// Most block timestamps remembered (by block hash) before the cache is cleared.
const TIMESTAMP_CACHE: usize = 4096;

/// The longest pause between receipt polls that a slow chain's block time can bring.
const MAX_POLL_CAP: Duration = Duration::from_secs(1);

/// Blocks after which the block-time baseline starts again (so it follows the chain's recent
/// pace).
const BLOCK_CLOCK_SPAN: u64 = 10_000;

/// Two observations of (block number, timestamp): the baseline and the latest.
#[derive(Clone, Copy, Debug)]
pub(super) struct BlockClock {
    first: (u64, u64),
    last: (u64, u64),
}

impl RpcChain {
    /// Waits for `tx_hash` to be `opts.confirmations` deep ([`Chain::wait`]).
    pub(super) async fn wait_confirmed(
        &self,
        tx_hash: B256,
        opts: WaitOptions,
    ) -> Result<Confirmation> {
        let started = std::time::Instant::now();
        let poll = async {
            // Most nodes (anvil, L2 sequencers) include a transaction within milliseconds: poll
            // at once, then, when it is not there yet, around when transactions recently took
            // to reach the depth asked, then back off from 2 ms to the configured interval, or to
            // an eighth of the chain's block time when that is longer. Every poll is a billed
            // call on a hosted node and load on the node: on a 2 s chain this polls about 4
            // times per settlement, not ~45.
            let cap = self.poll_cap();
            let mut delay = Duration::from_millis(2).min(cap);
            let mut first = true;
            let mut failed_polls = 0u32;
            loop {
                match self.confirmed(tx_hash, opts.confirmations).await {
                    Ok(Some(receipt)) => return receipt,
                    Ok(None) => {}
                    // A poll the node could not answer (unreachable, or any error of its own,
                    // such as an internal error on `eth_getTransactionReceipt`) says nothing of
                    // the transaction, which was sent and may be mined meanwhile: keep polling
                    // to the timeout, then answer `Pending` (which the caller records and a
                    // later look resolves), never an error (which would report money that moved
                    // as not moved).
                    Err(e) => {
                        failed_polls += 1;
                        if failed_polls == 1 {
                            tracing::warn!(%tx_hash, error = %e, "receipt poll failed; still waiting");
                        } else {
                            tracing::debug!(%tx_hash, error = %e, failed_polls, "receipt poll failed");
                        }
                    }
                }
                // Priced out by a base-fee rise while waiting: sent again at a higher fee.
                self.reprice_if_priced_out(tx_hash, self.reprice_patience())
                    .await;
                let pause = if first {
                    first = false;
                    self.usual_wait(opts.confirmations)
                        .map_or(delay, |usual| {
                            (usual * 3 / 4).saturating_sub(started.elapsed())
                        })
                        .max(delay)
                } else {
                    let d = delay;
                    delay = (delay * 2).min(cap);
                    d
                };
                tokio::time::sleep(pause).await;
            }
        };
        let outcome = tokio::time::timeout(opts.timeout, poll).await;
        if outcome.is_ok() {
            self.note_wait(opts.confirmations, started.elapsed());
            self.forget_sent(tx_hash);
        }
        match outcome {
            Ok(receipt) => Ok(Confirmation::Confirmed(receipt)),
            Err(_) => {
                // Perhaps the node dropped it: then the cached next nonce would leave a gap that
                // stalls every later transaction of the sender. Read nonces afresh (the node's
                // pending count, which includes what it still holds) for the next sends.
                self.forget_nonces();
                Ok(Confirmation::Pending { tx_hash })
            }
        }
    }

    /// How long transactions waited for `confirmations` recently (a moving average), if any
    /// did.
    fn usual_wait(&self, confirmations: u64) -> Option<Duration> {
        lock(&self.waits)
            .iter()
            .find(|(depth, _)| *depth == confirmations)
            .map(|(_, usual)| *usual)
    }

    /// Folds a wait that reached `confirmations` after `took` into the moving average.
    fn note_wait(&self, confirmations: u64, took: Duration) {
        let mut waits = lock(&self.waits);
        match waits.iter_mut().find(|(depth, _)| *depth == confirmations) {
            Some((_, usual)) => *usual = (*usual * 4 + took) / 5,
            None => waits.push((confirmations, took)),
        }
    }

    /// How long a waiting transaction's latest version is given before it is checked for being
    /// priced out: two blocks, at least 2 s.
    fn reprice_patience(&self) -> Duration {
        self.block_time()
            .map_or(Duration::ZERO, |b| b * 2)
            .max(Duration::from_secs(2))
    }

    /// The longest pause between two receipt polls.
    fn poll_cap(&self) -> Duration {
        let eighth = self.block_time().map_or(Duration::ZERO, |b| b / 8);
        self.options.poll_interval.max(eighth.min(MAX_POLL_CAP))
    }

    /// Notes the latest block's number and timestamp (read with the fees).
    pub(super) fn observe_block(&self, number: u64, timestamp: u64) {
        let mut clock = lock(&self.block_clock);
        match *clock {
            // A baseline far back (or a node of another history): start again from here.
            Some(BlockClock { first, .. })
                if number < first.0 || number - first.0 > BLOCK_CLOCK_SPAN =>
            {
                *clock = Some(BlockClock {
                    first: (number, timestamp),
                    last: (number, timestamp),
                })
            }
            Some(ref mut c) => c.last = (number, timestamp),
            None => {
                *clock = Some(BlockClock {
                    first: (number, timestamp),
                    last: (number, timestamp),
                })
            }
        }
    }

    /// The chain's mean block time over the blocks observed, once at least 8 apart.
    pub(super) fn block_time(&self) -> Option<Duration> {
        let c = (*lock(&self.block_clock))?;
        let blocks = c.last.0.checked_sub(c.first.0).filter(|b| *b >= 8)?;
        let secs = c.last.1.saturating_sub(c.first.1);
        Some(Duration::from_millis(secs.saturating_mul(1000) / blocks))
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
        self.observe_block(receipt.block_number, receipt.block_timestamp);
        // Mined: no version of it is re-priced any more (a reorg that drops it is waited for).
        self.mark_mined(tx_hash);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Wallet, rpc::RpcOptions};

    #[test]
    fn receipt_polls_follow_the_block_time() {
        let chain = RpcChain::connect_lazy(
            "http://127.0.0.1:1",
            1,
            Wallet::default(),
            RpcOptions::default(),
        )
        .unwrap();
        let ms = Duration::from_millis;
        assert_eq!(
            chain.poll_cap(),
            ms(50),
            "nothing observed: the configured interval"
        );
        chain.observe_block(100, 1_000);
        chain.observe_block(104, 1_008);
        assert_eq!(chain.block_time(), None, "fewer than 8 blocks apart");
        chain.observe_block(110, 1_020);
        assert_eq!(chain.block_time(), Some(Duration::from_secs(2)));
        assert_eq!(
            chain.poll_cap(),
            ms(250),
            "a 2 s chain: an eighth of a block"
        );
        chain.observe_block(150, 1_500);
        assert_eq!(
            chain.poll_cap(),
            Duration::from_secs(1),
            "12 s blocks: at most 1 s"
        );
        // Far past the baseline: it starts again, and a fast chain polls at the interval.
        chain.observe_block(20_000, 5_000);
        chain.observe_block(20_100, 5_001);
        assert_eq!(chain.poll_cap(), ms(50));
    }
}
