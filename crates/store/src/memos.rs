//! The gate's once-only set ([`MemoSet`]): which memos (and which x402 authorizations) a gate
//! served, each until it expires, on either database through the same seam as every other
//! operation of the store: each statement written once, each write in the group commit.
//!
//! A claim is one row of a multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING key`: the
//! claims waiting together share one statement and one commit (one WAL sync on SQLite), and the
//! primary key makes exactly one of any number of concurrent claims of a key win, across every
//! process sharing the database. Nothing is answered before its commit is durable.
//!
//! The tables keep the names and columns the gate's own stores gave them before they moved here
//! (`gate_memos` in a SQLite file, `tollgate_gate_memos` in PostgreSQL, the key as bytes), so a
//! set recorded before opens with every entry still held.

use alloy::primitives::B256;

use crate::{
    StoreResult,
    backend::{Backend, BoxFuture},
    codec,
    conn::{Arg, Conn, Dialect, MultiRow, PerDialect, args, in_statements, placeholders},
    group::Merge,
};

/// The table, created when missing at [`MemoSet::open`].
const SCHEMA: PerDialect = PerDialect {
    sqlite: "CREATE TABLE IF NOT EXISTS gate_memos (
                 key BLOB PRIMARY KEY NOT NULL,
                 expires_at INTEGER NOT NULL
             );
             CREATE INDEX IF NOT EXISTS gate_memos_expires_at ON gate_memos (expires_at)",
    postgres: "CREATE TABLE IF NOT EXISTS tollgate_gate_memos (
                   key BYTEA PRIMARY KEY,
                   expires_at BIGINT NOT NULL
               );
               CREATE INDEX IF NOT EXISTS tollgate_gate_memos_expires_at
                   ON tollgate_gate_memos (expires_at)",
};

/// `rows` claims in one statement; the keys it recorded come back.
fn claim_statement(table: &str, rows: usize) -> String {
    format!(
        "INSERT INTO {table} (key, expires_at) VALUES {} ON CONFLICT (key) DO NOTHING RETURNING key",
        placeholders(rows, 2)
    )
}

static CLAIM_SQLITE: MultiRow = MultiRow::new(|rows| claim_statement("gate_memos", rows));
static CLAIM_POSTGRES: MultiRow =
    MultiRow::new(|rows| claim_statement("tollgate_gate_memos", rows));

const TAKE: PerDialect = PerDialect {
    sqlite: "DELETE FROM gate_memos WHERE key = $1",
    postgres: "DELETE FROM tollgate_gate_memos WHERE key = $1",
};

const PRUNE: PerDialect = PerDialect {
    sqlite: "DELETE FROM gate_memos WHERE expires_at <= $1",
    postgres: "DELETE FROM tollgate_gate_memos WHERE expires_at <= $1",
};

/// [`MemoSet::claim`]: a write that the group commit merges with the claims waiting with it.
#[derive(Clone, Copy, Debug)]
struct Claim {
    key: B256,
    expires_at: i64,
}

impl<C: Conn + 'static> Merge<C> for Claim {
    type Output = bool;

    // A claim alone is one `INSERT … RETURNING`.
    const ONE_STATEMENT: bool = true;

    fn run_all<'c>(
        items: Vec<Self>,
        c: &'c mut C,
    ) -> BoxFuture<'c, StoreResult<Vec<StoreResult<bool>>>> {
        Box::pin(claim_all(c, items))
    }
}

/// Runs `items` in as few statements as their keys allow (a key claimed twice in one batch goes
/// to a second statement, where it comes back as not recorded): whether each recorded its key.
async fn claim_all<C: Conn>(c: &mut C, items: Vec<Claim>) -> StoreResult<Vec<StoreResult<bool>>> {
    let statement = match C::DIALECT {
        Dialect::Sqlite => &CLAIM_SQLITE,
        Dialect::Postgres => &CLAIM_POSTGRES,
    };
    let hex: Vec<String> = items.iter().map(|i| codec::b256(&i.key)).collect();
    let mut won = vec![false; items.len()];
    for group in in_statements(hex.iter().map(|k| Some(k.as_str()))) {
        let mut args = Vec::with_capacity(2 * group.len());
        for &i in &group {
            args.push(Arg::Bytes(items[i].key.as_slice()));
            args.push(Arg::Int(items[i].expires_at));
        }
        let recorded: Vec<(Vec<u8>,)> = c.fetch_all(statement.get(group.len()), &args).await?;
        for (key,) in recorded {
            // Keys are unique within a statement.
            if let Some(&i) = group.iter().find(|&&i| items[i].key.as_slice() == key) {
                won[i] = true;
            }
        }
    }
    Ok(won.into_iter().map(Ok).collect())
}

