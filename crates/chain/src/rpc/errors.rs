//! How a node's errors read as the chain layer's: reverts with their data decoded, refusals of a
//! transaction, unavailability, and the wording by which nodes say so.

use alloy::{
    primitives::Bytes,
    transports::{RpcError, TransportError, TransportErrorKind},
};
use serde_json::Value;

use crate::{Error, contracts::Revert};

/// Maps an alloy RPC error to the chain layer's error: transport failures are
/// [`Error::Unavailable`], JSON-RPC errors are reverts ([`Error::Revert`], with the revert data
/// decoded), refusals of a transaction ([`Error::Rejected`]) or anything else ([`Error::Rpc`]).
pub fn map_rpc_error(err: TransportError) -> Error {
    match err {
        RpcError::ErrorResp(payload) => {
            map_error_payload(payload.code, &payload.message, payload.data.as_deref())
        }
        RpcError::Transport(kind) => Error::Unavailable(transport_message(&kind)),
        RpcError::NullResp => Error::Unavailable("the node answered null".into()),
        RpcError::UnsupportedFeature(what) => Error::Unsupported(what),
        RpcError::DeserError { err, text } => Error::Unavailable(format!(
            "unexpected answer from the node ({err}): {}",
            truncate(&text, 200)
        )),
        e @ (RpcError::SerError(_) | RpcError::LocalUsageError(_)) => {
            Error::InvalidInput(e.to_string())
        }
    }
}

fn transport_message(kind: &TransportErrorKind) -> String {
    match kind {
        TransportErrorKind::Custom(e) => {
            // reqwest's errors keep the useful part (connection refused, ...) in their sources.
            let mut message = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                message.push_str(": ");
                message.push_str(&s.to_string());
                source = s.source();
            }
            message
        }
        other => other.to_string(),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A JSON-RPC error object as one of our errors.
fn map_error_payload(
    code: i64,
    message: &str,
    data: Option<&serde_json::value::RawValue>,
) -> Error {
    let lower = message.to_ascii_lowercase();
    let data = data.and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok());
    // geth and anvil: code 3 "execution reverted" with the revert bytes as `data` (nested in an
    // object by some nodes); others use -32000/-32015 with "revert" in the message.
    if code == 3 || lower.contains("revert") {
        let bytes = data.as_ref().and_then(revert_data).unwrap_or_default();
        return Error::Revert(Revert::decode(&bytes));
    }
    if is_rejection(&lower) {
        return Error::Rejected(message.to_owned());
    }
    Error::Rpc {
        code,
        message: message.to_owned(),
    }
}

/// The first hex string found in the error data (directly, or nested in objects and arrays).
fn revert_data(value: &Value) -> Option<Bytes> {
    match value {
        Value::String(s) if s.starts_with("0x") => s.parse().ok(),
        Value::Object(o) => o.values().find_map(revert_data),
        Value::Array(a) => a.iter().find_map(revert_data),
        _ => None,
    }
}

/// Node refusals of a transaction before execution (geth, reth, anvil, erigon wording).
fn is_rejection(lower: &str) -> bool {
    const REFUSALS: &[&str] = &[
        "nonce too low",
        "nonce too high",
        "nonce has already been used",
        "underpriced",
        "fee cap",
        "max fee per gas",
        "maxfeepergas",
        "base fee",
        "priority fee",
        "tip higher",
        "insufficient funds",
        "intrinsic gas",
        "gas limit",
        "chain id",
        "chainid",
        "invalid sender",
        "invalid signature",
        "already known",
        "already imported",
        "known transaction",
        "txpool is full",
        "transaction pool is full",
        "oversized",
    ];
    REFUSALS.iter().any(|r| lower.contains(r))
}

pub(super) fn is_nonce_too_low(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("nonce too low") || lower.contains("nonce has already been used")
}

pub(super) fn is_already_known(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("already known")
        || lower.contains("already imported")
        || lower.contains("known transaction")
}

pub(super) fn is_method_missing(code: i64, message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    code == -32601
        || code == -32004
        || lower.contains("method not found")
        || lower.contains("does not exist")
        || lower.contains("not supported")
        || lower.contains("unsupported")
        || lower.contains("not available")
}

#[cfg(test)]
mod tests {
    use alloy::{
        primitives::{Address, U256},
        sol_types::SolError,
    };

    use super::*;
    use crate::contracts::Token;

    fn payload(code: i64, message: &str, data: Option<&str>) -> TransportError {
        let mut object = serde_json::json!({ "code": code, "message": message });
        if let Some(d) = data {
            object["data"] = serde_json::from_str(d).unwrap();
        }
        RpcError::ErrorResp(serde_json::from_value(object).unwrap())
    }

    fn insufficient_funds_hex() -> String {
        let data = Token::InsufficientFunds {
            account: Address::repeat_byte(1),
            balance: U256::from(5),
            needed: U256::from(7),
        }
        .abi_encode();
        format!("\"{}\"", alloy::hex::encode_prefixed(data))
    }

    #[test]
    fn revert_with_data_decodes() {
        let hex = insufficient_funds_hex();
        let err = map_rpc_error(payload(
            3,
            "execution reverted: custom error 0x...",
            Some(&hex),
        ));
        assert!(
            matches!(err, Error::Revert(Revert::InsufficientFunds { balance, .. }) if balance == U256::from(5)),
            "{err:?}"
        );
    }

    #[test]
    fn nested_revert_data_decodes() {
        let nested = format!(
            "{{\"message\":\"reverted\",\"data\":{}}}",
            insufficient_funds_hex()
        );
        let err = map_rpc_error(payload(-32015, "VM execution error: revert", Some(&nested)));
        assert!(
            matches!(err, Error::Revert(Revert::InsufficientFunds { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn revert_without_data_is_unknown_empty() {
        let err = map_rpc_error(payload(-32000, "execution reverted", None));
        assert!(
            matches!(err, Error::Revert(Revert::Unknown(ref d)) if d.is_empty()),
            "{err:?}"
        );
    }

    #[test]
    fn refusals_and_other_errors() {
        assert!(matches!(
            map_rpc_error(payload(-32000, "nonce too low", None)),
            Error::Rejected(_)
        ));
        assert!(matches!(
            map_rpc_error(payload(-32000, "replacement transaction underpriced", None)),
            Error::Rejected(_)
        ));
        assert!(matches!(
            map_rpc_error(payload(-32601, "Method not found", None)),
            Error::Rpc { code: -32601, .. }
        ));
        assert!(matches!(
            map_rpc_error(RpcError::NullResp),
            Error::Unavailable(_)
        ));
        assert!(is_method_missing(-32601, "Method not found"));
        assert!(is_nonce_too_low("Nonce too low"));
        assert!(is_already_known("already known"));
    }
}
