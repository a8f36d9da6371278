//! The metering statements, written once for both databases, and the operations on them.

use alloy::primitives::B256;

use super::{
    AllowanceCycle, AllowanceRow, ChargeOutcome, ChargeRow, DeductOutcome, Deduction, NewCharge,
    OverageCharge, decode_allowance, decode_charge, outcome_columns, split, units,
};
use crate::{
    StoreResult,
    codec::{self},
    conn::{Conn, args},
    webhooks,
};

/// The allowance columns, for `SELECT` and `RETURNING`.
macro_rules! allowance_columns {
    () => {
        "network, id, cycle, cap, used, billed, charged, unpaid, deductions, charges, closed, \
         first_unbilled_at"
    };
}

macro_rules! charge_columns {
    () => {
        "network, reference, id, cycle, amount, relayer, state, tx_hash, error"
    };
}

/// Inserts the cycle's row, or raises its cap: (network, id, cycle, cap, at) → the row. (The
/// larger of two caps by `CASE`: SQLite spells it `MAX`, PostgreSQL `GREATEST`.)
const UPSERT_CYCLE: &str = concat!(
    "INSERT INTO allowance_cycles (network, id, cycle, cap, used, billed, charged, unpaid, \
     deductions, charges, closed, first_unbilled_at, updated_at) \
     VALUES ($1, $2, $3, $4, 0, 0, 0, 0, 0, 0, 0, NULL, $5) \
     ON CONFLICT (network, id, cycle) DO UPDATE SET cap = CASE \
     WHEN excluded.cap > allowance_cycles.cap THEN excluded.cap ELSE allowance_cycles.cap END \
     RETURNING ",
    allowance_columns!()
);

/// (network, id, idempotency key) → (cycle, amount) of the earlier deduction.
const SELECT_KEY: &str = "SELECT cycle, amount FROM usage_records \
     WHERE network = $1 AND id = $2 AND idempotency_key = $3";

/// The conditional deduction: (network, id, cycle, amount, at) → the row, when applied.
const DEDUCT: &str = concat!(
    "UPDATE allowance_cycles SET used = used + $4, deductions = deductions + 1, \
     first_unbilled_at = COALESCE(first_unbilled_at, $5), updated_at = $5 \
     WHERE network = $1 AND id = $2 AND cycle = $3 AND closed = 0 AND $4 <= cap - used \
     RETURNING ",
    allowance_columns!()
);

/// (network, id, cycle, seq, amount, key, at).
const INSERT_RECORD: &str = "INSERT INTO usage_records \
     (network, id, cycle, seq, amount, idempotency_key, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// PostgreSQL only (SQLite has no data-modifying CTEs; its single writer makes the
/// multi-statement path cheap): the common case in one statement (an existing open cycle, no
/// idempotency key): (network, id, cycle, amount, at, cap) → the row, when applied, with its
/// record.
const DEDUCT_EXISTING_POSTGRES: &str = concat!(
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
);

/// (network, id, cycle) → the row.
const SELECT_CYCLE: &str = concat!(
    "SELECT ",
    allowance_columns!(),
    " FROM allowance_cycles WHERE network = $1 AND id = $2 AND cycle = $3"
);

/// (network, id) → the latest cycle's row.
const SELECT_LATEST: &str = concat!(
    "SELECT ",
    allowance_columns!(),
    " FROM allowance_cycles WHERE network = $1 AND id = $2 ORDER BY cycle DESC LIMIT 1"
);

/// (network, id, cycle, at).
const CLOSE_CYCLE: &str = "UPDATE allowance_cycles SET closed = 1, updated_at = $4 \
     WHERE network = $1 AND id = $2 AND cycle = $3";

/// (network, min unbilled, started at or before, limit) → rows.
const SELECT_TO_BILL: &str = concat!(
    "SELECT ",
    allowance_columns!(),
    " FROM allowance_cycles WHERE network = $1 AND used > billed \
     AND (closed = 1 OR used - billed >= $2 OR first_unbilled_at <= $3) \
     ORDER BY first_unbilled_at LIMIT $4"
);

/// (network, id, cycle, index, amount, at): bills `amount` if the charge count is `index`.
const BILL: &str = "UPDATE allowance_cycles SET billed = billed + $5, charges = charges + 1, \
     first_unbilled_at = CASE WHEN used > billed + $5 THEN $6 ELSE NULL END, updated_at = $6 \
     WHERE network = $1 AND id = $2 AND cycle = $3 AND charges = $4 AND $5 <= used - billed";

/// (network, reference, id, cycle, amount, relayer, at).
const INSERT_CHARGE: &str = "INSERT INTO overage_charges (network, reference, id, cycle, amount, \
     relayer, state, tx_hash, block, error, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, 'pending', NULL, NULL, NULL, $7, $7)";

