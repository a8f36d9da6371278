//! Integration tests of `tollgate-protocol`.

mod money_floats;
mod mpp;
mod properties;
mod vectors;
mod webhooks;
