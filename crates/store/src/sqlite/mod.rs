//! [`Store`](crate::Store) on SQLite: one file in WAL mode, written through a single connection.
//!
//! SQLite runs one write transaction at a time per database whatever the pool does, so the store
//! keeps a *write pool of exactly one connection* (writers queue in the pool, fairly and without
//! burning `SQLITE_BUSY` retries) and a *read pool* of a few `query_only` connections that WAL lets
//! run beside the writer. The 5 s busy timeout still covers another process holding the lock
//! (an operator's `sqlite3` shell, a second facilitator pointed at the same file by mistake).
//!
//! Writes are *group-committed* (see `group`): a writer task owns the write connection, takes
//! every write that is waiting (up to 256), runs them in one `BEGIN IMMEDIATE … COMMIT`
//! transaction and answers each caller only after the commit, so many concurrent settlements
//! share one fsync (`synchronous = FULL` stays the default without costing a disk flush per
//! write). Each write is all or nothing: a batch in which one failed runs again with each write
//! in a savepoint of its own, so that its failure undoes it alone. The few writes that must return the row (`insert_settlement`,
//! `mark_confirmed`) use `RETURNING` and, only when their statement changed nothing, read the
//! row back in the same transaction.

use std::{path::Path, str::FromStr, time::Duration};

use sqlx::{
    SqliteConnection,
    pool::PoolConnection,
    sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
    },
};

use crate::{
    DeductOutcome, Deduction, Relay, RelayBounds, RelayOutcome, StoreError, StoreResult,
    backend::{Backend, BoxFuture},
    group::{self, Merge, Writer},
    metering, migrations, relays,
};

/// When SQLite forces a commit to disk (`PRAGMA synchronous`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// `FULL`: the WAL is synced at every commit. A commit that returned survives power loss
    /// and an OS crash. The default: a confirmed settlement and its proof are money.
    #[default]
    Full,
    /// `NORMAL`: the WAL is synced only at checkpoints. A commit survives the process crashing,
    /// but the last commits may roll back on power loss or an OS crash (the database stays
    /// consistent). The chain still holds the transfers; only our record of them is lost.
    Normal,
}

impl From<Synchronous> for SqliteSynchronous {
    fn from(s: Synchronous) -> Self {
        match s {
            Synchronous::Full => Self::Full,
            Synchronous::Normal => Self::Normal,
        }
    }
}

/// Tuning for [`SqliteStore::connect_with`]. `Default` is what [`SqliteStore::connect`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Commit durability (default [`Synchronous::Full`]).
    pub synchronous: Synchronous,
    /// Most read connections (default 4). Writes always go through one connection.
    pub max_readers: u32,
    /// How long a statement waits for a lock held by another connection or process (default 5 s).
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            max_readers: 4,
            busy_timeout: Duration::from_secs(5),
        }
    }
}

impl SqliteOptions {
    /// Sets the commit durability.
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets the most read connections (at least 1).
    pub fn max_readers(mut self, max_readers: u32) -> Self {
        self.max_readers = max_readers.max(1);
        self
    }

    /// Sets the busy timeout.
    pub fn busy_timeout(mut self, busy_timeout: Duration) -> Self {
        self.busy_timeout = busy_timeout;
        self
    }
}

/// The SQLite store.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    /// Exactly one connection: every write (the group-commit task uses it; migrations and
    /// `ping` borrow it between batches).
    writer: SqlitePool,
    /// The group-commit task's queue.
    jobs: Writer<SqliteConnection>,
    /// `query_only` connections for reads (the writer itself for an in-memory database).
    reader: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating the file and its directory if missing) the database at `sqlite://PATH`,
    /// with [`SqliteOptions::default`]. `sqlite::memory:` gives a private in-memory database
    /// (for unit tests: it is gone when the store is dropped). Does not migrate.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        Self::connect_with(url, SqliteOptions::default()).await
    }

    /// [`connect`](Self::connect) with explicit options.
    pub async fn connect_with(url: &str, options: SqliteOptions) -> StoreResult<Self> {
        if !url.starts_with("sqlite:") {
            return Err(StoreError::UnsupportedUrl(url.to_owned()));
        }
        let base = SqliteConnectOptions::from_str(url)?
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(options.synchronous.into())
            .busy_timeout(options.busy_timeout)
            .foreign_keys(true);

        if is_in_memory(url) {
            // One connection holds the database; it must never be closed or recycled.
            let pool = pool_options()
                .min_connections(1)
                .max_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(base)
                .await?;
            let jobs = group::spawn(pool.clone(), group::SQLITE);
            return Ok(Self {
                writer: pool.clone(),
                jobs,
                reader: pool,
            });
        }

        if let Some(dir) = base
            .get_filename()
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            create_dir(dir)?;
        }
        // The file holds provider API key hashes, proofs and (sealed) webhook secrets: created
        // 0600 here, before SQLite opens it, so it never exists with wider permissions. SQLite
        // gives the `-wal` and `-shm` files it creates beside it the database file's mode.
        create_private_file(base.get_filename())?;
        // The writer first: it creates the file and switches it to WAL before any reader opens it.
        let writer = pool_options()
            .min_connections(1)
            .max_connections(1)
            .connect_with(base.clone().create_if_missing(true))
            .await?;
        let reader = pool_options()
            .max_connections(options.max_readers.max(1))
            .connect_with(base.pragma("query_only", "ON"))
            .await?;
        let jobs = group::spawn(writer.clone(), group::SQLITE);
        Ok(Self {
            writer,
            jobs,
            reader,
        })
    }

    /// Closes both pools, waiting for connections in use to be returned (a clean WAL checkpoint).
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}

