//! x402 V2 wire types, beside V1, shaped as the `@x402/core` 2.x packages and the V2
//! specification (`specs/x402-specification-v2.md`, `specs/transports-v2/http.md`) have them:
//!
//! - the 402 travels in the `PAYMENT-REQUIRED` header ([`PaymentRequiredV2`], base64 JSON), a
//!   resource object beside `accepts` whose entries name an `amount` and a CAIP-2 `network`;
//! - the client pays in `PAYMENT-SIGNATURE` ([`PaymentPayloadV2`]): the requirement it accepted
//!   (`accepted`), the same `exact` EVM payload as V1, and optional `extensions`;
//! - the facilitator's `/verify` and `/settle` take [`VerifyRequestV2`] (V2 payload and
//!   requirements) and answer the same shapes as V1 ([`super::VerifyResponse`],
//!   [`super::SettleResponse`], networks in CAIP-2);
//! - a paid response carries `PAYMENT-RESPONSE` (the V1 [`super::SettlementResponseHeader`]
//!   shape).
//!
//! Tollgate settles both versions through one path: a V2 message is mapped to its V1 twin
//! ([`PaymentRequirementsV2::to_v1`], [`PaymentPayloadV2::to_v1`]) once its `accepted`
//! requirement was found among the advertised ones, so the money rules (once-only locks, replay
//! and tamper refusals, the facilitator's settlement rows) are V1's, unchanged.
//!
//! | V1 (`accepts[i]`, `X-PAYMENT`)      | V2                                              |
//! |-------------------------------------|-------------------------------------------------|
//! | `maxAmountRequired`                 | `amount`                                        |
//! | `network: "base-sepolia"`           | `network: "eip155:84532"` (CAIP-2)              |
//! | `resource`, `description`, `mimeType` in each entry | one `resource: {url, description, mimeType}` |
//! | `outputSchema`                      | (left out; V2 puts it in the `bazaar` extension) |
//! | payload `scheme`, `network`         | payload `accepted` (the whole requirement)      |
//! | body of the 402                     | `PAYMENT-REQUIRED` header                       |
//! | `X-PAYMENT`, `X-PAYMENT-RESPONSE`   | `PAYMENT-SIGNATURE`, `PAYMENT-RESPONSE`         |

use alloy::primitives::Address;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{
    ErrorReason, ExactEvmPayload, MAX_PAYLOAD_HEADER, PaymentPayload, PaymentRequiredResponse,
    PaymentRequirements, VerifyRequest,
};
use crate::{Amount, Network, codec};

/// The protocol version of these types.
pub const X402_VERSION_2: u8 = 2;

/// The `payment-identifier` extension's key in `extensions`
/// (`specs/extensions/payment_identifier.md`): a client-chosen id that makes a payment's
/// retries idempotent.
pub const PAYMENT_IDENTIFIER: &str = "payment-identifier";

/// Tollgate's extension in a V2 402's `extensions`: the subscription offer, as the V1 body's
/// `service` object carries it (`{info: {offer: {planId, subscriptionScheme, facilitator, plan},
/// offers: [...]}}`). Generic V2 clients ignore it and pay one-time.
pub const SUBSCRIPTION_EXTENSION: &str = "tollgate-subscription";

/// Tollgate's extension naming the facilitator that settles a V2 402's payments
/// (`{info: {facilitator: <base URL>}}`): a Tollgate client reads the chain's clock from its
/// discovery, to sign the authorization's window by the clock the facilitator checks it by.
/// Generic V2 clients ignore it.
pub const FACILITATOR_EXTENSION: &str = "tollgate-facilitator";

/// The reason code of a payment refused because its `payment-identifier` id is bound to another
/// payload (x402 names none).
pub const PAYMENT_IDENTIFIER_CONFLICT: &str = "payment_identifier_conflict";

/// [`PAYMENT_IDENTIFIER_CONFLICT`] as a reason.
pub fn payment_identifier_conflict() -> ErrorReason {
    ErrorReason::Other(PAYMENT_IDENTIFIER_CONFLICT.to_owned())
}

/// The resource a V2 402 is about (`resource` of [`PaymentRequiredV2`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// The absolute URL of the resource.
    pub url: String,
    /// Human-readable description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type of the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// One entry of a V2 `accepts` (and a V2 payload's `accepted`): what a resource costs and how to
