//! The analytics statements, written once for both databases, and the operations on them.

use std::collections::BTreeMap;

use super::{AnalyticsData, AnalyticsQuery, Raw, RevenueKind, assemble};
use crate::{
    Settlement, StoreResult,
    codec::{self, SettlementRow, settlement_columns},
    conn::{Arg, Conn, MultiRow, args, in_sizes, placeholders},
    webhooks::NewEvent,
};

/// `x = x + v`, saturating at [`ROLLUP_MAX`](super::ROLLUP_MAX) (both dialects; never evaluates an overflow).
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
pub(crate) use saturating_add;

/// The sum of an integer column as two texts, of its high and low 32 bits: SQLite's `SUM`
/// fails on an `i64` overflow, and rows of up to 2^63 each can overflow it; the halves cannot
/// (for fewer than 2^31 rows), and `split_sum` (in the parent module) adds them up exactly.
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

/// Settlements into the hourly rollup, `rows` rollup rows (each once) of (pay_to, hour,
/// network, resource, payments, gross, fees).
fn rollup_volume_statement(rows: usize) -> String {
    format!(
        "INSERT INTO volume_rollups (pay_to, hour, network, resource, payments, gross, fees) \
         VALUES {} ON CONFLICT (pay_to, hour, network, resource) DO UPDATE SET \
         payments = volume_rollups.payments + excluded.payments, {}, {}",
        placeholders(rows, 7),
        saturating_add!("volume_rollups", "gross"),
        saturating_add!("volume_rollups", "fees"),
    )
}

static ROLLUP_VOLUME: MultiRow = MultiRow::new(rollup_volume_statement);

/// Settlements into the daily payer rollup, `rows` rollup rows (each once) of (pay_to, day,
/// payer, payments, gross, fees).
fn rollup_payer_statement(rows: usize) -> String {
    format!(
        "INSERT INTO payer_rollups (pay_to, day, payer, payments, gross, fees) VALUES {} \
         ON CONFLICT (pay_to, day, payer) DO UPDATE SET \
         payments = payer_rollups.payments + excluded.payments, {}, {}",
        placeholders(rows, 6),
        saturating_add!("payer_rollups", "gross"),
        saturating_add!("payer_rollups", "fees"),
    )
}

static ROLLUP_PAYER: MultiRow = MultiRow::new(rollup_payer_statement);

/// (provider, hour, network, kind, gross): one subscription payment into the hourly revenue
/// rollup.
const ROLLUP_REVENUE: &str = concat!(
    "INSERT INTO revenue_rollups (provider, hour, network, kind, payments, gross) \
     VALUES ($1, $2, $3, $4, 1, $5) \
     ON CONFLICT (provider, hour, network, kind) DO UPDATE SET \
     payments = revenue_rollups.payments + 1, ",
    saturating_add!("revenue_rollups", "gross")
);

/// (provider, from hour, to, offset, bucket) → (start, payments, gross, fees).
const SERIES: &str = concat!(
    "SELECT ((hour - $4) / $5) * $5 + $4 AS t, ",
    volume_sums!(),
    " FROM volume_rollups WHERE pay_to = $1 AND hour >= $2 AND hour < $3 \
     GROUP BY t ORDER BY t"
);

/// (provider, from hour, to, offset, bucket) → (start, kind, payments, gross).
const REVENUE: &str = concat!(
    "SELECT ((hour - $4) / $5) * $5 + $4 AS t, kind, CAST(SUM(payments) AS BIGINT), ",
    split_sum!("gross"),
    " FROM revenue_rollups WHERE provider = $1 AND hour >= $2 AND hour < $3 \
     GROUP BY t, kind ORDER BY t, kind"
);

// Ranked by the sum as a float (`* 1.0`): exact enough to order by, and unlike an integer
// `SUM` it cannot overflow on SQLite.

/// (provider, from hour, to, limit) → (resource, payments, gross, fees).
const BY_RESOURCE: &str = concat!(
    "SELECT resource, ",
    volume_sums!(),
    " FROM volume_rollups WHERE pay_to = $1 AND hour >= $2 AND hour < $3 \
     GROUP BY resource ORDER BY SUM(gross * 1.0) DESC, resource LIMIT $4"
);

/// (provider, from hour, to, limit) → (network, payments, gross, fees).
const BY_NETWORK: &str = concat!(
    "SELECT network, ",
    volume_sums!(),
    " FROM volume_rollups WHERE pay_to = $1 AND hour >= $2 AND hour < $3 \
     GROUP BY network ORDER BY SUM(gross * 1.0) DESC, network LIMIT $4"
);

