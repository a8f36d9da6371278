//! End-to-end tests of the `tollgate` binary.

mod dev;
mod devnet;
mod facilitator;
mod interop;
mod pay;
mod subscribe;
