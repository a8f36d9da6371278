//! Reading a 402: the Tollgate superset body, a generic x402 V1 one, or, when the body is
//! neither, the x402 V2 `PAYMENT-REQUIRED` header.

use alloy::primitives::B256;
use serde::Deserialize as _;
use serde_json::Value;
use tollgate_protocol::{
    PaymentOption, PlanTerms, SPEC_VERSION, network,
    x402::{
        PaymentRequirements,
        v2::{self, PAYMENT_IDENTIFIER, PaymentRequiredV2, PaymentRequirementsV2, ResourceInfo},
    },
};

use crate::{Error, Result, error::Malformed};

/// One payable entry of `accepts`.
#[derive(Clone, Debug)]
pub(crate) struct Offer {
    /// The x402 V1 view (every entry has one).
    pub(crate) requirements: PaymentRequirements,
    /// The spec's request reference, on Tollgate entries.
    pub(crate) memo: Option<B256>,
    /// `service.facilitator`, on Tollgate entries.
    pub(crate) facilitator: Option<String>,
    /// The plan the entry offers to subscribe to, on Tollgate entries with
    /// `service.subscriptionScheme` and a `planId`.
    pub(crate) plan: Option<PlanOffer>,
    /// The x402 V2 entry this offer was read from (paid with `PAYMENT-SIGNATURE`).
    pub(crate) v2: Option<V2Offer>,
}

/// An x402 V2 entry: what the payment's `accepted` and `resource` repeat.
#[derive(Clone, Debug)]
pub(crate) struct V2Offer {
    pub(crate) accepted: PaymentRequirementsV2,
    pub(crate) resource: ResourceInfo,
    /// Whether the 402 declares the `payment-identifier` extension.
    pub(crate) payment_identifier: bool,
}

/// A plan offered by a 402 entry.
#[derive(Clone, Debug)]
pub(crate) struct PlanOffer {
    /// `service.planId`.
    pub(crate) plan_id: B256,
    /// The entry's `plan` terms (amount per cycle, token), when it has them for this plan. What
    /// the server claims: the facilitator's quote of the on-chain plan is what is signed.
    pub(crate) terms: Option<PlanTerms>,
}

/// A parsed 402.
#[derive(Clone, Debug)]
pub(crate) struct Terms {
    /// The entries this agent could read.
    pub(crate) offers: Vec<Offer>,
    /// How many entries the server listed.
    pub(crate) offered: usize,
    /// The top-level `error`, when a string.
    pub(crate) error: Option<String>,
}

/// Parses a 402: its body, or, when the body is no V1 payment-required body (an x402 V2
/// server's `{}`), the V2 `PAYMENT-REQUIRED` header `v2`. A Tollgate or V1 body wins over the
/// header: it carries the memo and facilitator of the proof path.
pub(crate) fn parse(body: &[u8], v2: Option<&str>) -> Result<Terms> {
    match (parse_body(body), v2) {
        (Ok(terms), _) => Ok(terms),
        (Err(_), Some(header)) => parse_v2(header),
        (Err(e), None) => Err(e),
    }
}

/// Reads the V2 `PAYMENT-REQUIRED` header: its EVM entries, with their V1 twin on the chain's
/// x402 V1 name (or the CAIP-2 id of a chain V1 does not name).
fn parse_v2(header: &str) -> Result<Terms> {
    let required = PaymentRequiredV2::decode_header(header)
        .map_err(|e| Error::MalformedPaymentRequired(Malformed::V2(e)))?;
    Ok(from_v2(required))
}

/// The terms of a payment-required object as JSON (an MCP tool result's `structuredContent`):
/// x402 V2, or a V1 (or Tollgate superset) body.
#[cfg(feature = "mcp")]
pub(crate) fn from_value(value: &Value) -> Result<Terms> {
    match value.get("x402Version").and_then(Value::as_u64) {
        Some(2) => serde_json::from_value::<PaymentRequiredV2>(value.clone())
            .map(from_v2)
            .map_err(|e| Error::MalformedPaymentRequired(Malformed::Json(e))),
        _ => parse_body(value.to_string().as_bytes()),
    }
}