/// pay it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsV2 {
    /// `"exact"`.
    pub scheme: String,
    /// A CAIP-2 network id (`eip155:84532`).
    pub network: Network,
    /// The price in the asset's smallest unit.
    pub amount: Amount,
    /// The token contract (its EIP-712 `verifyingContract`).
    #[serde(with = "super::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub asset: Address,
    /// The recipient of the payment.
    #[serde(with = "super::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub pay_to: Address,
    /// How long the client's authorization should stay valid.
    pub max_timeout_seconds: u64,
    /// Scheme-specific data, a JSON object: for `exact` on EVM, the token's EIP-712
    /// `{name, version}`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::object_or_null"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extra: Option<Value>,
}

impl PaymentRequirementsV2 {
    /// The V2 twin of a V1 entry, on the CAIP-2 network `caip2` (the caller resolves the V1 name,
    /// which may be a custom one such as a devnet's). `outputSchema` is left out.
    pub fn from_v1(v1: &PaymentRequirements, caip2: &Network) -> Self {
        Self {
            scheme: v1.scheme.clone(),
            network: caip2.clone(),
            amount: v1.max_amount_required,
            asset: v1.asset,
            pay_to: v1.pay_to,
            max_timeout_seconds: v1.max_timeout_seconds,
            extra: v1.extra.clone(),
        }
    }

    /// The V1 twin, on the V1 network name `v1_network`, for `resource` (V2 keeps the resource
    /// beside the requirements; absent, the V1 fields are empty).
    pub fn to_v1(
        &self,
        v1_network: &Network,
        resource: Option<&ResourceInfo>,
    ) -> PaymentRequirements {
        PaymentRequirements {
            scheme: self.scheme.clone(),
            network: v1_network.clone(),
            max_amount_required: self.amount,
            resource: resource.map(|r| r.url.clone()).unwrap_or_default(),
            description: resource
                .and_then(|r| r.description.clone())
                .unwrap_or_default(),
            mime_type: resource
                .and_then(|r| r.mime_type.clone())
                .unwrap_or_default(),
            pay_to: self.pay_to,
            max_timeout_seconds: self.max_timeout_seconds,
            asset: self.asset,
            output_schema: None,
            extra: self.extra.clone(),
        }
    }

    /// Whether a payload's `accepted` is this requirement, as the reference server matches them:
    /// every field equal (addresses in any case), and `accepted.extra` a subset of `extra`
    /// (each of its keys present here with an equal value).
    pub fn is_accepted_as(&self, accepted: &PaymentRequirementsV2) -> bool {
        let extra_ok = match (&accepted.extra, &self.extra) {
            (None, _) => true,
            (Some(Value::Object(theirs)), Some(Value::Object(ours))) => {
                theirs.iter().all(|(k, v)| ours.get(k) == Some(v))
            }
            (Some(Value::Object(theirs)), None) => theirs.is_empty(),
            (Some(_), _) => false,
        };
        self.scheme == accepted.scheme
            && self.network == accepted.network
            && self.amount == accepted.amount
            && self.asset == accepted.asset
            && self.pay_to == accepted.pay_to
            && self.max_timeout_seconds == accepted.max_timeout_seconds
            && extra_ok
    }
}

/// The V2 402: base64 JSON in the `PAYMENT-REQUIRED` header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredV2 {
    /// `2`.
    pub x402_version: u8,
    /// Why payment is required, or why the previous attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The resource.
    pub resource: ResourceInfo,
    /// The ways to pay.
    pub accepts: Vec<PaymentRequirementsV2>,
    /// Extensions the server offers (`{key: {info, schema}}`): Tollgate puts its subscription
    /// offer and `payment-identifier` here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extensions: Option<Map<String, Value>>,
}

impl PaymentRequiredV2 {
    /// The V2 twin of a V1 402 body whose entries are all on `caip2`. The resource object is
    /// the first entry's (`url`, `description`, `mimeType`; empty strings left out).
    pub fn from_v1(body: &PaymentRequiredResponse, caip2: &Network) -> Self {
        let resource = body
            .accepts
            .first()
            .map(|r| ResourceInfo {
                url: r.resource.clone(),
                description: Some(r.description.clone()).filter(|s| !s.is_empty()),
                mime_type: Some(r.mime_type.clone()).filter(|s| !s.is_empty()),
            })
            .unwrap_or_default();
        Self {
            x402_version: X402_VERSION_2,
            error: body.error.clone(),
            resource,
            accepts: body
                .accepts
                .iter()
                .map(|r| PaymentRequirementsV2::from_v1(r, caip2))
                .collect(),
            extensions: None,
        }
    }

