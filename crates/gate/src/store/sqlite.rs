//! [`MemoStore`] on SQLite.

use std::path::Path;

use alloy::primitives::B256;
use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot};

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
/// One thread of the store's own holds a synchronous connection and group-commits: it runs each
/// batch of operations in arrival order in one transaction (one commit, one WAL sync) and answers
/// each after the commit, so concurrent requests share one commit instead of paying for one each.
/// Batches are formed on the gate's runtime, by a task that takes the operations waiting and
/// hands them to the thread together: on taking the first, it yields once, so the tasks that are
/// ready to run (other verifications on their way to their claim) add theirs first. A batch costs
/// one wake-up of the thread and one back to the runtime, however many operations it holds; a
/// lone claim waits for nothing (the runtime, idle, runs the task again at once). The thread and
/// the task end when the last clone of the store is dropped.
///
/// `sqlite::memory:` keeps the set in this process only; a file (`sqlite://gate.db`, or
/// `sqlite:gate.db`) survives restarts and can be shared by gate processes on one machine
/// (WAL, synchronous commits). Replicas on several machines need [`super::PostgresMemoStore`].
#[derive(Clone, Debug)]
pub struct SqliteMemoStore {
    ops: mpsc::Sender<Op>,
}

/// An operation waiting for the next group commit.
#[derive(Debug)]
enum Op {
    /// Record `key` unless recorded: `true` if this recorded it.
    Claim {
        key: B256,
        expires_at: i64,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    /// Delete `key`: `true` if it was recorded.
    Take {
        key: B256,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    /// Delete every entry expired at `now`: how many.
    Prune {
        now: i64,
        reply: oneshot::Sender<Result<u64, StoreError>>,
    },
}

impl Op {
    /// Answers with the rows the operation changed, or the batch's error.
    fn answer(self, changed: Result<usize, &str>) {
        let failed = |e: &str| StoreError::Sqlite(e.to_owned());
        // A caller that gave up waiting is no reason to fail the others.
        match self {
            Op::Claim { reply, .. } | Op::Take { reply, .. } => {
                let _ = reply.send(changed.map(|n| n > 0).map_err(failed));
            }
            Op::Prune { reply, .. } => {
                let _ = reply.send(changed.map(|n| n as u64).map_err(failed));
            }
        }
    }
}

/// Most operations committed together.
const MAX_BATCH: usize = 512;

/// Where the set lives.
#[derive(Debug, PartialEq, Eq)]
enum Location<'a> {
    Memory,
    File(&'a Path),
}

/// Reads `sqlite::memory:`, `sqlite://PATH` and `sqlite:PATH`, with the options `mode=memory`
/// and `mode=rwc` (create when missing, which every file store does anyway).
fn location(url: &str) -> Result<Location<'_>, StoreError> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .ok_or_else(|| StoreError::Config(format!("not a sqlite: URL: {url:?}")))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut memory = path == ":memory:";
    for option in query.split('&').filter(|o| !o.is_empty()) {
        match option {
            "mode=memory" => memory = true,
            "mode=rwc" => {}
            other => {
                return Err(StoreError::Config(format!(
                    "memo store URL option {other:?} is not supported (mode=rwc or mode=memory)"
                )));
            }
        }
    }
    match path {
        _ if memory => Ok(Location::Memory),
        "" => Err(StoreError::Config(format!(
            "memo store URL {url:?} names no file"
        ))),
        file => Ok(Location::File(Path::new(file))),
    }
}

/// Opens the connection and its table.
fn connect(at: &Location<'_>) -> Result<Connection, StoreError> {
    let sqlite = |e: rusqlite::Error| StoreError::Sqlite(e.to_string());
    let conn = match at {
        Location::Memory => Connection::open_in_memory().map_err(sqlite)?,
        Location::File(path) => {
            // Created 0600 before SQLite opens it (its -wal and -shm files take the database
            // file's mode), so the file never exists readable by others.
            create_private_file(path)?;
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let conn = Connection::open_with_flags(path, flags).map_err(sqlite)?;
            conn.busy_timeout(std::time::Duration::from_secs(5))
                .map_err(sqlite)?;
            // WAL, and a commit is on disk before it is answered.
            conn.pragma_update(None, "journal_mode", "WAL")
                .map_err(sqlite)?;
            conn.pragma_update(None, "synchronous", "FULL")
                .map_err(sqlite)?;
            conn
        }
    };
    conn.execute_batch(SCHEMA).map_err(sqlite)?;
    Ok(conn)
}

/// Batches handed to the store's thread at once: while the thread commits one, the next forms
/// (and waits here when the thread is slower than its callers, which makes the next one bigger).
const BATCHES_WAITING: usize = 2;

/// The runtime's side of the store: takes the operations waiting (up to [`MAX_BATCH`]) and hands
/// them to the thread as one batch, until every clone of the store is gone.
async fn form_batches(mut ops: mpsc::Receiver<Op>, batches: mpsc::Sender<Vec<Op>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(op) = ops.recv().await {
        batch.push(op);
        // The runtime runs every task ready before it comes back here (a worker with nothing
        // else to do, at once): the verifications among them add their claims to this batch
        // instead of waking the thread one by one.
        tokio::task::yield_now().await;
        while batch.len() < MAX_BATCH {
            match ops.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let full = std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH));
        if batches.send(full).await.is_err() {
            // The thread is gone (it could not open the database): the callers see their
            // answers dropped.
            return;
        }
    }
}

