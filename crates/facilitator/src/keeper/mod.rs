//! The renewal keeper: collects every due subscription automatically.
//!
//! Each run, per network with a Subscriptions contract:
//!
//! 1. **Index.** Reads `SubscriptionCreated` and `SubscriptionResumed` logs from the stored cursor
//!    forward, in ranges of at most [`LOG_RANGE`] blocks and no deeper than the network's
//!    confirmation depth, into `subscriptions_index`; the events of a range and the cursor move
//!    commit together. Re-reading a range (after a crash before the cursor moved) is harmless: a
//!    known subscription keeps its row.
//! 2. **Renew.** For every indexed active subscription whose `next_due` is at or before the chain's
//!    clock, reads the subscription on-chain (the chain is the truth), and if it is ACTIVE and due,
//!    sends `collect(id, cycle + 1)` from a relayer, waits for confirmation, reads the outcome
//!    (`SubscriptionRenewed` → renewed, `RenewalFailed` → paused) and records `(id, cycle)` in
//!    `renewals`. A subscription whose token is paused is postponed (below). Before collecting,
//!    it closes the ending cycle's usage ledger and charges what is left of it on-chain
//!    ([`crate::metering`]); a charge still pending postpones the renewal to the next run.
//! 3. **Charge overage.** Sends metered usage on-chain in batches ([`crate::metering`]).
//!
//! **Idempotent by construction.** The store only remembers; the contract decides: `collect` takes
//! the exact next cycle, so a retried or concurrent collect of a billed cycle reverts with
//! `WrongCycle` (refused at simulation, before broadcast), and `NotDue` and
//! `SubscriptionNotActive` likewise mean "nothing to do". A crash after broadcast leaves the index
//! row due; the next run re-reads the chain and either sees the cycle paid (and records it) or
//! collects it. So a cycle is never billed twice and never skipped.
//!
//! **No backlog.** One cycle per subscription per run, and one is all a late subscription owes:
//! the contract starts a renewed cycle at the renewal (`paidThrough = block.timestamp +
//! interval`), so after a keeper outage or a dry relayer, however many intervals long, each
//! overdue subscription is billed once and is next due a whole interval later. It is never billed
//! for the intervals it was refused as overdue (gates and the facilitator refuse it from
//! `paidThrough` on). The next due time is the `paidThrough` of the `SubscriptionRenewed` event
//! (or of the chain), never computed here.
//!
//! **A paused token postpones; it never pauses a subscription.** A token paused as a whole
//! (FiatToken's `pause()` by Circle's pauser) refuses every transfer, and `collect` answers a
//! refused transfer by pausing the subscription (`RenewalFailed`): the subscriber would be
//! punished for the token's pause. So before collecting (and before closing the cycle's usage),
//! the keeper reads the plan's token's `paused()` (once per token per run; a token without it is
//! not pausable): while paused, the due subscription is counted `postponed`, nothing is sent,
//! and the token's pause is logged once per run; the first run after `unpause()` renews it (one
//! cycle, as for any late subscription). A pause landing between that read and the `collect`
//! still fails that one renewal on-chain (only the contract could close that window).
//!
//! **Renewals that can never succeed are tried a bounded number of times.**
//! - *Refused on-chain* (the subscriber is blacklisted by the token, revoked the allowance, or
//!   moved the balance away): `collect` itself pauses the subscription and emits `RenewalFailed`
//!   at the first attempt. The keeper records the failed cycle and the index row leaves the due
//!   set (paused), so no later run tries it; the indexed `RenewalFailed` log is the one
//!   `subscription.renewal_failed` webhook event; the dashboard lists it until it is paid. It is
//!   tried again only after the subscriber resumes it (`SubscriptionResumed`).
//! - *Refused at simulation* for a reason the keeper does not expect (anything but
//!   `WrongCycle`, `NotDue` or `SubscriptionNotActive`: e.g. the token's implementation
//!   reverting): nothing is broadcast, the run counts an error, and the store counts the refusal
//!   for that `(subscription, cycle)`. At [`MAX_REFUSED_COLLECTS`] the subscription is marked
//!   stuck: counted `stuck` in that run's report, one `subscription.renewal_stuck` webhook
//!   event, listed on the dashboard, and left out of the due set until the chain's state of that
//!   subscription changes: any of its events indexed (resumed, paused, cancelled, renewed by
//!   anyone, allowance raised or charged) or a collection recorded clears the mark and the count.
//! - Neither blocks other renewals: each due subscription is its own task, one attempt per run.
//!
//! Runs within one facilitator are serialised; several replicas may run keepers at once (the
//! contract keeps them from double-billing; at worst one pays gas for a reverted collect).

