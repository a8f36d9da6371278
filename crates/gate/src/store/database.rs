//! [`MemoStore`] on a database: `tollgate-store`'s [`MemoSet`], on SQLite (feature `sqlite`) or
//! PostgreSQL (feature `postgres`).

use alloy::primitives::B256;
use async_trait::async_trait;
use tollgate_store::MemoSet;

use super::MemoStore;
use crate::StoreError;

/// The once-only set in a database, through `tollgate-store`'s seam (one implementation for
/// SQLite and PostgreSQL; see [`MemoSet`]): one table of keys and expiries. A claim is a row of
/// a multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING key`; the claims waiting together
/// share one statement and one commit, answered only once it is durable; the primary key makes
/// exactly one of any number of concurrent claims win, across every process sharing the
/// database.
///
/// `sqlite::memory:` keeps the set in this process only; a file (`sqlite://gate.db`, or
/// `sqlite:gate.db`: table `gate_memos`, WAL, synchronous commits, created private to its
/// owner) survives restarts and can be shared by gate processes on one machine. Replicas on
/// several machines share PostgreSQL (`postgres://…`: table `tollgate_gate_memos`).
#[derive(Clone, Debug)]
pub struct DatabaseMemoStore {
    set: MemoSet,
}

impl DatabaseMemoStore {
    /// Opens the set at `url` (see [`MemoSet::open`]) and creates its table if missing.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Ok(Self {
            set: MemoSet::open(url).await.map_err(database)?,
        })
    }

    /// [`open`](Self::open) on PostgreSQL with the table in `schema`, created if missing (one
    /// database for several gates, or tests that isolate themselves).
    #[cfg(feature = "postgres")]
    pub async fn open_in_schema(url: &str, schema: &str) -> Result<Self, StoreError> {
        Ok(Self {
            set: MemoSet::open_in_schema(url, schema)
                .await
                .map_err(database)?,
        })
    }

    /// Closes its connections, waiting for those in use.
    pub async fn close(&self) {
        self.set.close().await;
    }
}

/// The store's error, as the gate's: a URL it does not take is configuration, anything else the
/// database's failure (its driver's error kept as the source, not named by the gate's type).
fn database(e: tollgate_store::StoreError) -> StoreError {
    match e {
        tollgate_store::StoreError::UnsupportedUrl(url) => {
            StoreError::Config(format!("unsupported memo store URL {url:?}"))
        }
        e => StoreError::Database(Box::new(e)),
    }
}

#[async_trait]
impl MemoStore for DatabaseMemoStore {
    async fn claim(&self, key: B256, expires_at: u64) -> Result<bool, StoreError> {
        self.set.claim(key, expires_at).await.map_err(database)
    }

    async fn release(&self, key: B256) -> Result<(), StoreError> {
        // A release is a take whose answer nobody needs.
        self.take(key).await.map(drop)
    }

    async fn take(&self, key: B256) -> Result<bool, StoreError> {
        self.set.take(key).await.map_err(database)
    }

    async fn prune(&self, now: u64) -> Result<u64, StoreError> {
        self.set.prune(now).await.map_err(database)
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::{error::Error as _, sync::Arc};

    use super::*;

    fn file_url(dir: &tempfile::TempDir) -> String {
        format!("sqlite://{}", dir.path().join("memos.db").display())
    }

    /// A file that cannot be opened fails the open, with SQLite's or the system's reason.
    #[tokio::test]
    async fn an_unopenable_file_is_an_error_at_open() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let url = format!("sqlite://{}/file/x.db", dir.path().display());
        let err = DatabaseMemoStore::open(&url)
            .await
            .expect_err("a file is in the way of the directory");
        assert!(matches!(err, StoreError::Database(_)), "{err}");
        assert!(err.source().is_some(), "the reason is kept: {err:?}");
    }

    /// A batch that cannot commit (another process holds the write lock past the busy timeout)
    /// answers every claim in it with the error and records none of them: the same keys can be
    /// claimed once the lock is gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_that_cannot_commit_records_nothing() {
        use sqlx::Connection as _;
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(DatabaseMemoStore::open(&file_url(&dir)).await.unwrap());
        let mut other = sqlx::SqliteConnection::connect(&file_url(&dir))
            .await
            .unwrap();
        sqlx::raw_sql("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();
        let claims: Vec<_> = (1..=3u8)
            .map(|i| {
                let s = Arc::clone(&s);
                tokio::spawn(async move { s.claim(B256::repeat_byte(i), 1_000).await })
            })
            .collect();
        for claim in claims {
            let err = claim.await.unwrap().expect_err("the database is locked");
            let reason = err.source().map(ToString::to_string).unwrap_or_default();
            assert!(reason.contains("locked"), "{err}: {reason}");
        }
        sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
        for i in 1..=3u8 {
            assert!(
                s.claim(B256::repeat_byte(i), 1_000).await.unwrap(),
                "key {i}"
            );
        }
    }

    /// Claims survive the store: a new store on the same file refuses a key claimed before.
    #[tokio::test]
    async fn claims_are_durable_across_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let s = DatabaseMemoStore::open(&file_url(&dir)).await.unwrap();
        assert!(s.claim(B256::repeat_byte(9), 1_000).await.unwrap());
        s.close().await;
        drop(s);
        let s = DatabaseMemoStore::open(&file_url(&dir)).await.unwrap();
        assert!(!s.claim(B256::repeat_byte(9), 1_000).await.unwrap());
        assert!(s.take(B256::repeat_byte(9)).await.unwrap());
        assert!(!s.take(B256::repeat_byte(9)).await.unwrap());
    }

    /// A set the gate's own SQLite store recorded before the move to `tollgate-store` (its
    /// table, keys as blobs) opens with every entry held: an upgrade replays nothing.
    #[tokio::test]
    async fn a_set_recorded_before_the_move_is_still_held() {
        use sqlx::Connection as _;
        let dir = tempfile::tempdir().unwrap();
        let mut before = sqlx::SqliteConnection::connect(&format!("{}?mode=rwc", file_url(&dir)))
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE TABLE gate_memos (key BLOB PRIMARY KEY NOT NULL, expires_at INTEGER NOT NULL);
             CREATE INDEX gate_memos_expires_at ON gate_memos (expires_at);",
        )
        .execute(&mut before)
        .await
        .unwrap();
        sqlx::query("INSERT INTO gate_memos (key, expires_at) VALUES (?, 1000)")
            .bind(B256::repeat_byte(7).as_slice())
            .execute(&mut before)
            .await
            .unwrap();
        before.close().await.unwrap();
        let s = DatabaseMemoStore::open(&file_url(&dir)).await.unwrap();
        assert!(!s.claim(B256::repeat_byte(7), 1_000).await.unwrap());
        assert!(s.claim(B256::repeat_byte(8), 1_000).await.unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite_in_memory_behaves_as_a_once_only_set() {
        let s = DatabaseMemoStore::open("sqlite::memory:").await.unwrap();
        crate::store::tests::behaves_as_a_once_only_set(Arc::new(s)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_sqlite_file_behaves_as_a_once_only_set() {
        let dir = tempfile::tempdir().unwrap();
        let s = DatabaseMemoStore::open(&file_url(&dir)).await.unwrap();
        crate::store::tests::behaves_as_a_once_only_set(Arc::new(s)).await;
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_database_and_its_wal_files_are_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let s = DatabaseMemoStore::open(&file_url(&dir)).await.unwrap();
        assert!(s.claim(B256::repeat_byte(1), 100).await.unwrap());
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("memos.db{suffix}"));
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}: {mode:03o}", file.display());
        }
    }
}
