//! The subscriber's gasless lifecycle: `POST /subscriptions/{id}/pause`, `/resume` and
//! `/cancel` relay the contract's `pauseWithSig`, `resumeWithSig` and `cancelWithSig` with the
//! subscriber's EIP-712 `Action` signature, from a relayer key (the relayer pays the gas), and
//! answer after confirmation with the subscription read from the chain.
//!
//! **Idempotent.** One action per subscription is relayed at a time (the lock the allowance raise
//! takes), and everything is checked before anything is sent:
//! - a signature that recovers to the subscriber only with an earlier nonce was consumed: the
//!   request is a replay (of this action, or of one the subscriber since superseded), answered
//!   with the subscription as it is, without a transaction;
//! - a fresh signature whose target state already holds (pausing a paused subscription, resuming
//!   an active one) is answered the same way; a concurrent duplicate finds the first one's
//!   effect under the lock and sends nothing;
//! - refusals change nothing: a signature that recovers to no one's nonce (422
//!   `InvalidSignature`), a passed deadline (422 `SignatureExpired`), pausing or resuming a
//!   cancelled subscription, and a second, differently signed cancel (409
//!   `SubscriptionNotActive`: cancelled is final, subscribe again).
//!
//! **Bounded.** Each relayed action costs the facilitator gas and becomes a webhook event, so a
//! call that is about to send is counted first ([`super::relays`]): beyond a few per
//! subscription per hour, or per subscriber per day, it is refused with 429 `RateLimited` and
//! `Retry-After`, before anything is sent (the ending cycle's charge included). What is answered
//! without a transaction above is never counted; a subscription's first cancel is never refused.
//! A relayed allowance raise (`crate::metering`) counts against the same bounds.
//!
//! **Money.** Resuming a subscription whose paid period has ended bills a new cycle in the same
//! transaction (the contract's `_resume`); the ending cycle's metered usage is closed and charged
//! first, as the keeper does before a renewal, so that no charge is left for a cycle the
//! contract no longer takes. A refusal by the contract at simulation (the subscriber cannot pay:
//! 402 `InsufficientFunds`) sends nothing.
//!
//! **Webhooks.** The keeper's index reads the `SubscriptionPaused`, `SubscriptionResumed` and
//! `SubscriptionCancelled` logs of relayed actions as of any others and writes
//! `subscription.paused`, `subscription.resumed` and `subscription.cancelled` for the plan's owner.

use alloy::{
    primitives::{B256, Bytes, U256, keccak256},
    sol_types::SolCall,
};
use tollgate_chain::{
    Confirmation, Error as ChainError, TxRequest, WaitOptions,
    authorization::{Action, ActionKind, recover, subscriptions_domain},
    contracts,
};
use tollgate_protocol::{
    ApiErrorCode, SubscriptionStatus, SubscriptionView,
    api::subscriptions::{ActionRequest, SubscriberAction},
};

use super::{REPLAY_WINDOW, status};
use crate::{
    error::{Error, Relayed, Result},
    facilitator::Network,
    metering::MeteringReport,
    store::ChargeState,
    subscriptions::Subscriptions,
};