fn from_v2(required: PaymentRequiredV2) -> Terms {
    let payment_identifier = required
        .extensions
        .as_ref()
        .is_some_and(|e| e.contains_key(PAYMENT_IDENTIFIER));
    // Tollgate's gates name their facilitator: its clock is the one to sign the window by.
    let facilitator = required
        .extensions
        .as_ref()
        .and_then(|e| e.get(v2::FACILITATOR_EXTENSION))
        .and_then(|e| e.get("info")?.get("facilitator")?.as_str())
        .map(str::to_owned);
    let offers = required
        .accepts
        .iter()
        .filter_map(|accepted| {
            let chain_id = network::chain_id_of(&accepted.network).ok()?;
            let name = network::by_chain_id(chain_id).map_or_else(
                || accepted.network.clone(),
                tollgate_protocol::Network::from,
            );
            Some(Offer {
                requirements: accepted.to_v1(&name, Some(&required.resource)),
                memo: None,
                facilitator: facilitator.clone(),
                plan: None,
                v2: Some(V2Offer {
                    accepted: accepted.clone(),
                    resource: required.resource.clone(),
                    payment_identifier,
                }),
            })
        })
        .collect();
    Terms {
        offers,
        offered: required.accepts.len(),
        error: required.error,
    }
}

/// Parses a 402 body. Entries that are neither a Tollgate option nor x402 V1 requirements (a
/// subscription-only entry, a future scheme) are skipped rather than failing the whole body; a
/// Tollgate entry whose spec fields contradict its x402 mirror fields is skipped as hostile.
fn parse_body(body: &[u8]) -> Result<Terms> {
    let malformed = Error::MalformedPaymentRequired;
    let value: Value = serde_json::from_slice(body).map_err(|e| malformed(Malformed::Json(e)))?;
    let Value::Object(map) = &value else {
        return Err(malformed(Malformed::NoAccepts));
    };
    match (map.get("x402Version"), map.get("version")) {
        (Some(v), _) if v.as_u64() != Some(1) => {
            return Err(Error::UnsupportedVersion {
                version: v.to_string(),
            });
        }
        (None, Some(v)) if v.as_str() != Some(SPEC_VERSION) => {
            return Err(Error::UnsupportedVersion {
                version: v.to_string(),
            });
        }
        (None, None) => {
            return Err(Error::UnsupportedVersion {
                version: "none".into(),
            });
        }
        _ => {}
    }
    let Some(Value::Array(accepts)) = map.get("accepts") else {
        return Err(malformed(Malformed::NoAccepts));
    };
    let offers = accepts.iter().filter_map(offer).collect();
    Ok(Terms {
        offers,
        offered: accepts.len(),
        error: map.get("error").and_then(Value::as_str).map(str::to_owned),
    })
}

