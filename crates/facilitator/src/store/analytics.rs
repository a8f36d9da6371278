//! Analytics: the settled-volume rollups written with each confirmation, and the reads behind
//! `GET /analytics` and `/dashboard`.
//!
//! Settled volume is kept twice, in the transaction that confirms the settlement: per payee,
//! hour, network and resource (`volume_rollups`), and per payee, UTC day and payer
//! (`payer_rollups`: payers are many, a day keeps it small). A report over a range reads those
//! rows, never the settlements themselves, so its cost grows with hours and resources, not with
//! payments. Subscription, allowance and failure counts come from the event outbox (indexed by
//! provider, type and time), metered usage from the usage ledger, subscription states from the
//! keeper's index joined to the plans the provider published.
//!
//! Every statement is written once, in PostgreSQL's `$N` spelling; SQLite takes the same text
//! with `?N` ([`sqlite_sql`]).

use std::sync::LazyLock;

use alloy::primitives::{Address, B256};

use super::{Settlement, StoreError, StoreResult, codec};

/// The largest amount a rollup holds (sums saturate there).
pub const ROLLUP_MAX: u64 = i64::MAX as u64;

/// Settled volume of one group: payments, gross (what payers paid) and the facilitator's fees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Volume {
    /// Settled payments.
    pub payments: u64,
    /// Their gross amount, in the token's smallest unit.
    pub gross: u128,
    /// The facilitator's fees out of it.
    pub fees: u128,
}

impl Volume {
    /// Adds `other` (saturating).
    pub fn add(&mut self, other: &Volume) {
        self.payments = self.payments.saturating_add(other.payments);
        self.gross = self.gross.saturating_add(other.gross);
        self.fees = self.fees.saturating_add(other.fees);
    }
}

/// What a report covers: a payee (the provider), a time range and how to bucket it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnalyticsQuery {
    /// The provider (the payee of its payments, the owner of its plans and endpoints).
    pub provider: Address,
    /// Start, unix seconds, inclusive (rollups are hourly: the hour holding it is included).
    pub from: u64,
    /// End, unix seconds, exclusive.
    pub to: u64,
    /// Bucket width in seconds (3600, 86400 or 604800).
    pub bucket_secs: u64,
    /// Where buckets start, modulo `bucket_secs` (weeks start on Monday: 4 days).
    pub bucket_offset: u64,
    /// How many entries the top lists (resources, networks, payers) keep.
    pub top: u32,
    /// How many recent payments to list.
    pub recent: u32,
}

impl AnalyticsQuery {
    /// The start of the bucket holding `t`.
    pub fn bucket_of(&self, t: u64) -> u64 {
        let off = self.bucket_offset % self.bucket_secs;
        if t < off {
            return 0;
        }
        (t - off) / self.bucket_secs * self.bucket_secs + off
    }
}

/// The subscriptions of one plan by state (from the keeper's index).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanStates {
    /// Network name.
    pub network: String,
    /// The plan.
    pub plan_id: B256,
    /// Active subscriptions.
    pub active: u64,
    /// Paused ones.
    pub paused: u64,
    /// Cancelled ones.
    pub cancelled: u64,
}

/// Delivery health of one webhook endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointHealth {
    /// Endpoint id.
    pub id: String,
    /// Its URL.
    pub url: String,
    /// Whether deliveries go out.
    pub enabled: bool,
    /// Why it was disabled (a 410).
    pub disabled_reason: Option<String>,
    /// Deliveries waiting (first attempt or retry).
    pub pending: u64,
    /// Pending deliveries that already failed at least once.
    pub retrying: u64,
    /// Deliveries given up on (dead letter).
    pub dead: u64,
    /// Deliveries acknowledged within the range.
    pub delivered: u64,
}

