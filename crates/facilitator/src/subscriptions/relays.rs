//! The bound on the subscriber's relayed lifecycle transactions. Each one is sent at the
//! facilitator's gas and becomes a webhook event, so it is counted in the store before it is
//! sent ([`Store::take_relay`](crate::store::Store::take_relay)): at most
//! [`RelayBounds::per_subscription`](crate::store::RelayBounds::per_subscription) per
//! subscription within its window and
//! [`RelayBounds::per_subscriber`](crate::store::RelayBounds::per_subscriber) per subscriber (over all its subscriptions on the network)
//! within its window ([`crate::Settings::relay_bounds`]). One more is refused with 429
//! `RateLimited` and `Retry-After` (when the window frees a slot) before anything is sent.
//!
//! - Only a call that is about to send is counted: a repeat answered without a transaction (the
//!   same signed call, an action whose target state holds) and a refusal (a bad signature, a
//!   passed deadline, a cancelled subscription) never reach the count, so they are neither
//!   counted nor refused. A call the chain refuses at simulation sent nothing: its count is
//!   taken back.
//! - Leaving is always possible: a subscription's first cancel is never refused (it is counted).
//! - The count lives in the store, so replicas sharing one store share the bounds, exactly.
//! - Windows run on the network's clock ([`Network::now`]), as signatures' deadlines do.

use alloy::primitives::{Address, B256};

use crate::{
    error::{Error, Result},
    facilitator::Network,
    store::{Relay, RelayOutcome, RelayScope},
    subscriptions::Subscriptions,
};

/// A counted relay, to take back with [`Subscriptions::release_relay`] if nothing is sent.
#[derive(Debug)]
#[must_use = "a count that sent nothing is released"]
pub(crate) struct RelaySlot {
    seq: u64,
}

impl Subscriptions {
    /// Counts the relay of `action` on subscription `id` of `subscriber`, about to be sent;
    /// [`Error::RelayLimited`] over a bound (nothing counted). `free_once`: a first cancel.
    pub(crate) async fn take_relay(
        &self,
        net: &Network,
        id: B256,
        subscriber: Address,
        action: &str,
        free_once: bool,
    ) -> Result<RelaySlot> {
        let bounds = self.core.settings().relay_bounds;
        let at = net.now().await;
        let relay = Relay {
            network: net.spec.name.clone(),
            subscription: id,
            subscriber,
            action: action.to_owned(),
            free_once,
            at,
        };
        match self.core.store().take_relay(&relay, &bounds).await? {
            RelayOutcome::Taken { seq } => Ok(RelaySlot { seq }),
            RelayOutcome::Refused { scope, retry_at } => {
                let (limit, window) = match scope {
                    RelayScope::Subscription => {
                        (bounds.per_subscription, bounds.subscription_window)
                    }
                    RelayScope::Subscriber => (bounds.per_subscriber, bounds.subscriber_window),
                };
                let retry_after = retry_at.saturating_sub(at).max(1);
                // Debug, as the per-client rate's refusals: a flood of refusals is no flood of logs.
                tracing::debug!(
                    network = %net.spec.name, %id, %subscriber, %action, ?scope, retry_after,
                    "relay refused: at its bound"
                );
                Err(Error::RelayLimited {
                    scope,
                    id,
                    subscriber,
                    limit,
                    window,
                    retry_after,
                })
            }
        }
    }

    /// Takes back a count whose relay sent nothing. A store that fails here leaves it counted
    /// (the bound errs on the side of the operator's gas); the failure is logged.
    pub(crate) async fn release_relay(&self, slot: RelaySlot) {
        if let Err(error) = self.core.store().release_relay(slot.seq).await {
            tracing::warn!(%error, seq = slot.seq, "a relay that sent nothing stays counted");
        }
    }
}
