//! Subscription checks for `X-Service-Sub`: an on-chain read of the subscription, a per-id cache
//! with a bounded staleness, and a background watcher that evicts ids as soon as the chain
//! reports a change to them.
//!
//! Staleness bound of a cached status:
//!
//! - after a `SubscriptionPaused`, `SubscriptionCancelled`, `SubscriptionResumed`,
//!   `SubscriptionRenewed` or `RenewalFailed` event is in a block, the id is evicted at the
//!   watcher's next poll: at most the poll interval ([`DEFAULT_SUBSCRIPTION_POLL_INTERVAL`], 1 s)
//!   plus one `eth_getLogs` round trip;
//! - otherwise (the watcher cannot reach the chain, or a change without an event), at most the
//!   cache TTL ([`DEFAULT_SUBSCRIPTION_CACHE_TTL`], 5 s).
//!
//! Reorgs are not followed: an event in a block that is later dropped still evicts (harmless),
//! and a status read from such a block is kept for at most the TTL.
//!
//! "Overdue" is judged against the chain's clock (the latest block's timestamp seen by the gate,
//! advanced by the wall-clock time since it was seen), not the host's clock, so it does not
//! depend on the cache: a cached ACTIVE entry becomes overdue on its own.

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256},
    sol_types::SolEvent,
};
use tokio::task::JoinHandle;
use tollgate_chain::{
    Chain, LogFilter,
    contracts::{self, SubscriptionState, Subscriptions as Contract},
};

use crate::SubscriptionError;

pub use tollgate_protocol::headers::X_SERVICE_SUB;
/// Default bound on how long a subscription's on-chain status is reused without reading it again.
pub const DEFAULT_SUBSCRIPTION_CACHE_TTL: Duration = Duration::from_secs(5);
/// Default interval at which the watcher polls the subscriptions contract's events.
pub const DEFAULT_SUBSCRIPTION_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default grace after `paidThrough` during which an unrenewed ACTIVE subscription is still
/// served: none (the paid period ends at `paidThrough`, exclusive).
pub const DEFAULT_SUBSCRIPTION_GRACE: Duration = Duration::ZERO;
/// At most this many ids are cached; beyond it, expired entries are dropped, then all.
const MAX_CACHED: usize = 100_000;

/// An ACTIVE subscription that a request was served on. The layer puts it in the request's
/// extensions, so a handler can read who is calling (`axum::Extension<VerifiedSubscription>`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedSubscription {
    /// The subscription id.
    pub id: B256,
    /// Its plan.
    pub plan_id: B256,
    /// The subscriber.
    pub subscriber: Address,
    /// The end (exclusive, unix seconds of the chain's clock) of the paid period.
    pub paid_through: u64,
}

/// Parses an `X-Service-Sub` value: `0x` followed by 64 hex digits (surrounding spaces allowed).
pub fn parse_subscription_id(value: &str) -> Result<B256, SubscriptionError> {
    let v = value.trim();
    let hex = v
        .strip_prefix("0x")
        .or_else(|| v.strip_prefix("0X"))
        .ok_or(SubscriptionError::Malformed)?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(SubscriptionError::Malformed);
    }
    hex.parse().map_err(|_| SubscriptionError::Malformed)
}

/// What the chain said about one id.
#[derive(Clone, Copy, Debug)]
struct Entry {
    state: SubscriptionState,
    plan_id: B256,
    subscriber: Address,
    paid_through: u64,
    read_at: Instant,
}

/// State shared by the checker and its watcher task.
#[derive(Debug, Default)]
struct Shared {
    cache: Mutex<HashMap<B256, Entry>>,
    /// Bumped (under the cache lock) on every eviction: a read that started before an eviction
    /// is not cached, since it may predate the event.
    epoch: AtomicU64,
    /// One chain read per id at a time; the others wait for it and use the cache.
    inflight: Mutex<HashMap<B256, Arc<tokio::sync::Mutex<()>>>>,
    /// The latest chain timestamp seen and when: the chain's clock is estimated as the largest
    /// `timestamp + elapsed` over the observations.
    clock: Mutex<Option<(u64, Instant)>>,
    /// Chain reads of subscriptions (for tests and metrics).
    reads: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn observe_time(&self, timestamp: u64) {
        let mut clock = lock(&self.clock);
        if clock.is_none_or(|(t, at)| timestamp > t.saturating_add(at.elapsed().as_secs())) {
            *clock = Some((timestamp, Instant::now()));
        }
    }

    fn chain_now(&self) -> Option<u64> {
        lock(&self.clock).map(|(t, at)| t.saturating_add(at.elapsed().as_secs()))
    }

    fn cached(&self, id: B256, ttl: Duration) -> Option<Entry> {
        lock(&self.cache)
            .get(&id)
            .filter(|e| e.read_at.elapsed() < ttl)
            .copied()
    }

