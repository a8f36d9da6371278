//! Settlements: the state machine of each payment, keyed by its idempotency key. A confirmation
//! or a final failure records its webhook event (and a confirmation its analytics rollups) in
//! the same transaction.

use std::collections::HashMap;

use alloy::primitives::B256;
use tollgate_protocol::SettlementStatus;

use crate::{
    Confirmed, NewSettlement, Recorded, Settlement, StoreResult,
    analytics::{self, saturating_add},
    backend::BoxFuture,
    codec::{self, NewRow, SettlementRow, settlement_columns},
    conn::{Arg, Conn, Dialect, MultiRow, args, in_statements, placeholders, values},
    group::Merge,
    webhooks,
};

/// The columns an insert sets, in its arguments' order ([`insert_args`]); `status` is
/// `'received'` and `updated_at` is `created_at`.
const INSERT_COLUMNS: &str = "key, kind, request_hash, network, chain_id, token, payer, pay_to, \
     amount, fee, memo, nonce, valid_before, request, status, created_at, updated_at, resource, \
     claim_hash";

/// The arguments of one row of an insert.
const INSERT_WIDTH: usize = 17;

/// The insert of `rows` rows, each key once: the rows inserted come back (a key taken already
/// inserts nothing).
fn insert_statement(rows: usize) -> String {
    let values = values(rows, INSERT_WIDTH, |p| {
        let [
            key,
            kind,
            rh,
            net,
            chain,
            token,
            payer,
            to,
            amount,
            fee,
            memo,
            nonce,
            vb,
            request,
            at,
            resource,
            claim,
        ] = std::array::from_fn::<usize, INSERT_WIDTH, _>(|i| p + i);
        format!(
            "(${key}, ${kind}, ${rh}, ${net}, ${chain}, ${token}, ${payer}, ${to}, ${amount}, ${fee}, \
             ${memo}, ${nonce}, ${vb}, ${request}, 'received', ${at}, ${at}, ${resource}, ${claim})"
        )
    });
    format!(
        "INSERT INTO settlements ({INSERT_COLUMNS}) VALUES {values} ON CONFLICT (key) DO NOTHING \
         RETURNING {}",
        settlement_columns!()
    )
}

const SELECT_BY_KEY: &str = concat!(
    "SELECT ",
    settlement_columns!(),
    " FROM settlements WHERE key = $1"
);

// Repeating the same tx hash is a no-op; a new one (a replacement) is recorded. Confirmed and
// failed rows are final.
const MARK_SUBMITTED: &str = "UPDATE settlements SET status = 'submitted', tx_hash = $2, updated_at = $3 \
     WHERE key = $1 AND status IN ('received', 'submitted', 'pending') AND tx_hash IS DISTINCT FROM $2";

const MARK_PENDING: &str = "UPDATE settlements SET status = 'pending', updated_at = $2 \
     WHERE key = $1 AND status IN ('received', 'submitted')";

/// The arguments of one confirmation on SQLite ([`CONFIRM_SQLITE`]): the first of
/// [`CONFIRM_POSTGRES`]'s.
const CONFIRM_SQLITE_WIDTH: usize = 7;

/// SQLite's update of `rows` confirmations (each key once), each (key, tx hash, block, proof,
/// at, request hash, fee). The chain is the truth: a confirmation overrides a failure, but never
/// another confirmation. Only the row of this very payment: its key, request and fee (what its
/// event reports). PostgreSQL's [`CONFIRM_POSTGRES`] updates the same way. The rows that
/// changed come back.
fn confirm_sqlite_statement(rows: usize) -> String {
    let values = placeholders(rows, CONFIRM_SQLITE_WIDTH);
    format!(
        "UPDATE settlements SET status = 'confirmed', tx_hash = v.column2, block = v.column3, \
         proof = v.column4, error = NULL, updated_at = v.column5 FROM (VALUES {values}) AS v \
         WHERE key = v.column1 AND request_hash = v.column6 AND fee = v.column7 \
         AND status <> 'confirmed' RETURNING {columns}",
        columns = settlement_columns!()
    )
}

