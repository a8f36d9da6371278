//! [`Store`] on PostgreSQL: the same schema as SQLite, for several facilitator replicas sharing
//! one database.
//!
//! Every write is one statement in its own (implicit) transaction. Concurrency rests on
//! PostgreSQL's row locks under `READ COMMITTED`: a second `INSERT ... ON CONFLICT DO NOTHING` of
//! a key waits for the first to commit and then does nothing; a second conditional `UPDATE` of a
//! row waits for the first, then re-evaluates its `WHERE` against the committed row (so "first
//! confirmation wins" needs no explicit lock).

use std::{borrow::Cow, str::FromStr};

use alloy::primitives::{Address, B256};
use async_trait::async_trait;
use sqlx::{
    Connection, Row,
    postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions},
};
use tollgate_protocol::SettlementStatus;

use super::{
    AllowanceCycle, AnalyticsData, AnalyticsQuery, ChargeOutcome, DeductOutcome, Deduction,
    IndexedState, IndexedSubscription, NewCharge, NewSettlement, OverageCharge, PlanOwner, Renewal,
    RenewalOutcome, Settlement, Store, StoreError, StoreResult, Subject, SubscriptionEvent,
    analytics,
    codec::{self, NewRow, SettlementRow, settlement_columns},
    metering::{self, POSTGRES as MSQL},
    renewals::{self, POSTGRES as RSQL},
    webhooks::{
        self as wh, Attempt, Delivery, Endpoint, EndpointSecrets, Event, NewEvent, POSTGRES as WSQL,
    },
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Most connections per pool (per replica).
const MAX_CONNECTIONS: u32 = 16;

/// The PostgreSQL store.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Connects to `postgres://...` (a pool of up to 16 connections). Does not migrate.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = PgConnectOptions::from_str(url)?;
        Self::with_options(options).await
    }

    /// Connects with every connection's `search_path` set to `schema` alone, creating the schema
    /// if missing; the tables (and the migrations' bookkeeping) then live in that schema. For
    /// tests that isolate themselves in a schema of their own, or several tenants in one
    /// database. `schema` must be a plain lowercase identifier (`[a-z_][a-z0-9_]*`, at most 63
    /// bytes), else `sqlx::Error::Configuration`.
    pub async fn connect_with_schema(url: &str, schema: &str) -> StoreResult<Self> {
        if !is_plain_identifier(schema) {
            return Err(StoreError::Database(sqlx::Error::Configuration(
                format!("schema name {schema:?} is not a plain lowercase identifier").into(),
            )));
        }
        let options = PgConnectOptions::from_str(url)?;
        let mut conn = PgConnection::connect_with(&options).await?;
        // Identifier checked above, so quoting cannot be escaped.
        let create = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
        sqlx::raw_sql(sqlx::AssertSqlSafe(create))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        // A startup parameter rather than an `after_connect` `SET`: the server applies it to each
        // new connection, with no extra round trip, and `RESET ALL` keeps it.
        Self::with_options(options.options([("search_path", Cow::Borrowed(schema))])).await
    }

    async fn with_options(options: PgConnectOptions) -> StoreResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect_with(options)
            .await?;
        Ok(Self { pool })
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn is_plain_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && s.len() <= 63
}

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
const MARK_CONFIRMED: &str = concat!(
    "UPDATE settlements SET status = 'confirmed', tx_hash = $2, block = $3, proof = $4, \
     error = NULL, updated_at = $5 WHERE key = $1 AND status <> 'confirmed' RETURNING ",
    settlement_columns!()
);

// The first failure's reason stays.
const MARK_FAILED: &str = concat!(
    "UPDATE settlements SET status = 'failed', error = $2, updated_at = $3 \
     WHERE key = $1 AND status IN ('received', 'submitted', 'pending') RETURNING ",
    settlement_columns!()
);

