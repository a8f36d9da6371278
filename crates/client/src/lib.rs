#![doc = include_str!("../README.md")]
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod client;
pub mod discovery;
mod error;

pub use client::{
    Authorization, ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DISCOVERY_MIN_REFRESH,
    DEFAULT_DISCOVERY_TTL, DEFAULT_MAX_ANSWER, DEFAULT_TIMEOUT, FacilitatorClient, read_limited,
};
pub use discovery::Discovered;
pub use error::{Error, Result};
/// The wire types the calls take and give.
pub use tollgate_protocol as protocol;
