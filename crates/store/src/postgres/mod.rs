//! [`Store`](crate::Store) on PostgreSQL: the same schema as SQLite, for several facilitator replicas sharing
//! one database.
//!
//! Writes are *group-committed* (see `group`), as on SQLite: a writer task takes every write
//! waiting (up to 64), runs them in one transaction (a batch in which a write failed runs again
//! with each write in a savepoint of its own, so that a failed write undoes itself alone), and
//! answers each caller after the commit. So concurrent writes
//! share one commit (one WAL flush), and a row that every confirmation updates (an analytics
//! rollup) is locked once per batch instead of once per write, each holding it through its own
//! commit. Concurrency between replicas rests on PostgreSQL's row locks under `READ COMMITTED`:
//! a second `INSERT ... ON CONFLICT DO NOTHING` of a key waits for the first to commit and then
//! does nothing; a second conditional `UPDATE` of a row waits for the first, then re-evaluates
//! its `WHERE` against the committed row (so "first confirmation wins" needs no explicit lock).
//! Reads, allowance deductions and counts of relayed transactions use the pool directly.

use std::{borrow::Cow, str::FromStr};

use sqlx::{
    Connection,
    pool::PoolConnection,
    postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions},
};

use crate::{
    DeductOutcome, Deduction, Relay, RelayBounds, RelayOutcome, StoreError, StoreResult,
    backend::{Backend, BoxFuture},
    group::{self, Merge, Writer},
    metering, migrations, relays,
};

/// Most connections per pool (per replica).
const MAX_CONNECTIONS: u32 = 16;

/// The PostgreSQL store.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
    /// The group-commit task's queue (it takes one pooled connection per batch).
    writer: Writer<PgConnection>,
}

impl PostgresStore {
    /// Connects to `postgres://...` (a pool of up to 16 connections). Does not migrate.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = PgConnectOptions::from_str(url)?;
        Self::with_options(options).await
    }

    /// Connects with every connection's `search_path` set to `schema` alone, creating the schema
    /// if missing; the tables (and the migrations' bookkeeping) then live in that schema. For
    /// tests that isolate themselves in a schema of their own, or several tenants in one
    /// database. `schema` must be a plain lowercase identifier (`[a-z_][a-z0-9_]*`, at most 63
    /// bytes), else `sqlx::Error::Configuration`.
    pub async fn connect_with_schema(url: &str, schema: &str) -> StoreResult<Self> {
        if !is_plain_identifier(schema) {
            return Err(StoreError::Database(sqlx::Error::Configuration(
                format!("schema name {schema:?} is not a plain lowercase identifier").into(),
            )));
        }
        let options = PgConnectOptions::from_str(url)?;
        let mut conn = PgConnection::connect_with(&options).await?;
        // Identifier checked above, so quoting cannot be escaped. Processes starting at once
        // would race `CREATE SCHEMA IF NOT EXISTS` into a unique violation in the catalog: the
        // two statements (one implicit transaction) take a transaction advisory lock first.
        let create = format!(
            "SELECT pg_advisory_xact_lock(hashtext('tollgate:create schema'));
             CREATE SCHEMA IF NOT EXISTS \"{schema}\""
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(create))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        // A startup parameter rather than an `after_connect` `SET`: the server applies it to each
        // new connection, with no extra round trip, and `RESET ALL` keeps it.
        Self::with_options(options.options([("search_path", Cow::Borrowed(schema))])).await
    }

    async fn with_options(options: PgConnectOptions) -> StoreResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect_with(options)
            .await?;
        let writer = group::spawn(pool.clone(), group::POSTGRES);
        Ok(Self { pool, writer })
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

impl Backend for PostgresStore {
    type Conn = PgConnection;
    type Reader = PoolConnection<sqlx::Postgres>;

    async fn run_migrations(&self) -> StoreResult<()> {
        migrations::POSTGRES_MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn check_writable(&self) -> StoreResult<()> {
        // A hot standby refuses a read-write transaction: reachable *and* writable.
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION READ WRITE")
            .execute(&mut *tx)
            .await?;
        tx.rollback().await?;
        Ok(())
    }

    async fn reader(&self) -> StoreResult<Self::Reader> {
        Ok(self.pool.acquire().await?)
    }

    /// In the next group commit.
    async fn write<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, StoreResult<T>>
            + Clone
            + Send
            + 'static,
    {
        self.writer.write(op).await
    }

    /// In the next group commit.
    async fn write_merged<M: Merge<PgConnection>>(&self, item: M) -> StoreResult<M::Output> {
        self.writer.write_merged(item).await
    }

    async fn deduct(&self, d: &Deduction) -> StoreResult<DeductOutcome> {
        if d.key.is_none() {
            // The common case, one statement and one round trip: the row lock is held only for
            // the statement, so deductions of one hot subscription do not queue behind network
            // round trips. Anything else (a new cycle, exhausted, closed) takes the path below.
            if let Some(row) =
                metering::deduct_existing(&mut *self.pool.acquire().await?, d).await?
            {
                return Ok(DeductOutcome::Applied(row));
            }
        }
        let mut tx = self.pool.begin().await?;
        // The upsert locks the cycle's row until commit: deductions of one cycle run one at a
        // time from here, so the key check and the cap check see every earlier one.
        let outcome = metering::deduct(&mut *tx, d, true).await?;
        // A key conflict writes nothing: dropping the transaction rolls the upsert back.
        if outcome != DeductOutcome::KeyConflict {
            tx.commit().await?;
        }
        Ok(outcome)
    }

    async fn relay(&self, relay: &Relay, bounds: &RelayBounds) -> StoreResult<RelayOutcome> {
        // A transaction of its own, not the group commit's: the subscriber's lock is held only
        // for this count, so no other write waits behind another replica's.
        let mut tx = self.pool.begin().await?;
        let outcome = relays::take(&mut *tx, relay, bounds).await?;
        tx.commit().await?;
        Ok(outcome)
    }
}

fn is_plain_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && s.len() <= 63
}
