//! One module per subcommand.

pub(crate) mod devnet;
pub(crate) mod facilitator;
