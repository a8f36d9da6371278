//! [`Agent::raise_allowance`]: lifting a subscription's overage cap (the spec's resolution of
//! `AllowanceExhausted`).

use std::time::{Duration, Instant};

use alloy::primitives::{B256, U256};
use tollgate_chain::authorization::{Action, ActionKind, sign, subscriptions_domain};
use tollgate_client::FacilitatorClient;
use tollgate_protocol::{
    Amount, ApiErrorCode, RaiseAllowanceRequest, SubscriptionStatus, SubscriptionView,
};

use crate::{Agent, Error, Result, Subscription, facilitator, subscribe::subscription_error};

/// How long the `Action` signature is valid (seconds after the chain's clock).
const ACTION_VALIDITY_SECS: u64 = 600;

/// What [`Agent::raise_allowance`] raises.
///
/// ```
/// use tollgate_agent::{Amount, RaiseAllowance};
/// # let subscription_id = Default::default();
/// let raise = RaiseAllowance::new(subscription_id, Amount::from_units(1_000_000))
///     .facilitator("https://facilitator.example");
/// assert_eq!(raise.max_overage, Amount::from_units(1_000_000));
/// assert_eq!(raise.facilitator.as_deref(), Some("https://facilitator.example"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaiseAllowance {
    /// The subscription (one of this agent's).
    pub subscription_id: B256,
    /// The new overage cap per cycle, in the token's smallest unit; must exceed the current one.
    pub max_overage: Amount,
    /// The facilitator's base URL; default: the agent's only configured facilitator
    /// ([`AgentBuilder::facilitators`](crate::AgentBuilder::facilitators)).
    pub facilitator: Option<String>,
    /// The network; default: the facilitator's only network with a subscriptions contract.
    pub network: Option<String>,
}

impl RaiseAllowance {
    /// Raises subscription `subscription_id`'s overage cap to `max_overage` per cycle.
    pub fn new(subscription_id: B256, max_overage: Amount) -> Self {
        Self {
            subscription_id,
            max_overage,
            ..Self::default()
        }
    }
}

crate::facilitator_and_network!(RaiseAllowance);

impl Agent {
    /// Raises the overage cap of one of this agent's subscriptions (what to do when a metered
    /// route answers [`Error::AllowanceExhausted`]).
    ///
    /// 1. `GET /subscriptions/{id}` from the facilitator: the subscription must exist
    ///    ([`Error::UnknownSubscription`]), be this agent's ([`Error::NotSubscriber`]) and not
    ///    be cancelled ([`Error::SubscriptionNotActive`]), and `max_overage` must exceed its
    ///    current cap ([`Error::AllowanceNotRaised`]). Nothing is signed otherwise.
    /// 2. Reserve the increase (new cap − current cap) in the budget: a raised cap is more the
    ///    provider may charge, so the [`SpendPolicy`](crate::SpendPolicy)'s total budget bounds
    ///    it ([`Error::PolicyViolation`]).
    /// 3. `GET /subscriptions/quote` for the agent's nonce and the chain's clock; sign the
    ///    EIP-712 `Action` (raise allowance, value = the new cap, valid for ten minutes) under
    ///    the subscriptions contract's domain.
    /// 4. `POST /subscriptions/{id}/allowance`; the facilitator relays `raiseAllowanceWithSig`
    ///    and answers after confirmation. While it answers `Pending` (503) or the answer times
    ///    out, the same signed request is sent again within
    ///    [`AgentBuilder::settle_timeout`](crate::AgentBuilder::settle_timeout): the facilitator
    ///    answers a cap already raised to this value without a transaction.
    ///
    /// The reservation is released when the facilitator refuses the raise (4xx: the contract's
    /// `AllowanceNotRaised` as [`Error::AllowanceNotRaised`], `SubscriptionNotActive`,
    /// `InvalidSignature`, … as [`Error::Facilitator`]) or could not be reached; once the
    /// signature may have been relayed (success, a timeout, a 5xx), it counts as spent.
    ///
    /// ```no_run
    /// use tollgate_agent::{Agent, Amount, Error, PayRequest, RaiseAllowance, SpendPolicy};
    ///
    /// # async fn run(agent: Agent, subscription_id: tollgate_agent::B256)
    /// # -> Result<(), Error> {
    /// let request = PayRequest::post("https://api.example.com/v1/process", "{}")?;
    /// match agent.pay(request.clone()).await {
    ///     Err(Error::AllowanceExhausted) => {
    ///         let raise = RaiseAllowance::new(subscription_id, Amount::from_units(2_000_000));
    ///         let raised = agent.raise_allowance(raise).await?;
    ///         assert_eq!(raised.allowance_cap, Amount::from_units(2_000_000));
    ///         agent.pay(request).await?;
    ///     }
    ///     other => {
    ///         other?;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn raise_allowance(&self, raise: RaiseAllowance) -> Result<Subscription> {
        let id = raise.subscription_id;
        let requested = raise.max_overage;
        let base = self.subscription_facilitator(raise.facilitator.as_deref())?;
        let (network, info) = self
            .subscription_network(&base, raise.network.as_deref())
            .await?;
        let view = self.subscription_view(&base, &network, id).await?;
        if view.subscriber != self.inner.address {
            return Err(Error::NotSubscriber {
                id,
                subscriber: view.subscriber,
            });
        }
        if view.status == SubscriptionStatus::Cancelled {
            return Err(Error::SubscriptionNotActive);
        }
        let cap = view.allowance.cap;
        if requested <= cap {
            return Err(Error::AllowanceNotRaised { cap, requested });
        }
        let reservation = self
            .inner
            .budget
            .reserve(Amount(requested.get() - cap.get()))
            .map_err(|what| Error::PolicyViolation { what })?;

