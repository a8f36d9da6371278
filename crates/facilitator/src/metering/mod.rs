//! Metered usage: the spec's `deductAllowance` and the on-chain settlement of what it deducts.
//!
//! - `POST /subscriptions/{id}/usage` (the plan owner's API key) deducts an amount from the
//!   subscription's overage allowance for its current cycle. The cap check is one conditional
//!   update in the store ([`crate::store::Store::deduct_allowance`]), so concurrent deductions
//!   never cross the cap: the one that would gets `402 AllowanceExhausted`. Before refusing, the
//!   facilitator reads the subscription from the chain once more (the subscriber may have raised
//!   the cap, or a new cycle begun). The subscription's on-chain state (plan, cycle, cap, paid
//!   period) is cached for [`HEAD_TTL`] and dropped when the facilitator renews it or relays a
//!   raise.
//! - `GET /subscriptions/{id}/usage` reads the ledger of the current cycle.
//! - `POST /subscriptions/{id}/allowance` relays the subscriber's signed `raiseAllowanceWithSig`.
//!
//! **Settlement.** Deductions are durable in the ledger at once; the money moves on-chain in
//! batches, by `Subscriptions.chargeOverage(id, cycle, amount, reference)` from the plan's
//! operator (the relayer that created it). The keeper's run bills every cycle whose unbilled usage
//! reaches [`crate::Settings::overage_batch_amount`] or whose oldest unbilled deduction is older
//! than [`crate::Settings::overage_batch_interval`], and, before it renews a subscription, closes
//! the ending cycle (no deduction lands in it afterwards) and bills the rest of it. The contract
//! never lets charges exceed the cap; the ledger never deducts beyond it either.
//!
//! **Crash safety.** A charge is written (pending, with its reference) and its amount counted as
//! billed in one transaction before it is sent; after a crash the pending charge is sent again
//! with the same reference, which the contract applies at most once (`ChargeAlreadyApplied` means
//! it was). A charge that reverts for good (the subscriber cannot pay) is recorded as unpaid,
//! never dropped.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, U256, keccak256},
    sol_types::{SolCall, SolEvent},
};
use tollgate_chain::{
    Confirmation, LogFilter, TxRequest, WaitOptions,
    authorization::{Action, ActionKind, recover, subscriptions_domain},
    contracts,
};
use tollgate_protocol::{
    AllowanceUsage, Amount, ApiErrorCode, DeductRequest, RaiseAllowanceRequest, SubscriptionView,
};

use crate::{
    error::{Error, Relayed, Result},
    facilitator::{Network, unix_now},
    store::{AllowanceCycle, DeductOutcome, Deduction, MAX_METERED, PlanOwner},
    subscriptions::Subscriptions,
};

mod billing;

pub(crate) use billing::MeteringError;
pub use billing::{MeteringReport, charge_reference};

/// How long a subscription's on-chain state is reused for deductions without reading it again.
pub const HEAD_TTL: Duration = Duration::from_secs(2);
/// Default [`crate::Settings::overage_batch_interval`].
pub const DEFAULT_BATCH_INTERVAL: Duration = Duration::from_secs(60);
/// Default [`crate::Settings::overage_batch_amount`]: 1.00 of a 6-decimal token.
pub const DEFAULT_BATCH_AMOUNT: u64 = 1_000_000;
/// Longest idempotency key accepted, in bytes.
const MAX_KEY: usize = 200;
/// A subscription as the chain last showed it, with the plan's owner in this facilitator.
#[derive(Clone, Debug)]
pub(crate) struct Head {
    state: u8,
    cycle: u32,
    cap: U256,
    paid_through: u64,
    owner: Option<PlanOwner>,
    read_at: Instant,
    /// Read from the chain by this call (not from the cache).
    fresh: bool,
}

/// The cache of [`Head`]s by network, then id (looked up without allocating).
#[derive(Debug, Default)]
pub(crate) struct Heads(Mutex<HashMap<String, HashMap<B256, Head>>>);

impl Heads {
    fn get(&self, network: &str, id: B256, max_age: Duration) -> Option<Head> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(network)?
            .get(&id)
            .filter(|h| h.read_at.elapsed() < max_age)
            .cloned()
    }

    fn put(&self, network: &str, id: B256, head: Head) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let heads = map.entry(network.to_owned()).or_default();
        if heads.len() >= 100_000 {
            heads.retain(|_, h| h.read_at.elapsed() < HEAD_TTL);
        }
        heads.insert(id, head);
    }

    /// Drops `id`'s entry (after a renewal or a raise).
    pub(crate) fn forget(&self, network: &str, id: B256) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(heads) = map.get_mut(network) {
            heads.remove(&id);
        }
    }
}

