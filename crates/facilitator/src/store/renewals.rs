//! The renewal keeper's rows: indexed subscriptions, the log cursor, and recorded renewals
//! (types, encoding and the SQL both stores share, in each dialect).

use alloy::primitives::{Address, B256};

use super::{
    StoreError, StoreResult,
    codec::{parse_address, parse_b256},
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
pub(super) fn state_after(kind: &str) -> Option<IndexedState> {
    match kind {
        "subscription.paused" | "subscription.renewal_failed" => Some(IndexedState::Paused),
        "subscription.cancelled" => Some(IndexedState::Cancelled),
        _ => None,
    }
}

impl IndexedState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Paused => "paused",
            Self::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> StoreResult<Self> {
        match s {
            "active" => Ok(Self::Active),
            "paused" => Ok(Self::Paused),
            "cancelled" => Ok(Self::Cancelled),
            other => Err(StoreError::Corrupt(format!("state = {other:.40}"))),
        }
    }
}

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

impl RenewalOutcome {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Renewed => "renewed",
            Self::Failed => "failed",
        }
    }

    fn parse(s: &str) -> StoreResult<Self> {
        match s {
            "renewed" => Ok(Self::Renewed),
            "failed" => Ok(Self::Failed),
            other => Err(StoreError::Corrupt(format!("outcome = {other:.40}"))),
        }
    }
}

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
pub(super) type IndexedRow = (String, String, String, String, String, i64, i64);

pub(super) fn decode_indexed(row: IndexedRow) -> StoreResult<IndexedSubscription> {
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
pub(super) type RenewalRow = (String, String, i64, String, String, i64, i64);

pub(super) fn decode_renewal(row: RenewalRow) -> StoreResult<Renewal> {
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

/// The SQL, in SQLite's (`?N`) and PostgreSQL's (`$N`) spelling.
pub(super) struct Sql {
    pub(super) select_cursor: &'static str,
    pub(super) upsert_cursor: &'static str,
    pub(super) insert_created: &'static str,
    pub(super) apply_resumed: &'static str,
    /// (network, id, state, at): a pause or cancel seen in the logs (cancelled is final).
    pub(super) apply_state: &'static str,
    pub(super) select_due: &'static str,
    pub(super) select_one: &'static str,
    pub(super) update_seen: &'static str,
    pub(super) insert_renewal: &'static str,
    pub(super) select_renewals: &'static str,
}

pub(super) const SQLITE: Sql = Sql {
    select_cursor: "SELECT next_block FROM keeper_cursors WHERE network = ?1",
    upsert_cursor: "INSERT INTO keeper_cursors (network, next_block, updated_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (network) DO UPDATE SET \
         next_block = MAX(keeper_cursors.next_block, excluded.next_block), updated_at = excluded.updated_at",
    insert_created: "INSERT INTO subscriptions_index \
         (network, id, plan_id, subscriber, state, cycle, next_due, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 'active', 1, ?5, ?6) ON CONFLICT (network, id) DO NOTHING",
    apply_resumed: "UPDATE subscriptions_index SET state = 'active', next_due = ?3, updated_at = ?4 \
         WHERE network = ?1 AND id = ?2 AND state <> 'cancelled'",
    apply_state: "UPDATE subscriptions_index SET state = ?3, updated_at = ?4 \
         WHERE network = ?1 AND id = ?2 AND state <> 'cancelled'",
    select_due: const_format_due::SQLITE_DUE,
    select_one: const_format_due::SQLITE_ONE,
    update_seen: "UPDATE subscriptions_index SET state = ?3, cycle = ?4, next_due = ?5, updated_at = ?6 \
         WHERE network = ?1 AND id = ?2 AND cycle <= ?4",
    insert_renewal: "INSERT INTO renewals (network, id, cycle, outcome, tx_hash, block, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (network, id, cycle) DO NOTHING",
    select_renewals: "SELECT network, id, cycle, outcome, tx_hash, block, created_at FROM renewals \
         WHERE network = ?1 AND id = ?2 ORDER BY cycle",
};

pub(super) const POSTGRES: Sql = Sql {
    select_cursor: "SELECT next_block FROM keeper_cursors WHERE network = $1",
    upsert_cursor: "INSERT INTO keeper_cursors (network, next_block, updated_at) VALUES ($1, $2, $3) \
         ON CONFLICT (network) DO UPDATE SET \
         next_block = GREATEST(keeper_cursors.next_block, excluded.next_block), updated_at = excluded.updated_at",
    insert_created: "INSERT INTO subscriptions_index \
         (network, id, plan_id, subscriber, state, cycle, next_due, updated_at) \
         VALUES ($1, $2, $3, $4, 'active', 1, $5, $6) ON CONFLICT (network, id) DO NOTHING",
    apply_resumed: "UPDATE subscriptions_index SET state = 'active', next_due = $3, updated_at = $4 \
         WHERE network = $1 AND id = $2 AND state <> 'cancelled'",
    apply_state: "UPDATE subscriptions_index SET state = $3, updated_at = $4 \
         WHERE network = $1 AND id = $2 AND state <> 'cancelled'",
    select_due: const_format_due::POSTGRES_DUE,
    select_one: const_format_due::POSTGRES_ONE,
    update_seen: "UPDATE subscriptions_index SET state = $3, cycle = $4, next_due = $5, updated_at = $6 \
         WHERE network = $1 AND id = $2 AND cycle <= $4",
    insert_renewal: "INSERT INTO renewals (network, id, cycle, outcome, tx_hash, block, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (network, id, cycle) DO NOTHING",
    select_renewals: "SELECT network, id, cycle, outcome, tx_hash, block, created_at FROM renewals \
         WHERE network = $1 AND id = $2 ORDER BY cycle",
};

/// The selects of indexed rows, in the column order of [`IndexedRow`].
mod const_format_due {
    pub(super) const SQLITE_DUE: &str = "SELECT network, id, plan_id, subscriber, state, cycle, next_due \
         FROM subscriptions_index WHERE network = ?1 AND state = 'active' AND next_due <= ?2 \
         ORDER BY next_due LIMIT ?3";
    pub(super) const SQLITE_ONE: &str = "SELECT network, id, plan_id, subscriber, state, cycle, next_due \
         FROM subscriptions_index WHERE network = ?1 AND id = ?2";
    pub(super) const POSTGRES_DUE: &str = "SELECT network, id, plan_id, subscriber, state, cycle, next_due \
         FROM subscriptions_index WHERE network = $1 AND state = 'active' AND next_due <= $2 \
         ORDER BY next_due LIMIT $3";
    pub(super) const POSTGRES_ONE: &str = "SELECT network, id, plan_id, subscriber, state, cycle, next_due \
         FROM subscriptions_index WHERE network = $1 AND id = $2";
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEXED_COLUMNS: &str = "network, id, plan_id, subscriber, state, cycle, next_due";

    #[test]
    fn selects_name_the_indexed_columns() {
        for sql in [
            SQLITE.select_due,
            SQLITE.select_one,
            POSTGRES.select_due,
            POSTGRES.select_one,
        ] {
            assert!(
                sql.starts_with(&format!("SELECT {INDEXED_COLUMNS} ")),
                "{sql}"
            );
        }
    }
}
