//! `GET /analytics`: a provider's revenue by kind, one-time volume, subscriptions, metered usage,
//! webhook health and latest payments over a time range, bucketed by hour, day or week.
//! `/dashboard` renders the same [`Report`].
//!
//! Query parameters (all optional):
//!
//! | name | meaning | default |
//! |---|---|---|
//! | `from`, `to` | unix seconds, at most 253402300800 (10000-01-01); the range is `[from, to)` | the last `range` up to now |
//! | `range` | `24h`, `7d`, `30d` or `90d` (when `from` is absent) | `30d` |
//! | `bucket` | `hour`, `day` or `week` (weeks start Monday 00:00 UTC) | `hour` up to 2 days, else `day` |
//! | `top` | entries in the top lists (1–100) | 10 |
//! | `recent` | latest payments listed (0–100) | 20 |
//!
//! A parameter that does not parse, is out of range or contradicts another (`from` not before
//! `to`) is answered 400 `InvalidQuery` with the parameter named.
//!
//! Volume is settled volume (confirmed settlements) on the payee's side, from rollups kept per
//! hour, so it covers the whole hours the range touches (`from` counts from the start of its
//! hour, `to` to the end of its hour) and, for payers, per UTC day (the payer ranking covers the
//! whole days the range touches). Event counts, metered usage and deliveries use the exact range. Amounts are decimal strings in the token's
//! smallest unit. Recurring revenue is the active subscriptions' plan amounts per 30 days.
//!
//! Revenue ([`RevenueReport`]) is every payment the chain confirmed, by kind: one-time payments
//! (the settled volume above), subscriptions' first cycles, renewals and overage charges (booked
//! per hour when the keeper indexes their `SubscriptionRenewed` and `OverageCharged` logs at the
//! network's confirmation depth, once per log); its `gross` is their sum. Failed renewals and
//! overage charges are not revenue: they are listed under `revenue.failed`.

use std::collections::BTreeMap;

use alloy::primitives::{Address, B256};
use serde::Deserialize;
use tollgate_protocol::Network;
pub use tollgate_protocol::api::analytics::{
    Bucket, EndpointReport, FailedRevenue, MeteredPoint, MeteredReport, PlanReport, Ranked,
    RecentPayment, Report, ReportParams, RevenuePoint, RevenueReport, RevenueView,
    SubscriptionPoint, SubscriptionReport, VolumePoint, VolumeReport, VolumeView,
};
use tollgate_protocol::webhook::EventType;

use std::sync::Arc;

use crate::{
    error::{Error, Result},
    facilitator::Core,
    facilitator::unix_now,
    store::{AnalyticsData, AnalyticsQuery, RevenueKind, StoreError, Volume},
};

const DAY: u64 = 86_400;
/// The recurring revenue period.
const THIRTY_DAYS: u64 = 30 * DAY;
/// The latest time a range may reach: 10000-01-01 00:00:00 UTC, so that every date in a report
/// has four digits and fits the store's `BIGINT` columns.
pub const MAX_TIME: u64 = 253_402_300_800;
/// The most buckets one report holds.
pub const MAX_BUCKETS: u64 = 2_000;
/// The longest resource label stored, in bytes.
const MAX_RESOURCE: usize = 512;

/// The label a resource URL is stored under: without query or fragment, control, format and
/// bidirectional-override characters dropped (so a label cannot reorder or hide text on the
/// dashboard), at most 512 bytes; `None` when nothing is left.
pub fn resource_label(url: &str) -> Option<String> {
    let path = url.split(['?', '#']).next().unwrap_or_default().trim();
    let mut out = String::with_capacity(path.len().min(MAX_RESOURCE));
    for c in path
        .chars()
        .filter(|&c| !c.is_control() && !is_invisible(c))
    {
        if out.len() + c.len_utf8() > MAX_RESOURCE {
            break;
        }
        out.push(c);
    }
    (!out.is_empty()).then_some(out)
}

/// Unicode format characters (general category Cf: bidirectional embeddings, overrides and
/// isolates, zero-width characters, the byte-order mark, tags) and the other invisible
/// separators a label could use to spoof what is displayed.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{115F}'..='\u{1160}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidQuery(message.into())
}

