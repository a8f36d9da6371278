//! [`Agent::pay`] on a subscription: the plan a 402 offers, the subscriptions the agent holds,
//! and `X-Service-Sub`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use alloy::primitives::B256;
use reqwest::StatusCode;
use tollgate_protocol::{Amount, ErrorCode, SubscriptionStatus, x402::SCHEME_EXACT};

use crate::{
    Agent, Error, PaidResponse, PayRequest, Payment, PaymentKind, RaiseAllowance, Result,
    Subscribe,
    agent::spec_code,
    state::{PlanKey, StateFile},
    subscribe::Created,
    terms::{Offer, Terms},
};

pub use tollgate_protocol::headers::X_SERVICE_SUB;

/// One plan's subscription, if the agent holds one. Its async lock is held while subscribing, so
/// concurrent payments for the plan subscribe once.
type Slot = Arc<tokio::sync::Mutex<Option<B256>>>;

/// The subscriptions an agent holds (shared by its clones): in memory, and in its state file
/// when it has one.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Per (facilitator, network, plan).
    slots: Mutex<HashMap<PlanKey, Slot>>,
    /// Given with [`Agent::use_subscription`]: per plan, on any facilitator and network.
    seeded: Mutex<HashMap<B256, B256>>,
    /// Where they are remembered across processes.
    state: Option<StateFile>,
}

impl Held {
    /// The subscriptions of `state` (none without one).
    pub(crate) fn new(state: Option<(StateFile, Vec<(PlanKey, B256)>)>) -> Self {
        let Some((state, held)) = state else {
            return Self::default();
        };
        let slots = held
            .into_iter()
            .map(|(key, id)| (key, Arc::new(tokio::sync::Mutex::new(Some(id)))))
            .collect();
        Self {
            slots: Mutex::new(slots),
            seeded: Mutex::default(),
            state: Some(state),
        }
    }

    fn slot(&self, key: &PlanKey) -> Slot {
        Arc::clone(lock(&self.slots).entry(key.clone()).or_default())
    }

    fn seeded(&self, plan_id: B256) -> Option<B256> {
        lock(&self.seeded).get(&plan_id).copied()
    }

    fn seed(&self, plan_id: B256, id: B256) {
        lock(&self.seeded).insert(plan_id, id);
    }

    /// Forgets a seeded `id` for `plan_id` (not a newer one).
    fn unseed(&self, plan_id: B256, id: B256) {
        let mut seeded = lock(&self.seeded);
        if seeded.get(&plan_id) == Some(&id) {
            seeded.remove(&plan_id);
        }
    }

    /// Writes `id` as `key`'s subscription to the state file, if any. A failure is logged, not
    /// returned: the subscription exists and serves this process all the same.
    fn persist(&self, key: &PlanKey, id: B256) {
        if let Some(state) = &self.state
            && let Err(e) = state.remember(key, id)
        {
            tracing::error!(
                error = %crate::agent::error_chain(&e), %id, plan = %key.plan_id,
                "cannot remember the subscription; a later process will not know it"
            );
        }
    }

    /// Removes `id` for `key` from the state file, if any (logged on failure).
    fn unpersist(&self, key: Option<&PlanKey>, id: B256) {
        let Some(state) = &self.state else { return };
        let done = match key {
            Some(key) => state.forget(key, id),
            None => state.forget_id(id),
        };
        if let Err(e) = done {
            tracing::error!(error = %crate::agent::error_chain(&e), %id, "cannot forget the subscription");
        }
    }

    /// Holds `id` for `key` from now on, here and in the state file.
    pub(crate) async fn hold(&self, key: &PlanKey, id: B256) {
        *self.slot(key).lock().await = Some(id);
        self.persist(key, id);
    }

