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
    // A rate limit answered as a JSON-RPC error (Alchemy: code 429; Infura: -32005 "request
    // rate limited"; -32005 alone also means a log query too large, not a rate limit): the node
    // is there but will not answer now.
    if code == 429 || is_rate_limit(&lower) {
        return Error::Unavailable(format!("the node is rate limiting: {message}"));
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

fn is_rate_limit(lower: &str) -> bool {
    [
        "rate limit",
        "rate exceeded",
        "request rate",
        "too many requests",
        "exceeded its compute units",
    ]
    .iter()
    .any(|r| lower.contains(r))
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
    fn rate_limits_in_json_rpc_errors_are_unavailability() {
        for (code, message) in [
            (
                429,
                "Your app has exceeded its compute units per second capacity.",
            ),
            (-32005, "daily request count exceeded, request rate limited"),
            (-32000, "Too Many Requests"),
        ] {
            let err = map_rpc_error(payload(code, message, None));
            assert!(
                matches!(err, Error::Unavailable(_)),
                "{code} {message}: {err:?}"
            );
        }
        // -32005 also names a log query too large: that is the query's error, not a pause.
        let err = map_rpc_error(payload(
            -32005,
            "query returned more than 10000 results",
            None,
        ));
        assert!(matches!(err, Error::Rpc { code: -32005, .. }), "{err:?}");
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