fn offer(entry: &Value) -> Option<Offer> {
    if entry.get("memo").is_some() || entry.get("service").is_some() {
        let option = PaymentOption::deserialize(entry).ok()?;
        let r = &option.requirements;
        if option.token != r.asset || option.amount != r.max_amount_required {
            tracing::warn!("skipping a 402 entry whose spec fields contradict its x402 fields");
            return None;
        }
        let plan = option
            .service
            .as_ref()
            .filter(|s| s.subscription_scheme)
            .and_then(|s| s.plan_id)
            .map(|plan_id| PlanOffer {
                plan_id,
                terms: option.plan.clone().filter(|t| t.plan_id == plan_id),
            });
        return Some(Offer {
            memo: Some(option.memo),
            facilitator: option.service.map(|s| s.facilitator),
            requirements: option.requirements,
            plan,
            v2: None,
        });
    }
    let requirements = PaymentRequirements::deserialize(entry).ok()?;
    Some(Offer {
        requirements,
        memo: None,
        facilitator: None,
        plan: None,
        v2: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Value {
        serde_json::json!({
            "scheme": "exact", "network": "base-sepolia", "maxAmountRequired": "500000",
            "resource": "http://x/v1/quote", "description": "", "mimeType": "",
            "payTo": "0x0202020202020202020202020202020202020202", "maxTimeoutSeconds": 60,
            "asset": "0x0101010101010101010101010101010101010101",
            "extra": { "name": "USD Coin", "version": "2" }
        })
    }

    #[test]
    fn reads_superset_and_generic_entries() {
        let mut tollgate = entry();
        tollgate["token"] = tollgate["asset"].clone();
        tollgate["amount"] = "500000".into();
        tollgate["memo"] = format!("{}", B256::repeat_byte(9)).into();
        tollgate["service"] =
            serde_json::json!({ "subscriptionScheme": false, "facilitator": "http://f" });
        let body = serde_json::json!({
            "version": "1", "x402Version": 1, "error": "InvalidPaymentProof",
            "accepts": [tollgate, entry(), { "scheme": "subscription" }]
        });
        let t = parse(body.to_string().as_bytes(), None).unwrap();
        assert_eq!(t.offered, 3);
        assert_eq!(t.offers.len(), 2);
        assert_eq!(t.offers[0].facilitator.as_deref(), Some("http://f"));
        assert_eq!(t.offers[0].memo, Some(B256::repeat_byte(9)));
        assert!(t.offers[1].facilitator.is_none());
        assert_eq!(t.error.as_deref(), Some("InvalidPaymentProof"));
    }

    #[test]
    fn plan_offers_are_read_from_the_extension() {
        let plan_id = B256::repeat_byte(7);
        let mut e = entry();
        e["token"] = e["asset"].clone();
        e["amount"] = "500000".into();
        e["memo"] = format!("{}", B256::ZERO).into();
        e["service"] = serde_json::json!({
            "subscriptionScheme": true, "planId": plan_id, "facilitator": "http://f"
        });
        e["plan"] = serde_json::json!({
            "planId": plan_id, "amount": "5000000", "interval": 2_592_000u64, "token": e["asset"]
        });
        let mut not_preferred = e.clone();
        not_preferred["service"]["subscriptionScheme"] = false.into();
        let mut other_terms = e.clone();
        other_terms["plan"]["planId"] = format!("{}", B256::repeat_byte(8)).into();
        let body = serde_json::json!({
            "x402Version": 1, "accepts": [e, not_preferred, other_terms, entry()]
        });
        let t = parse(body.to_string().as_bytes(), None).unwrap();
        let plan = t.offers[0].plan.as_ref().unwrap();
        assert_eq!(plan.plan_id, plan_id);
        assert_eq!(
            plan.terms.as_ref().unwrap().amount,
            tollgate_protocol::Amount::from_units(5_000_000)
        );
        assert!(t.offers[1].plan.is_none(), "subscriptionScheme false");
        let plan = t.offers[2].plan.as_ref().unwrap();
        assert!(
            plan.terms.is_none(),
            "terms of another plan are not this plan's"
        );
        assert!(t.offers[3].plan.is_none());
    }

    #[test]
    fn contradicting_superset_entries_are_skipped() {
        let mut e = entry();
        e["token"] = e["asset"].clone();
        e["amount"] = "1".into();
        e["memo"] = format!("{}", B256::ZERO).into();
        let body = serde_json::json!({ "x402Version": 1, "accepts": [e] });
        assert!(
            parse(body.to_string().as_bytes(), None)
                .unwrap()
                .offers
                .is_empty()
        );
    }

    #[test]
    fn versions_and_garbage_are_typed() {
        for (body, want) in [
            (r#"{"x402Version":2,"accepts":[]}"#, "version"),
            (r#"{"version":"2","accepts":[]}"#, "version"),
            (r#"{"accepts":[]}"#, "version"),
            (r#"{"x402Version":1}"#, "malformed"),
            (r#"[1,2]"#, "malformed"),
            ("not json", "malformed"),
        ] {
            let got = parse(body.as_bytes(), None).unwrap_err();
            match want {
                "version" => assert!(matches!(got, Error::UnsupportedVersion { .. }), "{body}"),
                _ => assert!(matches!(got, Error::MalformedPaymentRequired(_)), "{body}"),
            }
        }
    }
}