/// (network, limit) → pending charges, oldest first.
const SELECT_PENDING: &str = concat!(
    "SELECT ",
    charge_columns!(),
    " FROM overage_charges WHERE network = $1 AND state = 'pending' ORDER BY created_at LIMIT $2"
);

/// (network, reference, state, tx hash, error, at) → (id, cycle, amount) when it was pending.
const FINISH_CHARGE: &str = "UPDATE overage_charges SET state = $3, tx_hash = $4, error = $5, \
     updated_at = $6 WHERE network = $1 AND reference = $2 AND state = 'pending' \
     RETURNING id, cycle, amount";

/// (network, id, cycle, confirmed amount, failed amount, at).
const SETTLE_CYCLE: &str = "UPDATE allowance_cycles SET charged = charged + $4, \
     unpaid = unpaid + $5, updated_at = $6 WHERE network = $1 AND id = $2 AND cycle = $3";

/// (network, id, cycle) → the cycle's charges, oldest first.
const SELECT_CHARGES: &str = concat!(
    "SELECT ",
    charge_columns!(),
    " FROM overage_charges WHERE network = $1 AND id = $2 AND cycle = $3 \
     ORDER BY created_at, reference"
);

/// PostgreSQL's one-statement deduction ([`DEDUCT_EXISTING_POSTGRES`]), outside any
/// transaction: the applied row, or `None` when the general path must decide.
pub(crate) async fn deduct_existing(
    c: &mut impl Conn,
    d: &Deduction,
) -> StoreResult<Option<AllowanceCycle>> {
    let id = codec::b256(&d.id);
    let at = codec::int("at", d.at)?;
    let (cycle, amount, cap) = (i64::from(d.cycle), units(d.amount), units(d.cap));
    let applied: Option<AllowanceRow> = c
        .fetch_optional(
            DEDUCT_EXISTING_POSTGRES,
            args![&d.network, &id, cycle, amount, at, cap],
        )
        .await?;
    applied.map(decode_allowance).transpose()
}

/// [`crate::Store::deduct_allowance`], inside the caller's transaction. `lock_first`: upsert
/// the cycle's row (on PostgreSQL, taking its lock until commit, so that deductions of one cycle
/// run one at a time and the key and cap checks see every earlier one) before checking the
/// idempotency key; SQLite's single writer checks the key first. A
/// [`DeductOutcome::KeyConflict`] must not be committed after `lock_first` (the upsert is
/// rolled back).
pub(crate) async fn deduct(
    c: &mut impl Conn,
    d: &Deduction,
    lock_first: bool,
) -> StoreResult<DeductOutcome> {
    let id = codec::b256(&d.id);
    let at = codec::int("at", d.at)?;
    let cycle = i64::from(d.cycle);
    let mut current = None;
    if lock_first {
        current = Some(upsert(c, &d.network, &id, cycle, d.cap, at).await?);
    }
    if let Some(key) = &d.key {
        let earlier: Option<(i64, i64)> = c
            .fetch_optional(SELECT_KEY, args![&d.network, &id, key])
            .await?;
        if let Some((c_, amount)) = earlier {
            if amount != units(d.amount) {
                return Ok(DeductOutcome::KeyConflict);
            }
            let row: AllowanceRow = c
                .fetch_one(SELECT_CYCLE, args![&d.network, &id, c_])
                .await?;
            return Ok(DeductOutcome::Replayed(decode_allowance(row)?));
        }
    }
    let current = match current {
        Some(row) => row,
        None => upsert(c, &d.network, &id, cycle, d.cap, at).await?,
    };
    let applied: Option<AllowanceRow> = c
        .fetch_optional(DEDUCT, args![&d.network, &id, cycle, units(d.amount), at])
        .await?;
    let Some(row) = applied else {
        let row = decode_allowance(current)?;
        if row.closed {
            return Ok(DeductOutcome::Closed(row));
        }
        if let Some(e) = webhooks::exhausted_event(d, &row)? {
            webhooks::emit(c, &e).await?;
        }
        return Ok(DeductOutcome::Exhausted(row));
    };
    let row = decode_allowance(row)?;
    c.execute(
        INSERT_RECORD,
        args![
            &d.network,
            &id,
            cycle,
            units(row.deductions),
            units(d.amount),
            d.key.as_deref(),
            at
        ],
    )
    .await?;
    Ok(DeductOutcome::Applied(row))
}

async fn upsert(
    c: &mut impl Conn,
    network: &str,
    id: &str,
    cycle: i64,
    cap: u64,
    at: i64,
) -> StoreResult<AllowanceRow> {
    c.fetch_one(UPSERT_CYCLE, args![network, id, cycle, units(cap), at])
        .await
}