use std::{collections::HashMap, sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, B256, keccak256},
    sol_types::{SolCall, SolEvent},
};
use tollgate_chain::{
    Confirmation, Error as ChainError, Receipt, Revert, TxRequest, WaitOptions, contracts,
};

use crate::{
    facilitator::{Network, unix_now},
    store::{
        IndexedState, IndexedSubscription, RefusedCollect, Renewal, RenewalOutcome, StoreError,
    },
    subscriptions::Subscriptions,
};

mod index;

/// Most blocks read per `eth_getLogs` query.
pub const LOG_RANGE: u64 = 5_000;
/// Due subscriptions taken from the store at a time.
const DUE_BATCH: u32 = 512;
/// Collections in flight at once per network.
const CONCURRENCY: usize = 16;
/// Collections of one `(subscription, cycle)` refused at simulation for an unexpected reason
/// before the keeper marks the subscription stuck and stops trying it (see the module doc).
pub const MAX_REFUSED_COLLECTS: u32 = 5;

/// A token that can be paused as a whole (FiatToken's `Pausable`).
#[allow(missing_docs, unreachable_pub)]
mod pausable {
    alloy::sol! {
        interface PausableToken {
            function paused() external view returns (bool);
        }
    }
}
use pausable::PausableToken;

/// What one run learned of tokens, shared by its collections: each plan's token, and whether
/// each token is paused (read once per run).
#[derive(Default)]
struct RunTokens {
    plans: HashMap<B256, Address>,
    paused: HashMap<Address, bool>,
}

type Tokens = Arc<tokio::sync::Mutex<RunTokens>>;

/// What one keeper run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeeperReport {
    /// Subscription events indexed from the logs.
    pub indexed: usize,
    /// Cycles collected (`SubscriptionRenewed`).
    pub renewed: usize,
    /// Renewals that failed on-chain (`RenewalFailed`: the subscription is now paused).
    pub failed: usize,
    /// Due rows with nothing to do after all (not due, not active, or billed already).
    pub skipped: usize,
    /// Collections broadcast but not confirmed in time (the next run settles them).
    pub pending: usize,
    /// Due subscriptions not collected because their token is paused (FiatToken's `paused()`):
    /// nothing sent; the next run tries again.
    pub postponed: usize,
    /// Subscriptions marked stuck in this run: their collection was refused
    /// [`MAX_REFUSED_COLLECTS`] times for the same cycle; no later run tries them until their
    /// state on-chain changes.
    pub stuck: usize,
    /// Errors (chain or store); each is logged, and the next run retries.
    pub errors: usize,
    /// The metering pass: overage charged on-chain (see [`crate::metering`]).
    pub overage: crate::metering::MeteringReport,
}

impl KeeperReport {
    fn add(&mut self, other: &Self) {
        self.indexed += other.indexed;
        self.renewed += other.renewed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.pending += other.pending;
        self.postponed += other.postponed;
        self.stuck += other.stuck;
        self.errors += other.errors;
        self.overage.charged += other.overage.charged;
        self.overage.unpaid += other.overage.unpaid;
        self.overage.pending += other.overage.pending;
        self.overage.errors += other.overage.errors;
    }
}

/// The keeper's background task; aborted when dropped.
#[derive(Debug)]
pub struct KeeperHandle(tokio::task::JoinHandle<()>);

impl Drop for KeeperHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What one due subscription came to.
enum Step {
    Renewed,
    Failed,
    Skipped,
    Pending,
    Postponed,
    Stuck,
}

