//! The renewal keeper's rows: indexed subscriptions, the log cursor, and recorded renewals
//! (types, decoding, the statements and the operations on them).

use alloy::primitives::{Address, B256};
use tollgate_protocol::webhook::{EventData, EventType, events::SubscriptionRenewalStuck};

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
fn state_after(kind: Option<EventType>) -> Option<IndexedState> {
    match kind? {
        EventType::SubscriptionPaused | EventType::SubscriptionRenewalFailed => {
            Some(IndexedState::Paused)
        }
        EventType::SubscriptionCancelled => Some(IndexedState::Cancelled),
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
        /// The event's type and data (boxed: the largest variant by far).
        data: Box<EventData>,
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

/// A `collect` the keeper's simulation refused for a reason it does not expect (not
/// `WrongCycle`, `NotDue` or `SubscriptionNotActive`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedCollect {
    /// Network name.
    pub network: String,
    /// The subscription id.
    pub id: B256,
    /// The cycle it tried to collect.
    pub cycle: u32,
    /// The refusal, as the keeper logged it.
    pub error: String,
    /// Unix seconds.
    pub at: u64,
}

/// The count of refused collections of one subscription's cycle, after one more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollectAttempts {
    /// Refused collections of this cycle counted so far (this one included).
    pub attempts: u32,
    /// The subscription is stuck: at or past the limit, out of the due set.
    pub stuck: bool,
    /// It became stuck with this count (its `subscription.renewal_stuck` event was recorded).
    pub newly_stuck: bool,
}

/// Why a renewal needs the provider's attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RenewalIssueKind {
    /// `RenewalFailed` on-chain: the subscription is paused and the cycle unpaid.
    Failed,
    /// The keeper's collections were refused the limit's number of times; it no longer tries.
    Stuck,
}

/// A subscription whose renewal failed or is stuck ([`crate::Store::renewal_issues`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenewalIssue {
    /// Network name.
    pub network: String,
    /// The subscription id.
    pub id: B256,
    /// Its plan.
    pub plan_id: B256,
    /// Its subscriber.
    pub subscriber: Address,
    /// The cycle that was not collected.
    pub cycle: u32,
    /// Failed or stuck.
    pub kind: RenewalIssueKind,
    /// Collections tried (1 for a failed renewal).
    pub attempts: u32,
    /// The failed `collect` transaction (failed), or the last refusal (stuck).
    pub detail: String,
    /// When it failed or became stuck (unix seconds).
    pub at: u64,
}

/// A renewal issue row: network, id, plan id, subscriber, cycle, attempts, detail, at.
type IssueRow = (String, String, String, String, i64, i64, String, i64);

