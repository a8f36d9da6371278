//! [`MemoStore`] on SQLite.

use std::str::FromStr;

use alloy::primitives::B256;
use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use super::{MemoStore, as_i64};
use crate::StoreError;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS gate_memos (
    key BLOB PRIMARY KEY NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS gate_memos_expires_at ON gate_memos (expires_at);";

/// The once-only set in SQLite: one table `gate_memos (key, expires_at)`. A claim is one
/// `INSERT … ON CONFLICT DO NOTHING`, which SQLite runs atomically (one writer at a time, with a
/// 5 s busy timeout across processes).
///
/// `sqlite::memory:` keeps the set in this process only (one connection, kept open); a file
/// (`sqlite://gate.db`) survives restarts and can be shared by gate processes on one machine.
/// Replicas on several machines need [`super::PostgresMemoStore`].
#[derive(Clone, Debug)]
pub struct SqliteMemoStore {
    pool: SqlitePool,
}

impl SqliteMemoStore {
    /// Opens (creating if missing) the database at `url` and its table.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let memory = url.contains(":memory:") || url.contains("mode=memory");
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .busy_timeout(std::time::Duration::from_secs(5));
        let pool = if memory {
            // Every connection to `:memory:` is a database of its own: keep exactly one, forever.
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(options)
                .await?
        } else {
            SqlitePoolOptions::new()
                .max_connections(4)
                .connect_with(options.journal_mode(SqliteJournalMode::Wal))
                .await?
        };
        sqlx::raw_sql(SCHEMA).execute(&pool).await?;
        Ok(Self { pool })
    }
}

#[async_trait]
impl MemoStore for SqliteMemoStore {
    async fn claim(&self, key: B256, expires_at: u64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO gate_memos (key, expires_at) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key.as_slice())
        .bind(as_i64(expires_at))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(&self, key: B256) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM gate_memos WHERE key = ?")
            .bind(key.as_slice())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn prune(&self, now: u64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM gate_memos WHERE expires_at <= ?")
            .bind(as_i64(now))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn claim_once_release_prune() {
        let s = SqliteMemoStore::open("sqlite::memory:").await.unwrap();
        let k = B256::repeat_byte(1);
        assert!(s.claim(k, 100).await.unwrap());
        assert!(!s.claim(k, 100).await.unwrap());
        s.release(k).await.unwrap();
        assert!(s.claim(k, 100).await.unwrap());
        assert!(s.claim(B256::repeat_byte(2), 200).await.unwrap());
        assert_eq!(s.prune(100).await.unwrap(), 1);
        assert!(!s.claim(B256::repeat_byte(2), 200).await.unwrap());
        assert!(s.claim(k, u64::MAX).await.unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_claims_on_a_file_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("memos.db").display());
        let s = Arc::new(SqliteMemoStore::open(&url).await.unwrap());
        let k = B256::repeat_byte(3);
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let s = Arc::clone(&s);
                tokio::spawn(async move { s.claim(k, 1_000).await.unwrap() })
            })
            .collect();
        let mut wins = 0;
        for t in tasks {
            wins += usize::from(t.await.unwrap());
        }
        assert_eq!(wins, 1);
    }
}
