//! End-to-end tests of the `tollgate` binary.

mod devnet;
mod facilitator;
mod interop;
