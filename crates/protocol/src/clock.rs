//! The one wall-clock read the Tollgate crates share (a read, not I/O: no codec depends on it).

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch by the system clock (0 if the clock is before it).
///
/// ```
/// assert!(tollgate_protocol::unix_now() > 1_700_000_000);
/// ```
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
