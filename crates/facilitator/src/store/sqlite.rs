//! [`Store`] on SQLite: one file in WAL mode, written through a single connection.
//!
//! SQLite runs one write transaction at a time per database whatever the pool does, so the store
//! keeps a *write pool of exactly one connection* (writers queue in the pool, fairly and without
//! burning `SQLITE_BUSY` retries) and a *read pool* of a few `query_only` connections that WAL lets
//! run beside the writer. The 5 s busy timeout still covers another process holding the lock
//! (an operator's `sqlite3` shell, a second facilitator pointed at the same file by mistake).
//!
//! Writes are *group-committed*: a writer task owns the write connection, takes every write that
//! is waiting (up to 256), runs them in one `BEGIN IMMEDIATE … COMMIT` transaction and
//! answers each caller only after the commit, so many concurrent settlements share one fsync
//! (`synchronous = FULL` stays the default without costing a disk flush per write). Each write is
//! one statement; the few that must return the row (`insert_settlement`, `mark_confirmed`) use
//! `RETURNING` and, only when their statement changed nothing, read the row back in the same
//! transaction.

use std::{future::Future, path::Path, pin::Pin, str::FromStr, time::Duration};

use alloy::primitives::{Address, B256};
use async_trait::async_trait;
use sqlx::{
    Row, SqliteConnection,
    sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
    },
};
use tollgate_protocol::SettlementStatus;

use super::{
    AllowanceCycle, AnalyticsData, AnalyticsQuery, ChargeOutcome, DeductOutcome, Deduction,
    IndexedState, IndexedSubscription, NewCharge, NewSettlement, OverageCharge, PlanOwner, Renewal,
    RenewalOutcome, Settlement, Store, StoreError, StoreResult, Subject, SubscriptionEvent,
    analytics,
    codec::{self, NewRow, SettlementRow, settlement_columns},
    metering::{self, SQLITE as MSQL},
    renewals::{self, SQLITE as RSQL},
    webhooks::{
        self as wh, Attempt, Delivery, Endpoint, EndpointSecrets, Event, NewEvent, SQLITE as WSQL,
    },
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

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

/// Most writes committed together.
const MAX_BATCH: usize = 256;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
/// Hands a write's result to its caller once the batch's commit outcome is known.
type Deliver = Box<dyn FnOnce(&Result<(), String>) + Send>;
/// One write: runs its statement inside the batch's transaction.
type Job = Box<dyn for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, Deliver> + Send>;

/// The SQLite store.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    /// Exactly one connection: every write (the group-commit task uses it; migrations and
    /// `ping` borrow it between batches).
    writer: SqlitePool,
    /// The group-commit task's queue.
    jobs: tokio::sync::mpsc::Sender<Job>,
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
            let pool = SqlitePoolOptions::new()
                .min_connections(1)
                .max_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(base)
                .await?;
            let jobs = spawn_writer(pool.clone());
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
        let writer = SqlitePoolOptions::new()
            .min_connections(1)
            .max_connections(1)
            .connect_with(base.clone().create_if_missing(true))
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(options.max_readers.max(1))
            .connect_with(base.pragma("query_only", "ON"))
            .await?;
        let jobs = spawn_writer(writer.clone());
        Ok(Self {
            writer,
            jobs,
            reader,
        })
    }

    /// Runs `op` in the next group commit and returns its result once that commit is durable.
    async fn write<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>>
            + Send
            + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel::<StoreResult<T>>();
        let job: Job = Box::new(move |conn| {
            Box::pin(async move {
                let result = op(conn).await;
                Box::new(move |committed: &Result<(), String>| {
                    let outcome = match committed {
                        Ok(()) => result,
                        Err(e) => Err(StoreError::Database(sqlx::Error::Protocol(format!(
                            "group commit failed: {e}"
                        )))),
                    };
                    let _ = tx.send(outcome);
                }) as Deliver
            })
        });
        let closed = || StoreError::Database(sqlx::Error::PoolClosed);
        self.jobs.send(job).await.map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }

    /// Closes both pools, waiting for connections in use to be returned (a clean WAL checkpoint).
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}

/// Starts the group-commit task on the write pool; it ends when the last store clone is dropped.
fn spawn_writer(pool: SqlitePool) -> tokio::sync::mpsc::Sender<Job> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Job>(4 * MAX_BATCH);
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut jobs = vec![first];
            while jobs.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            let committed = commit_batch(&pool, jobs).await;
            if let Err(e) = committed {
                tracing::error!(error = %e, "SQLite group commit failed");
            }
        }
    });
    tx
}

