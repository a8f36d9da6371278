//! The subscription relay's messages: the client-signed `POST /subscriptions` body, the
//! subscription as the facilitator reports it (`GET /subscriptions/{id}?network=`), the quote
//! an agent signs against (`GET /subscriptions/quote`), metered usage
//! (`POST`/`GET /subscriptions/{id}/usage`), allowance raises
//! (`POST /subscriptions/{id}/allowance`), the subscriber's gasless lifecycle
//! (`POST /subscriptions/{id}/pause`, `/resume`, `/cancel`) and the listing of a subscriber's
//! subscriptions (`GET /subscriptions?subscriber=`).

use alloy::primitives::{Address, B256, Bytes};
use serde::{Deserialize, Serialize};

use crate::{Amount, Network};

/// The body of `POST /subscriptions`: a `Subscribe` intent (EIP-712, under the subscriptions
/// contract's domain) and the EIP-2612 permit that grants the contract its standing allowance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeRequest {
    /// Network name.
    pub network: Network,
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
///
/// `remaining` is the same number `GET /subscriptions/{id}/usage` answers: what may still be
/// *deducted* this cycle, by the facilitator's usage ledger. The contract's
/// `remainingAllowance` lags it (it counts only the overage already charged on-chain, and usage
/// is charged in batches), so the view takes the larger of the ledger's and the chain's usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllowanceView {
    /// The cap per cycle (`maxOverage`).
    pub cap: Amount,
    /// What may still be deducted this cycle (`cap` minus the cycle's usage, charged or not).
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
    pub network: Network,
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
    pub network: Option<Network>,
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
    pub network: Network,
    /// The new cap per cycle; must exceed the current one.
    pub max_overage: Amount,
    /// Unix seconds; the signature is valid until then (inclusive).
    pub deadline: u64,
    /// The subscriber's 65-byte `Action` signature.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
}

/// A subscriber's gasless lifecycle action: `POST /subscriptions/{id}/pause`, `/resume` or
/// `/cancel`, relayed as the contract's `pauseWithSig`, `resumeWithSig` or `cancelWithSig`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubscriberAction {
    /// ACTIVE → PAUSED: gates refuse it (`SubscriptionNotActive`); renewals stop.
    Pause,
    /// PAUSED → ACTIVE; when the paid period has ended, a new cycle is billed first.
    Resume,
    /// ACTIVE or PAUSED → CANCELLED, for good (subscribe again for a new subscription).
    Cancel,
}

impl SubscriberAction {
    /// Every action.
    pub const ALL: [Self; 3] = [Self::Pause, Self::Resume, Self::Cancel];

    /// The last path segment (`pause`, `resume`, `cancel`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Cancel => "cancel",
        }
    }

    /// The contract's `Action.action` code the subscriber signs (1 pause, 2 resume, 3 cancel).
    pub fn code(self) -> u8 {
        match self {
            Self::Pause => 1,
            Self::Resume => 2,
            Self::Cancel => 3,
        }
    }

    /// The state the action leaves the subscription in.
    pub fn target(self) -> SubscriptionStatus {
        match self {
            Self::Pause => SubscriptionStatus::Paused,
            Self::Resume => SubscriptionStatus::Active,
            Self::Cancel => SubscriptionStatus::Cancelled,
        }
    }
}

impl std::fmt::Display for SubscriberAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of `POST /subscriptions/{id}/pause`, `/resume` and `/cancel`: the subscriber's
/// EIP-712 `Action` signature under the subscriptions contract's domain
/// (`Action(bytes32 id,uint8 action,uint256 value,uint256 nonce,uint256 deadline)` with
/// `action` = [`SubscriberAction::code`], `value` = 0 and `nonce` = `Subscriptions.nonces(subscriber)`,
/// the quote's `nonce`), relayed by the facilitator (which pays the gas).
///
/// Answered after confirmation with the subscription read from the chain. Idempotent: the same
/// signed request again (its nonce since used) answers the subscription as it is, without a
/// transaction; so does an action whose target state already holds (pausing a paused one,
/// resuming an active one). Refused, changing nothing: a signature that does not recover to the
/// subscriber (422 `InvalidSignature`), a passed deadline (422 `SignatureExpired`), pausing or
/// resuming a cancelled subscription, and cancelling one already cancelled by another signature
/// (409 `SubscriptionNotActive`: cancelled is final; subscribe again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionRequest {
    /// Network name.
    pub network: Network,
    /// Unix seconds (the chain's clock); the signature is valid until then (inclusive).
    pub deadline: u64,
    /// The subscriber's 65-byte `Action` signature (`r ‖ s ‖ v`).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::HexBytes))]
    pub signature: Bytes,
}

/// How far ahead of the chain's clock a listing signature's deadline may be, in seconds.
pub const LIST_MAX_VALIDITY_SECS: u64 = 600;

