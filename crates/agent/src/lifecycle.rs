//! The subscriber's side of a subscription's life, gasless: [`Agent::subscriptions`] lists the
//! agent's subscriptions, [`Agent::pause`], [`Agent::resume`] and [`Agent::cancel`] sign the
//! contract's `Action` and have the facilitator relay it.

use std::time::Instant;

use alloy::{
    primitives::{B256, Bytes, U256},
    signers::SignerSync as _,
};
use tollgate_chain::authorization::{Action, ActionKind, sign, subscriptions_domain};
use tollgate_protocol::{
    SubscriptionStatus, SubscriptionView,
    api::subscriptions::{ActionRequest, ListSubscriptionsQuery, SubscriberAction},
};

use crate::{Agent, Error, Result, Subscription, facilitator, subscribe::subscription_error};

/// How long an `Action` signature is valid (seconds after the chain's clock).
const ACTION_VALIDITY_SECS: u64 = 600;
/// How long a listing signature is valid (well within the facilitator's limit).
const LIST_VALIDITY_SECS: u64 = 300;

/// Which subscription [`Agent::pause`], [`Agent::resume`] or [`Agent::cancel`] acts on, and
/// through which facilitator.
///
/// ```
/// use tollgate_agent::SubscriptionRef;
/// # let subscription_id = Default::default();
/// let target = SubscriptionRef::new(subscription_id).facilitator("https://facilitator.example");
/// assert_eq!(target.facilitator.as_deref(), Some("https://facilitator.example"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubscriptionRef {
    /// The subscription (one of this agent's).
    pub subscription_id: B256,
    /// The facilitator's base URL; default: the agent's only configured facilitator
    /// ([`AgentBuilder::facilitators`](crate::AgentBuilder::facilitators)).
    pub facilitator: Option<String>,
    /// The network; default: the facilitator's only network with a subscriptions contract.
    pub network: Option<String>,
}

impl SubscriptionRef {
    /// Subscription `subscription_id`.
    pub fn new(subscription_id: B256) -> Self {
        Self {
            subscription_id,
            ..Self::default()
        }
    }
}

crate::facilitator_and_network!(SubscriptionRef);

impl Agent {
    /// Every subscription of this agent's on the facilitator's network, each as the chain holds
    /// it (`GET /subscriptions?subscriber=`, authenticated by a `personal_sign` signature of the
    /// listing, valid for five minutes of the chain's clock: nobody else can list them).
    ///
    /// `facilitator` and `network` default as in [`SubscriptionRef`].
    pub async fn subscriptions(
        &self,
        facilitator: Option<&str>,
        network: Option<&str>,
    ) -> Result<Vec<Subscription>> {
        let base = self.subscription_facilitator(facilitator)?;
        // The chain's clock as published now (a devnet's may have jumped since it was read).
        self.forget_well_known(&base);
        let (network, info) = self.subscription_network(&base, network).await?;
        let wk = self.well_known(&base).await?;
        let contract = info
            .subscriptions
            .ok_or_else(|| Error::NoSubscriptionNetwork {
                network: network.clone(),
            })?;
        let deadline = wk.chain_now(&info, crate::agent::unix_now()) + LIST_VALIDITY_SECS;
        let message =
            ListSubscriptionsQuery::message(self.inner.address, info.chain_id, contract, deadline);
        let signature = self
            .inner
            .signer
            .sign_message_sync(message.as_bytes())
            .map_err(|e| Error::Signing(e.into()))?;
        let query = ListSubscriptionsQuery::new(
            Some(network.parse()?),
            self.inner.address,
            deadline,
            &Bytes::from(signature.as_bytes().to_vec()),
        );
        let views = self
            .facilitator_client(&base)?
            .subscriptions(&query)
            .await
            .map_err(lifecycle_error)?;
        if let Some(foreign) = views.iter().find(|v| v.subscriber != self.inner.address) {
            return Err(Error::Facilitator {
                status: 0,
                code: "WrongSubscription".into(),
                message: format!("the listing holds {}, another subscriber's", foreign.id),
            });
        }
        Ok(views.into_iter().map(Subscription::from).collect())
    }

