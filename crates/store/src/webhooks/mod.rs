//! The webhook rows: providers' endpoints, the event outbox and the deliveries: types, decoding
//! and the events the store records itself here, the statements and operations in `sql`.

use alloy::primitives::Address;
use tollgate_protocol::webhook::{
    EventData, WebhookEvent,
    events::{AllowanceExhausted, PaymentEvent},
};

use crate::{
    StoreError, StoreResult,
    codec::{parse_address, parse_network},
};

mod sql;

pub(crate) use sql::{
    delete_endpoint, deliveries, due_deliveries, emit, emit_all_sqlite, endpoint, endpoints,
    events, finish_deliveries, insert_endpoint, pending_deliveries, redeliver, replace_secrets,
    secrets, update_endpoint,
};

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

impl NewEvent {
    /// The event `id` of `data`'s type for `provider`, its data stored as JSON.
    pub fn new(id: String, provider: Address, data: &EventData, created_at: u64) -> Self {
        // The typed data always serializes; `Other`'s is any JSON value.
        let json = serde_json::to_value(data).unwrap_or_default();
        Self {
            id,
            provider,
            r#type: data.type_name().to_owned(),
            data: json["data"].to_string(),
            created_at,
        }
    }

    /// The event as delivered. Stored data that does not have its type's shape (written by
    /// another version) is delivered as stored, as [`EventData::Other`].
    pub fn webhook_event(&self) -> WebhookEvent {
        let data: serde_json::Value =
            serde_json::from_str(&self.data).unwrap_or(serde_json::Value::Null);
        let data = EventData::from_parts(&self.r#type, data.clone()).unwrap_or(EventData::Other {
            r#type: self.r#type.clone(),
            data,
        });
        WebhookEvent {
            id: self.id.clone(),
            created_at: self.created_at,
            data,
        }
    }
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
    /// `keys.webhook_secrets` (`enc1:…`, see the facilitator's `webhooks::SecretsKeys`), or plaintext when
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

/// An endpoint's stored secrets ([`crate::Store::webhook_secrets`]), as stored.
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

crate::codec::stored_names!(DeliveryState, "state", {
    Pending => "pending",
    Delivered => "delivered",
    Dead => "dead",
});

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

/// How an attempt ended ([`crate::Store::finish_deliveries`]).
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
pub(crate) type EndpointRow = (
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

fn nonneg(what: &str, v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what} = {v}")))
}

