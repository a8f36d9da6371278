//! Working beside other replicas on one database: the leases this replica holds.
//!
//! Several facilitator replicas may share one store (PostgreSQL) behind a load balancer. What
//! only one of them may do at a time is done under a lease of the store's
//! ([`Store::acquire_lease`](crate::store::Store::acquire_lease)), taken, renewed and given up
//! through this module:
//!
//! - **`relayer:<address>`**: sending from a relayer account. Its nonces are one sequence, so two
//!   replicas sending from one key would race for them; a replica sends only from the accounts
//!   it holds. A replica that holds none (more replicas than keys) still verifies, answers status
//!   reads and serves the dashboard; its sending endpoints answer 503 `Unavailable` before
//!   anything is written, so that the load balancer retries them elsewhere, and `/readyz` says so.
//! - **`keeper`**: the renewal keeper, the overage batches and the chain-log indexer.
//! - **`reconciler`**: driving unfinished `/authorize` settlements (any replica's) to their end.
//! - **`webhooks:<endpoint>`**: delivering one endpoint's queue, in event order.
//!
//! A lease runs for [`Settings::lease_ttl`](crate::Settings::lease_ttl) on the database's clock and
//! is renewed every third of it. This replica stops acting under a lease a third of the TTL
//! before it could lapse, counted from before the renewal was sent, so that a replica stalled
//! past its lease (a pause, a lost connection) never acts beside the next holder. A relayer
//! account taken over (from a replica that died) starts from the node's pending nonce, and the
//! dead replica's unfinished settlements are picked up by the reconciler: found mined, waited
//! for, or sent again when the node dropped them (the token takes each authorization once, so
//! never twice).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::primitives::Address;

use crate::{facilitator::Core, store::StoreResult};

/// Default [`Settings::lease_ttl`](crate::Settings::lease_ttl).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);

/// The lease of the keeper (renewals, overage batches, the chain-log indexer).
pub(crate) const KEEPER: &str = "keeper";
/// The lease of the settlement reconciler.
pub(crate) const RECONCILER: &str = "reconciler";

/// The prefix of the lease each live replica holds on its own name (to count the replicas).
const REPLICA_PREFIX: &str = "replica:";

/// After how many lease TTLs a lapsed replica lease is deleted (its process is long gone, or
/// restarted under the same configured id and holding a new tenure).
const LAPSED_REPLICA_TTLS: u32 = 20;

/// The lease name of a relayer account.
pub(crate) fn relayer_lease(relayer: Address) -> String {
    format!("relayer:{relayer:#x}")
}

/// The lease name of a webhook endpoint's queue.
pub(crate) fn webhook_lease(endpoint_id: &str) -> String {
    format!("webhooks:{endpoint_id}")
}

/// This replica holds no relayer account's lease: other replicas hold them all (more replicas
/// than relayer keys). It cannot send; the request should go to another replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "this replica holds no relayer account (each is leased to another replica, or the store \
     could not be reached to lease one); it verifies and answers status reads, and sends nothing"
)]
pub struct NoRelayer;

/// A lease held: its fencing token, and until when this replica acts under it.
#[derive(Clone, Copy, Debug)]
struct Held {
    token: u64,
    until: Instant,
}

/// This replica's identity and the leases it holds.
#[derive(Debug)]
pub(crate) struct Leases {
    /// The holder name written to the store: unique per process.
    pub(crate) id: String,
    ttl: Duration,
    held: Mutex<HashMap<String, Held>>,
    /// Set once the replica gave its leases up (shutting down): none is taken again.
    closed: std::sync::atomic::AtomicBool,
}

/// A replica id, `host/pid-namespace/pid/random`: a restarted process is a new holder, so it
/// never mistakes a lease of its previous life for its own, and a process of the same host (and
/// PID namespace) can tell that a holder is dead ([`dead_neighbour`]).
pub(crate) fn replica_id() -> String {
    let suffix = alloy::primitives::FixedBytes::<4>::random();
    format!(
        "{}/{}/{}/{suffix:x}",
        host(),
        pid_namespace().unwrap_or_else(|| "-".to_owned()),
        std::process::id()
    )
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().replace('/', "_"))
        .unwrap_or_else(|_| "host".to_owned())
}

/// This process's PID namespace (`/proc/self/ns/pid` → `pid:[4026531836]`), where it can be read.
fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let s = link.to_string_lossy();
    Some(
        s.trim_start_matches("pid:[")
            .trim_end_matches(']')
            .to_owned(),
    )
}

