//! [`Agent::subscribe`]: the spec's subscription flow from the subscriber's side.

use alloy::primitives::{B256, U256};
use tollgate_chain::authorization::{
    Permit, Subscribe as SubscribeIntent, sign, subscriptions_domain, token_domain,
};
use tollgate_protocol::{
    Amount, ApiErrorCode, PermitSignature, PlanView, QuoteQuery, SubscribeRequest,
    SubscriptionQuote, SubscriptionStatus, SubscriptionView, api::discovery::NetworkInfo,
};

use crate::{Agent, Error, Result, facilitator, state::PlanKey};

/// How many cycles (plan amount plus the overage cap each) the standing EIP-2612 permit covers.
///
/// The permit sets the subscriptions contract's allowance, which renewals and overage charges
/// draw on; the contract never pulls more than `amount + maxOverage` per cycle whatever the
/// allowance, so the allowance only bounds how long renewals run before the agent must sign
/// again. Twelve cycles (a year of monthly plans) is the trade-off: renewals need no attention
/// for a year, and a compromised contract could reach at most a year's worth. The permit adds to
/// the current allowance (which other subscriptions may be drawing on) rather than replacing it.
pub const PERMIT_CYCLES: u64 = 12;
/// How long the `Subscribe` intent is valid (seconds after the chain's clock).
const INTENT_VALIDITY_SECS: u64 = 600;
/// How long the permit is valid.
const PERMIT_VALIDITY_SECS: u64 = 3600;

/// What [`Agent::subscribe`] subscribes to.
///
/// ```
/// use tollgate_agent::{Amount, Subscribe};
/// # let plan_id = Default::default();
/// let subscribe = Subscribe {
///     plan_id,
///     max_overage: Amount::from_units(250_000),
///     ..Default::default()
/// }
/// .facilitator("https://facilitator.example");
/// assert_eq!(subscribe.facilitator.as_deref(), Some("https://facilitator.example"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subscribe {
    /// The plan (its on-chain id).
    pub plan_id: B256,
    /// The overage cap per cycle, in the token's smallest unit.
    pub max_overage: Amount,
    /// The facilitator's base URL; default: the agent's only configured facilitator
    /// ([`AgentBuilder::facilitators`](crate::AgentBuilder::facilitators)).
    pub facilitator: Option<String>,
    /// The network; default: the facilitator's only network with a subscriptions contract.
    pub network: Option<String>,
}

impl Subscribe {
    /// Subscribes to `plan_id` with an overage cap of `max_overage` per cycle.
    pub fn new(plan_id: B256, max_overage: Amount) -> Self {
        Self {
            plan_id,
            max_overage,
            ..Self::default()
        }
    }
}

crate::facilitator_and_network!(Subscribe);

/// A subscription, as confirmed on-chain.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Subscription {
    /// Its id (what `X-Service-Sub` carries).
    pub id: B256,
    /// Its state.
    pub status: SubscriptionStatus,
    /// The plan.
    pub plan_id: B256,
    /// Unix seconds: the end of the paid period.
    pub paid_through: u64,
    /// The overage cap per cycle.
    pub allowance_cap: Amount,
    /// What may still be charged this cycle.
    pub allowance_remaining: Amount,
    /// The transaction that created it, when known.
    pub tx_hash: Option<B256>,
}

impl From<SubscriptionView> for Subscription {
    fn from(v: SubscriptionView) -> Self {
        Self {
            id: v.id,
            status: v.status,
            plan_id: v.plan_id,
            paid_through: v.paid_through,
            allowance_cap: v.allowance.cap,
            allowance_remaining: v.allowance.remaining,
            tx_hash: v.tx_hash,
        }
    }
}

impl Agent {
    /// Subscribes to a plan (the spec's subscription flow).
    ///
    /// 1. Read the facilitator's `/.well-known/tollgate` (chain id, token and its EIP-712 domain,
    ///    subscriptions contract) and `GET /subscriptions/quote` (the plan's terms, the
    ///    agent's nonces and current allowance, the chain's clock).
    /// 2. Apply the [`SpendPolicy`](crate::SpendPolicy): the first cycle's `amount` must pass the
    ///    network, token and payee allow-lists and the cap per cycle
    ///    ([`SubscriptionPolicy::max_per_cycle`](crate::SubscriptionPolicy::max_per_cycle); by
    ///    default, and with [`SpendPolicy::no_subscriptions`](crate::SpendPolicy::no_subscriptions),
    ///    the total budget; never the per-request cap), and is reserved in the budget. A deprecated plan is
    ///    [`Error::PlanDeprecated`] here, before anything is signed.
    /// 3. Sign an EIP-2612 permit to the subscriptions contract (current allowance plus
    ///    [`PERMIT_CYCLES`] × (`amount` + `max_overage`)) and the `Subscribe` intent.
    /// 4. `POST /subscriptions`; the facilitator relays `subscribeWithSig` and answers after
    ///    confirmation, with the first cycle billed.
    ///
    /// `InsufficientFunds` and `PlanDeprecated` from the facilitator come back as
    /// [`Error::InsufficientFunds`] and [`Error::PlanDeprecated`]; nothing was created then.
    ///
    /// The agent holds the subscription from then on: [`Agent::pay`] serves the plan's requests
    /// on it (with [`SpendPolicy::subscriptions`](crate::SpendPolicy::subscriptions)), and its
    /// state file remembers it ([`AgentBuilder::state_file`](crate::AgentBuilder::state_file)).
    pub async fn subscribe(&self, subscribe: Subscribe) -> Result<Subscription> {
        let created = self.subscribe_inner(subscribe).await?;
        self.inner
            .held
            .hold(&created.key, created.subscription.id)
            .await;
        Ok(created.subscription)
    }

