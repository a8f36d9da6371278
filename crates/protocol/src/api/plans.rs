//! Plans published through the facilitator with a provider's API key: `POST /plans`,
//! `GET /plans/{id}?network=`, `POST /plans/{id}/deprecate?network=`.

use alloy::primitives::{Address, B256};
use serde::{Deserialize, Serialize};

use crate::{Amount, Network};

/// The default billing interval: 30 days, in seconds.
pub const DEFAULT_INTERVAL: u64 = 30 * 24 * 3600;

/// The body of `POST /plans`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreatePlanRequest {
    /// The network the plan lives on.
    pub network: Network,
    /// The amount billed per cycle, in the token's smallest unit.
    pub amount: Amount,
    /// The cycle length in seconds (default [`DEFAULT_INTERVAL`]).
    #[serde(default = "default_interval")]
    pub interval: u64,
    /// Who is paid (default: the provider's own address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Address>))]
    pub pay_to: Option<Address>,
    /// Makes retries safe: the same key (1 to 200 bytes) returns the same plan.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub idempotency_key: String,
}

fn default_interval() -> u64 {
    DEFAULT_INTERVAL
}

/// A plan as the plans API shows it: its on-chain terms, its network and its provider.
/// (The quote's [`crate::PlanView`] is the contract's view, keyed `id`.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The plan id.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Hash32))]
    pub plan_id: B256,
    /// Its network.
    pub network: Network,
    /// The payment token.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub token: Address,
    /// The payment recipient.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub pay_to: Address,
    /// The amount billed per cycle.
    pub amount: Amount,
    /// The cycle length in seconds.
    pub interval: u64,
    /// Whether it refuses new subscriptions.
    pub deprecated: bool,
    /// The provider that created it through this facilitator, else its on-chain creator.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Address))]
    pub provider: Address,
}

/// The query of the calls that name a network, optional when the facilitator serves one:
/// `GET /plans/{id}`, `POST /plans/{id}/deprecate`, `GET /subscriptions/{id}`,
/// `GET /subscriptions/{id}/usage`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(deny_unknown_fields)]
pub struct NetworkQuery {
    /// The network name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_request_defaults_the_interval_and_omits_pay_to() {
        let req: CreatePlanRequest = serde_json::from_value(serde_json::json!({
            "network": "base", "amount": "5000000", "idempotencyKey": "k"
        }))
        .unwrap();
        assert_eq!(req.interval, DEFAULT_INTERVAL);
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            serde_json::json!({
                "network": "base", "amount": "5000000", "interval": DEFAULT_INTERVAL,
                "idempotencyKey": "k"
            })
        );
    }
}
