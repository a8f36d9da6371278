//! [`Store`](crate::Store) on PostgreSQL: the same schema as SQLite, for several facilitator replicas sharing
//! one database.
//!
//! A write is one statement in its own (implicit) transaction, or several in an explicit one
//! where the [`crate::Store`] contract says "in one transaction". Concurrency rests on
//! PostgreSQL's row locks under `READ COMMITTED`: a second `INSERT ... ON CONFLICT DO NOTHING` of
//! a key waits for the first to commit and then does nothing; a second conditional `UPDATE` of a
//! row waits for the first, then re-evaluates its `WHERE` against the committed row (so "first
//! confirmation wins" needs no explicit lock).

use std::{borrow::Cow, str::FromStr};

use sqlx::{
    Connection,
    pool::PoolConnection,
    postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions},
};

use crate::{StoreError, StoreResult};

mod store;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Most connections per pool (per replica).
const MAX_CONNECTIONS: u32 = 16;

/// The PostgreSQL store.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
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
        // Identifier checked above, so quoting cannot be escaped.
        let create = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
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
        Ok(Self { pool })
    }

    /// A connection from the pool, for one statement (its own implicit transaction) or a few
    /// reads.
    async fn conn(&self) -> StoreResult<PoolConnection<sqlx::Postgres>> {
        Ok(self.pool.acquire().await?)
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn is_plain_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && s.len() <= 63
}
