//! [`MemoStore`] on PostgreSQL, for several gate replicas.

use std::str::FromStr;

use alloy::primitives::B256;
use async_trait::async_trait;
use sqlx::{
    AssertSqlSafe,
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
};

use super::{MemoStore, as_i64};
use crate::StoreError;

/// The once-only set in PostgreSQL: one table `<prefix>gate_memos (key, expires_at)`, shared by
/// every gate replica pointed at it. A claim is `INSERT … ON CONFLICT DO NOTHING`; the primary key
/// makes exactly one of any number of concurrent claims succeed, across replicas.
#[derive(Clone, Debug)]
pub struct PostgresMemoStore {
    pool: PgPool,
    table: String,
}

impl PostgresMemoStore {
    /// Connects to `url` and creates the table `<table_prefix>gate_memos` if missing. The prefix
    /// must be a plain lowercase identifier fragment (`[a-z0-9_]*`, starting with a letter or `_`
    /// when not empty).
    pub async fn connect(url: &str, table_prefix: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        Self::with_pool(pool, table_prefix).await
    }

    /// Uses an existing pool (e.g. the application's) and creates the table if missing.
    pub async fn with_pool(pool: PgPool, table_prefix: &str) -> Result<Self, StoreError> {
        let table = format!("{table_prefix}gate_memos");
        if !is_plain_identifier(&table) {
            return Err(StoreError::Config(format!(
                "table prefix {table_prefix:?} is not a plain lowercase identifier"
            )));
        }
        // The identifier is checked above, so these statements cannot be escaped. Replicas
        // starting at once would race `CREATE TABLE IF NOT EXISTS` into a unique violation in
        // PostgreSQL's catalog: the statements (one implicit transaction) take a transaction
        // advisory lock named after the table first.
        let create = format!(
            "SELECT pg_advisory_xact_lock(hashtext('tollgate:{table}'));
             CREATE TABLE IF NOT EXISTS {table} (key BYTEA PRIMARY KEY, expires_at BIGINT NOT NULL);
             CREATE INDEX IF NOT EXISTS {table}_expires_at ON {table} (expires_at);"
        );
        sqlx::raw_sql(AssertSqlSafe(create)).execute(&pool).await?;
        Ok(Self { pool, table })
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn is_plain_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && s.len() <= 50
}

#[async_trait]
impl MemoStore for PostgresMemoStore {
    async fn claim(&self, key: B256, expires_at: u64) -> Result<bool, StoreError> {
        let sql = format!(
            "INSERT INTO {} (key, expires_at) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
            self.table
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(key.as_slice())
            .bind(as_i64(expires_at))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(&self, key: B256) -> Result<(), StoreError> {
        // The same statement as `take`: a release is a take whose answer nobody needs.
        self.take(key).await.map(drop)
    }

    async fn take(&self, key: B256) -> Result<bool, StoreError> {
        let sql = format!("DELETE FROM {} WHERE key = $1", self.table);
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(key.as_slice())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn prune(&self, now: u64) -> Result<u64, StoreError> {
        let sql = format!("DELETE FROM {} WHERE expires_at <= $1", self.table);
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(as_i64(now))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert!(is_plain_identifier("tollgate_gate_memos"));
        assert!(is_plain_identifier("_x"));
        assert!(!is_plain_identifier("a; drop table x"));
        assert!(!is_plain_identifier("Upper"));
        assert!(!is_plain_identifier("1abc"));
    }
}
