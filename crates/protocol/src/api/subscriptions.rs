//! The subscription relay's messages: the client-signed `POST /subscriptions` body, the
//! subscription as the facilitator reports it (`GET /subscriptions/{id}?network=`), the quote
//! an agent signs against (`GET /subscriptions/quote`), metered usage
//! (`POST`/`GET /subscriptions/{id}/usage`) and allowance raises
//! (`POST /subscriptions/{id}/allowance`).

use alloy::primitives::{Address, B256, Bytes};
use serde::{Deserialize, Serialize};

use crate::Amount;

/// The body of `POST /subscriptions`: a `Subscribe` intent (EIP-712, under the subscriptions
/// contract's domain) and the EIP-2612 permit that grants the contract its standing allowance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeRequest {
    /// Network name.
    pub network: String,
    /// The plan subscribed to.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub plan_id: B256,
    /// The subscriber and signer.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub subscriber: Address,
    /// The overage cap per cycle, in the token's smallest unit.
    pub max_overage: Amount,
    /// Unix seconds; the intent is valid until then (inclusive).
    pub deadline: u64,
    /// The subscriber's 65-byte `Subscribe` signature.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
    /// The standing authorization.
    pub permit: PermitSignature,
}

/// An EIP-2612 permit of the plan's token to the subscriptions contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermitSignature {
    /// The allowance it sets.
    pub value: Amount,
    /// Unix seconds; the last time it is valid.
    pub deadline: u64,
    /// The holder's 65-byte signature (empty: no permit, an existing allowance is used).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
}

/// A subscription's state, as the contract reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum SubscriptionStatus {
    /// Paid and usable.
    Active,
    /// A renewal failed or the subscriber paused it.
    Paused,
    /// Ended for good.
    Cancelled,
}

/// The overage allowance of the current cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllowanceView {
    /// The cap per cycle (`maxOverage`).
    pub cap: Amount,
    /// What may still be charged this cycle.
    pub remaining: Amount,
}

/// A subscription as `POST /subscriptions` and `GET /subscriptions/{id}` report it, read from
/// the chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscriptionView {
    /// `subscriptionIdFor(planId, subscriber, nonce)`.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub id: B256,
    /// Its state.
    pub status: SubscriptionStatus,
    /// The plan.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub plan_id: B256,
    /// The subscriber.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub subscriber: Address,
    /// The last paid cycle (1 after the first billing).
    pub cycle: u32,
    /// Unix seconds: the end of the paid period, when the next cycle is due.
    pub paid_through: u64,
    /// The overage allowance.
    pub allowance: AllowanceView,
    /// The transaction that created it (when known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Hash32>))]
    pub tx_hash: Option<B256>,
}

/// A plan's on-chain terms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanView {
    /// The plan id.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub id: B256,
    /// Its creator.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub provider: Address,
    /// The payment token.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub token: Address,
    /// The payment recipient.
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub pay_to: Address,
    /// The amount billed per cycle.
    pub amount: Amount,
    /// The cycle length in seconds.
    pub interval: u64,
    /// Whether it refuses new subscriptions.
    pub deprecated: bool,
}

/// `GET /subscriptions/quote`: everything a subscriber signs against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscriptionQuote {
    /// Network name.
    pub network: String,
    /// Chain id.
    pub chain_id: u64,
    /// The subscriptions contract (the EIP-712 verifying contract and the permit's spender).
    #[serde(with = "crate::x402::checksummed")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub subscriptions: Address,
    /// The plan.
    pub plan: PlanView,
    /// The subscriber's next `Subscribe` nonce (`Subscriptions.nonces`).
    pub nonce: Amount,
    /// The subscriber's next permit nonce (`Token.nonces` of the plan's token).
    pub permit_nonce: Amount,
    /// The subscriber's current allowance to the subscriptions contract.
    pub allowance: Amount,
    /// The chain's clock (unix seconds), to set deadlines against.
    pub now: u64,
}