/// Everything a report reads from the store, before it is shaped for JSON or HTML.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnalyticsData {
    /// Settled volume per bucket start (buckets with none are absent).
    pub series: Vec<(u64, Volume)>,
    /// Top resources by gross ('' is "not reported").
    pub by_resource: Vec<(String, Volume)>,
    /// Top networks by gross.
    pub by_network: Vec<(String, Volume)>,
    /// Top payers by gross, over the whole UTC days the range touches.
    pub by_payer: Vec<(Address, Volume)>,
    /// Subscriptions to the provider's plans, per plan and state.
    pub plans: Vec<PlanStates>,
    /// The `data` of the provider's `plan.created` events (the plans' terms).
    pub plan_terms: Vec<String>,
    /// Counts of subscription, allowance and payment-failure events per (bucket start, type).
    pub events: Vec<(u64, String, u64)>,
    /// Metered usage per bucket start: deductions and the amount deducted.
    pub metered: Vec<(u64, u64, u128)>,
    /// Overage charges finished within the range: confirmed and failed (unpaid) amounts.
    pub charged: u128,
    /// See `charged`.
    pub unpaid: u128,
    /// The provider's webhook endpoints.
    pub endpoints: Vec<EndpointHealth>,
    /// The provider's latest payments (any status), newest first.
    pub recent: Vec<Settlement>,
}

/// The event types a report counts.
pub const COUNTED_EVENTS: &[&str] = &[
    "payment.failed",
    "subscription.created",
    "subscription.renewed",
    "subscription.renewal_failed",
    "subscription.paused",
    "subscription.resumed",
    "subscription.cancelled",
    "allowance.exhausted",
    "allowance.raised",
    "allowance.charged",
];

/// The statements, in one dialect.
#[derive(Debug)]
pub(super) struct Sql<S> {
    /// (pay_to, hour, network, resource, gross, fees): one settlement into the hourly rollup.
    pub(super) rollup_volume: S,
    /// (pay_to, day, payer, gross, fees): one settlement into the daily payer rollup.
    pub(super) rollup_payer: S,
    /// (provider, from hour, to, offset, bucket) → (start, payments, gross, fees).
    pub(super) series: S,
    /// (provider, from hour, to, limit) → (resource, payments, gross, fees).
    pub(super) by_resource: S,
    /// (provider, from hour, to, limit) → (network, payments, gross, fees).
    pub(super) by_network: S,
    /// (provider, from day, to, limit) → (payer, payments, gross, fees).
    pub(super) by_payer: S,
    /// (provider) → (network, plan, state, count).
    pub(super) plan_states: S,
    /// (provider) → plan.created data.
    pub(super) plan_terms: S,
    /// (provider, from, to, offset, bucket) → (start, type, count).
    pub(super) events: S,
    /// (provider, from, to, offset, bucket) → (start, deductions, amount).
    pub(super) metered: S,
    /// (provider, from, to) → (state, amount).
    pub(super) charges: S,
    /// (provider, from, to) → endpoint health rows.
    pub(super) endpoints: S,
    /// (provider, limit) → settlement rows.
    pub(super) recent: S,
    /// (token hash, key hash, expires, now): a new dashboard session.
    pub(super) insert_session: S,
    /// (now): drops expired sessions.
    pub(super) purge_sessions: S,
    /// (token hash, now) → the provider, while the session and its API key are valid.
    pub(super) session_provider: S,
    /// (token hash).
    pub(super) delete_session: S,
}

/// `x = x + v`, saturating at [`ROLLUP_MAX`] (both dialects; never evaluates an overflow).
macro_rules! saturating_add {
    ($table:literal, $col:literal) => {
        concat!(
            $col,
            " = CASE WHEN ",
            $table,
            ".",
            $col,
            " > 9223372036854775807 - excluded.",
            $col,
            " THEN 9223372036854775807 ELSE ",
            $table,
            ".",
            $col,
            " + excluded.",
            $col,
            " END"
        )
    };
}

/// The sum of an integer column as two texts, of its high and low 32 bits: SQLite's `SUM`
/// fails on an `i64` overflow, and rows of up to 2^63 each can overflow it; the halves cannot
/// (for fewer than 2^31 rows), and [`split_sum`] adds them up exactly.
macro_rules! split_sum {
    ($col:literal) => {
        concat!(
            "CAST(SUM(",
            $col,
            " / 4294967296) AS TEXT), CAST(SUM(",
            $col,
            " % 4294967296) AS TEXT)"
        )
    };
}