impl Subscriptions {
    /// Relays the subscriber's signed `action` on subscription `id` (see [`self`]).
    pub(crate) async fn subscriber_action(
        &self,
        id: B256,
        action: SubscriberAction,
        req: &ActionRequest,
    ) -> Result<SubscriptionView> {
        let (net, subs) = self.subscriptions_network(Some(&req.network))?;
        let _guard = self.core.locks.lock(keccak256(id)).await;
        let chain = net.chain.as_ref();
        let (sub, nonce) = super::with_nonce(chain, subs, id).await?;
        let state = status(sub.state).ok_or_else(|| not_found(id))?;
        let domain = subscriptions_domain(net.spec.chain_id, subs);
        let kind = action_kind(action);
        let signer_at = |nonce: U256| {
            let signed = Action::new(id, kind, U256::ZERO, nonce, U256::from(req.deadline));
            recover(&signed, &domain, &req.signature).map_err(|e| {
                Error::invalid(ApiErrorCode::InvalidSignature, format!("signature: {e}"))
            })
        };
        if signer_at(nonce)? != sub.subscriber {
            let oldest = nonce.saturating_sub(U256::from(REPLAY_WINDOW));
            let mut n = nonce;
            while n > oldest {
                n -= U256::from(1);
                if signer_at(n)? == sub.subscriber {
                    // Consumed: a replay. The subscription as it is now.
                    return self.current(net, subs, id).await;
                }
            }
            return Err(Error::invalid(
                ApiErrorCode::InvalidSignature,
                format!(
                    "the {action} signature does not recover to the subscriber {} with its \
                     current nonce (sign the Action again with the quote's nonce)",
                    sub.subscriber
                ),
            ));
        }
        match (action, state) {
            (SubscriberAction::Cancel, SubscriptionStatus::Cancelled) => {
                return Err(Error::SubscriptionNotActive {
                    id,
                    why: "is already cancelled (cancelled is final: subscribe again)",
                });
            }
            (_, SubscriptionStatus::Cancelled) => {
                return Err(Error::SubscriptionNotActive {
                    id,
                    why: "is cancelled (cancelled is final: subscribe again)",
                });
            }
            (action, state) if action.target() == state => {
                return self.current(net, subs, id).await;
            }
            _ => {}
        }
        let now = net.now().await;
        if req.deadline < now {
            return Err(Error::invalid(
                ApiErrorCode::SignatureExpired,
                format!("deadline {} has passed (now {now})", req.deadline),
            ));
        }
        let relayer = self.core.relayer().await?;
        // From here on a transaction is sent: counted first, refused beyond the bounds.
        let slot = self
            .take_relay(
                net,
                id,
                sub.subscriber,
                action.as_str(),
                action == SubscriberAction::Cancel,
            )
            .await?;
        // Resuming bills the next cycle when the paid period has ended (by the chain's latest
        // block, not the cached clock): the ending cycle's usage is charged first.
        if action == SubscriberAction::Resume && !sub.maxOverage.is_zero() {
            let closed: Result<bool> = match net.chain.timestamp().await {
                Ok(now) if now < sub.paidThrough => Ok(true),
                Ok(_) => {
                    let mut report = MeteringReport::default();
                    self.close_cycle(net, subs, id, sub.cycle, sub.maxOverage, &mut report)
                        .await
                        .map_err(Error::from)
                }
                Err(e) => Err(e.into()),
            };
            match closed {
                Ok(true) => {}
                Ok(false) => {
                    self.release_relay(slot).await;
                    return Err(self.charge_pending(net, id, sub.cycle).await);
                }
                Err(e) => {
                    self.release_relay(slot).await;
                    return Err(e);
                }
            }
        }

        let data = call_data(action, id, U256::from(req.deadline), req.signature.clone());
        let tx = TxRequest::call(relayer, subs, data);
        let opts = WaitOptions {
            confirmations: net.spec.confirmations,
            timeout: self.core.settings().confirmation_timeout,
        };
        // A call that would revert is refused here, before broadcast (the simulation).
        let sent = match net.chain.send_and_wait(tx, opts).await {
            Err(ChainError::Revert(revert)) => {
                // Nothing was sent: nothing counts.
                self.release_relay(slot).await;
                // Another facilitator (replica) may have relayed the same signature meanwhile:
                // then the nonce is used and the target state holds.
                let view = self.current(net, subs, id).await?;
                let used = contracts::read(
                    chain,
                    subs,
                    &contracts::Subscriptions::noncesCall {
                        subscriber: sub.subscriber,
                    },
                )
                .await?;
                if used > nonce && view.status == action.target() {
                    return Ok(view);
                }
                return Err(Error::Revert(revert));
            }
            other => other?,
        };
        match sent {
            Confirmation::Confirmed(r) if r.success => {
                self.heads.forget(&net.spec.name, id);
                tracing::info!(network = %net.spec.name, %id, %action, tx = %r.tx_hash, "subscriber action relayed");
                let mut view = self.current(net, subs, id).await?;
                view.tx_hash = Some(r.tx_hash);
                Ok(view)
            }
            Confirmation::Confirmed(r) => {
                self.heads.forget(&net.spec.name, id);
                // Perhaps someone relayed the same signature first: then its effect holds.
                let view = self.current(net, subs, id).await?;
                if view.status == action.target() {
                    return Ok(view);
                }
                Err(Error::Reverted {
                    kind: relayed(action),
                    tx_hash: r.tx_hash,
                })
            }
            Confirmation::Pending { tx_hash } => Err(Error::Pending { tx_hash }),
        }
    }

    /// The subscription as the chain shows it now (it existed a moment ago).
    async fn current(
        &self,
        net: &Network,
        subs: alloy::primitives::Address,
        id: B256,
    ) -> Result<SubscriptionView> {
        self.subscription_view(net, subs, id)
            .await?
            .ok_or_else(|| not_found(id))
    }

    /// 503 `Pending` for a cycle whose last overage charge is still confirming.
    async fn charge_pending(&self, net: &Network, id: B256, cycle: u32) -> Error {
        let pending = self
            .core
            .store()
            .overage_charges(&net.spec.name, id, cycle)
            .await
            .map(|charges| {
                charges
                    .into_iter()
                    .filter(|c| c.state == ChargeState::Pending)
                    .find_map(|c| c.tx_hash)
            });
        match pending {
            Ok(Some(tx_hash)) => Error::Pending { tx_hash },
            Ok(None) => Error::internal("the ending cycle's overage charge is not settled"),
            Err(e) => e.into(),
        }
    }
}

fn not_found(id: B256) -> Error {
    Error::NotFound(format!("no subscription {id}"))
}

/// The contract's action code for `action`.
fn action_kind(action: SubscriberAction) -> ActionKind {
    match action {
        SubscriberAction::Pause => ActionKind::Pause,
        SubscriberAction::Resume => ActionKind::Resume,
        SubscriberAction::Cancel => ActionKind::Cancel,
    }
}

/// What a reverted relay of `action` was.
fn relayed(action: SubscriberAction) -> Relayed {
    match action {
        SubscriberAction::Pause => Relayed::Pause,
        SubscriberAction::Resume => Relayed::Resume,
        SubscriberAction::Cancel => Relayed::Cancel,
    }
}

/// `pauseWithSig`, `resumeWithSig` or `cancelWithSig`, encoded.
fn call_data(action: SubscriberAction, id: B256, deadline: U256, signature: Bytes) -> Vec<u8> {
    match action {
        SubscriberAction::Pause => contracts::Subscriptions::pauseWithSigCall {
            id,
            deadline,
            signature,
        }
        .abi_encode(),
        SubscriberAction::Resume => contracts::Subscriptions::resumeWithSigCall {
            id,
            deadline,
            signature,
        }
        .abi_encode(),
        SubscriberAction::Cancel => contracts::Subscriptions::cancelWithSigCall {
            id,
            deadline,
            signature,
        }
        .abi_encode(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_sign_the_contract_codes() {
        for action in SubscriberAction::ALL {
            assert_eq!(action_kind(action) as u8, action.code());
        }
    }
}
