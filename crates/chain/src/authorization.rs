//! EIP-712 typed data for the contracts' signed intents (placeholder).