/// `payments, gross (hi, lo), fees (hi, lo)` of a rollup group.
macro_rules! volume_sums {
    () => {
        concat!(
            "CAST(SUM(payments) AS BIGINT), ",
            split_sum!("gross"),
            ", ",
            split_sum!("fees")
        )
    };
}

/// Joins a table aliased `u` with `(network, id)` of a subscription to the provider's plans.
macro_rules! owned_subscription {
    () => {
        " JOIN subscriptions_index s ON s.network = u.network AND s.id = u.id \
         JOIN plans p ON p.network = s.network AND p.plan_id = s.plan_id WHERE p.provider = $1"
    };
}

/// In PostgreSQL's spelling.
pub(super) const POSTGRES: Sql<&str> = Sql {
    rollup_volume: concat!(
        "INSERT INTO volume_rollups (pay_to, hour, network, resource, payments, gross, fees) \
         VALUES ($1, $2, $3, $4, 1, $5, $6) \
         ON CONFLICT (pay_to, hour, network, resource) DO UPDATE SET \
         payments = volume_rollups.payments + 1, ",
        saturating_add!("volume_rollups", "gross"),
        ", ",
        saturating_add!("volume_rollups", "fees")
    ),
    rollup_payer: concat!(
        "INSERT INTO payer_rollups (pay_to, day, payer, payments, gross, fees) \
         VALUES ($1, $2, $3, 1, $4, $5) \
         ON CONFLICT (pay_to, day, payer) DO UPDATE SET payments = payer_rollups.payments + 1, ",
        saturating_add!("payer_rollups", "gross"),
        ", ",
        saturating_add!("payer_rollups", "fees")
    ),
    series: concat!(
        "SELECT ((hour - $4) / $5) * $5 + $4 AS t, ",
        volume_sums!(),
        " FROM volume_rollups WHERE pay_to = $1 AND hour >= $2 AND hour < $3 \
         GROUP BY t ORDER BY t"
    ),
    // Ranked by the sum as a float (`* 1.0`): exact enough to order by, and unlike an integer
    // `SUM` it cannot overflow on SQLite.
    by_resource: concat!(
        "SELECT resource, ",
        volume_sums!(),
        " FROM volume_rollups WHERE pay_to = $1 AND hour >= $2 AND hour < $3 \
         GROUP BY resource ORDER BY SUM(gross * 1.0) DESC, resource LIMIT $4"
    ),
    by_network: concat!(
        "SELECT network, ",
        volume_sums!(),
        " FROM volume_rollups WHERE pay_to = $1 AND hour >= $2 AND hour < $3 \
         GROUP BY network ORDER BY SUM(gross * 1.0) DESC, network LIMIT $4"
    ),
    by_payer: concat!(
        "SELECT payer, ",
        volume_sums!(),
        " FROM payer_rollups WHERE pay_to = $1 AND day >= $2 AND day < $3 \
         GROUP BY payer ORDER BY SUM(gross * 1.0) DESC, payer LIMIT $4"
    ),
    plan_states: "SELECT s.network, s.plan_id, s.state, COUNT(*) FROM subscriptions_index s \
         JOIN plans p ON p.network = s.network AND p.plan_id = s.plan_id \
         WHERE p.provider = $1 GROUP BY s.network, s.plan_id, s.state",
    plan_terms: "SELECT data FROM events WHERE provider = $1 AND type = 'plan.created' \
         ORDER BY created_at",
    events: "SELECT ((created_at - $4) / $5) * $5 + $4 AS t, type, COUNT(*) FROM events \
         WHERE provider = $1 AND type IN ('payment.failed', 'subscription.created', \
         'subscription.renewed', 'subscription.renewal_failed', 'subscription.paused', \
         'subscription.resumed', 'subscription.cancelled', 'allowance.exhausted', \
         'allowance.raised', 'allowance.charged') \
         AND created_at >= $2 AND created_at < $3 GROUP BY t, type ORDER BY t, type",
    metered: concat!(
        "SELECT ((u.created_at - $4) / $5) * $5 + $4 AS t, COUNT(*), ",
        split_sum!("u.amount"),
        " FROM usage_records u",
        owned_subscription!(),
        " AND u.created_at >= $2 AND u.created_at < $3 GROUP BY t ORDER BY t"
    ),
    charges: concat!(
        "SELECT u.state, ",
        split_sum!("u.amount"),
        " FROM overage_charges u",
        owned_subscription!(),
        " AND u.state <> 'pending' AND u.updated_at >= $2 AND u.updated_at < $3 \
         GROUP BY u.state"
    ),
    endpoints: "SELECT e.id, e.url, e.enabled, e.disabled_reason, \
         (SELECT COUNT(*) FROM webhook_deliveries d \
          WHERE d.endpoint_id = e.id AND d.state = 'pending'), \
         (SELECT COUNT(*) FROM webhook_deliveries d \
          WHERE d.endpoint_id = e.id AND d.state = 'pending' AND d.attempts > 0), \
         (SELECT COUNT(*) FROM webhook_deliveries d \
          WHERE d.endpoint_id = e.id AND d.state = 'dead'), \
         (SELECT COUNT(*) FROM webhook_deliveries d WHERE d.endpoint_id = e.id \
          AND d.state = 'delivered' AND d.updated_at >= $2 AND d.updated_at < $3) \
         FROM webhook_endpoints e WHERE e.provider = $1 ORDER BY e.created_at, e.id",
    recent: concat!(
        "SELECT ",
        codec::settlement_columns!(),
        " FROM settlements WHERE pay_to = $1 ORDER BY updated_at DESC, key LIMIT $2"
    ),
    insert_session: "INSERT INTO dashboard_sessions (token_hash, key_hash, expires_at, created_at) \
         VALUES ($1, $2, $3, $4)",
    purge_sessions: "DELETE FROM dashboard_sessions WHERE expires_at <= $1",
    session_provider: "SELECT k.provider FROM dashboard_sessions s \
         JOIN api_keys k ON k.key_hash = s.key_hash \
         WHERE s.token_hash = $1 AND s.expires_at > $2 AND k.revoked_at IS NULL",
    delete_session: "DELETE FROM dashboard_sessions WHERE token_hash = $1",
};

