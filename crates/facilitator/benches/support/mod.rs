//! What every facilitator bench starts with: its size, from the environment, and a runtime sized
//! for the bench machine.

use std::str::FromStr;

/// The whole number in the environment variable `var`, else `default`.
pub(crate) fn size<T: FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A multi-threaded runtime with two workers (the bench machine's two cores).
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
