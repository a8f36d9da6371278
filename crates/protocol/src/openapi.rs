//! OpenAPI schemas (feature `openapi`) for the wire values whose JSON form is custom: amounts as
//! decimal strings, addresses, hashes and byte strings as 0x-hex, the open sets of error codes.
//! The hex patterns are what the server reads (alloy's parsers: the `0x` prefix optional, either
//! case); what it writes is always `0x`-prefixed.
//! The wire types derive `utoipa::ToSchema` and point their alloy-typed fields at the marker
//! types here (`#[schema(value_type = crate::openapi::Address)]`), since alloy's types cannot
//! implement a foreign trait.

use std::borrow::Cow;

use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        RefOr,
        schema::{ObjectBuilder, Schema, Type},
    },
};

use crate::{Amount, ApiErrorCode, Network, x402::ErrorReason};

/// A string schema with a pattern, a description and an example.
fn hex_string(pattern: &str, description: &str, example: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
        .examples([example])
        .into()
}

/// A string schema whose known values are listed as examples (the set is open).
fn open_set(description: &str, known: &[&str]) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .description(Some(description))
        .examples(known.iter().copied())
        .into()
}

macro_rules! marker {
    ($(#[doc = $doc:literal])* $name:ident => $schema:expr) => {
        $(#[doc = $doc])*
        #[derive(Debug)]
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                $schema
            }
        }

        impl ToSchema for $name {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
        }
    };
}

marker! {
    /// A 20-byte EVM address, 0x-hex (checksummed on output, any case on input).
    Address => hex_string(
        "^(0[xX])?[0-9a-fA-F]{40}$",
        "A 20-byte address, 0x-hex (EIP-55 checksummed on output; any case, the prefix \
         optional, on input).",
        "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    )
}

marker! {
    /// A 32-byte value (hash, nonce, memo, id), 0x-hex.
    Hash32 => hex_string(
        "^(0[xX])?[0-9a-fA-F]{64}$",
        "A 32-byte value (hash, nonce, memo, id), 0x-hex (the prefix optional on input).",
        "0x5f1c0bfa2a1d4c2c7b6c5e4f3a291807e6d5c4b3a29180f7e6d5c4b3a2918070",
    )
}

marker! {
    /// A byte string (a signature), 0x-hex.
    HexBytes => hex_string(
        "^(0[xX])?([0-9a-fA-F]{2})*$",
        "A byte string (a signature), 0x-hex (the prefix optional on input).",
        "0x",
    )
}

impl PartialSchema for Amount {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some("^[0-9]{1,78}$"))
            .description(Some(
                "An unsigned 256-bit integer as a decimal string: an amount in the token's \
                 smallest unit (or a count, such as unix seconds in an EIP-3009 window).",
            ))
            .examples(["500000"])
            .into()
    }
}

impl ToSchema for Amount {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Amount")
    }
}

impl PartialSchema for Network {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(
                "^([a-z0-9]([a-z0-9-]*[a-z0-9])?|[-a-z0-9]{3,8}:[-_a-zA-Z0-9]{1,32})$",
            ))
            .max_length(Some(crate::network::MAX_NETWORK_LEN))
            .description(Some(
                "A network: an x402 V1 name (`base-sepolia`; `<name>-mainnet` for a mainnet), a \
                 CAIP-2 id (`eip155:84532`) or a custom network's configured name \
                 (`tollgate-devnet`). A value of another form is refused with 400.",
            ))
            .examples(["base-sepolia", "eip155:84532"])
            .into()
    }
}

impl ToSchema for Network {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Network")
    }
}

impl PartialSchema for ApiErrorCode {
    fn schema() -> RefOr<Schema> {
        open_set(
            "Machine-readable; the codes listed as examples, and others later (clients keep \
             an unknown code verbatim).",
            Self::KNOWN,
        )
    }
}

impl ToSchema for ApiErrorCode {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ApiErrorCode")
    }
}

impl PartialSchema for ErrorReason {
    fn schema() -> RefOr<Schema> {
        open_set(
            "An x402 V1 reason code (`ErrorReasons` of `x402@1.2.0`).",
            Self::KNOWN,
        )
    }
}

impl ToSchema for ErrorReason {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("X402Reason")
    }
}
