//! JSON-RPC server (todo)
