//! The renewal keeper's rows: indexed subscriptions, the log cursor, and recorded renewals
//! (types, decoding, the statements and the operations on them).

use alloy::primitives::{Address, B256};

use crate::{
    StoreError, StoreResult,
    codec::{self, parse_address, parse_b256},
    conn::{Conn, args},
    webhooks::{self, NewEvent},
};

/// A subscription's state as the keeper last saw it on-chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexedState {
    /// Renewed by the keeper when due.
    Active,
    /// A renewal failed or the subscriber paused it; waits for `SubscriptionResumed`.
    Paused,
    /// Ended for good.
    Cancelled,
}

/// The indexed state a webhook event kind leaves its subscription in, if it changes it (a
/// resume is a [`SubscriptionEvent::Resumed`] of its own).
fn state_after(kind: &str) -> Option<IndexedState> {
    match kind {
        "subscription.paused" | "subscription.renewal_failed" => Some(IndexedState::Paused),
        "subscription.cancelled" => Some(IndexedState::Cancelled),
        _ => None,
    }
}

crate::codec::stored_names!(IndexedState, "state", {
    Active => "active",
    Paused => "paused",
    Cancelled => "cancelled",
});

/// A subscription the keeper indexed from the chain's logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexedSubscription {
    /// Network name.
    pub network: String,
    /// The on-chain subscription id.
    pub id: B256,
    /// Its plan.
    pub plan_id: B256,
    /// Its subscriber.
    pub subscriber: Address,
    /// The state last seen.
    pub state: IndexedState,
    /// The last paid cycle seen (1 after creation).
    pub cycle: u32,
    /// When the next cycle is due (the subscription's `paidThrough`, chain seconds).
    pub next_due: u64,
}

/// A subscription event read from a Subscriptions contract's logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubscriptionEvent {
    /// `SubscriptionCreated`: a new subscription, paid for its first cycle.
    Created {
        /// The subscription id.
        id: B256,
        /// Its plan.
        plan_id: B256,
        /// Its subscriber.
        subscriber: Address,
        /// The end of its first paid cycle.
        paid_through: u64,
    },
    /// `SubscriptionResumed`: a paused subscription is active again.
    Resumed {
        /// The subscription id.
        id: B256,
        /// The end of its paid period after resuming.
        paid_through: u64,
    },
    /// `SubscriptionRenewed` (after the first cycle) or `RenewalFailed`: the renewal is recorded
    /// from the chain (first writer wins), whoever collected it — this keeper, also when it died
    /// before recording its own collect, another replica, or anyone calling `collect`.
    Renewed(Renewal),
    /// A chain event to record for the provider it concerns (`subscription.*`, `allowance.*`,
    /// `plan.*`), if the plan was published through this facilitator.
    Notify {
        /// The event id (derived from the log).
        id: String,
        /// Whose provider it is for.
        subject: Subject,
        /// The event type.
        kind: &'static str,
        /// The `data` object, as JSON text.
        data: String,
    },
}

/// What a [`SubscriptionEvent::Notify`] is about; its provider is the plan's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A plan.
    Plan(B256),
    /// A subscription (to a plan).
    Subscription(B256),
}

/// How a collection attempt ended on-chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RenewalOutcome {
    /// `SubscriptionRenewed`: the cycle was paid.
    Renewed,
    /// `RenewalFailed`: the payment could not be pulled; the subscription is paused.
    Failed,
}

crate::codec::stored_names!(RenewalOutcome, "outcome", {
    Renewed => "renewed",
    Failed => "failed",
});

/// One collection of `(id, cycle)` the keeper confirmed on-chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// Network name.
    pub network: String,
    /// The subscription id.
    pub id: B256,
    /// The cycle collected (or that failed).
    pub cycle: u32,
    /// What happened.
    pub outcome: RenewalOutcome,
    /// The `collect` transaction.
    pub tx_hash: B256,
    /// Its block.
    pub block: u64,
    /// Unix seconds.
    pub at: u64,
}