/// The same statements in SQLite's `?N` spelling (no statement holds a `$` of its own), made
/// once per process.
pub(super) fn sqlite_sql() -> &'static Sql<&'static str> {
    static SQL: LazyLock<Sql<&'static str>> = LazyLock::new(|| {
        let s = |q: &str| -> &'static str { Box::leak(q.replace('$', "?").into_boxed_str()) };
        let p = &POSTGRES;
        Sql {
            rollup_volume: s(p.rollup_volume),
            rollup_payer: s(p.rollup_payer),
            series: s(p.series),
            by_resource: s(p.by_resource),
            by_network: s(p.by_network),
            by_payer: s(p.by_payer),
            plan_states: s(p.plan_states),
            plan_terms: s(p.plan_terms),
            events: s(p.events),
            metered: s(p.metered),
            charges: s(p.charges),
            endpoints: s(p.endpoints),
            recent: s(p.recent),
            insert_session: s(p.insert_session),
            purge_sessions: s(p.purge_sessions),
            session_provider: s(p.session_provider),
            delete_session: s(p.delete_session),
        }
    });
    &SQL
}

/// The bound values of one confirmed settlement's rollup rows.
pub(super) struct Rollup {
    pub(super) pay_to: String,
    pub(super) payer: String,
    pub(super) hour: i64,
    pub(super) day: i64,
    pub(super) network: String,
    pub(super) resource: String,
    pub(super) gross: i64,
    pub(super) fees: i64,
}

