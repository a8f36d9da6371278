//! Provider self-registration: `POST /providers/challenge`, `POST /providers/register`, and
//! `POST /providers/keys/revoke` (with the key to revoke as the Bearer token).

use alloy::primitives::{Address, Bytes};
use serde::{Deserialize, Serialize};

/// The prefix of every provider API key (`tg_` and 64 hex digits).
pub const API_KEY_PREFIX: &str = "tg_";

/// The body of `POST /providers/challenge`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ChallengeRequest {
    /// The wallet registering.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub address: Address,
}

/// The answer of `POST /providers/challenge`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ChallengeResponse {
    /// The text to sign (EIP-191 `personal_sign`): it names the facilitator, the address, a
    /// nonce and the expiry.
    pub challenge: String,
    /// Unix seconds.
    pub expires_at: u64,
}

/// The body of `POST /providers/register`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// The wallet registering.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub address: Address,
    /// The challenge text, as issued.
    pub challenge: String,
    /// The 65-byte `personal_sign` signature (`r ‖ s ‖ v`), 0x-hex.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
}

/// The answer of `POST /providers/register` (201): the API key, shown this once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegisterResponse {
    /// `tg_` and 64 hex digits; the facilitator keeps only its hash.
    pub api_key: String,
    /// The provider the key acts for.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub provider: Address,
}

/// The answer of `POST /providers/keys/revoke`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokeResponse {
    /// The provider whose key it was.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub provider: Address,
    /// Whether this call revoked it (`false`: it was revoked already).
    pub revoked: bool,
}