static CONFIRM_SQLITE: MultiRow = MultiRow::new(confirm_sqlite_statement);

/// The arguments of one confirmation on PostgreSQL ([`CONFIRM_POSTGRES`]).
const CONFIRM_WIDTH: usize = 14;

/// PostgreSQL's one statement for `rows` confirmations (each key once) and what they record
/// with them (the outbox): for each row it changes, its `payment.settled` event, a pending
/// delivery per endpoint taking it, and its share of both rollups (summed per rollup row, which
/// one statement may change only once). On SQLite, which has no data-modifying `WITH`, a
/// batch's confirmations are [`CONFIRM_SQLITE`], `webhooks::emit_all_sqlite` and
/// `analytics::write_rollups` (`confirm_all`), with the same effects: the event is
/// inserted once per id (a repeat fans out nothing) and the rollups take the row's payee,
/// network, resource and payer. One statement is one round trip instead of five per
/// confirmation, in the single writer that every confirmation of a replica goes through. (A payment event books no subscription
/// revenue, so `analytics::book_revenue` has nothing to add.) The rows that changed come back.
fn confirm_statement(rows: usize) -> String {
    let values = placeholders(rows, CONFIRM_WIDTH);
    format!(
        "WITH v (v_key, v_tx, v_block, v_proof, v_at, v_request_hash, v_fee, v_event, v_type, \
         v_data, v_hour, v_gross, v_fees, v_day) AS (VALUES {values}), \
         s AS (UPDATE settlements SET status = 'confirmed', tx_hash = v_tx, block = v_block, \
         proof = v_proof, error = NULL, updated_at = v_at FROM v \
         WHERE key = v_key AND request_hash = v_request_hash AND fee = v_fee \
         AND status <> 'confirmed' \
         RETURNING {columns}, v_event, v_type, v_data, v_at, v_hour, v_gross, v_fees, v_day), \
         ev AS (INSERT INTO events (id, provider, type, data, created_at) \
         SELECT v_event, pay_to, v_type, v_data, v_at FROM s ON CONFLICT (id) DO NOTHING \
         RETURNING seq, provider, type, created_at), \
         fan AS (INSERT INTO webhook_deliveries \
         (endpoint_id, event_seq, state, attempts, next_attempt_at, updated_at) \
         SELECT w.id, ev.seq, 'pending', 0, ev.created_at, ev.created_at \
         FROM ev JOIN webhook_endpoints w ON w.provider = ev.provider WHERE w.enabled = 1 \
         AND (w.events = '*' OR strpos(',' || w.events || ',', ',' || ev.type || ',') > 0)), \
         vol AS (INSERT INTO volume_rollups (pay_to, hour, network, resource, payments, gross, fees) \
         SELECT pay_to, v_hour, network, COALESCE(resource, ''), COUNT(*), {gross}, {fees} FROM s \
         GROUP BY pay_to, v_hour, network, COALESCE(resource, '') \
         ON CONFLICT (pay_to, hour, network, resource) DO UPDATE SET \
         payments = volume_rollups.payments + excluded.payments, {vol_gross}, {vol_fees}), \
         pay AS (INSERT INTO payer_rollups (pay_to, day, payer, payments, gross, fees) \
         SELECT pay_to, v_day, payer, COUNT(*), {gross}, {fees} FROM s \
         GROUP BY pay_to, v_day, payer \
         ON CONFLICT (pay_to, day, payer) DO UPDATE SET \
         payments = payer_rollups.payments + excluded.payments, {pay_gross}, {pay_fees}) \
         SELECT {columns} FROM s",
        columns = settlement_columns!(),
        gross = "LEAST(SUM(v_gross), 9223372036854775807)",
        fees = "LEAST(SUM(v_fees), 9223372036854775807)",
        vol_gross = saturating_add!("volume_rollups", "gross"),
        vol_fees = saturating_add!("volume_rollups", "fees"),
        pay_gross = saturating_add!("payer_rollups", "gross"),
        pay_fees = saturating_add!("payer_rollups", "fees"),
    )
}