/// (provider, from day, to, limit) → (payer, payments, gross, fees).
const BY_PAYER: &str = concat!(
    "SELECT payer, ",
    volume_sums!(),
    " FROM payer_rollups WHERE pay_to = $1 AND day >= $2 AND day < $3 \
     GROUP BY payer ORDER BY SUM(gross * 1.0) DESC, payer LIMIT $4"
);

/// (provider) → (network, plan, state, count).
const PLAN_STATES: &str = "SELECT s.network, s.plan_id, s.state, COUNT(*) \
     FROM subscriptions_index s JOIN plans p ON p.network = s.network AND p.plan_id = s.plan_id \
     WHERE p.provider = $1 GROUP BY s.network, s.plan_id, s.state";

/// (provider) → plan.created data.
const PLAN_TERMS: &str = "SELECT data FROM events WHERE provider = $1 AND type = 'plan.created' \
     ORDER BY created_at";

/// (provider, from, to, offset, bucket) → (start, type, count) of the
/// [`COUNTED_EVENTS`](super::COUNTED_EVENTS).
const EVENTS: &str = "SELECT ((created_at - $4) / $5) * $5 + $4 AS t, type, COUNT(*) FROM events \
     WHERE provider = $1 AND type IN ('payment.failed', 'subscription.created', \
     'subscription.renewed', 'subscription.renewal_failed', 'subscription.paused', \
     'subscription.resumed', 'subscription.cancelled', 'allowance.exhausted', \
     'allowance.raised', 'allowance.charged') \
     AND created_at >= $2 AND created_at < $3 GROUP BY t, type ORDER BY t, type";

/// (provider, from, to, offset, bucket) → (start, deductions, amount).
const METERED: &str = concat!(
    "SELECT ((u.created_at - $4) / $5) * $5 + $4 AS t, COUNT(*), ",
    split_sum!("u.amount"),
    " FROM usage_records u",
    owned_subscription!(),
    " AND u.created_at >= $2 AND u.created_at < $3 GROUP BY t ORDER BY t"
);

/// (provider, from, to) → (state, amount).
const CHARGES: &str = concat!(
    "SELECT u.state, ",
    split_sum!("u.amount"),
    " FROM overage_charges u",
    owned_subscription!(),
    " AND u.state <> 'pending' AND u.updated_at >= $2 AND u.updated_at < $3 \
     GROUP BY u.state"
);

/// (provider, from, to) → endpoint health rows.
const ENDPOINTS: &str = "SELECT e.id, e.url, e.enabled, e.disabled_reason, \
     (SELECT COUNT(*) FROM webhook_deliveries d \
      WHERE d.endpoint_id = e.id AND d.state = 'pending'), \
     (SELECT COUNT(*) FROM webhook_deliveries d \
      WHERE d.endpoint_id = e.id AND d.state = 'pending' AND d.attempts > 0), \
     (SELECT COUNT(*) FROM webhook_deliveries d \
      WHERE d.endpoint_id = e.id AND d.state = 'dead'), \
     (SELECT COUNT(*) FROM webhook_deliveries d WHERE d.endpoint_id = e.id \
      AND d.state = 'delivered' AND d.updated_at >= $2 AND d.updated_at < $3) \
     FROM webhook_endpoints e WHERE e.provider = $1 ORDER BY e.created_at, e.id";

/// (provider, limit) → settlement rows.
const RECENT: &str = concat!(
    "SELECT ",
    settlement_columns!(),
    " FROM settlements WHERE pay_to = $1 ORDER BY updated_at DESC, key LIMIT $2"
);

/// What a settlement just confirmed adds to the rollups (at its `updated_at`).
pub(crate) struct Rollup {
    pub(crate) pay_to: String,
    pub(crate) payer: String,
    pub(crate) hour: i64,
    pub(crate) day: i64,
    pub(crate) network: String,
    pub(crate) resource: String,
    pub(crate) gross: i64,
    pub(crate) fees: i64,
}