/// [`crate::Store::allowance_cycle`].
pub(crate) async fn cycle_row(
    c: &mut impl Conn,
    network: &str,
    id: B256,
    cycle: u32,
) -> StoreResult<Option<AllowanceCycle>> {
    let row: Option<AllowanceRow> = c
        .fetch_optional(
            SELECT_CYCLE,
            args![network, &codec::b256(&id), i64::from(cycle)],
        )
        .await?;
    row.map(decode_allowance).transpose()
}

/// [`crate::Store::latest_allowance_cycle`].
pub(crate) async fn latest_cycle(
    c: &mut impl Conn,
    network: &str,
    id: B256,
) -> StoreResult<Option<AllowanceCycle>> {
    let row: Option<AllowanceRow> = c
        .fetch_optional(SELECT_LATEST, args![network, &codec::b256(&id)])
        .await?;
    row.map(decode_allowance).transpose()
}

/// [`crate::Store::upsert_allowance_cycle`], inside the caller's transaction.
pub(crate) async fn upsert_cycle(
    c: &mut impl Conn,
    network: &str,
    id: B256,
    cycle: u32,
    cap: u64,
    close: bool,
    at: u64,
) -> StoreResult<AllowanceCycle> {
    let at = codec::int("at", at)?;
    let id = codec::b256(&id);
    let row = upsert(c, network, &id, i64::from(cycle), cap, at).await?;
    let mut row = decode_allowance(row)?;
    if close && !row.closed {
        c.execute(CLOSE_CYCLE, args![network, &id, i64::from(cycle), at])
            .await?;
        row.closed = true;
    }
    Ok(row)
}

/// [`crate::Store::cycles_to_bill`].
pub(crate) async fn cycles_to_bill(
    c: &mut impl Conn,
    network: &str,
    min_unbilled: u64,
    started_before: u64,
    limit: u32,
) -> StoreResult<Vec<AllowanceCycle>> {
    let rows: Vec<AllowanceRow> = c
        .fetch_all(
            SELECT_TO_BILL,
            args![
                network,
                units(min_unbilled),
                units(started_before),
                i64::from(limit)
            ],
        )
        .await?;
    rows.into_iter().map(decode_allowance).collect()
}

/// [`crate::Store::begin_charge`], inside the caller's transaction.
pub(crate) async fn begin_charge(c: &mut impl Conn, ch: &NewCharge) -> StoreResult<bool> {
    let at = codec::int("at", ch.at)?;
    let id = codec::b256(&ch.id);
    let (cycle, amount) = (i64::from(ch.cycle), units(ch.amount));
    let billed = c
        .execute(
            BILL,
            args![&ch.network, &id, cycle, i64::from(ch.index), amount, at],
        )
        .await?;
    if billed == 0 {
        return Ok(false);
    }
    let (reference, relayer) = (codec::b256(&ch.reference), codec::address(&ch.relayer));
    c.execute(
        INSERT_CHARGE,
        args![&ch.network, &reference, &id, cycle, amount, &relayer, at],
    )
    .await?;
    Ok(true)
}

/// [`crate::Store::pending_charges`].
pub(crate) async fn pending_charges(
    c: &mut impl Conn,
    network: &str,
    limit: u32,
) -> StoreResult<Vec<OverageCharge>> {
    let rows: Vec<ChargeRow> = c
        .fetch_all(SELECT_PENDING, args![network, i64::from(limit)])
        .await?;
    rows.into_iter().map(decode_charge).collect()
}

/// [`crate::Store::finish_charge`], inside the caller's transaction.
pub(crate) async fn finish_charge(
    c: &mut impl Conn,
    network: &str,
    reference: B256,
    outcome: &ChargeOutcome,
    at: u64,
) -> StoreResult<bool> {
    let at = codec::int("at", at)?;
    let (state, tx_hash, error) = outcome_columns(outcome);
    let reference = codec::b256(&reference);
    let done: Option<(String, i64, i64)> = c
        .fetch_optional(
            FINISH_CHARGE,
            args![
                network,
                &reference,
                state,
                tx_hash.as_deref(),
                error.as_deref(),
                at
            ],
        )
        .await?;
    let Some((id, cycle, amount)) = done else {
        return Ok(false);
    };
    let (charged, unpaid) = split(outcome, amount);
    c.execute(
        SETTLE_CYCLE,
        args![network, &id, cycle, charged, unpaid, at],
    )
    .await?;
    Ok(true)
}

/// [`crate::Store::overage_charges`].
pub(crate) async fn charges(
    c: &mut impl Conn,
    network: &str,
    id: B256,
    cycle: u32,
) -> StoreResult<Vec<OverageCharge>> {
    let rows: Vec<ChargeRow> = c
        .fetch_all(
            SELECT_CHARGES,
            args![network, &codec::b256(&id), i64::from(cycle)],
        )
        .await?;
    rows.into_iter().map(decode_charge).collect()
}