fn number(name: &str, v: Option<&str>) -> Result<Option<u64>> {
    v.filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>().map_err(|_| {
                invalid(format!(
                    "{name}: expected a non-negative integer, got {s:.40?}"
                ))
            })
        })
        .transpose()
}

/// The store query `params` ask for, for `provider`, at `now`; a parameter that does not parse,
/// is out of range or contradicts another is 400 `InvalidQuery`, naming it.
pub fn report_query(
    params: &ReportParams,
    provider: Address,
    now: u64,
) -> Result<(AnalyticsQuery, Bucket)> {
    // `to` is exclusive: by default the current second is in.
    let to = time("to", params.to.as_deref())?.unwrap_or(now.saturating_add(1));
    let span = match params.range.as_deref().filter(|s| !s.is_empty()) {
        None | Some("30d") => 30 * DAY,
        Some("24h") => DAY,
        Some("7d") => 7 * DAY,
        Some("90d") => 90 * DAY,
        Some(other) => {
            return Err(invalid(format!(
                "range: expected 24h, 7d, 30d or 90d, got {other:.40?}"
            )));
        }
    };
    let from = time("from", params.from.as_deref())?.unwrap_or(to.saturating_sub(span));
    if from >= to {
        return Err(invalid(format!("from ({from}) must be before to ({to})")));
    }
    let bucket = match params.bucket.as_deref().filter(|s| !s.is_empty()) {
        None if to - from <= 2 * DAY => Bucket::Hour,
        None => Bucket::Day,
        Some("hour") => Bucket::Hour,
        Some("day") => Bucket::Day,
        Some("week") => Bucket::Week,
        Some(other) => {
            return Err(invalid(format!(
                "bucket: expected hour, day or week, got {other:.40?}"
            )));
        }
    };
    let q = AnalyticsQuery {
        provider,
        from,
        to,
        bucket_secs: bucket.secs(),
        bucket_offset: bucket.offset(),
        top: bounded("top", params.top.as_deref(), 10, 1)?,
        recent: bounded("recent", params.recent.as_deref(), 20, 0)?,
    };
    let buckets = (q.bucket_of(to - 1) - q.bucket_of(from)) / q.bucket_secs + 1;
    if buckets > MAX_BUCKETS {
        return Err(invalid(format!(
            "{buckets} {} buckets in the range; at most {MAX_BUCKETS}: use a wider bucket",
            bucket.name()
        )));
    }
    Ok((q, bucket))
}

/// A time parameter: unix seconds up to [`MAX_TIME`].
fn time(name: &str, v: Option<&str>) -> Result<Option<u64>> {
    match number(name, v)? {
        Some(t) if t > MAX_TIME => Err(invalid(format!(
            "{name}: {t} is after 10000-01-01 (at most {MAX_TIME})"
        ))),
        t => Ok(t),
    }
}

fn bounded(name: &str, v: Option<&str>, default: u32, min: u32) -> Result<u32> {
    match number(name, v)? {
        None => Ok(default),
        Some(n) if n >= u64::from(min) && n <= 100 => Ok(n as u32),
        Some(n) => Err(invalid(format!("{name}: {n} is not within {min}..=100"))),
    }
}

/// The wire view of a stored volume.
fn volume_view(v: &Volume) -> VolumeView {
    {
        VolumeView {
            payments: v.payments,
            gross: v.gross.to_string(),
            fees: v.fees.to_string(),
            net: v.gross.saturating_sub(v.fees).to_string(),
        }
    }
}

/// Revenue of one bucket (or a range) by kind, in the token's smallest unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Revenue {
    one_time: u128,
    first_cycle: u128,
    renewal: u128,
    overage: u128,
}

impl Revenue {
    fn book(&mut self, kind: RevenueKind, gross: u128) {
        let slot = match kind {
            RevenueKind::FirstCycle => &mut self.first_cycle,
            RevenueKind::Renewal => &mut self.renewal,
            RevenueKind::Overage => &mut self.overage,
        };
        *slot = slot.saturating_add(gross);
    }

