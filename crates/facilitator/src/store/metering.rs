//! The metering rows: the overage allowance ledger per (subscription, cycle), each deduction, and
//! the on-chain charges (types, decoding and the SQL both stores share, in each dialect).
//!
//! Amounts here are `u64` units stored as `BIGINT`/`INTEGER`, so that the cap check is one
//! conditional `UPDATE` (`amount <= cap - used`), exact under any concurrency: SQLite runs it on
//! its single writer, PostgreSQL under the row's lock. Amounts are bounded by `i64::MAX` units
//! (9.2 trillion tokens at 6 decimals); a larger on-chain cap is stored as `i64::MAX`, which only
//! ever lowers it.

use alloy::primitives::{Address, B256};

use super::{
    StoreError, StoreResult,
    codec::{parse_address, parse_b256},
};

/// The largest amount the ledger holds (`i64::MAX` units).
pub const MAX_METERED: u64 = i64::MAX as u64;

/// One subscription cycle's overage ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowanceCycle {
    /// Network name.
    pub network: String,
    /// The subscription id.
    pub id: B256,
    /// The billing cycle.
    pub cycle: u32,
    /// The cap (`maxOverage`, as last read from the chain; it only rises).
    pub cap: u64,
    /// Deducted so far.
    pub used: u64,
    /// Put into on-chain charges (pending, confirmed or failed).
    pub billed: u64,
    /// Charged on-chain (confirmed).
    pub charged: u64,
    /// Charges that failed on-chain.
    pub unpaid: u64,
    /// How many deductions.
    pub deductions: u64,
    /// How many charges were started.
    pub charges: u32,
    /// Whether the cycle ended: no deduction lands after this.
    pub closed: bool,
    /// When the oldest deduction not yet billed was made.
    pub first_unbilled_at: Option<u64>,
}

impl AllowanceCycle {
    /// What may still be deducted.
    pub fn remaining(&self) -> u64 {
        self.cap.saturating_sub(self.used)
    }

    /// Deducted but not yet put into a charge.
    pub fn unbilled(&self) -> u64 {
        self.used.saturating_sub(self.billed)
    }
}

/// A deduction to apply ([`super::Store::deduct_allowance`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deduction {
    /// Network name.
    pub network: String,
    /// The subscription id.
    pub id: B256,
    /// The cycle it counts against (the subscription's current cycle on-chain).
    pub cycle: u32,
    /// The cap as just read from the chain (a higher stored cap is kept).
    pub cap: u64,
    /// The amount (positive, at most [`MAX_METERED`]).
    pub amount: u64,
    /// The caller's idempotency key, unique per subscription.
    pub key: Option<String>,
    /// The plan's provider, told (`allowance.exhausted`) when the deduction is refused at the cap.
    pub provider: Option<Address>,
    /// Unix seconds.
    pub at: u64,
}

/// What a deduction came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeductOutcome {
    /// Applied; the ledger after it.
    Applied(AllowanceCycle),
    /// The idempotency key was used before with the same amount: nothing applied; the ledger of
    /// the cycle it was applied to.
    Replayed(AllowanceCycle),
    /// It would cross the cap: nothing applied.
    Exhausted(AllowanceCycle),
    /// The cycle has ended: nothing applied.
    Closed(AllowanceCycle),
    /// The idempotency key was used before with another amount: nothing applied.
    KeyConflict,
}

/// A charge to start ([`super::Store::begin_charge`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCharge {
    /// Network name.
    pub network: String,
    /// The subscription id.
    pub id: B256,
    /// The cycle charged.
    pub cycle: u32,
    /// The cycle's charge count before this one (the start is refused if another started since).
    pub index: u32,
    /// The on-chain idempotency reference.
    pub reference: B256,
    /// The amount (at most the cycle's unbilled usage).
    pub amount: u64,
    /// The account that sends `chargeOverage` (the plan's operator).
    pub relayer: Address,
    /// Unix seconds.
    pub at: u64,
}

/// Where a charge stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChargeState {
    /// Written; sent or about to be.
    Pending,
    /// `OverageCharged` confirmed (or the reference was found applied).
    Confirmed,
    /// Reverted for good (the subscriber could not pay, or the cycle moved on).
    Failed,
}

impl ChargeState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Confirmed => "confirmed",
            Self::Failed => "failed",
        }
    }

    fn parse(s: &str) -> StoreResult<Self> {
        match s {
            "pending" => Ok(Self::Pending),
            "confirmed" => Ok(Self::Confirmed),
            "failed" => Ok(Self::Failed),
            other => Err(StoreError::Corrupt(format!("state = {other:.40}"))),
        }
    }
}

