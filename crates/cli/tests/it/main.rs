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
mod mpp;
mod pay;
mod pay_mpp;
mod peers;
mod readme;
mod secrets;
mod subscribe;
mod subscription;
mod walkthrough;

/// A free loopback port (for a listener that must be named before it starts, or come back at the
/// same address after a restart).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
