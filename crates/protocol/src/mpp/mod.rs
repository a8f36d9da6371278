//! MPP, the Machine Payments Protocol: the `Payment` HTTP authentication scheme
//! (draft-ryan-httpauth-payment-01, paymentauth.org) with its EVM `charge` intent paid by an
//! ERC-3009 `authorization` credential, shaped exactly as the `mppx@0.11.0` package writes and
//! reads it.
//!
//! - A 402 carries one or more `WWW-Authenticate: Payment id="…", realm="…", method="evm",
//!   intent="charge", request="…", expires="…"` challenges ([`Challenge`]). `request` is
//!   base64url (no padding) of the JCS form of a [`ChargeRequest`]; `id` is an HMAC-SHA256 of
//!   the challenge's fields under the server's [`ChallengeKey`], so the server keeps no state.
//! - The client pays with `Authorization: Payment <base64url JSON>` ([`Credential`]): the
//!   challenge echoed, an EIP-3009 `TransferWithAuthorization` signature
//!   ([`AuthorizationPayload`], nonce [`Challenge::authorization_nonce`]) and a `did:pkh`
//!   source.
//! - A paid response carries `Payment-Receipt` ([`Receipt`]); a refused one an RFC 9457
//!   `application/problem+json` body ([`Problem`], [`ProblemType`]).
//!
//! Everything here is free of I/O and of the clock: times are passed in.

mod challenge;
mod credential;
mod error;
mod jcs;
mod params;
mod problem;
mod receipt;
mod request;
mod time;

pub use challenge::{Challenge, ChallengeKey};
pub use credential::{AuthorizationPayload, Credential};
pub use error::MppError;
pub use problem::{PROBLEM_CONTENT_TYPE, Problem, ProblemType};
pub use receipt::Receipt;
pub use request::{ChargeRequest, EvmMethodDetails, Opaque};
pub use time::{parse_rfc3339, rfc3339_millis};

/// The authentication scheme's name, in `WWW-Authenticate` and `Authorization` (matched
/// case-insensitively on input).
pub const SCHEME: &str = "Payment";

/// The payment method of EVM challenges (`method="evm"`).
pub const METHOD_EVM: &str = "evm";

/// The intent of a one-time payment (`intent="charge"`).
pub const INTENT_CHARGE: &str = "charge";

/// The EVM charge's one credential type in `mppx@0.11.0`: an ERC-3009
/// `transferWithAuthorization` signature (`methodDetails.credentialTypes`, the payload's `type`).
pub const CREDENTIAL_AUTHORIZATION: &str = "authorization";

/// The common prefix of the problem type URIs ([`ProblemType::uri`]).
pub const PROBLEM_BASE: &str = "https://paymentauth.org/problems/";

/// The longest `request` auth-param a challenge may carry (mppx refuses longer ones).
pub const MAX_REQUEST_LEN: usize = 16 * 1024;

/// The longest credential token [`Credential::decode`] reads (base64url as sent): room for a
/// [`MAX_REQUEST_LEN`] request echoed inside it and a smart-wallet signature.
pub const MAX_CREDENTIAL_LEN: usize = 64 * 1024;

/// Base64url without padding, as every MPP value is written.
fn b64url(bytes: impl AsRef<[u8]>) -> String {
    use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Reads base64 as ox's `Base64.toString` does: either alphabet (`-_` or `+/`), padding
/// optional, surrounding white space ignored.
fn b64_lenient(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::{
        Engine as _, alphabet,
        engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig},
    };
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let std: String = s
        .trim()
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    LENIENT.decode(std)
}

/// `^0x[0-9a-fA-F]{n}$` (mppx's address and hash patterns), as bytes.
fn strict_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let hex = s.strip_prefix("0x")?;
    if hex.len() != 2 * N || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Serde for the strict wire forms: EIP-55 addresses out, `0x` and exactly 40 / 64 hex digits
/// in (any case), and decimal-string `uint256`s.
mod wire {
    use alloy::primitives::{Address, B256, U256};
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    use crate::Amount;

    pub(super) mod address {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(a: &Address, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&a.to_checksum(None))
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Address, D::Error> {
            let s = String::deserialize(d)?;
            super::super::strict_hex::<20>(&s)
                .map(Address::from)
                .ok_or_else(|| D::Error::custom(format_args!("{s:?} is not 0x and 40 hex digits")))
        }
    }

    pub(super) mod b256 {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(v: &B256, s: S) -> Result<S::Ok, S::Error> {
            s.collect_str(v)
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<B256, D::Error> {
            let s = String::deserialize(d)?;
            super::super::strict_hex::<32>(&s)
                .map(B256::from)
                .ok_or_else(|| D::Error::custom(format_args!("{s:?} is not 0x and 64 hex digits")))
        }
    }

    pub(super) mod decimal {
        use serde::Serialize as _;

        use super::*;

        pub(crate) fn serialize<S: Serializer>(v: &U256, s: S) -> Result<S::Ok, S::Error> {
            Amount(*v).serialize(s)
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<U256, D::Error> {
            Amount::deserialize(d).map(Amount::get)
        }
    }
}