fn usage(id: B256, row: &AllowanceCycle) -> AllowanceUsage {
    AllowanceUsage {
        subscription_id: id,
        cycle: row.cycle,
        cap: Amount::from_units(row.cap),
        used: Amount::from_units(row.used),
        remaining: Amount::from_units(row.remaining()),
        charged: Amount::from_units(row.charged),
        // Saturating like `remaining()`: the ledger keeps charged + unpaid <= used, and a row
        // that does not is answered, never a panic.
        unsettled: Amount::from_units(
            row.used
                .saturating_sub(row.charged)
                .saturating_sub(row.unpaid),
        ),
        unpaid: Amount::from_units(row.unpaid),
    }
}

fn not_active(id: B256, why: &'static str) -> Error {
    Error::SubscriptionNotActive { id, why }
}

impl Subscriptions {
    /// The subscription's head, from the cache when younger than `max_age`, else from the chain
    /// (then `fresh` is set); `None` for an unknown id.
    async fn head(
        &self,
        net: &Network,
        subs: Address,
        id: B256,
        max_age: Duration,
    ) -> Result<Option<Head>> {
        let name = &net.spec.name;
        if let Some(h) = self.heads.get(name, id, max_age) {
            return Ok(Some(Head { fresh: false, ..h }));
        }
        let chain = net.chain.as_ref();
        let s = contracts::read(
            chain,
            subs,
            &contracts::Subscriptions::subscriptionsCall { id },
        )
        .await?;
        if s.state == 0 {
            return Ok(None);
        }
        let owner = self.core.store().plan_owner(name, s.planId).await?;
        let head = Head {
            state: s.state,
            cycle: s.cycle,
            cap: s.maxOverage,
            paid_through: s.paidThrough,
            owner,
            read_at: Instant::now(),
            fresh: true,
        };
        self.heads.put(name, id, head.clone());
        Ok(Some(head))
    }

    /// The head of a subscription whose plan `provider` owns: 404 unknown, 403 someone else's.
    async fn owned_head(
        &self,
        net: &Network,
        subs: Address,
        id: B256,
        provider: Address,
        max_age: Duration,
    ) -> Result<Head> {
        let head = self
            .head(net, subs, id, max_age)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no subscription {id}")))?;
        if head.owner.as_ref().map(|o| o.provider) != Some(provider) {
            return Err(Error::Forbidden(
                "this subscription is not to a plan of this API key's provider".into(),
            ));
        }
        Ok(head)
    }

    /// The spec's `deductAllowance`, for `provider` (see [`crate::metering`]).
    pub(crate) async fn deduct_allowance(
        &self,
        provider: Address,
        id: B256,
        req: &DeductRequest,
    ) -> Result<AllowanceUsage> {
        let amount = req.amount.get();
        if amount.is_zero() || amount > U256::from(MAX_METERED) {
            return Err(Error::invalid(
                ApiErrorCode::InvalidAmount,
                format!("amount: from 1 to {MAX_METERED} (the token's smallest unit)"),
            ));
        }
        if let Some(key) = &req.idempotency_key
            && (key.is_empty() || key.len() > MAX_KEY)
        {
            return Err(Error::InvalidField(format!(
                "idempotencyKey: 1 to {MAX_KEY} bytes"
            )));
        }
        let (net, subs) = self.subscriptions_network(req.network.as_deref())?;
        let mut max_age = HEAD_TTL;
        loop {
            let head = self.owned_head(net, subs, id, provider, max_age).await?;
            let fresh = head.fresh;
            match head.state {
                1 => {}
                2 => return Err(not_active(id, "is paused")),
                _ => return Err(not_active(id, "is cancelled")),
            }
            let now = net.now().await;
            if now >= head.paid_through {
                return Err(not_active(
                    id,
                    "is overdue: its next cycle is not paid yet (renewal pending)",
                ));
            }
            let d = Deduction {
                network: net.spec.name.clone(),
                id,
                cycle: head.cycle,
                cap: u64::try_from(head.cap).unwrap_or(MAX_METERED),
                amount: amount.to::<u64>(),
                key: req.idempotency_key.clone(),
                provider: Some(provider),
                at: unix_now(),
            };
            match self.core.store().deduct_allowance(&d).await? {
                DeductOutcome::Applied(row) | DeductOutcome::Replayed(row) => {
                    crate::fault::hit("deduct.after-commit");
                    return Ok(usage(id, &row));
                }
                DeductOutcome::KeyConflict => {
                    return Err(Error::IdempotencyConflict(
                        "idempotencyKey was used for another amount on this subscription".into(),
                    ));
                }
                // The cap may have been raised, or a new cycle begun: ask the chain once more.
                DeductOutcome::Exhausted(_) | DeductOutcome::Closed(_) if !fresh => {
                    max_age = Duration::ZERO;
                }
                DeductOutcome::Exhausted(row) => {
                    return Err(Error::AllowanceExhausted(format!(
                        "subscription {id}: {} of the cycle's cap {} remains, {} needed; \
                             the subscriber can raise maxOverage or wait for the next cycle",
                        row.remaining(),
                        row.cap,
                        d.amount
                    )));
                }
                DeductOutcome::Closed(_) => {
                    return Err(not_active(
                        id,
                        "is between cycles: the cycle has ended and its renewal is in progress",
                    ));
                }
            }
        }
    }

