//! Analytics: the settled-volume rollups written with each confirmation, and the reads behind
//! `GET /analytics` and `/dashboard`.
//!
//! Settled volume is kept twice, in the transaction that confirms the settlement: per payee,
//! hour, network and resource (`volume_rollups`), and per payee, UTC day and payer
//! (`payer_rollups`: payers are many, a day keeps it small). Subscription money (first cycles,
//! renewals, overage charges) is kept per provider, hour, network and [`RevenueKind`]
//! (`revenue_rollups`), booked in the transaction that records its chain event into the outbox,
//! once per event id. A report over a range reads those rows, never the settlements or events
//! themselves, so its cost grows with hours and resources, not with payments. Subscription,
//! allowance and failure counts come from the event outbox (indexed by provider, type and time),
//! metered usage from the usage ledger, subscription states from the keeper's index joined to the
//! plans the provider published.
//!
//! Types and decoding here; the statements (written once: both databases take them) and the
//! operations in `sql`.

use alloy::primitives::{Address, B256};
use tollgate_protocol::webhook::EventType;

use crate::{Settlement, StoreError, StoreResult, codec, webhooks::NewEvent};

mod sql;

pub(crate) use sql::{Rollup, book_revenue, read, saturating_add, write_rollups};

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

/// What paid for a subscription's revenue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RevenueKind {
    /// The first cycle, paid when subscribing (`subscription.created`).
    FirstCycle,
    /// A later cycle collected by a renewal (`subscription.renewed`).
    Renewal,
    /// Metered overage charged on-chain (`allowance.charged`).
    Overage,
}

crate::codec::stored_names!(RevenueKind, "revenue kind", {
    FirstCycle => "first_cycle",
    Renewal => "renewal",
    Overage => "overage",
});

impl RevenueKind {
    /// The revenue an event records, if it is one of the kinds: its kind, network and amount
    /// (saturated at `u128::MAX`). `None` for other events, and for one whose data lacks a
    /// network or a decimal `amount` (a `subscription.created` recorded before first cycles
    /// carried theirs).
    pub(crate) fn of_event(e: &NewEvent) -> Option<(Self, String, u128)> {
        let kind = match e.r#type.parse().ok()? {
            EventType::SubscriptionCreated => Self::FirstCycle,
            EventType::SubscriptionRenewed => Self::Renewal,
            EventType::AllowanceCharged => Self::Overage,
            _ => return None,
        };
        let data: serde_json::Value = serde_json::from_str(&e.data).ok()?;
        let network = data.get("network")?.as_str()?.to_owned();
        let amount = data.get("amount")?.as_str()?;
        if amount.is_empty() || !amount.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((kind, network, amount.parse().unwrap_or(u128::MAX)))
    }
}

/// Subscription revenue of one bucket and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RevenueRow {
    /// The bucket's start.
    pub start: u64,
    /// What paid it.
    pub kind: RevenueKind,
    /// Payments.
    pub payments: u64,
    /// Their amount, in the token's smallest unit.
    pub gross: u128,
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
    /// Subscription revenue per bucket start and kind (absent when none), over the whole hours
    /// the range touches.
    pub revenue: Vec<RevenueRow>,
    /// The provider's webhook endpoints.
    pub endpoints: Vec<EndpointHealth>,
    /// The provider's latest payments (any status), newest first.
    pub recent: Vec<Settlement>,
}

/// The event types a report counts.
pub const COUNTED_EVENTS: &[&str] = &[
    EventType::PaymentFailed.as_str(),
    EventType::SubscriptionCreated.as_str(),
    EventType::SubscriptionRenewed.as_str(),
    EventType::SubscriptionRenewalFailed.as_str(),
    EventType::SubscriptionPaused.as_str(),
    EventType::SubscriptionResumed.as_str(),
    EventType::SubscriptionCancelled.as_str(),
    EventType::AllowanceExhausted.as_str(),
    EventType::AllowanceRaised.as_str(),
    EventType::AllowanceCharged.as_str(),
];

/// A report's rows as the database returns them.
pub(crate) struct Raw {
    pub(crate) series: Vec<(i64, i64, String, String, String, String)>,
    pub(crate) by_resource: Vec<(String, i64, String, String, String, String)>,
    pub(crate) by_network: Vec<(String, i64, String, String, String, String)>,
    pub(crate) by_payer: Vec<(String, i64, String, String, String, String)>,
    pub(crate) plan_states: Vec<(String, String, String, i64)>,
    pub(crate) plan_terms: Vec<(String,)>,
    pub(crate) events: Vec<(i64, String, i64)>,
    pub(crate) metered: Vec<(i64, i64, String, String)>,
    pub(crate) charges: Vec<(String, String, String)>,
    pub(crate) revenue: Vec<(i64, String, i64, String, String)>,
    #[allow(clippy::type_complexity)]
    pub(crate) endpoints: Vec<(String, String, i64, Option<String>, i64, i64, i64, i64)>,
    pub(crate) recent: Vec<codec::SettlementRow>,
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
pub(crate) fn assemble(raw: Raw) -> StoreResult<AnalyticsData> {
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
        revenue: raw
            .revenue
            .into_iter()
            .map(|(t, kind, n, hi, lo)| {
                Ok(RevenueRow {
                    start: count("bucket", t)?,
                    kind: RevenueKind::parse(&kind)?,
                    payments: count("payments", n)?,
                    gross: split_sum("revenue", &hi, &lo)?,
                })
            })
            .collect::<StoreResult<_>>()?,
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
    fn revenue_is_read_from_its_events_only() {
        let event = |kind: &str, data: &str| NewEvent {
            id: "evt".into(),
            provider: Address::ZERO,
            r#type: kind.into(),
            data: data.into(),
            created_at: 0,
        };
        let paid = r#"{"network":"devnet","amount":"700000"}"#;
        assert_eq!(
            RevenueKind::of_event(&event("subscription.created", paid)),
            Some((RevenueKind::FirstCycle, "devnet".into(), 700_000))
        );
        assert_eq!(
            RevenueKind::of_event(&event("subscription.renewed", paid)).map(|r| r.0),
            Some(RevenueKind::Renewal)
        );
        assert_eq!(
            RevenueKind::of_event(&event("allowance.charged", paid)).map(|r| r.0),
            Some(RevenueKind::Overage)
        );
        let huge = format!(r#"{{"network":"devnet","amount":"{}0"}}"#, u128::MAX);
        assert_eq!(
            RevenueKind::of_event(&event("allowance.charged", &huge)).map(|r| r.2),
            Some(u128::MAX)
        );
        for (kind, data) in [
            ("payment.settled", paid),
            ("subscription.renewal_failed", paid),
            ("subscription.created", r#"{"network":"devnet"}"#),
            ("subscription.renewed", r#"{"amount":"1"}"#),
            (
                "subscription.renewed",
                r#"{"network":"devnet","amount":"-1"}"#,
            ),
            ("subscription.renewed", r#"{"network":"devnet","amount":1}"#),
            ("subscription.renewed", "not json"),
        ] {
            assert_eq!(
                RevenueKind::of_event(&event(kind, data)),
                None,
                "{kind} {data}"
            );
        }
    }

    #[test]
    fn sums_read_integers_only() {
        assert_eq!(sum("x", "12").unwrap(), 12);
        assert_eq!(sum("x", "12.0").unwrap(), 12);
        assert!(sum("x", "-1").is_err());
        assert!(sum("x", "abc").is_err());
    }
}