    /// Stops holding `id` (cancelled), whatever plan it was held for.
    pub(crate) async fn release(&self, id: B256) {
        let slots: Vec<Slot> = lock(&self.slots).values().cloned().collect();
        for slot in slots {
            let mut held = slot.lock().await;
            if *held == Some(id) {
                *held = None;
            }
        }
        lock(&self.seeded).retain(|_, held| *held != id);
        self.unpersist(None, id);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Maps updated in one statement each: a poisoned lock still holds a valid map.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How [`Agent::pay_on_subscription`] ended.
#[derive(Debug)]
pub(crate) enum OnSubscription {
    /// The request was answered (not with a 402) on a subscription.
    Served(Box<PaidResponse>),
    /// Pay one-time instead, with these terms.
    OneTime {
        /// The terms.
        terms: Terms,
        /// The subscription created (and its first cycle paid) for this request, if one was.
        paid: Option<Box<Payment>>,
    },
}

impl Agent {
    /// Serves [`Agent::pay`]'s requests for `plan_id` on subscription `subscription_id` (one
    /// held already, e.g. created by [`Agent::subscribe`] or in an earlier process), through
    /// whatever facilitator and network a 402 offers the plan on. Only used when the policy
    /// allows subscriptions ([`SpendPolicy::subscriptions`](crate::SpendPolicy::subscriptions));
    /// forgotten if a server refuses it as `SubscriptionNotActive` and the facilitator does not
    /// report it ACTIVE.
    ///
    /// ```no_run
    /// use tollgate_agent::{Agent, Amount, PayRequest, PaymentKind, SpendPolicy};
    ///
    /// # async fn run(plan_id: tollgate_agent::B256, subscription_id: tollgate_agent::B256)
    /// # -> Result<(), tollgate_agent::Error> {
    /// let policy = SpendPolicy::new(Amount::from_units(500_000), Amount::from_units(5_000_000))
    ///     .subscriptions(Amount::from_units(5_000_000), Amount::ZERO);
    /// let agent = Agent::from_key_file("agent.key", policy)?;
    /// agent.use_subscription(plan_id, subscription_id);
    /// let response = agent.pay(PayRequest::get("https://api.example.com/v1/report")?).await?;
    /// let kind = response.payment.map(|p| p.kind);
    /// assert_eq!(kind, Some(PaymentKind::Subscription { id: subscription_id }));
    /// # Ok(()) }
    /// ```
    pub fn use_subscription(&self, plan_id: B256, subscription_id: B256) {
        self.inner.held.seed(plan_id, subscription_id);
    }

    /// The plan of `terms` to serve the request on, if the policy allows subscribing and one:
    /// the cheapest of the plans offered through a usable facilitator whose terms (when the 402
    /// gives them) pass the allow-lists and `max_per_cycle`.
    pub(crate) fn plan_offer(&self, terms: &Terms) -> Option<(PlanKey, Offer)> {
        let policy = &self.inner.policy;
        let allowed = policy.subscriptions?;
        terms
            .offers
            .iter()
            .filter_map(|offer| {
                let plan = offer.plan.as_ref()?;
                let facilitator = self.usable_facilitator(offer.facilitator.as_deref()?)?;
                let r = &offer.requirements;
                let (amount, token) = plan
                    .terms
                    .as_ref()
                    .map_or((None, r.asset), |t| (Some(t.amount), t.token));
                if let Err(refusal) = policy.check_capped(
                    &r.network,
                    token,
                    r.pay_to,
                    amount.unwrap_or(Amount::ZERO),
                    allowed.max_per_cycle,
                ) {
                    tracing::info!(plan = %plan.plan_id, %refusal, "not subscribing to the plan offered");
                    return None;
                }
                let key = PlanKey {
                    facilitator,
                    network: r.network.to_string(),
                    plan_id: plan.plan_id,
                };
                Some(((amount.is_none(), amount), key, offer))
            })
            .min_by_key(|(order, ..)| *order)
            .map(|(_, key, offer)| (key, offer.clone()))
    }

    /// Serves `request` on a subscription to `key`'s plan: the one held, or one created now.
    pub(crate) async fn pay_on_subscription(
        &self,
        request: &PayRequest,
        terms: Terms,
        key: PlanKey,
        offer: &Offer,
    ) -> Result<OnSubscription> {
        let max_overage = self
            .inner
            .policy
            .subscriptions
            .map_or(Amount::ZERO, |s| s.max_overage);
        let slot = self.inner.held.slot(&key);
        let mut created: Option<Created> = None;
        let id = {
            let mut held = slot.lock().await;
            match *held {
                Some(id) => id,
                None => match self.inner.held.seeded(key.plan_id) {
                    Some(id) => *held.insert(id),
                    None if let Some(id) = self.active_on_chain(&key).await => {
                        // Held already (a state file lost, another process's): adopted, not
                        // paid for again.
                        tracing::info!(%id, plan = %key.plan_id, "serving on a subscription found on chain");
                        self.inner.held.persist(&key, id);
                        *held.insert(id)
                    }
                    None => {
                        let subscribe = Subscribe::new(key.plan_id, max_overage)
                            .facilitator(key.facilitator.clone())
                            .network(key.network.clone());
                        match self.subscribe_inner(subscribe).await {
                            Ok(c) => {
                                let id = *held.insert(c.subscription.id);
                                self.inner.held.persist(&key, id);
                                tracing::info!(
                                    %id, plan = %key.plan_id, amount = %c.plan.amount,
                                    tx = ?c.subscription.tx_hash, "subscribed"
                                );
                                created = Some(c);
                                id
                            }
                            Err(e) if nothing_created(&e) && offers_one_time(&terms) => {
                                tracing::warn!(
                                    error = %e, plan = %key.plan_id,
                                    "cannot subscribe; paying one-time"
                                );
                                return Ok(OnSubscription::OneTime { terms, paid: None });
                            }
                            Err(e) => return Err(e),
                        }
                    }
                },
            }
        };
        let (amount, token, pay_to, tx_hash) = match &created {
            Some(c) => (
                c.plan.amount,
                c.plan.token,
                c.plan.pay_to,
                c.subscription.tx_hash,
            ),
            None => {
                let token = offer
                    .plan
                    .as_ref()
                    .and_then(|p| p.terms.as_ref())
                    .map_or(offer.requirements.asset, |t| t.token);
                (Amount::ZERO, token, offer.requirements.pay_to, None)
            }
        };
        let payment = Payment {
            kind: PaymentKind::Subscription { id },
            amount,
            fee: None,
            network: key.network.clone(),
            token,
            payer: self.inner.address,
            pay_to,
            memo: None,
            tx_hash,
            proof: None,
            header: id.to_string(),
            settlement: None,
            x402_version: None,
            retry_token: None,
            metered: None,
            mpp_receipt: None,
        };
        let mut raised = false;
        loop {
            let response = self
                .send(request, Some((X_SERVICE_SUB, &payment.header)))
                .await?;
            if response.status() != StatusCode::PAYMENT_REQUIRED {
                tracing::info!(%id, status = %response.status(), "served on a subscription");
                let paid = self.finish(response, Some(payment)).await?;
                return Ok(OnSubscription::Served(Box::new(paid)));
            }
            let retry = match self.read_terms(response).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable 402 to X-Service-Sub");
                    return Err(Error::PaymentRejected {
                        reason: "unreadable 402 body to X-Service-Sub".into(),
                        payments: vec![payment],
                    });
                }
            };
            let reason = retry.error.clone().unwrap_or_default();
            tracing::warn!(%id, %reason, "402 to X-Service-Sub");
            return match spec_code(&reason) {
                Some(ErrorCode::AllowanceExhausted) => {
                    if !raised
                        && self
                            .raise_within_policy(id, &key.facilitator, &key.network)
                            .await
                    {
                        raised = true;
                        continue;
                    }
                    Err(Error::AllowanceExhausted)
                }
                Some(ErrorCode::SubscriptionNotActive) => {
                    let active = self.forget_unless_active(&key, &slot, id).await;
                    if active && created.is_some() {
                        // Paid for this very request and ACTIVE on chain: paying one-time as
                        // well would pay twice for one request.
                        return Err(Error::PaymentRejected {
                            reason,
                            payments: vec![payment],
                        });
                    }
                    if offers_one_time(&retry) {
                        Ok(OnSubscription::OneTime {
                            terms: retry,
                            paid: created.map(|_| Box::new(payment)),
                        })
                    } else {
                        Err(Error::SubscriptionNotActive)
                    }
                }
                _ => Err(Error::PaymentRejected {
                    reason,
                    payments: vec![payment],
                }),
            };
        }
    }

