//! Sending: EIP-1559 fees, gas estimation, and the relayer nonces (a per-sender lock over a
//! cached next nonce) across signing and broadcast.

use std::{
    borrow::Cow,
    sync::{Arc, Mutex},
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
    errors::{is_already_known, is_method_missing, is_nonce_too_low},
    lock,
};
use crate::{Error, Result, TxRequest};

/// Priority fee used when the node does not implement `eth_maxPriorityFeePerGas` (1 gwei).
const FALLBACK_PRIORITY_FEE: u128 = 1_000_000_000;
/// How long a fee estimate is reused.
const FEE_TTL: Duration = Duration::from_secs(1);
/// Blocks whose tips `eth_feeHistory` is asked for.
const FEE_HISTORY_BLOCKS: u64 = 5;
/// The percentile of each block's tips asked for (its median).
const TIP_PERCENTILE: f64 = 50.0;

/// EIP-1559 fees for the next transactions.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fees {
    /// The next block's base fee.
    pub(super) base_fee: u128,
    pub(super) max_fee_per_gas: u128,
    pub(super) max_priority_fee_per_gas: u128,
}

/// The median of the blocks' median tips (`eth_feeHistory`'s `reward`), ignoring blocks that
/// paid none (empty blocks); `None` when none paid any.
fn median_tip(rewards: Option<&[Vec<u128>]>) -> Option<u128> {
    let mut tips: Vec<u128> = rewards?
        .iter()
        .filter_map(|r| r.first().copied())
        .filter(|t| *t > 0)
        .collect();
    tips.sort_unstable();
    tips.get(tips.len() / 2).copied()
}

/// Wei per gas as gwei, for messages (integer arithmetic: `1.5 gwei`, `0.000000007 gwei`).
pub(super) fn gwei(wei: u128) -> String {
    let (whole, frac) = (wei / 1_000_000_000, wei % 1_000_000_000);
    if frac == 0 {
        return format!("{whole} gwei");
    }
    let frac = format!("{frac:09}");
    format!("{whole}.{} gwei", frac.trim_end_matches('0'))
}

/// A sender's next nonce, when known; guarded by the sender's send lock.
pub(super) type NonceSlot = Arc<tokio::sync::Mutex<Option<u64>>>;

/// Most transactions remembered for re-pricing; past it the oldest are forgotten (they can
/// still be waited for, only not re-priced).
const SENT_MEMORY: usize = 4096;
/// A new version of a transaction must offer at least this much more (per mille) in both fees:
/// nodes refuse a replacement that does not (geth: 10 %).
const BUMP_PER_MILLE: u128 = 1_125;

/// A transaction of ours not yet seen mined: what is needed to send it again at a higher fee,
/// and every version sent (the first is the hash [`crate::Chain::send`] returned).
#[derive(Debug)]
pub(super) struct Sent {
    from: Address,
    /// The latest version, nonce included.
    tx: TxEip1559,
    /// Every version's hash, oldest first.
    pub(super) hashes: Vec<B256>,
    /// When the latest version was broadcast.
    at: Instant,
    /// Whether re-pricing is over: a version was mined (the nonce is used) or the fee cap is
    /// reached.
    settled: bool,
}