pub(crate) fn decode_endpoint(row: EndpointRow) -> StoreResult<Endpoint> {
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
pub(crate) type EventRow = (i64, String, String, String, String, i64);

pub(crate) fn decode_event(row: EventRow) -> StoreResult<Event> {
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
pub(crate) type DeliveryRow = (
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

pub(crate) fn decode_delivery(row: DeliveryRow) -> StoreResult<Delivery> {
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

/// `allowance.exhausted`: a deduction was refused at the cap (once per cycle and cap).
pub(crate) fn exhausted_event(
    d: &crate::Deduction,
    row: &crate::AllowanceCycle,
) -> StoreResult<Option<NewEvent>> {
    let Some(provider) = d.provider else {
        return Ok(None);
    };
    let data = EventData::AllowanceExhausted(AllowanceExhausted {
        network: parse_network("network", &d.network)?,
        subscription_id: d.id,
        cycle: row.cycle,
        cap: row.cap.into(),
        used: row.used.into(),
        remaining: row.remaining().into(),
        requested: d.amount.into(),
    });
    let id = event_id(&[
        d.network.as_bytes(),
        d.id.as_slice(),
        &row.cycle.to_be_bytes(),
        &row.cap.to_be_bytes(),
        data.type_name().as_bytes(),
    ]);
    Ok(Some(NewEvent::new(id, provider, &data, d.at)))
}

/// A `u64` for a `BIGINT` column, saturated (timestamps and sequence numbers never get there).
pub(crate) fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The (state, next attempt, status, error) columns an attempt writes.
pub(crate) fn attempt_columns(
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
pub(crate) fn payment_event(s: &crate::Settlement, at: u64) -> StoreResult<NewEvent> {
    use tollgate_protocol::SettlementStatus;
    let n = &s.new;
    let data = PaymentEvent {
        network: parse_network("network", &n.network)?,
        chain_id: n.chain_id,
        path: n.kind.as_str().to_owned(),
        token: n.token,
        payer: n.payer,
        pay_to: n.pay_to,
        amount: n.amount,
        fee: n.fee,
        memo: n.memo,
        nonce: n.nonce,
        tx_hash: s.tx_hash,
        block: s.block,
        error: s.error.clone(),
    };
    let data = if s.status == SettlementStatus::Confirmed {
        EventData::PaymentSettled(data)
    } else {
        EventData::PaymentFailed(data)
    };
    let id = event_id(&[n.key.as_slice(), data.type_name().as_bytes()]);
    Ok(NewEvent::new(id, n.pay_to, &data, at))
}

#[cfg(test)]
mod tests {
    use alloy::primitives::{B256, address};
    use serde_json::Value;
    use tollgate_protocol::{Amount, SettlementStatus};

    use super::*;
    use crate::{AllowanceCycle, Deduction, NewSettlement, Settlement, SettlementKind};

    /// The golden event of `kind` (`crates/protocol/tests/vectors/webhooks/`).
    fn golden(kind: &str) -> Value {
        let path = format!(
            "{}/../protocol/tests/vectors/webhooks/{kind}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    /// `e`'s type and data, which must be its golden vector's, and read back as typed data.
    fn check(e: &NewEvent) {
        let golden = golden(&e.r#type);
        let data: Value = serde_json::from_str(&e.data).unwrap();
        assert_eq!(data, golden["data"], "{}", e.r#type);
        let event = e.webhook_event();
        assert!(event.event_type().is_some(), "{}", e.r#type);
        assert_eq!(
            serde_json::to_value(&event).unwrap()["data"],
            golden["data"]
        );
    }

    fn settlement(kind: SettlementKind, status: SettlementStatus) -> Settlement {
        Settlement {
            new: NewSettlement {
                key: B256::repeat_byte(0xbb),
                kind,
                request_hash: B256::ZERO,
                network: "base-sepolia".into(),
                chain_id: 84532,
                token: address!("0x036cbd53842c5426634e7929541ec2318f3dcf7e"),
                payer: Address::repeat_byte(0x66),
                pay_to: Address::repeat_byte(0x55),
                amount: Amount::from_units(500_000),
                fee: Amount::from_units(1000),
                memo: B256::repeat_byte(0x88),
                nonce: B256::repeat_byte(0x99),
                valid_before: 0,
                request: String::new(),
                resource: None,
                claim_hash: None,
                created_at: 0,
            },
            status,
            tx_hash: None,
            block: None,
            proof: None,
            error: None,
            updated_at: 0,
        }
    }

    /// The events the store writes itself are their golden vectors' `data`, field for field.
    #[test]
    fn recorded_events_match_the_golden_vectors() {
        let mut settled = settlement(SettlementKind::Router, SettlementStatus::Confirmed);
        settled.tx_hash = Some(B256::repeat_byte(0x11));
        settled.block = Some(1234);
        let e = payment_event(&settled, 7).unwrap();
        assert_eq!(e.r#type, "payment.settled");
        check(&e);

        let mut failed = settlement(SettlementKind::X402, SettlementStatus::Failed);
        failed.error = Some("the authorization was already used".into());
        let e = payment_event(&failed, 7).unwrap();
        assert_eq!(e.r#type, "payment.failed");
        check(&e);

        let d = Deduction {
            network: "base-sepolia".into(),
            id: B256::repeat_byte(0x22),
            cycle: 2,
            cap: 2_000_000,
            amount: 50_000,
            key: None,
            provider: Some(Address::repeat_byte(0x55)),
            at: 7,
        };
        let row = AllowanceCycle {
            network: d.network.clone(),
            id: d.id,
            cycle: 2,
            cap: 2_000_000,
            used: 1_990_000,
            billed: 0,
            charged: 0,
            unpaid: 0,
            deductions: 0,
            charges: 0,
            closed: false,
            first_unbilled_at: None,
        };
        let e = exhausted_event(&d, &row).unwrap().unwrap();
        assert_eq!(e.r#type, "allowance.exhausted");
        check(&e);
    }
}