/// The store's thread: opens the database, says so, then commits the batches it is handed until
/// their sender is gone.
fn serve(
    at: &Location<'_>,
    mut batches: mpsc::Receiver<Vec<Op>>,
    opened: oneshot::Sender<Result<(), StoreError>>,
    answers: tokio::runtime::Handle,
) {
    let conn = match connect(at) {
        Ok(conn) => conn,
        Err(e) => {
            let _ = opened.send(Err(e));
            return;
        }
    };
    let mut statements = match Statements::prepare(&conn) {
        Ok(statements) => statements,
        Err(e) => {
            let _ = opened.send(Err(StoreError::Sqlite(e.to_string())));
            return;
        }
    };
    let _ = opened.send(Ok(()));
    while let Some(batch) = batches.blocking_recv() {
        let outcome = statements.commit(&conn, &batch);
        // Answered from a task on the gate's runtime: one wake-up crosses from this thread per
        // batch, and the callers' tasks are woken from inside the runtime (a wake-up from here
        // per caller costs each one a trip through the runtime's shared queue). A runtime that
        // is gone drops the task, and with it the answers: its callers are gone too.
        answers.spawn(async move {
            match outcome {
                Ok(changed) => {
                    for (op, n) in batch.into_iter().zip(changed) {
                        op.answer(Ok(n));
                    }
                }
                Err(e) => {
                    let e = e.to_string();
                    for op in batch {
                        op.answer(Err(&e));
                    }
                }
            }
        });
    }
}

/// The thread's statements, prepared once for its life (SQLite would otherwise parse them again
/// for each batch).
struct Statements<'c> {
    begin: rusqlite::Statement<'c>,
    commit: rusqlite::Statement<'c>,
    rollback: rusqlite::Statement<'c>,
    claim: rusqlite::Statement<'c>,
    take: rusqlite::Statement<'c>,
    prune: rusqlite::Statement<'c>,
}

impl<'c> Statements<'c> {
    fn prepare(conn: &'c Connection) -> rusqlite::Result<Self> {
        Ok(Self {
        begin: conn.prepare("BEGIN IMMEDIATE")?,
        commit: conn.prepare("COMMIT")?,
        rollback: conn.prepare("ROLLBACK")?,
        claim: conn.prepare(
            "INSERT INTO gate_memos (key, expires_at) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
        )?,
        take: conn.prepare("DELETE FROM gate_memos WHERE key = ?1")?,
        prune: conn.prepare("DELETE FROM gate_memos WHERE expires_at <= ?1")?,
        })
    }

    /// Runs `batch` in arrival order in one transaction; per operation, the rows it changed. A
    /// key claimed twice in one batch is recorded by its first claim; the others find it
    /// recorded. Nothing is answered before the commit, and a failed batch changes nothing.
    fn commit(&mut self, conn: &Connection, batch: &[Op]) -> rusqlite::Result<Vec<usize>> {
        self.begin.execute([])?;
        let run = |s: &mut Self| -> rusqlite::Result<Vec<usize>> {
            let mut changed = Vec::with_capacity(batch.len());
            for op in batch {
                changed.push(match op {
                    Op::Claim {
                        key, expires_at, ..
                    } => s.claim.execute((key.as_slice(), expires_at))?,
                    Op::Take { key, .. } => s.take.execute([key.as_slice()])?,
                    Op::Prune { now, .. } => s.prune.execute([now])?,
                });
            }
            s.commit.execute([])?;
            Ok(changed)
        };
        let outcome = run(self);
        if outcome.is_err() && !conn.is_autocommit() {
            // Undone whole; a rollback that fails leaves SQLite to roll back on its own.
            let _ = self.rollback.execute([]);
        }
        outcome
    }
}

