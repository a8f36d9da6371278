//! Integration tests of the embedded devnet: its journal and time travel, and its JSON-RPC server.

mod devnet;
mod server;
