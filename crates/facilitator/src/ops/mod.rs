//! The operations side, beside the API: the Prometheus metrics ([`metrics`]) and the providers'
//! server-rendered dashboard ([`dashboard`]).

pub mod dashboard;
pub mod metrics;