/// An on-chain overage charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverageCharge {
    /// Network name.
    pub network: String,
    /// The on-chain idempotency reference.
    pub reference: B256,
    /// The subscription id.
    pub id: B256,
    /// The cycle charged.
    pub cycle: u32,
    /// The amount.
    pub amount: u64,
    /// The sender.
    pub relayer: Address,
    /// Where it stands.
    pub state: ChargeState,
    /// The transaction, once confirmed (none when found applied after a crash).
    pub tx_hash: Option<B256>,
    /// Why it failed.
    pub error: Option<String>,
}

/// How a charge ended ([`super::Store::finish_charge`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChargeOutcome {
    /// Applied on-chain.
    Confirmed {
        /// The transaction (none when found applied after a crash).
        tx_hash: Option<B256>,
    },
    /// Reverted for good.
    Failed {
        /// The revert's name and message.
        error: String,
    },
}

/// An allowance row, in the column order of [`ALLOWANCE_COLUMNS`].
pub(super) type AllowanceRow = (
    String,
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
);

/// The allowance columns, for `SELECT` and `RETURNING`.
macro_rules! allowance_columns {
    () => {
        "network, id, cycle, cap, used, billed, charged, unpaid, deductions, charges, closed, \
         first_unbilled_at"
    };
}

fn nonneg(what: &str, v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what} = {v}")))
}

fn cycle(v: i64) -> StoreResult<u32> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("cycle = {v}")))
}

pub(super) fn decode_allowance(row: AllowanceRow) -> StoreResult<AllowanceCycle> {
    let (network, id, c, cap, used, billed, charged, unpaid, deductions, charges, closed, first) =
        row;
    Ok(AllowanceCycle {
        network,
        id: parse_b256("id", &id)?,
        cycle: cycle(c)?,
        cap: nonneg("cap", cap)?,
        used: nonneg("used", used)?,
        billed: nonneg("billed", billed)?,
        charged: nonneg("charged", charged)?,
        unpaid: nonneg("unpaid", unpaid)?,
        deductions: nonneg("deductions", deductions)?,
        charges: u32::try_from(charges)
            .map_err(|_| StoreError::Corrupt(format!("charges = {charges}")))?,
        closed: closed != 0,
        first_unbilled_at: first.map(|v| nonneg("first_unbilled_at", v)).transpose()?,
    })
}

/// A charge row: network, reference, id, cycle, amount, relayer, state, tx hash, error.
pub(super) type ChargeRow = (
    String,
    String,
    String,
    i64,
    i64,
    String,
    String,
    Option<String>,
    Option<String>,
);

pub(super) fn decode_charge(row: ChargeRow) -> StoreResult<OverageCharge> {
    let (network, reference, id, c, amount, relayer, state, tx_hash, error) = row;
    Ok(OverageCharge {
        network,
        reference: parse_b256("reference", &reference)?,
        id: parse_b256("id", &id)?,
        cycle: cycle(c)?,
        amount: nonneg("amount", amount)?,
        relayer: parse_address("relayer", &relayer)?,
        state: ChargeState::parse(&state)?,
        tx_hash: tx_hash.map(|h| parse_b256("tx_hash", &h)).transpose()?,
        error,
    })
}

/// The state, tx hash and error columns of a finished charge.
pub(super) fn outcome_columns(o: &ChargeOutcome) -> (&'static str, Option<String>, Option<String>) {
    match o {
        ChargeOutcome::Confirmed { tx_hash } => (
            ChargeState::Confirmed.as_str(),
            tx_hash.as_ref().map(super::codec::b256),
            None,
        ),
        ChargeOutcome::Failed { error } => (
            ChargeState::Failed.as_str(),
            None,
            Some(error.chars().take(500).collect()),
        ),
    }
}

/// `(charged, unpaid)` increments of a finished charge of `amount`.
pub(super) fn split(o: &ChargeOutcome, amount: i64) -> (i64, i64) {
    match o {
        ChargeOutcome::Confirmed { .. } => (amount, 0),
        ChargeOutcome::Failed { .. } => (0, amount),
    }
}

