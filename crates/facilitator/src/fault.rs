//! Failpoints: the labelled steps of every flow that moves money or promises a delivery, where a
//! test can make the process die on the spot, to show that a restart on the same store and chain
//! finishes the work exactly once (`crates/cli/tests/it/crash.rs` kills `tollgate facilitator`
//! at each of [`FAILPOINTS`]).
//!
//! Compiled in only with the `failpoints` feature, which the test builds enable and release
//! builds do not; without it [`arm`] refuses and every step costs nothing. The binary arms one
//! step from `TOLLGATE_FAILPOINT`; the process then aborts (no unwinding, no flushing: a crash)
//! the first time that step is reached.

/// Every failpoint, in the order a flow reaches them.
pub const FAILPOINTS: &[&str] = &[
    // POST /authorize.
    "authorize.after-insert",
    "authorize.after-broadcast",
    "authorize.after-receipt",
    "authorize.after-confirm",
    // x402 POST /settle.
    "settle.after-insert",
    "settle.after-broadcast",
    "settle.after-confirm",
    // POST /subscriptions.
    "subscribe.after-broadcast",
    "subscribe.after-receipt",
    // The keeper's renewals.
    "renew.after-broadcast",
    "renew.after-receipt",
    // POST /subscriptions/{id}/usage.
    "deduct.after-commit",
    // The on-chain charge of metered usage.
    "charge.after-begin",
    "charge.after-receipt",
    // Webhook delivery: the receiver has the events, their outcomes are not recorded yet.
    "webhook.after-send",
];

/// [`arm`] could not arm a failpoint.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultError {
    /// This build has no failpoints (the `failpoints` feature is off, as in release builds).
    #[error("this build has no failpoints (built without the `failpoints` feature)")]
    NotCompiled,
    /// No failpoint has this name.
    #[error("no failpoint is named {0:?}; the failpoints are: {list}", list = FAILPOINTS.join(", "))]
    Unknown(String),
    /// Another failpoint is armed already.
    #[error("failpoint {0:?} is armed already")]
    AlreadyArmed(&'static str),
}

#[cfg(feature = "failpoints")]
static ARMED: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Arms the failpoint `name` for the rest of the process: the process aborts the first time the
/// step is reached.
pub fn arm(name: &str) -> Result<(), FaultError> {
    let name = *FAILPOINTS
        .iter()
        .find(|&&f| f == name)
        .ok_or_else(|| FaultError::Unknown(name.to_owned()))?;
    #[cfg(feature = "failpoints")]
    {
        ARMED
            .set(name)
            .map_err(|_| FaultError::AlreadyArmed(ARMED.get().copied().unwrap_or_default()))
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        Err(FaultError::NotCompiled)
    }
}

/// The step `name` is reached: aborts the process if it is the armed failpoint.
#[inline]
pub(crate) fn hit(name: &'static str) {
    debug_assert!(FAILPOINTS.contains(&name), "unlisted failpoint {name}");
    #[cfg(feature = "failpoints")]
    if ARMED.get() == Some(&name) {
        tracing::error!(failpoint = name, "failpoint reached: aborting the process");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(matches!(arm("no.such-step"), Err(FaultError::Unknown(_))));
        let unique: std::collections::HashSet<_> = FAILPOINTS.iter().collect();
        assert_eq!(unique.len(), FAILPOINTS.len());
    }
}
