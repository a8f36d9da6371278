//! `GET /analytics` (provider API key): a provider's revenue by kind, one-time volume,
//! subscriptions, metered usage, webhook health and latest payments over a time range, bucketed
//! by hour, day or week. Amounts are decimal strings in the token's smallest unit.

use alloy::primitives::B256;
use serde::{Deserialize, Serialize};

const HOUR: u64 = 3_600;
const DAY: u64 = 86_400;
const WEEK: u64 = 7 * DAY;
/// 1970-01-05, the first Monday: where weeks start, modulo a week.
const MONDAY: u64 = 4 * DAY;

/// `GET /analytics` query parameters, as text (parsed by the facilitator into typed
/// errors, each naming its parameter).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
pub struct ReportParams {
    /// Start, unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(pattern = r"^(\+?[0-9]+)?$"))]
    pub from: Option<String>,
    /// End, unix seconds (exclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(pattern = r"^(\+?[0-9]+)?$"))]
    pub to: Option<String>,
    /// `24h`, `7d`, `30d` or `90d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(pattern = "^(24h|7d|30d|90d)?$"))]
    pub range: Option<String>,
    /// `hour`, `day` or `week`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(pattern = "^(hour|day|week)?$"))]
    pub bucket: Option<String>,
    /// Top list length (1 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(pattern = r"^(\+?[0-9]+)?$"))]
    pub top: Option<String>,
    /// Latest payments listed (0 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(pattern = r"^(\+?[0-9]+)?$"))]
    pub recent: Option<String>,
}

/// A report's bucket width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

    /// Where buckets start, modulo their width: 1970-01-05 (a Monday) for weeks, else 0.
    pub fn offset(self) -> u64 {
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// One bucket of the volume series.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VolumePoint {
    /// The bucket's start, unix seconds.
    pub start: u64,
    /// Its volume.
    #[serde(flatten)]
    pub volume: VolumeView,
}

/// One entry of a top list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// Network name.
    pub network: crate::Network,
    /// The plan.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RecentPayment {
    /// Settlement key (`GET /settlements/{key}`).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub key: B256,
    /// `router` (`/authorize`) or `x402` (`/settle`).
    pub path: String,
    /// Network name.
    pub network: crate::Network,
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
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Hash32>))]
    pub tx_hash: Option<B256>,
    /// Unix seconds of its last change.
    pub at: u64,
}

/// Money the chain confirmed, by what paid it (amounts as decimal strings).
///
/// `gross` is the sum of the kinds. One-time payments (`/authorize` and x402 `/settle`) are
/// [`VolumeReport`]'s settled volume; the subscription kinds come from the Subscriptions
/// contract's logs (`SubscriptionRenewed`, `OverageCharged`) once the facilitator has indexed
/// them at its confirmation depth. A failed renewal or overage charge is never revenue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RevenueView {
    /// All of it: `oneTime + subscriptionFirstCycle + renewal + overage`.
    pub gross: String,
    /// One-time payments, gross of the facilitator's fee (`volume`'s `gross`).
    pub one_time: String,
    /// First cycles of new subscriptions, paid when subscribing.
    pub subscription_first_cycle: String,
    /// Later cycles collected by renewals.
    pub renewal: String,
    /// Metered overage charged on-chain.
    pub overage: String,
}

impl Default for RevenueView {
    fn default() -> Self {
        Self {
            gross: "0".into(),
            one_time: "0".into(),
            subscription_first_cycle: "0".into(),
            renewal: "0".into(),
            overage: "0".into(),
        }
    }
}

/// One bucket of the revenue series.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RevenuePoint {
    /// The bucket's start, unix seconds.
    pub start: u64,
    /// Its revenue.
    #[serde(flatten)]
    pub revenue: RevenueView,
}

/// What failed to pay in the range (never counted as revenue).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FailedRevenue {
    /// One-time payments that failed for good (`volume.failed`).
    pub payments: u64,
    /// Renewals that failed on-chain (`subscriptions.renewalFailed`).
    pub renewals: u64,
    /// Overage whose charge failed for good (`metered.unpaid`).
    pub overage: String,
}

impl Default for FailedRevenue {
    fn default() -> Self {
        Self {
            payments: 0,
            renewals: 0,
            overage: "0".into(),
        }
    }
}

/// Revenue by kind: one-time payments, subscription first cycles, renewals and overage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RevenueReport {
    /// Over the whole range (the hours it touches, as `volume`).
    pub total: RevenueView,
    /// Every bucket of the range, oldest first, empty ones included.
    pub series: Vec<RevenuePoint>,
    /// What failed to pay in the range.
    pub failed: FailedRevenue,
}

/// `GET /analytics`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Revenue by kind: gross volume, one-time and subscription money together.
    #[serde(default)]
    pub revenue: RevenueReport,
    /// Settled volume of one-time payments (`/authorize` and x402 `/settle`).
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
