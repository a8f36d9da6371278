//! `GET /analytics`: a provider's x402 volume, subscriptions, metered usage, webhook health and
//! latest payments over a time range, bucketed by hour, day or week. `/dashboard` renders the
//! same [`Report`].
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

use std::collections::BTreeMap;

use alloy::primitives::{Address, B256};
use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};

use crate::{
    error::{ApiError, ApiQuery},
    facilitator::{Facilitator, unix_now},
    providers::Provider,
    store::{AnalyticsData, AnalyticsQuery, Volume},
};

const HOUR: u64 = 3_600;
const DAY: u64 = 86_400;
const WEEK: u64 = 7 * DAY;
/// 1970-01-05, the first Monday: where weeks start, modulo a week.
const MONDAY: u64 = 4 * DAY;
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

/// `GET /analytics` query parameters, as text (parsed by [`ReportParams::query`] into typed
/// errors).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ReportParams {
    /// Start, unix seconds.
    pub from: Option<String>,
    /// End, unix seconds (exclusive).
    pub to: Option<String>,
    /// `24h`, `7d`, `30d` or `90d`.
    pub range: Option<String>,
    /// `hour`, `day` or `week`.
    pub bucket: Option<String>,
    /// Top list length.
    pub top: Option<String>,
    /// Latest payments listed.
    pub recent: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("InvalidQuery", message)
}

fn number(name: &str, v: Option<&str>) -> Result<Option<u64>, ApiError> {
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

impl ReportParams {
    /// The store query these parameters ask for, for `provider`, at `now`.
    pub fn query(&self, provider: Address, now: u64) -> Result<(AnalyticsQuery, Bucket), ApiError> {
        // `to` is exclusive: by default the current second is in.
        let to = time("to", self.to.as_deref())?.unwrap_or(now.saturating_add(1));
        let span = match self.range.as_deref().filter(|s| !s.is_empty()) {
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
        let from = time("from", self.from.as_deref())?.unwrap_or(to.saturating_sub(span));
        if from >= to {
            return Err(invalid(format!("from ({from}) must be before to ({to})")));
        }
        let bucket = match self.bucket.as_deref().filter(|s| !s.is_empty()) {
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
            top: bounded("top", self.top.as_deref(), 10, 1)?,
            recent: bounded("recent", self.recent.as_deref(), 20, 0)?,
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
}

/// A time parameter: unix seconds up to [`MAX_TIME`].
fn time(name: &str, v: Option<&str>) -> Result<Option<u64>, ApiError> {
    match number(name, v)? {
        Some(t) if t > MAX_TIME => Err(invalid(format!(
            "{name}: {t} is after 10000-01-01 (at most {MAX_TIME})"
        ))),
        t => Ok(t),
    }
}

fn bounded(name: &str, v: Option<&str>, default: u32, min: u32) -> Result<u32, ApiError> {
    match number(name, v)? {
        None => Ok(default),
        Some(n) if n >= u64::from(min) && n <= 100 => Ok(n as u32),
        Some(n) => Err(invalid(format!("{name}: {n} is not within {min}..=100"))),
    }
}

/// A report's bucket width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    /// One hour.
    Hour,
    /// One UTC day.
    Day,
    /// One week, from Monday 00:00 UTC.
    Week,
}

impl Bucket {
    /// Its width in seconds.
    pub fn secs(self) -> u64 {
        match self {
            Self::Hour => HOUR,
            Self::Day => DAY,
            Self::Week => WEEK,
        }
    }

    fn offset(self) -> u64 {
        if self == Self::Week { MONDAY } else { 0 }
    }

    /// `hour`, `day` or `week`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Week => "week",
        }
    }
}

/// Settled volume of a group, amounts as decimal strings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeView {
    /// Settled payments.
    pub payments: u64,
    /// What payers paid.
    pub gross: String,
    /// The facilitator's fees out of it.
    pub fees: String,
    /// What reached the payee (`gross - fees`).
    pub net: String,
}

impl From<&Volume> for VolumeView {
    fn from(v: &Volume) -> Self {
        Self {
            payments: v.payments,
            gross: v.gross.to_string(),
            fees: v.fees.to_string(),
            net: v.gross.saturating_sub(v.fees).to_string(),
        }
    }
}

/// One bucket of the volume series.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumePoint {
    /// The bucket's start, unix seconds.
    pub start: u64,
    /// Its volume.
    #[serde(flatten)]
    pub volume: VolumeView,
}

/// One entry of a top list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ranked {
    /// The resource URL, network name or payer address (`""`: the client did not report the
    /// resource).
    pub key: String,
    /// Its volume.
    #[serde(flatten)]
    pub volume: VolumeView,
}

