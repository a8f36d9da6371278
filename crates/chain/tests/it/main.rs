//! Integration tests of the chain layer against real nodes (anvil, the devnet's JSON-RPC server).

mod contracts;
mod properties;
mod rpc;
mod subscriptions;