pub(super) type SentSlot = Arc<Mutex<Sent>>;

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
        let unsigned_for_record = unsigned.clone();
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
                let mut signed = unsigned_for_record;
                signed.nonce = used;
                self.remember_sent(tx.from, signed, hash);
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

    /// EIP-1559 fees from the node, cached briefly ([`FEE_TTL`]): the next block's base fee and
    /// the tip paid lately, from one `eth_feeHistory` (the median of the last
    /// [`FEE_HISTORY_BLOCKS`] blocks' median tips; `eth_maxPriorityFeePerGas` when those blocks
    /// paid none, and 1 gwei when the node has neither), offering twice the base fee plus the tip
    /// so that a transaction survives a few full blocks' rise. With
    /// [`RpcOptions::max_fee_per_gas`](super::RpcOptions) the offer never exceeds the cap, and
    /// a base fee above it is [`Error::FeeCapExceeded`]: nothing would be mined at that price.
    pub(super) async fn fees(&self) -> Result<Fees> {
        let cached = || {
            lock(&self.fees)
                .filter(|(at, _)| at.elapsed() < FEE_TTL)
                .map(|(_, fees)| fees)
        };
        if let Some(fees) = cached() {
            return Ok(fees);
        }
        // One reading at a time: a request that waited for another's takes its answer.
        let asked = Instant::now();
        let mut reading = self.fees_reading.lock().await;
        if let Some(fees) = cached() {
            return Ok(fees);
        }
        // Tried and failed while this request waited: the same answer, without asking again.
        if let Some((at, Some(error))) = &*reading
            && *at >= asked
        {
            return Err(error.again());
        }
        let read = self.read_fees().await;
        *reading = Some((Instant::now(), read.as_ref().err().map(Error::again)));
        read
    }

    /// [`Self::fees`] read from the node, and cached.
    async fn read_fees(&self) -> Result<Fees> {
        let history = self
            .request(
                "eth_feeHistory",
                self.provider.get_fee_history(
                    FEE_HISTORY_BLOCKS,
                    BlockNumberOrTag::Latest,
                    &[TIP_PERCENTILE],
                ),
            )
            .await;
        let (base_fee, tip) = match history {
            Ok(h) => match h.next_block_base_fee().filter(|b| *b > 0) {
                Some(base) => (base, median_tip(h.reward.as_deref())),
                None => (self.gas_price().await?, None),
            },
            // A node without `eth_feeHistory`: the latest block's base fee (or the gas price).
            Err(Error::Rpc { code, ref message }) if is_method_missing(code, message) => {
                match self.latest_header_fees().await?.1 {
                    Some(b) => (u128::from(b), None),
                    None => (self.gas_price().await?, None),
                }
            }
            Err(e) => return Err(e),
        };
        let tip = match tip {
            Some(t) => t,
            None => match self
                .request(
                    "eth_maxPriorityFeePerGas",
                    self.provider.get_max_priority_fee_per_gas(),
                )
                .await
            {
                Ok(p) => p,
                Err(Error::Rpc { .. }) => FALLBACK_PRIORITY_FEE,
                Err(e) => return Err(e),
            },
        };
        let mut fees = Fees {
            base_fee,
            max_fee_per_gas: base_fee.saturating_mul(2).saturating_add(tip),
            max_priority_fee_per_gas: tip,
        };
        if let Some(cap) = self.options.max_fee_per_gas {
            if base_fee > cap {
                let wei = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
                return Err(Error::FeeCapExceeded {
                    base_fee: wei(base_fee),
                    cap: wei(cap),
                });
            }
            fees.max_fee_per_gas = fees.max_fee_per_gas.min(cap);
            fees.max_priority_fee_per_gas = tip.min(cap - base_fee);
        }
        *lock(&self.fees) = Some((Instant::now(), fees));
        Ok(fees)
    }

    async fn gas_price(&self) -> Result<u128> {
        self.request("eth_gasPrice", self.provider.get_gas_price())
            .await
    }

    fn remember_sent(&self, from: Address, tx: TxEip1559, hash: B256) {
        let mut sent = lock(&self.sent);
        if sent.len() >= SENT_MEMORY {
            // Forget the older half (a map keyed by hash keeps no order: by age of broadcast).
            let mut ages: Vec<Instant> = sent.values().map(|s| lock(s).at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            sent.retain(|_, s| lock(s).at > cut);
        }
        sent.insert(
            hash,
            Arc::new(Mutex::new(Sent {
                from,
                tx,
                hashes: vec![hash],
                at: Instant::now(),
                settled: false,
            })),
        );
    }

    /// Every version sent of the transaction `hash` (itself first when it is not ours).
    pub(super) fn versions(&self, hash: B256) -> Vec<B256> {
        match lock(&self.sent).get(&hash) {
            Some(s) => lock(s).hashes.clone(),
            None => vec![hash],
        }
    }

    /// Notes that a version of the transaction `hash` is mined: it is not re-priced.
    pub(super) fn mark_mined(&self, hash: B256) {
        if let Some(slot) = lock(&self.sent).get(&hash) {
            lock(slot).settled = true;
        }
    }

    /// Forgets the transaction `hash` and its versions (one of them is mined deep enough).
    pub(super) fn forget_sent(&self, hash: B256) {
        let mut sent = lock(&self.sent);
        if let Some(slot) = sent.get(&hash).cloned() {
            for h in &lock(&slot).hashes {
                sent.remove(h);
            }
        }
    }

    /// While the transaction `hash` waits to be mined: if it has waited `patience` since its
    /// latest version went out and the next block's base fee has risen above what that version
    /// offers (priced out: no block will take it until the base fee falls back), sends a new
    /// version with the same nonce and fees bumped by at least [`BUMP_PER_MILLE`] (and at least
    /// what the market asks now), never above the fee cap. Whichever version is mined, the nonce
    /// is used once: the others can never be. Errors are logged; the wait goes on.
    pub(super) async fn reprice_if_priced_out(&self, hash: B256, patience: Duration) {
        let Some(slot) = lock(&self.sent).get(&hash).cloned() else {
            return;
        };
        let (from, mut tx) = {
            let s = lock(&slot);
            if s.settled || s.at.elapsed() < patience {
                return;
            }
            (s.from, s.tx.clone())
        };
        // Fees read afresh: the cached ones may be what priced it out.
        *lock(&self.fees) = None;
        let market = match self.fees().await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(%hash, error = %e, "cannot read the fees to re-price a waiting transaction");
                lock(&slot).at = Instant::now();
                return;
            }
        };
        if market.base_fee.saturating_add(1) <= tx.max_fee_per_gas {
            // Still includable: it waits for room, not for price.
            return;
        }
        let bump = |old: u128| old.saturating_mul(BUMP_PER_MILLE).div_ceil(1_000);
        let mut max_fee = market.max_fee_per_gas.max(bump(tx.max_fee_per_gas));
        let mut tip = market
            .max_priority_fee_per_gas
            .max(bump(tx.max_priority_fee_per_gas));
        if let Some(cap) = self.options.max_fee_per_gas {
            max_fee = max_fee.min(cap);
        }
        tip = tip.min(max_fee);
        if max_fee < bump(tx.max_fee_per_gas) {
            tracing::warn!(
                %hash, nonce = tx.nonce, base_fee = %gwei(market.base_fee),
                offered = %gwei(tx.max_fee_per_gas), cap = %gwei(max_fee),
                "a waiting transaction is priced out and the fee cap (max_fee_gwei) leaves no room to re-price it: it waits for the base fee to fall"
            );
            lock(&slot).settled = true;
            return;
        }
        let nonce = tx.nonce;
        let previous = tx.max_fee_per_gas;
        tx.max_fee_per_gas = max_fee;
        tx.max_priority_fee_per_gas = tip;
        match self.broadcast(from, tx.clone(), nonce).await {
            Ok(new_hash) => {
                tracing::warn!(
                    %hash, %new_hash, %from, nonce, base_fee = %gwei(market.base_fee),
                    from_fee = %gwei(previous), to_fee = %gwei(max_fee),
                    "a base-fee rise priced out a waiting transaction: sent again with the same nonce at a higher fee"
                );
                let mut s = lock(&slot);
                s.tx = tx;
                s.hashes.push(new_hash);
                s.at = Instant::now();
                drop(s);
                lock(&self.sent).insert(new_hash, slot);
            }
            Err(Error::Rejected(m)) if is_nonce_too_low(&m) => {
                // A version is mined (or about to be): nothing more to re-price.
                lock(&slot).settled = true;
            }
            Err(e) => {
                tracing::warn!(%hash, nonce, error = %e, "re-pricing a waiting transaction failed; the wait goes on");
                let mut s = lock(&slot);
                // "underpriced": the next try bumps from what this one offered.
                s.tx = tx;
                s.at = Instant::now();
            }
        }
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
