//! The Tollgate facilitator as a library: an axum service that settles client-signed stablecoin
//! transfers on EVM chains and issues signed payment proofs (the spec's `POST /authorize`), and
//! serves the x402 V1 facilitator API (`/verify`, `/settle`, `/supported`) so that x402 resource
//! servers we did not write can use it unchanged.
//!
//! Entry points: [`start::build`] from a [`config::Config`] (or [`Facilitator::new`] from parts), then [`router`] for tests
//! (`ServiceExt::oneshot`) or [`serve`] on a listener.
//!
//! Layout: the HTTP surface (the routes, each declared once with its OpenAPI operation, the
//! handlers and the mapping between the wire and the domain, the one `IntoResponse` of errors)
//! is in a private `api` module; the domain is one service per area, reached from the
//! [`Facilitator`] handle ([`Settlements`], [`X402`], [`Subscriptions`] with metering and the
//! keeper, [`Plans`] with providers, [`Webhooks`], [`Analytics`]), which return [`error::Error`]
//! and know nothing of HTTP; [`metrics`] and [`dashboard`] are the operations side.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod analytics;
mod api;
mod batch;
pub mod check;
pub mod config;
pub mod error;
mod facilitator;
pub mod fault;
pub mod funds;
pub mod keeper;
pub mod metering;
pub mod openapi;
mod ops;
mod plans;
mod providers;
pub mod replica;
mod settle;
mod simulate;
pub mod start;
pub use tollgate_store as store;
mod subscriptions;
mod view;
pub mod webhooks;
mod x402;
mod x402_v2;

pub use analytics::Analytics;
pub use api::{DEFAULT_MAX_BODY, router, serve};
pub use facilitator::{BuildError, Facilitator, NetworkSpec, Settings};
pub use keeper::{KeeperHandle, KeeperReport};
pub use metering::MeteringReport;
pub use ops::{dashboard, metrics};
pub use plans::Plans;
pub use settle::{Outcome, Settlements, settlement_key};
pub use subscriptions::Subscriptions;
pub use webhooks::{DeliveryReport, WebhookHandle, Webhooks};
pub use x402::X402;
