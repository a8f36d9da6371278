//! x402 V1 wire types, shaped as the coinbase `x402@1.2.0` package parses them
//! (`src/types/verify/x402Specs.ts`): the payment-required body and its `accepts` entries, the
//! `exact` EVM payment payload carried base64 in `X-PAYMENT`, the facilitator API
//! (`/verify`, `/settle`, `/supported`) and the `X-PAYMENT-RESPONSE` header.
//!
//! x402 V1 clients parse every `accepts` entry strictly and refuse the whole 402 if one entry
//! fails, so nothing optional is ever serialized as `null`: optional fields are left out. On
//! input, `null` is read as absent and unknown fields are ignored, as x402's schemas do.
//!
//! [`check_exact_evm`] holds the facilitator's stateless checks of an `exact` payment against its
//! requirements; the EIP-712 signature, balance and nonce checks need a chain and live elsewhere.

use std::fmt;

use alloy::primitives::{Address, B256, Bytes, U256};
use base64::{
    Engine as _, alphabet,
    engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig, general_purpose::STANDARD},
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::{Amount, network};

/// The protocol version these types speak.
pub const X402_VERSION: u8 = 1;

/// The only scheme x402 V1 clients accept in `accepts` and pay.
pub const SCHEME_EXACT: &str = "exact";

/// The largest `X-PAYMENT` value [`PaymentPayload::decode_header`] reads (encoded). Larger than
/// a plain EOA payload (~700 bytes) by far, to leave room for ERC-6492 smart-wallet signatures.
pub const MAX_PAYLOAD_HEADER: usize = 16 * 1024;

/// An authorization must stay valid at least this many seconds past "now" to be accepted (the
/// coinbase V1 facilitator refuses `validBefore < now + 6`).
pub const VALID_BEFORE_SLACK_SECS: u64 = 6;

fn v1() -> u8 {
    X402_VERSION
}

// ---------------------------------------------------------------------------------------------
// Payment requirements and the 402 body
// ---------------------------------------------------------------------------------------------

/// One entry of `accepts`: what a resource costs and how to pay it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    /// `"exact"` for anything an x402 V1 client should pay.
    pub scheme: String,
    /// An x402 V1 network name (see [`crate::network`]).
    pub network: String,
    /// The price in the asset's smallest unit.
    pub max_amount_required: Amount,
    /// The absolute URL of the resource.
    pub resource: String,
    /// Human-readable description; may be empty, never absent.
    pub description: String,
    /// MIME type of the resource; may be empty, never absent.
    pub mime_type: String,
    /// The recipient of the payment.
    #[serde(with = "checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub pay_to: Address,
    /// How long the client's authorization should stay valid (its `validBefore` is
    /// `now + maxTimeoutSeconds`).
    pub max_timeout_seconds: u64,
    /// The token contract (its EIP-712 `verifyingContract`).
    #[serde(with = "checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub asset: Address,
    /// A JSON object describing the request and response, if any (x402-express puts
    /// `{input: {type: "http", method, discoverable}, output}` here).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "object_or_null"
    )]
    pub output_schema: Option<Value>,
    /// Scheme-specific extra data, a JSON object: for `exact` on EVM, the token's EIP-712 domain
    /// `{name, version}` (see [`Eip712Extra`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "object_or_null"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extra: Option<Value>,
}

/// The EIP-712 domain name and version of the asset, as `extra` carries them for `exact` on EVM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eip712Extra {
    /// Domain name (`"USD Coin"`).
    pub name: String,
    /// Domain version (`"2"`).
    pub version: String,
}

impl Eip712Extra {
    /// As the `extra` object.
    pub fn to_value(&self) -> Value {
        serde_json::json!({ "name": self.name, "version": self.version })
    }
}

impl PaymentRequirements {
    /// The EIP-712 `{name, version}` in `extra`, when both are strings there.
    pub fn eip712_extra(&self) -> Option<Eip712Extra> {
        let extra = self.extra.as_ref()?.as_object()?;
        Some(Eip712Extra {
            name: extra.get("name")?.as_str()?.to_owned(),
            version: extra.get("version")?.as_str()?.to_owned(),
        })
    }

    /// Whether a payload is meant for these requirements (same scheme and network), as
    /// x402-express's `findMatchingPaymentRequirements` pairs them.
    pub fn matches(&self, payload: &PaymentPayload) -> bool {
        self.scheme == payload.scheme && network::same_network(&self.network, &payload.network)
    }

