//! Providers: their API keys (hashed), registration challenges, the plans created for them, and
//! dashboard sessions.

use alloy::primitives::{Address, B256};

use crate::{
    PlanOwner, StoreResult,
    codec::{self},
    conn::{Conn, args},
};

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

// One statement: of concurrent registrations with one challenge, exactly one changes the row
// (SQLite runs it on its single writer; on PostgreSQL a concurrent consumer waits for the row
// lock, then re-checks `used_at`).
const CONSUME_CHALLENGE: &str = "UPDATE provider_challenges SET used_at = $3 \
     WHERE challenge_hash = $1 AND address = $2 AND used_at IS NULL AND expires_at > $3";

const INSERT_PLAN: &str = "INSERT INTO plans (network, plan_id, provider, relayer, created_at) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (network, plan_id) DO NOTHING";

const SELECT_PLAN: &str = "SELECT network, plan_id, provider, relayer, created_at FROM plans \
     WHERE network = $1 AND plan_id = $2";

const INSERT_SESSION: &str = "INSERT INTO dashboard_sessions \
     (token_hash, key_hash, expires_at, created_at) VALUES ($1, $2, $3, $4)";

const PURGE_SESSIONS: &str = "DELETE FROM dashboard_sessions WHERE expires_at <= $1";

const SESSION_PROVIDER: &str = "SELECT k.provider FROM dashboard_sessions s \
     JOIN api_keys k ON k.key_hash = s.key_hash \
     WHERE s.token_hash = $1 AND s.expires_at > $2 AND k.revoked_at IS NULL";

const DELETE_SESSION: &str = "DELETE FROM dashboard_sessions WHERE token_hash = $1";

/// [`crate::Store::insert_api_key`].
pub(crate) async fn insert_api_key(
    c: &mut impl Conn,
    key_hash: B256,
    provider: Address,
    label: &str,
    at: u64,
) -> StoreResult<()> {
    let at = codec::int("created_at", at)?;
    let (key, provider) = (codec::b256(&key_hash), codec::address(&provider));
    c.execute(INSERT_API_KEY, args![&key, &provider, label, at])
        .await?;
    Ok(())
}

/// [`crate::Store::api_key_provider`].
pub(crate) async fn api_key_provider(
    c: &mut impl Conn,
    key_hash: B256,
) -> StoreResult<Option<Address>> {
    let row: Option<(String,)> = c
        .fetch_optional(API_KEY_PROVIDER, args![&codec::b256(&key_hash)])
        .await?;
    row.map(|(p,)| codec::parse_address("provider", &p))
        .transpose()
}

/// [`crate::Store::revoke_api_key`].
pub(crate) async fn revoke_api_key(
    c: &mut impl Conn,
    key_hash: B256,
    at: u64,
) -> StoreResult<bool> {
    let at = codec::int("revoked_at", at)?;
    let done = c
        .execute(REVOKE_API_KEY, args![&codec::b256(&key_hash), at])
        .await?;
    Ok(done > 0)
}

/// [`crate::Store::insert_provider_challenge`].
pub(crate) async fn insert_challenge(
    c: &mut impl Conn,
    challenge_hash: B256,
    address: Address,
    expires_at: u64,
    at: u64,
) -> StoreResult<()> {
    let expires_at = codec::int("expires_at", expires_at)?;
    let at = codec::int("created_at", at)?;
    let (hash, address) = (codec::b256(&challenge_hash), codec::address(&address));
    c.execute(INSERT_CHALLENGE, args![&hash, &address, expires_at, at])
        .await?;
    Ok(())
}

/// [`crate::Store::consume_provider_challenge`].
pub(crate) async fn consume_challenge(
    c: &mut impl Conn,
    challenge_hash: B256,
    address: Address,
    at: u64,
) -> StoreResult<bool> {
    let at = codec::int("used_at", at)?;
    let (hash, address) = (codec::b256(&challenge_hash), codec::address(&address));
    let done = c
        .execute(CONSUME_CHALLENGE, args![&hash, &address, at])
        .await?;
    Ok(done > 0)
}

/// [`crate::Store::insert_plan`].
pub(crate) async fn insert_plan(c: &mut impl Conn, plan: &PlanOwner) -> StoreResult<PlanOwner> {
    let (plan_id, provider, relayer, at) = codec::encode_plan(plan)?;
    c.execute(
        INSERT_PLAN,
        args![&plan.network, &plan_id, &provider, &relayer, at],
    )
    .await?;
    // Rows are never deleted: the row is there, ours or the first writer's.
    let row: codec::PlanRow = c
        .fetch_one(SELECT_PLAN, args![&plan.network, &plan_id])
        .await?;
    codec::decode_plan(row)
}

/// [`crate::Store::plan_owner`].
pub(crate) async fn plan_owner(
    c: &mut impl Conn,
    network: &str,
    plan_id: B256,
) -> StoreResult<Option<PlanOwner>> {
    let row: Option<codec::PlanRow> = c
        .fetch_optional(SELECT_PLAN, args![network, &codec::b256(&plan_id)])
        .await?;
    row.map(codec::decode_plan).transpose()
}

/// [`crate::Store::insert_dashboard_session`], inside the caller's transaction.
pub(crate) async fn insert_session(
    c: &mut impl Conn,
    token_hash: B256,
    key_hash: B256,
    expires_at: u64,
    at: u64,
) -> StoreResult<()> {
    let (token, key) = (codec::b256(&token_hash), codec::b256(&key_hash));
    let expires_at = codec::int("expires_at", expires_at)?;
    let at = codec::int("created_at", at)?;
    c.execute(PURGE_SESSIONS, args![at]).await?;
    c.execute(INSERT_SESSION, args![&token, &key, expires_at, at])
        .await?;
    Ok(())
}

/// [`crate::Store::dashboard_session`].
pub(crate) async fn session_provider(
    c: &mut impl Conn,
    token_hash: B256,
    now: u64,
) -> StoreResult<Option<Address>> {
    let now = codec::int("now", now)?;
    let row: Option<(String,)> = c
        .fetch_optional(SESSION_PROVIDER, args![&codec::b256(&token_hash), now])
        .await?;
    row.map(|(p,)| codec::parse_address("provider", &p))
        .transpose()
}

/// [`crate::Store::delete_dashboard_session`].
pub(crate) async fn delete_session(c: &mut impl Conn, token_hash: B256) -> StoreResult<bool> {
    let done = c
        .execute(DELETE_SESSION, args![&codec::b256(&token_hash)])
        .await?;
    Ok(done > 0)
}
