//! The webhook rows: providers' endpoints, the event outbox and the deliveries (types, decoding
//! and the SQL both stores share, in each dialect).

use alloy::primitives::Address;

use super::{StoreError, StoreResult, codec::parse_address};

/// An event to record, with the provider it is for. Its `id` is derived from its cause, so the
/// same cause recorded twice (a log read again, a retried transition) is one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    /// `evt_…`: the `webhook-id` of every delivery of it.
    pub id: String,
    /// Whose event it is.
    pub provider: Address,
    /// `payment.settled`, `subscription.renewed`, …
    pub r#type: String,
    /// The `data` object, as JSON text.
    pub data: String,
    /// Unix seconds.
    pub created_at: u64,
}

/// A recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Its place in the outbox (increasing).
    pub seq: u64,
    /// What was recorded.
    pub new: NewEvent,
}

/// A webhook endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `we_…`.
    pub id: String,
    /// The provider that owns it.
    pub provider: Address,
    /// Where deliveries are POSTed.
    pub url: String,
    /// `*` or the event types it takes, comma-separated.
    pub events: String,
    /// Free text.
    pub description: String,
    /// The signing secret (`whsec_…`) as stored: sealed under the facilitator's
    /// `keys.webhook_secrets` (`enc1:…`, see [`crate::webhooks::SecretsKeys`]), or plaintext when
    /// written by an older version. The store neither seals nor opens it.
    pub secret: String,
    /// The previous secret, still signing until `old_secret_expires_at` (a rotation's overlap);
    /// stored like `secret`.
    pub old_secret: Option<String>,
    /// Unix seconds.
    pub old_secret_expires_at: Option<u64>,
    /// Whether deliveries are made.
    pub enabled: bool,
    /// Why it was disabled (e.g. the receiver answered 410).
    pub disabled_reason: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds.
    pub updated_at: u64,
}

impl Endpoint {
    /// Whether it takes events of `kind`.
    pub fn takes(&self, kind: &str) -> bool {
        self.events == "*" || self.events.split(',').any(|e| e == kind)
    }

    /// The secrets deliveries are signed with at `now`, as stored: the current one, and the
    /// previous one during a rotation's overlap.
    pub fn signing_secrets(&self, now: u64) -> Vec<&str> {
        let mut v = vec![self.secret.as_str()];
        if let (Some(old), Some(until)) = (&self.old_secret, self.old_secret_expires_at)
            && now < until
        {
            v.push(old);
        }
        v
    }
}

/// An endpoint's stored secrets ([`super::Store::webhook_secrets`]), as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSecrets {
    /// The endpoint.
    pub id: String,
    /// [`Endpoint::secret`].
    pub secret: String,
    /// [`Endpoint::old_secret`].
    pub old_secret: Option<String>,
}

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryState {
    /// To be attempted at `next_attempt_at`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Every attempt failed (or the endpoint answered 410): no more automatic attempts.
    Dead,
}

impl DeliveryState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }

    pub(super) fn parse(s: &str) -> StoreResult<Self> {
        match s {
            "pending" => Ok(Self::Pending),
            "delivered" => Ok(Self::Delivered),
            "dead" => Ok(Self::Dead),
            other => Err(StoreError::Corrupt(format!("state = {other:.40}"))),
        }
    }
}

/// A delivery of an event to an endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The endpoint.
    pub endpoint_id: String,
    /// The event.
    pub event: Event,
    /// Where it stands.
    pub state: DeliveryState,
    /// Attempts made.
    pub attempts: u32,
    /// Unix seconds.
    pub next_attempt_at: u64,
    /// The receiver's last HTTP status.
    pub last_status: Option<u16>,
    /// The last failure.
    pub last_error: Option<String>,
    /// Unix seconds of the last change.
    pub updated_at: u64,
}

/// How an attempt ended ([`super::Store::finish_deliveries`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// 2xx.
    Delivered {
        /// The status.
        status: u16,
    },
    /// Failed; try again at `next_attempt_at`.
    Retry {
        /// The status, if the receiver answered.
        status: Option<u16>,
        /// What went wrong.
        error: String,
        /// Unix seconds.
        next_attempt_at: u64,
    },
    /// Failed for the last time: dead-lettered.
    Dead {
        /// The status, if the receiver answered.
        status: Option<u16>,
        /// What went wrong.
        error: String,
    },
    /// The receiver answered 410 Gone: the delivery is dead and the endpoint disabled.
    Gone,
}

