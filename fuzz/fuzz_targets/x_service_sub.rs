//! `X-SERVICE-SUB`: the gate's `parse_subscription_id`.
//!
//! Invariants: no panic; an accepted value is `0x`/`0X` and exactly 64 hex digits (surrounding
//! whitespace aside) and names the id it decodes to; the id's own text parses back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_gate::parse_subscription_id;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(id) = parse_subscription_id(value) else {
        return;
    };
    let v = value.trim();
    assert_eq!(v.len(), 66);
    assert!(v.starts_with("0x") || v.starts_with("0X"));
    let text = id.to_string();
    assert_eq!(text, format!("0x{}", v[2..].to_ascii_lowercase()));
    assert_eq!(
        parse_subscription_id(&text).expect("canonical form parses"),
        id
    );
});