    fn add(&mut self, other: &Self) {
        self.one_time = self.one_time.saturating_add(other.one_time);
        self.first_cycle = self.first_cycle.saturating_add(other.first_cycle);
        self.renewal = self.renewal.saturating_add(other.renewal);
        self.overage = self.overage.saturating_add(other.overage);
    }

    fn view(&self) -> RevenueView {
        let gross = self
            .one_time
            .saturating_add(self.first_cycle)
            .saturating_add(self.renewal)
            .saturating_add(self.overage);
        RevenueView {
            gross: gross.to_string(),
            one_time: self.one_time.to_string(),
            subscription_first_cycle: self.first_cycle.to_string(),
            renewal: self.renewal.to_string(),
            overage: self.overage.to_string(),
        }
    }
}

/// Terms of a plan read from its `plan.created` event data.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlanTerms {
    network: String,
    plan_id: B256,
    amount: String,
    interval: u64,
}

/// A stored network name as the report's [`Network`] (every one was a configured network's
/// name; anything else is a corrupt row).
fn stored_network(name: &str) -> Result<Network> {
    Network::parse(name).map_err(|_| StoreError::Corrupt(format!("network = {name:.80}")).into())
}

/// Shapes the store's rows into a [`Report`]. Fails only on a stored network name that is not
/// of a network's form ([`StoreError::Corrupt`]).
pub fn report(q: &AnalyticsQuery, bucket: Bucket, data: &AnalyticsData) -> Result<Report> {
    let starts: Vec<u64> = {
        let (first, last) = (q.bucket_of(q.from), q.bucket_of(q.to - 1));
        (0..=(last - first) / q.bucket_secs)
            .map(|i| first + i * q.bucket_secs)
            .collect()
    };

    let by_start: BTreeMap<u64, &Volume> = data.series.iter().map(|(t, v)| (*t, v)).collect();
    let mut revenue_by: BTreeMap<u64, Revenue> = BTreeMap::new();
    for r in &data.revenue {
        revenue_by.entry(r.start).or_default().book(r.kind, r.gross);
    }
    let mut total = Volume::default();
    let mut revenue = Revenue::default();
    let mut revenue_series = Vec::with_capacity(starts.len());
    let series = starts
        .iter()
        .map(|t| {
            let v = by_start.get(t).copied().copied().unwrap_or_default();
            total.add(&v);
            let r = Revenue {
                one_time: v.gross,
                ..revenue_by.get(t).copied().unwrap_or_default()
            };
            revenue.add(&r);
            revenue_series.push(RevenuePoint {
                start: *t,
                revenue: r.view(),
            });
            VolumePoint {
                start: *t,
                volume: volume_view(&v),
            }
        })
        .collect();
    let ranked = |rows: &[(String, Volume)]| -> Vec<Ranked> {
        rows.iter()
            .map(|(k, v)| Ranked {
                key: k.clone(),
                volume: volume_view(v),
            })
            .collect()
    };

    // Event counts: per bucket and over the range.
    let mut counts: BTreeMap<EventType, u64> = BTreeMap::new();
    let mut subs: BTreeMap<u64, SubscriptionPoint> = starts
        .iter()
        .map(|t| {
            (
                *t,
                SubscriptionPoint {
                    start: *t,
                    ..SubscriptionPoint::default()
                },
            )
        })
        .collect();
    for (t, kind, n) in &data.events {
        // The store counts the types of `COUNTED_EVENTS`, all of them `EventType`s.
        let Ok(kind) = kind.parse::<EventType>() else {
            continue;
        };
        *counts.entry(kind).or_default() += n;
        if let Some(p) = subs.get_mut(t) {
            match kind {
                EventType::SubscriptionCreated => p.new += n,
                EventType::SubscriptionRenewed => p.renewed += n,
                EventType::SubscriptionCancelled => p.cancelled += n,
                EventType::SubscriptionPaused => p.paused += n,
                _ => {}
            }
        }
    }
    let count = |kind: EventType| counts.get(&kind).copied().unwrap_or(0);

    let terms: Vec<PlanTerms> = data
        .plan_terms
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let (mut active, mut paused, mut cancelled, mut mrr) = (0, 0, 0, 0u128);
    // Every plan with subscriptions, then the published ones nobody subscribed to yet.
    let mut plans = data.plans.clone();
    for t in &terms {
        if !plans
            .iter()
            .any(|p| p.network == t.network && p.plan_id == t.plan_id)
        {
            plans.push(crate::store::PlanStates {
                network: t.network.clone(),
                plan_id: t.plan_id,
                ..Default::default()
            });
        }
    }
    let by_plan = plans
        .iter()
        .map(|p| {
            let t = terms
                .iter()
                .find(|t| t.network == p.network && t.plan_id == p.plan_id);
            let per_30d = t
                .and_then(|t| Some((t.amount.parse::<u128>().ok()?, t.interval)))
                .filter(|(_, interval)| *interval > 0)
                .map_or(0, |(amount, interval)| {
                    amount.saturating_mul(u128::from(THIRTY_DAYS)) / u128::from(interval)
                });
            let revenue = per_30d.saturating_mul(u128::from(p.active));
            active += p.active;
            paused += p.paused;
            cancelled += p.cancelled;
            mrr = mrr.saturating_add(revenue);
            Ok(PlanReport {
                network: stored_network(&p.network)?,
                plan_id: p.plan_id,
                amount: t.map(|t| t.amount.clone()),
                interval_secs: t.map(|t| t.interval),
                active: p.active,
                paused: p.paused,
                cancelled: p.cancelled,
                recurring_revenue: revenue.to_string(),
            })
        })
        .collect::<Result<_>>()?;

    let metered_by: BTreeMap<u64, (u64, u128)> = data
        .metered
        .iter()
        .map(|(t, n, a)| (*t, (*n, *a)))
        .collect();
    let (mut deductions, mut used) = (0u64, 0u128);
    let metered_series = starts
        .iter()
        .map(|t| {
            let (n, a) = metered_by.get(t).copied().unwrap_or_default();
            deductions += n;
            used = used.saturating_add(a);
            MeteredPoint {
                start: *t,
                deductions: n,
                used: a.to_string(),
            }
        })
        .collect();

    Ok(Report {
        provider: q.provider.to_checksum(None),
        from: q.from,
        to: q.to,
        bucket,
        revenue: RevenueReport {
            total: revenue.view(),
            series: revenue_series,
            failed: FailedRevenue {
                payments: count(EventType::PaymentFailed),
                renewals: count(EventType::SubscriptionRenewalFailed),
                overage: data.unpaid.to_string(),
            },
        },
        volume: VolumeReport {
            total: volume_view(&total),
            failed: count(EventType::PaymentFailed),
            series,
            by_resource: ranked(&data.by_resource),
            by_network: ranked(&data.by_network),
            by_payer: data
                .by_payer
                .iter()
                .map(|(p, v)| Ranked {
                    key: p.to_checksum(None),
                    volume: volume_view(v),
                })
                .collect(),
        },
        subscriptions: SubscriptionReport {
            active,
            paused,
            cancelled,
            new: count(EventType::SubscriptionCreated),
            renewed: count(EventType::SubscriptionRenewed),
            renewal_failed: count(EventType::SubscriptionRenewalFailed),
            cancelled_in_range: count(EventType::SubscriptionCancelled),
            paused_in_range: count(EventType::SubscriptionPaused),
            resumed_in_range: count(EventType::SubscriptionResumed),
            recurring_revenue: mrr.to_string(),
            series: subs.into_values().collect(),
            by_plan,
        },
        metered: MeteredReport {
            deductions,
            used: used.to_string(),
            charged: data.charged.to_string(),
            unpaid: data.unpaid.to_string(),
            exhausted: count(EventType::AllowanceExhausted),
            raised: count(EventType::AllowanceRaised),
            series: metered_series,
        },
        webhooks: data
            .endpoints
            .iter()
            .map(|e| EndpointReport {
                id: e.id.clone(),
                url: e.url.clone(),
                enabled: e.enabled,
                disabled_reason: e.disabled_reason.clone(),
                pending: e.pending,
                retrying: e.retrying,
                dead: e.dead,
                delivered: e.delivered,
            })
            .collect(),
        recent_payments: data
            .recent
            .iter()
            .map(|s| {
                Ok(RecentPayment {
                    key: s.new.key,
                    path: s.new.kind.as_str().to_owned(),
                    network: stored_network(&s.new.network)?,
                    payer: s.new.payer.to_checksum(None),
                    amount: s.new.amount.to_string(),
                    fee: s.new.fee.to_string(),
                    status: s.status.as_str().to_owned(),
                    resource: s.new.resource.clone(),
                    tx_hash: s.tx_hash,
                    at: s.updated_at,
                })
            })
            .collect::<Result<_>>()?,
    })
}

