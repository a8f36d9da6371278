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
/// Claims are group-committed: one writer task takes every claim waiting (up to 512), records
/// them with one multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING key` (one statement, one
/// transaction, one WAL sync) and answers each after the commit, so concurrent requests share
/// one commit instead of paying for one each.
///
/// `sqlite::memory:` keeps the set in this process only (one connection, kept open); a file
/// (`sqlite://gate.db`) survives restarts and can be shared by gate processes on one machine.
/// Replicas on several machines need [`super::PostgresMemoStore`].
#[derive(Clone, Debug)]
pub struct SqliteMemoStore {
    pool: SqlitePool,
    claims: tokio::sync::mpsc::Sender<Claim>,
}

/// A claim waiting for the next group commit.
#[derive(Debug)]
struct Claim {
    key: B256,
    expires_at: u64,
    reply: tokio::sync::oneshot::Sender<Result<bool, StoreError>>,
}

/// Most claims committed together.
const MAX_BATCH: usize = 512;

/// The group-commit task: ends when the last store clone is dropped.
fn spawn_writer(pool: SqlitePool) -> tokio::sync::mpsc::Sender<Claim> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Claim>(4 * MAX_BATCH);
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
            let outcome = claim_batch(&pool, &batch).await;
            for (c, won) in batch.drain(..).zip(outcome.winners) {
                let answer = match &outcome.committed {
                    Ok(()) => Ok(won),
                    Err(e) => Err(StoreError::Config(format!("memo store commit failed: {e}"))),
                };
                let _ = c.reply.send(answer);
            }
        }
    });
    tx
}

/// What one group commit decided.
struct BatchOutcome {
    /// Whether the statement committed.
    committed: Result<(), sqlx::Error>,
    /// Per claim, in order: whether it is the one that recorded its key.
    winners: Vec<bool>,
}

/// Claims a whole batch with one statement (its own transaction: one commit, one WAL sync, one
/// hand-off to SQLite's worker thread): `INSERT … VALUES (…), (…) ON CONFLICT DO NOTHING
/// RETURNING key` returns exactly the keys it recorded. A key claimed twice in one batch is
/// inserted once; its first claim is the winner, the others replays.
async fn claim_batch(pool: &SqlitePool, batch: &[Claim]) -> BatchOutcome {
    let mut first = std::collections::HashMap::with_capacity(batch.len());
    let mut winners = vec![false; batch.len()];
    for (i, c) in batch.iter().enumerate() {
        first.entry(c.key).or_insert(i);
    }
    let unique: Vec<(B256, i64)> = batch
        .iter()
        .enumerate()
        .filter(|(i, c)| first[&c.key] == *i)
        .map(|(_, c)| (c.key, as_i64(c.expires_at)))
        .collect();
    let mut insert =
        sqlx::QueryBuilder::<sqlx::Sqlite>::new("INSERT INTO gate_memos (key, expires_at) ");
    insert.push_values(&unique, |mut row, (key, expires_at)| {
        row.push_bind(key.to_vec()).push_bind(*expires_at);
    });
    insert.push(" ON CONFLICT (key) DO NOTHING RETURNING key");
    let recorded: Result<Vec<Vec<u8>>, sqlx::Error> =
        insert.build_query_scalar().fetch_all(pool).await;
    let committed = recorded.map(|keys| {
        for key in keys {
            if let Some(&i) = B256::try_from(key.as_slice())
                .ok()
                .and_then(|k| first.get(&k))
            {
                winners[i] = true;
            }
        }
    });
    BatchOutcome { committed, winners }
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
            // Created 0600 before SQLite opens it (its -wal and -shm files take the database
            // file's mode), so the file never exists readable by others.
            create_private_file(options.get_filename())?;
            // One connection: claims are serialized (and batched) by the writer task anyway.
            SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(options.journal_mode(SqliteJournalMode::Wal))
                .await?
        };
        sqlx::raw_sql(SCHEMA).execute(&pool).await?;
        let claims = spawn_writer(pool.clone());
        Ok(Self { pool, claims })
    }
}

/// Creates `path` empty with mode 0600 (whatever the umask) unless it exists (then it keeps its
/// mode). SQLite takes an empty file for a new database.
fn create_private_file(path: &std::path::Path) -> Result<(), StoreError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(file) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                file.set_permissions(std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
            }
            drop(file);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Database(sqlx::Error::Io(e))),
    }
}

#[async_trait]
impl MemoStore for SqliteMemoStore {
    async fn claim(&self, key: B256, expires_at: u64) -> Result<bool, StoreError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let closed = || StoreError::Database(sqlx::Error::PoolClosed);
        self.claims
            .send(Claim {
                key,
                expires_at,
                reply,
            })
            .await
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    async fn release(&self, key: B256) -> Result<(), StoreError> {
        // The same statement as `take`: a release is a take whose answer nobody needs.
        self.take(key).await.map(drop)
    }

    async fn take(&self, key: B256) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM gate_memos WHERE key = ?")
            .bind(key.as_slice())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
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

    #[cfg(unix)]
    #[tokio::test]
    async fn the_database_and_its_wal_files_are_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memos.db");
        let s = SqliteMemoStore::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        assert!(s.claim(B256::repeat_byte(1), 100).await.unwrap());
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("memos.db{suffix}"));
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}: {mode:03o}", file.display());
        }
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

    /// Claims of several keys at once, some repeated within one batch and one recorded before:
    /// each new key has exactly one winner, the old one none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_batch_of_mixed_claims_has_one_winner_per_new_key() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("memos.db").display());
        let s = Arc::new(SqliteMemoStore::open(&url).await.unwrap());
        assert!(s.claim(B256::repeat_byte(0), 1_000).await.unwrap());
        let tasks: Vec<_> = (0..200u8)
            .map(|i| {
                let s = Arc::clone(&s);
                let k = B256::repeat_byte(i % 8);
                tokio::spawn(async move { (i % 8, s.claim(k, 1_000).await.unwrap()) })
            })
            .collect();
        let mut wins = [0; 8];
        for t in tasks {
            let (k, won) = t.await.unwrap();
            wins[usize::from(k)] += usize::from(won);
        }
        assert_eq!(wins, [0, 1, 1, 1, 1, 1, 1, 1]);
    }
}