    /// [`Agent::subscribe`], with the plan as the quote gave it.
    pub(crate) async fn subscribe_inner(&self, subscribe: Subscribe) -> Result<Created> {
        let base = self.subscription_facilitator(subscribe.facilitator.as_deref())?;
        let (network, info) = self
            .subscription_network(&base, subscribe.network.as_deref())
            .await?;
        let quote = self
            .quote(&base, &network, &info, subscribe.plan_id)
            .await?;
        let plan = &quote.plan;
        if plan.deprecated {
            return Err(Error::PlanDeprecated);
        }
        let policy = &self.inner.policy;
        // The budget first: the default cap per cycle is the budget itself, and a plan over
        // what is left of it is refused as that.
        let reservation = self
            .inner
            .budget
            .reserve(plan.amount)
            .map_err(|what| Error::PolicyViolation { what })?;
        policy
            .check_capped(
                &network,
                plan.token,
                plan.pay_to,
                plan.amount,
                policy.cycle_cap(),
            )
            .map_err(|what| Error::PolicyViolation { what })?;

        let per_cycle = plan
            .amount
            .get()
            .saturating_add(subscribe.max_overage.get());
        let permit_value = quote
            .allowance
            .get()
            .saturating_add(per_cycle.saturating_mul(U256::from(PERMIT_CYCLES)));
        let permit = Permit {
            owner: self.inner.address,
            spender: quote.subscriptions,
            value: permit_value,
            nonce: quote.permit_nonce.get(),
            deadline: U256::from(quote.now + PERMIT_VALIDITY_SECS),
        };
        let token = token_domain(
            info.token_name.clone(),
            info.token_version.clone(),
            info.chain_id,
            info.token,
        );
        let permit_signature = sign(&self.inner.signer, &permit, &token).map_err(Error::Signing)?;
        let deadline = quote.now + INTENT_VALIDITY_SECS;
        let intent = SubscribeIntent {
            planId: plan.id,
            subscriber: self.inner.address,
            maxOverage: subscribe.max_overage.get(),
            nonce: quote.nonce.get(),
            deadline: U256::from(deadline),
        };
        let domain = subscriptions_domain(info.chain_id, quote.subscriptions);
        let signature = sign(&self.inner.signer, &intent, &domain).map_err(Error::Signing)?;
        let key = PlanKey {
            facilitator: base.clone(),
            network: network.clone(),
            plan_id: plan.id,
        };
        let body = SubscribeRequest {
            network: network.parse()?,
            plan_id: plan.id,
            subscriber: self.inner.address,
            max_overage: subscribe.max_overage,
            deadline,
            signature,
            permit: PermitSignature {
                value: Amount(permit_value),
                deadline: quote.now + PERMIT_VALIDITY_SECS,
                signature: permit_signature,
            },
        };
        // The same signed intent until answered: the facilitator returns the subscription it
        // created for it, so a crash or a lost answer never leads to a second one.
        let client = self.facilitator_client(&base)?;
        let posted = facilitator::until_answered(
            "/subscriptions",
            std::time::Instant::now() + self.inner.settle_timeout,
            || client.subscribe(&body),
        )
        .await;
        let view = match posted.result {
            Ok(view) => view,
            Err(e) if e.transport().is_some() => {
                if !posted.never_sent {
                    // Perhaps created: keep the budget reserved rather than spend it twice.
                    reservation.commit();
                }
                return Err(facilitator::error_from(e));
            }
            Err(e @ tollgate_client::Error::Decode { status: 200, .. }) => {
                reservation.commit();
                return Err(subscription_error(e));
            }
            Err(e) => {
                // Refused: nothing was created, the reservation is released.
                return Err(subscription_error(e));
            }
        };
        reservation.commit();
        if view.plan_id != plan.id || view.subscriber != self.inner.address {
            return Err(Error::Facilitator {
                status: 0,
                code: "WrongSubscription".into(),
                message: format!(
                    "the facilitator answered subscription {} of another plan or subscriber",
                    view.id
                ),
            });
        }
        Ok(Created {
            subscription: view.into(),
            plan: quote.plan,
            key,
        })
    }