#[derive(Debug, thiserror::Error)]
enum KeeperError {
    #[error("chain: {0}")]
    Chain(#[from] ChainError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("metering: {0}")]
    Metering(#[from] crate::metering::MeteringError),
    #[error(transparent)]
    NoRelayer(#[from] crate::replica::NoRelayer),
}

fn keeper_lock_key() -> B256 {
    keccak256(b"tollgate.keeper.run")
}

impl Subscriptions {
    /// Runs the renewal keeper once over every network (see [`crate::keeper`]): indexes new
    /// subscriptions, then collects each one that is due, one cycle each. Runs of one facilitator
    /// are serialised. Never fails: errors are logged, counted and retried by the next run.
    pub async fn run_keeper_once(&self) -> KeeperReport {
        let _guard = self.core.locks.lock(keeper_lock_key()).await;
        let mut names: Vec<&String> = self.core.networks.keys().collect();
        names.sort();
        let mut report = KeeperReport::default();
        for name in names {
            let net = &self.core.networks[name];
            let Some(subs) = net.spec.subscriptions else {
                continue;
            };
            match self.index_subscriptions(net, subs).await {
                Ok(n) => report.indexed += n,
                Err(e) => {
                    tracing::warn!(network = %name, error = %e, "keeper: indexing failed");
                    report.errors += 1;
                }
            }
            report.add(&KeeperReport {
                overage: self.settle_overage(net, subs).await,
                ..KeeperReport::default()
            });
            report.add(&self.renew_due(net, subs).await);
        }
        report
    }

    /// Spawns the keeper: [`run_keeper_once`](Self::run_keeper_once) every
    /// [`Settings::keeper_interval`](crate::Settings::keeper_interval), until the handle is
    /// dropped. A zero interval spawns nothing useful: the task returns at once.
    pub fn spawn_keeper(&self) -> KeeperHandle {
        let f = self.clone();
        let every = f.core.settings().keeper_interval;
        KeeperHandle(tokio::spawn(async move {
            if every.is_zero() {
                return;
            }
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // One keeper in a fleet of replicas: the one holding its lease.
                if !f.core.leads_keeper().await {
                    continue;
                }
                let r = f.run_keeper_once().await;
                if r != KeeperReport::default() {
                    tracing::debug!(?r, "keeper run");
                }
            }
        }))
    }

    /// Collects every indexed subscription due at the chain's clock, one cycle each.
    async fn renew_due(&self, net: &Network, subs: Address) -> KeeperReport {
        let mut report = KeeperReport::default();
        let name = net.spec.name.clone();
        let now = match net.chain.timestamp().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(network = %name, error = %e, "keeper: chain clock unavailable");
                report.errors += 1;
                return report;
            }
        };
        // Each row leaves the due set once handled (renewed: due later; paused; or updated from
        // the chain), except on errors and pending collections: `seen` keeps a run from retrying
        // those in a loop.
        let mut seen = std::collections::HashSet::new();
        let tokens = Tokens::default();
        loop {
            let due = match self
                .core
                .store
                .due_subscriptions(&name, now, DUE_BATCH)
                .await
            {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(network = %name, error = %e, "keeper: store unavailable");
                    report.errors += 1;
                    return report;
                }
            };
            let fresh: Vec<IndexedSubscription> =
                due.into_iter().filter(|s| seen.insert(s.id)).collect();
            if fresh.is_empty() {
                return report;
            }
            let mut tasks = tokio::task::JoinSet::new();
            for sub in fresh {
                if tasks.len() >= CONCURRENCY {
                    tally(&mut report, tasks.join_next().await);
                }
                let (f, tokens) = (self.clone(), Arc::clone(&tokens));
                tasks.spawn(async move {
                    let mut overage = crate::metering::MeteringReport::default();
                    let step = f.renew_one(&sub, subs, now, &tokens, &mut overage).await;
                    (step, overage)
                });
            }
            while let Some(r) = tasks.join_next().await {
                tally(&mut report, Some(r));
            }
        }
    }

    /// Collects the next cycle of one due subscription if the chain agrees it is due.
    async fn renew_one(
        &self,
        sub: &IndexedSubscription,
        subs: Address,
        now: u64,
        tokens: &Tokens,
        overage: &mut crate::metering::MeteringReport,
    ) -> Result<Step, KeeperError> {
        let net = &self.core.networks[&sub.network];
        let store = &self.core.store;
        let chain = net.chain.as_ref();
        let id = sub.id;
        let onchain = contracts::read(
            chain,
            subs,
            &contracts::Subscriptions::subscriptionsCall { id },
        )
        .await?;
        let state = match onchain.state {
            1 => IndexedState::Active,
            2 => IndexedState::Paused,
            // Cancelled, or gone (a reorg dropped its creation): never collected again.
            _ => IndexedState::Cancelled,
        };
        if state != IndexedState::Active || onchain.paidThrough > now {
            store
                .update_indexed_subscription(
                    &sub.network,
                    id,
                    state,
                    onchain.cycle,
                    onchain.paidThrough,
                    unix_now(),
                )
                .await?;
            return Ok(Step::Skipped);
        }
        // A token paused as a whole refuses every transfer: a collect now would pause the
        // subscription for the token's pause (RenewalFailed). Nothing is sent; the next run
        // tries again.
        if self.token_paused(net, subs, onchain.planId, tokens).await? {
            tracing::debug!(network = %sub.network, %id, cycle = onchain.cycle + 1, "keeper: token paused; renewal postponed");
            return Ok(Step::Postponed);
        }
        // The ending cycle takes no more usage, and what it used is charged before it ends: a
        // charge for it would fail once the next cycle is collected.
        // A cap of zero never took a deduction (caps only rise): nothing to close.
        if !onchain.maxOverage.is_zero()
            && !self
                .close_cycle(net, subs, id, onchain.cycle, onchain.maxOverage, overage)
                .await?
        {
            tracing::info!(network = %sub.network, %id, cycle = onchain.cycle, "keeper: overage charge pending; renewal waits");
            return Ok(Step::Pending);
        }
        let cycle = onchain.cycle + 1;
        let call = contracts::Subscriptions::collectCall { id, cycle };
        let tx = TxRequest::call(self.core.relayer().await?, subs, call.abi_encode());
        let hash = match chain.send(tx).await {
            Ok(hash) => hash,
            Err(ChainError::Revert(
                r @ (Revert::WrongCycle { .. }
                | Revert::NotDue { .. }
                | Revert::SubscriptionNotActive { .. }),
            )) => {
                // Billed, not due or not active after all (another keeper, or the subscriber):
                // nothing to do; the next run reads the chain again.
                tracing::debug!(network = %sub.network, %id, cycle, reason = r.name(), "keeper: nothing to collect");
                return Ok(Step::Skipped);
            }
            Err(ChainError::Revert(r)) => return self.collect_refused(sub, cycle, &r).await,
            Err(e) => return Err(e.into()),
        };
        crate::fault::hit("renew.after-broadcast");
        let opts = WaitOptions {
            confirmations: net.spec.confirmations.max(1),
            timeout: self.core.settings.confirmation_timeout,
        };
        let receipt = match chain.wait(hash, opts).await? {
            Confirmation::Confirmed(r) => r,
            Confirmation::Pending { tx_hash } => {
                tracing::warn!(network = %sub.network, %id, cycle, %tx_hash, "keeper: collect not confirmed in time");
                return Ok(Step::Pending);
            }
        };
        if !receipt.success {
            // Reverted on-chain (a concurrent collect won the race): nothing billed by us.
            tracing::info!(network = %sub.network, %id, cycle, tx_hash = %receipt.tx_hash, "keeper: collect reverted");
            return Ok(Step::Skipped);
        }
        let Some((outcome, next_due)) = outcome(&receipt, subs, id, cycle) else {
            tracing::warn!(network = %sub.network, %id, cycle, tx_hash = %receipt.tx_hash, "keeper: collect left no outcome event");
            return Ok(Step::Skipped);
        };
        let (state, step) = match outcome {
            RenewalOutcome::Renewed => (IndexedState::Active, Step::Renewed),
            RenewalOutcome::Failed => (IndexedState::Paused, Step::Failed),
        };
        crate::fault::hit("renew.after-receipt");
        let renewal = Renewal {
            network: sub.network.clone(),
            id,
            cycle,
            outcome,
            tx_hash: receipt.tx_hash,
            block: receipt.block_number,
            at: unix_now(),
        };
        store
            .record_renewal(&renewal, state, next_due.unwrap_or(onchain.paidThrough))
            .await?;
        self.heads.forget(&sub.network, id);
        match outcome {
            RenewalOutcome::Renewed => tracing::info!(
                network = %sub.network, %id, cycle, subscriber = %onchain.subscriber,
                tx_hash = %receipt.tx_hash, paid_through = next_due.unwrap_or_default(),
                "keeper: subscription renewed"
            ),
            RenewalOutcome::Failed => tracing::warn!(
                network = %sub.network, %id, cycle, subscriber = %onchain.subscriber,
                tx_hash = %receipt.tx_hash,
                "keeper: renewal failed; subscription paused"
            ),
        }
        Ok(step)
    }
}