impl SqliteMemoStore {
    /// Opens (creating if missing) the database at `url` and its table, on a thread of the
    /// store's own.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let at = location(url)?;
        let path = match at {
            Location::Memory => None,
            Location::File(p) => Some(p.to_owned()),
        };
        let (ops, waiting) = mpsc::channel::<Op>(4 * MAX_BATCH);
        let (batches, rx) = mpsc::channel::<Vec<Op>>(BATCHES_WAITING);
        let (opened, ready) = oneshot::channel();
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            StoreError::Config(format!(
                "the SQLite memo store runs on a Tokio runtime: {e}"
            ))
        })?;
        let answers = runtime.clone();
        std::thread::Builder::new()
            .name("tollgate-memos".into())
            .spawn(move || {
                let at = path.as_deref().map_or(Location::Memory, Location::File);
                serve(&at, rx, opened, answers);
            })
            .map_err(|e| StoreError::Sqlite(format!("cannot start the memo store thread: {e}")))?;
        ready
            .await
            .map_err(|_| StoreError::Sqlite("the memo store thread stopped".into()))??;
        runtime.spawn(form_batches(waiting, batches));
        Ok(Self { ops })
    }

    /// Sends `op` to the store's thread and waits for its answer.
    async fn run<T>(
        &self,
        op: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Op,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Sqlite("the memo store thread stopped".into());
        self.ops.send(op(reply)).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// Creates `path` empty with mode 0600 (whatever the umask) unless it exists (then it keeps its
/// mode). SQLite takes an empty file for a new database.
fn create_private_file(path: &Path) -> Result<(), StoreError> {
    let io = |e: std::io::Error| StoreError::Sqlite(format!("{}: {e}", path.display()));
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
                    .map_err(io)?;
            }
            drop(file);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io(e)),
    }
}

#[async_trait]
impl MemoStore for SqliteMemoStore {
    async fn claim(&self, key: B256, expires_at: u64) -> Result<bool, StoreError> {
        let expires_at = as_i64(expires_at);
        self.run(|reply| Op::Claim {
            key,
            expires_at,
            reply,
        })
        .await
    }

    async fn release(&self, key: B256) -> Result<(), StoreError> {
        // The same statement as `take`: a release is a take whose answer nobody needs.
        self.take(key).await.map(drop)
    }

    async fn take(&self, key: B256) -> Result<bool, StoreError> {
        self.run(|reply| Op::Take { key, reply }).await
    }

    async fn prune(&self, now: u64) -> Result<u64, StoreError> {
        let now = as_i64(now);
        self.run(|reply| Op::Prune { now, reply }).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn urls_name_memory_or_a_file() {
        assert_eq!(location("sqlite::memory:").unwrap(), Location::Memory);
        assert_eq!(
            location("sqlite://x.db?mode=memory").unwrap(),
            Location::Memory
        );
        assert_eq!(
            location("sqlite://state/x.db?mode=rwc").unwrap(),
            Location::File(Path::new("state/x.db"))
        );
        assert_eq!(
            location("sqlite:/var/x.db").unwrap(),
            Location::File(Path::new("/var/x.db"))
        );
        for bad in ["sqlite://", "sqlite://x.db?cache=shared", "postgres://x"] {
            assert!(matches!(location(bad), Err(StoreError::Config(_))), "{bad}");
        }
    }

    /// A file that cannot be opened fails the open, with SQLite's or the system's reason.
    #[tokio::test]
    async fn an_unopenable_file_is_an_error_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/missing/dir/x.db", dir.path().display());
        let err = SqliteMemoStore::open(&url)
            .await
            .expect_err("no such directory");
        assert!(matches!(err, StoreError::Sqlite(_)), "{err}");
    }

    /// A batch that cannot commit (another process holds the write lock past the busy timeout)
    /// answers every claim in it with the error and records none of them: the same keys can be
    /// claimed once the lock is gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_that_cannot_commit_records_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memos.db");
        let s = Arc::new(
            SqliteMemoStore::open(&format!("sqlite://{}", path.display()))
                .await
                .unwrap(),
        );
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let claims: Vec<_> = (1..=3u8)
            .map(|i| {
                let s = Arc::clone(&s);
                tokio::spawn(async move { s.claim(B256::repeat_byte(i), 1_000).await })
            })
            .collect();
        for claim in claims {
            let err = claim.await.unwrap().expect_err("the database is locked");
            assert!(
                matches!(&err, StoreError::Sqlite(m) if m.contains("locked")),
                "{err}"
            );
        }
        other.execute_batch("ROLLBACK").unwrap();
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
        let url = format!("sqlite://{}", dir.path().join("memos.db").display());
        let s = SqliteMemoStore::open(&url).await.unwrap();
        assert!(s.claim(B256::repeat_byte(9), 1_000).await.unwrap());
        drop(s);
        let s = SqliteMemoStore::open(&url).await.unwrap();
        assert!(!s.claim(B256::repeat_byte(9), 1_000).await.unwrap());
        assert!(s.take(B256::repeat_byte(9)).await.unwrap());
        assert!(!s.take(B256::repeat_byte(9)).await.unwrap());
    }

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