static CONFIRM_POSTGRES: MultiRow = MultiRow::new(confirm_statement);

// The first failure's reason stays.
const MARK_FAILED: &str = concat!(
    "UPDATE settlements SET status = 'failed', error = $2, updated_at = $3 \
     WHERE key = $1 AND status IN ('received', 'submitted', 'pending') RETURNING ",
    settlement_columns!()
);

const UNFINISHED: &str = concat!(
    "SELECT ",
    settlement_columns!(),
    " FROM settlements WHERE status IN ('received', 'submitted', 'pending') \
     ORDER BY created_at, key LIMIT $1"
);

// The first payload sent under an id keeps it.
const BIND_ID: &str = "INSERT INTO payment_identifiers (id_hash, settlement_key, created_at) \
     VALUES ($1, $2, $3) ON CONFLICT (id_hash) DO NOTHING";

const BOUND_ID: &str = "SELECT settlement_key FROM payment_identifiers WHERE id_hash = $1";

// Moves an id only from the payload it is bound to (compare and set).
const REBIND_ID: &str = "UPDATE payment_identifiers SET settlement_key = $3, created_at = $4 \
     WHERE id_hash = $1 AND settlement_key = $2";

const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) FROM settlements GROUP BY status";

static INSERT: MultiRow = MultiRow::new(insert_statement);

/// The arguments of one row of [`INSERT`].
fn insert_args<'a>(row: &'a NewRow, new: &'a NewSettlement) -> [Arg<'a>; INSERT_WIDTH] {
    [
        Arg::from(&row.key),
        Arg::from(row.kind),
        Arg::from(&row.request_hash),
        Arg::from(&new.network),
        Arg::from(row.chain_id),
        Arg::from(&row.token),
        Arg::from(&row.payer),
        Arg::from(&row.pay_to),
        Arg::from(&row.amount),
        Arg::from(&row.fee),
        Arg::from(&row.memo),
        Arg::from(&row.nonce),
        Arg::from(row.valid_before),
        Arg::from(&new.request),
        Arg::from(row.created_at),
        Arg::from(&row.resource),
        Arg::from(&row.claim_hash),
    ]
}

/// [`crate::Store::insert_settlement`]: a write that the group commit merges with the inserts
/// waiting with it, into one multi-row statement.
#[derive(Clone, Debug)]
pub(crate) struct Insert(pub(crate) NewSettlement);

impl<C: Conn + 'static> Merge<C> for Insert {
    type Output = Recorded;

    fn run_all<'c>(
        items: Vec<Self>,
        c: &'c mut C,
    ) -> BoxFuture<'c, StoreResult<Vec<StoreResult<Recorded>>>> {
        Box::pin(insert_all(c, items))
    }
}

async fn insert_all(
    c: &mut impl Conn,
    items: Vec<Insert>,
) -> StoreResult<Vec<StoreResult<Recorded>>> {
    let (rows, mut results) = encode_each(&items, |Insert(new)| NewRow::encode(new));
    let came = run_rows(
        c,
        &rows,
        |row| row.key.as_str(),
        |i, row| insert_args(row, &items[i].0),
        &INSERT,
    )
    .await?;
    for (i, came) in came.into_iter().enumerate() {
        let Some(row) = &rows[i] else { continue };
        let (stored, inserted) = match came {
            Some(stored) => (stored, true),
            // The key was there already (on PostgreSQL a concurrent insert of it made this one
            // wait for its commit): rows are never deleted, so it is still there.
            None => (c.fetch_one(SELECT_BY_KEY, args![&row.key]).await?, false),
        };
        results[i] = Some(Ok(Recorded {
            row: stored.decode()?,
            inserted,
        }));
    }
    Ok(results.into_iter().map(answered).collect())
}

