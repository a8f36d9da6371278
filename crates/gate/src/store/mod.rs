//! The once-only set: which memos (and which x402 authorizations) were used.
//!
//! Memos are verified without storage; only "was this one used already" needs it. Each entry
//! carries an expiry after which it can never be accepted again anyway (the memo's own expiry, or
//! the x402 authorization's `validBefore`), so expired entries are pruned.
//!
//! Three sets, chosen by URL ([`open`]):
//!
//! - `memory:` ([`MemoryMemoStore`], the default): in this process's memory, always compiled in.
//!   Replays are refused while the process lives; a restart forgets the set, so a gate that
//!   restarts while proofs are still valid (a memo's lifetime, an x402 authorization's
//!   `validBefore`) needs a durable set.
//! - `sqlite://PATH` (feature `sqlite`) and `postgres://…` (feature `postgres`)
//!   ([`DatabaseMemoStore`]): `tollgate-store`'s [`MemoSet`](tollgate_store::MemoSet), the
//!   facilitator's own store seam with one implementation for both databases (each statement
//!   written once, claims group-committed: many concurrent claims share one commit). A file
//!   survives restarts and serves the gate processes of one machine; PostgreSQL serves replicas
//!   on several machines.
//!
//! Without either feature the gate compiles no database driver at all; [`open`] names the
//! missing feature when a URL needs a store that is compiled out.

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod database;
mod memory;

use std::{fmt, sync::Arc};

use alloy::primitives::B256;
use async_trait::async_trait;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use database::DatabaseMemoStore;
pub use memory::MemoryMemoStore;

use crate::StoreError;

/// The once-only set behind a gate. Implementations must make [`MemoStore::claim`] atomic: of any
/// number of concurrent claims of one key, across every process sharing the store, exactly one
/// returns `true`.
#[async_trait]
pub trait MemoStore: Send + Sync + fmt::Debug + 'static {
    /// Records `key` as used until `expires_at` (unix seconds). `true` if it was not recorded
    /// before (the caller may serve the request), `false` if it was (a replay).
    async fn claim(&self, key: B256, expires_at: u64) -> Result<bool, StoreError>;

    /// Forgets `key` (after a claim whose payment then failed for a reason that allows a retry).
    async fn release(&self, key: B256) -> Result<(), StoreError>;

    /// Forgets `key` and says whether it was recorded: of several concurrent callers, exactly
    /// one gets `true` (the gate takes up a payment left pending this way).
    async fn take(&self, key: B256) -> Result<bool, StoreError>;

    /// Deletes entries that expired at or before `now`; returns how many.
    async fn prune(&self, now: u64) -> Result<u64, StoreError>;
}

/// The memo store URL of a gate built without one: this process's memory.
pub const DEFAULT_URL: &str = "memory:";

/// Opens a memo store by URL: `memory:` (this process only), `sqlite::memory:` (SQLite in
/// memory, this process only), `sqlite://PATH` (created if missing), or `postgres://…` /
/// `postgresql://…` (table `tollgate_gate_memos`, created if missing). A URL whose store this
/// build left out (features `sqlite`, `postgres`) is a [`StoreError::Config`] naming the
/// feature.
pub async fn open(url: &str) -> Result<Arc<dyn MemoStore>, StoreError> {
    if url == DEFAULT_URL {
        Ok(Arc::new(MemoryMemoStore::default()))
    } else if url.starts_with("sqlite:") {
        #[cfg(feature = "sqlite")]
        return Ok(Arc::new(DatabaseMemoStore::open(url).await?));
        #[cfg(not(feature = "sqlite"))]
        return Err(compiled_out("sqlite"));
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return Ok(Arc::new(DatabaseMemoStore::open(url).await?));
        #[cfg(not(feature = "postgres"))]
        return Err(compiled_out("postgres"));
    } else {
        Err(StoreError::Config(format!(
            "memo store URL must be memory:, or start with sqlite: or postgres://, got {:?}",
            url.split(':').next().unwrap_or_default()
        )))
    }
}