impl Rollup {
    /// The rollup of a settlement confirmed at its `updated_at`.
    pub(super) fn of(s: &Settlement) -> Self {
        let at = i64::try_from(s.updated_at).unwrap_or(i64::MAX);
        let units = |a: tollgate_protocol::Amount| i64::try_from(a.get()).unwrap_or(i64::MAX);
        Self {
            pay_to: codec::address(&s.new.pay_to),
            payer: codec::address(&s.new.payer),
            hour: at - at % 3600,
            day: at - at % 86_400,
            network: s.new.network.clone(),
            resource: s.new.resource.clone().unwrap_or_default(),
            gross: units(s.new.amount),
            fees: units(s.new.fee),
        }
    }
}

/// Writes the rollups of a settlement just confirmed, inside the caller's transaction. `$conn`
/// is the connection expression, `$sql` the dialect's [`Sql`].
macro_rules! write_rollup {
    ($conn:expr, $sql:expr, $settlement:expr) => {{
        let r = $crate::store::analytics::Rollup::of($settlement);
        sqlx::query($sql.rollup_volume)
            .bind(&r.pay_to)
            .bind(r.hour)
            .bind(&r.network)
            .bind(&r.resource)
            .bind(r.gross)
            .bind(r.fees)
            .execute(&mut *$conn)
            .await?;
        sqlx::query($sql.rollup_payer)
            .bind(&r.pay_to)
            .bind(r.day)
            .bind(&r.payer)
            .bind(r.gross)
            .bind(r.fees)
            .execute(&mut *$conn)
            .await?;
    }};
}
pub(super) use write_rollup;

/// Runs a report's reads against `$pool` (a reader pool) with the dialect's [`Sql`]; the body of
/// [`super::Store::analytics`] in both backends.
macro_rules! read_analytics {
    ($pool:expr, $sql:expr, $q:expr) => {{
        use $crate::store::analytics as an;
        let (sql, q, pool) = ($sql, $q, $pool);
        let provider = $crate::store::codec::address(&q.provider);
        let int = |what, v| $crate::store::codec::int(what, v);
        let from = int("from", q.from)?;
        let to = int("to", q.to)?;
        let from_hour = from - from % 3600;
        let from_day = from - from % 86_400;
        let offset = int("bucket offset", q.bucket_offset % q.bucket_secs.max(1))?;
        let bucket = int("bucket", q.bucket_secs.max(1))?;
        let top = i64::from(q.top);
        let s = |x: &&'static str| -> &'static str { x };
        let series: Vec<(i64, i64, String, String, String, String)> =
            sqlx::query_as(s(&sql.series))
                .bind(&provider)
                .bind(from_hour)
                .bind(to)
                .bind(offset)
                .bind(bucket)
                .fetch_all(pool)
                .await?;
        let by_resource: Vec<(String, i64, String, String, String, String)> =
            sqlx::query_as(s(&sql.by_resource))
                .bind(&provider)
                .bind(from_hour)
                .bind(to)
                .bind(top)
                .fetch_all(pool)
                .await?;
        let by_network: Vec<(String, i64, String, String, String, String)> =
            sqlx::query_as(s(&sql.by_network))
                .bind(&provider)
                .bind(from_hour)
                .bind(to)
                .bind(top)
                .fetch_all(pool)
                .await?;
        let by_payer: Vec<(String, i64, String, String, String, String)> =
            sqlx::query_as(s(&sql.by_payer))
                .bind(&provider)
                .bind(from_day)
                .bind(to)
                .bind(top)
                .fetch_all(pool)
                .await?;
        let plan_states: Vec<(String, String, String, i64)> = sqlx::query_as(s(&sql.plan_states))
            .bind(&provider)
            .fetch_all(pool)
            .await?;
        let plan_terms: Vec<(String,)> = sqlx::query_as(s(&sql.plan_terms))
            .bind(&provider)
            .fetch_all(pool)
            .await?;
        let events: Vec<(i64, String, i64)> = sqlx::query_as(s(&sql.events))
            .bind(&provider)
            .bind(from)
            .bind(to)
            .bind(offset)
            .bind(bucket)
            .fetch_all(pool)
            .await?;
        let metered: Vec<(i64, i64, String, String)> = sqlx::query_as(s(&sql.metered))
            .bind(&provider)
            .bind(from)
            .bind(to)
            .bind(offset)
            .bind(bucket)
            .fetch_all(pool)
            .await?;
        let charges: Vec<(String, String, String)> = sqlx::query_as(s(&sql.charges))
            .bind(&provider)
            .bind(from)
            .bind(to)
            .fetch_all(pool)
            .await?;
        let endpoints: Vec<(String, String, i64, Option<String>, i64, i64, i64, i64)> =
            sqlx::query_as(s(&sql.endpoints))
                .bind(&provider)
                .bind(from)
                .bind(to)
                .fetch_all(pool)
                .await?;
        let recent: Vec<$crate::store::codec::SettlementRow> = sqlx::query_as(s(&sql.recent))
            .bind(&provider)
            .bind(i64::from(q.recent))
            .fetch_all(pool)
            .await?;
        an::assemble(an::Raw {
            series,
            by_resource,
            by_network,
            by_payer,
            plan_states,
            plan_terms,
            events,
            metered,
            charges,
            endpoints,
            recent,
        })
    }};
}
pub(super) use read_analytics;

