//! The webhook statements, written once for both databases (two differ: see `FAN_OUT` and
//! `SELECT_DUE`), and the operations on them.

use std::collections::HashSet;

use alloy::primitives::Address;

use super::{
    Attempt, Delivery, DeliveryRow, Endpoint, EndpointRow, EndpointSecrets, Event, EventRow,
    NewEvent, attempt_columns, decode_delivery, decode_endpoint, decode_event, int,
};
use crate::{
    StoreResult,
    codec::{self},
    conn::{Arg, Conn, Dialect, MultiRow, PerDialect, args, in_statements, placeholders},
};

macro_rules! endpoint_columns {
    () => {
        "id, provider, url, events, description, secret, old_secret, old_secret_expires_at, \
         enabled, disabled_reason, created_at, updated_at"
    };
}

macro_rules! event_columns {
    () => {
        "seq, id, provider, type, data, created_at"
    };
}

macro_rules! delivery_columns {
    () => {
        "d.endpoint_id, d.state, d.attempts, d.next_attempt_at, d.last_status, \
         d.last_error, d.updated_at, e.seq, e.id, e.provider, e.type, e.data, e.created_at \
         FROM webhook_deliveries d JOIN events e ON e.seq = d.event_seq "
    };
}

macro_rules! delivery_select {
    ($where:literal) => {
        concat!("SELECT ", delivery_columns!(), $where)
    };
}

/// (id, provider, type, data, created_at) → seq, when new.
const INSERT_EVENT: &str = "INSERT INTO events (id, provider, type, data, created_at) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING RETURNING seq";

/// (seq, provider, type, now): a pending delivery for every enabled endpoint taking it; `$pos`
/// is the dialect's substring search (SQLite has `instr`, PostgreSQL `strpos`; neither has the
/// other, and `LIKE` would read `_` in event types as a wildcard).
macro_rules! fan_out {
    ($pos:literal) => {
        concat!(
            "INSERT INTO webhook_deliveries \
             (endpoint_id, event_seq, state, attempts, next_attempt_at, updated_at) \
             SELECT id, $1, 'pending', 0, $4, $4 FROM webhook_endpoints \
             WHERE provider = $2 AND enabled = 1 \
             AND (events = '*' OR ",
            $pos,
            "(',' || events || ',', ',' || $3 || ',') > 0)"
        )
    };
}

/// [`fan_out!`] per dialect.
const FAN_OUT: PerDialect = PerDialect {
    sqlite: fan_out!("instr"),
    postgres: fan_out!("strpos"),
};

const INSERT_ENDPOINT: &str = concat!(
    "INSERT INTO webhook_endpoints (",
    endpoint_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
);

const SELECT_ENDPOINTS: &str = concat!(
    "SELECT ",
    endpoint_columns!(),
    " FROM webhook_endpoints WHERE provider = $1 ORDER BY created_at, id"
);

const SELECT_ENDPOINT: &str = concat!(
    "SELECT ",
    endpoint_columns!(),
    " FROM webhook_endpoints WHERE provider = $1 AND id = $2"
);

const SELECT_ENDPOINT_ANY: &str = concat!(
    "SELECT ",
    endpoint_columns!(),
    " FROM webhook_endpoints WHERE id = $1"
);

/// (provider, id, url, events, description, secret, old_secret, old_until, enabled, reason, at).
const UPDATE_ENDPOINT: &str = "UPDATE webhook_endpoints SET url = $3, events = $4, \
     description = $5, secret = $6, old_secret = $7, old_secret_expires_at = $8, enabled = $9, \
     disabled_reason = $10, updated_at = $11 WHERE provider = $1 AND id = $2";

const DELETE_ENDPOINT: &str = "DELETE FROM webhook_endpoints WHERE provider = $1 AND id = $2";

const SELECT_SECRETS: &str = "SELECT id, secret, old_secret FROM webhook_endpoints ORDER BY id";

/// (id, secret, old_secret, new secret, new old_secret): only while both are still as read.
const REPLACE_SECRETS: &str = "UPDATE webhook_endpoints SET secret = $4, old_secret = $5 \
     WHERE id = $1 AND secret = $2 AND old_secret IS NOT DISTINCT FROM $3";

const DELETE_DELIVERIES: &str = "DELETE FROM webhook_deliveries WHERE endpoint_id = $1";

