//! The gateway against the real pieces: the devnet served over JSON-RPC, a real facilitator on
//! loopback that publishes the devnet's RPC URL, an upstream axum app, and the gateway in front
//! of it configured by TOML alone.
#![allow(unreachable_pub, clippy::print_stderr)]

mod mcp;
mod mcp_pending;
mod mcp_sessions;
mod plans;
mod support;
