//! rpc backend