/// Each item of a merged write encoded, and the answer of each that cannot be (its own error:
/// it takes no part and changes nothing).
type Encoded<R, T> = (Vec<Option<R>>, Vec<Option<StoreResult<T>>>);

fn encode_each<I, R, T>(items: &[I], encode: impl Fn(&I) -> StoreResult<R>) -> Encoded<R, T> {
    items
        .iter()
        .map(|item| match encode(item) {
            Ok(row) => (Some(row), None),
            Err(e) => (None, Some(Err(e))),
        })
        .unzip()
}

/// Runs the encoded `rows` through the multi-row `statement`, in statements in which no key
/// repeats ([`in_statements`]; `bind` gives a row's arguments), and gives, for each item, the
/// row that came back for its key, if one did.
async fn run_rows<'a, R, A>(
    c: &mut impl Conn,
    rows: &'a [Option<R>],
    key: impl Fn(&'a R) -> &'a str,
    bind: impl Fn(usize, &'a R) -> A,
    statement: &'static MultiRow,
) -> StoreResult<Vec<Option<SettlementRow>>>
where
    A: IntoIterator<Item = Arg<'a>>,
{
    let mut came: Vec<Option<SettlementRow>> = rows.iter().map(|_| None).collect();
    for group in in_statements(rows.iter().map(|r| r.as_ref().map(&key))) {
        let mut args = Vec::new();
        for &i in &group {
            if let Some(row) = &rows[i] {
                args.extend(bind(i, row));
            }
        }
        let back: Vec<SettlementRow> = c.fetch_all(statement.get(group.len()), &args).await?;
        let mut back: HashMap<String, SettlementRow> = back
            .into_iter()
            .map(|row| (row.key().to_owned(), row))
            .collect();
        for i in group {
            if let Some(row) = &rows[i] {
                came[i] = back.remove(key(row));
            }
        }
    }
    Ok(came)
}

/// An item's result, which every item of a merged write has once it ran.
fn answered<T>(result: Option<StoreResult<T>>) -> StoreResult<T> {
    result.unwrap_or_else(|| {
        Err(crate::StoreError::Database(sqlx::Error::Protocol(
            "a merged write left an item unanswered".into(),
        )))
    })
}

/// [`crate::Store::settlement`].
pub(crate) async fn get(c: &mut impl Conn, key: B256) -> StoreResult<Option<Settlement>> {
    let row: Option<SettlementRow> = c
        .fetch_optional(SELECT_BY_KEY, args![&codec::b256(&key)])
        .await?;
    row.map(SettlementRow::decode).transpose()
}

/// [`crate::Store::mark_submitted`].
pub(crate) async fn mark_submitted(
    c: &mut impl Conn,
    key: B256,
    tx_hash: B256,
    at: u64,
) -> StoreResult<()> {
    let at = codec::int("updated_at", at)?;
    let (key, tx_hash) = (codec::b256(&key), codec::b256(&tx_hash));
    c.execute(MARK_SUBMITTED, args![&key, &tx_hash, at]).await?;
    Ok(())
}

/// [`crate::Store::mark_pending`].
pub(crate) async fn mark_pending(c: &mut impl Conn, key: B256, at: u64) -> StoreResult<()> {
    let at = codec::int("updated_at", at)?;
    c.execute(MARK_PENDING, args![&codec::b256(&key), at])
        .await?;
    Ok(())
}

/// [`crate::Store::mark_confirmed`]: a write that the group commit merges, on PostgreSQL, with
/// the confirmations waiting with it, into one multi-row statement.
#[derive(Clone, Debug)]
pub(crate) struct Confirm {
    pub(crate) new: NewSettlement,
    pub(crate) tx_hash: B256,
    pub(crate) block: u64,
    pub(crate) proof: Option<String>,
    pub(crate) at: u64,
}

impl<C: Conn + 'static> Merge<C> for Confirm {
    type Output = Confirmed;

    fn run_all<'c>(
        items: Vec<Self>,
        c: &'c mut C,
    ) -> BoxFuture<'c, StoreResult<Vec<StoreResult<Confirmed>>>> {
        Box::pin(confirm_all(c, items))
    }
}