/// (now, limit) → the oldest pending delivery of each enabled endpoint, when due. PostgreSQL
/// finds the head of each endpoint in one ordered pass over the pending index (`DISTINCT ON`,
/// which SQLite lacks) rather than a `MIN()` subquery per pending row.
const SELECT_DUE: PerDialect = PerDialect {
    sqlite: delivery_select!(
        "JOIN webhook_endpoints w ON w.id = d.endpoint_id \
         WHERE w.enabled = 1 AND d.state = 'pending' AND d.next_attempt_at <= $1 \
         AND d.event_seq = (SELECT MIN(x.event_seq) FROM webhook_deliveries x \
             WHERE x.endpoint_id = d.endpoint_id AND x.state = 'pending') \
         ORDER BY d.next_attempt_at LIMIT $2"
    ),
    postgres: concat!(
        "SELECT * FROM (SELECT DISTINCT ON (d.endpoint_id) ",
        delivery_columns!(),
        "JOIN webhook_endpoints w ON w.id = d.endpoint_id \
         WHERE w.enabled = 1 AND d.state = 'pending' ORDER BY d.endpoint_id, d.event_seq) h \
         WHERE h.next_attempt_at <= $1 ORDER BY h.next_attempt_at LIMIT $2"
    ),
};

/// (endpoint, now, limit) → its pending deliveries in event order, up to the first not due.
const SELECT_PENDING: &str = delivery_select!(
    "WHERE d.endpoint_id = $1 AND d.state = 'pending' AND d.event_seq < COALESCE(( \
         SELECT MIN(x.event_seq) FROM webhook_deliveries x WHERE x.endpoint_id = $1 \
         AND x.state = 'pending' AND x.next_attempt_at > $2), 9223372036854775807) \
     ORDER BY d.event_seq LIMIT $3"
);

/// (endpoint, seq, state, attempts, next, status, error, at).
const UPDATE_DELIVERY: &str = "UPDATE webhook_deliveries SET state = $3, attempts = $4, \
     next_attempt_at = $5, last_status = $6, last_error = $7, updated_at = $8 \
     WHERE endpoint_id = $1 AND event_seq = $2 AND state = 'pending'";

/// (endpoint, reason, at).
const DISABLE_ENDPOINT: &str = "UPDATE webhook_endpoints SET enabled = 0, disabled_reason = $2, \
     updated_at = $3 WHERE id = $1";

/// (provider, endpoint, event id, at) → back to pending, now.
const REDELIVER: &str = "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, \
     next_attempt_at = $4, last_error = NULL, updated_at = $4 \
     WHERE endpoint_id = (SELECT id FROM webhook_endpoints WHERE provider = $1 AND id = $2) \
     AND event_seq = (SELECT seq FROM events WHERE id = $3 AND provider = $1)";

/// (provider, endpoint, limit) → its latest deliveries.
const SELECT_DELIVERIES: &str = delivery_select!(
    "JOIN webhook_endpoints w ON w.id = d.endpoint_id \
     WHERE w.provider = $1 AND d.endpoint_id = $2 ORDER BY e.seq DESC LIMIT $3"
);

/// (provider, after seq, limit) → events.
const SELECT_EVENTS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM events WHERE provider = $1 AND seq > $2 ORDER BY seq LIMIT $3"
);

