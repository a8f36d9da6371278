//! `GET /analytics`: the provider's report ([`crate::analytics`]).

use axum::{Json, extract::State};
use tollgate_protocol::api::analytics::{Report, ReportParams};

use crate::{
    api::{Routes, extract::ApiQuery, providers::Provider},
    error::Result,
    facilitator::Facilitator,
    openapi::builder::op,
};

/// The routes of the provider's report, each with its OpenAPI operation.
pub(super) fn routes(r: &mut Routes) {
    r.get("/analytics", show, op("analytics", "analytics", "The provider's report over `[from, to)`.")
        .description("Revenue by kind (gross = one-time + subscription first cycles + renewals + overage, per bucket and in total, failures apart), settled one-time volume (total, per bucket, top resources, networks and payers), subscriptions (by state, lifecycle counts, recurring revenue per 30 days, per plan), metered usage, webhook delivery health and the latest payments. Volume comes from hourly rollups (payers: daily). Amounts are decimal strings in the token's smallest unit.")
        .secured()
        .query::<ReportParams>()
        .ok::<Report>(200, "The report.")
        .errors(&[503]));
}

/// `GET /analytics`.
pub(super) async fn show(
    State(f): State<Facilitator>,
    ApiQuery(params): ApiQuery<ReportParams>,
    provider: Provider,
) -> Result<Json<Report>> {
    f.analytics()
        .report(provider.address, &params)
        .await
        .map(Json)
}