impl Subscriptions {
    /// Whether the token of `plan_id` is paused as a whole (FiatToken's `paused()`; a token
    /// without it is not pausable). Read once per token per run, and logged once when paused.
    async fn token_paused(
        &self,
        net: &Network,
        subs: Address,
        plan_id: B256,
        tokens: &Tokens,
    ) -> Result<bool, KeeperError> {
        let chain = net.chain.as_ref();
        let mut known = tokens.lock().await;
        let token = match known.plans.get(&plan_id) {
            Some(token) => *token,
            None => {
                let plan = contracts::read(
                    chain,
                    subs,
                    &contracts::Subscriptions::plansCall { planId: plan_id },
                )
                .await?;
                known.plans.insert(plan_id, plan.token);
                plan.token
            }
        };
        if let Some(paused) = known.paused.get(&token) {
            return Ok(*paused);
        }
        let paused = match contracts::read(chain, token, &PausableToken::pausedCall {}).await {
            Ok(paused) => paused,
            // No `paused()`: it reverts, or answers nothing to decode.
            Err(ChainError::Revert(_) | ChainError::InvalidInput(_)) => false,
            Err(e) => return Err(e.into()),
        };
        if paused {
            tracing::warn!(network = %net.spec.name, %token, "keeper: token paused; its renewals are postponed");
        }
        known.paused.insert(token, paused);
        Ok(paused)
    }