    fn insert(&self, id: B256, entry: Entry, epoch: u64) {
        let mut cache = lock(&self.cache);
        if self.epoch.load(Ordering::SeqCst) != epoch {
            return;
        }
        if cache.len() >= MAX_CACHED {
            let now = Instant::now();
            cache.retain(|_, e| now.duration_since(e.read_at) < Duration::from_secs(60));
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(id, entry);
    }

    fn evict(&self, ids: impl IntoIterator<Item = B256>) {
        let mut cache = lock(&self.cache);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        for id in ids {
            cache.remove(&id);
        }
    }

    fn clear(&self) {
        let mut cache = lock(&self.cache);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        cache.clear();
    }
}

/// Stops the watcher task when dropped (mini-redis `DbDropGuard`): the gate owns it, so the task
/// ends with the last clone of the gate.
#[derive(Debug)]
struct WatcherGuard(JoinHandle<()>);

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Settings of the subscription checker ([`crate::GateBuilder::subscriptions`] and friends).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) contract: Address,
    pub(crate) cache_ttl: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) grace: Duration,
}

/// Checks subscriptions on-chain, with the cache and its watcher.
pub(crate) struct Checker {
    chain: Arc<dyn Chain>,
    settings: Settings,
    shared: Arc<Shared>,
    _watcher: WatcherGuard,
}

impl fmt::Debug for Checker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checker")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Checker {
    /// Starts the watcher on the current tokio runtime.
    pub(crate) fn start(
        chain: Arc<dyn Chain>,
        settings: Settings,
        rt: &tokio::runtime::Handle,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let task = rt.spawn(watch(
            Arc::clone(&chain),
            settings.contract,
            settings.poll_interval,
            Arc::clone(&shared),
        ));
        Self {
            chain,
            settings,
            shared,
            _watcher: WatcherGuard(task),
        }
    }

    /// How many times the chain was asked for a subscription.
    pub(crate) fn reads(&self) -> u64 {
        self.shared.reads.load(Ordering::Relaxed)
    }

    /// Whether `id` is an ACTIVE, paid (within the grace) subscription to one of `accepted`.
    pub(crate) async fn check(
        &self,
        id: B256,
        accepted: &[B256],
    ) -> Result<VerifiedSubscription, SubscriptionError> {
        let entry = self.entry(id).await?;
        let now = match self.shared.chain_now() {
            Some(now) => now,
            None => {
                let ts = self
                    .chain
                    .timestamp()
                    .await
                    .map_err(SubscriptionError::ChainUnavailable)?;
                self.shared.observe_time(ts);
                ts
            }
        };
        decide(id, &entry, accepted, now, self.settings.grace)
    }

    async fn entry(&self, id: B256) -> Result<Entry, SubscriptionError> {
        let ttl = self.settings.cache_ttl;
        if let Some(e) = self.shared.cached(id, ttl) {
            return Ok(e);
        }
        let slot = Arc::clone(lock(&self.shared.inflight).entry(id).or_default());
        let result = {
            let _one = slot.lock().await;
            match self.shared.cached(id, ttl) {
                Some(e) => Ok(e),
                None => self.read(id).await,
            }
        };
        {
            let mut inflight = lock(&self.shared.inflight);
            // Only the map and this call hold it: nobody else waits on this slot.
            if inflight.get(&id).is_some_and(|s| Arc::strong_count(s) <= 2) {
                inflight.remove(&id);
            }
        }
        result
    }

    async fn read(&self, id: B256) -> Result<Entry, SubscriptionError> {
        let epoch = self.shared.epoch.load(Ordering::SeqCst);
        self.shared.reads.fetch_add(1, Ordering::Relaxed);
        let s = contracts::read(
            &*self.chain,
            self.settings.contract,
            &Contract::subscriptionsCall { id },
        )
        .await
        .map_err(SubscriptionError::ChainUnavailable)?;
        let entry = Entry {
            state: SubscriptionState::from_u8(s.state),
            plan_id: s.planId,
            subscriber: s.subscriber,
            paid_through: s.paidThrough,
            read_at: Instant::now(),
        };
        if !self.settings.cache_ttl.is_zero() {
            self.shared.insert(id, entry, epoch);
        }
        Ok(entry)
    }
}

fn decide(
    id: B256,
    e: &Entry,
    accepted: &[B256],
    now: u64,
    grace: Duration,
) -> Result<VerifiedSubscription, SubscriptionError> {
    match e.state {
        SubscriptionState::None => return Err(SubscriptionError::Unknown(id)),
        _ if !accepted.contains(&e.plan_id) => {
            return Err(SubscriptionError::ForeignPlan {
                id,
                plan_id: e.plan_id,
            });
        }
        SubscriptionState::Paused => return Err(SubscriptionError::Paused(id)),
        SubscriptionState::Cancelled => return Err(SubscriptionError::Cancelled(id)),
        SubscriptionState::Active => {}
    }
    if now >= e.paid_through.saturating_add(grace.as_secs()) {
        return Err(SubscriptionError::Overdue {
            id,
            paid_through: e.paid_through,
        });
    }
    Ok(VerifiedSubscription {
        id,
        plan_id: e.plan_id,
        subscriber: e.subscriber,
        paid_through: e.paid_through,
    })
}

