//! What a resource costs: the `accepts` entries of a 402 ([`PaymentRequirements`]), the check
//! that x402 V1 clients will read them, and the 402 body that carries them.

use alloy::primitives::Address;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{PaymentPayload, SCHEME_EXACT, X402_VERSION};
use crate::{Amount, network};

/// One entry of `accepts`: what a resource costs and how to pay it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    /// `"exact"` for anything an x402 V1 client should pay.
    pub scheme: String,
    /// An x402 V1 network name (see [`crate::network`]).
    pub network: crate::Network,
    /// The price in the asset's smallest unit.
    pub max_amount_required: Amount,
    /// The absolute URL of the resource.
    pub resource: String,
    /// Human-readable description; may be empty, never absent.
    pub description: String,
    /// MIME type of the resource; may be empty, never absent.
    pub mime_type: String,
    /// The recipient of the payment.
    #[serde(with = "super::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub pay_to: Address,
    /// How long the client's authorization should stay valid (its `validBefore` is
    /// `now + maxTimeoutSeconds`).
    pub max_timeout_seconds: u64,
    /// The token contract (its EIP-712 `verifyingContract`).
    #[serde(with = "super::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub asset: Address,
    /// A JSON object describing the request and response, if any (x402-express puts
    /// `{input: {type: "http", method, discoverable}, output}` here).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::object_or_null"
    )]
    pub output_schema: Option<Value>,
    /// Scheme-specific extra data, a JSON object: for `exact` on EVM, the token's EIP-712 domain
    /// `{name, version}` (see [`Eip712Extra`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::object_or_null"
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
            return Err(Incompatibility::Network(self.network.to_string()));
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

/// The body of an x402 V1 `402 Payment Required` response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredResponse {
    /// `1`.
    pub x402_version: u8,
    /// The ways to pay.
    pub accepts: Vec<PaymentRequirements>,
    /// Why payment is required or why the previous attempt failed. A free string: x402-express
    /// sends messages (`"X-PAYMENT header is required"`) as well as
    /// [`ErrorReason`](super::ErrorReason) codes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The payer of a refused payment, when known (x402-express sends it after a failed verify).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::checksummed_opt"
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

#[cfg(test)]
mod tests {
    use alloy::primitives::address;
    use serde_json::json;

    use crate::{
        fixtures::requirements,
        x402::{ErrorReason, VerifyResponse},
    };

    use super::*;

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
            with(|r| r.network = "base-mainnet".parse().unwrap()),
            Err(Incompatibility::Network(_))
        ));
        assert!(matches!(
            with(|r| r.network = "devnet".parse().unwrap()),
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
}