/// The error for a URL whose store was compiled out of this build.
#[cfg_attr(all(feature = "sqlite", feature = "postgres"), allow(dead_code))]
fn compiled_out(feature: &str) -> StoreError {
    StoreError::Config(format!(
        "this build of tollgate-gate has no {feature} memo store: enable the cargo feature \
         \"{feature}\" (or use memory:, this process's memory)"
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What every store must do, checked on `s` (empty): a key is claimed once until released,
    /// taken or pruned; a take answers `true` once; of 50 concurrent claims of one key one wins;
    /// of concurrent claims of 8 keys, some recorded before, each new key has one winner; of 20
    /// concurrent takes of one key one gets it.
    pub(crate) async fn behaves_as_a_once_only_set(s: Arc<dyn MemoStore>) {
        let k = B256::repeat_byte(1);
        assert!(s.claim(k, 100).await.unwrap());
        assert!(!s.claim(k, 100).await.unwrap(), "a replay");
        s.release(k).await.unwrap();
        assert!(s.claim(k, 100).await.unwrap(), "released, so claimable");
        assert!(s.claim(B256::repeat_byte(2), 200).await.unwrap());
        assert_eq!(s.prune(100).await.unwrap(), 1);
        assert!(!s.claim(B256::repeat_byte(2), 200).await.unwrap());
        assert!(s.take(B256::repeat_byte(2)).await.unwrap());
        assert!(!s.take(B256::repeat_byte(2)).await.unwrap(), "taken once");
        assert!(s.claim(k, u64::MAX).await.unwrap(), "pruned, so claimable");

        let one_key = B256::repeat_byte(3);
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let s = Arc::clone(&s);
                tokio::spawn(async move { s.claim(one_key, 1_000).await.unwrap() })
            })
            .collect();
        let mut wins = 0;
        for t in tasks {
            wins += usize::from(t.await.unwrap());
        }
        assert_eq!(wins, 1, "one of 50 concurrent claims");

        let key = |i: u8| B256::repeat_byte(0x10 + i % 8);
        assert!(s.claim(key(0), 1_000).await.unwrap());
        let tasks: Vec<_> = (0..200u8)
            .map(|i| {
                let s = Arc::clone(&s);
                tokio::spawn(async move { (i % 8, s.claim(key(i), 1_000).await.unwrap()) })
            })
            .collect();
        let mut wins = [0; 8];
        for t in tasks {
            let (k, won) = t.await.unwrap();
            wins[usize::from(k)] += usize::from(won);
        }
        assert_eq!(wins, [0, 1, 1, 1, 1, 1, 1, 1], "one winner per new key");

        // A pending payment is taken up by exactly one of the callers that race for it.
        let held = B256::repeat_byte(0x20);
        assert!(s.claim(held, 1_000).await.unwrap());
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let s = Arc::clone(&s);
                tokio::spawn(async move { s.take(held).await.unwrap() })
            })
            .collect();
        let mut taken = 0;
        for t in tasks {
            taken += usize::from(t.await.unwrap());
        }
        assert_eq!(taken, 1, "one of 20 concurrent takes");
    }

    /// A URL of a store compiled out is refused up front (not a connection attempt, nor a "must
    /// start with sqlite:" puzzle), naming the feature to enable and the store that needs none.
    #[test]
    fn a_compiled_out_store_names_its_feature() {
        let StoreError::Config(m) = compiled_out("postgres") else {
            panic!("a configuration error");
        };
        assert!(m.contains("cargo feature \"postgres\""), "{m}");
        assert!(m.contains("memory:"), "{m}");
    }

    #[tokio::test]
    async fn an_unknown_scheme_is_a_config_error() {
        let err = open("redis://127.0.0.1").await.expect_err("no such store");
        assert!(
            matches!(&err, StoreError::Config(m) if m.contains("\"redis\"")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn the_default_is_this_process_memory() {
        let s = open(DEFAULT_URL).await.unwrap();
        assert!(s.claim(B256::repeat_byte(1), 10).await.unwrap());
        assert!(!s.claim(B256::repeat_byte(1), 10).await.unwrap());
    }
}
