//! `GET /analytics`: the provider's report ([`crate::analytics`]).

use axum::{Json, extract::State};
use tollgate_protocol::api::analytics::{Report, ReportParams};

use crate::{
    api::{extract::ApiQuery, providers::Provider},
    error::Result,
    facilitator::Facilitator,
};

/// `GET /analytics`.
pub(super) async fn show(
    State(f): State<Facilitator>,
    ApiQuery(params): ApiQuery<ReportParams>,
    provider: Provider,
) -> Result<Json<Report>> {
    f.analytics(provider.address, &params).await.map(Json)
}