    /// Checks what an x402 V1 client (`x402@1.2.0` `PaymentRequirementsSchema`) checks beyond
    /// what these types already guarantee, so that a gate can refuse at startup to send an entry
    /// that would make clients throw away the whole 402.
    pub fn check_x402_v1_compatible(&self) -> Result<(), Incompatibility> {
        if self.scheme != SCHEME_EXACT {
            return Err(Incompatibility::Scheme(self.scheme.clone()));
        }
        if !network::is_x402_v1_name(&self.network) {
            return Err(Incompatibility::Network(self.network.clone()));
        }
        if !is_absolute_url(&self.resource) {
            return Err(Incompatibility::Resource(self.resource.clone()));
        }
        for (field, v) in [
            ("outputSchema", &self.output_schema),
            ("extra", &self.extra),
        ] {
            if v.as_ref().is_some_and(|v| !v.is_object()) {
                return Err(Incompatibility::NotAnObject(field));
            }
        }
        // x402 V1 clients sign exactly `maxAmountRequired` and refuse a `value` of more than 18
        // digits in a payload.
        if self.max_amount_required.to_string().len() > MAX_VALUE_DIGITS {
            return Err(Incompatibility::AmountTooLarge(self.max_amount_required));
        }
        Ok(())
    }
}

/// The most digits x402 V1 accepts in `authorization.value` (`EvmMaxAtomicUnits`).
const MAX_VALUE_DIGITS: usize = 18;

/// Why x402 V1 clients would refuse a [`PaymentRequirements`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Incompatibility {
    /// A scheme other than `exact`.
    #[error("scheme {0:?} is not \"exact\"; x402 V1 clients refuse the whole 402")]
    Scheme(String),
    /// A network name x402 V1 does not know (including our `-mainnet` aliases).
    #[error("network {0:?} is not an x402 V1 network name")]
    Network(String),
    /// A resource that is not an absolute URL.
    #[error("resource {0:?} is not an absolute URL")]
    Resource(String),
    /// `outputSchema` or `extra` present but not a JSON object.
    #[error("{0} must be a JSON object")]
    NotAnObject(&'static str),
    /// A price with more digits than x402 V1 lets a client sign.
    #[error("maxAmountRequired {0} has more than 18 digits")]
    AmountTooLarge(Amount),
}

/// `scheme:rest` with an RFC 3986 scheme and something after it, as `new URL()` requires.
fn is_absolute_url(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !s.chars().any(char::is_whitespace)
}

fn object_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v)),
        Some(other) => Err(serde::de::Error::custom(format_args!(
            "expected a JSON object, found {other}"
        ))),
    }
}

/// The body of an x402 V1 `402 Payment Required` response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredResponse {
    /// `1`.
    pub x402_version: u8,
    /// The ways to pay.
    pub accepts: Vec<PaymentRequirements>,
    /// Why payment is required or why the previous attempt failed. A free string: x402-express
    /// sends messages (`"X-PAYMENT header is required"`) as well as [`ErrorReason`] codes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The payer of a refused payment, when known (x402-express sends it after a failed verify).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "checksummed_opt"
    )]
    pub payer: Option<Address>,
}

impl PaymentRequiredResponse {
    /// A V1 body.
    pub fn new(accepts: Vec<PaymentRequirements>, error: Option<String>) -> Self {
        Self {
            x402_version: X402_VERSION,
            accepts,
            error,
            payer: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Payment payload (X-PAYMENT)
// ---------------------------------------------------------------------------------------------

/// An x402 V1 payment: what a client sends, base64 JSON, in `X-PAYMENT`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayload {
    /// `1`.
    pub x402_version: u8,
    /// `"exact"`.
    pub scheme: String,
    /// The network name, copied by the client from the requirements it paid.
    pub network: String,
    /// The signed authorization.
    pub payload: ExactEvmPayload,
}

/// The `exact` scheme's EVM payload: an EIP-3009 `transferWithAuthorization` and its signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExactEvmPayload {
    /// 65-byte `r ‖ s ‖ v` for an EOA; longer for smart wallets (EIP-1271, ERC-6492 wrapped).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
    /// What was signed.
    pub authorization: ExactEvmAuthorization,
}

/// EIP-3009 `TransferWithAuthorization` fields, numbers as decimal strings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExactEvmAuthorization {
    /// The payer.
    #[serde(with = "checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub from: Address,
    /// The recipient; must equal the requirements' `payTo`.
    #[serde(with = "checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub to: Address,
    /// The amount, in the asset's smallest unit.
    pub value: Amount,
    /// Unix seconds; the transfer is valid strictly after (x402 clients send `now - 600`).
    pub valid_after: Amount,
    /// Unix seconds; the transfer is valid strictly before (`now + maxTimeoutSeconds`).
    pub valid_before: Amount,
    /// Random 32 bytes.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub nonce: B256,
}