fn decode_issue(kind: RenewalIssueKind, row: IssueRow) -> StoreResult<RenewalIssue> {
    let (network, id, plan_id, subscriber, cycle, attempts, detail, at) = row;
    let corrupt = |what: &str, v: i64| StoreError::Corrupt(format!("{what} = {v}"));
    Ok(RenewalIssue {
        network,
        id: parse_b256("id", &id)?,
        plan_id: parse_b256("plan_id", &plan_id)?,
        subscriber: parse_address("subscriber", &subscriber)?,
        cycle: u32::try_from(cycle).map_err(|_| corrupt("cycle", cycle))?,
        kind,
        attempts: u32::try_from(attempts).map_err(|_| corrupt("attempts", attempts))?,
        detail,
        at: u64::try_from(at).map_err(|_| corrupt("at", at))?,
    })
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

// A stuck subscription ([`count_refused`]) is left out until its row is deleted.
const SELECT_DUE: &str = concat!(
    "SELECT ",
    indexed_columns!(),
    " FROM subscriptions_index s WHERE network = $1 AND state = 'active' AND next_due <= $2 \
     AND NOT EXISTS (SELECT 1 FROM renewal_attempts a WHERE a.network = s.network \
     AND a.id = s.id AND a.stuck_at IS NOT NULL) ORDER BY next_due LIMIT $3"
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

/// (network, id, cycle, error, at): one more refused collection of `cycle`; a new cycle starts
/// the count again (and is not stuck).
const UPSERT_ATTEMPT: &str = "INSERT INTO renewal_attempts \
     (network, id, cycle, attempts, last_error, stuck_at, updated_at) \
     VALUES ($1, $2, $3, 1, $4, NULL, $5) ON CONFLICT (network, id) DO UPDATE SET \
     attempts = CASE WHEN renewal_attempts.cycle = excluded.cycle \
     THEN renewal_attempts.attempts + 1 ELSE 1 END, \
     stuck_at = CASE WHEN renewal_attempts.cycle = excluded.cycle \
     THEN renewal_attempts.stuck_at ELSE NULL END, \
     cycle = excluded.cycle, last_error = excluded.last_error, updated_at = excluded.updated_at";

const SELECT_ATTEMPT: &str =
    "SELECT attempts, stuck_at FROM renewal_attempts WHERE network = $1 AND id = $2";

const MARK_STUCK: &str = "UPDATE renewal_attempts SET stuck_at = $3 \
     WHERE network = $1 AND id = $2 AND stuck_at IS NULL";

/// (network, id): the chain's state of the subscription changed; counting starts again.
const CLEAR_ATTEMPTS: &str = "DELETE FROM renewal_attempts WHERE network = $1 AND id = $2";

/// (provider, limit) → the stuck subscriptions of its plans, latest first.
const SELECT_STUCK: &str = "SELECT a.network, a.id, s.plan_id, s.subscriber, a.cycle, \
     a.attempts, a.last_error, a.stuck_at FROM renewal_attempts a \
     JOIN subscriptions_index s ON s.network = a.network AND s.id = a.id \
     JOIN plans p ON p.network = s.network AND p.plan_id = s.plan_id \
     WHERE p.provider = $1 AND a.stuck_at IS NOT NULL ORDER BY a.stuck_at DESC, a.id LIMIT $2";

/// (provider, limit) → the subscriptions of its plans paused by a failed renewal and not paid
/// since (the failed cycle is still the next one), latest first.
const SELECT_FAILED: &str = "SELECT r.network, r.id, s.plan_id, s.subscriber, r.cycle, \
     CAST(1 AS BIGINT), r.tx_hash, r.created_at FROM renewals r \
     JOIN subscriptions_index s ON s.network = r.network AND s.id = r.id \
     JOIN plans p ON p.network = s.network AND p.plan_id = s.plan_id \
     WHERE p.provider = $1 AND r.outcome = 'failed' AND s.state = 'paused' \
     AND r.cycle = s.cycle + 1 ORDER BY r.created_at DESC, r.id LIMIT $2";

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
                let id = codec::b256(id);
                c.execute(APPLY_RESUMED, args![network, &id, next_due, at])
                    .await?;
                c.execute(CLEAR_ATTEMPTS, args![network, &id]).await?;
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
            SubscriptionEvent::Notify { id, subject, data } => {
                let (sql, key) = match subject {
                    Subject::Plan(p) => (PLAN_PROVIDER, codec::b256(p)),
                    Subject::Subscription(s) => (SUBSCRIPTION_PROVIDER, codec::b256(s)),
                };
                if let Some(state) = state_after(data.event_type()) {
                    c.execute(APPLY_STATE, args![network, &key, state.as_str(), at])
                        .await?;
                }
                // Any event of a subscription changes its state on-chain: a stuck renewal is
                // tried again.
                if matches!(subject, Subject::Subscription(_)) {
                    c.execute(CLEAR_ATTEMPTS, args![network, &key]).await?;
                }
                let provider: Option<(String,)> =
                    c.fetch_optional(sql, args![network, &key]).await?;
                if let Some((provider,)) = provider {
                    let e = NewEvent::new(
                        id.clone(),
                        parse_address("provider", &provider)?,
                        data,
                        u64::try_from(at).unwrap_or(0),
                    );
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
    c.execute(CLEAR_ATTEMPTS, args![&r.network, &id]).await?;
    Ok(done > 0)
}

/// [`crate::Store::count_refused_collect`], inside the caller's transaction.
pub(crate) async fn count_refused(
    c: &mut impl Conn,
    r: &RefusedCollect,
    limit: u32,
) -> StoreResult<CollectAttempts> {
    let at = codec::int("updated_at", r.at)?;
    let id = codec::b256(&r.id);
    c.execute(
        UPSERT_ATTEMPT,
        args![&r.network, &id, i64::from(r.cycle), &r.error, at],
    )
    .await?;
    let (attempts, stuck_at): (i64, Option<i64>) =
        c.fetch_one(SELECT_ATTEMPT, args![&r.network, &id]).await?;
    let attempts = u32::try_from(attempts)
        .map_err(|_| StoreError::Corrupt(format!("attempts = {attempts}")))?;
    if stuck_at.is_some() || attempts < limit.max(1) {
        return Ok(CollectAttempts {
            attempts,
            stuck: stuck_at.is_some(),
            newly_stuck: false,
        });
    }
    let newly_stuck = c.execute(MARK_STUCK, args![&r.network, &id, at]).await? > 0;
    if newly_stuck {
        let provider: Option<(String,)> = c
            .fetch_optional(SUBSCRIPTION_PROVIDER, args![&r.network, &id])
            .await?;
        if let Some((provider,)) = provider {
            let data = EventData::SubscriptionRenewalStuck(SubscriptionRenewalStuck {
                network: crate::codec::parse_network("network", &r.network)?,
                subscription_id: r.id,
                cycle: r.cycle,
                attempts,
                error: r.error.clone(),
            });
            // One event per stuck episode (a state change ends one).
            let id = webhooks::event_id(&[
                r.network.as_bytes(),
                data.type_name().as_bytes(),
                r.id.as_slice(),
                &r.cycle.to_be_bytes(),
                &r.at.to_be_bytes(),
            ]);
            let e = NewEvent::new(id, parse_address("provider", &provider)?, &data, r.at);
            webhooks::emit(c, &e).await?;
        }
    }
    Ok(CollectAttempts {
        attempts,
        stuck: true,
        newly_stuck,
    })
}

/// [`crate::Store::renewal_issues`].
pub(crate) async fn issues(
    c: &mut impl Conn,
    provider: Address,
    limit: u32,
) -> StoreResult<Vec<RenewalIssue>> {
    let provider = codec::address(&provider);
    let limit = i64::from(limit);
    let stuck: Vec<IssueRow> = c.fetch_all(SELECT_STUCK, args![&provider, limit]).await?;
    let failed: Vec<IssueRow> = c.fetch_all(SELECT_FAILED, args![&provider, limit]).await?;
    let mut all = stuck
        .into_iter()
        .map(|r| decode_issue(RenewalIssueKind::Stuck, r))
        .chain(
            failed
                .into_iter()
                .map(|r| decode_issue(RenewalIssueKind::Failed, r)),
        )
        .collect::<StoreResult<Vec<_>>>()?;
    all.sort_by(|a, b| b.at.cmp(&a.at).then(a.id.cmp(&b.id)));
    all.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(all)
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

    /// The bound on refused collections, on SQLite: counted per cycle (a new cycle starts
    /// again), stuck at the limit with one event for the plan's owner, out of the due set and
    /// listed as an issue until an event of the subscription clears it.
    #[tokio::test]
    async fn refused_collections_are_bounded_per_cycle_and_cleared_by_a_change() {
        use crate::{PlanOwner, SqliteStore, Store};
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let (net, id, plan_id) = ("n", B256::repeat_byte(1), B256::repeat_byte(2));
        let provider = Address::repeat_byte(3);
        store
            .insert_plan(&PlanOwner {
                network: net.into(),
                plan_id,
                provider,
                relayer: Address::repeat_byte(4),
                created_at: 1,
            })
            .await
            .unwrap();
        let created = SubscriptionEvent::Created {
            id,
            plan_id,
            subscriber: Address::repeat_byte(5),
            paid_through: 10,
        };
        store
            .index_subscription_events(net, &[created], 1, 1)
            .await
            .unwrap();
        let refused = |cycle: u32, at: u64| RefusedCollect {
            network: net.into(),
            id,
            cycle,
            error: "execution reverted".into(),
            at,
        };
        let due = async || store.due_subscriptions(net, 100, 10).await.unwrap().len();
        let stuck_events = async || {
            store
                .events(provider, 0, 100)
                .await
                .unwrap()
                .iter()
                .filter(|e| e.new.r#type == "subscription.renewal_stuck")
                .count()
        };
        for n in 1..=2 {
            let c = store
                .count_refused_collect(&refused(2, n), 3)
                .await
                .unwrap();
            assert_eq!(
                (c.attempts, c.stuck, c.newly_stuck),
                (u32::try_from(n).unwrap(), false, false)
            );
        }
        // Another cycle starts the count again.
        let c = store
            .count_refused_collect(&refused(3, 3), 3)
            .await
            .unwrap();
        assert_eq!((c.attempts, c.stuck), (1, false));
        for n in 2..=3 {
            let c = store
                .count_refused_collect(&refused(3, 3 + n), 3)
                .await
                .unwrap();
            assert_eq!(
                (c.attempts, c.stuck, c.newly_stuck),
                (n as u32, n == 3, n == 3)
            );
        }
        assert_eq!(due().await, 0, "stuck: out of the due set");
        assert_eq!(stuck_events().await, 1);
        let issues = store.renewal_issues(provider, 10).await.unwrap();
        assert_eq!(issues.len(), 1);
        assert_eq!(
            (
                issues[0].id,
                issues[0].cycle,
                issues[0].kind,
                issues[0].attempts
            ),
            (id, 3, RenewalIssueKind::Stuck, 3)
        );
        assert!(
            store
                .renewal_issues(Address::ZERO, 10)
                .await
                .unwrap()
                .is_empty()
        );
        // Counted again while stuck: no second event.
        let c = store
            .count_refused_collect(&refused(3, 9), 3)
            .await
            .unwrap();
        assert_eq!((c.attempts, c.stuck, c.newly_stuck), (4, true, false));
        assert_eq!(stuck_events().await, 1);
        // An event of the subscription (its allowance raised on-chain) clears it.
        let raised = SubscriptionEvent::Notify {
            id: "evt_raised".into(),
            subject: Subject::Subscription(id),
            data: Box::new(EventData::AllowanceRaised(
                tollgate_protocol::webhook::events::AllowanceRaised {
                    source: tollgate_protocol::webhook::events::ChainSource {
                        network: net.parse().unwrap(),
                        tx_hash: B256::ZERO,
                        block: 1,
                    },
                    subscription_id: id,
                    max_overage: tollgate_protocol::Amount::ZERO,
                },
            )),
        };
        store
            .index_subscription_events(net, &[raised], 2, 10)
            .await
            .unwrap();
        assert_eq!(due().await, 1);
        assert!(store.renewal_issues(provider, 10).await.unwrap().is_empty());
        let c = store
            .count_refused_collect(&refused(3, 11), 3)
            .await
            .unwrap();
        assert_eq!((c.attempts, c.stuck), (1, false));
    }

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
