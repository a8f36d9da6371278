//! The `POST /authorize` body (`AuthorizeRequest` with its `signedPayment`) and a bare
//! `SignedPayment`, through serde_json as the facilitator's JSON extractor reads them.
//!
//! Invariants: no panic; whatever parses serializes and parses back to the same value (amounts
//! canonicalize, addresses checksum: the values are equal, not the bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::{Serialize, de::DeserializeOwned};
use tollgate_protocol::{AuthorizeRequest, SignedPayment};

fuzz_target!(|data: &[u8]| {
    round_trip::<AuthorizeRequest>(data);
    round_trip::<SignedPayment>(data);
});

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<T>(data) else {
        return;
    };
    let json = serde_json::to_vec(&value).expect("serializes");
    let again: T = serde_json::from_slice(&json).expect("its own JSON parses");
    assert_eq!(again, value);
}
