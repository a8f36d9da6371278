//! The subscription relay: `POST /subscriptions` validates a client-signed `Subscribe` intent and
//! its EIP-2612 permit, relays `Subscriptions.subscribeWithSig` from a relayer key (the relayer
//! pays gas; the subscriber pays the first cycle in the same transaction) and answers only after
//! confirmation; `GET /subscriptions/{id}` reads a subscription from the chain;
//! `GET /subscriptions/quote` gives a subscriber what it signs against (plan terms, nonces, the
//! chain's clock).
//!
//! Nothing is stored: the chain is the record. Idempotency rests on the contract's nonces: the
//! intent signs the subscriber's nonce `n`, the subscription's id is
//! `subscriptionIdFor(planId, subscriber, n)`, and once it is used the same intent recovers with
//! an earlier nonce, whose subscription is returned as is without broadcasting.
//!
//! The subscriber's own calls after that: [`lifecycle`] relays the signed pause, resume and
//! cancel, within the bounds [`relays`] counts; [`listing`] lists a subscriber's subscriptions
//! for that subscriber. A subscription's
//! remaining allowance is the usage ledger's (see [`AllowanceView`]), the same number
//! `GET /subscriptions/{id}/usage` answers.

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use tollgate_chain::{
    Confirmation, LogFilter, TxRequest, WaitOptions,
    authorization::{Subscribe, recover, subscriptions_domain},
    contracts::{self, Token},
};
use tollgate_protocol::{
    AllowanceView, Amount, ApiErrorCode, PlanView, SubscribeRequest, SubscriptionQuote,
    SubscriptionStatus, SubscriptionView,
};

use std::sync::Arc;

use crate::{
    error::{Error, Relayed, Result},
    facilitator::Core,
    facilitator::Network,
};

mod lifecycle;
mod listing;
mod relays;

/// How many nonces back a repeated intent is looked for (a subscriber that signed other intents
/// since is beyond idempotent replay and gets `InvalidSignature`).
const REPLAY_WINDOW: u64 = 16;

/// Subscriptions: the relayed `subscribeWithSig` and the subscriber's lifecycle actions, reading
/// subscriptions and quotes from the chain, metered usage against the overage allowance
/// ([`crate::metering`]) and the renewal keeper ([`crate::keeper`]). Owns the cache of
/// subscriptions' heads the metering reads. A service of the [`Facilitator`](crate::Facilitator).
#[derive(Clone, Debug)]
pub struct Subscriptions {
    pub(crate) core: Arc<Core>,
    pub(crate) heads: Arc<crate::metering::Heads>,
}