    /// The ledger of the subscription's current cycle, for `provider`.
    pub(crate) async fn allowance_usage(
        &self,
        provider: Address,
        network: Option<&str>,
        id: B256,
    ) -> Result<AllowanceUsage> {
        let (net, subs) = self.subscriptions_network(network)?;
        let head = self
            .owned_head(net, subs, id, provider, Duration::ZERO)
            .await?;
        let row = self
            .core
            .store()
            .allowance_cycle(&net.spec.name, id, head.cycle)
            .await?
            .unwrap_or_else(|| AllowanceCycle {
                network: net.spec.name.clone(),
                id,
                cycle: head.cycle,
                cap: u64::try_from(head.cap).unwrap_or(MAX_METERED),
                used: 0,
                billed: 0,
                charged: 0,
                unpaid: 0,
                deductions: 0,
                charges: 0,
                closed: false,
                first_unbilled_at: None,
            });
        Ok(usage(id, &row))
    }

    /// Relays `raiseAllowanceWithSig`; idempotent (a cap already at the requested value is
    /// answered without sending).
    pub(crate) async fn raise_allowance(
        &self,
        id: B256,
        req: &RaiseAllowanceRequest,
    ) -> Result<SubscriptionView> {
        let (net, subs) = self.subscriptions_network(Some(&req.network))?;
        let name = net.spec.name.clone();
        let _guard = self.core.locks.lock(keccak256(id)).await;
        let head = self
            .head(net, subs, id, Duration::ZERO)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no subscription {id}")))?;
        let wanted = req.max_overage.get();
        // The raise's transaction, sent now; for a repeat (the cap already raised), found in
        // the contract's logs.
        let mut raised_in = None;
        if head.cap != wanted {
            let call = contracts::Subscriptions::raiseAllowanceWithSigCall {
                id,
                newMaxOverage: wanted,
                deadline: U256::from(req.deadline),
                signature: req.signature.clone(),
            };
            let tx = TxRequest::call(self.core.relayer().await?, subs, call.abi_encode());
            let opts = WaitOptions {
                confirmations: net.spec.confirmations,
                timeout: self.core.settings().confirmation_timeout,
            };
            // Counted against the lifecycle relay bounds, as pause and resume are, once the
            // signature is the subscriber's (else the simulation refuses it, and nobody's budget
            // is used).
            let slot = match self.raise_signer(net, subs, id, wanted, req).await? {
                Some(subscriber) => {
                    Some(self.take_relay(net, id, subscriber, "raise", false).await?)
                }
                None => None,
            };
            let sent = net.chain.send_and_wait(tx, opts).await;
            if let (Err(tollgate_chain::Error::Revert(_)), Some(slot)) = (&sent, slot) {
                // Refused at simulation: nothing was sent, nothing counts.
                self.release_relay(slot).await;
            }
            match sent {
                Ok(Confirmation::Confirmed(r)) if r.success => raised_in = Some(r.tx_hash),
                Ok(Confirmation::Confirmed(r)) => {
                    return Err(Error::Reverted {
                        kind: Relayed::RaiseAllowance,
                        tx_hash: r.tx_hash,
                    });
                }
                Ok(Confirmation::Pending { tx_hash }) => {
                    return Err(Error::Pending { tx_hash });
                }
                Err(e) => return Err(e.into()),
            }
            tracing::info!(network = %name, %id, max_overage = %wanted, "allowance raised");
        }
        self.heads.forget(&name, id);
        let mut view = self
            .subscription_view(net, subs, id)
            .await?
            .ok_or_else(|| Error::internal("raised subscription vanished"))?;
        view.tx_hash = match raised_in {
            Some(tx) => Some(tx),
            // Best effort: the raise holds whether or not its transaction is found.
            None => self
                .raise_tx(net, subs, id, wanted)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(%id, "the raise's transaction: {e}");
                    None
                }),
        };
        let cap = u64::try_from(view.allowance.cap.get()).unwrap_or(MAX_METERED);
        self.core
            .store()
            .upsert_allowance_cycle(&name, id, view.cycle, cap, false, unix_now())
            .await?;
        Ok(view)
    }
}

