//! The Tollgate facilitator as a library: an axum service that settles client-signed stablecoin
//! transfers on EVM chains and issues signed payment proofs (the spec's `POST /authorize`), and
//! serves the x402 V1 facilitator API (`/verify`, `/settle`, `/supported`) so that x402 resource
//! servers we did not write can use it unchanged.
//!
//! Entry points: [`start::build`] from a [`config::Config`] (or [`Facilitator::new`] from parts), then [`router`] for tests
//! (`ServiceExt::oneshot`) or [`serve`] on a listener.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod analytics;
pub mod config;
pub mod dashboard;
pub mod error;
mod facilitator;
pub mod fault;
mod http;
pub mod keeper;
pub mod metering;
pub mod metrics;
pub mod openapi;
mod plans;
mod providers;
mod settle;
pub mod start;
pub use tollgate_store as store;
mod subscriptions;
pub mod webhooks;
mod x402;

pub use facilitator::{BuildError, Facilitator, NetworkSpec, Settings};
pub use http::{DEFAULT_MAX_BODY, router, serve};
pub use keeper::{KeeperHandle, KeeperReport};
pub use metering::MeteringReport;
pub use settle::{Outcome, settlement_key};
pub use webhooks::{DeliveryReport, WebhookHandle};