    /// The header value: base64 (standard alphabet, padded) of the JSON.
    pub fn encode_header(&self) -> String {
        codec::encode(self)
    }

    /// Reads a `PAYMENT-REQUIRED` value; anything but `x402Version: 2` is an error.
    pub fn decode_header(header: &str) -> Result<Self, V2DecodeError> {
        decode_v2(header)
    }

    /// The entry `accepted` names, if it is one of [`Self::accepts`].
    pub fn find(&self, accepted: &PaymentRequirementsV2) -> Option<&PaymentRequirementsV2> {
        self.accepts.iter().find(|r| r.is_accepted_as(accepted))
    }
}

/// A V2 payment: what a client sends, base64 JSON, in `PAYMENT-SIGNATURE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV2 {
    /// `2`.
    pub x402_version: u8,
    /// The resource paid for, as the client read it from the 402.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    /// The requirement the client chose, copied from `accepts`.
    pub accepted: PaymentRequirementsV2,
    /// The signed authorization (the `exact` EVM payload, as in V1).
    pub payload: ExactEvmPayload,
    /// Extensions the client echoes or adds (`payment-identifier`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extensions: Option<Map<String, Value>>,
}

impl PaymentPayloadV2 {
    /// The header value: base64 (standard alphabet, padded) of the JSON.
    pub fn encode_header(&self) -> String {
        codec::encode(self)
    }

    /// Reads a `PAYMENT-SIGNATURE` value as a V2 payment. The version is checked before the
    /// shape, so a V1 payload is [`V2DecodeError::Version`], not malformed.
    pub fn decode_header(header: &str) -> Result<Self, V2DecodeError> {
        decode_v2(header)
    }

    /// The V1 twin of this payment on the V1 network name `v1_network` (the caller checked that
    /// `accepted` names that network's CAIP-2 id).
    pub fn to_v1(&self, v1_network: &Network) -> PaymentPayload {
        PaymentPayload {
            x402_version: super::X402_VERSION,
            scheme: self.accepted.scheme.clone(),
            network: v1_network.clone(),
            payload: self.payload.clone(),
        }
    }

    /// The `payment-identifier` id the client sent (`extensions["payment-identifier"].info.id`),
    /// checked: 16 to 128 characters of `[A-Za-z0-9_-]`. `Ok(None)` when there is none.
    pub fn payment_identifier(&self) -> Result<Option<&str>, PaymentIdentifierError> {
        let Some(ext) = self
            .extensions
            .as_ref()
            .and_then(|e| e.get(PAYMENT_IDENTIFIER))
        else {
            return Ok(None);
        };
        match ext.get("info").and_then(|i| i.get("id")) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(id)) if is_payment_identifier(id) => Ok(Some(id)),
            Some(_) => Err(PaymentIdentifierError),
        }
    }
}

/// Whether `id` is a valid `payment-identifier` id: 16 to 128 characters, alphanumeric, `-`
/// and `_`.
pub fn is_payment_identifier(id: &str) -> bool {
    (16..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The `payment-identifier` extension as a server declares it in a 402's `extensions`
/// (`{info: {required}, schema}`).
pub fn payment_identifier_extension(required: bool) -> Value {
    serde_json::json!({
        "info": { "required": required },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "required": { "type": "boolean" },
                "id": { "type": "string", "minLength": 16, "maxLength": 128 }
            },
            "required": ["required"]
        }
    })
}

/// A `payment-identifier` whose `id` is not a string of 16 to 128 characters of
/// `[A-Za-z0-9_-]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the payment-identifier id must be 16 to 128 characters of letters, digits, '-' and '_'")]
pub struct PaymentIdentifierError;

/// The body of a V2 `POST /verify` (and `POST /settle`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyRequestV2 {
    /// `2`.
    pub x402_version: u8,
    /// The client's payment.
    pub payment_payload: PaymentPayloadV2,
    /// The requirements it is meant to meet (the server's own, not the client's `accepted`).
    pub payment_requirements: PaymentRequirementsV2,
}

impl VerifyRequestV2 {
    /// A V2 request.
    pub fn new(
        payment_payload: PaymentPayloadV2,
        payment_requirements: PaymentRequirementsV2,
    ) -> Self {
        Self {
            x402_version: X402_VERSION_2,
            payment_payload,
            payment_requirements,
        }
    }
}

