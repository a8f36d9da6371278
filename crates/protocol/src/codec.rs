//! The base64 JSON form of header values (`X-PAYMENT`, `X-PAYMENT-RESPONSE`): one encoder and
//! one decoder, which refuses a value over its size limit before decoding anything.

use base64::{
    Engine as _, alphabet,
    engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig, general_purpose::STANDARD},
};
use serde::{Serialize, de::DeserializeOwned};

/// Standard alphabet; padding optional on input (browsers' `atob` does not insist on it).
const LENIENT_STANDARD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Base64 (standard alphabet, padded) of `value`'s JSON, as x402 clients send it.
pub(crate) fn encode<T: Serialize>(value: &T) -> String {
    // The wire types hold only strings, integers, booleans and JSON values: serializing cannot
    // fail.
    STANDARD.encode(serde_json::to_vec(value).expect("wire messages serialize"))
}

/// Why a header value is not base64 JSON of the type asked for.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// The value's length, over the limit.
    TooLarge(usize),
    /// Not base64.
    Base64(base64::DecodeError),
    /// Not JSON, or JSON of another shape.
    Json(serde_json::Error),
}

/// Reads `value` as base64 (standard alphabet, padding optional, surrounding white space
/// ignored) of `T`'s JSON. A value longer than `max` (measured as given) is refused before it is
/// decoded.
pub(crate) fn decode<T: DeserializeOwned>(value: &str, max: usize) -> Result<T, DecodeError> {
    if value.len() > max {
        return Err(DecodeError::TooLarge(value.len()));
    }
    let bytes = LENIENT_STANDARD
        .decode(value.trim())
        .map_err(DecodeError::Base64)?;
    serde_json::from_slice(&bytes).map_err(DecodeError::Json)
}
