//! The gate against the real pieces: the devnet, a real facilitator on loopback, and an axum app
//! gated by the layer.
#![allow(unreachable_pub, clippy::print_stderr)]

mod metering;
mod onetime;
mod store;
mod subscriptions;
mod support;
mod webhook;
mod x402;