/// An indexed row: network, id, plan id, subscriber, state, cycle, next due.
type IndexedRow = (String, String, String, String, String, i64, i64);

fn decode_indexed(row: IndexedRow) -> StoreResult<IndexedSubscription> {
    let (network, id, plan_id, subscriber, state, cycle, next_due) = row;
    Ok(IndexedSubscription {
        network,
        id: parse_b256("id", &id)?,
        plan_id: parse_b256("plan_id", &plan_id)?,
        subscriber: parse_address("subscriber", &subscriber)?,
        state: IndexedState::parse(&state)?,
        cycle: u32::try_from(cycle).map_err(|_| StoreError::Corrupt(format!("cycle = {cycle}")))?,
        next_due: u64::try_from(next_due)
            .map_err(|_| StoreError::Corrupt(format!("next_due = {next_due}")))?,
    })
}

/// A renewal row: network, id, cycle, outcome, tx hash, block, created at.
type RenewalRow = (String, String, i64, String, String, i64, i64);

fn decode_renewal(row: RenewalRow) -> StoreResult<Renewal> {
    let (network, id, cycle, outcome, tx_hash, block, at) = row;
    let nonneg = |what: &str, v: i64| {
        u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what} = {v}")))
    };
    Ok(Renewal {
        network,
        id: parse_b256("id", &id)?,
        cycle: u32::try_from(cycle).map_err(|_| StoreError::Corrupt(format!("cycle = {cycle}")))?,
        outcome: RenewalOutcome::parse(&outcome)?,
        tx_hash: parse_b256("tx_hash", &tx_hash)?,
        block: nonneg("block", block)?,
        at: nonneg("created_at", at)?,
    })
}

/// The columns of an indexed row, in the order of [`IndexedRow`].
macro_rules! indexed_columns {
    () => {
        "network, id, plan_id, subscriber, state, cycle, next_due"
    };
}

const SELECT_CURSOR: &str = "SELECT next_block FROM keeper_cursors WHERE network = $1";

// The cursor never moves backwards (`CASE`, not SQLite's `MAX` or PostgreSQL's `GREATEST`:
// both take it).
const UPSERT_CURSOR: &str = "INSERT INTO keeper_cursors (network, next_block, updated_at) \
     VALUES ($1, $2, $3) ON CONFLICT (network) DO UPDATE SET next_block = CASE \
     WHEN excluded.next_block > keeper_cursors.next_block THEN excluded.next_block \
     ELSE keeper_cursors.next_block END, updated_at = excluded.updated_at";

const INSERT_CREATED: &str = "INSERT INTO subscriptions_index \
     (network, id, plan_id, subscriber, state, cycle, next_due, updated_at) \
     VALUES ($1, $2, $3, $4, 'active', 1, $5, $6) ON CONFLICT (network, id) DO NOTHING";

const APPLY_RESUMED: &str = "UPDATE subscriptions_index SET state = 'active', next_due = $3, \
     updated_at = $4 WHERE network = $1 AND id = $2 AND state <> 'cancelled'";

/// (network, id, state, at): a pause or cancel seen in the logs (cancelled is final).
const APPLY_STATE: &str = "UPDATE subscriptions_index SET state = $3, updated_at = $4 \
     WHERE network = $1 AND id = $2 AND state <> 'cancelled'";

const SELECT_DUE: &str = concat!(
    "SELECT ",
    indexed_columns!(),
    " FROM subscriptions_index WHERE network = $1 AND state = 'active' AND next_due <= $2 \
     ORDER BY next_due LIMIT $3"
);

const SELECT_ONE: &str = concat!(
    "SELECT ",
    indexed_columns!(),
    " FROM subscriptions_index WHERE network = $1 AND id = $2"
);

const SELECT_OF_SUBSCRIBER: &str = concat!(
    "SELECT ",
    indexed_columns!(),
    " FROM subscriptions_index WHERE network = $1 AND subscriber = $2 ORDER BY id"
);