/// The query of `GET /subscriptions`: the subscriptions of one subscriber, for that subscriber
/// only.
///
/// **Authentication.** The subscriber signs, with EIP-191 `personal_sign`, the text
/// [`ListSubscriptionsQuery::message`] builds from its address, the network's chain id and
/// subscriptions contract (as `/.well-known/tollgate` publishes them) and a deadline at most
/// [`LIST_MAX_VALIDITY_SECS`] ahead of the chain's clock. The facilitator answers only when the
/// signature recovers to `subscriber` and the deadline has not passed (401 `Unauthorized`,
/// 422 `SignatureExpired` or `DeadlineTooFar` otherwise). The signature moves no money and
/// is bound to one chain and contract; it travels in the query and may be reused until its
/// deadline, so keep deadlines short.
///
/// **Completeness.** The facilitator reads the contract's `SubscriptionCreated` logs for the
/// subscriber (its index up to its keeper's cursor, the chain's logs from there on), so the list
/// holds every subscription of the subscriber on that contract, also those relayed by others or
/// sent directly, and also when its keeper is off. Each is read from the chain; the answer is
/// an array of [`SubscriptionView`]s, every state, sorted by id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListSubscriptionsQuery {
    /// Network name; default: the facilitator's only network with a subscriptions contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// The subscriber's address.
    #[cfg_attr(feature = "openapi", param(value_type = crate::openapi::Address))]
    pub subscriber: String,
    /// Unix seconds (the chain's clock); the signature is valid until then (inclusive).
    pub deadline: u64,
    /// The subscriber's 65-byte `personal_sign` signature of
    /// [`ListSubscriptionsQuery::message`], 0x-hex.
    #[cfg_attr(feature = "openapi", param(value_type = crate::openapi::HexBytes))]
    pub signature: String,
}

impl ListSubscriptionsQuery {
    /// The query listing `subscriber`'s subscriptions on `network` with `signature` (of
    /// [`ListSubscriptionsQuery::message`]) valid until `deadline`.
    pub fn new(
        network: Option<Network>,
        subscriber: Address,
        deadline: u64,
        signature: &Bytes,
    ) -> Self {
        Self {
            network,
            subscriber: subscriber.to_string(),
            deadline,
            signature: signature.to_string(),
        }
    }

    /// The text the subscriber signs (EIP-191 `personal_sign`) to list its subscriptions on the
    /// subscriptions contract `subscriptions` of chain `chain_id`, valid until `deadline`
    /// (unix seconds). Addresses are checksummed:
    ///
    /// ```text
    /// Tollgate: list the subscriptions of 0xAbC…
    /// chain id: 84532
    /// subscriptions contract: 0xDeF…
    /// valid until: 1800000000
    /// ```
    pub fn message(
        subscriber: Address,
        chain_id: u64,
        subscriptions: Address,
        deadline: u64,
    ) -> String {
        format!(
            "Tollgate: list the subscriptions of {subscriber}\nchain id: {chain_id}\n\
             subscriptions contract: {subscriptions}\nvalid until: {deadline}"
        )
    }
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
    pub network: Option<Network>,
    /// The plan (0x-hex, 32 bytes).
    #[cfg_attr(feature = "openapi", param(value_type = crate::openapi::Hash32))]
    pub plan_id: String,
    /// The subscriber's address.
    #[cfg_attr(feature = "openapi", param(value_type = crate::openapi::Address))]
    pub subscriber: String,
}

impl QuoteQuery {
    /// The quote of `plan_id` for `subscriber` on `network`.
    pub fn new(network: Option<Network>, plan_id: B256, subscriber: Address) -> Self {
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
    fn action_request_and_listing_have_the_documented_shapes() {
        let json = serde_json::json!({
            "network": "base-sepolia", "deadline": 1_800_000_000u64, "signature": "0x1234"
        });
        let req: ActionRequest = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&req).unwrap(), json);
        assert_eq!(
            SubscriberAction::ALL.map(|a| (a.as_str(), a.code())),
            [("pause", 1), ("resume", 2), ("cancel", 3)]
        );
        let subscriber: Address = "0x2222222222222222222222222222222222222222"
            .parse()
            .unwrap();
        let contract = Address::repeat_byte(0xab);
        assert_eq!(
            ListSubscriptionsQuery::message(subscriber, 84532, contract, 1_800_000_000),
            "Tollgate: list the subscriptions of 0x2222222222222222222222222222222222222222\n\
             chain id: 84532\nsubscriptions contract: 0xABaBaBaBABabABabAbAbABAbABabababaBaBABaB\n\
             valid until: 1800000000"
        );
        let q = ListSubscriptionsQuery::new(None, subscriber, 7, &Bytes::from(vec![1, 2]));
        assert_eq!(q.signature, "0x0102");
        assert_eq!(q.subscriber, "0x2222222222222222222222222222222222222222");
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
