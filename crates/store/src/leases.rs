//! Leases: named, expiring, exclusive holds that replicas sharing one database take on what only
//! one of them may do at a time (a relayer account's nonces, the keeper, one webhook endpoint's
//! queue).
//!
//! A lease is taken, renewed and released by one statement each, so concurrent takers of one
//! name are ordered by the database: exactly one gets it. Expiry is read on the database's clock
//! (unix milliseconds), never a replica's, so a replica whose clock runs ahead cannot take a
//! lease early. Each tenure gets a fencing token that grows by one whenever the lease changes
//! hands or is taken again after it lapsed; a released lease is marked expired, not deleted, so
//! tokens never repeat.

use std::time::Duration;

use crate::{
    StoreResult,
    conn::{Conn, PerDialect, args},
};

/// A lease as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Its name (`relayer:0x…`, `keeper`, `webhooks:we_…`).
    pub name: String,
    /// The holder of the latest tenure (a replica's id), expired or not.
    pub holder: String,
    /// That tenure's fencing token.
    pub token: u64,
    /// Whether the tenure is still running on the database's clock.
    pub live: bool,
}

/// The database's clock in unix milliseconds, per dialect.
macro_rules! now_ms {
    (sqlite) => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
    (postgres) => {
        "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
    };
}

/// (name, holder, ttl ms) → the token, when the lease is free, lapsed or already the holder's.
macro_rules! acquire {
    ($d:tt) => {
        concat!(
            "INSERT INTO leases (name, holder, token, expires_at) VALUES ($1, $2, 1, ",
            now_ms!($d),
            " + $3) ON CONFLICT (name) DO UPDATE SET \
             token = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > ",
            now_ms!($d),
            " THEN leases.token ELSE leases.token + 1 END, \
             holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE leases.holder = excluded.holder OR leases.expires_at <= ",
            now_ms!($d),
            " RETURNING token"
        )
    };
}

const ACQUIRE: PerDialect = PerDialect {
    sqlite: acquire!(sqlite),
    postgres: acquire!(postgres),
};

/// (name, holder, token, ttl ms): extends a running tenure, never a lapsed one.
macro_rules! renew {
    ($d:tt) => {
        concat!(
            "UPDATE leases SET expires_at = ",
            now_ms!($d),
            " + $4 WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > ",
            now_ms!($d)
        )
    };
}

const RENEW: PerDialect = PerDialect {
    sqlite: renew!(sqlite),
    postgres: renew!(postgres),
};

/// (name, new holder, old holder, old token, ttl ms) → the new token: the old holder's tenure
/// passes to the new holder at once (the old holder is known to be dead).
macro_rules! take_over {
    ($d:tt) => {
        concat!(
            "UPDATE leases SET holder = $2, token = token + 1, expires_at = ",
            now_ms!($d),
            " + $5 WHERE name = $1 AND holder = $3 AND token = $4 RETURNING token"
        )
    };
}

const TAKE_OVER: PerDialect = PerDialect {
    sqlite: take_over!(sqlite),
    postgres: take_over!(postgres),
};

/// (name, holder, token): ends the tenure now.
const RELEASE: &str =
    "UPDATE leases SET expires_at = 0 WHERE name = $1 AND holder = $2 AND token = $3";

macro_rules! select {
    ($d:tt) => {
        concat!(
            "SELECT name, holder, token, CAST(CASE WHEN expires_at > ",
            now_ms!($d),
            " THEN 1 ELSE 0 END AS BIGINT) FROM leases WHERE substr(name, 1, length($1)) = $1 ORDER BY name"
        )
    };
}

const SELECT: PerDialect = PerDialect {
    sqlite: select!(sqlite),
    postgres: select!(postgres),
};

/// (prefix, ms): deletes the leases named with `prefix` that lapsed more than `ms` ago.
macro_rules! prune {
    ($d:tt) => {
        concat!(
            "DELETE FROM leases WHERE substr(name, 1, length($1)) = $1 AND expires_at < ",
            now_ms!($d),
            " - $2"
        )
    };
}

const PRUNE: PerDialect = PerDialect {
    sqlite: prune!(sqlite),
    postgres: prune!(postgres),
};

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

/// [`crate::Store::acquire_lease`].
pub(crate) async fn acquire<C: Conn>(
    c: &mut C,
    name: &str,
    holder: &str,
    ttl: Duration,
) -> StoreResult<Option<u64>> {
    let row: Option<(i64,)> = c
        .fetch_optional(ACQUIRE.of(C::DIALECT), args![name, holder, ttl_ms(ttl)])
        .await?;
    Ok(row.map(|(t,)| t.unsigned_abs()))
}

/// [`crate::Store::take_over_lease`].
pub(crate) async fn take_over<C: Conn>(
    c: &mut C,
    name: &str,
    holder: &str,
    from: &str,
    token: u64,
    ttl: Duration,
) -> StoreResult<Option<u64>> {
    let token = crate::codec::int("token", token)?;
    let row: Option<(i64,)> = c
        .fetch_optional(
            TAKE_OVER.of(C::DIALECT),
            args![name, holder, from, token, ttl_ms(ttl)],
        )
        .await?;
    Ok(row.map(|(t,)| t.unsigned_abs()))
}

/// [`crate::Store::renew_lease`].
pub(crate) async fn renew<C: Conn>(
    c: &mut C,
    name: &str,
    holder: &str,
    token: u64,
    ttl: Duration,
) -> StoreResult<bool> {
    let token = crate::codec::int("token", token)?;
    let done = c
        .execute(
            RENEW.of(C::DIALECT),
            args![name, holder, token, ttl_ms(ttl)],
        )
        .await?;
    Ok(done > 0)
}

/// [`crate::Store::release_lease`].
pub(crate) async fn release(
    c: &mut impl Conn,
    name: &str,
    holder: &str,
    token: u64,
) -> StoreResult<bool> {
    let token = crate::codec::int("token", token)?;
    let done = c.execute(RELEASE, args![name, holder, token]).await?;
    Ok(done > 0)
}

/// [`crate::Store::leases`].
pub(crate) async fn list<C: Conn>(c: &mut C, prefix: &str) -> StoreResult<Vec<Lease>> {
    let rows: Vec<(String, String, i64, i64)> =
        c.fetch_all(SELECT.of(C::DIALECT), args![prefix]).await?;
    Ok(rows
        .into_iter()
        .map(|(name, holder, token, live)| Lease {
            name,
            holder,
            token: token.unsigned_abs(),
            live: live != 0,
        })
        .collect())
}

/// [`crate::Store::prune_leases`].
pub(crate) async fn prune<C: Conn>(
    c: &mut C,
    prefix: &str,
    lapsed_for: Duration,
) -> StoreResult<u64> {
    c.execute(PRUNE.of(C::DIALECT), args![prefix, ttl_ms(lapsed_for)])
        .await
}
