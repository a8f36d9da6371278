//! Integration tests of `tollgate-protocol`.

mod money_floats;
mod properties;
mod vectors;
mod webhooks;