/// Settled volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeReport {
    /// Over the whole range.
    pub total: VolumeView,
    /// Payments that failed for good in the range (`payment.failed` events).
    pub failed: u64,
    /// Every bucket of the range, oldest first, empty ones included.
    pub series: Vec<VolumePoint>,
    /// Top resources by gross.
    pub by_resource: Vec<Ranked>,
    /// Top networks by gross.
    pub by_network: Vec<Ranked>,
    /// Top payers by gross (whole UTC days).
    pub by_payer: Vec<Ranked>,
}

/// One plan's subscriptions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// Network name.
    pub network: String,
    /// The plan.
    pub plan_id: B256,
    /// Price per cycle, when its `plan.created` event is known.
    pub amount: Option<String>,
    /// Cycle length in seconds, likewise.
    pub interval_secs: Option<u64>,
    /// Active subscriptions now.
    pub active: u64,
    /// Paused now.
    pub paused: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// `active × amount` per 30 days.
    pub recurring_revenue: String,
}

/// Subscription lifecycle counts of one bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionPoint {
    /// The bucket's start.
    pub start: u64,
    /// Subscriptions created.
    pub new: u64,
    /// Renewals collected.
    pub renewed: u64,
    /// Cancellations.
    pub cancelled: u64,
    /// Pauses (by the subscriber or a failed renewal).
    pub paused: u64,
}

/// Subscriptions to the provider's plans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionReport {
    /// Active now.
    pub active: u64,
    /// Paused now.
    pub paused: u64,
    /// Cancelled (all time).
    pub cancelled: u64,
    /// Created in the range.
    pub new: u64,
    /// Renewals collected in the range.
    pub renewed: u64,
    /// Renewals that failed in the range.
    pub renewal_failed: u64,
    /// Cancelled in the range.
    pub cancelled_in_range: u64,
    /// Paused in the range.
    pub paused_in_range: u64,
    /// Resumed in the range.
    pub resumed_in_range: u64,
    /// The active subscriptions' plan amounts per 30 days.
    pub recurring_revenue: String,
    /// Per bucket.
    pub series: Vec<SubscriptionPoint>,
    /// Per plan.
    pub by_plan: Vec<PlanReport>,
}

/// Metered usage of one bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MeteredPoint {
    /// The bucket's start.
    pub start: u64,
    /// Deductions.
    pub deductions: u64,
    /// Amount deducted.
    pub used: String,
}

/// Metered usage of subscriptions to the provider's plans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MeteredReport {
    /// Deductions in the range.
    pub deductions: u64,
    /// Amount deducted in the range.
    pub used: String,
    /// Overage charged on-chain (confirmed) in the range.
    pub charged: String,
    /// Overage whose charge failed for good in the range.
    pub unpaid: String,
    /// Deductions refused at the cap (`allowance.exhausted`) in the range.
    pub exhausted: u64,
    /// Allowances raised in the range.
    pub raised: u64,
    /// Per bucket.
    pub series: Vec<MeteredPoint>,
}

/// One endpoint's delivery health.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointReport {
    /// Endpoint id.
    pub id: String,
    /// URL.
    pub url: String,
    /// Deliveries go out.
    pub enabled: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Waiting.
    pub pending: u64,
    /// Waiting after a failed attempt.
    pub retrying: u64,
    /// Given up on (dead letter).
    pub dead: u64,
    /// Acknowledged in the range.
    pub delivered: u64,
}

/// One recent payment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecentPayment {
    /// Settlement key (`GET /settlements/{key}`).
    pub key: B256,
    /// `router` (`/authorize`) or `x402` (`/settle`).
    pub path: &'static str,
    /// Network name.
    pub network: String,
    /// Payer, checksummed.
    pub payer: String,
    /// Gross amount.
    pub amount: String,
    /// Fee.
    pub fee: String,
    /// `received`, `submitted`, `pending`, `confirmed` or `failed`.
    pub status: String,
    /// The resource, when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The transaction, once known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_hash: Option<B256>,
    /// Unix seconds of its last change.
    pub at: u64,
}

/// `GET /analytics`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The provider (payee) reported on, checksummed.
    pub provider: String,
    /// Range start.
    pub from: u64,
    /// Range end (exclusive).
    pub to: u64,
    /// Bucket width.
    pub bucket: Bucket,
    /// Settled volume.
    pub volume: VolumeReport,
    /// Subscriptions.
    pub subscriptions: SubscriptionReport,
    /// Metered usage.
    pub metered: MeteredReport,
    /// Webhook endpoints.
    pub webhooks: Vec<EndpointReport>,
    /// Latest payments, newest first.
    pub recent_payments: Vec<RecentPayment>,
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