/// `POST /subscriptions/{id}/usage` (provider API key): deducts metered usage from the
/// subscription's overage allowance for the current cycle (the spec's `deductAllowance`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeductRequest {
    /// Network name; default: the facilitator's only network with a subscriptions contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// The amount, in the token's smallest unit (positive).
    pub amount: Amount,
    /// Makes a retried deduction count once: the same key for the same subscription answers
    /// the first deduction's result (1 to 200 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub idempotency_key: Option<String>,
}

/// A subscription's overage allowance in its current cycle, as the facilitator's usage ledger
/// holds it: the answer to a deduction and to `GET /subscriptions/{id}/usage`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllowanceUsage {
    /// The subscription id.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub subscription_id: B256,
    /// The billing cycle the usage counts against.
    pub cycle: u32,
    /// The cap per cycle (`maxOverage`).
    pub cap: Amount,
    /// Deducted this cycle (the ledger).
    pub used: Amount,
    /// What may still be deducted this cycle (`cap - used`); zero means exhausted.
    pub remaining: Amount,
    /// Charged on-chain this cycle (`chargeOverage` confirmed).
    pub charged: Amount,
    /// Deducted but not yet charged on-chain (charged in batches, and at the end of the cycle).
    pub unsettled: Amount,
    /// Charges that failed on-chain (the subscriber could not pay); owed, not collected.
    pub unpaid: Amount,
}

/// `POST /subscriptions/{id}/allowance`: raises the overage cap with the subscriber's EIP-712
/// `Action` signature (action 4, `value` = the new cap), relayed as `raiseAllowanceWithSig`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RaiseAllowanceRequest {
    /// Network name.
    pub network: String,
    /// The new cap per cycle; must exceed the current one.
    pub max_overage: Amount,
    /// Unix seconds; the signature is valid until then (inclusive).
    pub deadline: u64,
    /// The subscriber's 65-byte `Action` signature.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
}

/// The query of `GET /subscriptions/quote`. `planId` and `subscriber` travel as text so that
/// the facilitator can name the one that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuoteQuery {
    /// Network name; default: the facilitator's only network with a subscriptions contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// The plan (0x-hex, 32 bytes).
    #[cfg_attr(feature = "openapi", param(value_type = crate::openapi::Hash32))]
    pub plan_id: String,
    /// The subscriber's address.
    #[cfg_attr(feature = "openapi", param(value_type = crate::openapi::Address))]
    pub subscriber: String,
}

impl QuoteQuery {
    /// The quote of `plan_id` for `subscriber` on `network`.
    pub fn new(network: Option<String>, plan_id: B256, subscriber: Address) -> Self {
        Self {
            network,
            plan_id: plan_id.to_string(),
            subscriber: subscriber.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribe_request_round_trips_with_the_spec_field_names() {
        let json = serde_json::json!({
            "network": "base-sepolia",
            "planId": format!("0x{}", "11".repeat(32)),
            "subscriber": "0x2222222222222222222222222222222222222222",
            "maxOverage": "250000",
            "deadline": 1_800_000_000u64,
            "signature": "0x1234",
            "permit": { "value": "9000000", "deadline": 1_800_000_000u64, "signature": "0x" }
        });
        let req: SubscribeRequest = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(req.max_overage, Amount::from_units(250_000));
        assert_eq!(serde_json::to_value(&req).unwrap(), json);
        let mut extra = json;
        extra["extra"] = serde_json::json!(1);
        assert!(serde_json::from_value::<SubscribeRequest>(extra).is_err());
    }

    #[test]
    fn status_is_screaming_snake_case() {
        assert_eq!(
            serde_json::to_value(SubscriptionStatus::Active).unwrap(),
            "ACTIVE"
        );
        assert_eq!(
            serde_json::from_value::<SubscriptionStatus>("CANCELLED".into()).unwrap(),
            SubscriptionStatus::Cancelled
        );
    }
}