    /// The network to subscribe on at `base`: the one asked for, if it has a subscriptions
    /// contract, or the facilitator's only network with one.
    pub(crate) async fn subscription_network(
        &self,
        base: &str,
        asked: Option<&str>,
    ) -> Result<(String, NetworkInfo)> {
        let wk = self.well_known(base).await?;
        match asked {
            Some(name) => wk
                .network(name)
                .filter(|i| i.subscriptions.is_some())
                .map(|i| (name.to_owned(), i.clone())),
            None => wk
                .only_subscription_network()
                .map(|(n, i)| (n.to_owned(), i.clone())),
        }
        .ok_or_else(|| Error::NoSubscriptionNetwork {
            network: asked.unwrap_or("any network").to_owned(),
        })
    }

    /// `GET /subscriptions/{id}?network=`: the subscription as the chain holds it.
    pub(crate) async fn subscription_view(
        &self,
        base: &str,
        network: &str,
        id: B256,
    ) -> Result<SubscriptionView> {
        let view = self
            .facilitator_client(base)?
            .subscription(id, Some(network))
            .await
            .map_err(|e| {
                if e.status() == Some(404) {
                    Error::UnknownSubscription { id }
                } else {
                    subscription_error(e)
                }
            })?;
        if view.id != id {
            return Err(Error::Facilitator {
                status: 0,
                code: "WrongSubscription".into(),
                message: format!("asked for subscription {id}, got {}", view.id),
            });
        }
        Ok(view)
    }

    /// The facilitator to subscribe through: the one given (which must be among the configured
    /// ones, if any are), or the only configured one.
    pub(crate) fn subscription_facilitator(&self, given: Option<&str>) -> Result<String> {
        let configured = self.inner.facilitators.as_deref();
        match (given.map(|g| g.trim_end_matches('/')), configured) {
            (Some(g), Some(list)) if !list.iter().any(|f| f == g) => Err(Error::NoFacilitator),
            (Some(g), _) => Ok(g.to_owned()),
            (None, Some([only])) => Ok(only.clone()),
            (None, _) => Err(Error::NoFacilitator),
        }
    }

    /// `GET /subscriptions/quote`, checked against the facilitator's published network.
    pub(crate) async fn quote(
        &self,
        base: &str,
        network: &str,
        info: &NetworkInfo,
        plan_id: B256,
    ) -> Result<SubscriptionQuote> {
        let quote = self
            .facilitator_client(base)?
            .quote(&QuoteQuery::new(
                Some(network.parse()?),
                plan_id,
                self.inner.address,
            ))
            .await
            .map_err(subscription_error)?;
        let mismatch = |what: &str| Error::Facilitator {
            status: 0,
            code: "InconsistentQuote".into(),
            message: format!("the quote's {what} differs from /.well-known/tollgate"),
        };
        if quote.chain_id != info.chain_id {
            return Err(mismatch("chain id"));
        }
        if Some(quote.subscriptions) != info.subscriptions {
            return Err(mismatch("subscriptions contract"));
        }
        if quote.plan.id != plan_id {
            return Err(mismatch("plan"));
        }
        if quote.plan.token != info.token {
            // The permit is signed under the token's EIP-712 domain, which only the facilitator's
            // own token is published with.
            return Err(Error::Facilitator {
                status: 0,
                code: "UnsupportedToken".into(),
                message: format!(
                    "plan {plan_id} is paid in {}, not {}",
                    quote.plan.token, info.token
                ),
            });
        }
        Ok(quote)
    }
}

/// A subscription as [`Agent::subscribe`] created it, with the plan's on-chain terms.
#[derive(Debug)]
pub(crate) struct Created {
    /// The subscription.
    pub(crate) subscription: Subscription,
    /// The plan, as quoted.
    pub(crate) plan: PlanView,
    /// Where it serves.
    pub(crate) key: PlanKey,
}

/// The typed error of a refused subscription call: the spec's `PlanDeprecated`,
/// `SubscriptionNotActive` and `InsufficientFunds` by name, anything else as the agent's
/// facilitator error ([`facilitator::error_from`]).
pub(crate) fn subscription_error(e: tollgate_client::Error) -> Error {
    match e.code() {
        Some(ApiErrorCode::PlanDeprecated) => Error::PlanDeprecated,
        Some(ApiErrorCode::SubscriptionNotActive) => Error::SubscriptionNotActive,
        _ => facilitator::error_from(e),
    }
}