/// Why an `X-PAYMENT` value is not an x402 V1 payment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadDecodeError {
    /// Longer than [`MAX_PAYLOAD_HEADER`].
    #[error("X-PAYMENT header of {0} bytes is too large (at most {MAX_PAYLOAD_HEADER})")]
    TooLarge(usize),
    /// Not base64.
    #[error("X-PAYMENT is not base64")]
    Base64(#[source] base64::DecodeError),
    /// Not JSON, or JSON of another shape.
    #[error("X-PAYMENT is not an x402 payment payload")]
    Json(#[source] serde_json::Error),
    /// No integer `x402Version`.
    #[error("X-PAYMENT has no x402Version")]
    MissingVersion,
    /// A version other than 1 (x402 V2 clients send 2).
    #[error("x402Version {0} is not supported; only x402 V1 is")]
    UnsupportedVersion(u64),
}

impl PayloadDecodeError {
    /// The x402 reason code to answer with.
    pub fn reason(&self) -> ErrorReason {
        match self {
            Self::MissingVersion | Self::UnsupportedVersion(_) => ErrorReason::InvalidX402Version,
            Self::TooLarge(_) | Self::Base64(_) | Self::Json(_) => ErrorReason::InvalidPayload,
        }
    }
}

/// Standard alphabet; padding optional on input (browsers' `atob` does not insist on it).
const LENIENT_STANDARD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

impl PaymentPayload {
    /// The `X-PAYMENT` form: base64 (standard alphabet, padded) of the JSON, as x402 clients
    /// send it.
    pub fn encode_header(&self) -> String {
        encode_json(self)
    }

    /// Parses an `X-PAYMENT` value. The version is checked before the shape, so an x402 V2
    /// payload is reported as [`PayloadDecodeError::UnsupportedVersion`] rather than as
    /// malformed.
    pub fn decode_header(header: &str) -> Result<Self, PayloadDecodeError> {
        if header.len() > MAX_PAYLOAD_HEADER {
            return Err(PayloadDecodeError::TooLarge(header.len()));
        }
        let bytes = LENIENT_STANDARD
            .decode(header.trim())
            .map_err(PayloadDecodeError::Base64)?;
        let value: Value = serde_json::from_slice(&bytes).map_err(PayloadDecodeError::Json)?;
        match value.get("x402Version").and_then(Value::as_u64) {
            None => return Err(PayloadDecodeError::MissingVersion),
            Some(1) => {}
            Some(v) => return Err(PayloadDecodeError::UnsupportedVersion(v)),
        }
        serde_json::from_value(value).map_err(PayloadDecodeError::Json)
    }
}

fn encode_json<T: Serialize>(v: &T) -> String {
    // These types hold only strings, integers, booleans and JSON values: serializing cannot fail.
    STANDARD.encode(serde_json::to_vec(v).expect("x402 messages serialize"))
}

// ---------------------------------------------------------------------------------------------
// Facilitator API
// ---------------------------------------------------------------------------------------------

/// The body of `POST /verify` (and of `POST /settle`: [`SettleRequest`]), as x402's
/// `useFacilitator` sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyRequest {
    /// The payload's version (x402 sends it; read as 1 when absent).
    #[serde(default = "v1")]
    pub x402_version: u8,
    /// The client's payment.
    pub payment_payload: PaymentPayload,
    /// The requirements it is meant to meet.
    pub payment_requirements: PaymentRequirements,
}

impl VerifyRequest {
    /// A V1 request.
    pub fn new(payment_payload: PaymentPayload, payment_requirements: PaymentRequirements) -> Self {
        Self {
            x402_version: payment_payload.x402_version,
            payment_payload,
            payment_requirements,
        }
    }
}

/// The body of `POST /settle`: the same as `/verify`'s.
pub type SettleRequest = VerifyRequest;

/// The answer of `POST /verify`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    /// Whether the payment would settle.
    pub is_valid: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<ErrorReason>,
    /// The payer (`authorization.from`); the coinbase facilitator sends it on both outcomes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "checksummed_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Address>))]
    pub payer: Option<Address>,
}

impl VerifyResponse {
    /// A valid payment by `payer`.
    pub fn valid(payer: Address) -> Self {
        Self {
            is_valid: true,
            invalid_reason: None,
            payer: Some(payer),
        }
    }

    /// A refused payment.
    pub fn invalid(reason: ErrorReason, payer: Option<Address>) -> Self {
        Self {
            is_valid: false,
            invalid_reason: Some(reason),
            payer,
        }
    }
}

/// The answer of `POST /settle`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// Whether the transfer is on chain.
    pub success: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<ErrorReason>,
    /// The payer.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "checksummed_opt"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Address>))]
    pub payer: Option<Address>,
    /// The transaction hash (`0x` + 64 hex); `""` when nothing was sent.
    pub transaction: String,
    /// The network name, copied from the payload.
    pub network: String,
}

impl SettleResponse {
    /// A settled payment.
    pub fn success(transaction: B256, network: impl Into<String>, payer: Address) -> Self {
        Self {
            success: true,
            error_reason: None,
            payer: Some(payer),
            transaction: transaction.to_string(),
            network: network.into(),
        }
    }

    /// A failed settlement; `transaction` is the reverted transaction, if one was sent.
    pub fn failure(
        reason: ErrorReason,
        network: impl Into<String>,
        payer: Option<Address>,
        transaction: Option<B256>,
    ) -> Self {
        Self {
            success: false,
            error_reason: Some(reason),
            payer,
            transaction: transaction.map(|t| t.to_string()).unwrap_or_default(),
            network: network.into(),
        }
    }

    /// The transaction hash, when `transaction` holds one.
    pub fn tx_hash(&self) -> Option<B256> {
        self.transaction.parse().ok()
    }
}

