//! The one seam the shared queries run through: a connection of either backend.
//!
//! Every statement is written once (`$N` placeholders: PostgreSQL's, which SQLite takes as
//! numbered parameters too) and bound once, as a list of [`Arg`]s; [`Conn`] runs it on a
//! `SqliteConnection` or a `PgConnection`. The backends only choose the connection and the
//! transaction around it (SQLite: the group commit's; PostgreSQL: one of its own).
//!
//! The values bound are the few the schema uses: `BIGINT` integers and text, either nullable. A
//! row type is anything both drivers decode ([`Record`]).

use std::future::Future;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use sqlx::{Arguments, Database, Encode, Type};

use crate::StoreResult;

/// A bound value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    /// `BIGINT`.
    Int(i64),
    /// `TEXT`.
    Text(&'a str),
    /// A nullable `BIGINT`.
    OptInt(Option<i64>),
    /// A nullable `TEXT`.
    OptText(Option<&'a str>),
    /// A `BLOB` (SQLite), `BYTEA` (PostgreSQL).
    Bytes(&'a [u8]),
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(v: &'a [u8]) -> Self {
        Self::Bytes(v)
    }
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Self::Text(v)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Self::Text(v)
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(v: Option<i64>) -> Self {
        Self::OptInt(v)
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Self::OptText(v)
    }
}

impl<'a> From<&'a Option<String>> for Arg<'a> {
    fn from(v: &'a Option<String>) -> Self {
        Self::OptText(v.as_deref())
    }
}

/// The arguments of a statement, in placeholder order: `args![a, b, c]`.
macro_rules! args {
    ($($v:expr),* $(,)?) => {
        &[$($crate::conn::Arg::from($v)),*]
    };
}
pub(crate) use args;

/// A row both drivers decode (each driver compiled in: features `sqlite`, `postgres`).
pub(crate) trait Record: FromSqlite + FromPostgres + Send + Unpin + 'static {}

impl<T> Record for T where T: FromSqlite + FromPostgres + Send + Unpin + 'static {}

/// A row SQLite's driver decodes (anything, when it is compiled out).
#[cfg(feature = "sqlite")]
pub(crate) trait FromSqlite: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> {}
#[cfg(feature = "sqlite")]
impl<T> FromSqlite for T where T: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> {}
#[cfg(not(feature = "sqlite"))]
pub(crate) trait FromSqlite {}
#[cfg(not(feature = "sqlite"))]
impl<T> FromSqlite for T {}

/// A row PostgreSQL's driver decodes (anything, when it is compiled out).
#[cfg(feature = "postgres")]
pub(crate) trait FromPostgres: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> {}
#[cfg(feature = "postgres")]
impl<T> FromPostgres for T where T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> {}
#[cfg(not(feature = "postgres"))]
pub(crate) trait FromPostgres {}
#[cfg(not(feature = "postgres"))]
impl<T> FromPostgres for T {}

/// A database's spelling, for the few statements that differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// One statement in each dialect.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PerDialect {
    /// SQLite's spelling.
    pub(crate) sqlite: &'static str,
    /// PostgreSQL's spelling.
    pub(crate) postgres: &'static str,
}

impl PerDialect {
    /// The spelling of `dialect`.
    pub(crate) const fn of(&self, dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
        }
    }
}

/// A connection the shared queries run on (inside whatever transaction its backend opened).
pub(crate) trait Conn: Send {
    /// Its database's spelling.
    const DIALECT: Dialect;

    /// Runs a statement; the number of rows it changed.
    fn execute<'a>(
        &'a mut self,
        sql: &'static str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = StoreResult<u64>> + Send + 'a;

    /// The first row of a query, if any.
    fn fetch_optional<'a, R: Record>(
        &'a mut self,
        sql: &'static str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = StoreResult<Option<R>>> + Send + 'a;

    /// Every row of a query.
    fn fetch_all<'a, R: Record>(
        &'a mut self,
        sql: &'static str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = StoreResult<Vec<R>>> + Send + 'a;

