//! x402 wire types. V1, shaped as the coinbase `x402@1.2.0` package parses them
//! (`src/types/verify/x402Specs.ts`): the payment-required body and its `accepts` entries, the
//! `exact` EVM payment payload carried base64 in `X-PAYMENT`, the facilitator API
//! (`/verify`, `/settle`, `/supported`) and the `X-PAYMENT-RESPONSE` header.
//!
//! x402 V1 clients parse every `accepts` entry strictly and refuse the whole 402 if one entry
//! fails, so nothing optional is ever serialized as `null`: optional fields are left out. On
//! input, `null` is read as absent and unknown fields are ignored, as x402's schemas do.
//!
//! x402 V2 ([`v2`]) sits beside V1 and maps onto it, so both versions settle through one path.
//!
//! [`check_exact_evm`] holds the facilitator's stateless checks of an `exact` payment against its
//! requirements; the EIP-712 signature, balance and nonce checks need a chain and live elsewhere.

mod check;
mod facilitator;
mod payload;
mod pending;
mod reason;
mod requirements;
pub mod v2;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

pub use check::check_exact_evm;
pub use facilitator::{
    SettleRequest, SettleResponse, SettlementHeaderError, SettlementResponseHeader, SupportedKind,
    SupportedResponse, VerifyRequest, VerifyResponse,
};
pub use payload::{ExactEvmAuthorization, ExactEvmPayload, PayloadDecodeError, PaymentPayload};
pub use pending::{RetryToken, RetryTokenError, SettlementPending};
pub use reason::ErrorReason;
pub use requirements::{
    Eip712Extra, Incompatibility, PaymentRequiredResponse, PaymentRequirements,
};

/// The protocol version these types speak.
pub const X402_VERSION: u8 = 1;

/// The only scheme x402 V1 clients accept in `accepts` and pay.
pub const SCHEME_EXACT: &str = "exact";

/// Where an MCP tool call carries its x402 payment (`params._meta["x402/payment"]`, x402's MCP
/// transport, V1 and V2).
pub const MCP_PAYMENT_META: &str = "x402/payment";

/// Where a paid MCP tool result carries the settlement (`result._meta["x402/payment-response"]`).
pub const MCP_PAYMENT_RESPONSE_META: &str = "x402/payment-response";

/// Where an MCP tool call carries the retry token of a payment whose settlement is pending
/// (`params._meta["tollgate/payment-retry"]`, the MCP twin of [`crate::headers::X_PAYMENT_RETRY`]).
pub const MCP_PAYMENT_RETRY_META: &str = "tollgate/payment-retry";

/// The largest `X-PAYMENT` value [`PaymentPayload::decode_header`] reads (encoded). Larger than
/// a plain EOA payload (~700 bytes) by far, to leave room for ERC-6492 smart-wallet signatures.
pub const MAX_PAYLOAD_HEADER: usize = 16 * 1024;

/// An authorization must stay valid at least this many seconds past "now" to be accepted (the
/// coinbase V1 facilitator refuses `validBefore < now + 6`).
pub const VALID_BEFORE_SLACK_SECS: u64 = 6;

/// A JSON object, or absent: `null` reads as absent, anything else is an error.
fn object_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v)),
        Some(other) => Err(serde::de::Error::custom(format_args!(
            "expected a JSON object, found {other}"
        ))),
    }
}

/// Addresses go out EIP-55 checksummed (as viem's `getAddress` writes them; alloy's own serde
/// writes lowercase) and are read in any case.
pub(crate) mod checksummed {
    use alloy::primitives::Address;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(a: &Address, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&a.to_checksum(None))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Address, D::Error> {
        Address::deserialize(d)
    }
}

/// An optional address (`payer`), checksummed on output. On input `""` and `null` both read as
/// absent: the coinbase facilitator sends `payer: ""` when it has none.
mod checksummed_opt {
    use alloy::primitives::Address;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(a: &Option<Address>, s: S) -> Result<S::Ok, S::Error> {
        match a {
            Some(a) => super::checksummed::serialize(a, s),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Address>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) if s.is_empty() => Ok(None),
            Some(s) => s.parse().map(Some).map_err(serde::de::Error::custom),
        }
    }
}