/// Records `e` and a pending delivery per matching endpoint, inside the caller's transaction;
/// whether it was new.
async fn emit(conn: &mut PgConnection, e: &NewEvent) -> StoreResult<bool> {
    let at = codec::int("created_at", e.created_at)?;
    let seq: Option<(i64,)> = sqlx::query_as(WSQL.insert_event)
        .bind(&e.id)
        .bind(codec::address(&e.provider))
        .bind(&e.r#type)
        .bind(&e.data)
        .bind(at)
        .fetch_optional(&mut *conn)
        .await?;
    let Some((seq,)) = seq else {
        return Ok(false);
    };
    sqlx::query(WSQL.fan_out)
        .bind(seq)
        .bind(codec::address(&e.provider))
        .bind(&e.r#type)
        .bind(at)
        .execute(&mut *conn)
        .await?;
    Ok(true)
}

const UNFINISHED: &str = concat!(
    "SELECT ",
    settlement_columns!(),
    " FROM settlements WHERE status IN ('received', 'submitted', 'pending') \
     ORDER BY created_at, key LIMIT $1"
);

const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) FROM settlements GROUP BY status";

// A key hash already stored keeps its first provider, label and revocation: keys are random
// 32-byte secrets, so a repeat is the same key, and re-adding never un-revokes.
const INSERT_API_KEY: &str = "INSERT INTO api_keys (key_hash, provider, label, created_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (key_hash) DO NOTHING";

const API_KEY_PROVIDER: &str =
    "SELECT provider FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL";

const REVOKE_API_KEY: &str =
    "UPDATE api_keys SET revoked_at = $2 WHERE key_hash = $1 AND revoked_at IS NULL";

// A challenge hash already stored keeps its first row (hashes of random texts do not collide).
const INSERT_CHALLENGE: &str = "INSERT INTO provider_challenges \
     (challenge_hash, address, expires_at, created_at) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (challenge_hash) DO NOTHING";

// One statement: of concurrent registrations with one challenge, exactly one changes the row.
const CONSUME_CHALLENGE: &str = "UPDATE provider_challenges SET used_at = $3 \
     WHERE challenge_hash = $1 AND address = $2 AND used_at IS NULL AND expires_at > $3";

const INSERT_PLAN: &str = "INSERT INTO plans (network, plan_id, provider, relayer, created_at) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (network, plan_id) DO NOTHING";

const SELECT_PLAN: &str = "SELECT network, plan_id, provider, relayer, created_at FROM plans WHERE network = $1 AND plan_id = $2";

#[async_trait]
impl Store for PostgresStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> StoreResult<()> {
        // A hot standby refuses a read-write transaction: reachable *and* writable.
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION READ WRITE")
            .execute(&mut *tx)
            .await?;
        tx.rollback().await?;
        Ok(())
    }

    async fn insert_settlement(&self, new: &NewSettlement) -> StoreResult<Settlement> {
        let row = NewRow::encode(new)?;
        let mut conn = self.pool.acquire().await?;
        let inserted: Option<SettlementRow> = sqlx::query_as(INSERT)
            .bind(&row.key)
            .bind(row.kind)
            .bind(&row.request_hash)
            .bind(&new.network)
            .bind(row.chain_id)
            .bind(&row.token)
            .bind(&row.payer)
            .bind(&row.pay_to)
            .bind(&row.amount)
            .bind(&row.fee)
            .bind(&row.memo)
            .bind(&row.nonce)
            .bind(row.valid_before)
            .bind(&new.request)
            .bind(row.created_at)
            .bind(&row.resource)
            .bind(&row.claim_hash)
            .fetch_optional(&mut *conn)
            .await?;
        let stored = match inserted {
            Some(stored) => stored,
            // The key was there already (a concurrent insert of it made this one wait for its
            // commit): rows are never deleted, so it is still there.
            None => {
                sqlx::query_as(SELECT_BY_KEY)
                    .bind(&row.key)
                    .fetch_one(&mut *conn)
                    .await?
            }
        };
        stored.decode()
    }

    async fn settlement(&self, key: B256) -> StoreResult<Option<Settlement>> {
        let row: Option<SettlementRow> = sqlx::query_as(SELECT_BY_KEY)
            .bind(codec::b256(&key))
            .fetch_optional(&self.pool)
            .await?;
        row.map(SettlementRow::decode).transpose()
    }

    async fn mark_submitted(&self, key: B256, tx_hash: B256, at: u64) -> StoreResult<()> {
        sqlx::query(MARK_SUBMITTED)
            .bind(codec::b256(&key))
            .bind(codec::b256(&tx_hash))
            .bind(codec::int("updated_at", at)?)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn mark_pending(&self, key: B256, at: u64) -> StoreResult<()> {
        sqlx::query(MARK_PENDING)
            .bind(codec::b256(&key))
            .bind(codec::int("updated_at", at)?)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn mark_confirmed(
        &self,
        key: B256,
        tx_hash: B256,
        block: u64,
        proof: Option<&str>,
        at: u64,
    ) -> StoreResult<Settlement> {
        let key = codec::b256(&key);
        let mut conn = self.pool.begin().await?;
        let updated: Option<SettlementRow> = sqlx::query_as(MARK_CONFIRMED)
            .bind(&key)
            .bind(codec::b256(&tx_hash))
            .bind(codec::int("block", block)?)
            .bind(proof)
            .bind(codec::int("updated_at", at)?)
            .fetch_optional(&mut *conn)
            .await?;
        let stored: SettlementRow = match updated {
            Some(stored) => {
                // The event commits with the confirmation (the outbox).
                let s = stored.decode()?;
                emit(&mut conn, &wh::payment_event(&s, s.updated_at)).await?;
                analytics::write_rollup!(conn, analytics::POSTGRES, &s);
                conn.commit().await?;
                return Ok(s);
            }
            // Already confirmed (a concurrent confirmation held the row lock; once it committed
            // this statement re-checked `status` and skipped the row; confirmed is final, so
            // this reads the first proof), or no such row: `sqlx::Error::RowNotFound`.
            None => {
                sqlx::query_as(SELECT_BY_KEY)
                    .bind(&key)
                    .fetch_one(&mut *conn)
                    .await?
            }
        };
        stored.decode()
    }

    async fn mark_failed(&self, key: B256, error: &str, at: u64) -> StoreResult<()> {
        let mut tx = self.pool.begin().await?;
        let failed: Option<SettlementRow> = sqlx::query_as(MARK_FAILED)
            .bind(codec::b256(&key))
            .bind(error)
            .bind(codec::int("updated_at", at)?)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(row) = failed {
            let s = row.decode()?;
            emit(&mut tx, &wh::payment_event(&s, s.updated_at)).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn unfinished(&self, limit: u32) -> StoreResult<Vec<Settlement>> {
        let rows: Vec<SettlementRow> = sqlx::query_as(UNFINISHED)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(SettlementRow::decode).collect()
    }

    async fn count_by_status(&self) -> StoreResult<Vec<(SettlementStatus, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(COUNT_BY_STATUS)
            .fetch_all(&self.pool)
            .await?;
        codec::status_counts(rows)
    }

    async fn insert_api_key(
        &self,
        key_hash: B256,
        provider: Address,
        label: &str,
        at: u64,
    ) -> StoreResult<()> {
        sqlx::query(INSERT_API_KEY)
            .bind(codec::b256(&key_hash))
            .bind(codec::address(&provider))
            .bind(label)
            .bind(codec::int("created_at", at)?)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn api_key_provider(&self, key_hash: B256) -> StoreResult<Option<Address>> {
        let row = sqlx::query(API_KEY_PROVIDER)
            .bind(codec::b256(&key_hash))
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| codec::parse_address("provider", row.try_get::<&str, _>(0)?))
            .transpose()
    }

    async fn revoke_api_key(&self, key_hash: B256, at: u64) -> StoreResult<bool> {
        let done = sqlx::query(REVOKE_API_KEY)
            .bind(codec::b256(&key_hash))
            .bind(codec::int("revoked_at", at)?)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()> {
        sqlx::query(INSERT_CHALLENGE)
            .bind(codec::b256(&challenge_hash))
            .bind(codec::address(&address))
            .bind(codec::int("expires_at", expires_at)?)
            .bind(codec::int("created_at", at)?)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn consume_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        at: u64,
    ) -> StoreResult<bool> {
        // A concurrent consumer waits for the row lock, then re-checks `used_at`: one wins.
        let done = sqlx::query(CONSUME_CHALLENGE)
            .bind(codec::b256(&challenge_hash))
            .bind(codec::address(&address))
            .bind(codec::int("used_at", at)?)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_plan(&self, plan: &PlanOwner) -> StoreResult<PlanOwner> {
        let (plan_id, provider, relayer, at) = codec::encode_plan(plan)?;
        let mut conn = self.pool.acquire().await?;
        sqlx::query(INSERT_PLAN)
            .bind(&plan.network)
            .bind(&plan_id)
            .bind(&provider)
            .bind(&relayer)
            .bind(at)
            .execute(&mut *conn)
            .await?;
        // Rows are never deleted: the row is there, ours or the first writer's.
        let row: codec::PlanRow = sqlx::query_as(SELECT_PLAN)
            .bind(&plan.network)
            .bind(&plan_id)
            .fetch_one(&mut *conn)
            .await?;
        codec::decode_plan(row)
    }

    async fn plan_owner(&self, network: &str, plan_id: B256) -> StoreResult<Option<PlanOwner>> {
        let row: Option<codec::PlanRow> = sqlx::query_as(SELECT_PLAN)
            .bind(network)
            .bind(codec::b256(&plan_id))
            .fetch_optional(&self.pool)
            .await?;
        row.map(codec::decode_plan).transpose()
    }

    async fn keeper_cursor(&self, network: &str) -> StoreResult<u64> {
        let row: Option<(i64,)> = sqlx::query_as(RSQL.select_cursor)
            .bind(network)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map_or(0, |(b,)| u64::try_from(b).unwrap_or(0)))
    }

    async fn index_subscription_events(
        &self,
        network: &str,
        events: &[SubscriptionEvent],
        next_block: u64,
        at: u64,
    ) -> StoreResult<()> {
        let next_block = codec::int("next_block", next_block)?;
        let at = codec::int("updated_at", at)?;
        let mut tx = self.pool.begin().await?;
        for event in events {
            match event {
                SubscriptionEvent::Created {
                    id,
                    plan_id,
                    subscriber,
                    paid_through,
                } => {
                    sqlx::query(RSQL.insert_created)
                        .bind(network)
                        .bind(codec::b256(id))
                        .bind(codec::b256(plan_id))
                        .bind(codec::address(subscriber))
                        .bind(codec::int("next_due", *paid_through)?)
                        .bind(at)
                        .execute(&mut *tx)
                        .await?;
                }
                SubscriptionEvent::Resumed { id, paid_through } => {
                    sqlx::query(RSQL.apply_resumed)
                        .bind(network)
                        .bind(codec::b256(id))
                        .bind(codec::int("next_due", *paid_through)?)
                        .bind(at)
                        .execute(&mut *tx)
                        .await?;
                }
                SubscriptionEvent::Renewed(r) => {
                    sqlx::query(RSQL.insert_renewal)
                        .bind(network)
                        .bind(codec::b256(&r.id))
                        .bind(i64::from(r.cycle))
                        .bind(r.outcome.as_str())
                        .bind(codec::b256(&r.tx_hash))
                        .bind(codec::int("block", r.block)?)
                        .bind(at)
                        .execute(&mut *tx)
                        .await?;
                }
                SubscriptionEvent::Notify {
                    id,
                    subject,
                    kind,
                    data,
                } => {
                    let (sql, key) = match subject {
                        Subject::Plan(p) => (WSQL.plan_provider, p),
                        Subject::Subscription(s) => (WSQL.subscription_provider, s),
                    };
                    if let Some(state) = renewals::state_after(kind) {
                        sqlx::query(RSQL.apply_state)
                            .bind(network)
                            .bind(codec::b256(key))
                            .bind(state.as_str())
                            .bind(at)
                            .execute(&mut *tx)
                            .await?;
                    }
                    let provider: Option<(String,)> = sqlx::query_as(sql)
                        .bind(network)
                        .bind(codec::b256(key))
                        .fetch_optional(&mut *tx)
                        .await?;
                    if let Some((provider,)) = provider {
                        let e = NewEvent {
                            id: id.clone(),
                            provider: codec::parse_address("provider", &provider)?,
                            r#type: (*kind).to_owned(),
                            data: data.clone(),
                            created_at: u64::try_from(at).unwrap_or(0),
                        };
                        emit(&mut tx, &e).await?;
                    }
                }
            }
        }
        sqlx::query(RSQL.upsert_cursor)
            .bind(network)
            .bind(next_block)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn due_subscriptions(
        &self,
        network: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<IndexedSubscription>> {
        let rows: Vec<renewals::IndexedRow> = sqlx::query_as(RSQL.select_due)
            .bind(network)
            .bind(codec::int("now", now)?)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(renewals::decode_indexed).collect()
    }

    async fn indexed_subscription(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<IndexedSubscription>> {
        let row: Option<renewals::IndexedRow> = sqlx::query_as(RSQL.select_one)
            .bind(network)
            .bind(codec::b256(&id))
            .fetch_optional(&self.pool)
            .await?;
        row.map(renewals::decode_indexed).transpose()
    }

    async fn update_indexed_subscription(
        &self,
        network: &str,
        id: B256,
        state: IndexedState,
        cycle: u32,
        next_due: u64,
        at: u64,
    ) -> StoreResult<()> {
        sqlx::query(RSQL.update_seen)
            .bind(network)
            .bind(codec::b256(&id))
            .bind(state.as_str())
            .bind(i64::from(cycle))
            .bind(codec::int("next_due", next_due)?)
            .bind(codec::int("updated_at", at)?)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn record_renewal(
        &self,
        renewal: &Renewal,
        state: IndexedState,
        next_due: u64,
    ) -> StoreResult<bool> {
        let r = renewal;
        let id = codec::b256(&r.id);
        let at = codec::int("created_at", r.at)?;
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(RSQL.insert_renewal)
            .bind(&r.network)
            .bind(&id)
            .bind(i64::from(r.cycle))
            .bind(r.outcome.as_str())
            .bind(codec::b256(&r.tx_hash))
            .bind(codec::int("block", r.block)?)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        // A failed cycle stays unpaid: the row keeps the last paid cycle.
        let cycle = match r.outcome {
            RenewalOutcome::Renewed => r.cycle,
            RenewalOutcome::Failed => r.cycle.saturating_sub(1),
        };
        sqlx::query(RSQL.update_seen)
            .bind(&r.network)
            .bind(&id)
            .bind(state.as_str())
            .bind(i64::from(cycle))
            .bind(codec::int("next_due", next_due)?)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn renewals(&self, network: &str, id: B256) -> StoreResult<Vec<Renewal>> {
        let rows: Vec<renewals::RenewalRow> = sqlx::query_as(RSQL.select_renewals)
            .bind(network)
            .bind(codec::b256(&id))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(renewals::decode_renewal).collect()
    }

    async fn deduct_allowance(&self, d: &Deduction) -> StoreResult<DeductOutcome> {
        let id = codec::b256(&d.id);
        let at = codec::int("at", d.at)?;
        let cycle = i64::from(d.cycle);
        if d.key.is_none() {
            // The common case, one statement and one round trip: the row lock is held only for
            // the statement, so deductions of one hot subscription do not queue behind network
            // round trips. Anything else (a new cycle, exhausted, closed) takes the path below.
            let applied: Option<metering::AllowanceRow> = sqlx::query_as(MSQL.deduct_existing)
                .bind(&d.network)
                .bind(&id)
                .bind(cycle)
                .bind(metering::units(d.amount))
                .bind(at)
                .bind(metering::units(d.cap))
                .fetch_optional(&self.pool)
                .await?;
            if let Some(row) = applied {
                return Ok(DeductOutcome::Applied(metering::decode_allowance(row)?));
            }
        }
        let mut tx = self.pool.begin().await?;
        // The upsert locks the cycle's row until commit: deductions of one cycle run one at a
        // time from here, so the key check and the cap check below see every earlier one.
        let current: metering::AllowanceRow = sqlx::query_as(MSQL.upsert_cycle)
            .bind(&d.network)
            .bind(&id)
            .bind(cycle)
            .bind(metering::units(d.cap))
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
        if let Some(key) = &d.key {
            let earlier: Option<(i64, i64)> = sqlx::query_as(MSQL.select_key)
                .bind(&d.network)
                .bind(&id)
                .bind(key)
                .fetch_optional(&mut *tx)
                .await?;
            if let Some((c, amount)) = earlier {
                if amount != metering::units(d.amount) {
                    return Ok(DeductOutcome::KeyConflict);
                }
                let row: metering::AllowanceRow = sqlx::query_as(MSQL.select_cycle)
                    .bind(&d.network)
                    .bind(&id)
                    .bind(c)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                return Ok(DeductOutcome::Replayed(metering::decode_allowance(row)?));
            }
        }
        let applied: Option<metering::AllowanceRow> = sqlx::query_as(MSQL.deduct)
            .bind(&d.network)
            .bind(&id)
            .bind(cycle)
            .bind(metering::units(d.amount))
            .bind(at)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = applied else {
            let row = metering::decode_allowance(current)?;
            if row.closed {
                tx.commit().await?;
                return Ok(DeductOutcome::Closed(row));
            }
            if let Some(e) = wh::exhausted_event(d, &row) {
                emit(&mut tx, &e).await?;
            }
            tx.commit().await?;
            return Ok(DeductOutcome::Exhausted(row));
        };
        let row = metering::decode_allowance(row)?;
        sqlx::query(MSQL.insert_record)
            .bind(&d.network)
            .bind(&id)
            .bind(cycle)
            .bind(metering::units(row.deductions))
            .bind(metering::units(d.amount))
            .bind(d.key.as_deref())
            .bind(at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(DeductOutcome::Applied(row))
    }

    async fn allowance_cycle(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Option<AllowanceCycle>> {
        let row: Option<metering::AllowanceRow> = sqlx::query_as(MSQL.select_cycle)
            .bind(network)
            .bind(codec::b256(&id))
            .bind(i64::from(cycle))
            .fetch_optional(&self.pool)
            .await?;
        row.map(metering::decode_allowance).transpose()
    }

    async fn latest_allowance_cycle(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<AllowanceCycle>> {
        let row: Option<metering::AllowanceRow> = sqlx::query_as(MSQL.select_latest)
            .bind(network)
            .bind(codec::b256(&id))
            .fetch_optional(&self.pool)
            .await?;
        row.map(metering::decode_allowance).transpose()
    }

    async fn upsert_allowance_cycle(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
        cap: u64,
        close: bool,
        at: u64,
    ) -> StoreResult<AllowanceCycle> {
        let id = codec::b256(&id);
        let at = codec::int("at", at)?;
        let mut tx = self.pool.begin().await?;
        let row: metering::AllowanceRow = sqlx::query_as(MSQL.upsert_cycle)
            .bind(network)
            .bind(&id)
            .bind(i64::from(cycle))
            .bind(metering::units(cap))
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
        let mut row = metering::decode_allowance(row)?;
        if close && !row.closed {
            sqlx::query(MSQL.close_cycle)
                .bind(network)
                .bind(&id)
                .bind(i64::from(cycle))
                .bind(at)
                .execute(&mut *tx)
                .await?;
            row.closed = true;
        }
        tx.commit().await?;
        Ok(row)
    }

    async fn cycles_to_bill(
        &self,
        network: &str,
        min_unbilled: u64,
        started_before: u64,
        limit: u32,
    ) -> StoreResult<Vec<AllowanceCycle>> {
        let rows: Vec<metering::AllowanceRow> = sqlx::query_as(MSQL.select_to_bill)
            .bind(network)
            .bind(metering::units(min_unbilled))
            .bind(metering::units(started_before))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(metering::decode_allowance).collect()
    }

    async fn begin_charge(&self, c: &NewCharge) -> StoreResult<bool> {
        let id = codec::b256(&c.id);
        let at = codec::int("at", c.at)?;
        let mut tx = self.pool.begin().await?;
        let billed = sqlx::query(MSQL.bill)
            .bind(&c.network)
            .bind(&id)
            .bind(i64::from(c.cycle))
            .bind(i64::from(c.index))
            .bind(metering::units(c.amount))
            .bind(at)
            .execute(&mut *tx)
            .await?;
        if billed.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(MSQL.insert_charge)
            .bind(&c.network)
            .bind(codec::b256(&c.reference))
            .bind(&id)
            .bind(i64::from(c.cycle))
            .bind(metering::units(c.amount))
            .bind(codec::address(&c.relayer))
            .bind(at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn pending_charges(&self, network: &str, limit: u32) -> StoreResult<Vec<OverageCharge>> {
        let rows: Vec<metering::ChargeRow> = sqlx::query_as(MSQL.select_pending)
            .bind(network)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(metering::decode_charge).collect()
    }

    async fn finish_charge(
        &self,
        network: &str,
        reference: B256,
        outcome: &ChargeOutcome,
        at: u64,
    ) -> StoreResult<bool> {
        let at = codec::int("at", at)?;
        let (state, tx_hash, error) = metering::outcome_columns(outcome);
        let mut tx = self.pool.begin().await?;
        let done: Option<(String, i64, i64)> = sqlx::query_as(MSQL.finish_charge)
            .bind(network)
            .bind(codec::b256(&reference))
            .bind(state)
            .bind(tx_hash)
            .bind(error)
            .bind(at)
            .fetch_optional(&mut *tx)
            .await?;
        let Some((id, cycle, amount)) = done else {
            return Ok(false);
        };
        let (charged, unpaid) = metering::split(outcome, amount);
        sqlx::query(MSQL.settle_cycle)
            .bind(network)
            .bind(&id)
            .bind(cycle)
            .bind(charged)
            .bind(unpaid)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn overage_charges(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Vec<OverageCharge>> {
        let rows: Vec<metering::ChargeRow> = sqlx::query_as(MSQL.select_charges)
            .bind(network)
            .bind(codec::b256(&id))
            .bind(i64::from(cycle))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(metering::decode_charge).collect()
    }

    async fn record_event(&self, event: &NewEvent) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let new = emit(&mut tx, event).await?;
        tx.commit().await?;
        Ok(new)
    }

    async fn insert_webhook_endpoint(&self, e: &Endpoint) -> StoreResult<()> {
        sqlx::query(WSQL.insert_endpoint)
            .bind(&e.id)
            .bind(codec::address(&e.provider))
            .bind(&e.url)
            .bind(&e.events)
            .bind(&e.description)
            .bind(&e.secret)
            .bind(e.old_secret.as_deref())
            .bind(e.old_secret_expires_at.map(wh::int))
            .bind(i64::from(e.enabled))
            .bind(e.disabled_reason.as_deref())
            .bind(wh::int(e.created_at))
            .bind(wh::int(e.updated_at))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn webhook_endpoints(&self, provider: Address) -> StoreResult<Vec<Endpoint>> {
        let rows: Vec<wh::EndpointRow> = sqlx::query_as(WSQL.select_endpoints)
            .bind(codec::address(&provider))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(wh::decode_endpoint).collect()
    }

    async fn webhook_endpoint(
        &self,
        provider: Option<Address>,
        id: &str,
    ) -> StoreResult<Option<Endpoint>> {
        let row: Option<wh::EndpointRow> = match provider {
            Some(p) => {
                sqlx::query_as(WSQL.select_endpoint)
                    .bind(codec::address(&p))
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?
            }
            None => {
                sqlx::query_as(WSQL.select_endpoint_any)
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?
            }
        };
        row.map(wh::decode_endpoint).transpose()
    }

    async fn update_webhook_endpoint(&self, e: &Endpoint) -> StoreResult<bool> {
        let done = sqlx::query(WSQL.update_endpoint)
            .bind(codec::address(&e.provider))
            .bind(&e.id)
            .bind(&e.url)
            .bind(&e.events)
            .bind(&e.description)
            .bind(&e.secret)
            .bind(e.old_secret.as_deref())
            .bind(e.old_secret_expires_at.map(wh::int))
            .bind(i64::from(e.enabled))
            .bind(e.disabled_reason.as_deref())
            .bind(wh::int(e.updated_at))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_webhook_endpoint(&self, provider: Address, id: &str) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(WSQL.delete_endpoint)
            .bind(codec::address(&provider))
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() > 0 {
            sqlx::query(WSQL.delete_deliveries)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn webhook_secrets(&self) -> StoreResult<Vec<EndpointSecrets>> {
        let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(WSQL.select_secrets)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, secret, old_secret)| EndpointSecrets {
                id,
                secret,
                old_secret,
            })
            .collect())
    }

    async fn replace_webhook_secrets(
        &self,
        old: &EndpointSecrets,
        new: &EndpointSecrets,
    ) -> StoreResult<bool> {
        let done = sqlx::query(WSQL.replace_secrets)
            .bind(&old.id)
            .bind(&old.secret)
            .bind(old.old_secret.as_deref())
            .bind(&new.secret)
            .bind(new.old_secret.as_deref())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn due_deliveries(&self, now: u64, limit: u32) -> StoreResult<Vec<Delivery>> {
        let rows: Vec<wh::DeliveryRow> = sqlx::query_as(WSQL.select_due)
            .bind(wh::int(now))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(wh::decode_delivery).collect()
    }

    async fn pending_deliveries(
        &self,
        endpoint_id: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        let rows: Vec<wh::DeliveryRow> = sqlx::query_as(WSQL.select_pending)
            .bind(endpoint_id)
            .bind(wh::int(now))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(wh::decode_delivery).collect()
    }

    async fn finish_deliveries(
        &self,
        endpoint_id: &str,
        attempts: &[(u64, u32, Attempt)],
        at: u64,
    ) -> StoreResult<()> {
        let mut tx = self.pool.begin().await?;
        for (seq, n, attempt) in attempts {
            let (state, next, status, error) = wh::attempt_columns(attempt, at);
            sqlx::query(WSQL.update_delivery)
                .bind(endpoint_id)
                .bind(wh::int(*seq))
                .bind(state)
                .bind(i64::from(*n))
                .bind(next)
                .bind(status)
                .bind(error.as_deref())
                .bind(wh::int(at))
                .execute(&mut *tx)
                .await?;
            if matches!(attempt, Attempt::Gone) {
                sqlx::query(WSQL.disable_endpoint)
                    .bind(endpoint_id)
                    .bind("the receiver answered 410 Gone")
                    .bind(wh::int(at))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn redeliver(
        &self,
        provider: Address,
        endpoint_id: &str,
        event_id: &str,
        at: u64,
    ) -> StoreResult<bool> {
        let done = sqlx::query(WSQL.redeliver)
            .bind(codec::address(&provider))
            .bind(endpoint_id)
            .bind(event_id)
            .bind(wh::int(at))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn deliveries(
        &self,
        provider: Address,
        endpoint_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        let rows: Vec<wh::DeliveryRow> = sqlx::query_as(WSQL.select_deliveries)
            .bind(codec::address(&provider))
            .bind(endpoint_id)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(wh::decode_delivery).collect()
    }

    async fn events(&self, provider: Address, after: u64, limit: u32) -> StoreResult<Vec<Event>> {
        let rows: Vec<wh::EventRow> = sqlx::query_as(WSQL.select_events)
            .bind(codec::address(&provider))
            .bind(wh::int(after))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(wh::decode_event).collect()
    }

    async fn analytics(&self, q: &AnalyticsQuery) -> StoreResult<AnalyticsData> {
        analytics::read_analytics!(&self.pool, &analytics::POSTGRES, q)
    }

    async fn insert_dashboard_session(
        &self,
        token_hash: B256,
        key_hash: B256,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()> {
        let sql = &analytics::POSTGRES;
        let mut tx = self.pool.begin().await?;
        sqlx::query(sql.purge_sessions)
            .bind(codec::int("now", at)?)
            .execute(&mut *tx)
            .await?;
        sqlx::query(sql.insert_session)
            .bind(codec::b256(&token_hash))
            .bind(codec::b256(&key_hash))
            .bind(codec::int("expires_at", expires_at)?)
            .bind(codec::int("created_at", at)?)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn dashboard_session(&self, token_hash: B256, now: u64) -> StoreResult<Option<Address>> {
        let row: Option<(String,)> = sqlx::query_as(analytics::POSTGRES.session_provider)
            .bind(codec::b256(&token_hash))
            .bind(codec::int("now", now)?)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|(p,)| codec::parse_address("provider", &p))
            .transpose()
    }

    async fn delete_dashboard_session(&self, token_hash: B256) -> StoreResult<bool> {
        let done = sqlx::query(analytics::POSTGRES.delete_session)
            .bind(codec::b256(&token_hash))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}