/// Whether `holder` (a [`replica_id`]) is a process of this host and PID namespace that no
/// longer exists: its leases can be taken at once instead of after their TTL (a replica
/// restarted after a crash, a neighbour killed). A holder of another host, or an id set in the
/// configuration, is never judged dead: its leases lapse by themselves.
pub(crate) fn dead_neighbour(holder: &str) -> bool {
    let mut parts = holder.split('/');
    let (Some(h), Some(ns), Some(pid), Some(_), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    ns != "-"
        && Some(ns) == pid_namespace().as_deref()
        && h == host()
        && pid != std::process::id()
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl Leases {
    pub(crate) fn new(id: String, ttl: Duration) -> Self {
        Self {
            id,
            ttl: ttl.max(Duration::from_millis(300)),
            held: Mutex::new(HashMap::new()),
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The TTL of this replica's leases.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The token of `name` while this replica may act under it.
    pub(crate) fn token(&self, name: &str) -> Option<u64> {
        self.map()
            .get(name)
            .filter(|h| h.until > Instant::now())
            .map(|h| h.token)
    }

    /// Whether this replica may still act under `name` for `span` from now.
    pub(crate) fn holds_for(&self, name: &str, span: Duration) -> bool {
        self.map()
            .get(name)
            .is_some_and(|h| h.until > Instant::now() + span)
    }

    /// Whether the lease of `name` should be renewed now (held, and a third of its TTL gone).
    fn due_for_renewal(&self, name: &str) -> bool {
        self.map()
            .get(name)
            .is_none_or(|h| h.until <= Instant::now() + self.ttl / 3)
    }

    /// Takes or renews `name`; its token when this replica holds it afterwards, and whether the
    /// tenure is new (the lease changed hands or lapsed since this replica last held it).
    pub(crate) async fn take(&self, f: &Core, name: &str) -> StoreResult<Option<(u64, bool)>> {
        self.take_for(f, name, self.ttl).await
    }

    /// [`take`](Self::take) for `ttl` rather than the replica's lease TTL.
    pub(crate) async fn take_for(
        &self,
        f: &Core,
        name: &str,
        ttl: Duration,
    ) -> StoreResult<Option<(u64, bool)>> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(None);
        }
        let started = Instant::now();
        let mut token = f.store().acquire_lease(name, &self.id, ttl).await?;
        if token.is_none()
            && let Some(l) = f
                .store()
                .leases(name)
                .await?
                .into_iter()
                .find(|l| l.name == name)
            && dead_neighbour(&l.holder)
        {
            token = f
                .store()
                .take_over_lease(name, &self.id, &l.holder, l.token, ttl)
                .await?;
            if token.is_some() {
                tracing::info!(lease = name, from = %l.holder, "lease taken over from a process of this host that is gone");
            }
        }
        let mut map = self.map();
        let Some(token) = token else {
            map.remove(name);
            return Ok(None);
        };
        let until = started + ttl - ttl / 3;
        let previous = map.insert(name.to_owned(), Held { token, until });
        let fresh = previous.is_none_or(|p| p.token != token);
        if fresh {
            tracing::debug!(lease = name, token, replica = %self.id, "lease taken");
        }
        Ok(Some((token, fresh)))
    }

    /// [`take`](Self::take) only when the lease is not held or due for renewal.
    pub(crate) async fn keep(&self, f: &Core, name: &str) -> StoreResult<Option<(u64, bool)>> {
        if !self.due_for_renewal(name)
            && let Some(token) = self.token(name)
        {
            return Ok(Some((token, false)));
        }
        self.take(f, name).await
    }

    /// Stops acting under `name` and renewing it: it lapses after its TTL.
    pub(crate) fn forget(&self, name: &str) {
        self.map().remove(name);
    }

    /// Gives `name` up (another replica may take it at once).
    pub(crate) async fn give_up(&self, f: &Core, name: &str) {
        let held = self.map().remove(name);
        if let Some(h) = held
            && let Err(e) = f.store().release_lease(name, &self.id, h.token).await
        {
            tracing::warn!(lease = name, error = %e, "could not release a lease (it lapses by itself)");
        }
    }

    /// Gives every lease up, for good: none is taken again (background tasks still running
    /// while the replica shuts down would otherwise take them back).
    pub(crate) async fn give_up_all(&self, f: &Core) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        let names: Vec<String> = self.map().keys().cloned().collect();
        for name in names {
            self.give_up(f, &name).await;
        }
    }
}

impl Core {
    /// This replica's id: the holder name of its leases in the store.
    pub(crate) fn replica_id(&self) -> &str {
        &self.leases.id
    }

    /// The relayer accounts this replica sends from now (those whose lease it holds), in
    /// configuration order.
    pub(crate) fn held_relayers(&self) -> Vec<Address> {
        self.relayers
            .iter()
            .copied()
            .filter(|r| self.leases.token(&relayer_lease(*r)).is_some())
            .collect()
    }

    /// Whether this replica holds `relayer`'s lease now (taking the leases first when it holds
    /// no relayer at all).
    pub(crate) async fn holds_relayer(&self, relayer: Address) -> bool {
        if self.held_relayers().is_empty() {
            self.hold_relayers().await;
        }
        self.leases.token(&relayer_lease(relayer)).is_some()
    }

    /// Renews this replica's relayer leases and evens them out across the live replicas: each
    /// holds its share, `ceil(accounts / live replicas)`, taking free (or lapsed) accounts in
    /// configuration order while under it and giving up its last ones while over it (never the
    /// first account, which creates plans and charges overage). Replicas count themselves by a
    /// `replica:<id>` lease each. An account newly held starts from the node's pending nonce.
    /// The accounts held afterwards.
    pub(crate) async fn hold_relayers(&self) -> Vec<Address> {
        let leases = &self.leases;
        let me = format!("{REPLICA_PREFIX}{}", leases.id);
        let live = match async {
            leases.keep(self, &me).await?;
            self.store().leases(REPLICA_PREFIX).await
        }
        .await
        {
            Ok(all) => {
                // Every process start leaves a lease of its own name behind once it is gone:
                // the ones lapsed long ago are deleted (by whichever replica sees them).
                if all.iter().any(|l| !l.live)
                    && let Err(e) = self
                        .store()
                        .prune_leases(REPLICA_PREFIX, leases.ttl * LAPSED_REPLICA_TTLS)
                        .await
                {
                    tracing::debug!(error = %e, "cannot prune lapsed replica leases");
                }
                all.iter().filter(|l| l.live).count().max(1)
            }
            Err(e) => {
                tracing::warn!(error = %e, "relayer leases: store unavailable");
                return self.held_relayers();
            }
        };
        let share = self.relayers.len().div_ceil(live);
        let mut held = 0;
        for (i, r) in self.relayers.clone().into_iter().enumerate() {
            let name = relayer_lease(r);
            let mine = leases.token(&name).is_some();
            if mine && held >= share && i > 0 {
                // Not released but left to lapse: a send from it may still be on its way to the
                // node, and the next holder reads the account's nonce only after the TTL.
                tracing::info!(relayer = %r, share, live, "relayer lease left to lapse, to even out the replicas");
                leases.forget(&name);
                continue;
            }
            if !mine && held >= share {
                continue;
            }
            match leases.keep(self, &name).await {
                Ok(Some((token, fresh))) => {
                    held += 1;
                    if fresh {
                        tracing::info!(relayer = %r, token, replica = %leases.id, "relayer account taken");
                        for n in self.networks.values() {
                            n.chain.forget_nonce(r);
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(relayer = %r, error = %e, "relayer lease: store unavailable")
                }
            }
        }
        self.held_relayers()
    }

    /// Whether this replica runs the keeper now: it holds the first relayer account (the
    /// operator of every plan it created, which sends their overage charges) and the `keeper`
    /// lease.
    pub(crate) async fn leads_keeper(&self) -> bool {
        let first = self.relayers[0];
        if !self.holds_relayer(first).await {
            if self.leases.token(KEEPER).is_some() {
                self.leases.give_up(self, KEEPER).await;
            }
            return false;
        }
        self.lead(KEEPER).await
    }

    /// Whether this replica holds the lease `name` now, taking or renewing it when due.
    pub(crate) async fn lead(&self, name: &str) -> bool {
        match self.leases.keep(self, name).await {
            Ok(held) => held.is_some(),
            Err(e) => {
                tracing::warn!(lease = name, error = %e, "lease: store unavailable");
                false
            }
        }
    }

    /// Gives up every lease this replica holds, for good (at shutdown: the others take them over
    /// at once instead of after the TTL; this replica sends nothing more).
    pub(crate) async fn release_leases(&self) {
        self.leases.give_up_all(self).await;
    }

    /// Renews this replica's leases until dropped: relayer accounts, and the keeper's while it
    /// runs (the keeper and reconciler take theirs themselves).
    pub(crate) async fn keep_leases(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.leases.ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.hold_relayers().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_gone_process_of_this_host_and_namespace_is_dead() {
        let me = replica_id();
        assert!(!dead_neighbour(&me), "this process is alive");
        let parts: Vec<&str> = me.split('/').collect();
        assert_eq!(parts.len(), 4, "{me}");
        // Above any pid_max (2^22): no such process.
        let gone = format!("{}/{}/{}/00", parts[0], parts[1], 5_000_000);
        assert_eq!(dead_neighbour(&gone), parts[1] != "-");
        let elsewhere = format!("another-host/{}/{}/00", parts[1], 5_000_000);
        assert!(!dead_neighbour(&elsewhere), "another host's process");
        let other_ns = format!("{}/1/{}/00", parts[0], 5_000_000);
        assert!(
            !dead_neighbour(&other_ns),
            "another PID namespace's process"
        );
        assert!(
            !dead_neighbour("facilitator-1"),
            "an id from the configuration"
        );
    }
}