/// The database a [`MemoSet`] is on.
#[derive(Clone, Debug)]
enum Db {
    #[cfg(feature = "sqlite")]
    Sqlite(crate::SqliteStore),
    #[cfg(feature = "postgres")]
    Postgres(crate::PostgresStore),
}

/// Runs `$body` with `$b` bound to the [`Backend`] of `$db`.
macro_rules! on_backend {
    ($db:expr, $b:ident => $body:expr) => {
        match $db {
            #[cfg(feature = "sqlite")]
            Db::Sqlite($b) => $body,
            #[cfg(feature = "postgres")]
            Db::Postgres($b) => $body,
        }
    };
}

/// A gate's once-only set: each key recorded until its expiry, after which nothing can accept
/// it again anyway (a memo's own expiry, an x402 authorization's `validBefore`).
///
/// [`claim`](Self::claim) is atomic: of any number of concurrent claims of one key, across every
/// process sharing the database, exactly one returns `true`. Cheap to clone; the clones share
/// the connections and the group commit.
#[derive(Clone, Debug)]
pub struct MemoSet {
    db: Db,
}

impl MemoSet {
    /// Opens the set at `url` and creates its table if missing: `sqlite::memory:` (this
    /// process only), `sqlite://PATH` or `sqlite:PATH` (the file and its directory created if
    /// missing, private to the owner; WAL, a commit synced before it is answered), or
    /// `postgres://…` (table `tollgate_gate_memos`, shared by gate replicas). A URL of a backend
    /// this build left out (features `sqlite`, `postgres`) is
    /// [`StoreError::UnsupportedUrl`](crate::StoreError::UnsupportedUrl).
    pub async fn open(url: &str) -> StoreResult<Self> {
        let db = match url {
            #[cfg(feature = "sqlite")]
            _ if url.starts_with("sqlite:") => Db::Sqlite(crate::SqliteStore::connect(url).await?),
            #[cfg(feature = "postgres")]
            _ if url.starts_with("postgres:") || url.starts_with("postgresql:") => {
                Db::Postgres(crate::PostgresStore::connect(url).await?)
            }
            _ => return Err(crate::StoreError::UnsupportedUrl(url.to_owned())),
        };
        Self::create(db).await
    }

    /// [`open`](Self::open) on PostgreSQL with the table in `schema` (created if missing; see
    /// [`PostgresStore::connect_with_schema`](crate::PostgresStore::connect_with_schema)).
    #[cfg(feature = "postgres")]
    pub async fn open_in_schema(url: &str, schema: &str) -> StoreResult<Self> {
        let db = Db::Postgres(crate::PostgresStore::connect_with_schema(url, schema).await?);
        Self::create(db).await
    }

    /// Creates the table if missing, in a write of the group commit (on PostgreSQL, under the
    /// batch's advisory lock: replicas starting at once do not race `CREATE TABLE IF NOT
    /// EXISTS` into a unique violation in the catalog).
    async fn create(db: Db) -> StoreResult<Self> {
        on_backend!(&db, b => b.write(|c| Box::pin(create_table(c))).await)?;
        Ok(Self { db })
    }

    /// Records `key` until `expires_at` (unix seconds): `true` if it was not recorded (the
    /// caller may serve), `false` if it was (a replay). Answered once the record is committed.
    pub async fn claim(&self, key: B256, expires_at: u64) -> StoreResult<bool> {
        let claim = Claim {
            key,
            expires_at: codec::valid_before(expires_at),
        };
        on_backend!(&self.db, b => b.write_merged(claim).await)
    }

    /// Forgets `key`; whether it was recorded. Of several concurrent callers, exactly one gets
    /// `true`.
    pub async fn take(&self, key: B256) -> StoreResult<bool> {
        on_backend!(&self.db, b => b.write(move |c| Box::pin(take(c, key))).await)
    }

    /// Deletes the entries that expired at or before `now`; how many.
    pub async fn prune(&self, now: u64) -> StoreResult<u64> {
        let now = codec::valid_before(now);
        on_backend!(&self.db, b => b.write(move |c| Box::pin(prune(c, now))).await)
    }

    /// Closes the connections, waiting for those in use.
    pub async fn close(&self) {
        on_backend!(&self.db, b => b.close().await)
    }
}

async fn create_table<C: Conn>(c: &mut C) -> StoreResult<()> {
    c.raw(SCHEMA.of(C::DIALECT)).await
}

async fn take<C: Conn>(c: &mut C, key: B256) -> StoreResult<bool> {
    Ok(c.execute(TAKE.of(C::DIALECT), args![key.as_slice()])
        .await?
        > 0)
}

async fn prune<C: Conn>(c: &mut C, now: i64) -> StoreResult<u64> {
    c.execute(PRUNE.of(C::DIALECT), args![now]).await
}