/// The body of a V2 `POST /settle`: the same as `/verify`'s.
pub type SettleRequestV2 = VerifyRequestV2;

/// A `/verify` or `/settle` body of either version, told apart by its `x402Version` (absent
/// reads as 1, as x402 V1 servers may leave it out).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum AnyVerifyRequest {
    /// x402 V1.
    V1(VerifyRequest),
    /// x402 V2.
    V2(VerifyRequestV2),
}

impl<'de> Deserialize<'de> for AnyVerifyRequest {
    /// Reads the body's text once for its `x402Version` (every other field skipped unparsed),
    /// then once as that version's request: a quarter less CPU than going through a [`Value`]
    /// tree (measured on a V1 body: 3.0 µs instead of 4.1), on every `/verify` and `/settle`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        /// The body's version, and nothing else of it.
        #[derive(Deserialize)]
        struct Version {
            #[serde(rename = "x402Version", default)]
            version: Option<Value>,
        }
        let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
        let text = raw.get();
        let Version { version } = serde_json::from_str(text).map_err(D::Error::custom)?;
        let version = match version {
            None | Some(Value::Null) => Some(1),
            Some(v) => v.as_u64(),
        };
        match version {
            Some(1) => serde_json::from_str(text)
                .map(Self::V1)
                .map_err(D::Error::custom),
            Some(2) => serde_json::from_str(text)
                .map(Self::V2)
                .map_err(D::Error::custom),
            Some(v) => Err(D::Error::custom(format_args!(
                "x402Version {v} is not supported; 1 and 2 are"
            ))),
            None => Err(D::Error::custom("x402Version must be an integer")),
        }
    }
}

