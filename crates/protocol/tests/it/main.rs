//! Integration tests of `tollgate-protocol`.

mod vectors;