        let quote = self.quote(&base, &network, &info, view.plan_id).await?;
        let deadline = quote.now + ACTION_VALIDITY_SECS;
        let action = Action::new(
            id,
            ActionKind::RaiseAllowance,
            requested.get(),
            quote.nonce.get(),
            U256::from(deadline),
        );
        let domain = subscriptions_domain(info.chain_id, quote.subscriptions);
        let signature = sign(&self.inner.signer, &action, &domain).map_err(Error::Signing)?;
        let body = RaiseAllowanceRequest {
            network: network.parse()?,
            max_overage: requested,
            deadline,
            signature,
        };

        let client = self.facilitator_client(&base)?;
        let raised = match self.post_raise(&client, id, &body).await {
            Ok(raised) => {
                reservation.commit();
                raised
            }
            Err((e, _)) if e.is_refusal() => {
                // Refused: nothing was raised, the reservation is released.
                let status = e.status();
                return Err(match subscription_error(e) {
                    Error::Facilitator {
                        code: ApiErrorCode::AllowanceNotRaised,
                        ..
                    } => Error::AllowanceNotRaised { cap, requested },
                    Error::Facilitator { code, .. }
                        if code == ApiErrorCode::UnknownSubscription || status == Some(404) =>
                    {
                        Error::UnknownSubscription { id }
                    }
                    other => other,
                });
            }
            Err((e, _)) if e.status().is_some() => {
                // An answer that does not say whether the raise was relayed.
                reservation.commit();
                return Err(subscription_error(e));
            }
            Err((e, sent)) => {
                if sent {
                    reservation.commit();
                }
                return Err(facilitator::error_from(e));
            }
        };
        if raised.id != id
            || raised.subscriber != self.inner.address
            || raised.allowance.cap < requested
        {
            return Err(Error::Facilitator {
                status: 0,
                code: "WrongSubscription".into(),
                message: format!(
                    "asked to raise {id} to {requested}, the facilitator answered {} with cap {}",
                    raised.id, raised.allowance.cap
                ),
            });
        }
        tracing::info!(%id, from = %cap, to = %raised.allowance.cap, "allowance raised");
        Ok(raised.into())
    }

    /// Posts the signed raise, again while the facilitator answers `Pending` or the answer times
    /// out. On failure, says whether the request may have reached the facilitator.
    async fn post_raise(
        &self,
        client: &FacilitatorClient,
        id: B256,
        body: &RaiseAllowanceRequest,
    ) -> Result<SubscriptionView, (tollgate_client::Error, bool)> {
        let started = Instant::now();
        let mut delay = Duration::ZERO;
        let mut sent = false;
        loop {
            let outcome = client.raise_allowance(id, body).await;
            let again = match &outcome {
                Ok(_) => {
                    sent = true;
                    false
                }
                Err(e) => {
                    sent |= !e.never_sent();
                    (e.status() == Some(503) && e.code() == Some(&ApiErrorCode::Pending))
                        || e.transport().is_some_and(reqwest::Error::is_timeout)
                }
            };
            delay = facilitator::backoff(delay);
            if !again || started.elapsed() + delay > self.inner.settle_timeout {
                return outcome.map_err(|e| (e, sent));
            }
            tracing::debug!(%id, "allowance raise pending; sending it again");
            tokio::time::sleep(delay).await;
        }
    }
}