/// A report's rows as the database returns them.
pub(super) struct Raw {
    pub(super) series: Vec<(i64, i64, String, String, String, String)>,
    pub(super) by_resource: Vec<(String, i64, String, String, String, String)>,
    pub(super) by_network: Vec<(String, i64, String, String, String, String)>,
    pub(super) by_payer: Vec<(String, i64, String, String, String, String)>,
    pub(super) plan_states: Vec<(String, String, String, i64)>,
    pub(super) plan_terms: Vec<(String,)>,
    pub(super) events: Vec<(i64, String, i64)>,
    pub(super) metered: Vec<(i64, i64, String, String)>,
    pub(super) charges: Vec<(String, String, String)>,
    #[allow(clippy::type_complexity)]
    pub(super) endpoints: Vec<(String, String, i64, Option<String>, i64, i64, i64, i64)>,
    pub(super) recent: Vec<codec::SettlementRow>,
}

fn corrupt(what: &str, v: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what} = {v:.80}"))
}

fn count(what: &str, v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| corrupt(what, v))
}

/// A `SUM` as text (NULL never reaches here: every group has a row).
fn sum(what: &str, v: &str) -> StoreResult<u128> {
    // SQLite may print an integral sum as "12.0" when it went through REAL; take the integer.
    let digits = v.split('.').next().unwrap_or(v);
    digits.parse().map_err(|_| corrupt(what, v))
}

/// A [`split_sum!`]: `hi × 2^32 + lo`.
fn split_sum(what: &str, hi: &str, lo: &str) -> StoreResult<u128> {
    Ok(sum(what, hi)?
        .saturating_mul(1 << 32)
        .saturating_add(sum(what, lo)?))
}

fn volume(payments: i64, sums: [&str; 4]) -> StoreResult<Volume> {
    Ok(Volume {
        payments: count("payments", payments)?,
        gross: split_sum("gross", sums[0], sums[1])?,
        fees: split_sum("fees", sums[2], sums[3])?,
    })
}

