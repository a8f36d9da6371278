//! The agent against the real pieces: the devnet, a real facilitator and an axum app gated by
//! `tollgate-gate` on loopback, plus hand-written hostile servers.
#![allow(unreachable_pub, clippy::print_stderr)]

mod chain_clock;
mod held;
mod hostile;
mod mpp;
mod pay;
mod pay_once;
mod pay_subscription;
mod pending;
mod provider_loop;
mod raise;
mod subscribe;
mod support;