/// The events after which a cached status may be wrong.
fn invalidating_topics() -> Vec<B256> {
    vec![
        Contract::SubscriptionPaused::SIGNATURE_HASH,
        Contract::SubscriptionCancelled::SIGNATURE_HASH,
        Contract::SubscriptionResumed::SIGNATURE_HASH,
        Contract::SubscriptionRenewed::SIGNATURE_HASH,
        Contract::RenewalFailed::SIGNATURE_HASH,
    ]
}

/// The watcher: every `interval`, reads the chain's head and clock and the contract's
/// invalidating events since the last block seen, and evicts their ids (topic 1).
async fn watch(chain: Arc<dyn Chain>, contract: Address, interval: Duration, shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<u64> = None;
    loop {
        tick.tick().await;
        if let Err(e) = poll(&*chain, contract, &shared, &mut last).await {
            tracing::warn!(error = %e, "cannot poll the subscriptions contract's events; cached statuses expire with their TTL");
        }
    }
}

async fn poll(
    chain: &dyn Chain,
    contract: Address,
    shared: &Shared,
    last: &mut Option<u64>,
) -> tollgate_chain::Result<()> {
    let head = chain.block_number().await?;
    shared.observe_time(chain.timestamp().await?);
    let Some(from) = *last else {
        // Statuses read before the watcher knew where to start may predate an event it will
        // not see.
        shared.clear();
        *last = Some(head);
        return Ok(());
    };
    if head <= from {
        return Ok(());
    }
    let filter = LogFilter {
        from_block: from + 1,
        to_block: Some(head),
        addresses: vec![contract],
        topics: [Some(invalidating_topics()), None, None, None],
    };
    let logs = chain.logs(&filter).await?;
    let ids: Vec<B256> = logs
        .iter()
        .filter_map(|l| l.log.topics().get(1).copied())
        .collect();
    if !ids.is_empty() {
        tracing::debug!(
            count = ids.len(),
            "subscription events: evicting cached statuses"
        );
        shared.evict(ids);
    }
    *last = Some(head);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(state: SubscriptionState, plan: u8, paid_through: u64) -> Entry {
        Entry {
            state,
            plan_id: B256::repeat_byte(plan),
            subscriber: Address::repeat_byte(9),
            paid_through,
            read_at: Instant::now(),
        }
    }

    #[test]
    fn ids_parse_strictly() {
        let id = format!("0x{}", "ab".repeat(32));
        assert_eq!(parse_subscription_id(&id).unwrap(), B256::repeat_byte(0xab));
        assert_eq!(
            parse_subscription_id(&format!(" {id} ")).unwrap(),
            B256::repeat_byte(0xab)
        );
        for bad in [
            "",
            "0x",
            "ab".repeat(32).as_str(),
            "0x12",
            &format!("0x{}", "zz".repeat(32)),
            &format!("{id}00"),
        ] {
            assert!(
                matches!(
                    parse_subscription_id(bad),
                    Err(SubscriptionError::Malformed)
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn decisions() {
        let id = B256::repeat_byte(1);
        let ok = [B256::repeat_byte(7)];
        let d = |e: Entry, now| decide(id, &e, &ok, now, Duration::ZERO);
        assert!(d(entry(SubscriptionState::Active, 7, 100), 99).is_ok());
        assert!(matches!(
            d(entry(SubscriptionState::Active, 7, 100), 100),
            Err(SubscriptionError::Overdue { .. })
        ));
        assert!(
            decide(
                id,
                &entry(SubscriptionState::Active, 7, 100),
                &ok,
                105,
                Duration::from_secs(10)
            )
            .is_ok()
        );
        assert!(matches!(
            d(entry(SubscriptionState::Active, 8, 100), 1),
            Err(SubscriptionError::ForeignPlan { .. })
        ));
        assert!(matches!(
            d(entry(SubscriptionState::Paused, 7, 100), 1),
            Err(SubscriptionError::Paused(_))
        ));
        assert!(matches!(
            d(entry(SubscriptionState::Cancelled, 7, 100), 1),
            Err(SubscriptionError::Cancelled(_))
        ));
        assert!(matches!(
            d(entry(SubscriptionState::None, 0, 0), 1),
            Err(SubscriptionError::Unknown(_))
        ));
    }

    #[test]
    fn an_eviction_voids_reads_that_started_before_it() {
        let s = Shared::default();
        let id = B256::repeat_byte(1);
        let epoch = s.epoch.load(Ordering::SeqCst);
        s.evict([B256::repeat_byte(2)]);
        s.insert(id, entry(SubscriptionState::Active, 7, 100), epoch);
        assert!(s.cached(id, Duration::from_secs(60)).is_none());
        let epoch = s.epoch.load(Ordering::SeqCst);
        s.insert(id, entry(SubscriptionState::Active, 7, 100), epoch);
        assert!(s.cached(id, Duration::from_secs(60)).is_some());
        s.evict([id]);
        assert!(s.cached(id, Duration::from_secs(60)).is_none());
    }
}