/// Runs `jobs` in one transaction and delivers every result after the commit.
async fn commit_batch(pool: &SqlitePool, jobs: Vec<Job>) -> Result<(), String> {
    let mut deliveries = Vec::with_capacity(jobs.len());
    let outcome: Result<(), String> = async {
        let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .map_err(|e| e.to_string())?;
        for job in jobs {
            deliveries.push(job(&mut conn).await);
        }
        if let Err(e) = sqlx::query("COMMIT").execute(&mut *conn).await {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            return Err(e.to_string());
        }
        Ok(())
    }
    .await;
    for deliver in deliveries {
        deliver(&outcome);
    }
    outcome
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

const INSERT: &str = concat!(
    "INSERT INTO settlements (key, kind, request_hash, network, chain_id, token, payer, pay_to, \
     amount, fee, memo, nonce, valid_before, request, status, created_at, updated_at, resource, \
     claim_hash) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 'received', ?15, ?15, ?16, \
     ?17) \
     ON CONFLICT (key) DO NOTHING RETURNING ",
    settlement_columns!()
);

const SELECT_BY_KEY: &str = concat!(
    "SELECT ",
    settlement_columns!(),
    " FROM settlements WHERE key = ?1"
);

// Repeating the same tx hash is a no-op; a new one (a replacement) is recorded. Confirmed and
// failed rows are final.
const MARK_SUBMITTED: &str = "UPDATE settlements SET status = 'submitted', tx_hash = ?2, updated_at = ?3 \
     WHERE key = ?1 AND status IN ('received', 'submitted', 'pending') AND tx_hash IS NOT ?2";

const MARK_PENDING: &str = "UPDATE settlements SET status = 'pending', updated_at = ?2 \
     WHERE key = ?1 AND status IN ('received', 'submitted')";

// The chain is the truth: a confirmation overrides a failure, but never another confirmation.
const MARK_CONFIRMED: &str = concat!(
    "UPDATE settlements SET status = 'confirmed', tx_hash = ?2, block = ?3, proof = ?4, \
     error = NULL, updated_at = ?5 WHERE key = ?1 AND status <> 'confirmed' RETURNING ",
    settlement_columns!()
);

// The first failure's reason stays.
const MARK_FAILED: &str = concat!(
    "UPDATE settlements SET status = 'failed', error = ?2, updated_at = ?3 \
     WHERE key = ?1 AND status IN ('received', 'submitted', 'pending') RETURNING ",
    settlement_columns!()
);

/// Records `e` and a pending delivery per matching endpoint, inside the caller's transaction;
/// whether it was new.
async fn emit(conn: &mut SqliteConnection, e: &NewEvent) -> StoreResult<bool> {
    let at = codec::int("created_at", e.created_at)?;
    let seq: Option<(i64,)> = sqlx::query_as(WSQL.insert_event)
        .bind(&e.id)
        .bind(codec::address(&e.provider))
        .bind(&e.r#type)
        .bind(&e.data)
        .bind(at)
        .fetch_optional(&mut *conn)
        .await?;
    let Some((seq,)) = seq else {
        return Ok(false);
    };
    sqlx::query(WSQL.fan_out)
        .bind(seq)
        .bind(codec::address(&e.provider))
        .bind(&e.r#type)
        .bind(at)
        .execute(&mut *conn)
        .await?;
    Ok(true)
}

const UNFINISHED: &str = concat!(
    "SELECT ",
    settlement_columns!(),
    " FROM settlements WHERE status IN ('received', 'submitted', 'pending') \
     ORDER BY created_at, key LIMIT ?1"
);

const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) FROM settlements GROUP BY status";

// A key hash already stored keeps its first provider, label and revocation: keys are random
// 32-byte secrets, so a repeat is the same key, and re-adding never un-revokes.
const INSERT_API_KEY: &str = "INSERT INTO api_keys (key_hash, provider, label, created_at) \
     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (key_hash) DO NOTHING";

const API_KEY_PROVIDER: &str =
    "SELECT provider FROM api_keys WHERE key_hash = ?1 AND revoked_at IS NULL";

const REVOKE_API_KEY: &str =
    "UPDATE api_keys SET revoked_at = ?2 WHERE key_hash = ?1 AND revoked_at IS NULL";

// A challenge hash already stored keeps its first row (hashes of random texts do not collide).
const INSERT_CHALLENGE: &str = "INSERT INTO provider_challenges \
     (challenge_hash, address, expires_at, created_at) VALUES (?1, ?2, ?3, ?4) \
     ON CONFLICT (challenge_hash) DO NOTHING";

// One statement: of concurrent registrations with one challenge, exactly one changes the row.
const CONSUME_CHALLENGE: &str = "UPDATE provider_challenges SET used_at = ?3 \
     WHERE challenge_hash = ?1 AND address = ?2 AND used_at IS NULL AND expires_at > ?3";

const INSERT_PLAN: &str = "INSERT INTO plans (network, plan_id, provider, relayer, created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (network, plan_id) DO NOTHING";

const SELECT_PLAN: &str = "SELECT network, plan_id, provider, relayer, created_at FROM plans WHERE network = ?1 AND plan_id = ?2";

#[async_trait]
impl Store for SqliteStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        Ok(())
    }

    async fn ping(&self) -> StoreResult<()> {
        // Takes the write lock (and gives it back): reachable *and* writable.
        let tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        tx.rollback().await?;
        Ok(())
    }

    async fn insert_settlement(&self, new: &NewSettlement) -> StoreResult<Settlement> {
        let row = NewRow::encode(new)?;
        let (network, request) = (new.network.clone(), new.request.clone());
        self.write(move |conn| {
            Box::pin(async move {
                let inserted: Option<SettlementRow> = sqlx::query_as(INSERT)
                    .bind(&row.key)
                    .bind(row.kind)
                    .bind(&row.request_hash)
                    .bind(&network)
                    .bind(row.chain_id)
                    .bind(&row.token)
                    .bind(&row.payer)
                    .bind(&row.pay_to)
                    .bind(&row.amount)
                    .bind(&row.fee)
                    .bind(&row.memo)
                    .bind(&row.nonce)
                    .bind(row.valid_before)
                    .bind(&request)
                    .bind(row.created_at)
                    .bind(&row.resource)
                    .bind(&row.claim_hash)
                    .fetch_optional(&mut *conn)
                    .await?;
                let stored = match inserted {
                    Some(stored) => stored,
                    // The key was there already: rows are never deleted, so it is still there.
                    None => {
                        sqlx::query_as(SELECT_BY_KEY)
                            .bind(&row.key)
                            .fetch_one(&mut *conn)
                            .await?
                    }
                };
                stored.decode()
            })
        })
        .await
    }

    async fn settlement(&self, key: B256) -> StoreResult<Option<Settlement>> {
        let row: Option<SettlementRow> = sqlx::query_as(SELECT_BY_KEY)
            .bind(codec::b256(&key))
            .fetch_optional(&self.reader)
            .await?;
        row.map(SettlementRow::decode).transpose()
    }

    async fn mark_submitted(&self, key: B256, tx_hash: B256, at: u64) -> StoreResult<()> {
        let at = codec::int("updated_at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                sqlx::query(MARK_SUBMITTED)
                    .bind(codec::b256(&key))
                    .bind(codec::b256(&tx_hash))
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    async fn mark_pending(&self, key: B256, at: u64) -> StoreResult<()> {
        let at = codec::int("updated_at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                sqlx::query(MARK_PENDING)
                    .bind(codec::b256(&key))
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    async fn mark_confirmed(
        &self,
        key: B256,
        tx_hash: B256,
        block: u64,
        proof: Option<&str>,
        at: u64,
    ) -> StoreResult<Settlement> {
        let key = codec::b256(&key);
        let block = codec::int("block", block)?;
        let at = codec::int("updated_at", at)?;
        let proof = proof.map(str::to_owned);
        self.write(move |conn| {
            Box::pin(async move {
                let updated: Option<SettlementRow> = sqlx::query_as(MARK_CONFIRMED)
                    .bind(&key)
                    .bind(codec::b256(&tx_hash))
                    .bind(block)
                    .bind(proof.as_deref())
                    .bind(at)
                    .fetch_optional(&mut *conn)
                    .await?;
                let stored: SettlementRow = match updated {
                    Some(stored) => {
                        let s = stored.decode()?;
                        emit(&mut *conn, &wh::payment_event(&s, s.updated_at)).await?;
                        analytics::write_rollup!(conn, analytics::sqlite_sql(), &s);
                        return Ok(s);
                    }
                    // Already confirmed (confirmed is final, so this reads the first proof), or
                    // no such row: `sqlx::Error::RowNotFound`.
                    None => {
                        sqlx::query_as(SELECT_BY_KEY)
                            .bind(&key)
                            .fetch_one(&mut *conn)
                            .await?
                    }
                };
                stored.decode()
            })
        })
        .await
    }

    async fn mark_failed(&self, key: B256, error: &str, at: u64) -> StoreResult<()> {
        let at = codec::int("updated_at", at)?;
        let error = error.to_owned();
        self.write(move |conn| {
            Box::pin(async move {
                let failed: Option<SettlementRow> = sqlx::query_as(MARK_FAILED)
                    .bind(codec::b256(&key))
                    .bind(&error)
                    .bind(at)
                    .fetch_optional(&mut *conn)
                    .await?;
                if let Some(row) = failed {
                    let s = row.decode()?;
                    emit(&mut *conn, &wh::payment_event(&s, s.updated_at)).await?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn unfinished(&self, limit: u32) -> StoreResult<Vec<Settlement>> {
        let rows: Vec<SettlementRow> = sqlx::query_as(UNFINISHED)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(SettlementRow::decode).collect()
    }

    async fn count_by_status(&self) -> StoreResult<Vec<(SettlementStatus, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(COUNT_BY_STATUS)
            .fetch_all(&self.reader)
            .await?;
        codec::status_counts(rows)
    }

    async fn insert_api_key(
        &self,
        key_hash: B256,
        provider: Address,
        label: &str,
        at: u64,
    ) -> StoreResult<()> {
        let at = codec::int("created_at", at)?;
        let label = label.to_owned();
        self.write(move |conn| {
            Box::pin(async move {
                sqlx::query(INSERT_API_KEY)
                    .bind(codec::b256(&key_hash))
                    .bind(codec::address(&provider))
                    .bind(&label)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    async fn api_key_provider(&self, key_hash: B256) -> StoreResult<Option<Address>> {
        let row = sqlx::query(API_KEY_PROVIDER)
            .bind(codec::b256(&key_hash))
            .fetch_optional(&self.reader)
            .await?;
        row.map(|row| codec::parse_address("provider", row.try_get::<&str, _>(0)?))
            .transpose()
    }

    async fn revoke_api_key(&self, key_hash: B256, at: u64) -> StoreResult<bool> {
        let at = codec::int("revoked_at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                let done = sqlx::query(REVOKE_API_KEY)
                    .bind(codec::b256(&key_hash))
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    async fn insert_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()> {
        let expires_at = codec::int("expires_at", expires_at)?;
        let at = codec::int("created_at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                sqlx::query(INSERT_CHALLENGE)
                    .bind(codec::b256(&challenge_hash))
                    .bind(codec::address(&address))
                    .bind(expires_at)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    async fn consume_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        at: u64,
    ) -> StoreResult<bool> {
        let at = codec::int("used_at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                let done = sqlx::query(CONSUME_CHALLENGE)
                    .bind(codec::b256(&challenge_hash))
                    .bind(codec::address(&address))
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    async fn insert_plan(&self, plan: &PlanOwner) -> StoreResult<PlanOwner> {
        let (plan_id, provider, relayer, at) = codec::encode_plan(plan)?;
        let network = plan.network.clone();
        self.write(move |conn| {
            Box::pin(async move {
                sqlx::query(INSERT_PLAN)
                    .bind(&network)
                    .bind(&plan_id)
                    .bind(&provider)
                    .bind(&relayer)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                // Rows are never deleted: the row is there, ours or the first writer's.
                let row: codec::PlanRow = sqlx::query_as(SELECT_PLAN)
                    .bind(&network)
                    .bind(&plan_id)
                    .fetch_one(&mut *conn)
                    .await?;
                codec::decode_plan(row)
            })
        })
        .await
    }

    async fn plan_owner(&self, network: &str, plan_id: B256) -> StoreResult<Option<PlanOwner>> {
        let row: Option<codec::PlanRow> = sqlx::query_as(SELECT_PLAN)
            .bind(network)
            .bind(codec::b256(&plan_id))
            .fetch_optional(&self.reader)
            .await?;
        row.map(codec::decode_plan).transpose()
    }

    async fn keeper_cursor(&self, network: &str) -> StoreResult<u64> {
        let row: Option<(i64,)> = sqlx::query_as(RSQL.select_cursor)
            .bind(network)
            .fetch_optional(&self.reader)
            .await?;
        Ok(row.map_or(0, |(b,)| u64::try_from(b).unwrap_or(0)))
    }

    async fn index_subscription_events(
        &self,
        network: &str,
        events: &[SubscriptionEvent],
        next_block: u64,
        at: u64,
    ) -> StoreResult<()> {
        let network = network.to_owned();
        let events = events.to_vec();
        let next_block = codec::int("next_block", next_block)?;
        let at = codec::int("updated_at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                for event in &events {
                    match event {
                        SubscriptionEvent::Created {
                            id,
                            plan_id,
                            subscriber,
                            paid_through,
                        } => {
                            sqlx::query(RSQL.insert_created)
                                .bind(&network)
                                .bind(codec::b256(id))
                                .bind(codec::b256(plan_id))
                                .bind(codec::address(subscriber))
                                .bind(codec::int("next_due", *paid_through)?)
                                .bind(at)
                                .execute(&mut *conn)
                                .await?;
                        }
                        SubscriptionEvent::Resumed { id, paid_through } => {
                            sqlx::query(RSQL.apply_resumed)
                                .bind(&network)
                                .bind(codec::b256(id))
                                .bind(codec::int("next_due", *paid_through)?)
                                .bind(at)
                                .execute(&mut *conn)
                                .await?;
                        }
                        SubscriptionEvent::Renewed(r) => {
                            sqlx::query(RSQL.insert_renewal)
                                .bind(&network)
                                .bind(codec::b256(&r.id))
                                .bind(i64::from(r.cycle))
                                .bind(r.outcome.as_str())
                                .bind(codec::b256(&r.tx_hash))
                                .bind(codec::int("block", r.block)?)
                                .bind(at)
                                .execute(&mut *conn)
                                .await?;
                        }
                        SubscriptionEvent::Notify {
                            id,
                            subject,
                            kind,
                            data,
                        } => {
                            let (sql, key) = match subject {
                                Subject::Plan(p) => (WSQL.plan_provider, p),
                                Subject::Subscription(s) => (WSQL.subscription_provider, s),
                            };
                            if let Some(state) = renewals::state_after(kind) {
                                sqlx::query(RSQL.apply_state)
                                    .bind(&network)
                                    .bind(codec::b256(key))
                                    .bind(state.as_str())
                                    .bind(at)
                                    .execute(&mut *conn)
                                    .await?;
                            }
                            let provider: Option<(String,)> = sqlx::query_as(sql)
                                .bind(&network)
                                .bind(codec::b256(key))
                                .fetch_optional(&mut *conn)
                                .await?;
                            if let Some((provider,)) = provider {
                                let e = NewEvent {
                                    id: id.clone(),
                                    provider: codec::parse_address("provider", &provider)?,
                                    r#type: (*kind).to_owned(),
                                    data: data.clone(),
                                    created_at: u64::try_from(at).unwrap_or(0),
                                };
                                emit(&mut *conn, &e).await?;
                            }
                        }
                    }
                }
                sqlx::query(RSQL.upsert_cursor)
                    .bind(&network)
                    .bind(next_block)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    async fn due_subscriptions(
        &self,
        network: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<IndexedSubscription>> {
        let rows: Vec<renewals::IndexedRow> = sqlx::query_as(RSQL.select_due)
            .bind(network)
            .bind(codec::int("now", now)?)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(renewals::decode_indexed).collect()
    }

    async fn indexed_subscription(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<IndexedSubscription>> {
        let row: Option<renewals::IndexedRow> = sqlx::query_as(RSQL.select_one)
            .bind(network)
            .bind(codec::b256(&id))
            .fetch_optional(&self.reader)
            .await?;
        row.map(renewals::decode_indexed).transpose()
    }

    async fn update_indexed_subscription(
        &self,
        network: &str,
        id: B256,
        state: IndexedState,
        cycle: u32,
        next_due: u64,
        at: u64,
    ) -> StoreResult<()> {
        let network = network.to_owned();
        let next_due = codec::int("next_due", next_due)?;
        let at = codec::int("updated_at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                sqlx::query(RSQL.update_seen)
                    .bind(&network)
                    .bind(codec::b256(&id))
                    .bind(state.as_str())
                    .bind(i64::from(cycle))
                    .bind(next_due)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    async fn record_renewal(
        &self,
        renewal: &Renewal,
        state: IndexedState,
        next_due: u64,
    ) -> StoreResult<bool> {
        let r = renewal.clone();
        let block = codec::int("block", r.block)?;
        let at = codec::int("created_at", r.at)?;
        let next_due = codec::int("next_due", next_due)?;
        self.write(move |conn| {
            Box::pin(async move {
                let id = codec::b256(&r.id);
                let done = sqlx::query(RSQL.insert_renewal)
                    .bind(&r.network)
                    .bind(&id)
                    .bind(i64::from(r.cycle))
                    .bind(r.outcome.as_str())
                    .bind(codec::b256(&r.tx_hash))
                    .bind(block)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                // A failed cycle stays unpaid: the row keeps the last paid cycle.
                let cycle = match r.outcome {
                    RenewalOutcome::Renewed => r.cycle,
                    RenewalOutcome::Failed => r.cycle.saturating_sub(1),
                };
                sqlx::query(RSQL.update_seen)
                    .bind(&r.network)
                    .bind(&id)
                    .bind(state.as_str())
                    .bind(i64::from(cycle))
                    .bind(next_due)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    async fn renewals(&self, network: &str, id: B256) -> StoreResult<Vec<Renewal>> {
        let rows: Vec<renewals::RenewalRow> = sqlx::query_as(RSQL.select_renewals)
            .bind(network)
            .bind(codec::b256(&id))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(renewals::decode_renewal).collect()
    }

    async fn deduct_allowance(&self, d: &Deduction) -> StoreResult<DeductOutcome> {
        let d = d.clone();
        self.write(move |conn| {
            Box::pin(async move {
                let id = codec::b256(&d.id);
                let at = codec::int("at", d.at)?;
                let cycle = i64::from(d.cycle);
                if let Some(key) = &d.key {
                    let earlier: Option<(i64, i64)> = sqlx::query_as(MSQL.select_key)
                        .bind(&d.network)
                        .bind(&id)
                        .bind(key)
                        .fetch_optional(&mut *conn)
                        .await?;
                    if let Some((c, amount)) = earlier {
                        if amount != metering::units(d.amount) {
                            return Ok(DeductOutcome::KeyConflict);
                        }
                        let row: metering::AllowanceRow = sqlx::query_as(MSQL.select_cycle)
                            .bind(&d.network)
                            .bind(&id)
                            .bind(c)
                            .fetch_one(&mut *conn)
                            .await?;
                        return Ok(DeductOutcome::Replayed(metering::decode_allowance(row)?));
                    }
                }
                let current: metering::AllowanceRow = sqlx::query_as(MSQL.upsert_cycle)
                    .bind(&d.network)
                    .bind(&id)
                    .bind(cycle)
                    .bind(metering::units(d.cap))
                    .bind(at)
                    .fetch_one(&mut *conn)
                    .await?;
                let applied: Option<metering::AllowanceRow> = sqlx::query_as(MSQL.deduct)
                    .bind(&d.network)
                    .bind(&id)
                    .bind(cycle)
                    .bind(metering::units(d.amount))
                    .bind(at)
                    .fetch_optional(&mut *conn)
                    .await?;
                let Some(row) = applied else {
                    let row = metering::decode_allowance(current)?;
                    if row.closed {
                        return Ok(DeductOutcome::Closed(row));
                    }
                    if let Some(e) = wh::exhausted_event(&d, &row) {
                        emit(&mut *conn, &e).await?;
                    }
                    return Ok(DeductOutcome::Exhausted(row));
                };
                let row = metering::decode_allowance(row)?;
                sqlx::query(MSQL.insert_record)
                    .bind(&d.network)
                    .bind(&id)
                    .bind(cycle)
                    .bind(metering::units(row.deductions))
                    .bind(metering::units(d.amount))
                    .bind(d.key.as_deref())
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(DeductOutcome::Applied(row))
            })
        })
        .await
    }

    async fn allowance_cycle(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Option<AllowanceCycle>> {
        let row: Option<metering::AllowanceRow> = sqlx::query_as(MSQL.select_cycle)
            .bind(network)
            .bind(codec::b256(&id))
            .bind(i64::from(cycle))
            .fetch_optional(&self.reader)
            .await?;
        row.map(metering::decode_allowance).transpose()
    }

    async fn latest_allowance_cycle(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<AllowanceCycle>> {
        let row: Option<metering::AllowanceRow> = sqlx::query_as(MSQL.select_latest)
            .bind(network)
            .bind(codec::b256(&id))
            .fetch_optional(&self.reader)
            .await?;
        row.map(metering::decode_allowance).transpose()
    }

    async fn upsert_allowance_cycle(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
        cap: u64,
        close: bool,
        at: u64,
    ) -> StoreResult<AllowanceCycle> {
        let network = network.to_owned();
        let at = codec::int("at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                let id = codec::b256(&id);
                let row: metering::AllowanceRow = sqlx::query_as(MSQL.upsert_cycle)
                    .bind(&network)
                    .bind(&id)
                    .bind(i64::from(cycle))
                    .bind(metering::units(cap))
                    .bind(at)
                    .fetch_one(&mut *conn)
                    .await?;
                let mut row = metering::decode_allowance(row)?;
                if close && !row.closed {
                    sqlx::query(MSQL.close_cycle)
                        .bind(&network)
                        .bind(&id)
                        .bind(i64::from(cycle))
                        .bind(at)
                        .execute(&mut *conn)
                        .await?;
                    row.closed = true;
                }
                Ok(row)
            })
        })
        .await
    }

    async fn cycles_to_bill(
        &self,
        network: &str,
        min_unbilled: u64,
        started_before: u64,
        limit: u32,
    ) -> StoreResult<Vec<AllowanceCycle>> {
        let rows: Vec<metering::AllowanceRow> = sqlx::query_as(MSQL.select_to_bill)
            .bind(network)
            .bind(metering::units(min_unbilled))
            .bind(metering::units(started_before))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(metering::decode_allowance).collect()
    }

    async fn begin_charge(&self, c: &NewCharge) -> StoreResult<bool> {
        let c = c.clone();
        let at = codec::int("at", c.at)?;
        self.write(move |conn| {
            Box::pin(async move {
                let id = codec::b256(&c.id);
                let billed = sqlx::query(MSQL.bill)
                    .bind(&c.network)
                    .bind(&id)
                    .bind(i64::from(c.cycle))
                    .bind(i64::from(c.index))
                    .bind(metering::units(c.amount))
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                if billed.rows_affected() == 0 {
                    return Ok(false);
                }
                sqlx::query(MSQL.insert_charge)
                    .bind(&c.network)
                    .bind(codec::b256(&c.reference))
                    .bind(&id)
                    .bind(i64::from(c.cycle))
                    .bind(metering::units(c.amount))
                    .bind(codec::address(&c.relayer))
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(true)
            })
        })
        .await
    }

    async fn pending_charges(&self, network: &str, limit: u32) -> StoreResult<Vec<OverageCharge>> {
        let rows: Vec<metering::ChargeRow> = sqlx::query_as(MSQL.select_pending)
            .bind(network)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(metering::decode_charge).collect()
    }

    async fn finish_charge(
        &self,
        network: &str,
        reference: B256,
        outcome: &ChargeOutcome,
        at: u64,
    ) -> StoreResult<bool> {
        let network = network.to_owned();
        let outcome = outcome.clone();
        let at = codec::int("at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                let (state, tx_hash, error) = metering::outcome_columns(&outcome);
                let done: Option<(String, i64, i64)> = sqlx::query_as(MSQL.finish_charge)
                    .bind(&network)
                    .bind(codec::b256(&reference))
                    .bind(state)
                    .bind(tx_hash)
                    .bind(error)
                    .bind(at)
                    .fetch_optional(&mut *conn)
                    .await?;
                let Some((id, cycle, amount)) = done else {
                    return Ok(false);
                };
                let (charged, unpaid) = metering::split(&outcome, amount);
                sqlx::query(MSQL.settle_cycle)
                    .bind(&network)
                    .bind(&id)
                    .bind(cycle)
                    .bind(charged)
                    .bind(unpaid)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(true)
            })
        })
        .await
    }

    async fn overage_charges(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Vec<OverageCharge>> {
        let rows: Vec<metering::ChargeRow> = sqlx::query_as(MSQL.select_charges)
            .bind(network)
            .bind(codec::b256(&id))
            .bind(i64::from(cycle))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(metering::decode_charge).collect()
    }

    async fn record_event(&self, event: &NewEvent) -> StoreResult<bool> {
        let e = event.clone();
        self.write(move |conn| Box::pin(async move { emit(&mut *conn, &e).await }))
            .await
    }

    async fn insert_webhook_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        let e = endpoint.clone();
        self.write(move |conn| {
            Box::pin(async move {
                sqlx::query(WSQL.insert_endpoint)
                    .bind(&e.id)
                    .bind(codec::address(&e.provider))
                    .bind(&e.url)
                    .bind(&e.events)
                    .bind(&e.description)
                    .bind(&e.secret)
                    .bind(e.old_secret.as_deref())
                    .bind(e.old_secret_expires_at.map(wh::int))
                    .bind(i64::from(e.enabled))
                    .bind(e.disabled_reason.as_deref())
                    .bind(wh::int(e.created_at))
                    .bind(wh::int(e.updated_at))
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    async fn webhook_endpoints(&self, provider: Address) -> StoreResult<Vec<Endpoint>> {
        let rows: Vec<wh::EndpointRow> = sqlx::query_as(WSQL.select_endpoints)
            .bind(codec::address(&provider))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(wh::decode_endpoint).collect()
    }

    async fn webhook_endpoint(
        &self,
        provider: Option<Address>,
        id: &str,
    ) -> StoreResult<Option<Endpoint>> {
        let row: Option<wh::EndpointRow> = match provider {
            Some(p) => {
                sqlx::query_as(WSQL.select_endpoint)
                    .bind(codec::address(&p))
                    .bind(id)
                    .fetch_optional(&self.reader)
                    .await?
            }
            None => {
                sqlx::query_as(WSQL.select_endpoint_any)
                    .bind(id)
                    .fetch_optional(&self.reader)
                    .await?
            }
        };
        row.map(wh::decode_endpoint).transpose()
    }

    async fn update_webhook_endpoint(&self, endpoint: &Endpoint) -> StoreResult<bool> {
        let e = endpoint.clone();
        self.write(move |conn| {
            Box::pin(async move {
                let done = sqlx::query(WSQL.update_endpoint)
                    .bind(codec::address(&e.provider))
                    .bind(&e.id)
                    .bind(&e.url)
                    .bind(&e.events)
                    .bind(&e.description)
                    .bind(&e.secret)
                    .bind(e.old_secret.as_deref())
                    .bind(e.old_secret_expires_at.map(wh::int))
                    .bind(i64::from(e.enabled))
                    .bind(e.disabled_reason.as_deref())
                    .bind(wh::int(e.updated_at))
                    .execute(&mut *conn)
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    async fn delete_webhook_endpoint(&self, provider: Address, id: &str) -> StoreResult<bool> {
        let id = id.to_owned();
        self.write(move |conn| {
            Box::pin(async move {
                let done = sqlx::query(WSQL.delete_endpoint)
                    .bind(codec::address(&provider))
                    .bind(&id)
                    .execute(&mut *conn)
                    .await?;
                if done.rows_affected() > 0 {
                    sqlx::query(WSQL.delete_deliveries)
                        .bind(&id)
                        .execute(&mut *conn)
                        .await?;
                }
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    async fn webhook_secrets(&self) -> StoreResult<Vec<EndpointSecrets>> {
        let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(WSQL.select_secrets)
            .fetch_all(&self.reader)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, secret, old_secret)| EndpointSecrets {
                id,
                secret,
                old_secret,
            })
            .collect())
    }

    async fn replace_webhook_secrets(
        &self,
        old: &EndpointSecrets,
        new: &EndpointSecrets,
    ) -> StoreResult<bool> {
        let (old, new) = (old.clone(), new.clone());
        self.write(move |conn| {
            Box::pin(async move {
                let done = sqlx::query(WSQL.replace_secrets)
                    .bind(&old.id)
                    .bind(&old.secret)
                    .bind(old.old_secret.as_deref())
                    .bind(&new.secret)
                    .bind(new.old_secret.as_deref())
                    .execute(&mut *conn)
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    async fn due_deliveries(&self, now: u64, limit: u32) -> StoreResult<Vec<Delivery>> {
        let rows: Vec<wh::DeliveryRow> = sqlx::query_as(WSQL.select_due)
            .bind(wh::int(now))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(wh::decode_delivery).collect()
    }

    async fn pending_deliveries(
        &self,
        endpoint_id: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        let rows: Vec<wh::DeliveryRow> = sqlx::query_as(WSQL.select_pending)
            .bind(endpoint_id)
            .bind(wh::int(now))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(wh::decode_delivery).collect()
    }

    async fn finish_deliveries(
        &self,
        endpoint_id: &str,
        attempts: &[(u64, u32, Attempt)],
        at: u64,
    ) -> StoreResult<()> {
        let endpoint_id = endpoint_id.to_owned();
        let attempts = attempts.to_vec();
        self.write(move |conn| {
            Box::pin(async move {
                for (seq, n, attempt) in &attempts {
                    let (state, next, status, error) = wh::attempt_columns(attempt, at);
                    sqlx::query(WSQL.update_delivery)
                        .bind(&endpoint_id)
                        .bind(wh::int(*seq))
                        .bind(state)
                        .bind(i64::from(*n))
                        .bind(next)
                        .bind(status)
                        .bind(error.as_deref())
                        .bind(wh::int(at))
                        .execute(&mut *conn)
                        .await?;
                    if matches!(attempt, Attempt::Gone) {
                        sqlx::query(WSQL.disable_endpoint)
                            .bind(&endpoint_id)
                            .bind("the receiver answered 410 Gone")
                            .bind(wh::int(at))
                            .execute(&mut *conn)
                            .await?;
                    }
                }
                Ok(())
            })
        })
        .await
    }

    async fn redeliver(
        &self,
        provider: Address,
        endpoint_id: &str,
        event_id: &str,
        at: u64,
    ) -> StoreResult<bool> {
        let (endpoint_id, event_id) = (endpoint_id.to_owned(), event_id.to_owned());
        self.write(move |conn| {
            Box::pin(async move {
                let done = sqlx::query(WSQL.redeliver)
                    .bind(codec::address(&provider))
                    .bind(&endpoint_id)
                    .bind(&event_id)
                    .bind(wh::int(at))
                    .execute(&mut *conn)
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    async fn deliveries(
        &self,
        provider: Address,
        endpoint_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        let rows: Vec<wh::DeliveryRow> = sqlx::query_as(WSQL.select_deliveries)
            .bind(codec::address(&provider))
            .bind(endpoint_id)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(wh::decode_delivery).collect()
    }

    async fn events(&self, provider: Address, after: u64, limit: u32) -> StoreResult<Vec<Event>> {
        let rows: Vec<wh::EventRow> = sqlx::query_as(WSQL.select_events)
            .bind(codec::address(&provider))
            .bind(wh::int(after))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.into_iter().map(wh::decode_event).collect()
    }

    async fn analytics(&self, q: &AnalyticsQuery) -> StoreResult<AnalyticsData> {
        analytics::read_analytics!(&self.reader, analytics::sqlite_sql(), q)
    }

    async fn insert_dashboard_session(
        &self,
        token_hash: B256,
        key_hash: B256,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()> {
        let (token, key) = (codec::b256(&token_hash), codec::b256(&key_hash));
        let expires_at = codec::int("expires_at", expires_at)?;
        let at = codec::int("created_at", at)?;
        self.write(move |conn| {
            Box::pin(async move {
                let sql = analytics::sqlite_sql();
                sqlx::query(sql.purge_sessions)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                sqlx::query(sql.insert_session)
                    .bind(&token)
                    .bind(&key)
                    .bind(expires_at)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    async fn dashboard_session(&self, token_hash: B256, now: u64) -> StoreResult<Option<Address>> {
        let row: Option<(String,)> = sqlx::query_as(analytics::sqlite_sql().session_provider)
            .bind(codec::b256(&token_hash))
            .bind(codec::int("now", now)?)
            .fetch_optional(&self.reader)
            .await?;
        row.map(|(p,)| codec::parse_address("provider", &p))
            .transpose()
    }

    async fn delete_dashboard_session(&self, token_hash: B256) -> StoreResult<bool> {
        let token = codec::b256(&token_hash);
        self.write(move |conn| {
            Box::pin(async move {
                let done = sqlx::query(analytics::sqlite_sql().delete_session)
                    .bind(&token)
                    .execute(&mut *conn)
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        store.close().await;

        let normal = SqliteOptions::default().synchronous(Synchronous::Normal);
        let store = SqliteStore::connect_with(&url, normal).await.unwrap();
        assert_eq!(pragma(&store.writer, "synchronous").await, 1, "NORMAL");
        store.close().await;
    }
}