/// Decodes a report's rows; anything the writers would not produce is `Corrupt`.
pub(super) fn assemble(raw: Raw) -> StoreResult<AnalyticsData> {
    type Row = (String, i64, String, String, String, String);
    let keyed = |rows: Vec<Row>| -> StoreResult<Vec<(String, Volume)>> {
        rows.into_iter()
            .map(|(k, n, gh, gl, fh, fl)| Ok((k, volume(n, [&gh, &gl, &fh, &fl])?)))
            .collect()
    };
    let mut plans: Vec<PlanStates> = Vec::new();
    for (network, plan, state, n) in raw.plan_states {
        let plan_id = codec::parse_b256("plan_id", &plan)?;
        let i = match plans
            .iter()
            .position(|p| p.network == network && p.plan_id == plan_id)
        {
            Some(i) => i,
            None => {
                plans.push(PlanStates {
                    network,
                    plan_id,
                    ..PlanStates::default()
                });
                plans.len() - 1
            }
        };
        let n = count("subscriptions", n)?;
        match state.as_str() {
            "active" => plans[i].active = n,
            "paused" => plans[i].paused = n,
            "cancelled" => plans[i].cancelled = n,
            other => return Err(corrupt("state", other)),
        }
    }
    let (mut charged, mut unpaid) = (0u128, 0u128);
    for (state, hi, lo) in raw.charges {
        match state.as_str() {
            "confirmed" => charged = split_sum("charged", &hi, &lo)?,
            "failed" => unpaid = split_sum("unpaid", &hi, &lo)?,
            other => return Err(corrupt("charge state", other)),
        }
    }
    Ok(AnalyticsData {
        series: raw
            .series
            .into_iter()
            .map(|(t, n, gh, gl, fh, fl)| {
                Ok((count("bucket", t)?, volume(n, [&gh, &gl, &fh, &fl])?))
            })
            .collect::<StoreResult<_>>()?,
        by_resource: keyed(raw.by_resource)?,
        by_network: keyed(raw.by_network)?,
        by_payer: keyed(raw.by_payer)?
            .into_iter()
            .map(|(p, v)| Ok((codec::parse_address("payer", &p)?, v)))
            .collect::<StoreResult<_>>()?,
        plans,
        plan_terms: raw.plan_terms.into_iter().map(|(d,)| d).collect(),
        events: raw
            .events
            .into_iter()
            .map(|(t, kind, n)| Ok((count("bucket", t)?, kind, count("events", n)?)))
            .collect::<StoreResult<_>>()?,
        metered: raw
            .metered
            .into_iter()
            .map(|(t, n, hi, lo)| {
                Ok((
                    count("bucket", t)?,
                    count("deductions", n)?,
                    split_sum("used", &hi, &lo)?,
                ))
            })
            .collect::<StoreResult<_>>()?,
        charged,
        unpaid,
        endpoints: raw
            .endpoints
            .into_iter()
            .map(
                |(id, url, enabled, disabled_reason, pending, retrying, dead, delivered)| {
                    Ok(EndpointHealth {
                        id,
                        url,
                        enabled: enabled != 0,
                        disabled_reason,
                        pending: count("pending", pending)?,
                        retrying: count("retrying", retrying)?,
                        dead: count("dead", dead)?,
                        delivered: count("delivered", delivered)?,
                    })
                },
            )
            .collect::<StoreResult<_>>()?,
        recent: raw
            .recent
            .into_iter()
            .map(codec::SettlementRow::decode)
            .collect::<StoreResult<_>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_spelling_only_swaps_placeholders() {
        let s = sqlite_sql();
        assert!(s.series.contains("?4") && !s.series.contains('$'));
        assert_eq!(s.series.replace('?', "$"), POSTGRES.series);
    }

    #[test]
    fn buckets_align_to_their_offset() {
        let q = AnalyticsQuery {
            provider: Address::ZERO,
            from: 0,
            to: 0,
            bucket_secs: 604_800,
            bucket_offset: 345_600,
            top: 10,
            recent: 10,
        };
        // 2026-11-23 was a Monday.
        let monday = 1_795_392_000;
        assert_eq!(q.bucket_of(monday), monday);
        assert_eq!(q.bucket_of(monday + 6 * 86_400 + 3), monday);
        assert_eq!(q.bucket_of(monday - 1), monday - 604_800);
    }

    #[test]
    fn split_sums_add_up_past_i64() {
        let max = i64::MAX as u128;
        let (hi, lo) = ((max >> 32) * 3, (max & 0xffff_ffff) * 3);
        assert_eq!(
            split_sum("x", &hi.to_string(), &lo.to_string()).unwrap(),
            3 * max
        );
    }

    #[test]
    fn sums_read_integers_only() {
        assert_eq!(sum("x", "12").unwrap(), 12);
        assert_eq!(sum("x", "12.0").unwrap(), 12);
        assert!(sum("x", "-1").is_err());
        assert!(sum("x", "abc").is_err());
    }
}