impl Rollup {
    pub(crate) fn of(s: &Settlement) -> Self {
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

/// Writes the rollups of settlements just confirmed (each at its `updated_at`), inside the
/// caller's transaction: each rollup row they fall in once, with their count and sums
/// (saturating, as the statement's own addition does), in one statement per table (up to 64
/// rows a statement).
pub(crate) async fn write_rollups(c: &mut impl Conn, rollups: &[&Rollup]) -> StoreResult<()> {
    type Sums = (i64, i64, i64);
    fn add(sums: &mut Sums, r: &Rollup) {
        sums.0 += 1;
        sums.1 = sums.1.saturating_add(r.gross);
        sums.2 = sums.2.saturating_add(r.fees);
    }
    let mut volume: BTreeMap<(&str, i64, &str, &str), Sums> = BTreeMap::new();
    let mut payer: BTreeMap<(&str, i64, &str), Sums> = BTreeMap::new();
    for r in rollups {
        add(
            volume
                .entry((&r.pay_to, r.hour, &r.network, &r.resource))
                .or_default(),
            r,
        );
        add(payer.entry((&r.pay_to, r.day, &r.payer)).or_default(), r);
    }
    let volume: Vec<[Arg<'_>; 7]> = volume
        .into_iter()
        .map(|((pay_to, hour, network, resource), (n, gross, fees))| {
            [
                pay_to.into(),
                hour.into(),
                network.into(),
                resource.into(),
                n.into(),
                gross.into(),
                fees.into(),
            ]
        })
        .collect();
    let payer: Vec<[Arg<'_>; 6]> = payer
        .into_iter()
        .map(|((pay_to, day, payer), (n, gross, fees))| {
            [
                pay_to.into(),
                day.into(),
                payer.into(),
                n.into(),
                gross.into(),
                fees.into(),
            ]
        })
        .collect();
    upsert_rows(c, &ROLLUP_VOLUME, &volume).await?;
    upsert_rows(c, &ROLLUP_PAYER, &payer).await
}

/// Runs `rows` (distinct rollup rows) through the multi-row `statement`.
async fn upsert_rows<const W: usize>(
    c: &mut impl Conn,
    statement: &'static MultiRow,
    rows: &[[Arg<'_>; W]],
) -> StoreResult<()> {
    for now in in_sizes(rows) {
        c.execute(statement.get(now.len()), &now.concat()).await?;
    }
    Ok(())
}

/// Books the subscription money an event just recorded (its first insert, inside the caller's
/// transaction) into the revenue rollup at the event's time: a first cycle, a renewal or an
/// overage charge, with the `amount` and `network` of its data. Any other event books nothing.
pub(crate) async fn book_revenue(c: &mut impl Conn, e: &NewEvent) -> StoreResult<()> {
    let Some((kind, network, amount)) = RevenueKind::of_event(e) else {
        return Ok(());
    };
    let at = codec::int("created_at", e.created_at)?;
    let gross = i64::try_from(amount).unwrap_or(i64::MAX);
    c.execute(
        ROLLUP_REVENUE,
        args![
            &codec::address(&e.provider),
            at - at % 3600,
            &network,
            kind.as_str(),
            gross
        ],
    )
    .await?;
    Ok(())
}

/// [`crate::Store::analytics`]: a report's reads, one after the other on `c`.
pub(crate) async fn read(c: &mut impl Conn, q: &AnalyticsQuery) -> StoreResult<AnalyticsData> {
    let provider = codec::address(&q.provider);
    let from = codec::int("from", q.from)?;
    let to = codec::int("to", q.to)?;
    let from_hour = from - from % 3600;
    let from_day = from - from % 86_400;
    let offset = codec::int("bucket offset", q.bucket_offset % q.bucket_secs.max(1))?;
    let bucket = codec::int("bucket", q.bucket_secs.max(1))?;
    let top = i64::from(q.top);
    let raw = Raw {
        series: c
            .fetch_all(SERIES, args![&provider, from_hour, to, offset, bucket])
            .await?,
        by_resource: c
            .fetch_all(BY_RESOURCE, args![&provider, from_hour, to, top])
            .await?,
        by_network: c
            .fetch_all(BY_NETWORK, args![&provider, from_hour, to, top])
            .await?,
        by_payer: c
            .fetch_all(BY_PAYER, args![&provider, from_day, to, top])
            .await?,
        plan_states: c.fetch_all(PLAN_STATES, args![&provider]).await?,
        plan_terms: c.fetch_all(PLAN_TERMS, args![&provider]).await?,
        events: c
            .fetch_all(EVENTS, args![&provider, from, to, offset, bucket])
            .await?,
        metered: c
            .fetch_all(METERED, args![&provider, from, to, offset, bucket])
            .await?,
        charges: c.fetch_all(CHARGES, args![&provider, from, to]).await?,
        revenue: c
            .fetch_all(REVENUE, args![&provider, from_hour, to, offset, bucket])
            .await?,
        endpoints: c.fetch_all(ENDPOINTS, args![&provider, from, to]).await?,
        recent: c
            .fetch_all::<SettlementRow>(RECENT, args![&provider, i64::from(q.recent)])
            .await?,
    };
    assemble(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counted event types in [`EVENTS`] are exactly [`super::super::COUNTED_EVENTS`].
    #[test]
    fn events_counts_the_counted_events() {
        let list = super::super::COUNTED_EVENTS
            .iter()
            .map(|e| format!("'{e}'"))
            .collect::<Vec<_>>()
            .join(", ");
        assert!(EVENTS.contains(&format!("type IN ({list})")), "{EVENTS}");
    }
}