impl Subscriptions {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self {
            core,
            heads: Arc::default(),
        }
    }

    /// The subscription `id` as the chain shows it (`GET /subscriptions/{id}`); 404 when there
    /// is none.
    pub(crate) async fn subscription(
        &self,
        network: Option<&str>,
        id: B256,
    ) -> Result<SubscriptionView> {
        let (net, subs) = self.subscriptions_network(network)?;
        match self.subscription_view(net, subs, id).await? {
            Some(view) => Ok(view),
            None => Err(Error::NotFound(format!("no subscription {id}"))),
        }
    }

    /// What `subscriber` signs against to subscribe to `plan_id` (`GET /subscriptions/quote`):
    /// the plan's terms, the subscriber's nonces and allowance, and the chain's clock.
    pub(crate) async fn quote(
        &self,
        network: Option<&str>,
        plan_id: B256,
        subscriber: Address,
    ) -> Result<SubscriptionQuote> {
        let (net, subs) = self.subscriptions_network(network)?;
        let plan = self.plan(net, subs, plan_id).await?;
        let chain = net.chain.as_ref();
        let nonce = contracts::read(
            chain,
            subs,
            &contracts::Subscriptions::noncesCall { subscriber },
        )
        .await?;
        let permit_nonce =
            contracts::read(chain, plan.token, &Token::noncesCall { owner: subscriber }).await?;
        let allowance = contracts::read(
            chain,
            plan.token,
            &Token::allowanceCall {
                owner: subscriber,
                spender: subs,
            },
        )
        .await?;
        Ok(SubscriptionQuote {
            network: net.name.clone(),
            chain_id: net.spec.chain_id,
            subscriptions: subs,
            plan,
            nonce: Amount(nonce),
            permit_nonce: Amount(permit_nonce),
            allowance: Amount(allowance),
            now: net.now().await,
        })
    }

    /// The network (by name, or the only one with a subscriptions contract) and its contract.
    pub(crate) fn subscriptions_network(&self, name: Option<&str>) -> Result<(&Network, Address)> {
        let net = match name {
            Some(name) => self.core.network(name).ok_or_else(|| {
                Error::invalid(
                    ApiErrorCode::UnsupportedNetwork,
                    format!("network {name} is not served"),
                )
            })?,
            None => {
                let mut with = self
                    .core
                    .networks
                    .values()
                    .filter(|n| n.spec.subscriptions.is_some());
                match (with.next(), with.next()) {
                    (Some(n), None) => n,
                    _ => {
                        return Err(Error::InvalidField(
                            "network: required (several or no networks serve subscriptions)".into(),
                        ));
                    }
                }
            }
        };
        let subs = net.spec.subscriptions.ok_or_else(|| {
            Error::invalid(
                ApiErrorCode::UnsupportedNetwork,
                format!("network {} has no subscriptions contract", net.spec.name),
            )
        })?;
        Ok((net, subs))
    }

    /// A plan's terms; 422 `UnknownPlan` when there is none.
    async fn plan(&self, net: &Network, subs: Address, plan_id: B256) -> Result<PlanView> {
        let plan = contracts::read(
            net.chain.as_ref(),
            subs,
            &contracts::Subscriptions::plansCall { planId: plan_id },
        )
        .await?;
        if plan.provider == Address::ZERO {
            return Err(Error::invalid(
                ApiErrorCode::UnknownPlan,
                format!("no plan {plan_id}"),
            ));
        }
        // A plan published through `POST /plans` is created by the relayer: its provider is
        // the owner recorded then, as `GET /plans/{id}` says.
        let owner = self
            .core
            .store()
            .plan_owner(&net.spec.name, plan_id)
            .await?;
        Ok(PlanView {
            id: plan_id,
            provider: owner.map_or(plan.provider, |o| o.provider),
            token: plan.token,
            pay_to: plan.payTo,
            amount: Amount(plan.amount),
            interval: plan.interval,
            deprecated: plan.deprecated,
        })
    }

    /// A subscription read from the chain; `None` for an unknown id.
    pub(crate) async fn subscription_view(
        &self,
        net: &Network,
        subs: Address,
        id: B256,
    ) -> Result<Option<SubscriptionView>> {
        let chain = net.chain.as_ref();
        let sub = contracts::read(
            chain,
            subs,
            &contracts::Subscriptions::subscriptionsCall { id },
        )
        .await?;
        let Some(status) = status(sub.state) else {
            return Ok(None);
        };
        // The ledger counts every deduction of the cycle at once; the contract only what has
        // been charged (in batches). The remaining allowance is the ledger's, as `/usage` says.
        let ledger = self
            .core
            .store()
            .allowance_cycle(&net.spec.name, id, sub.cycle)
            .await?
            .map_or(U256::ZERO, |row| U256::from(row.used));
        let used = ledger.max(sub.overageUsed);
        let remaining = sub.maxOverage.saturating_sub(used);
        Ok(Some(SubscriptionView {
            id,
            status,
            plan_id: sub.planId,
            subscriber: sub.subscriber,
            cycle: sub.cycle,
            paid_through: sub.paidThrough,
            allowance: AllowanceView {
                cap: Amount(sub.maxOverage),
                remaining: Amount(remaining),
            },
            tx_hash: None,
        }))
    }

    /// Relays a subscription (the spec's subscription flow). Validates everything it can before
    /// broadcasting, so a refusal creates nothing; idempotent per signed intent.
    pub(crate) async fn subscribe(&self, req: &SubscribeRequest) -> Result<SubscriptionView> {
        let (net, subs) = self.subscriptions_network(Some(&req.network))?;
        let domain = subscriptions_domain(net.spec.chain_id, subs);
        // One subscription at a time per subscriber and contract: the nonce decides the id.
        let lock_key =
            alloy::primitives::keccak256([subs.as_slice(), req.subscriber.as_slice()].concat());
        let _guard = self.core.locks.lock(lock_key).await;

        let plan = self.plan(net, subs, req.plan_id).await?;
        let chain = net.chain.as_ref();
        let nonce: U256 = contracts::read(
            chain,
            subs,
            &contracts::Subscriptions::noncesCall {
                subscriber: req.subscriber,
            },
        )
        .await?;
        let intent = |nonce: U256| Subscribe {
            planId: req.plan_id,
            subscriber: req.subscriber,
            maxOverage: req.max_overage.get(),
            nonce,
            deadline: U256::from(req.deadline),
        };
        let signer_at = |nonce: U256| {
            recover(&intent(nonce), &domain, &req.signature).map_err(|e| {
                Error::invalid(ApiErrorCode::InvalidSignature, format!("signature: {e}"))
            })
        };
        if signer_at(nonce)? != req.subscriber {
            // Perhaps this intent was relayed already: the nonce it signed is used.
            let oldest = nonce.saturating_sub(U256::from(REPLAY_WINDOW));
            let mut n = nonce;
            while n > oldest {
                n -= U256::from(1);
                if signer_at(n)? == req.subscriber {
                    let id = subscription_id(req.plan_id, req.subscriber, n);
                    if let Some(mut view) = self.subscription_view(net, subs, id).await? {
                        view.tx_hash = self.creation_tx(net, subs, id).await?;
                        return Ok(view);
                    }
                    break;
                }
            }
            return Err(Error::invalid(
                ApiErrorCode::InvalidSignature,
                "the Subscribe signature does not recover to the subscriber with its current nonce",
            ));
        }

        let now = net.now().await;
        if req.deadline < now {
            return Err(Error::invalid(
                ApiErrorCode::SignatureExpired,
                format!("deadline {} has passed (now {now})", req.deadline),
            ));
        }
        if req.deadline > now + self.core.settings.max_validity_secs {
            return Err(Error::invalid(
                ApiErrorCode::DeadlineTooFar,
                format!(
                    "deadline: at most {} seconds ahead",
                    self.core.settings.max_validity_secs
                ),
            ));
        }
        if plan.deprecated {
            return Err(Error::PlanDeprecated {
                plan_id: req.plan_id,
            });
        }
        let balance = contracts::read(
            chain,
            plan.token,
            &Token::balanceOfCall {
                account: req.subscriber,
            },
        )
        .await?;
        if balance < plan.amount.get() {
            return Err(Error::InsufficientFunds(format!(
                "subscriber {} holds {balance}, the first cycle needs {}",
                req.subscriber, plan.amount
            )));
        }

        let call = contracts::Subscriptions::subscribeWithSigCall {
            planId: req.plan_id,
            subscriber: req.subscriber,
            maxOverage: req.max_overage.get(),
            deadline: U256::from(req.deadline),
            signature: req.signature.clone(),
            permitValue: req.permit.value.get(),
            permitDeadline: U256::from(req.permit.deadline),
            permitSignature: req.permit.signature.clone(),
        };
        let tx = TxRequest::call(self.core.relayer().await?, subs, call.abi_encode());
        // A call that would revert is refused here, before broadcast (the simulation).
        let tx_hash = net.chain.send(tx).await?;
        crate::fault::hit("subscribe.after-broadcast");
        let opts = WaitOptions {
            confirmations: net.spec.confirmations,
            timeout: self.core.settings.confirmation_timeout,
        };
        let id = subscription_id(req.plan_id, req.subscriber, nonce);
        match net.chain.wait(tx_hash, opts).await? {
            Confirmation::Confirmed(r) if r.success => {}
            Confirmation::Confirmed(r) => {
                // Perhaps someone relayed the same intent first: then its subscription exists.
                if let Some(view) = self.subscription_view(net, subs, id).await? {
                    return Ok(view);
                }
                return Err(Error::Reverted {
                    kind: Relayed::Subscription,
                    tx_hash: r.tx_hash,
                });
            }
            Confirmation::Pending { tx_hash } => {
                return Err(Error::ConfirmationTimeout { tx_hash });
            }
        }
        crate::fault::hit("subscribe.after-receipt");
        let mut view = self
            .subscription_view(net, subs, id)
            .await?
            .ok_or_else(|| Error::internal(format!("subscription {id} missing after {tx_hash}")))?;
        view.tx_hash = Some(tx_hash);
        Ok(view)
    }

    /// The transaction that emitted `SubscriptionCreated` for `id`, within the lookback window.
    async fn creation_tx(&self, net: &Network, subs: Address, id: B256) -> Result<Option<B256>> {
        let latest = net.chain.block_number().await?;
        let filter = LogFilter {
            from_block: latest.saturating_sub(self.core.settings.log_lookback_blocks),
            to_block: Some(latest),
            addresses: vec![subs],
            topics: [
                Some(vec![
                    contracts::Subscriptions::SubscriptionCreated::SIGNATURE_HASH,
                ]),
                Some(vec![id]),
                None,
                None,
            ],
        };
        let logs = net.chain.logs(&filter).await?;
        Ok(logs.first().map(|l| l.tx_hash))
    }
}

