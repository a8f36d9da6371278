//! End-to-end tests of the `tollgate` binary.

mod book;
mod conformance;
mod crash;
mod dashboard;
mod deploy;
mod dev;
mod devnet;
mod examples;
mod facilitator;
mod gateway_paths;
mod golive;
mod interop;
mod pay;
mod peers;
mod readme;
mod secrets;
mod subscribe;
mod subscription;
mod walkthrough;
