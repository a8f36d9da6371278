//! The Tollgate SDKs for Node.js: a Node-API addon (napi-rs) over the same Rust crates the Rust
//! SDKs are, so the JavaScript package has no second implementation of anything that decides,
//! signs or settles a payment.
//!
//! This crate is the native half: [`gate::NativeGate`] (the provider side: the `paymentGate`
//! layer's whole decision about a request, `buildPaymentRequired`, `verifyPaymentProof`,
//! `deductAllowance`), [`agent::NativeAgent`] (`agent.pay()`, `agent.subscribe()`) and the free
//! functions [`proof::parse_payment_proof`] and [`proof::verify_payment_proof`]. The JavaScript
//! half (`index.js`, `hono.js` beside this crate) wraps them into the spec's shapes: Express and
//! Hono middleware, a fetch `Response`, and errors whose `name` is the spec's error name.
//!
//! Errors cross the boundary as `Error`s whose message starts with `"<Name>: "`; the JavaScript
//! half moves the name into `error.name`.

pub mod agent;
mod error;
pub mod gate;
pub mod proof;

use alloy::primitives::{Address, B256};
use tollgate_protocol::Amount;

use crate::error::named;

/// The tokens' decimals (USDC and the devnet's token: 6).
pub(crate) const DECIMALS: u8 = 6;

/// An amount in the people's notation (`"0.50"`, `"units:500000"`).
pub(crate) fn amount(what: &str, s: &str) -> napi::Result<Amount> {
    Amount::parse_notation(s, DECIMALS)
        .map_err(|e| named("InvalidArgument", format!("{what}: {e}")))
}

/// A `0x` address.
pub(crate) fn address(what: &str, s: &str) -> napi::Result<Address> {
    s.parse().map_err(|_| {
        named(
            "InvalidArgument",
            format!("{what}: {s:?} is not a 0x address"),
        )
    })
}

/// A `0x` 32-byte id (plan, subscription).
pub(crate) fn id(what: &str, s: &str) -> napi::Result<B256> {
    s.parse().map_err(|_| {
        named(
            "InvalidArgument",
            format!("{what}: {s:?} is not a 0x-prefixed 32-byte hex id"),
        )
    })
}