impl Confirm {
    /// The row as this confirmation leaves it, when it changes it.
    fn after(&self) -> Settlement {
        Settlement {
            new: self.new.clone(),
            status: SettlementStatus::Confirmed,
            tx_hash: Some(self.tx_hash),
            block: Some(self.block),
            proof: self.proof.clone(),
            error: None,
            updated_at: self.at,
        }
    }
}

/// A confirmation's values as bound.
struct ConfirmRow {
    row: NewRow,
    tx: String,
    block: i64,
    at: i64,
    event: webhooks::NewEvent,
    rollup: analytics::Rollup,
}

impl ConfirmRow {
    fn encode(item: &Confirm) -> StoreResult<Self> {
        let after = item.after();
        Ok(Self {
            row: NewRow::encode(&item.new)?,
            tx: codec::b256(&item.tx_hash),
            block: codec::int("block", item.block)?,
            at: codec::int("updated_at", item.at)?,
            // Its event and rollup figures, computed here, go in with the update.
            event: webhooks::payment_event(&after, item.at)?,
            rollup: analytics::Rollup::of(&after),
        })
    }

    fn args<'a>(&'a self, proof: Option<&'a str>) -> [Arg<'a>; CONFIRM_WIDTH] {
        let (r, e) = (&self.rollup, &self.event);
        [
            Arg::from(&self.row.key),
            Arg::from(&self.tx),
            Arg::from(self.block),
            Arg::from(proof),
            Arg::from(self.at),
            Arg::from(&self.row.request_hash),
            Arg::from(&self.row.fee),
            Arg::from(&e.id),
            Arg::from(&e.r#type),
            Arg::from(&e.data),
            Arg::from(r.hour),
            Arg::from(r.gross),
            Arg::from(r.fees),
            Arg::from(r.day),
        ]
    }
}

/// A batch's confirmations: the updates in one statement per round of keys
/// ([`CONFIRM_POSTGRES`], which also writes their events, deliveries and rollups, or
/// [`CONFIRM_SQLITE`]); on SQLite, which has no data-modifying `WITH`, then the events of the
/// rows that changed in one statement (up to 64), their deliveries in one, and one per rollup
/// table: a handful of statements per batch rather than five per confirmation, each a round
/// trip to SQLite's thread.
async fn confirm_all<C: Conn>(
    c: &mut C,
    items: Vec<Confirm>,
) -> StoreResult<Vec<StoreResult<Confirmed>>> {
    let (statement, width) = match C::DIALECT {
        Dialect::Postgres => (&CONFIRM_POSTGRES, CONFIRM_WIDTH),
        Dialect::Sqlite => (&CONFIRM_SQLITE, CONFIRM_SQLITE_WIDTH),
    };
    let (rows, mut results) = encode_each(&items, ConfirmRow::encode);
    let came = run_rows(
        c,
        &rows,
        |row| row.row.key.as_str(),
        |i, row| row.args(items[i].proof.as_deref())[..width].to_vec(),
        statement,
    )
    .await?;
    let mut changed = Vec::new();
    for (i, came) in came.into_iter().enumerate() {
        let Some(row) = &rows[i] else { continue };
        results[i] = Some(match came {
            Some(stored) => {
                changed.push(row);
                // A row this batch changed that cannot be read back fails the batch (each
                // write then runs alone), not the item alone: its update is not undone.
                Ok(Confirmed {
                    row: stored.decode()?,
                    first: true,
                })
            }
            None => confirmed_before(c, &items[i].new).await,
        });
    }
    if C::DIALECT == Dialect::Sqlite {
        let events: Vec<webhooks::NewEvent> = changed.iter().map(|row| row.event.clone()).collect();
        webhooks::emit_all_sqlite(c, &events).await?;
        let rollups: Vec<&analytics::Rollup> = changed.iter().map(|row| &row.rollup).collect();
        analytics::write_rollups(c, &rollups).await?;
    }
    Ok(results.into_iter().map(answered).collect())
}