impl Subscriptions {
    /// The last transaction that raised `id`'s cap to `cap` (`AllowanceRaised`), within the
    /// lookback window.
    async fn raise_tx(
        &self,
        net: &Network,
        subs: Address,
        id: B256,
        cap: U256,
    ) -> Result<Option<B256>> {
        let latest = net.chain.block_number().await?;
        let filter = LogFilter {
            from_block: latest.saturating_sub(self.core.settings().log_lookback_blocks),
            to_block: Some(latest),
            addresses: vec![subs],
            topics: [
                Some(vec![
                    contracts::Subscriptions::AllowanceRaised::SIGNATURE_HASH,
                ]),
                Some(vec![id]),
                None,
                None,
            ],
        };
        let logs = net.chain.logs(&filter).await?;
        Ok(logs
            .iter()
            .rev()
            .find(|l| {
                contracts::Subscriptions::AllowanceRaised::decode_log(&l.log)
                    .is_ok_and(|e| e.maxOverage == cap)
            })
            .map(|l| l.tx_hash))
    }

    /// The subscriber of `id`, when the raise's signature is theirs with their current nonce.
    async fn raise_signer(
        &self,
        net: &Network,
        subs: Address,
        id: B256,
        wanted: U256,
        req: &RaiseAllowanceRequest,
    ) -> Result<Option<Address>> {
        let (sub, nonce) = crate::subscriptions::with_nonce(net.chain.as_ref(), subs, id).await?;
        let action = Action::new(
            id,
            ActionKind::RaiseAllowance,
            wanted,
            nonce,
            U256::from(req.deadline),
        );
        let domain = subscriptions_domain(net.spec.chain_id, subs);
        Ok(recover(&action, &domain, &req.signature)
            .ok()
            .filter(|signer| *signer == sub.subscriber))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The usage answer adds up on any consistent ledger (charged + unpaid <= billed <= used
        /// <= cap), and never panics on any row at all.
        #[test]
        fn usage_adds_up(
            cap in proptest::prelude::any::<u64>(),
            shares in proptest::prelude::any::<[u64; 4]>(),
            raw in proptest::prelude::any::<[u64; 5]>(),
        ) {
            // A consistent row: cap >= used >= billed >= charged + unpaid.
            let upto = |x: u64, max: u64| x.checked_rem(max.wrapping_add(1)).unwrap_or(x);
            let used = upto(shares[0], cap);
            let billed = upto(shares[1], used);
            let charged = upto(shares[2], billed);
            let unpaid = upto(shares[3], billed - charged);
            let row = |cap, used, billed, charged, unpaid| AllowanceCycle {
                network: "base".into(),
                id: B256::ZERO,
                cycle: 1,
                cap,
                used,
                billed,
                charged,
                unpaid,
                deductions: 0,
                charges: 0,
                closed: false,
                first_unbilled_at: None,
            };
            let u = usage(B256::ZERO, &row(cap, used, billed, charged, unpaid));
            proptest::prop_assert_eq!(u.remaining.get() + u.used.get(), U256::from(cap));
            proptest::prop_assert_eq!(
                u.unsettled.get() + u.charged.get() + u.unpaid.get(),
                U256::from(used)
            );
            // Any row, consistent or not.
            let [c, us, b, ch, un] = raw;
            let u = usage(B256::ZERO, &row(c, us, b, ch, un));
            proptest::prop_assert!(u.unsettled.get() <= U256::from(us));
            proptest::prop_assert!(u.remaining.get() <= U256::from(c));
        }
    }
}
