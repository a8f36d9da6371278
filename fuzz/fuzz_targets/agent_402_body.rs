//! A 402 body as the agent reads it (`terms::parse`, through the doc-hidden
//! `tollgate_agent::__fuzz::parse_402`): the Tollgate superset body or a generic x402 V1 one, up
//! to the agent's default limit of 64 KiB (`DEFAULT_MAX_402_BODY`).
//!
//! Invariants: no panic; never more readable offers than listed entries; a body that is not a
//! JSON object is refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_agent::{__fuzz::parse_402, DEFAULT_MAX_402_BODY};

fuzz_target!(|data: &[u8]| {
    if data.len() > DEFAULT_MAX_402_BODY {
        return;
    }
    let Some((offered, readable)) = parse_402(data) else {
        return;
    };
    assert!(
        readable <= offered,
        "{readable} offers read from {offered} entries"
    );
    assert!(matches!(
        serde_json::from_slice::<serde_json::Value>(data),
        Ok(serde_json::Value::Object(_))
    ));
});