    /// Counts a `collect` refused at simulation for an unexpected reason: an error for this
    /// run, or, at [`MAX_REFUSED_COLLECTS`] for the same cycle, the subscription marked stuck
    /// (one `subscription.renewal_stuck` event) and left alone until its state on-chain changes.
    async fn collect_refused(
        &self,
        sub: &IndexedSubscription,
        cycle: u32,
        revert: &Revert,
    ) -> Result<Step, KeeperError> {
        let refused = RefusedCollect {
            network: sub.network.clone(),
            id: sub.id,
            cycle,
            error: revert.to_string(),
            at: unix_now(),
        };
        let count = self
            .core
            .store
            .count_refused_collect(&refused, MAX_REFUSED_COLLECTS)
            .await?;
        if count.newly_stuck {
            tracing::error!(
                network = %sub.network, id = %sub.id, cycle, attempts = count.attempts,
                error = %revert, "keeper: collect refused every time; renewal stuck, not tried again until the subscription changes on-chain"
            );
            return Ok(Step::Stuck);
        }
        Err(ChainError::Revert(revert.clone()).into())
    }
}

/// The outcome event of `collect(id, cycle)` in its receipt, with the new `paidThrough` when
/// renewed.
fn outcome(
    receipt: &Receipt,
    subs: Address,
    id: B256,
    cycle: u32,
) -> Option<(RenewalOutcome, Option<u64>)> {
    receipt
        .logs
        .iter()
        .filter(|l| l.address == subs)
        .find_map(|l| {
            if let Ok(ev) = contracts::Subscriptions::SubscriptionRenewed::decode_log(l)
                && ev.id == id
                && ev.cycle == cycle
            {
                return Some((RenewalOutcome::Renewed, Some(ev.paidThrough)));
            }
            if let Ok(ev) = contracts::Subscriptions::RenewalFailed::decode_log(l)
                && ev.id == id
                && ev.cycle == cycle
            {
                return Some((RenewalOutcome::Failed, None));
            }
            None
        })
}

type Joined =
    Result<(Result<Step, KeeperError>, crate::metering::MeteringReport), tokio::task::JoinError>;

fn tally(report: &mut KeeperReport, joined: Option<Joined>) {
    let joined = joined.map(|j| {
        j.map(|(step, overage)| {
            report.add(&KeeperReport {
                overage,
                ..KeeperReport::default()
            });
            step
        })
    });
    match joined {
        Some(Ok(Ok(Step::Renewed))) => report.renewed += 1,
        Some(Ok(Ok(Step::Failed))) => report.failed += 1,
        Some(Ok(Ok(Step::Skipped))) => report.skipped += 1,
        Some(Ok(Ok(Step::Pending))) => report.pending += 1,
        Some(Ok(Ok(Step::Postponed))) => report.postponed += 1,
        Some(Ok(Ok(Step::Stuck))) => report.stuck += 1,
        Some(Ok(Err(e))) => {
            tracing::warn!(error = %e, "keeper: renewal attempt failed; retrying next run");
            report.errors += 1;
        }
        Some(Err(e)) => {
            tracing::warn!(error = %e, "keeper: renewal task died");
            report.errors += 1;
        }
        None => {}
    }
}

/// Default for [`crate::Settings::keeper_interval`].
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
