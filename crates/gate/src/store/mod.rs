//! The once-only set: which memos (and which x402 authorizations) were used.
//!
//! Memos are verified without storage; only "was this one used already" needs it. Each entry
//! carries an expiry after which it can never be accepted again anyway (the memo's own expiry, or
//! the x402 authorization's `validBefore`), so expired entries are pruned.
//!
//! Two implementations, each behind a cargo feature of this crate: `SqliteMemoStore` (feature
//! `sqlite`, on by default; a file, or `sqlite::memory:` for a single process) and
//! `PostgresMemoStore` (feature `postgres`, off by default; for several gate replicas sharing one
//! set). [`open`] names the missing feature when a URL needs a store that is compiled out.

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::{fmt, sync::Arc};

use alloy::primitives::B256;
use async_trait::async_trait;

#[cfg(feature = "postgres")]
pub use postgres::PostgresMemoStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteMemoStore;

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

/// Opens a memo store by URL: `sqlite::memory:` (one process only), `sqlite://<path>` (created if
/// missing), or `postgres://…` / `postgresql://…` (table `tollgate_gate_memos`, created if missing).
/// A URL whose store this build left out (features `sqlite`, `postgres`) is a
/// [`StoreError::Config`] naming the feature.
pub async fn open(url: &str) -> Result<Arc<dyn MemoStore>, StoreError> {
    if url.starts_with("sqlite:") {
        #[cfg(feature = "sqlite")]
        return Ok(Arc::new(sqlite::SqliteMemoStore::open(url).await?));
        #[cfg(not(feature = "sqlite"))]
        return Err(compiled_out("sqlite"));
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return Ok(Arc::new(
            postgres::PostgresMemoStore::connect(url, "tollgate_").await?,
        ));
        #[cfg(not(feature = "postgres"))]
        return Err(compiled_out("postgres"));
    } else {
        Err(StoreError::Config(format!(
            "memo store URL must start with sqlite: or postgres://, got {:?}",
            url.split(':').next().unwrap_or_default()
        )))
    }
}

/// The error for a URL whose store was compiled out of this build.
#[cfg(not(all(feature = "sqlite", feature = "postgres")))]
fn compiled_out(feature: &str) -> StoreError {
    StoreError::Config(format!(
        "this build of tollgate-gate has no {feature} memo store: enable the cargo feature \"{feature}\""
    ))
}

/// Clamps a unix-seconds expiry into the `BIGINT` both databases store.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn as_i64(secs: u64) -> i64 {
    i64::try_from(secs).unwrap_or(i64::MAX)
}

#[cfg(all(test, not(feature = "postgres")))]
mod tests {
    use super::*;

    /// Without the `postgres` feature, a PostgreSQL URL is refused up front, naming the feature
    /// (not a connection attempt, nor a "must start with sqlite:" puzzle).
    #[tokio::test]
    async fn a_compiled_out_store_names_its_feature() {
        let err = open("postgres://postgres@127.0.0.1:5432/test")
            .await
            .expect_err("no postgres store in this build");
        assert!(
            matches!(&err, StoreError::Config(m) if m.contains("feature \"postgres\"")),
            "{err}"
        );
    }
}