/// The answer of `GET /supported`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SupportedResponse {
    /// What the facilitator settles.
    pub kinds: Vec<SupportedKind>,
}

/// One (version, scheme, network) a facilitator settles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    /// `1`.
    pub x402_version: u8,
    /// `"exact"`.
    pub scheme: String,
    /// The network name.
    pub network: String,
    /// Scheme-specific data (a JSON object; Solana facilitators put `feePayer` here).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "object_or_null"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extra: Option<Value>,
}

impl SupportedKind {
    /// `exact` on `network`, V1.
    pub fn exact(network: impl Into<String>) -> Self {
        Self {
            x402_version: X402_VERSION,
            scheme: SCHEME_EXACT.to_owned(),
            network: network.into(),
            extra: None,
        }
    }
}

/// The `X-PAYMENT-RESPONSE` header of a paid response: base64 JSON of the settlement.
/// x402-express sends its whole [`SettleResponse`] here; unknown fields are ignored on input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettlementResponseHeader {
    /// `true` on a paid response.
    pub success: bool,
    /// The settlement transaction hash.
    pub transaction: String,
    /// The network name.
    pub network: String,
    /// The payer.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "checksummed_opt"
    )]
    pub payer: Option<Address>,
}

/// Why an `X-PAYMENT-RESPONSE` value could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettlementHeaderError {
    /// Longer than [`MAX_PAYLOAD_HEADER`].
    #[error("X-PAYMENT-RESPONSE header of {0} bytes is too large")]
    TooLarge(usize),
    /// Not base64.
    #[error("X-PAYMENT-RESPONSE is not base64")]
    Base64(#[source] base64::DecodeError),
    /// Not the settlement's JSON.
    #[error("X-PAYMENT-RESPONSE is not a settlement response")]
    Json(#[source] serde_json::Error),
}

impl SettlementResponseHeader {
    /// The header value.
    pub fn encode(&self) -> String {
        encode_json(self)
    }

    /// Reads a header value.
    pub fn decode(header: &str) -> Result<Self, SettlementHeaderError> {
        if header.len() > MAX_PAYLOAD_HEADER {
            return Err(SettlementHeaderError::TooLarge(header.len()));
        }
        let bytes = LENIENT_STANDARD
            .decode(header.trim())
            .map_err(SettlementHeaderError::Base64)?;
        serde_json::from_slice(&bytes).map_err(SettlementHeaderError::Json)
    }
}

impl From<&SettleResponse> for SettlementResponseHeader {
    fn from(r: &SettleResponse) -> Self {
        Self {
            success: r.success,
            transaction: r.transaction.clone(),
            network: r.network.clone(),
            payer: r.payer,
        }
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

// ---------------------------------------------------------------------------------------------
// Reason codes
// ---------------------------------------------------------------------------------------------

macro_rules! reasons {
    ($($(#[doc = $doc:literal])* $variant:ident = $wire:literal,)*) => {
        /// An x402 V1 facilitator reason code (`invalidReason` of `/verify`, `errorReason` of
        /// `/settle`), spelled as `ErrorReasons` in `x402@1.2.0`
        /// (`typescript/packages/x402/src/types/verify/x402Specs.ts`). A code this list does not
        /// know is kept verbatim in [`ErrorReason::Other`].
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorReason {
            $($(#[doc = $doc])* $variant,)*
            /// A code not in x402 V1's list, kept as received.
            Other(String),
        }

        impl ErrorReason {
            /// Every code x402 V1 lists, in its order.
            pub const KNOWN: &'static [&'static str] = &[$($wire,)*];

            /// The wire spelling.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $wire,)*
                    Self::Other(s) => s,
                }
            }

            /// From the wire spelling; unknown codes become [`ErrorReason::Other`].
            pub fn parse(s: &str) -> Self {
                match s {
                    $($wire => Self::$variant,)*
                    other => Self::Other(other.to_owned()),
                }
            }
        }
    };
}

reasons! {
    /// The payer's balance is below `maxAmountRequired`.
    InsufficientFunds = "insufficient_funds",
    /// `validAfter` is in the future.
    InvalidExactEvmPayloadAuthorizationValidAfter = "invalid_exact_evm_payload_authorization_valid_after",
    /// `validBefore` is past, or too close to now.
    InvalidExactEvmPayloadAuthorizationValidBefore = "invalid_exact_evm_payload_authorization_valid_before",
    /// `value` is below `maxAmountRequired`.
    InvalidExactEvmPayloadAuthorizationValue = "invalid_exact_evm_payload_authorization_value",
    /// The signature does not recover to `from`.
    InvalidExactEvmPayloadSignature = "invalid_exact_evm_payload_signature",
    /// A smart-wallet signature from an undeployed wallet without ERC-6492 deployment data.
    InvalidExactEvmPayloadUndeployedSmartWallet = "invalid_exact_evm_payload_undeployed_smart_wallet",
    /// `to` is not `payTo`.
    InvalidExactEvmPayloadRecipientMismatch = "invalid_exact_evm_payload_recipient_mismatch",
    /// Solana: the transaction is malformed.
    InvalidExactSvmPayloadTransaction = "invalid_exact_svm_payload_transaction",
    /// Solana: the amount differs from the requirements.
    InvalidExactSvmPayloadTransactionAmountMismatch = "invalid_exact_svm_payload_transaction_amount_mismatch",
    /// Solana: bad create-ATA instruction.
    InvalidExactSvmPayloadTransactionCreateAtaInstruction = "invalid_exact_svm_payload_transaction_create_ata_instruction",
    /// Solana: create-ATA for the wrong payee.
    InvalidExactSvmPayloadTransactionCreateAtaInstructionIncorrectPayee = "invalid_exact_svm_payload_transaction_create_ata_instruction_incorrect_payee",
    /// Solana: create-ATA for the wrong asset.
    InvalidExactSvmPayloadTransactionCreateAtaInstructionIncorrectAsset = "invalid_exact_svm_payload_transaction_create_ata_instruction_incorrect_asset",
    /// Solana: bad instructions.
    InvalidExactSvmPayloadTransactionInstructions = "invalid_exact_svm_payload_transaction_instructions",
    /// Solana: wrong number of instructions.
    InvalidExactSvmPayloadTransactionInstructionsLength = "invalid_exact_svm_payload_transaction_instructions_length",
    /// Solana: bad compute-limit instruction.
    InvalidExactSvmPayloadTransactionInstructionsComputeLimitInstruction = "invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction",
    /// Solana: bad compute-price instruction.
    InvalidExactSvmPayloadTransactionInstructionsComputePriceInstruction = "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction",
    /// Solana: compute price too high.
    InvalidExactSvmPayloadTransactionInstructionsComputePriceInstructionTooHigh = "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high",
    /// Solana: not an SPL `transferChecked`.
    InvalidExactSvmPayloadTransactionInstructionNotSplTokenTransferChecked = "invalid_exact_svm_payload_transaction_instruction_not_spl_token_transfer_checked",
    /// Solana: not a Token-2022 `transferChecked`.
    InvalidExactSvmPayloadTransactionInstructionNotToken2022TransferChecked = "invalid_exact_svm_payload_transaction_instruction_not_token_2022_transfer_checked",
    /// Solana: the fee payer appears in instruction accounts.
    InvalidExactSvmPayloadTransactionFeePayerIncludedInInstructionAccounts = "invalid_exact_svm_payload_transaction_fee_payer_included_in_instruction_accounts",
    /// Solana: the fee payer would transfer funds.
    InvalidExactSvmPayloadTransactionFeePayerTransferringFunds = "invalid_exact_svm_payload_transaction_fee_payer_transferring_funds",
    /// Solana: not a transfer instruction.
    InvalidExactSvmPayloadTransactionNotATransferInstruction = "invalid_exact_svm_payload_transaction_not_a_transfer_instruction",
    /// Solana: receiver token account missing.
    InvalidExactSvmPayloadTransactionReceiverAtaNotFound = "invalid_exact_svm_payload_transaction_receiver_ata_not_found",
    /// Solana: sender token account missing.
    InvalidExactSvmPayloadTransactionSenderAtaNotFound = "invalid_exact_svm_payload_transaction_sender_ata_not_found",
    /// Solana: simulation failed.
    InvalidExactSvmPayloadTransactionSimulationFailed = "invalid_exact_svm_payload_transaction_simulation_failed",
    /// Solana: transfer to the wrong token account.
    InvalidExactSvmPayloadTransactionTransferToIncorrectAta = "invalid_exact_svm_payload_transaction_transfer_to_incorrect_ata",
    /// Unknown or mismatched network.
    InvalidNetwork = "invalid_network",
    /// The payload is malformed.
    InvalidPayload = "invalid_payload",
    /// The requirements are malformed.
    InvalidPaymentRequirements = "invalid_payment_requirements",
    /// Scheme/network combination not handled.
    InvalidScheme = "invalid_scheme",
    /// The payment is invalid (generic).
    InvalidPayment = "invalid_payment",
    /// The payment expired.
    PaymentExpired = "payment_expired",
    /// A scheme other than `exact`.
    UnsupportedScheme = "unsupported_scheme",
    /// An `x402Version` other than 1.
    InvalidX402Version = "invalid_x402_version",
    /// The settlement transaction reverted.
    InvalidTransactionState = "invalid_transaction_state",
    /// Solana: block height exceeded before confirmation.
    SettleExactSvmBlockHeightExceeded = "settle_exact_svm_block_height_exceeded",
    /// Solana: confirmation timed out.
    SettleExactSvmTransactionConfirmationTimedOut = "settle_exact_svm_transaction_confirmation_timed_out",
    /// Settlement failed unexpectedly.
    UnexpectedSettleError = "unexpected_settle_error",
    /// Verification failed unexpectedly.
    UnexpectedVerifyError = "unexpected_verify_error",
    /// The same payment was already settled.
    DuplicateSettlement = "duplicate_settlement",
}

impl fmt::Display for ErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for ErrorReason {}

impl Serialize for ErrorReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Self::parse(&s))
    }
}

// ---------------------------------------------------------------------------------------------
// Stateless checks
// ---------------------------------------------------------------------------------------------

/// The checks of an `exact` EVM payment against its requirements that need no chain, in the
/// coinbase V1 facilitator's order (`src/schemes/exact/evm/facilitator.ts`), at unix time `now`:
///
/// - `x402Version` is 1 (`invalid_x402_version`);
/// - both schemes are `exact` (`unsupported_scheme`);
/// - the payload's network is the requirements' (`invalid_network`; `base-mainnet` and `base`
///   are one network). coinbase does not compare them; it signs with the payload's chain, so a
///   mismatch could only fail later and less clearly;
/// - `to == payTo` (`invalid_exact_evm_payload_recipient_mismatch`);
/// - `validBefore >= now + 6` (`invalid_exact_evm_payload_authorization_valid_before`);
/// - `validAfter <= now` (`invalid_exact_evm_payload_authorization_valid_after`);
/// - `value >= maxAmountRequired` (`invalid_exact_evm_payload_authorization_value`): coinbase
///   accepts paying more than asked for on EVM (its Solana path insists on equality); x402
///   clients always sign exactly `maxAmountRequired`; a zero `maxAmountRequired` is refused
///   (`invalid_payment_requirements`): it would settle nothing at the relayer's gas cost.
///
/// Left to the caller: the EIP-712 signature (`invalid_exact_evm_payload_signature`), the
/// balance (`insufficient_funds`), nonce reuse, and whether the network and asset are ones it
/// settles.
pub fn check_exact_evm(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    now: u64,
) -> Result<(), ErrorReason> {
    if payload.x402_version != X402_VERSION {
        return Err(ErrorReason::InvalidX402Version);
    }
    if payload.scheme != SCHEME_EXACT || requirements.scheme != SCHEME_EXACT {
        return Err(ErrorReason::UnsupportedScheme);
    }
    if !network::same_network(&payload.network, &requirements.network) {
        return Err(ErrorReason::InvalidNetwork);
    }
    let auth = &payload.payload.authorization;
    if auth.to != requirements.pay_to {
        return Err(ErrorReason::InvalidExactEvmPayloadRecipientMismatch);
    }
    let now_u = U256::from(now);
    if auth.valid_before.get() < now_u.saturating_add(U256::from(VALID_BEFORE_SLACK_SECS)) {
        return Err(ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore);
    }
    if auth.valid_after.get() > now_u {
        return Err(ErrorReason::InvalidExactEvmPayloadAuthorizationValidAfter);
    }
    if requirements.max_amount_required == Amount::ZERO {
        // A zero price settles nothing and would let anyone make the relayer pay gas for it.
        return Err(ErrorReason::InvalidPaymentRequirements);
    }
    if auth.value < requirements.max_amount_required {
        return Err(ErrorReason::InvalidExactEvmPayloadAuthorizationValue);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use alloy::primitives::address;
    use serde_json::json;

    use super::*;

    const NOW: u64 = 1_750_000_000;

    fn requirements() -> PaymentRequirements {
        PaymentRequirements {
            scheme: "exact".into(),
            network: "base-sepolia".into(),
            max_amount_required: Amount::from_units(10_000),
            resource: "https://api.example.com/weather".into(),
            description: String::new(),
            mime_type: String::new(),
            pay_to: address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            max_timeout_seconds: 60,
            asset: address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
            output_schema: None,
            extra: Some(
                Eip712Extra {
                    name: "USDC".into(),
                    version: "2".into(),
                }
                .to_value(),
            ),
        }
    }

    fn payload() -> PaymentPayload {
        PaymentPayload {
            x402_version: 1,
            scheme: "exact".into(),
            network: "base-sepolia".into(),
            payload: ExactEvmPayload {
                signature: Bytes::from(vec![0x11; 65]),
                authorization: ExactEvmAuthorization {
                    from: address!("0x857b06519E91e3A54538791bDbb0E22373e36b66"),
                    to: address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
                    value: Amount::from_units(10_000),
                    valid_after: Amount::from_units(NOW - 600),
                    valid_before: Amount::from_units(NOW + 60),
                    nonce: B256::repeat_byte(0xab),
                },
            },
        }
    }

    #[test]
    fn a_fresh_payment_passes() {
        assert_eq!(check_exact_evm(&payload(), &requirements(), NOW), Ok(()));
    }

    #[test]
    fn each_check_has_its_reason() {
        let r = requirements();
        type Mutation = fn(&mut PaymentPayload, &mut PaymentRequirements);
        let cases: Vec<(Mutation, ErrorReason)> = vec![
            (|p, _| p.x402_version = 2, ErrorReason::InvalidX402Version),
            (
                |p, _| p.scheme = "upto".into(),
                ErrorReason::UnsupportedScheme,
            ),
            (
                |_, r| r.scheme = "subscription".into(),
                ErrorReason::UnsupportedScheme,
            ),
            (
                |p, _| p.network = "base".into(),
                ErrorReason::InvalidNetwork,
            ),
            (
                |p, _| p.payload.authorization.to = Address::repeat_byte(9),
                ErrorReason::InvalidExactEvmPayloadRecipientMismatch,
            ),
            (
                |p, _| p.payload.authorization.valid_before = Amount::from_units(NOW + 5),
                ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore,
            ),
            (
                |p, _| p.payload.authorization.valid_after = Amount::from_units(NOW + 1),
                ErrorReason::InvalidExactEvmPayloadAuthorizationValidAfter,
            ),
            (
                |p, _| p.payload.authorization.value = Amount::from_units(9_999),
                ErrorReason::InvalidExactEvmPayloadAuthorizationValue,
            ),
        ];
        for (i, (mutate, reason)) in cases.into_iter().enumerate() {
            let (mut p, mut r) = (payload(), r.clone());
            mutate(&mut p, &mut r);
            assert_eq!(check_exact_evm(&p, &r, NOW), Err(reason), "case {i}");
        }
    }

    #[test]
    fn boundaries_follow_the_coinbase_facilitator() {
        let r = requirements();
        let mut p = payload();
        // validBefore == now + 6 is still fine; validAfter == now too.
        p.payload.authorization.valid_before = Amount::from_units(NOW + VALID_BEFORE_SLACK_SECS);
        p.payload.authorization.valid_after = Amount::from_units(NOW);
        assert_eq!(check_exact_evm(&p, &r, NOW), Ok(()));
        // Paying more than asked is accepted.
        p.payload.authorization.value = Amount::from_units(10_001);
        assert_eq!(check_exact_evm(&p, &r, NOW), Ok(()));
        // Aliases are one network.
        p.network = "base-mainnet".into();
        let mut r = r;
        r.network = "base".into();
        assert_eq!(check_exact_evm(&p, &r, NOW), Ok(()));
        // A huge validBefore does not overflow.
        p.payload.authorization.valid_before = Amount(U256::MAX);
        assert_eq!(check_exact_evm(&p, &r, u64::MAX), Ok(()));
    }

    #[test]
    fn reasons_round_trip_and_unknown_ones_survive() {
        for s in ErrorReason::KNOWN {
            let r = ErrorReason::parse(s);
            assert!(!matches!(r, ErrorReason::Other(_)), "{s}");
            assert_eq!(r.as_str(), *s);
            assert_eq!(serde_json::to_value(&r).unwrap(), json!(s));
            assert_eq!(serde_json::from_value::<ErrorReason>(json!(s)).unwrap(), r);
        }
        let other: ErrorReason = serde_json::from_value(json!("permit2_invalid_spender")).unwrap();
        assert_eq!(other, ErrorReason::Other("permit2_invalid_spender".into()));
        assert_eq!(
            serde_json::to_value(&other).unwrap(),
            json!("permit2_invalid_spender")
        );
        assert_eq!(
            ErrorReason::InvalidExactEvmPayloadRecipientMismatch.to_string(),
            "invalid_exact_evm_payload_recipient_mismatch"
        );
    }

    #[test]
    fn header_round_trip() {
        let p = payload();
        assert_eq!(
            PaymentPayload::decode_header(&p.encode_header()).unwrap(),
            p
        );
        // Unpadded input is accepted too.
        let unpadded = p.encode_header().trim_end_matches('=').to_owned();
        assert_eq!(PaymentPayload::decode_header(&unpadded).unwrap(), p);
    }

    #[test]
    fn header_errors_are_typed() {
        assert!(matches!(
            PaymentPayload::decode_header("***"),
            Err(PayloadDecodeError::Base64(_))
        ));
        assert!(matches!(
            PaymentPayload::decode_header("aGVsbG8="),
            Err(PayloadDecodeError::Json(_))
        ));
        let big = "A".repeat(MAX_PAYLOAD_HEADER + 1);
        assert!(matches!(
            PaymentPayload::decode_header(&big),
            Err(PayloadDecodeError::TooLarge(_))
        ));
        let enc = |v: Value| STANDARD.encode(v.to_string());
        // An x402 V2 payload has another shape; its version is what gets reported.
        let v2 = json!({"x402Version": 2, "accepted": {"scheme": "exact", "network": "eip155:84532"}, "payload": {}});
        let err = PaymentPayload::decode_header(&enc(v2)).unwrap_err();
        assert!(matches!(err, PayloadDecodeError::UnsupportedVersion(2)));
        assert_eq!(err.reason(), ErrorReason::InvalidX402Version);
        let none = json!({"scheme": "exact"});
        assert!(matches!(
            PaymentPayload::decode_header(&enc(none)),
            Err(PayloadDecodeError::MissingVersion)
        ));
        let mut bad = serde_json::to_value(payload()).unwrap();
        bad["payload"]["authorization"]["value"] = json!(10000);
        let err = PaymentPayload::decode_header(&enc(bad)).unwrap_err();
        assert!(matches!(err, PayloadDecodeError::Json(_)));
        assert_eq!(err.reason(), ErrorReason::InvalidPayload);
    }

    #[test]
    fn optional_fields_are_left_out_never_null() {
        let mut r = requirements();
        r.extra = None;
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("extra").is_none() && v.get("outputSchema").is_none());
        let body = serde_json::to_string(&PaymentRequiredResponse::new(vec![r], None)).unwrap();
        assert!(!body.contains("null"), "{body}");
        let resp =
            serde_json::to_string(&VerifyResponse::invalid(ErrorReason::InvalidPayload, None))
                .unwrap();
        assert_eq!(
            resp,
            r#"{"isValid":false,"invalidReason":"invalid_payload"}"#
        );
    }

    #[test]
    fn null_and_non_objects_on_input() {
        let mut v = serde_json::to_value(requirements()).unwrap();
        v["extra"] = Value::Null;
        v["outputSchema"] = Value::Null;
        let r: PaymentRequirements = serde_json::from_value(v.clone()).unwrap();
        assert_eq!((r.extra, r.output_schema), (None, None));
        v["extra"] = json!("USDC");
        assert!(serde_json::from_value::<PaymentRequirements>(v.clone()).is_err());
        v["extra"] = json!({"name": "USDC", "version": "2"});
        v["maxTimeoutSeconds"] = json!("60");
        assert!(
            serde_json::from_value::<PaymentRequirements>(v).is_err(),
            "a string where a number belongs"
        );
    }

    #[test]
    fn addresses_are_read_in_any_case_and_written_checksummed() {
        let mut v = serde_json::to_value(requirements()).unwrap();
        assert_eq!(v["payTo"], "0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
        v["payTo"] = json!("0x209693BC6AFC0C5328BA36FAF03C514EF312287C".to_lowercase());
        let r: PaymentRequirements = serde_json::from_value(v).unwrap();
        assert_eq!(r, requirements());
        let p = serde_json::to_value(VerifyResponse::valid(address!(
            "0x857b06519e91e3a54538791bdbb0e22373e36b66"
        )));
        assert_eq!(
            p.unwrap()["payer"],
            "0x857b06519E91e3A54538791bDbb0E22373e36b66"
        );
    }

    #[test]
    fn eip712_extra_helper() {
        let r = requirements();
        assert_eq!(
            r.eip712_extra(),
            Some(Eip712Extra {
                name: "USDC".into(),
                version: "2".into()
            })
        );
        let mut r2 = r;
        r2.extra = Some(json!({"name": "USDC"}));
        assert_eq!(r2.eip712_extra(), None);
    }

    #[test]
    fn compatibility_check() {
        let r = requirements();
        assert_eq!(r.check_x402_v1_compatible(), Ok(()));
        let with = |f: fn(&mut PaymentRequirements)| {
            let mut r = requirements();
            f(&mut r);
            r.check_x402_v1_compatible()
        };
        assert!(matches!(
            with(|r| r.scheme = "subscription".into()),
            Err(Incompatibility::Scheme(_))
        ));
        assert!(matches!(
            with(|r| r.network = "base-mainnet".into()),
            Err(Incompatibility::Network(_))
        ));
        assert!(matches!(
            with(|r| r.network = "devnet".into()),
            Err(Incompatibility::Network(_))
        ));
        assert!(matches!(
            with(|r| r.resource = "/weather".into()),
            Err(Incompatibility::Resource(_))
        ));
        assert!(matches!(
            with(|r| r.extra = Some(json!([1]))),
            Err(Incompatibility::NotAnObject("extra"))
        ));
        assert!(matches!(
            with(|r| r.max_amount_required = Amount::from_units(10_000_000_000_000_000_000)),
            Err(Incompatibility::AmountTooLarge(_))
        ));
        assert!(is_absolute_url("http://127.0.0.1:8080/x"));
        assert!(!is_absolute_url("1http://x"));
        assert!(!is_absolute_url("https://a b"));
    }

    #[test]
    fn payer_may_be_empty_on_input() {
        let v: VerifyResponse = serde_json::from_value(
            json!({"isValid": false, "invalidReason": "invalid_scheme", "payer": ""}),
        )
        .unwrap();
        assert_eq!(v.payer, None);
        let s: SettleResponse = serde_json::from_value(
            json!({"success": false, "errorReason": "invalid_scheme", "transaction": "", "network": "base", "payer": null}),
        )
        .unwrap();
        assert_eq!((s.payer, s.tx_hash()), (None, None));
    }

    #[test]
    fn settlement_header_round_trip() {
        let s = SettleResponse::success(
            B256::repeat_byte(0x5a),
            "base-sepolia",
            Address::repeat_byte(2),
        );
        let h = SettlementResponseHeader::from(&s);
        let back = SettlementResponseHeader::decode(&h.encode()).unwrap();
        assert_eq!(back, h);
        assert_eq!(s.tx_hash(), Some(B256::repeat_byte(0x5a)));
        assert!(matches!(
            SettlementResponseHeader::decode("%%"),
            Err(SettlementHeaderError::Base64(_))
        ));
    }
}