/// The row of a confirmation that changed nothing: confirmed already (confirmed is final, so
/// this reads the first proof; on PostgreSQL a concurrent confirmation held the row lock, and
/// once it committed the update re-checked `status` and skipped the row). No such row, or the
/// key's row another request's or fee's (not this payment's: neither to confirm nor to answer
/// with its proof), is `sqlx::Error::RowNotFound`.
async fn confirmed_before(c: &mut impl Conn, new: &NewSettlement) -> StoreResult<Confirmed> {
    let stored: Option<SettlementRow> = c
        .fetch_optional(SELECT_BY_KEY, args![&codec::b256(&new.key)])
        .await?;
    match stored.map(SettlementRow::decode).transpose()? {
        Some(s)
            if s.status == SettlementStatus::Confirmed
                && s.new.request_hash == new.request_hash
                && s.new.fee == new.fee =>
        {
            Ok(Confirmed {
                row: s,
                first: false,
            })
        }
        _ => Err(sqlx::Error::RowNotFound.into()),
    }
}

/// [`crate::Store::mark_failed`], inside the caller's transaction.
pub(crate) async fn mark_failed(
    c: &mut impl Conn,
    key: B256,
    error: &str,
    at: u64,
) -> StoreResult<()> {
    let at = codec::int("updated_at", at)?;
    let failed: Option<SettlementRow> = c
        .fetch_optional(MARK_FAILED, args![&codec::b256(&key), error, at])
        .await?;
    if let Some(row) = failed {
        let s = row.decode()?;
        webhooks::emit(c, &webhooks::payment_event(&s, s.updated_at)?).await?;
    }
    Ok(())
}

/// [`crate::Store::unfinished`].
pub(crate) async fn unfinished(c: &mut impl Conn, limit: u32) -> StoreResult<Vec<Settlement>> {
    let rows: Vec<SettlementRow> = c.fetch_all(UNFINISHED, args![i64::from(limit)]).await?;
    rows.into_iter().map(SettlementRow::decode).collect()
}

/// [`crate::Store::count_by_status`].
pub(crate) async fn count_by_status(
    c: &mut impl Conn,
) -> StoreResult<Vec<(SettlementStatus, u64)>> {
    let rows: Vec<(String, i64)> = c.fetch_all(COUNT_BY_STATUS, args![]).await?;
    codec::status_counts(rows)
}

/// [`crate::Store::bind_payment_identifier`].
pub(crate) async fn bind_id(
    c: &mut impl Conn,
    id_hash: B256,
    key: B256,
    at: u64,
) -> StoreResult<B256> {
    let at = codec::int("created_at", at)?;
    let id_hash = codec::b256(&id_hash);
    c.execute(BIND_ID, args![&id_hash, &codec::b256(&key), at])
        .await?;
    let (bound,): (String,) = c.fetch_one(BOUND_ID, args![&id_hash]).await?;
    codec::parse_b256("settlement_key", &bound)
}

/// [`crate::Store::rebind_payment_identifier`].
pub(crate) async fn rebind_id(
    c: &mut impl Conn,
    id_hash: B256,
    from: B256,
    to: B256,
    at: u64,
) -> StoreResult<bool> {
    let at = codec::int("created_at", at)?;
    let (id_hash, from, to) = (codec::b256(&id_hash), codec::b256(&from), codec::b256(&to));
    Ok(c.execute(REBIND_ID, args![&id_hash, &from, &to, at])
        .await?
        > 0)
}