/// The contract's state code as a status; `None` for 0 (no such subscription).
/// Subscription `id` as the contract holds it, and its subscriber's current signature nonce (what
/// a relayed signature must be signed with).
pub(crate) async fn with_nonce(
    chain: &dyn tollgate_chain::Chain,
    subs: Address,
    id: B256,
) -> Result<(contracts::Subscriptions::subscriptionsReturn, U256)> {
    let sub = contracts::read(
        chain,
        subs,
        &contracts::Subscriptions::subscriptionsCall { id },
    )
    .await?;
    let nonce = contracts::read(
        chain,
        subs,
        &contracts::Subscriptions::noncesCall {
            subscriber: sub.subscriber,
        },
    )
    .await?;
    Ok((sub, nonce))
}

fn status(state: u8) -> Option<SubscriptionStatus> {
    match state {
        1 => Some(SubscriptionStatus::Active),
        2 => Some(SubscriptionStatus::Paused),
        3 => Some(SubscriptionStatus::Cancelled),
        _ => None,
    }
}

/// `subscriptionIdFor(planId, subscriber, nonce)`: `keccak256(abi.encode(planId, subscriber, nonce))`.
fn subscription_id(plan_id: B256, subscriber: Address, nonce: U256) -> B256 {
    use alloy::sol_types::SolValue;
    alloy::primitives::keccak256((plan_id, subscriber, nonce).abi_encode())
}