/// Shapes the store's rows into a [`Report`].
pub fn report(q: &AnalyticsQuery, bucket: Bucket, data: &AnalyticsData) -> Report {
    let starts: Vec<u64> = {
        let (first, last) = (q.bucket_of(q.from), q.bucket_of(q.to - 1));
        (0..=(last - first) / q.bucket_secs)
            .map(|i| first + i * q.bucket_secs)
            .collect()
    };

    let by_start: BTreeMap<u64, &Volume> = data.series.iter().map(|(t, v)| (*t, v)).collect();
    let mut total = Volume::default();
    let series = starts
        .iter()
        .map(|t| {
            let v = by_start.get(t).copied().copied().unwrap_or_default();
            total.add(&v);
            VolumePoint {
                start: *t,
                volume: (&v).into(),
            }
        })
        .collect();
    let ranked = |rows: &[(String, Volume)]| -> Vec<Ranked> {
        rows.iter()
            .map(|(k, v)| Ranked {
                key: k.clone(),
                volume: v.into(),
            })
            .collect()
    };

    // Event counts: per bucket and over the range.
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
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
        *counts.entry(kind.as_str()).or_default() += n;
        if let Some(p) = subs.get_mut(t) {
            match kind.as_str() {
                "subscription.created" => p.new += n,
                "subscription.renewed" => p.renewed += n,
                "subscription.cancelled" => p.cancelled += n,
                "subscription.paused" => p.paused += n,
                _ => {}
            }
        }
    }
    let count = |kind: &str| counts.get(kind).copied().unwrap_or(0);

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
            PlanReport {
                network: p.network.clone(),
                plan_id: p.plan_id,
                amount: t.map(|t| t.amount.clone()),
                interval_secs: t.map(|t| t.interval),
                active: p.active,
                paused: p.paused,
                cancelled: p.cancelled,
                recurring_revenue: revenue.to_string(),
            }
        })
        .collect();

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

    Report {
        provider: q.provider.to_checksum(None),
        from: q.from,
        to: q.to,
        bucket,
        volume: VolumeReport {
            total: (&total).into(),
            failed: count("payment.failed"),
            series,
            by_resource: ranked(&data.by_resource),
            by_network: ranked(&data.by_network),
            by_payer: data
                .by_payer
                .iter()
                .map(|(p, v)| Ranked {
                    key: p.to_checksum(None),
                    volume: v.into(),
                })
                .collect(),
        },
        subscriptions: SubscriptionReport {
            active,
            paused,
            cancelled,
            new: count("subscription.created"),
            renewed: count("subscription.renewed"),
            renewal_failed: count("subscription.renewal_failed"),
            cancelled_in_range: count("subscription.cancelled"),
            paused_in_range: count("subscription.paused"),
            resumed_in_range: count("subscription.resumed"),
            recurring_revenue: mrr.to_string(),
            series: subs.into_values().collect(),
            by_plan,
        },
        metered: MeteredReport {
            deductions,
            used: used.to_string(),
            charged: data.charged.to_string(),
            unpaid: data.unpaid.to_string(),
            exhausted: count("allowance.exhausted"),
            raised: count("allowance.raised"),
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
            .map(|s| RecentPayment {
                key: s.new.key,
                path: s.new.kind.as_str(),
                network: s.new.network.clone(),
                payer: s.new.payer.to_checksum(None),
                amount: s.new.amount.to_string(),
                fee: s.new.fee.to_string(),
                status: s.status.as_str().to_owned(),
                resource: s.new.resource.clone(),
                tx_hash: s.tx_hash,
                at: s.updated_at,
            })
            .collect(),
    }
}

impl Facilitator {
    /// `provider`'s report for `params` at the current time.
    pub async fn analytics(
        &self,
        provider: Address,
        params: &ReportParams,
    ) -> Result<Report, ApiError> {
        let (q, bucket) = params.query(provider, unix_now())?;
        let data = self.store().analytics(&q).await?;
        Ok(report(&q, bucket, &data))
    }
}

/// `GET /analytics`.
pub(crate) async fn show(
    State(f): State<Facilitator>,
    ApiQuery(params): ApiQuery<ReportParams>,
    provider: Provider,
) -> Result<Json<Report>, ApiError> {
    Ok(Json(f.analytics(provider.address, &params).await?))
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
        let (q, b) = ReportParams::default().query(Address::ZERO, now).unwrap();
        assert_eq!(
            (q.from, q.to, b, q.top, q.recent),
            (now + 1 - 30 * DAY, now + 1, Bucket::Day, 10, 20)
        );
        let (_, b) = params(&[("range", "24h")])
            .query(Address::ZERO, now)
            .unwrap();
        assert_eq!(b, Bucket::Hour);
        let (q, _) = params(&[("from", "253402297200"), ("to", "253402300800")])
            .query(Address::ZERO, now)
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
            let e = bad.query(Address::ZERO, now).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), &*e.code),
                (400, "InvalidQuery"),
                "{bad:?}"
            );
        }
    }
}