    /// Serves `request`, which names its subscription itself (`X-Service-Sub`), after the server
    /// answered it with a 402 of `terms`. `AllowanceExhausted`: the cap is raised within the
    /// policy and the request sent once more. Still refused: the refusal's name, unless the
    /// request asked to fall back to a one-time payment ([`PayRequest::fallback_one_time`]);
    /// then the one-time terms to pay (the caller sends them without `X-Service-Sub`).
    pub(crate) async fn pay_on_named(
        &self,
        request: &PayRequest,
        mut terms: Terms,
    ) -> Result<OnSubscription> {
        let id = request
            .headers
            .get(X_SERVICE_SUB)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<B256>().ok());
        let mut raised = false;
        loop {
            let reason = terms.error.clone().unwrap_or_default();
            tracing::warn!(id = ?id, %reason, "402 to the X-Service-Sub the request names");
            let code = spec_code(&reason);
            if code == Some(ErrorCode::AllowanceExhausted)
                && !raised
                && let Some(id) = id
                && let Some((facilitator, network)) = self.raise_route(&terms)
                && self.raise_within_policy(id, &facilitator, &network).await
            {
                raised = true;
                let response = self.send(request, None).await?;
                if response.status() != StatusCode::PAYMENT_REQUIRED {
                    tracing::info!(%id, status = %response.status(), "served on the raised subscription");
                    let on_subscription = self.served_on_named(request, &response);
                    let paid = self.finish(response, on_subscription).await?;
                    return Ok(OnSubscription::Served(Box::new(paid)));
                }
                terms = self.read_terms(response).await?;
                continue;
            }
            let refusal = match code {
                Some(ErrorCode::SubscriptionNotActive) => Error::SubscriptionNotActive,
                Some(ErrorCode::AllowanceExhausted) => Error::AllowanceExhausted,
                _ if reason.is_empty() => Error::SubscriptionRefused {
                    reason: "402 without a reason".into(),
                },
                _ => Error::SubscriptionRefused { reason },
            };
            if !request.fallback_one_time || !offers_one_time(&terms) {
                return Err(refusal);
            }
            tracing::warn!(
                refusal = %refusal,
                "the server refuses the subscription the request names; paying one-time as asked"
            );
            return Ok(OnSubscription::OneTime { terms, paid: None });
        }
    }

    /// Where to raise a subscription named by a request whose 402 is `terms`: the first usable
    /// facilitator the terms name, and its network.
    fn raise_route(&self, terms: &Terms) -> Option<(String, String)> {
        terms.offers.iter().find_map(|o| {
            let facilitator = self.usable_facilitator(o.facilitator.as_deref()?)?;
            Some((facilitator, o.requirements.network.to_string()))
        })
    }

    /// Raises `id`'s overage cap to the policy's ceiling
    /// ([`SpendPolicy::raise_overage_to`](crate::SpendPolicy::raise_overage_to)), if it allows
    /// one above the current cap. Returns whether the cap was raised; why not is logged.
    async fn raise_within_policy(&self, id: B256, facilitator: &str, network: &str) -> bool {
        let Some(ceiling) = self.inner.policy.subscriptions.map(|s| s.overage_ceiling) else {
            return false;
        };
        let raise = RaiseAllowance::new(id, ceiling)
            .facilitator(facilitator)
            .network(network);
        match self.raise_allowance(raise).await {
            Ok(raised) => {
                tracing::info!(%id, cap = %raised.allowance_cap, "allowance exhausted; raised the cap within the policy");
                true
            }
            Err(e) => {
                tracing::warn!(
                    %id, error = %crate::agent::error_chain(&e),
                    "allowance exhausted; not raised within the policy (its ceiling is {ceiling})"
                );
                false
            }
        }
    }

    /// An ACTIVE subscription of this agent's to `key`'s plan, as the facilitator lists them;
    /// none when it lists none or cannot list them (a facilitator without the listing).
    async fn active_on_chain(&self, key: &PlanKey) -> Option<B256> {
        match self
            .subscriptions(Some(&key.facilitator), Some(&key.network))
            .await
        {
            Ok(subs) => subs
                .into_iter()
                .find(|s| s.plan_id == key.plan_id && s.status == SubscriptionStatus::Active)
                .map(|s| s.id),
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the subscriptions held");
                None
            }
        }
    }

    /// After a server refused `id` as not active: forgets it unless the facilitator reports it
    /// ACTIVE for the plan (then the server lags behind the chain, or disagrees with it, and a
    /// new subscription would be paid for nothing). Returns whether it was kept.
    async fn forget_unless_active(&self, key: &PlanKey, slot: &Slot, id: B256) -> bool {
        let keep = match self
            .subscription_view(&key.facilitator, &key.network, id)
            .await
        {
            Ok(view) => view.status == SubscriptionStatus::Active && view.plan_id == key.plan_id,
            Err(e) => {
                tracing::warn!(error = %e, %id, "cannot read the refused subscription");
                false
            }
        };
        if keep {
            tracing::warn!(%id, "the server refuses a subscription the chain reports ACTIVE");
            return true;
        }
        tracing::info!(%id, plan = %key.plan_id, "forgetting a subscription that is not active");
        let mut held = slot.lock().await;
        if *held == Some(id) {
            *held = None;
        }
        self.inner.held.unseed(key.plan_id, id);
        self.inner.held.unpersist(Some(key), id);
        false
    }
}

/// Whether `terms` offer an `exact` option to fall back on.
fn offers_one_time(terms: &Terms) -> bool {
    terms
        .offers
        .iter()
        .any(|o| o.requirements.scheme == SCHEME_EXACT)
}

/// Whether a failed subscribe is known to have created nothing (refused before signing, or by
/// the facilitator with a 4xx).
fn nothing_created(e: &Error) -> bool {
    match e {
        Error::PolicyViolation { .. }
        | Error::PlanDeprecated
        | Error::NoFacilitator
        | Error::NoSubscriptionNetwork { .. }
        | Error::InsufficientFunds { .. } => true,
        Error::Facilitator { status, .. } => (400..500).contains(status),
        _ => false,
    }
}