const UPDATE_SEEN: &str = "UPDATE subscriptions_index SET state = $3, cycle = $4, next_due = $5, \
     updated_at = $6 WHERE network = $1 AND id = $2 AND cycle <= $4";

const INSERT_RENEWAL: &str = "INSERT INTO renewals \
     (network, id, cycle, outcome, tx_hash, block, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (network, id, cycle) DO NOTHING";

const SELECT_RENEWALS: &str = "SELECT network, id, cycle, outcome, tx_hash, block, created_at \
     FROM renewals WHERE network = $1 AND id = $2 ORDER BY cycle";

/// (network, plan id) → the plan's provider.
const PLAN_PROVIDER: &str = "SELECT provider FROM plans WHERE network = $1 AND plan_id = $2";

/// (network, subscription id) → its plan's provider.
const SUBSCRIPTION_PROVIDER: &str = "SELECT p.provider FROM subscriptions_index s JOIN plans p \
     ON p.network = s.network AND p.plan_id = s.plan_id WHERE s.network = $1 AND s.id = $2";

/// [`crate::Store::keeper_cursor`].
pub(crate) async fn cursor(c: &mut impl Conn, network: &str) -> StoreResult<u64> {
    let row: Option<(i64,)> = c.fetch_optional(SELECT_CURSOR, args![network]).await?;
    Ok(row.map_or(0, |(b,)| u64::try_from(b).unwrap_or(0)))
}

/// [`crate::Store::index_subscription_events`], inside the caller's transaction.
pub(crate) async fn index_events(
    c: &mut impl Conn,
    network: &str,
    events: &[SubscriptionEvent],
    next_block: u64,
    at: u64,
) -> StoreResult<()> {
    let next_block = codec::int("next_block", next_block)?;
    let at = codec::int("updated_at", at)?;
    for event in events {
        match event {
            SubscriptionEvent::Created {
                id,
                plan_id,
                subscriber,
                paid_through,
            } => {
                let next_due = codec::int("next_due", *paid_through)?;
                let (id, plan_id) = (codec::b256(id), codec::b256(plan_id));
                let subscriber = codec::address(subscriber);
                c.execute(
                    INSERT_CREATED,
                    args![network, &id, &plan_id, &subscriber, next_due, at],
                )
                .await?;
            }
            SubscriptionEvent::Resumed { id, paid_through } => {
                let next_due = codec::int("next_due", *paid_through)?;
                c.execute(
                    APPLY_RESUMED,
                    args![network, &codec::b256(id), next_due, at],
                )
                .await?;
            }
            SubscriptionEvent::Renewed(r) => {
                let block = codec::int("block", r.block)?;
                let (id, tx_hash) = (codec::b256(&r.id), codec::b256(&r.tx_hash));
                let cycle = i64::from(r.cycle);
                c.execute(
                    INSERT_RENEWAL,
                    args![network, &id, cycle, r.outcome.as_str(), &tx_hash, block, at],
                )
                .await?;
            }
            SubscriptionEvent::Notify {
                id,
                subject,
                kind,
                data,
            } => {
                let (sql, key) = match subject {
                    Subject::Plan(p) => (PLAN_PROVIDER, codec::b256(p)),
                    Subject::Subscription(s) => (SUBSCRIPTION_PROVIDER, codec::b256(s)),
                };
                if let Some(state) = state_after(kind) {
                    c.execute(APPLY_STATE, args![network, &key, state.as_str(), at])
                        .await?;
                }
                let provider: Option<(String,)> =
                    c.fetch_optional(sql, args![network, &key]).await?;
                if let Some((provider,)) = provider {
                    let e = NewEvent {
                        id: id.clone(),
                        provider: parse_address("provider", &provider)?,
                        r#type: (*kind).to_owned(),
                        data: data.clone(),
                        created_at: u64::try_from(at).unwrap_or(0),
                    };
                    webhooks::emit(c, &e).await?;
                }
            }
        }
    }
    c.execute(UPSERT_CURSOR, args![network, next_block, at])
        .await?;
    Ok(())
}