    /// Runs fixed SQL text, possibly several statements, without arguments (transaction
    /// control: `BEGIN`, savepoints, `COMMIT`).
    fn raw(&mut self, sql: &'static str) -> impl Future<Output = StoreResult<()>> + Send + '_;

    /// The row of a query that has one (none is `sqlx::Error::RowNotFound`).
    fn fetch_one<'a, R: Record>(
        &'a mut self,
        sql: &'static str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = StoreResult<R>> + Send + 'a {
        async move {
            self.fetch_optional(sql, args)
                .await?
                .ok_or(crate::StoreError::Database(sqlx::Error::RowNotFound))
        }
    }
}

/// `args` as `DB`'s arguments (none of these values fails to encode).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn arguments<DB: Database>(args: &[Arg<'_>]) -> Result<DB::Arguments, sqlx::Error>
where
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    for<'t> &'t [u8]: Encode<'t, DB> + Type<DB>,
{
    let mut out = DB::Arguments::default();
    for a in args {
        match *a {
            Arg::Int(v) => out.add(v),
            Arg::Text(v) => out.add(v),
            Arg::OptInt(v) => out.add(v),
            Arg::OptText(v) => out.add(v),
            Arg::Bytes(v) => out.add(v),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(out)
}

/// `Conn` for one driver's connection: only the driver's types differ.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! impl_conn {
    ($conn:ty, $db:ty, $dialect:expr) => {
        impl Conn for $conn {
            const DIALECT: Dialect = $dialect;

            async fn execute<'a>(
                &'a mut self,
                sql: &'static str,
                args: &'a [Arg<'a>],
            ) -> StoreResult<u64> {
                let q = sqlx::query_with::<$db, _>(sql, arguments::<$db>(args)?);
                Ok(q.execute(&mut *self).await?.rows_affected())
            }

            async fn fetch_optional<'a, R: Record>(
                &'a mut self,
                sql: &'static str,
                args: &'a [Arg<'a>],
            ) -> StoreResult<Option<R>> {
                let q = sqlx::query_as_with::<$db, R, _>(sql, arguments::<$db>(args)?);
                Ok(q.fetch_optional(&mut *self).await?)
            }

            async fn fetch_all<'a, R: Record>(
                &'a mut self,
                sql: &'static str,
                args: &'a [Arg<'a>],
            ) -> StoreResult<Vec<R>> {
                let q = sqlx::query_as_with::<$db, R, _>(sql, arguments::<$db>(args)?);
                Ok(q.fetch_all(&mut *self).await?)
            }

            async fn raw(&mut self, sql: &'static str) -> StoreResult<()> {
                sqlx::raw_sql(sql).execute(&mut *self).await?;
                Ok(())
            }
        }
    };
}

#[cfg(feature = "sqlite")]
impl_conn!(sqlx::SqliteConnection, sqlx::Sqlite, Dialect::Sqlite);
#[cfg(feature = "postgres")]
impl_conn!(sqlx::PgConnection, sqlx::Postgres, Dialect::Postgres);

/// Most rows one multi-row statement takes ([`MultiRow`]).
pub(crate) const MAX_ROWS: usize = 64;

/// `rows` parenthesised rows of placeholders, `width` to a row; `row(first)` spells the row
/// whose first placeholder is `$first`.
pub(crate) fn values(rows: usize, width: usize, row: impl Fn(usize) -> String) -> String {
    let rows: Vec<String> = (0..rows).map(|r| row(1 + r * width)).collect();
    rows.join(", ")
}

/// [`values`] with each row its placeholders in order: `($1, $2, …), ($w+1, …), …`.
pub(crate) fn placeholders(rows: usize, width: usize) -> String {
    values(rows, width, |first| {
        let row: Vec<String> = (first..first + width).map(|i| format!("${i}")).collect();
        format!("({})", row.join(", "))
    })
}

/// A statement of many rows, built once for each size it is used at: a power of two of rows up
/// to [`MAX_ROWS`] (a few texts, each prepared once per connection).
pub(crate) struct MultiRow {
    build: fn(usize) -> String,
    texts: [std::sync::OnceLock<String>; 7],
}

impl MultiRow {
    pub(crate) const fn new(build: fn(usize) -> String) -> Self {
        Self {
            build,
            texts: [const { std::sync::OnceLock::new() }; 7],
        }
    }

    /// The statement for `rows` rows (a size [`in_statements`] gives).
    pub(crate) fn get(&'static self, rows: usize) -> &'static str {
        debug_assert!(rows.is_power_of_two() && rows <= MAX_ROWS);
        let i = (rows.trailing_zeros() as usize).min(self.texts.len() - 1);
        self.texts[i].get_or_init(|| (self.build)(1 << i))
    }
}

/// Groups the items of a merged write (by their keys, `None` for one that takes no part) into
/// multi-row statements to run in turn: no key twice in one statement (a key's second write
/// runs in a statement after its first), each statement a power of two of rows up to
/// [`MAX_ROWS`].
pub(crate) fn in_statements<'k>(keys: impl Iterator<Item = Option<&'k str>>) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, key) in keys.enumerate() {
        let Some(key) = key else { continue };
        let round = seen.entry(key).or_insert(0);
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(i);
        *round += 1;
    }
    rounds
        .iter()
        .flat_map(|round| in_sizes(round).map(<[usize]>::to_vec))
        .collect()
}

/// `rows` in the statement sizes a [`MultiRow`] has: powers of two up to [`MAX_ROWS`], largest
/// first.
pub(crate) fn in_sizes<T>(rows: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (now, after) = rest.split_at(MAX_ROWS.min(1 << rest.len().ilog2()));
        rest = after;
        Some(now)
    })
}