/// A provider's analytics report over a time range. A service of the
/// [`Facilitator`](crate::Facilitator).
#[derive(Clone, Debug)]
pub struct Analytics {
    pub(crate) core: Arc<Core>,
}

impl Analytics {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// `provider`'s report for `params` at the current time.
    pub async fn report(&self, provider: Address, params: &ReportParams) -> Result<Report> {
        let (q, bucket) = report_query(params, provider, unix_now())?;
        let data = self.core.store().analytics(&q).await?;
        report(&q, bucket, &data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_labels_drop_query_fragment_and_controls() {
        assert_eq!(
            resource_label("http://api.example/v1/report?x=1#y").as_deref(),
            Some("http://api.example/v1/report")
        );
        assert_eq!(resource_label(" /a\u{7}b ").as_deref(), Some("/ab"));
        assert_eq!(resource_label("?only=query"), None);
        assert_eq!(resource_label(&"é".repeat(400)).unwrap().len(), 512);
        // Bidi overrides and isolates, zero-width and tag characters cannot spoof the label.
        assert_eq!(
            resource_label("/v1/\u{202E}gnp.exe\u{202C}\u{2066}x\u{2069}\u{200B}\u{FEFF}\u{E0041}")
                .as_deref(),
            Some("/v1/gnp.exex")
        );
        assert_eq!(resource_label("\u{202E}\u{200D}"), None);
    }

    fn params(pairs: &[(&str, &str)]) -> ReportParams {
        let mut p = ReportParams::default();
        for (k, v) in pairs {
            let v = Some((*v).to_owned());
            match *k {
                "from" => p.from = v,
                "to" => p.to = v,
                "range" => p.range = v,
                "bucket" => p.bucket = v,
                "top" => p.top = v,
                _ => p.recent = v,
            }
        }
        p
    }

    #[test]
    fn parameters_default_and_refuse_with_typed_errors() {
        let now = 1_800_000_000;
        let (q, b) = report_query(&ReportParams::default(), Address::ZERO, now).unwrap();
        assert_eq!(
            (q.from, q.to, b, q.top, q.recent),
            (now + 1 - 30 * DAY, now + 1, Bucket::Day, 10, 20)
        );
        let (_, b) = report_query(&params(&[("range", "24h")]), Address::ZERO, now).unwrap();
        assert_eq!(b, Bucket::Hour);
        let (q, _) = report_query(
            &params(&[("from", "253402297200"), ("to", "253402300800")]),
            Address::ZERO,
            now,
        )
        .unwrap();
        assert_eq!(q.to, MAX_TIME);
        for bad in [
            params(&[("from", "10"), ("to", "10")]),
            params(&[("from", "-1")]),
            params(&[("bucket", "minute")]),
            params(&[("range", "1y")]),
            params(&[("top", "0")]),
            params(&[("recent", "101")]),
            params(&[("range", "90d"), ("bucket", "hour")]),
            params(&[("to", "253402300801")]),
            params(&[("to", "9223372036854775808")]),
            params(&[("from", "253402300801"), ("to", "253402300802")]),
            params(&[("from", "99999999999999")]),
            params(&[("range", "999999999d")]),
        ] {
            let e =
                crate::error::ApiError::from(report_query(&bad, Address::ZERO, now).unwrap_err());
            assert_eq!(
                (e.status.as_u16(), e.code.as_str()),
                (400, "InvalidQuery"),
                "{bad:?}"
            );
        }
    }
}
