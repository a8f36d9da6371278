//! The bound on relayed lifecycle transactions: a subscriber's pause, resume, cancel or allowance
//! raise is sent by the facilitator at its own gas, so each one is counted here before it is
//! sent, and refused beyond so many per subscription within one window and per subscriber
//! within another ([`RelayBounds`]).
//!
//! A count is one transaction: it locks the subscriber's row in `relay_subscribers` (an upsert),
//! drops the subscriber's counts older than the longest window, looks at the `n`-th latest count
//! in each window and, when neither is full, records the new one. The lock orders the counts of
//! one subscriber on PostgreSQL (a second replica's count waits for the first to commit, then
//! sees it), and SQLite's single writer orders every write, so two counts never both take the
//! last slot. Windows slide: a full window frees a slot when its oldest count in it leaves it,
//! which is the refusal's `retry_at`.

use std::time::Duration;

use alloy::primitives::{Address, B256};

use crate::{
    StoreResult,
    codec::{self},
    conn::{Conn, args},
};

/// A relayed transaction about to be sent, as [`crate::Store::take_relay`] counts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relay {
    /// Network name.
    pub network: String,
    /// The subscription it acts on.
    pub subscription: B256,
    /// The subscription's subscriber (whose signature it relays).
    pub subscriber: Address,
    /// What it is: `pause`, `resume`, `cancel`, `raise`.
    pub action: String,
    /// Never refused while no relay of this action on this subscription is counted within the
    /// longest window (still counted itself): a subscription's first cancel, so that a
    /// subscriber can always leave.
    pub free_once: bool,
    /// Unix seconds, on the network's clock.
    pub at: u64,
}

/// How many relayed transactions are taken within which windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelayBounds {
    /// At most this many per subscription within [`subscription_window`](Self::subscription_window)
    /// (0 counts as 1).
    pub per_subscription: u32,
    /// The per-subscription window (whole seconds).
    pub subscription_window: Duration,
    /// At most this many per subscriber, over all its subscriptions on one network, within
    /// [`subscriber_window`](Self::subscriber_window) (0 counts as 1).
    pub per_subscriber: u32,
    /// The per-subscriber window (whole seconds).
    pub subscriber_window: Duration,
}

/// Which bound refused a relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayScope {
    /// The subscription's: [`RelayBounds::per_subscription`].
    Subscription,
    /// The subscriber's: [`RelayBounds::per_subscriber`].
    Subscriber,
}

/// What [`crate::Store::take_relay`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayOutcome {
    /// Counted: send it. Should nothing be sent after all, [`crate::Store::release_relay`] with
    /// `seq` takes the count back.
    Taken {
        /// The count's number.
        seq: u64,
    },
    /// Over a bound: send nothing. Nothing was counted.
    Refused {
        /// The bound (when both are full, the one that frees up later).
        scope: RelayScope,
        /// When a slot frees up (unix seconds, on the clock of [`Relay::at`]).
        retry_at: u64,
    },
}

/// (network, subscriber, at): locks the subscriber's row until commit.
const LOCK: &str = "INSERT INTO relay_subscribers (network, subscriber, counted_at) \
     VALUES ($1, $2, $3) ON CONFLICT (network, subscriber) DO UPDATE SET counted_at = \
     excluded.counted_at";

/// (network, subscriber, at or before): the subscriber's counts out of every window.
const PRUNE: &str =
    "DELETE FROM relayed_actions WHERE network = $1 AND subscriber = $2 AND at <= $3";

/// (network, subscription, action): whether one is counted.
const ANY_OF_ACTION: &str = "SELECT seq FROM relayed_actions \
     WHERE network = $1 AND subscription = $2 AND action = $3 LIMIT 1";

/// (network, subscription, after, n - 1): the time of the subscription's `n`-th latest count in
/// the window.
const NTH_OF_SUBSCRIPTION: &str = "SELECT at FROM relayed_actions \
     WHERE network = $1 AND subscription = $2 AND at > $3 ORDER BY at DESC LIMIT 1 OFFSET $4";

/// (network, subscriber, after, n - 1): the time of the subscriber's `n`-th latest count in the
/// window.
const NTH_OF_SUBSCRIBER: &str = "SELECT at FROM relayed_actions \
     WHERE network = $1 AND subscriber = $2 AND at > $3 ORDER BY at DESC LIMIT 1 OFFSET $4";

/// (network, subscription, subscriber, action, at) → seq.
const INSERT: &str = "INSERT INTO relayed_actions (network, subscription, subscriber, action, at) \
     VALUES ($1, $2, $3, $4, $5) RETURNING seq";

/// (seq).
const RELEASE: &str = "DELETE FROM relayed_actions WHERE seq = $1";

/// A window's length in seconds, for its `BIGINT` arithmetic.
fn secs(window: Duration) -> i64 {
    i64::try_from(window.as_secs()).unwrap_or(i64::MAX)
}

/// [`crate::Store::take_relay`], in the caller's transaction.
pub(crate) async fn take<C: Conn>(
    c: &mut C,
    relay: &Relay,
    bounds: &RelayBounds,
) -> StoreResult<RelayOutcome> {
    let network = relay.network.as_str();
    let subscription = codec::b256(&relay.subscription);
    let subscriber = codec::address(&relay.subscriber);
    let at = codec::int("at", relay.at)?;
    c.execute(LOCK, args![network, &subscriber, at]).await?;
    let longest = secs(bounds.subscription_window.max(bounds.subscriber_window));
    c.execute(
        PRUNE,
        args![network, &subscriber, at.saturating_sub(longest)],
    )
    .await?;

    let free = relay.free_once
        && c.fetch_optional::<(i64,)>(
            ANY_OF_ACTION,
            args![network, &subscription, relay.action.as_str()],
        )
        .await?
        .is_none();
    if !free {
        let windows = [
            (
                RelayScope::Subscription,
                NTH_OF_SUBSCRIPTION,
                &subscription,
                bounds.per_subscription,
                secs(bounds.subscription_window),
            ),
            (
                RelayScope::Subscriber,
                NTH_OF_SUBSCRIBER,
                &subscriber,
                bounds.per_subscriber,
                secs(bounds.subscriber_window),
            ),
        ];
        let mut refused: Option<(RelayScope, i64)> = None;
        for (scope, sql, key, limit, window) in windows {
            let nth = i64::from(limit.max(1)) - 1;
            let full: Option<(i64,)> = c
                .fetch_optional(sql, args![network, key, at.saturating_sub(window), nth])
                .await?;
            if let Some((oldest,)) = full {
                let retry_at = oldest.saturating_add(window);
                if refused.is_none_or(|(_, later)| retry_at > later) {
                    refused = Some((scope, retry_at));
                }
            }
        }
        if let Some((scope, retry_at)) = refused {
            return Ok(RelayOutcome::Refused {
                scope,
                retry_at: retry_at.unsigned_abs(),
            });
        }
    }
    let (seq,): (i64,) = c
        .fetch_one(
            INSERT,
            args![
                network,
                &subscription,
                &subscriber,
                relay.action.as_str(),
                at
            ],
        )
        .await?;
    Ok(RelayOutcome::Taken {
        seq: seq.unsigned_abs(),
    })
}

/// [`crate::Store::release_relay`].
pub(crate) async fn release(c: &mut impl Conn, seq: u64) -> StoreResult<bool> {
    let seq = codec::int("seq", seq)?;
    Ok(c.execute(RELEASE, args![seq]).await? > 0)
}