/// Why a V2 header value could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum V2DecodeError {
    /// Longer than [`MAX_PAYLOAD_HEADER`].
    #[error("header of {0} bytes is too large (at most {MAX_PAYLOAD_HEADER})")]
    TooLarge(usize),
    /// Not base64.
    #[error("not base64")]
    Base64(#[source] base64::DecodeError),
    /// Not JSON, or JSON of another shape.
    #[error("not an x402 V2 message")]
    Json(#[source] serde_json::Error),
    /// No integer `x402Version`, or one other than 2.
    #[error("x402Version {0:?} is not 2")]
    Version(Option<u64>),
}

impl V2DecodeError {
    /// The x402 reason code to answer with.
    pub fn reason(&self) -> ErrorReason {
        match self {
            Self::Version(_) => ErrorReason::InvalidX402Version,
            Self::TooLarge(_) | Self::Base64(_) | Self::Json(_) => ErrorReason::InvalidPayload,
        }
    }
}

/// A V2 header value: base64 JSON, `x402Version: 2` checked before the shape (so a V1 message is
/// [`V2DecodeError::Version`], not malformed).
fn decode_v2<T: serde::de::DeserializeOwned>(header: &str) -> Result<T, V2DecodeError> {
    let value: Value = decode_value(header)?;
    check_version(&value)?;
    serde_json::from_value(value).map_err(V2DecodeError::Json)
}

fn decode_value(header: &str) -> Result<Value, V2DecodeError> {
    codec::decode(header, MAX_PAYLOAD_HEADER).map_err(|e| match e {
        codec::DecodeError::TooLarge(len) => V2DecodeError::TooLarge(len),
        codec::DecodeError::Base64(e) => V2DecodeError::Base64(e),
        codec::DecodeError::Json(e) => V2DecodeError::Json(e),
    })
}

fn check_version(value: &Value) -> Result<(), V2DecodeError> {
    match value.get("x402Version").and_then(Value::as_u64) {
        Some(2) => Ok(()),
        other => Err(V2DecodeError::Version(other)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fixtures::{payload, requirements};

    /// The specification's own example (`specs/transports-v2/http.md`), as the `@x402/core`
    /// packages send it.
    const SPEC_PAYMENT_SIGNATURE: &str = "eyJ4NDAyVmVyc2lvbiI6MiwicmVzb3VyY2UiOnsidXJsIjoiaHR0cHM6Ly9hcGkuZXhhbXBsZS5jb20vcHJlbWl1bS1kYXRhIiwiZGVzY3JpcHRpb24iOiJBY2Nlc3MgdG8gcHJlbWl1bSBtYXJrZXQgZGF0YSIsIm1pbWVUeXBlIjoiYXBwbGljYXRpb24vanNvbiJ9LCJhY2NlcHRlZCI6eyJzY2hlbWUiOiJleGFjdCIsIm5ldHdvcmsiOiJlaXAxNTU6ODQ1MzIiLCJhbW91bnQiOiIxMDAwMCIsImFzc2V0IjoiMHgwMzZDYkQ1Mzg0MmM1NDI2NjM0ZTc5Mjk1NDFlQzIzMThmM2RDRjdlIiwicGF5VG8iOiIweDIwOTY5M0JjNmFmYzBDNTMyOGJBMzZGYUYwM0M1MTRFRjMxMjI4N0MiLCJtYXhUaW1lb3V0U2Vjb25kcyI6NjAsImV4dHJhIjp7Im5hbWUiOiJVU0RDIiwidmVyc2lvbiI6IjIifX0sInBheWxvYWQiOnsic2lnbmF0dXJlIjoiMHgyZDZhNzU4OGQ2YWNjYTUwNWNiZjBkOWE0YTIyN2UwYzUyYzZjMzQwMDhjOGU4OTg2YTEyODMyNTk3NjQxNzM2MDhhMmNlNjQ5NjY0MmUzNzdkNmRhOGRiYmY1ODM2ZTliZDE1MDkyZjllY2FiMDVkZWQzZDYyOTNhZjE0OGI1NzFjIiwiYXV0aG9yaXphdGlvbiI6eyJmcm9tIjoiMHg4NTdiMDY1MTlFOTFlM0E1NDUzODc5MWJEYmIwRTIyMzczZTM2YjY2IiwidG8iOiIweDIwOTY5M0JjNmFmYzBDNTMyOGJBMzZGYUYwM0M1MTRFRjMxMjI4N0MiLCJ2YWx1ZSI6IjEwMDAwIiwidmFsaWRBZnRlciI6IjE3NDA2NzIwODkiLCJ2YWxpZEJlZm9yZSI6IjE3NDA2NzIxNTQiLCJub25jZSI6IjB4ZjM3NDY2MTNjMmQ5MjBiNWZkYWJjMDg1NmYyYWViMmQ0Zjg4ZWU2MDM3YjhjYzVkMDRhNzFhNDQ2MmYxMzQ4MCJ9fX0=";

    #[test]
    fn the_specification_example_decodes_and_maps_to_its_v1_twin() {
        let p = PaymentPayloadV2::decode_header(SPEC_PAYMENT_SIGNATURE).unwrap();
        assert_eq!(p.accepted.network, "eip155:84532");
        assert_eq!(p.accepted.amount, Amount::from_units(10_000));
        assert_eq!(p.payment_identifier(), Ok(None));
        let v1 = p.to_v1(&"base-sepolia".parse().unwrap());
        assert_eq!((v1.x402_version, v1.network.as_str()), (1, "base-sepolia"));
        assert_eq!(v1.payload, p.payload);
        // Round trip through our encoder.
        assert_eq!(
            PaymentPayloadV2::decode_header(&p.encode_header()).unwrap(),
            p
        );
    }

    #[test]
    fn requirements_map_both_ways_and_accepted_matches_with_an_extra_subset() {
        let v1 = requirements();
        let v2 = PaymentRequirementsV2::from_v1(&v1, &"eip155:84532".parse().unwrap());
        let json = serde_json::to_value(&v2).unwrap();
        assert_eq!(json["amount"], "10000");
        assert!(json["maxTimeoutSeconds"].is_number());
        assert!(json.get("maxAmountRequired").is_none() && json.get("resource").is_none());
        let resource = ResourceInfo {
            url: v1.resource.clone(),
            description: Some(v1.description.clone()),
            mime_type: Some(v1.mime_type.clone()),
        };
        let mut back = v2.to_v1(&v1.network, Some(&resource));
        back.output_schema = v1.output_schema.clone();
        assert_eq!(back, v1);

        let mut accepted = v2.clone();
        assert!(v2.is_accepted_as(&accepted));
        accepted.extra = Some(json!({"name": "USDC"}));
        assert!(v2.is_accepted_as(&accepted), "a subset of extra");
        accepted.extra = Some(json!({"name": "USDC", "version": "3"}));
        assert!(!v2.is_accepted_as(&accepted));
        let mut cheaper = v2.clone();
        cheaper.amount = Amount::from_units(1);
        assert!(!v2.is_accepted_as(&cheaper));
        let mut elsewhere = v2.clone();
        elsewhere.network = "eip155:8453".parse().unwrap();
        assert!(!v2.is_accepted_as(&elsewhere));
    }

    #[test]
    fn payment_required_round_trips_through_its_header() {
        let body = PaymentRequiredResponse::new(vec![requirements()], Some("pay".into()));
        let mut v2 = PaymentRequiredV2::from_v1(&body, &"eip155:84532".parse().unwrap());
        v2.extensions = Some(Map::from_iter([(
            PAYMENT_IDENTIFIER.to_owned(),
            payment_identifier_extension(false),
        )]));
        let back = PaymentRequiredV2::decode_header(&v2.encode_header()).unwrap();
        assert_eq!(back, v2);
        assert_eq!(back.resource.url, requirements().resource);
        assert!(back.find(&back.accepts[0]).is_some());
        // A V1 body in the header is refused by version.
        let v1 = codec::encode(&body);
        assert!(matches!(
            PaymentRequiredV2::decode_header(&v1),
            Err(V2DecodeError::Version(Some(1)))
        ));
    }

    #[test]
    fn payment_identifier_ids_are_checked() {
        let mut p = PaymentPayloadV2 {
            x402_version: 2,
            resource: None,
            accepted: PaymentRequirementsV2::from_v1(
                &requirements(),
                &"eip155:84532".parse().unwrap(),
            ),
            payload: payload().payload,
            extensions: None,
        };
        let with = |p: &mut PaymentPayloadV2, id: Value| {
            p.extensions = Some(Map::from_iter([(
                PAYMENT_IDENTIFIER.to_owned(),
                json!({"info": {"required": false, "id": id}}),
            )]));
        };
        with(&mut p, json!("pay_7d5d747be160e280504c099d984bcfe0"));
        assert_eq!(
            p.payment_identifier(),
            Ok(Some("pay_7d5d747be160e280504c099d984bcfe0"))
        );
        for bad in [
            json!("short"),
            json!("x".repeat(129)),
            json!("pay 7d5d747be160e280"),
            json!(7),
        ] {
            with(&mut p, bad);
            assert_eq!(p.payment_identifier(), Err(PaymentIdentifierError));
        }
    }

    #[test]
    fn verify_bodies_of_both_versions_are_told_apart() {
        let v1 = VerifyRequest::new(payload(), requirements());
        let mut json = serde_json::to_value(&v1).unwrap();
        assert_eq!(
            serde_json::from_value::<AnyVerifyRequest>(json.clone()).unwrap(),
            AnyVerifyRequest::V1(v1.clone())
        );
        json.as_object_mut().unwrap().remove("x402Version");
        assert!(matches!(
            serde_json::from_value::<AnyVerifyRequest>(json).unwrap(),
            AnyVerifyRequest::V1(_)
        ));
        let accepted =
            PaymentRequirementsV2::from_v1(&requirements(), &"eip155:84532".parse().unwrap());
        let v2 = VerifyRequestV2::new(
            PaymentPayloadV2 {
                x402_version: 2,
                resource: None,
                accepted: accepted.clone(),
                payload: payload().payload,
                extensions: None,
            },
            accepted,
        );
        let json = serde_json::to_value(&v2).unwrap();
        assert_eq!(
            serde_json::from_value::<AnyVerifyRequest>(json).unwrap(),
            AnyVerifyRequest::V2(v2)
        );
        let three = json!({"x402Version": 3});
        let err = serde_json::from_value::<AnyVerifyRequest>(three).unwrap_err();
        assert!(err.to_string().contains("1 and 2"), "{err}");
        // As the facilitator reads a body: from its text.
        let mut v1_text = serde_json::to_value(&v1).unwrap();
        let parsed: AnyVerifyRequest =
            serde_json::from_slice(v1_text.to_string().as_bytes()).expect("a V1 body's text");
        assert_eq!(parsed, AnyVerifyRequest::V1(v1.clone()));
        v1_text["x402Version"] = json!("1");
        let err = serde_json::from_str::<AnyVerifyRequest>(&v1_text.to_string()).unwrap_err();
        assert!(err.to_string().contains("must be an integer"), "{err}");
        v1_text["x402Version"] = json!(1);
        v1_text["paymentPayload"]["scheme"] = json!(7);
        let err = serde_json::from_str::<AnyVerifyRequest>(&v1_text.to_string()).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
    }
}