    /// Pauses one of this agent's subscriptions (ACTIVE → PAUSED): gates refuse it with
    /// `SubscriptionNotActive` and renewals stop until it is resumed. See [`Agent::cancel`]
    /// for the sequence.
    pub async fn pause(&self, target: SubscriptionRef) -> Result<Subscription> {
        self.act(target, SubscriberAction::Pause, ActionKind::Pause)
            .await
    }

    /// Resumes one of this agent's paused subscriptions (PAUSED → ACTIVE). When its paid period
    /// has ended, the contract bills a new cycle first: that cycle's amount must pass the
    /// [`SpendPolicy`](crate::SpendPolicy) (as [`Agent::subscribe`]'s first cycle does) and is
    /// reserved in the budget. See [`Agent::cancel`] for the sequence.
    pub async fn resume(&self, target: SubscriptionRef) -> Result<Subscription> {
        self.act(target, SubscriberAction::Resume, ActionKind::Resume)
            .await
    }

    /// Cancels one of this agent's subscriptions, for good (subscribe again for a new one); the
    /// agent stops holding it (and its state file forgets it).
    ///
    /// The sequence, shared with [`Agent::pause`] and [`Agent::resume`]:
    ///
    /// 1. `GET /subscriptions/{id}`: the subscription must exist ([`Error::UnknownSubscription`])
    ///    and be this agent's ([`Error::NotSubscriber`]). Already in the target state: answered
    ///    as it is, nothing signed. Pausing or resuming a cancelled one:
    ///    [`Error::SubscriptionNotActive`].
    /// 2. `GET /subscriptions/quote` for the agent's nonce and the chain's clock; sign the EIP-712
    ///    `Action` (value 0, valid for ten minutes) under the subscriptions contract's domain.
    /// 3. `POST /subscriptions/{id}/pause|resume|cancel`; the facilitator relays the signed
    ///    variant, pays the gas and answers after confirmation. While the outcome is unknown
    ///    (`Pending`, a lost answer), the same signed request is sent again within
    ///    [`AgentBuilder::settle_timeout`](crate::AgentBuilder::settle_timeout): the facilitator
    ///    acts at most once per signature. Beyond the facilitator's bound on relayed lifecycle
    ///    calls (by default 4 per subscription per hour, 24 per subscriber per day) the call is
    ///    refused before anything is sent: [`Error::RateLimited`], with when to try again (a
    ///    subscription's first cancel never is).
    pub async fn cancel(&self, target: SubscriptionRef) -> Result<Subscription> {
        let id = target.subscription_id;
        let cancelled = self
            .act(target, SubscriberAction::Cancel, ActionKind::Cancel)
            .await?;
        self.inner.held.release(id).await;
        Ok(cancelled)
    }