/// [`crate::Store::due_subscriptions`].
pub(crate) async fn due(
    c: &mut impl Conn,
    network: &str,
    now: u64,
    limit: u32,
) -> StoreResult<Vec<IndexedSubscription>> {
    let now = codec::int("now", now)?;
    let rows: Vec<IndexedRow> = c
        .fetch_all(SELECT_DUE, args![network, now, i64::from(limit)])
        .await?;
    rows.into_iter().map(decode_indexed).collect()
}

/// [`crate::Store::subscriptions_of`].
pub(crate) async fn of_subscriber(
    c: &mut impl Conn,
    network: &str,
    subscriber: Address,
) -> StoreResult<Vec<IndexedSubscription>> {
    let rows: Vec<IndexedRow> = c
        .fetch_all(
            SELECT_OF_SUBSCRIBER,
            args![network, &codec::address(&subscriber)],
        )
        .await?;
    rows.into_iter().map(decode_indexed).collect()
}

/// [`crate::Store::indexed_subscription`].
pub(crate) async fn indexed(
    c: &mut impl Conn,
    network: &str,
    id: B256,
) -> StoreResult<Option<IndexedSubscription>> {
    let row: Option<IndexedRow> = c
        .fetch_optional(SELECT_ONE, args![network, &codec::b256(&id)])
        .await?;
    row.map(decode_indexed).transpose()
}

/// [`crate::Store::update_indexed_subscription`].
pub(crate) async fn update_seen(
    c: &mut impl Conn,
    network: &str,
    id: B256,
    state: IndexedState,
    cycle: u32,
    next_due: u64,
    at: u64,
) -> StoreResult<()> {
    let next_due = codec::int("next_due", next_due)?;
    let at = codec::int("updated_at", at)?;
    let id = codec::b256(&id);
    c.execute(
        UPDATE_SEEN,
        args![network, &id, state.as_str(), i64::from(cycle), next_due, at],
    )
    .await?;
    Ok(())
}

/// [`crate::Store::record_renewal`], inside the caller's transaction.
pub(crate) async fn record(
    c: &mut impl Conn,
    r: &Renewal,
    state: IndexedState,
    next_due: u64,
) -> StoreResult<bool> {
    let block = codec::int("block", r.block)?;
    let at = codec::int("created_at", r.at)?;
    let next_due = codec::int("next_due", next_due)?;
    let (id, tx_hash) = (codec::b256(&r.id), codec::b256(&r.tx_hash));
    let done = c
        .execute(
            INSERT_RENEWAL,
            args![
                &r.network,
                &id,
                i64::from(r.cycle),
                r.outcome.as_str(),
                &tx_hash,
                block,
                at
            ],
        )
        .await?;
    // A failed cycle stays unpaid: the row keeps the last paid cycle.
    let cycle = match r.outcome {
        RenewalOutcome::Renewed => r.cycle,
        RenewalOutcome::Failed => r.cycle.saturating_sub(1),
    };
    c.execute(
        UPDATE_SEEN,
        args![
            &r.network,
            &id,
            state.as_str(),
            i64::from(cycle),
            next_due,
            at
        ],
    )
    .await?;
    Ok(done > 0)
}

/// [`crate::Store::renewals`].
pub(crate) async fn list(c: &mut impl Conn, network: &str, id: B256) -> StoreResult<Vec<Renewal>> {
    let rows: Vec<RenewalRow> = c
        .fetch_all(SELECT_RENEWALS, args![network, &codec::b256(&id)])
        .await?;
    rows.into_iter().map(decode_renewal).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEXED_COLUMNS: &str = "network, id, plan_id, subscriber, state, cycle, next_due";

    #[test]
    fn selects_name_the_indexed_columns() {
        for sql in [SELECT_DUE, SELECT_ONE] {
            assert!(
                sql.starts_with(&format!("SELECT {INDEXED_COLUMNS} ")),
                "{sql}"
            );
        }
    }
}
