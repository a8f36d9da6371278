//! The facilitator over real HTTP, against the devnet and against anvil.
#![allow(unreachable_pub, clippy::print_stderr)]

mod analytics;
mod authorize;
mod chain_faults;
mod check;
mod config;
mod edges;
mod http_errors;
mod keeper;
mod lifecycle;
mod metering;
mod metrics_names;
mod properties;
mod providers;
mod relays;
mod renewals;
mod replicas;
mod store;
mod subscriptions;
mod support;
mod usdc;
mod webhooks;
mod x402;
mod x402_v2;