/// An amount for a ledger column: saturated at `i64::MAX` (only caps are ever that large).
pub(super) fn units(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The SQL, in SQLite's (`?N`) and PostgreSQL's (`$N`) spelling.
pub(super) struct Sql {
    /// Inserts the cycle's row, or raises its cap: (network, id, cycle, cap, at) → the row.
    pub(super) upsert_cycle: &'static str,
    /// (network, id, idempotency key) → (cycle, amount) of the earlier deduction.
    pub(super) select_key: &'static str,
    /// The conditional deduction: (network, id, cycle, amount, at) → the row, when applied.
    pub(super) deduct: &'static str,
    /// (network, id, cycle, seq, amount, key, at).
    pub(super) insert_record: &'static str,
    /// PostgreSQL only: the common case in one statement (an existing open cycle, no idempotency
    /// key): (network, id, cycle, amount, at, cap) → the row, when applied, with its record.
    pub(super) deduct_existing: &'static str,
    /// (network, id, cycle) → the row.
    pub(super) select_cycle: &'static str,
    /// (network, id) → the latest cycle's row.
    pub(super) select_latest: &'static str,
    /// (network, id, cycle, at).
    pub(super) close_cycle: &'static str,
    /// (network, min unbilled, started at or before, limit) → rows.
    pub(super) select_to_bill: &'static str,
    /// (network, id, cycle, index, amount, at): bills `amount` if the charge count is `index`.
    pub(super) bill: &'static str,
    /// (network, reference, id, cycle, amount, relayer, at).
    pub(super) insert_charge: &'static str,
    /// (network, limit) → pending charges, oldest first.
    pub(super) select_pending: &'static str,
    /// (network, reference, state, tx hash, error, at) → (id, cycle, amount) when it was pending.
    pub(super) finish_charge: &'static str,
    /// (network, id, cycle, confirmed amount, failed amount, at).
    pub(super) settle_cycle: &'static str,
    /// (network, id, cycle) → the cycle's charges, oldest first.
    pub(super) select_charges: &'static str,
}

macro_rules! charge_columns {
    () => {
        "network, reference, id, cycle, amount, relayer, state, tx_hash, error"
    };
}

pub(super) const SQLITE: Sql = Sql {
    upsert_cycle: concat!(
        "INSERT INTO allowance_cycles (network, id, cycle, cap, used, billed, charged, unpaid, \
         deductions, charges, closed, first_unbilled_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 0, 0, 0, 0, 0, 0, 0, NULL, ?5) \
         ON CONFLICT (network, id, cycle) DO UPDATE SET cap = MAX(allowance_cycles.cap, excluded.cap) \
         RETURNING ",
        allowance_columns!()
    ),
    select_key: "SELECT cycle, amount FROM usage_records \
         WHERE network = ?1 AND id = ?2 AND idempotency_key = ?3",
    deduct: concat!(
        "UPDATE allowance_cycles SET used = used + ?4, deductions = deductions + 1, \
         first_unbilled_at = COALESCE(first_unbilled_at, ?5), updated_at = ?5 \
         WHERE network = ?1 AND id = ?2 AND cycle = ?3 AND closed = 0 AND ?4 <= cap - used \
         RETURNING ",
        allowance_columns!()
    ),
    insert_record: "INSERT INTO usage_records \
         (network, id, cycle, seq, amount, idempotency_key, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    // SQLite has no data-modifying CTEs; its single writer makes the multi-statement path cheap.
    deduct_existing: "",
    select_cycle: concat!(
        "SELECT ",
        allowance_columns!(),
        " FROM allowance_cycles WHERE network = ?1 AND id = ?2 AND cycle = ?3"
    ),
    select_latest: concat!(
        "SELECT ",
        allowance_columns!(),
        " FROM allowance_cycles WHERE network = ?1 AND id = ?2 ORDER BY cycle DESC LIMIT 1"
    ),
    close_cycle: "UPDATE allowance_cycles SET closed = 1, updated_at = ?4 \
         WHERE network = ?1 AND id = ?2 AND cycle = ?3",
    select_to_bill: concat!(
        "SELECT ",
        allowance_columns!(),
        " FROM allowance_cycles WHERE network = ?1 AND used > billed \
         AND (closed = 1 OR used - billed >= ?2 OR first_unbilled_at <= ?3) \
         ORDER BY first_unbilled_at LIMIT ?4"
    ),
    bill: "UPDATE allowance_cycles SET billed = billed + ?5, charges = charges + 1, \
         first_unbilled_at = CASE WHEN used > billed + ?5 THEN ?6 ELSE NULL END, updated_at = ?6 \
         WHERE network = ?1 AND id = ?2 AND cycle = ?3 AND charges = ?4 AND ?5 <= used - billed",
    insert_charge: "INSERT INTO overage_charges (network, reference, id, cycle, amount, relayer, \
         state, tx_hash, block, error, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', NULL, NULL, NULL, ?7, ?7)",
    select_pending: concat!(
        "SELECT ",
        charge_columns!(),
        " FROM overage_charges WHERE network = ?1 AND state = 'pending' ORDER BY created_at LIMIT ?2"
    ),
    finish_charge: "UPDATE overage_charges SET state = ?3, tx_hash = ?4, error = ?5, updated_at = ?6 \
         WHERE network = ?1 AND reference = ?2 AND state = 'pending' RETURNING id, cycle, amount",
    settle_cycle: "UPDATE allowance_cycles SET charged = charged + ?4, unpaid = unpaid + ?5, \
         updated_at = ?6 WHERE network = ?1 AND id = ?2 AND cycle = ?3",
    select_charges: concat!(
        "SELECT ",
        charge_columns!(),
        " FROM overage_charges WHERE network = ?1 AND id = ?2 AND cycle = ?3 ORDER BY created_at, reference"
    ),
};

pub(super) const POSTGRES: Sql = Sql {
    upsert_cycle: concat!(
        "INSERT INTO allowance_cycles (network, id, cycle, cap, used, billed, charged, unpaid, \
         deductions, charges, closed, first_unbilled_at, updated_at) \
         VALUES ($1, $2, $3, $4, 0, 0, 0, 0, 0, 0, 0, NULL, $5) \
         ON CONFLICT (network, id, cycle) DO UPDATE SET cap = GREATEST(allowance_cycles.cap, excluded.cap) \
         RETURNING ",
        allowance_columns!()
    ),
    select_key: "SELECT cycle, amount FROM usage_records \
         WHERE network = $1 AND id = $2 AND idempotency_key = $3",
    deduct: concat!(
        "UPDATE allowance_cycles SET used = used + $4, deductions = deductions + 1, \
         first_unbilled_at = COALESCE(first_unbilled_at, $5), updated_at = $5 \
         WHERE network = $1 AND id = $2 AND cycle = $3 AND closed = 0 AND $4 <= cap - used \
         RETURNING ",
        allowance_columns!()
    ),
    insert_record: "INSERT INTO usage_records \
         (network, id, cycle, seq, amount, idempotency_key, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    deduct_existing: concat!(
        "WITH d AS (UPDATE allowance_cycles SET cap = GREATEST(cap, $6), used = used + $4, \
         deductions = deductions + 1, first_unbilled_at = COALESCE(first_unbilled_at, $5), \
         updated_at = $5 \
         WHERE network = $1 AND id = $2 AND cycle = $3 AND closed = 0 \
         AND $4 <= GREATEST(cap, $6) - used RETURNING ",
        allowance_columns!(),
        "), r AS (INSERT INTO usage_records \
         (network, id, cycle, seq, amount, idempotency_key, created_at) \
         SELECT network, id, cycle, deductions, $4, NULL, $5 FROM d) SELECT ",
        allowance_columns!(),
        " FROM d"
    ),
    select_cycle: concat!(
        "SELECT ",
        allowance_columns!(),
        " FROM allowance_cycles WHERE network = $1 AND id = $2 AND cycle = $3"
    ),
    select_latest: concat!(
        "SELECT ",
        allowance_columns!(),
        " FROM allowance_cycles WHERE network = $1 AND id = $2 ORDER BY cycle DESC LIMIT 1"
    ),
    close_cycle: "UPDATE allowance_cycles SET closed = 1, updated_at = $4 \
         WHERE network = $1 AND id = $2 AND cycle = $3",
    select_to_bill: concat!(
        "SELECT ",
        allowance_columns!(),
        " FROM allowance_cycles WHERE network = $1 AND used > billed \
         AND (closed = 1 OR used - billed >= $2 OR first_unbilled_at <= $3) \
         ORDER BY first_unbilled_at LIMIT $4"
    ),
    bill: "UPDATE allowance_cycles SET billed = billed + $5, charges = charges + 1, \
         first_unbilled_at = CASE WHEN used > billed + $5 THEN $6 ELSE NULL END, updated_at = $6 \
         WHERE network = $1 AND id = $2 AND cycle = $3 AND charges = $4 AND $5 <= used - billed",
    insert_charge: "INSERT INTO overage_charges (network, reference, id, cycle, amount, relayer, \
         state, tx_hash, block, error, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', NULL, NULL, NULL, $7, $7)",
    select_pending: concat!(
        "SELECT ",
        charge_columns!(),
        " FROM overage_charges WHERE network = $1 AND state = 'pending' ORDER BY created_at LIMIT $2"
    ),
    finish_charge: "UPDATE overage_charges SET state = $3, tx_hash = $4, error = $5, updated_at = $6 \
         WHERE network = $1 AND reference = $2 AND state = 'pending' RETURNING id, cycle, amount",
    settle_cycle: "UPDATE allowance_cycles SET charged = charged + $4, unpaid = unpaid + $5, \
         updated_at = $6 WHERE network = $1 AND id = $2 AND cycle = $3",
    select_charges: concat!(
        "SELECT ",
        charge_columns!(),
        " FROM overage_charges WHERE network = $1 AND id = $2 AND cycle = $3 ORDER BY created_at, reference"
    ),
};
