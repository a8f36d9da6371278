//! The gate against the real pieces: the devnet, a real facilitator on loopback, and an axum app
//! gated by the layer.
#![allow(unreachable_pub, clippy::print_stderr)]

mod discovery;
mod metering;
mod mpp;
mod onetime;
mod peers;
mod pending;
// The PostgreSQL memo store's tests (`--features postgres`; on in workspace runs, where the
// gateway and the cli enable it).
#[cfg(feature = "postgres")]
mod store;
mod subscriptions;
mod support;
mod v2;
mod webhook;
mod x402;