/// Row types and decoding.
pub(super) type EndpointRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    i64,
    Option<String>,
    i64,
    i64,
);

macro_rules! endpoint_columns {
    () => {
        "id, provider, url, events, description, secret, old_secret, old_secret_expires_at, \
         enabled, disabled_reason, created_at, updated_at"
    };
}

fn nonneg(what: &str, v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what} = {v}")))
}

pub(super) fn decode_endpoint(row: EndpointRow) -> StoreResult<Endpoint> {
    let (id, provider, url, events, description, secret, old, old_until, enabled, reason, c, u) =
        row;
    Ok(Endpoint {
        id,
        provider: parse_address("provider", &provider)?,
        url,
        events,
        description,
        secret,
        old_secret: old,
        old_secret_expires_at: old_until
            .map(|v| nonneg("old_secret_expires_at", v))
            .transpose()?,
        enabled: enabled != 0,
        disabled_reason: reason,
        created_at: nonneg("created_at", c)?,
        updated_at: nonneg("updated_at", u)?,
    })
}

/// An event row: seq, id, provider, type, data, created at.
pub(super) type EventRow = (i64, String, String, String, String, i64);

macro_rules! event_columns {
    () => {
        "seq, id, provider, type, data, created_at"
    };
}

pub(super) fn decode_event(row: EventRow) -> StoreResult<Event> {
    let (seq, id, provider, kind, data, at) = row;
    Ok(Event {
        seq: nonneg("seq", seq)?,
        new: NewEvent {
            id,
            provider: parse_address("provider", &provider)?,
            r#type: kind,
            data,
            created_at: nonneg("created_at", at)?,
        },
    })
}

/// A delivery row joined with its event: endpoint id, state, attempts, next attempt, last status,
/// last error, updated at, then the event's columns.
pub(super) type DeliveryRow = (
    String,
    String,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    i64,
    i64,
    String,
    String,
    String,
    String,
    i64,
);

pub(super) fn decode_delivery(row: DeliveryRow) -> StoreResult<Delivery> {
    let (
        endpoint_id,
        state,
        attempts,
        next,
        status,
        error,
        updated,
        seq,
        id,
        provider,
        kind,
        data,
        at,
    ) = row;
    Ok(Delivery {
        endpoint_id,
        event: decode_event((seq, id, provider, kind, data, at))?,
        state: DeliveryState::parse(&state)?,
        attempts: u32::try_from(attempts)
            .map_err(|_| StoreError::Corrupt(format!("attempts = {attempts}")))?,
        next_attempt_at: nonneg("next_attempt_at", next)?,
        last_status: status.and_then(|s| u16::try_from(s).ok()),
        last_error: error,
        updated_at: nonneg("updated_at", updated)?,
    })
}