    /// `action` on `target`, signed as the contract's `kind`.
    async fn act(
        &self,
        target: SubscriptionRef,
        action: SubscriberAction,
        kind: ActionKind,
    ) -> Result<Subscription> {
        let id = target.subscription_id;
        let base = self.subscription_facilitator(target.facilitator.as_deref())?;
        let (network, info) = self
            .subscription_network(&base, target.network.as_deref())
            .await?;
        let view = self.subscription_view(&base, &network, id).await?;
        if view.subscriber != self.inner.address {
            return Err(Error::NotSubscriber {
                id,
                subscriber: view.subscriber,
            });
        }
        if view.status == action.target() {
            tracing::info!(%id, %action, "already done; nothing to sign");
            return Ok(view.into());
        }
        if view.status == SubscriptionStatus::Cancelled {
            return Err(Error::SubscriptionNotActive);
        }
        let quote = self.quote(&base, &network, &info, view.plan_id).await?;
        // Resuming after the paid period bills a cycle: the policy bounds it like a first one.
        let reservation = if action == SubscriberAction::Resume && view.paid_through <= quote.now {
            let policy = &self.inner.policy;
            let plan = &quote.plan;
            policy
                .check_capped(
                    &network,
                    plan.token,
                    plan.pay_to,
                    plan.amount,
                    policy.cycle_cap(),
                )
                .map_err(|what| Error::PolicyViolation { what })?;
            Some(
                self.inner
                    .budget
                    .reserve(plan.amount)
                    .map_err(|what| Error::PolicyViolation { what })?,
            )
        } else {
            None
        };
        let deadline = quote.now + ACTION_VALIDITY_SECS;
        let signed = Action::new(
            id,
            kind,
            U256::ZERO,
            quote.nonce.get(),
            U256::from(deadline),
        );
        let domain = subscriptions_domain(info.chain_id, quote.subscriptions);
        let signature = sign(&self.inner.signer, &signed, &domain).map_err(Error::Signing)?;
        let body = ActionRequest {
            network: network.parse()?,
            deadline,
            signature,
        };
        let client = self.facilitator_client(&base)?;
        let posted = facilitator::until_answered(
            action.as_str(),
            Instant::now() + self.inner.settle_timeout,
            || client.act(id, action, &body),
        )
        .await;
        let answered = match posted.result {
            Ok(view) => view,
            Err(e) => {
                // Refused (4xx) or never sent: nothing happened, the reservation is released.
                // Otherwise the action may have been relayed: a cycle reserved stays spent.
                let refused = e.is_refusal() || posted.never_sent;
                if let Some(r) = reservation
                    && !refused
                {
                    r.commit();
                }
                return Err(if e.status() == Some(404) {
                    Error::UnknownSubscription { id }
                } else {
                    lifecycle_error(e)
                });
            }
        };
        if let Some(r) = reservation {
            r.commit();
        }
        check_answer(&answered, &view, action)?;
        tracing::info!(%id, %action, status = ?answered.status, "done");
        Ok(answered.into())
    }
}

/// The agent's error for a failed lifecycle call: a 429 is [`Error::RateLimited`], with when to
/// come back; anything else as for a subscription.
fn lifecycle_error(e: tollgate_client::Error) -> Error {
    if e.is_rate_limited() {
        return Error::RateLimited {
            retry_after: e.retry_after(),
            message: e.body().map_or_else(
                || "too many requests".to_owned(),
                |b| b.error.message.clone(),
            ),
        };
    }
    subscription_error(e)
}

/// The facilitator's answer must be the subscription asked about, in the action's state.
fn check_answer(
    answered: &SubscriptionView,
    asked: &SubscriptionView,
    action: SubscriberAction,
) -> Result<()> {
    if answered.id == asked.id
        && answered.subscriber == asked.subscriber
        && answered.status == action.target()
    {
        return Ok(());
    }
    Err(Error::Facilitator {
        status: 0,
        code: "WrongSubscription".into(),
        message: format!(
            "asked to {action} {}, the facilitator answered {} {:?}",
            asked.id, answered.id, answered.status
        ),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate_protocol::{ApiErrorBody, ApiErrorCode};

    use super::*;

    fn answer(status: u16, code: ApiErrorCode, retry_after: Option<Duration>) -> Error {
        lifecycle_error(tollgate_client::Error::Status {
            url: "http://facilitator/subscriptions/0x01/pause".into(),
            status,
            body: Some(ApiErrorBody::new(code, "at its bound; retry in 42 s")),
            raw: String::new(),
            retry_after,
        })
    }

    #[test]
    fn a_429_is_rate_limited_with_when_to_come_back() {
        let e = answer(
            429,
            ApiErrorCode::RateLimited,
            Some(Duration::from_secs(42)),
        );
        assert!(
            matches!(&e, Error::RateLimited { retry_after: Some(d), message }
                if d.as_secs() == 42 && message.contains("at its bound")),
            "{e:?}"
        );
        assert!(e.to_string().ends_with("(retry after 42 s)"), "{e}");
        assert!(matches!(
            answer(429, ApiErrorCode::RateLimited, None),
            Error::RateLimited {
                retry_after: None,
                ..
            }
        ));
        assert!(matches!(
            answer(409, ApiErrorCode::SubscriptionNotActive, None),
            Error::SubscriptionNotActive
        ));
    }
}