/// Records `e`, a pending delivery per matching endpoint and the subscription revenue it
/// carries (first cycle, renewal, overage: [`crate::analytics`]), inside the caller's
/// transaction; whether it was new (a repeat records and books nothing).
pub(crate) async fn emit<C: Conn>(c: &mut C, e: &NewEvent) -> StoreResult<bool> {
    let at = codec::int("created_at", e.created_at)?;
    let provider = codec::address(&e.provider);
    let seq: Option<(i64,)> = c
        .fetch_optional(
            INSERT_EVENT,
            args![&e.id, &provider, &e.r#type, &e.data, at],
        )
        .await?;
    let Some((seq,)) = seq else {
        return Ok(false);
    };
    c.execute(FAN_OUT.of(C::DIALECT), args![seq, &provider, &e.r#type, at])
        .await?;
    // Subscription money is booked with its event: once per event id, in this transaction.
    crate::analytics::book_revenue(c, e).await?;
    Ok(true)
}

/// The arguments of one event of [`INSERT_EVENTS`].
const EVENT_WIDTH: usize = 5;

/// The insert of `rows` events (each id once), as [`INSERT_EVENT`] does one: the ids and
/// sequence numbers of those that were new come back.
fn insert_events_statement(rows: usize) -> String {
    let values = placeholders(rows, EVENT_WIDTH);
    format!(
        "INSERT INTO events (id, provider, type, data, created_at) VALUES {values} \
         ON CONFLICT (id) DO NOTHING RETURNING id, seq"
    )
}

static INSERT_EVENTS: MultiRow = MultiRow::new(insert_events_statement);

/// ([seq, …] as JSON): [`FAN_OUT`] for several events at once, on SQLite, each at its own
/// `created_at`.
const FAN_OUT_ALL_SQLITE: &str = "INSERT INTO webhook_deliveries \
     (endpoint_id, event_seq, state, attempts, next_attempt_at, updated_at) \
     SELECT w.id, e.seq, 'pending', 0, e.created_at, e.created_at \
     FROM events e JOIN webhook_endpoints w ON w.provider = e.provider \
     WHERE e.seq IN (SELECT value FROM json_each($1)) AND w.enabled = 1 \
     AND (w.events = '*' OR instr(',' || w.events || ',', ',' || e.type || ',') > 0) \
     ORDER BY e.seq, w.id";

/// [`emit`] of several events, on SQLite, in a statement for the events (up to 64 a statement)
/// and one for their deliveries, rather than two each; the ids of those that were new.
pub(crate) async fn emit_all_sqlite<C: Conn>(
    c: &mut C,
    events: &[NewEvent],
) -> StoreResult<HashSet<String>> {
    debug_assert_eq!(C::DIALECT, Dialect::Sqlite);
    let encoded = events
        .iter()
        .map(|e| {
            Ok((
                codec::address(&e.provider),
                codec::int("created_at", e.created_at)?,
            ))
        })
        .collect::<StoreResult<Vec<(String, i64)>>>()?;
    let mut new: Vec<(String, i64)> = Vec::new();
    for group in in_statements(events.iter().map(|e| Some(e.id.as_str()))) {
        let mut args = Vec::with_capacity(group.len() * EVENT_WIDTH);
        for &i in &group {
            let (e, (provider, at)) = (&events[i], &encoded[i]);
            args.extend([
                Arg::from(&e.id),
                Arg::from(provider),
                Arg::from(&e.r#type),
                Arg::from(&e.data),
                Arg::from(*at),
            ]);
        }
        new.extend(
            c.fetch_all::<(String, i64)>(INSERT_EVENTS.get(group.len()), &args)
                .await?,
        );
    }
    if new.is_empty() {
        return Ok(HashSet::new());
    }
    let seqs = serde_json::to_string(&new.iter().map(|(_, seq)| seq).collect::<Vec<_>>())
        .expect("integers serialize");
    c.execute(FAN_OUT_ALL_SQLITE, args![&seqs]).await?;
    let ids: HashSet<String> = new.into_iter().map(|(id, _)| id).collect();
    // Subscription money is booked with its event, as `emit` does.
    for e in events.iter().filter(|e| ids.contains(&e.id)) {
        crate::analytics::book_revenue(c, e).await?;
    }
    Ok(ids)
}

/// [`crate::Store::insert_webhook_endpoint`].
pub(crate) async fn insert_endpoint(c: &mut impl Conn, e: &Endpoint) -> StoreResult<()> {
    let provider = codec::address(&e.provider);
    c.execute(
        INSERT_ENDPOINT,
        args![
            &e.id,
            &provider,
            &e.url,
            &e.events,
            &e.description,
            &e.secret,
            e.old_secret.as_deref(),
            e.old_secret_expires_at.map(int),
            i64::from(e.enabled),
            e.disabled_reason.as_deref(),
            int(e.created_at),
            int(e.updated_at),
        ],
    )
    .await?;
    Ok(())
}

/// [`crate::Store::webhook_endpoints`].
pub(crate) async fn endpoints(c: &mut impl Conn, provider: Address) -> StoreResult<Vec<Endpoint>> {
    let rows: Vec<EndpointRow> = c
        .fetch_all(SELECT_ENDPOINTS, args![&codec::address(&provider)])
        .await?;
    rows.into_iter().map(decode_endpoint).collect()
}

/// [`crate::Store::webhook_endpoint`].
pub(crate) async fn endpoint(
    c: &mut impl Conn,
    provider: Option<Address>,
    id: &str,
) -> StoreResult<Option<Endpoint>> {
    let row: Option<EndpointRow> = match provider {
        Some(p) => {
            c.fetch_optional(SELECT_ENDPOINT, args![&codec::address(&p), id])
                .await?
        }
        None => c.fetch_optional(SELECT_ENDPOINT_ANY, args![id]).await?,
    };
    row.map(decode_endpoint).transpose()
}

/// [`crate::Store::update_webhook_endpoint`].
pub(crate) async fn update_endpoint(c: &mut impl Conn, e: &Endpoint) -> StoreResult<bool> {
    let provider = codec::address(&e.provider);
    let done = c
        .execute(
            UPDATE_ENDPOINT,
            args![
                &provider,
                &e.id,
                &e.url,
                &e.events,
                &e.description,
                &e.secret,
                e.old_secret.as_deref(),
                e.old_secret_expires_at.map(int),
                i64::from(e.enabled),
                e.disabled_reason.as_deref(),
                int(e.updated_at),
            ],
        )
        .await?;
    Ok(done > 0)
}

/// [`crate::Store::delete_webhook_endpoint`], inside the caller's transaction.
pub(crate) async fn delete_endpoint(
    c: &mut impl Conn,
    provider: Address,
    id: &str,
) -> StoreResult<bool> {
    let done = c
        .execute(DELETE_ENDPOINT, args![&codec::address(&provider), id])
        .await?;
    if done > 0 {
        c.execute(DELETE_DELIVERIES, args![id]).await?;
    }
    Ok(done > 0)
}

/// [`crate::Store::webhook_secrets`].
pub(crate) async fn secrets(c: &mut impl Conn) -> StoreResult<Vec<EndpointSecrets>> {
    let rows: Vec<(String, String, Option<String>)> = c.fetch_all(SELECT_SECRETS, args![]).await?;
    Ok(rows
        .into_iter()
        .map(|(id, secret, old_secret)| EndpointSecrets {
            id,
            secret,
            old_secret,
        })
        .collect())
}

/// [`crate::Store::replace_webhook_secrets`].
pub(crate) async fn replace_secrets(
    c: &mut impl Conn,
    old: &EndpointSecrets,
    new: &EndpointSecrets,
) -> StoreResult<bool> {
    let done = c
        .execute(
            REPLACE_SECRETS,
            args![
                &old.id,
                &old.secret,
                old.old_secret.as_deref(),
                &new.secret,
                new.old_secret.as_deref(),
            ],
        )
        .await?;
    Ok(done > 0)
}

/// [`crate::Store::due_deliveries`].
pub(crate) async fn due_deliveries<C: Conn>(
    c: &mut C,
    now: u64,
    limit: u32,
) -> StoreResult<Vec<Delivery>> {
    let rows: Vec<DeliveryRow> = c
        .fetch_all(SELECT_DUE.of(C::DIALECT), args![int(now), i64::from(limit)])
        .await?;
    rows.into_iter().map(decode_delivery).collect()
}

/// [`crate::Store::pending_deliveries`].
pub(crate) async fn pending_deliveries(
    c: &mut impl Conn,
    endpoint_id: &str,
    now: u64,
    limit: u32,
) -> StoreResult<Vec<Delivery>> {
    let rows: Vec<DeliveryRow> = c
        .fetch_all(
            SELECT_PENDING,
            args![endpoint_id, int(now), i64::from(limit)],
        )
        .await?;
    rows.into_iter().map(decode_delivery).collect()
}

/// [`crate::Store::finish_deliveries`], inside the caller's transaction.
pub(crate) async fn finish_deliveries(
    c: &mut impl Conn,
    endpoint_id: &str,
    attempts: &[(u64, u32, Attempt)],
    at: u64,
) -> StoreResult<()> {
    for (seq, n, attempt) in attempts {
        let (state, next, status, error) = attempt_columns(attempt, at);
        c.execute(
            UPDATE_DELIVERY,
            args![
                endpoint_id,
                int(*seq),
                state,
                i64::from(*n),
                next,
                status,
                error.as_deref(),
                int(at),
            ],
        )
        .await?;
        if matches!(attempt, Attempt::Gone) {
            c.execute(
                DISABLE_ENDPOINT,
                args![endpoint_id, "the receiver answered 410 Gone", int(at)],
            )
            .await?;
        }
    }
    Ok(())
}

/// [`crate::Store::redeliver`].
pub(crate) async fn redeliver(
    c: &mut impl Conn,
    provider: Address,
    endpoint_id: &str,
    event_id: &str,
    at: u64,
) -> StoreResult<bool> {
    let done = c
        .execute(
            REDELIVER,
            args![&codec::address(&provider), endpoint_id, event_id, int(at)],
        )
        .await?;
    Ok(done > 0)
}

/// [`crate::Store::deliveries`].
pub(crate) async fn deliveries(
    c: &mut impl Conn,
    provider: Address,
    endpoint_id: &str,
    limit: u32,
) -> StoreResult<Vec<Delivery>> {
    let rows: Vec<DeliveryRow> = c
        .fetch_all(
            SELECT_DELIVERIES,
            args![&codec::address(&provider), endpoint_id, i64::from(limit)],
        )
        .await?;
    rows.into_iter().map(decode_delivery).collect()
}

/// [`crate::Store::events`].
pub(crate) async fn events(
    c: &mut impl Conn,
    provider: Address,
    after: u64,
    limit: u32,
) -> StoreResult<Vec<Event>> {
    let rows: Vec<EventRow> = c
        .fetch_all(
            SELECT_EVENTS,
            args![&codec::address(&provider), int(after), i64::from(limit)],
        )
        .await?;
    rows.into_iter().map(decode_event).collect()
}
