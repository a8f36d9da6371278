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
    Agent, Error, PaidResponse, PayRequest, Payment, PaymentKind, Result, Subscribe,
    agent::spec_code,
    subscribe::Created,
    terms::{Offer, Terms},
};

pub use tollgate_protocol::headers::X_SERVICE_SUB;

/// Where a held subscription serves: through this facilitator, on this network, for this plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PlanKey {
    facilitator: String,
    network: String,
    plan_id: B256,
}

/// One plan's subscription, if the agent holds one. Its async lock is held while subscribing, so
/// concurrent payments for the plan subscribe once.
type Slot = Arc<tokio::sync::Mutex<Option<B256>>>;

/// The subscriptions an agent holds, in memory (shared by its clones).
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Per (facilitator, network, plan).
    slots: Mutex<HashMap<PlanKey, Slot>>,
    /// Given with [`Agent::use_subscription`]: per plan, on any facilitator and network.
    seeded: Mutex<HashMap<B256, B256>>,
}

impl Held {
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
                policy
                    .check_capped(
                        &r.network,
                        token,
                        r.pay_to,
                        amount.unwrap_or(Amount::ZERO),
                        allowed.max_per_cycle,
                    )
                    .ok()?;
                let key = PlanKey {
                    facilitator,
                    network: r.network.clone(),
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
                    None => {
                        let subscribe = Subscribe::new(key.plan_id, max_overage)
                            .facilitator(key.facilitator.clone())
                            .network(key.network.clone());
                        match self.subscribe_inner(subscribe).await {
                            Ok(c) => {
                                let id = *held.insert(c.subscription.id);
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
        };
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
        match spec_code(&reason) {
            Some(ErrorCode::AllowanceExhausted) => Err(Error::AllowanceExhausted),
            Some(ErrorCode::SubscriptionNotActive) => {
                let active = self.forget_unless_active(&key, &slot, id).await;
                if active && created.is_some() {
                    // Paid for this very request and ACTIVE on chain: paying one-time as well
                    // would pay twice for one request.
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
