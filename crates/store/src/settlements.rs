//! Settlements: the state machine of each payment, keyed by its idempotency key. A confirmation
//! or a final failure records its webhook event (and a confirmation its analytics rollups) in
//! the same transaction.

use alloy::primitives::B256;
use tollgate_protocol::SettlementStatus;

use crate::{
    NewSettlement, Recorded, Settlement, StoreResult,
    analytics::{self, saturating_add},
    codec::{self, NewRow, SettlementRow, settlement_columns},
    conn::{Conn, Dialect, args},
    webhooks,
};

const INSERT: &str = concat!(
    "INSERT INTO settlements (key, kind, request_hash, network, chain_id, token, payer, pay_to, \
     amount, fee, memo, nonce, valid_before, request, status, created_at, updated_at, resource, \
     claim_hash) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'received', $15, $15, $16, \
     $17) \
     ON CONFLICT (key) DO NOTHING RETURNING ",
    settlement_columns!()
);

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

// The chain is the truth: a confirmation overrides a failure, but never another confirmation.
// Only the row of this very payment: its key, request and fee (what its event reports).
macro_rules! mark_confirmed {
    () => {
        concat!(
            "UPDATE settlements SET status = 'confirmed', tx_hash = $2, block = $3, proof = $4, \
             error = NULL, updated_at = $5 \
             WHERE key = $1 AND request_hash = $6 AND fee = $7 AND status <> 'confirmed' \
             RETURNING ",
            settlement_columns!()
        )
    };
}

/// (key, tx hash, block, proof, at, request hash, fee).
const MARK_CONFIRMED: &str = mark_confirmed!();

/// PostgreSQL's one statement for a confirmation and what it records with it (the outbox): its
/// `payment.settled` event, a pending delivery per endpoint taking it, and both rollups, each
/// only when the confirmation changed the row. On SQLite, which has no data-modifying `WITH`,
/// these are the five statements of [`MARK_CONFIRMED`], `webhooks::emit` and
/// `analytics::write_rollup`, with the same effects: the event is inserted once per id (a
/// repeat fans out nothing) and the rollups take the row's payee, network, resource and payer.
/// One statement is one round trip instead of five, in the single writer that every
/// confirmation of a replica goes through. (A payment event books no subscription revenue, so
/// `analytics::book_revenue` has nothing to add.)
///
/// (key, tx hash, block, proof, at, request hash, fee, event id, event type, event data, hour,
/// gross, fees, day)
const CONFIRM_POSTGRES: &str = concat!(
    "WITH s AS (",
    mark_confirmed!(),
    "), ev AS (INSERT INTO events (id, provider, type, data, created_at) \
     SELECT $8, s.pay_to, $9, $10, $5 FROM s ON CONFLICT (id) DO NOTHING RETURNING seq, provider), \
     fan AS (INSERT INTO webhook_deliveries \
     (endpoint_id, event_seq, state, attempts, next_attempt_at, updated_at) \
     SELECT w.id, ev.seq, 'pending', 0, $5, $5 FROM ev JOIN webhook_endpoints w \
     ON w.provider = ev.provider WHERE w.enabled = 1 \
     AND (w.events = '*' OR strpos(',' || w.events || ',', ',' || $9 || ',') > 0)), \
     vol AS (INSERT INTO volume_rollups (pay_to, hour, network, resource, payments, gross, fees) \
     SELECT s.pay_to, $11, s.network, COALESCE(s.resource, ''), 1, $12, $13 FROM s \
     ON CONFLICT (pay_to, hour, network, resource) DO UPDATE SET \
     payments = volume_rollups.payments + 1, ",
    saturating_add!("volume_rollups", "gross"),
    ", ",
    saturating_add!("volume_rollups", "fees"),
    "), pay AS (INSERT INTO payer_rollups (pay_to, day, payer, payments, gross, fees) \
     SELECT s.pay_to, $14, s.payer, 1, $12, $13 FROM s \
     ON CONFLICT (pay_to, day, payer) DO UPDATE SET payments = payer_rollups.payments + 1, ",
    saturating_add!("payer_rollups", "gross"),
    ", ",
    saturating_add!("payer_rollups", "fees"),
    ") SELECT ",
    settlement_columns!(),
    " FROM s"
);

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