/// The SQL, in SQLite's (`?N`) and PostgreSQL's (`$N`) spelling.
pub(super) struct Sql {
    /// (id, provider, type, data, created_at) → seq, when new.
    pub(super) insert_event: &'static str,
    /// (seq, provider, type, now): a pending delivery for every enabled endpoint taking it.
    pub(super) fan_out: &'static str,
    /// (endpoint columns in order).
    pub(super) insert_endpoint: &'static str,
    /// (provider) → endpoints.
    pub(super) select_endpoints: &'static str,
    /// (provider, id) → the endpoint.
    pub(super) select_endpoint: &'static str,
    /// (id) → the endpoint, whoever owns it.
    pub(super) select_endpoint_any: &'static str,
    /// (provider, id, url, events, description, secret, old_secret, old_until, enabled, reason, at).
    pub(super) update_endpoint: &'static str,
    /// (provider, id).
    pub(super) delete_endpoint: &'static str,
    /// () → (id, secret, old_secret) of every endpoint.
    pub(super) select_secrets: &'static str,
    /// (id, secret, old_secret, new secret, new old_secret): only while both are still as read.
    pub(super) replace_secrets: &'static str,
    /// (id): its deliveries.
    pub(super) delete_deliveries: &'static str,
    /// (now, limit) → the oldest pending delivery of each enabled endpoint, when due.
    pub(super) select_due: &'static str,
    /// (endpoint, now, limit) → its pending deliveries in event order, up to the first not due.
    pub(super) select_pending: &'static str,
    /// (endpoint, seq, state, attempts, next, status, error, at).
    pub(super) update_delivery: &'static str,
    /// (endpoint, reason, at).
    pub(super) disable_endpoint: &'static str,
    /// (provider, endpoint, event id, at) → back to pending, now.
    pub(super) redeliver: &'static str,
    /// (provider, endpoint, limit) → its latest deliveries.
    pub(super) select_deliveries: &'static str,
    /// (provider, after seq, limit) → events.
    pub(super) select_events: &'static str,
    /// (network, plan id) → the plan's provider.
    pub(super) plan_provider: &'static str,
    /// (network, subscription id) → its plan's provider.
    pub(super) subscription_provider: &'static str,
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

pub(super) const SQLITE: Sql = Sql {
    insert_event: "INSERT INTO events (id, provider, type, data, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (id) DO NOTHING RETURNING seq",
    fan_out: "INSERT INTO webhook_deliveries \
         (endpoint_id, event_seq, state, attempts, next_attempt_at, updated_at) \
         SELECT id, ?1, 'pending', 0, ?4, ?4 FROM webhook_endpoints \
         WHERE provider = ?2 AND enabled = 1 \
         AND (events = '*' OR instr(',' || events || ',', ',' || ?3 || ',') > 0)",
    insert_endpoint: concat!(
        "INSERT INTO webhook_endpoints (",
        endpoint_columns!(),
        ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
    ),
    select_endpoints: concat!(
        "SELECT ",
        endpoint_columns!(),
        " FROM webhook_endpoints WHERE provider = ?1 ORDER BY created_at, id"
    ),
    select_endpoint: concat!(
        "SELECT ",
        endpoint_columns!(),
        " FROM webhook_endpoints WHERE provider = ?1 AND id = ?2"
    ),
    select_endpoint_any: concat!(
        "SELECT ",
        endpoint_columns!(),
        " FROM webhook_endpoints WHERE id = ?1"
    ),
    update_endpoint: "UPDATE webhook_endpoints SET url = ?3, events = ?4, description = ?5, \
         secret = ?6, old_secret = ?7, old_secret_expires_at = ?8, enabled = ?9, \
         disabled_reason = ?10, updated_at = ?11 WHERE provider = ?1 AND id = ?2",
    delete_endpoint: "DELETE FROM webhook_endpoints WHERE provider = ?1 AND id = ?2",
    select_secrets: "SELECT id, secret, old_secret FROM webhook_endpoints ORDER BY id",
    replace_secrets: "UPDATE webhook_endpoints SET secret = ?4, old_secret = ?5 \
         WHERE id = ?1 AND secret = ?2 AND old_secret IS ?3",
    delete_deliveries: "DELETE FROM webhook_deliveries WHERE endpoint_id = ?1",
    select_due: delivery_select!(
        "JOIN webhook_endpoints w ON w.id = d.endpoint_id \
         WHERE w.enabled = 1 AND d.state = 'pending' AND d.next_attempt_at <= ?1 \
         AND d.event_seq = (SELECT MIN(x.event_seq) FROM webhook_deliveries x \
             WHERE x.endpoint_id = d.endpoint_id AND x.state = 'pending') \
         ORDER BY d.next_attempt_at LIMIT ?2"
    ),
    select_pending: delivery_select!(
        "WHERE d.endpoint_id = ?1 AND d.state = 'pending' AND d.event_seq < COALESCE(( \
             SELECT MIN(x.event_seq) FROM webhook_deliveries x WHERE x.endpoint_id = ?1 \
             AND x.state = 'pending' AND x.next_attempt_at > ?2), 9223372036854775807) \
         ORDER BY d.event_seq LIMIT ?3"
    ),
    update_delivery: "UPDATE webhook_deliveries SET state = ?3, attempts = ?4, \
         next_attempt_at = ?5, last_status = ?6, last_error = ?7, updated_at = ?8 \
         WHERE endpoint_id = ?1 AND event_seq = ?2 AND state = 'pending'",
    disable_endpoint: "UPDATE webhook_endpoints SET enabled = 0, disabled_reason = ?2, \
         updated_at = ?3 WHERE id = ?1",
    redeliver: "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, \
         next_attempt_at = ?4, last_error = NULL, updated_at = ?4 \
         WHERE endpoint_id = (SELECT id FROM webhook_endpoints WHERE provider = ?1 AND id = ?2) \
         AND event_seq = (SELECT seq FROM events WHERE id = ?3 AND provider = ?1)",
    select_deliveries: delivery_select!(
        "JOIN webhook_endpoints w ON w.id = d.endpoint_id \
         WHERE w.provider = ?1 AND d.endpoint_id = ?2 ORDER BY e.seq DESC LIMIT ?3"
    ),
    select_events: concat!(
        "SELECT ",
        event_columns!(),
        " FROM events WHERE provider = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
    ),
    plan_provider: "SELECT provider FROM plans WHERE network = ?1 AND plan_id = ?2",
    subscription_provider: "SELECT p.provider FROM subscriptions_index s JOIN plans p \
         ON p.network = s.network AND p.plan_id = s.plan_id WHERE s.network = ?1 AND s.id = ?2",
};

pub(super) const POSTGRES: Sql = Sql {
    insert_event: "INSERT INTO events (id, provider, type, data, created_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING RETURNING seq",
    fan_out: "INSERT INTO webhook_deliveries \
         (endpoint_id, event_seq, state, attempts, next_attempt_at, updated_at) \
         SELECT id, $1, 'pending', 0, $4, $4 FROM webhook_endpoints \
         WHERE provider = $2 AND enabled = 1 \
         AND (events = '*' OR strpos(',' || events || ',', ',' || $3 || ',') > 0)",
    insert_endpoint: concat!(
        "INSERT INTO webhook_endpoints (",
        endpoint_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
    ),
    select_endpoints: concat!(
        "SELECT ",
        endpoint_columns!(),
        " FROM webhook_endpoints WHERE provider = $1 ORDER BY created_at, id"
    ),
    select_endpoint: concat!(
        "SELECT ",
        endpoint_columns!(),
        " FROM webhook_endpoints WHERE provider = $1 AND id = $2"
    ),
    select_endpoint_any: concat!(
        "SELECT ",
        endpoint_columns!(),
        " FROM webhook_endpoints WHERE id = $1"
    ),
    update_endpoint: "UPDATE webhook_endpoints SET url = $3, events = $4, description = $5, \
         secret = $6, old_secret = $7, old_secret_expires_at = $8, enabled = $9, \
         disabled_reason = $10, updated_at = $11 WHERE provider = $1 AND id = $2",
    delete_endpoint: "DELETE FROM webhook_endpoints WHERE provider = $1 AND id = $2",
    select_secrets: "SELECT id, secret, old_secret FROM webhook_endpoints ORDER BY id",
    replace_secrets: "UPDATE webhook_endpoints SET secret = $4, old_secret = $5 \
         WHERE id = $1 AND secret = $2 AND old_secret IS NOT DISTINCT FROM $3",
    delete_deliveries: "DELETE FROM webhook_deliveries WHERE endpoint_id = $1",
    // The head of each endpoint in one ordered pass over the pending index (DISTINCT ON),
    // rather than a MIN() subquery per pending row.
    select_due: concat!(
        "SELECT * FROM (SELECT DISTINCT ON (d.endpoint_id) ",
        delivery_columns!(),
        "JOIN webhook_endpoints w ON w.id = d.endpoint_id \
         WHERE w.enabled = 1 AND d.state = 'pending' ORDER BY d.endpoint_id, d.event_seq) h \
         WHERE h.next_attempt_at <= $1 ORDER BY h.next_attempt_at LIMIT $2"
    ),
    select_pending: delivery_select!(
        "WHERE d.endpoint_id = $1 AND d.state = 'pending' AND d.event_seq < COALESCE(( \
             SELECT MIN(x.event_seq) FROM webhook_deliveries x WHERE x.endpoint_id = $1 \
             AND x.state = 'pending' AND x.next_attempt_at > $2), 9223372036854775807) \
         ORDER BY d.event_seq LIMIT $3"
    ),
    update_delivery: "UPDATE webhook_deliveries SET state = $3, attempts = $4, \
         next_attempt_at = $5, last_status = $6, last_error = $7, updated_at = $8 \
         WHERE endpoint_id = $1 AND event_seq = $2 AND state = 'pending'",
    disable_endpoint: "UPDATE webhook_endpoints SET enabled = 0, disabled_reason = $2, \
         updated_at = $3 WHERE id = $1",
    redeliver: "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, \
         next_attempt_at = $4, last_error = NULL, updated_at = $4 \
         WHERE endpoint_id = (SELECT id FROM webhook_endpoints WHERE provider = $1 AND id = $2) \
         AND event_seq = (SELECT seq FROM events WHERE id = $3 AND provider = $1)",
    select_deliveries: delivery_select!(
        "JOIN webhook_endpoints w ON w.id = d.endpoint_id \
         WHERE w.provider = $1 AND d.endpoint_id = $2 ORDER BY e.seq DESC LIMIT $3"
    ),
    select_events: concat!(
        "SELECT ",
        event_columns!(),
        " FROM events WHERE provider = $1 AND seq > $2 ORDER BY seq LIMIT $3"
    ),
    plan_provider: "SELECT provider FROM plans WHERE network = $1 AND plan_id = $2",
    subscription_provider: "SELECT p.provider FROM subscriptions_index s JOIN plans p \
         ON p.network = s.network AND p.plan_id = s.plan_id WHERE s.network = $1 AND s.id = $2",
};

/// `allowance.exhausted`: a deduction was refused at the cap (once per cycle and cap).
pub(super) fn exhausted_event(
    d: &super::Deduction,
    row: &super::AllowanceCycle,
) -> Option<NewEvent> {
    let provider = d.provider?;
    let data = serde_json::json!({
        "network": d.network,
        "subscriptionId": d.id,
        "cycle": row.cycle,
        "cap": row.cap.to_string(),
        "used": row.used.to_string(),
        "remaining": row.remaining().to_string(),
        "requested": d.amount.to_string(),
    });
    Some(NewEvent {
        id: event_id(&[
            d.network.as_bytes(),
            d.id.as_slice(),
            &row.cycle.to_be_bytes(),
            &row.cap.to_be_bytes(),
            b"allowance.exhausted",
        ]),
        provider,
        r#type: "allowance.exhausted".into(),
        data: data.to_string(),
        created_at: d.at,
    })
}

/// A `u64` for a `BIGINT` column, saturated (timestamps and sequence numbers never get there).
pub(super) fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The (state, next attempt, status, error) columns an attempt writes.
pub(super) fn attempt_columns(
    a: &Attempt,
    at: u64,
) -> (&'static str, i64, Option<i64>, Option<String>) {
    let short = |e: &str| e.chars().take(500).collect::<String>();
    match a {
        Attempt::Delivered { status } => (
            DeliveryState::Delivered.as_str(),
            int(at),
            Some(i64::from(*status)),
            None,
        ),
        Attempt::Retry {
            status,
            error,
            next_attempt_at,
        } => (
            DeliveryState::Pending.as_str(),
            int(*next_attempt_at),
            status.map(i64::from),
            Some(short(error)),
        ),
        Attempt::Dead { status, error } => (
            DeliveryState::Dead.as_str(),
            int(at),
            status.map(i64::from),
            Some(short(error)),
        ),
        Attempt::Gone => (
            DeliveryState::Dead.as_str(),
            int(at),
            Some(410),
            Some("410 Gone: endpoint disabled".to_owned()),
        ),
    }
}

/// `evt_` and 32 hex digits of `keccak256(parts…)`: an event id derived from its cause.
pub fn event_id(parts: &[&[u8]]) -> String {
    let h = alloy::primitives::keccak256(parts.concat());
    format!("evt_{}", alloy::primitives::hex::encode(&h[..16]))
}

/// `payment.settled` (confirmed) or `payment.failed`, for the settlement's payee.
pub(super) fn payment_event(s: &super::Settlement, at: u64) -> NewEvent {
    use tollgate_protocol::SettlementStatus;
    let n = &s.new;
    let kind = if s.status == SettlementStatus::Confirmed {
        "payment.settled"
    } else {
        "payment.failed"
    };
    let mut data = serde_json::json!({
        "network": n.network,
        "chainId": n.chain_id,
        "path": n.kind.as_str(),
        "token": n.token,
        "payer": n.payer,
        "payTo": n.pay_to,
        "amount": n.amount,
        "fee": n.fee,
        "memo": n.memo,
        "nonce": n.nonce,
    });
    if let Some(tx) = s.tx_hash {
        data["txHash"] = serde_json::json!(tx);
    }
    if let Some(block) = s.block {
        data["block"] = serde_json::json!(block);
    }
    if let Some(error) = &s.error {
        data["error"] = serde_json::json!(error);
    }
    NewEvent {
        id: event_id(&[n.key.as_slice(), kind.as_bytes()]),
        provider: n.pay_to,
        r#type: kind.to_owned(),
        data: data.to_string(),
        created_at: at,
    }
}
