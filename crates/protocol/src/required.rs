//! The spec's 402 body as Tollgate sends it: a superset that the spec's clients and x402 V1
//! clients both read (DESIGN §4).
//!
//! - top level: the spec's `version: "1"`, x402's `x402Version: 1`, `accepts`, and `error` (why
//!   the previous attempt failed, e.g. `"InvalidPaymentProof"`, or a plain reason);
//! - each entry: the spec's fields (`scheme`, `network`, `token`, `amount`, `payTo`, `memo`,
//!   optional `service`) and the x402 V1 mirror fields with the same values (`asset`,
//!   `maxAmountRequired`, `resource`, `description`, `mimeType`, `maxTimeoutSeconds`,
//!   `extra: {name, version}`); a subscription offer adds `service.planId`,
//!   `service.subscriptionScheme: true` and the plan terms in `plan`;
//! - never a `null`: optional fields are absent when empty (x402 clients reject `null`).

use alloy::primitives::{Address, B256};
use serde::{Deserialize, Serialize};

use crate::{Amount, x402::PaymentRequirements};

/// The spec's `version` value.
pub const SPEC_VERSION: &str = "1";

/// The body of a 402 Payment Required.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequired {
    /// `"1"` (the spec).
    pub version: String,
    /// `1` (x402 V1).
    pub x402_version: u8,
    /// One entry per advertised scheme or option.
    pub accepts: Vec<PaymentOption>,
    /// Why payment is required now: a spec error name after a failed attempt
    /// (`InvalidPaymentProof`, `SubscriptionNotActive`, `AllowanceExhausted`, …) or a plain reason.
    pub error: String,
}

impl PaymentRequired {
    /// A body with these options and reason.
    pub fn new(accepts: Vec<PaymentOption>, error: impl Into<String>) -> Self {
        Self {
            version: SPEC_VERSION.into(),
            x402_version: 1,
            accepts,
            error: error.into(),
        }
    }
}

/// One entry of `accepts`: the x402 V1 requirements (flattened: `scheme`, `network`,
/// `maxAmountRequired`, `resource`, `description`, `mimeType`, `payTo`, `maxTimeoutSeconds`,
/// `asset`, `extra`, `outputSchema`) plus the spec's fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentOption {
    /// The x402 V1 view of this option (what an x402 client pays, and what the gate sends to the
    /// facilitator's `/verify` and `/settle`).
    #[serde(flatten)]
    pub requirements: PaymentRequirements,
    /// The spec's `token` (the same as `asset`).
    #[serde(with = "crate::x402::checksummed")]
    pub token: Address,
    /// The spec's `amount` (the same as `maxAmountRequired`).
    pub amount: Amount,
    /// The spec's request reference, issued by the gate for this request; a Tollgate payment
    /// commits to it.
    pub memo: B256,
    /// The spec's extension object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceExtension>,
    /// The plan's terms, for subscription offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanTerms>,
}

/// The spec's extension object (field `service`): plan and subscription context, and where the
/// facilitator is. A client that ignores it pays one-time as plain x402.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExtension {
    /// The plan offered, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<B256>,
    /// `true` when subscribing is preferred.
    pub subscription_scheme: bool,
    /// The facilitator's base URL (`/authorize`, `/.well-known/tollgate`).
    pub facilitator: String,
}

/// A plan's terms as a 402 carries them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanTerms {
    /// The plan.
    pub plan_id: B256,
    /// Amount per cycle, in the token's smallest unit.
    pub amount: Amount,
    /// Cycle length in seconds (2592000 = 30 days).
    pub interval: u64,
    /// The token.
    #[serde(with = "crate::x402::checksummed")]
    pub token: Address,
}

/// What a response served on a subscription says about how it was paid: base64 JSON in the
/// `X-Service-Receipt` header ([`crate::headers::X_SERVICE_RECEIPT`]), the subscription's twin of
/// `X-PAYMENT-RESPONSE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionReceipt {
    /// The subscription the request was served on.
    pub subscription_id: B256,
    /// The gate's network.
    pub network: crate::Network,
    /// The token.
    #[serde(with = "crate::x402::checksummed")]
    pub token: Address,
    /// The provider paid.
    #[serde(with = "crate::x402::checksummed")]
    pub pay_to: Address,
    /// What this request took from the subscription's overage allowance (a metered route's
    /// price; zero elsewhere), in the token's smallest unit.
    pub metered: Amount,
}

/// The largest `X-Service-Receipt` value read (a receipt is about 300 bytes).
const MAX_RECEIPT_HEADER: usize = 2_048;

impl SubscriptionReceipt {
    /// The header value.
    pub fn encode(&self) -> String {
        crate::codec::encode(self)
    }

    /// Reads a header value; `None` when it is not a receipt.
    pub fn decode(header: &str) -> Option<Self> {
        crate::codec::decode(header, MAX_RECEIPT_HEADER).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superset_body_reads_as_x402_and_has_no_nulls() {
        let requirements: PaymentRequirements = serde_json::from_value(serde_json::json!({
            "scheme": "exact", "network": "base-sepolia", "maxAmountRequired": "500000",
            "resource": "http://127.0.0.1:8080/v1/quote", "description": "", "mimeType": "application/json",
            "payTo": Address::repeat_byte(2), "maxTimeoutSeconds": 300, "asset": Address::repeat_byte(1),
            "extra": { "name": "USD Coin", "version": "2" }
        }))
        .unwrap();
        let option = PaymentOption {
            requirements,
            token: Address::repeat_byte(1),
            amount: Amount::from_units(500_000),
            memo: B256::repeat_byte(9),
            service: Some(ServiceExtension {
                plan_id: None,
                subscription_scheme: false,
                facilitator: "http://f".into(),
            }),
            plan: None,
        };
        let body = PaymentRequired::new(vec![option.clone()], "payment required");
        let v = serde_json::to_value(&body).unwrap();
        assert!(!v.to_string().contains("null"), "{v}");
        assert_eq!(v["version"], "1");
        assert_eq!(v["x402Version"], 1);
        assert_eq!(v["accepts"][0]["amount"], "500000");
        assert_eq!(v["accepts"][0]["maxAmountRequired"], "500000");
        assert_eq!(v["accepts"][0]["token"], v["accepts"][0]["asset"]);
        // An x402 V1 reader sees a valid requirements entry.
        let x: crate::x402::PaymentRequiredResponse = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(
            x.accepts[0].max_amount_required,
            Amount::from_units(500_000)
        );
        // A subscription's receipt round-trips through its header value.
        let receipt = SubscriptionReceipt {
            subscription_id: B256::repeat_byte(3),
            network: "base-sepolia".parse().unwrap(),
            token: Address::repeat_byte(1),
            pay_to: Address::repeat_byte(2),
            metered: Amount::from_units(100_000),
        };
        assert_eq!(
            SubscriptionReceipt::decode(&receipt.encode()),
            Some(receipt.clone())
        );
        assert_eq!(SubscriptionReceipt::decode("not base64 JSON"), None);
        // And it round-trips.
        assert_eq!(serde_json::from_value::<PaymentRequired>(v).unwrap(), body);
    }
}