/// [`crate::Store::insert_settlement`].
pub(crate) async fn insert(c: &mut impl Conn, new: &NewSettlement) -> StoreResult<Recorded> {
    let row = NewRow::encode(new)?;
    let inserted: Option<SettlementRow> = c
        .fetch_optional(
            INSERT,
            args![
                &row.key,
                row.kind,
                &row.request_hash,
                &new.network,
                row.chain_id,
                &row.token,
                &row.payer,
                &row.pay_to,
                &row.amount,
                &row.fee,
                &row.memo,
                &row.nonce,
                row.valid_before,
                &new.request,
                row.created_at,
                &row.resource,
                &row.claim_hash,
            ],
        )
        .await?;
    let (stored, inserted) = match inserted {
        Some(stored) => (stored, true),
        // The key was there already (on PostgreSQL a concurrent insert of it made this one wait
        // for its commit): rows are never deleted, so it is still there.
        None => (c.fetch_one(SELECT_BY_KEY, args![&row.key]).await?, false),
    };
    Ok(Recorded {
        row: stored.decode()?,
        inserted,
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

/// [`crate::Store::mark_confirmed`], inside the caller's transaction.
pub(crate) async fn mark_confirmed<C: Conn>(
    c: &mut C,
    new: &NewSettlement,
    tx_hash: B256,
    block: u64,
    proof: Option<&str>,
    at: u64,
) -> StoreResult<Settlement> {
    let row = NewRow::encode(new)?;
    let (key, request_hash, fee) = (&row.key, &row.request_hash, &row.fee);
    let tx = codec::b256(&tx_hash);
    let (block_int, at_int) = (codec::int("block", block)?, codec::int("updated_at", at)?);
    let updated: Option<SettlementRow> = match C::DIALECT {
        Dialect::Sqlite => {
            c.fetch_optional(
                MARK_CONFIRMED,
                args![key, &tx, block_int, proof, at_int, request_hash, fee],
            )
            .await?
        }
        Dialect::Postgres => {
            // The row as this confirmation leaves it (when it changes it): its event and
            // rollup figures, computed here, go in with the update.
            let after = Settlement {
                new: new.clone(),
                status: SettlementStatus::Confirmed,
                tx_hash: Some(tx_hash),
                block: Some(block),
                proof: proof.map(str::to_owned),
                error: None,
                updated_at: at,
            };
            let event = webhooks::payment_event(&after, at);
            let r = analytics::Rollup::of(&after);
            c.fetch_optional(
                CONFIRM_POSTGRES,
                args![
                    key,
                    &tx,
                    block_int,
                    proof,
                    at_int,
                    request_hash,
                    fee,
                    &event.id,
                    &event.r#type,
                    &event.data,
                    r.hour,
                    r.gross,
                    r.fees,
                    r.day
                ],
            )
            .await?
        }
    };
    let stored: SettlementRow = match updated {
        Some(stored) => {
            let s = stored.decode()?;
            if C::DIALECT == Dialect::Sqlite {
                // The event and the rollups commit with the confirmation (the outbox).
                webhooks::emit(c, &webhooks::payment_event(&s, s.updated_at)).await?;
                analytics::write_rollup(c, &s).await?;
            }
            return Ok(s);
        }
        // Already confirmed (confirmed is final, so this reads the first proof; on PostgreSQL a
        // concurrent confirmation held the row lock, and once it committed this statement
        // re-checked `status` and skipped the row), or no such row: `sqlx::Error::RowNotFound`.
        None => c.fetch_one(SELECT_BY_KEY, args![key]).await?,
    };
    let s = stored.decode()?;
    if s.status != SettlementStatus::Confirmed {
        // The key's row is another request's (or fee's): not this payment's to confirm.
        return Err(sqlx::Error::RowNotFound.into());
    }
    Ok(s)
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
        webhooks::emit(c, &webhooks::payment_event(&s, s.updated_at)).await?;
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
