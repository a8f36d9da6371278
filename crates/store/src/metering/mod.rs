//! The metering rows: the overage allowance ledger per (subscription, cycle), each deduction, and
//! the on-chain charges: types and decoding here, the statements and operations in `sql`.
//!
//! Amounts here are `u64` units stored as `BIGINT`/`INTEGER`, so that the cap check is one
//! conditional `UPDATE` (`amount <= cap - used`), exact under any concurrency: SQLite runs it on
//! its single writer, PostgreSQL under the row's lock. Amounts are bounded by `i64::MAX` units
//! (9.2 trillion tokens at 6 decimals); a larger on-chain cap is stored as `i64::MAX`, which only
//! ever lowers it.

use alloy::primitives::{Address, B256};

use crate::{
    StoreError, StoreResult,
    codec::{parse_address, parse_b256},
};

mod sql;

pub(crate) use sql::{
    begin_charge, charges, cycle_row, cycles_to_bill, deduct, deduct_existing, finish_charge,
    latest_cycle, pending_charges, upsert_cycle,
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

/// A deduction to apply ([`crate::Store::deduct_allowance`]).
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

/// A charge to start ([`crate::Store::begin_charge`]).
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

crate::codec::stored_names!(ChargeState, "state", {
    Pending => "pending",
    Confirmed => "confirmed",
    Failed => "failed",
});

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

/// How a charge ended ([`crate::Store::finish_charge`]).
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

/// An allowance row, in the column order of `allowance_columns!` (in `sql`).
pub(crate) type AllowanceRow = (
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

fn nonneg(what: &str, v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what} = {v}")))
}

fn cycle(v: i64) -> StoreResult<u32> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("cycle = {v}")))
}

pub(crate) fn decode_allowance(row: AllowanceRow) -> StoreResult<AllowanceCycle> {
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
pub(crate) type ChargeRow = (
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

pub(crate) fn decode_charge(row: ChargeRow) -> StoreResult<OverageCharge> {
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
pub(crate) fn outcome_columns(o: &ChargeOutcome) -> (&'static str, Option<String>, Option<String>) {
    match o {
        ChargeOutcome::Confirmed { tx_hash } => (
            ChargeState::Confirmed.as_str(),
            tx_hash.as_ref().map(crate::codec::b256),
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
pub(crate) fn split(o: &ChargeOutcome, amount: i64) -> (i64, i64) {
    match o {
        ChargeOutcome::Confirmed { .. } => (amount, 0),
        ChargeOutcome::Failed { .. } => (0, amount),
    }
}

/// An amount for a ledger column: saturated at `i64::MAX` (only caps are ever that large).
pub(crate) fn units(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