/// The pools' options. No ping before each acquire (sqlx's default): a connection to a local
/// file does not go stale the way one across a network does, and the ping cost every batch of
/// the group commit, and every read, one more round trip to the connection's worker thread (a
/// gate's claim, one at a time, paid four where it needs three).
fn pool_options() -> SqlitePoolOptions {
    SqlitePoolOptions::new().test_before_acquire(false)
}

impl Backend for SqliteStore {
    type Conn = SqliteConnection;
    type Reader = PoolConnection<sqlx::Sqlite>;

    async fn run_migrations(&self) -> StoreResult<()> {
        migrations::SQLITE_MIGRATOR.run(&self.writer).await?;
        Ok(())
    }

    async fn check_writable(&self) -> StoreResult<()> {
        // Takes the write lock (and gives it back): reachable *and* writable.
        let tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        tx.rollback().await?;
        Ok(())
    }

    async fn reader(&self) -> StoreResult<Self::Reader> {
        Ok(self.reader.acquire().await?)
    }

    /// In the next group commit.
    async fn write<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>>
            + Clone
            + Send
            + 'static,
    {
        self.jobs.write(op).await
    }

    /// In the next group commit.
    async fn write_merged<M: Merge<SqliteConnection>>(&self, item: M) -> StoreResult<M::Output> {
        self.jobs.write_merged(item).await
    }

    async fn deduct(&self, d: &Deduction) -> StoreResult<DeductOutcome> {
        let d = d.clone();
        // The single writer needs no row lock: the idempotency key is checked first.
        self.write(move |c| Box::pin(async move { metering::deduct(c, &d, false).await }))
            .await
    }

    async fn relay(&self, relay: &Relay, bounds: &RelayBounds) -> StoreResult<RelayOutcome> {
        let (relay, bounds) = (relay.clone(), *bounds);
        // The single writer orders every count: no lock is waited for.
        self.write(move |c| Box::pin(async move { relays::take(c, &relay, &bounds).await }))
            .await
    }
}

fn is_in_memory(url: &str) -> bool {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    rest.starts_with(":memory:") || rest.contains("mode=memory")
}

fn create_dir(dir: &Path) -> StoreResult<()> {
    // Start-up only, once: a blocking call is fine here. Directories it creates are 0700.
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))
}

/// Creates `path` empty with mode 0600 (owner read/write only, whatever the umask) unless it
/// exists; an existing file keeps its mode (a warning says when others can read it). SQLite
/// takes an empty file for a new database.
fn create_private_file(path: &Path) -> StoreResult<()> {
    let io = |e| StoreError::Database(sqlx::Error::Io(e));
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
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                if let Ok(m) = std::fs::metadata(path)
                    && m.permissions().mode() & 0o077 != 0
                {
                    tracing::warn!(
                        path = %path.display(),
                        mode = format_args!("{:03o}", m.permissions().mode() & 0o777),
                        "the store's database file is readable by group or others; chmod 600 it \
                         (and its -wal and -shm files)"
                    );
                }
            }
            Ok(())
        }
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;

    async fn pragma(pool: &SqlitePool, name: &'static str) -> i64 {
        let sql = match name {
            "synchronous" => "PRAGMA synchronous",
            "busy_timeout" => "PRAGMA busy_timeout",
            "foreign_keys" => "PRAGMA foreign_keys",
            _ => "PRAGMA query_only",
        };
        sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
    }

    /// Issue 13: the database, its -wal and -shm files and a directory the store creates are
    /// private to the owner from the start.
    #[cfg(unix)]
    #[tokio::test]
    async fn the_database_its_wal_files_and_its_directory_are_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/facilitator.db");
        let store = SqliteStore::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        store.ping().await.unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("state")), 0o700);
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("state/facilitator.db{suffix}"));
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
    }

    #[tokio::test]
    async fn connections_carry_the_pragmas() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("a/b/store.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        assert_eq!(pragma(&store.writer, "synchronous").await, 2, "FULL");
        assert_eq!(pragma(&store.writer, "busy_timeout").await, 5_000);
        assert_eq!(pragma(&store.writer, "foreign_keys").await, 1);
        assert_eq!(pragma(&store.writer, "query_only").await, 0);
        assert_eq!(pragma(&store.reader, "query_only").await, 1);
        assert_eq!(pragma(&store.reader, "synchronous").await, 2);
        assert_eq!(store.writer.options().get_max_connections(), 1);
        assert!(!store.writer.options().get_test_before_acquire());
        assert!(!store.reader.options().get_test_before_acquire());
        store.close().await;

        let normal = SqliteOptions::default().synchronous(Synchronous::Normal);
        let store = SqliteStore::connect_with(&url, normal).await.unwrap();
        assert_eq!(pragma(&store.writer, "synchronous").await, 1, "NORMAL");
        store.close().await;
    }
}
