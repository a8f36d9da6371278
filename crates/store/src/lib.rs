//! The Tollgate facilitator's durable store, behind one seam with two implementations: SQLite
//! (the default: WAL, a file in the state directory) and PostgreSQL (the same schema, for
//! several replicas). Migrations are embedded in the binary and run by [`Store::migrate`].
//!
//! The chain is the source of truth for money; the store keeps what the chain does not: the
//! settlement state machine with its idempotency keys, issued proofs, provider API keys (hashed),
//! the renewal keeper's index, the metering ledger with its on-chain charges, the webhook outbox,
//! the analytics rollups and the counts of relayed lifecycle transactions.
//!
//! Each statement is written once for both databases, in the domain module it belongs to
//! (`settlements`, `providers`, `renewals`, `metering`, `webhooks`, `analytics`), and bound once
//! through a small connection seam; the two backends (`sqlite`, `postgres`) only open
//! connections and choose the transaction each operation runs in.
//!
//! Each backend is a cargo feature (`sqlite`, `postgres`; both by default): the gate, whose
//! memo set ([`MemoSet`]) is on this seam too, compiles only the driver its own features ask for.

// With one backend compiled out, its spellings (written beside the other's, as each statement is)
// are unused.
#![cfg_attr(
    not(all(feature = "sqlite", feature = "postgres")),
    allow(dead_code, unused_imports)
)]

use std::{fmt, sync::Arc, time::Duration};

use alloy::primitives::{Address, B256};
use async_trait::async_trait;
use tollgate_protocol::{Amount, SettlementStatus};

mod analytics;
mod backend;
mod codec;
mod conn;
mod error;
mod group;
mod leases;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod memos;
mod metering;
mod migrations;
#[cfg(feature = "postgres")]
mod postgres;
mod providers;
mod relays;
mod renewals;
mod settlements;
#[cfg(feature = "sqlite")]
mod sqlite;
mod webhooks;

pub use analytics::{
    AnalyticsData, AnalyticsQuery, COUNTED_EVENTS, EndpointHealth, PlanStates, ROLLUP_MAX,
    RevenueKind, RevenueRow, Volume,
};
pub use error::{StoreError, StoreResult};
pub use leases::Lease;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use memos::MemoSet;
pub use metering::{
    AllowanceCycle, ChargeOutcome, ChargeState, DeductOutcome, Deduction, MAX_METERED, NewCharge,
    OverageCharge,
};
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use relays::{Relay, RelayBounds, RelayOutcome, RelayScope};
pub use renewals::{
    CollectAttempts, IndexedState, IndexedSubscription, RefusedCollect, Renewal, RenewalIssue,
    RenewalIssueKind, RenewalOutcome, Subject, SubscriptionEvent,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteStore, Synchronous};
pub use webhooks::{
    Attempt, Delivery, DeliveryState, Endpoint, EndpointSecrets, Event, NewEvent, event_id,
};

/// Which path a settlement took.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettlementKind {
    /// `POST /authorize`: through the PaymentRouter, with the facilitator's fee and a proof.
    Router,
    /// `POST /settle` (x402 V1): a direct `transferWithAuthorization` to the payee.
    X402,
}

impl SettlementKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Router => "router",
            Self::X402 => "x402",
        }
    }
}

/// A settlement as first recorded, before anything is broadcast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSettlement {
    /// Idempotency key: `keccak256(chainId, token, from, nonce)` — one authorization, one row.
    pub key: B256,
    /// Which path.
    pub kind: SettlementKind,
    /// Hash of the canonical request; the same key with another request is a conflict.
    pub request_hash: B256,
    /// Network name.
    pub network: String,
    /// Chain id.
    pub chain_id: u64,
    /// Token.
    pub token: Address,
    /// Payer.
    pub payer: Address,
    /// Payee.
    pub pay_to: Address,
    /// Gross amount.
    pub amount: Amount,
    /// Fee (zero on the x402 path).
    pub fee: Amount,
    /// Memo (zero on the x402 path).
    pub memo: B256,
    /// The EIP-3009 nonce.
    pub nonce: B256,
    /// The authorization's `validBefore` (unix seconds, saturated to `u64`).
    pub valid_before: u64,
    /// The signed request as received (JSON), to resubmit after a crash.
    pub request: String,
    /// The URL of the resource paid for, for analytics (the facilitator's `analytics::resource_label`):
    /// reported by the client on `/authorize`, the x402 requirements' `resource` on `/settle`.
    pub resource: Option<String>,
    /// `keccak256` of the client's claim secret ([`tollgate_protocol::AuthorizeRequest::claim`]):
    /// only its holder gets the proof from a repeat or the status URL. `None` without a claim.
    pub claim_hash: Option<B256>,
    /// Unix seconds.
    pub created_at: u64,
}

/// A settlement row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    /// What was first recorded.
    pub new: NewSettlement,
    /// Where it stands.
    pub status: SettlementStatus,
    /// The broadcast transaction, once known.
    pub tx_hash: Option<B256>,
    /// The block it was mined in, once confirmed.
    pub block: Option<u64>,
    /// The issued proof (base64, the `X-PAYMENT` form), once confirmed (router path).
    pub proof: Option<String>,
    /// Why it failed, for `Failed` (a code such as `InsufficientFunds` and a message).
    pub error: Option<String>,
    /// Unix seconds of the last change.
    pub updated_at: u64,
}

/// What [`Store::insert_settlement`] found: the row as stored, and whether this call recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The row as stored: the one just inserted, or the one that held the key already.
    pub row: Settlement,
    /// `true` if this call inserted the row, `false` if the key was taken before (by an earlier
    /// or a concurrent call, in this process or another).
    pub inserted: bool,
}

/// What [`Store::confirm_settlement`] left: the row as stored, and whether this call confirmed
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confirmed {
    /// The row as stored: confirmed by this call, or before it (its first transaction, block
    /// and proof).
    pub row: Settlement,
    /// `true` if this call confirmed the row, `false` if it was confirmed before (by an earlier
    /// or a concurrent call, in this process or another): of several callers confirming one
    /// payment at once, exactly one gets `true`.
    pub first: bool,
}

/// A plan the facilitator created for a provider: who owns it and which relayer created it (its
/// on-chain provider and operator).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanOwner {
    /// Network name.
    pub network: String,
    /// The on-chain plan id.
    pub plan_id: B256,
    /// The provider (the API key's owner) that created it.
    pub provider: Address,
    /// The relayer that sent `createPlan` (the plan's on-chain provider and operator).
    pub relayer: Address,
    /// Unix seconds.
    pub created_at: u64,
}

/// The facilitator's persistence. Every write is one transaction; every state change is
/// idempotent (repeating it leaves the row as the first call did).
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Applies the embedded migrations (idempotent).
    async fn migrate(&self) -> StoreResult<()>;

    /// Checks the store is reachable and writable (for `/readyz`).
    async fn ping(&self) -> StoreResult<()>;

    /// Inserts `new` unless a row with its key exists; returns the row as stored either way, and
    /// whether this call inserted it (the caller compares `request_hash` to detect a conflicting
    /// reuse of the key). Of concurrent calls with one key, exactly one inserts.
    async fn insert_settlement(&self, new: &NewSettlement) -> StoreResult<Recorded>;

    /// The row with this key.
    async fn settlement(&self, key: B256) -> StoreResult<Option<Settlement>>;

    /// Records the broadcast transaction (status `Submitted`), from `Received`, `Submitted` or
    /// `Pending` (a new hash is a replacement transaction; the same hash again changes nothing).
    /// Does nothing to a `Confirmed` or `Failed` row (both are final), nor when no row has `key`.
    async fn mark_submitted(&self, key: B256, tx_hash: B256, at: u64) -> StoreResult<()>;

    /// Records that confirmation was not seen in time (status `Pending`). Does nothing to a
    /// `Confirmed` or `Failed` row.
    async fn mark_pending(&self, key: B256, at: u64) -> StoreResult<()>;

    /// Records the confirmation of the payment `new` and the issued proof (status
    /// `Confirmed`), in one transaction with its `payment.settled` event and rollups. A row
    /// already confirmed keeps its first transaction, block and proof (first writer wins); the
    /// stored row is returned, with whether this call confirmed it. A `Failed` row becomes
    /// `Confirmed` (the chain is the truth) and loses its error. No row with `new.key`, or one
    /// recorded for another request or fee: `StoreError::Database(sqlx::Error::RowNotFound)`.
    async fn confirm_settlement(
        &self,
        new: &NewSettlement,
        tx_hash: B256,
        block: u64,
        proof: Option<&str>,
        at: u64,
    ) -> StoreResult<Confirmed>;

    /// [`confirm_settlement`](Self::confirm_settlement), for the row alone.
    async fn mark_confirmed(
        &self,
        new: &NewSettlement,
        tx_hash: B256,
        block: u64,
        proof: Option<&str>,
        at: u64,
    ) -> StoreResult<Settlement> {
        self.confirm_settlement(new, tx_hash, block, proof, at)
            .await
            .map(|c| c.row)
    }

    /// Records a final failure (status `Failed`). Does nothing to a `Confirmed` row; a `Failed`
    /// row keeps its first error.
    async fn mark_failed(&self, key: B256, error: &str, at: u64) -> StoreResult<()>;

    /// Binds an x402 V2 `payment-identifier` (`id_hash`: the hash of payer and id) to the
    /// settlement `key` of the payload it came with, unless it is bound already; returns the key
    /// it is bound to (the first payload's wins, also of concurrent binds).
    async fn bind_payment_identifier(&self, id_hash: B256, key: B256, at: u64)
    -> StoreResult<B256>;

    /// Moves a payment identifier from the settlement `from` (which failed) to `to`; `false`
    /// when it is no longer bound to `from` (another payload moved it first).
    async fn rebind_payment_identifier(
        &self,
        id_hash: B256,
        from: B256,
        to: B256,
        at: u64,
    ) -> StoreResult<bool>;

    /// Rows still `Received`, `Submitted` or `Pending` (to resume after a restart), oldest first.
    async fn unfinished(&self, limit: u32) -> StoreResult<Vec<Settlement>>;

    /// Counts of rows by status (for metrics): every status once, in declaration order, zero
    /// included.
    async fn count_by_status(&self) -> StoreResult<Vec<(SettlementStatus, u64)>>;

    /// Stores a provider API key's hash (keccak-256 of the key) for `provider`. A hash already
    /// stored keeps its first provider, label and revocation (re-adding never un-revokes).
    async fn insert_api_key(
        &self,
        key_hash: B256,
        provider: Address,
        label: &str,
        at: u64,
    ) -> StoreResult<()>;

    /// The provider owning an unrevoked key with this hash.
    async fn api_key_provider(&self, key_hash: B256) -> StoreResult<Option<Address>>;

    /// Revokes a key; returns whether one was revoked.
    async fn revoke_api_key(&self, key_hash: B256, at: u64) -> StoreResult<bool>;

    /// Records a registration challenge issued to `address` (keyed by the keccak-256 of its
    /// text). A hash already stored keeps its first row.
    async fn insert_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()>;

    /// Consumes the challenge atomically: marks it used if it exists, was issued to `address`,
    /// is unused and `expires_at > at`. Returns whether it was consumed (at most one caller
    /// ever gets `true` for a challenge).
    async fn consume_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        at: u64,
    ) -> StoreResult<bool>;

    /// Records a plan's owner unless `(network, plan_id)` is recorded; returns the row as stored
    /// either way (first writer wins).
    async fn insert_plan(&self, plan: &PlanOwner) -> StoreResult<PlanOwner>;

    /// The owner of the plan `plan_id` on `network`, if the facilitator created it.
    async fn plan_owner(&self, network: &str, plan_id: B256) -> StoreResult<Option<PlanOwner>>;

    /// The renewal keeper's log cursor on `network`: the next block to scan (0 when none).
    async fn keeper_cursor(&self, network: &str) -> StoreResult<u64>;

    /// Applies subscription events read from `network`'s logs and advances its cursor to
    /// `next_block` (never backwards), in one transaction. A `Created` subscription already
    /// indexed keeps its row (re-reading logs is harmless); a `Resumed` one becomes active with
    /// its new due time unless cancelled; events for unknown ids are ignored.
    async fn index_subscription_events(
        &self,
        network: &str,
        events: &[SubscriptionEvent],
        next_block: u64,
        at: u64,
    ) -> StoreResult<()>;

    /// Indexed active subscriptions on `network` due at `now` (`next_due <= now`), earliest first.
    async fn due_subscriptions(
        &self,
        network: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<IndexedSubscription>>;

    /// The indexed subscription `id` on `network`.
    async fn indexed_subscription(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<IndexedSubscription>>;

    /// The subscriptions of `subscriber` indexed on `network` (every state), by id: complete up
    /// to the keeper's cursor ([`Store::keeper_cursor`]), the chain's logs tell the rest.
    async fn subscriptions_of(
        &self,
        network: &str,
        subscriber: Address,
    ) -> StoreResult<Vec<IndexedSubscription>>;

    /// Records what the chain says of an indexed subscription (state, last paid cycle, next due
    /// time). Ignored when the row already has a later cycle (a stale read never rolls it back).
    async fn update_indexed_subscription(
        &self,
        network: &str,
        id: B256,
        state: IndexedState,
        cycle: u32,
        next_due: u64,
        at: u64,
    ) -> StoreResult<()>;

    /// Records a collection attempt's outcome for `(network, id, cycle)` (first writer wins) and
    /// updates the index row to `state` and `next_due` (and `cycle` when renewed), in one
    /// transaction. Returns whether the renewal row was new.
    async fn record_renewal(
        &self,
        renewal: &Renewal,
        state: IndexedState,
        next_due: u64,
    ) -> StoreResult<bool>;

    /// The recorded renewals of `id` on `network`, by cycle.
    async fn renewals(&self, network: &str, id: B256) -> StoreResult<Vec<Renewal>>;

    /// Counts a `collect` of `refused.cycle` refused at simulation for an unexpected reason, in
    /// one transaction: a new cycle starts the count again. At `limit` the subscription becomes
    /// stuck: left out of [`Store::due_subscriptions`] and listed by
    /// [`Store::renewal_issues`], with one `subscription.renewal_stuck` event for its plan's
    /// owner, until the chain's state of the subscription changes (any of its events indexed,
    /// or a renewal recorded, ends it).
    async fn count_refused_collect(
        &self,
        refused: &RefusedCollect,
        limit: u32,
    ) -> StoreResult<CollectAttempts>;

    /// The subscriptions to `provider`'s plans whose renewal needs attention, latest first (at
    /// most `limit`): stuck ones, and those paused by a failed renewal and not paid since.
    async fn renewal_issues(&self, provider: Address, limit: u32)
    -> StoreResult<Vec<RenewalIssue>>;

    /// Applies a deduction atomically, in one transaction: creates the cycle's ledger row if
    /// missing (and raises its cap to `d.cap` when higher); answers a used idempotency key with
    /// [`DeductOutcome::Replayed`] (same amount) or [`DeductOutcome::KeyConflict`]; refuses a
    /// closed cycle and any amount above `cap - used`; else adds the amount and records the
    /// deduction. Exact under concurrency: two deductions never both take the last of the cap.
    async fn deduct_allowance(&self, d: &Deduction) -> StoreResult<DeductOutcome>;

    /// The ledger of `(network, id, cycle)`.
    async fn allowance_cycle(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Option<AllowanceCycle>>;

    /// The ledger of the latest cycle of `(network, id)` with one.
    async fn latest_allowance_cycle(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<AllowanceCycle>>;

    /// Creates the cycle's ledger row if missing and raises its cap to `cap` when higher (a
    /// cap never falls); optionally closes the cycle (no deduction lands after that). Returns
    /// the row.
    async fn upsert_allowance_cycle(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
        cap: u64,
        close: bool,
        at: u64,
    ) -> StoreResult<AllowanceCycle>;

    /// Cycles of `network` with unbilled usage that is due a charge: the cycle is closed, or at
    /// least `min_unbilled` is unbilled, or the oldest unbilled deduction is at or before
    /// `started_before`. Oldest first.
    async fn cycles_to_bill(
        &self,
        network: &str,
        min_unbilled: u64,
        started_before: u64,
        limit: u32,
    ) -> StoreResult<Vec<AllowanceCycle>>;

    /// Starts a charge: in one transaction, adds `c.amount` to the cycle's billed total (only if
    /// its charge count is still `c.index` and the amount is unbilled) and records the charge as
    /// pending. Returns whether it started (false: another charge started first).
    async fn begin_charge(&self, c: &NewCharge) -> StoreResult<bool>;

    /// Pending charges of `network` (to send, or send again after a crash), oldest first.
    async fn pending_charges(&self, network: &str, limit: u32) -> StoreResult<Vec<OverageCharge>>;

    /// Finishes a pending charge and adds its amount to the cycle's charged or unpaid total, in
    /// one transaction. A charge already finished keeps its first outcome; returns whether this
    /// call finished it.
    async fn finish_charge(
        &self,
        network: &str,
        reference: B256,
        outcome: &ChargeOutcome,
        at: u64,
    ) -> StoreResult<bool>;

    /// The charges of `(network, id, cycle)`, oldest first.
    async fn overage_charges(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Vec<OverageCharge>>;

    /// Records an event unless one with its id exists, with a pending delivery for each of its
    /// provider's enabled endpoints that take it, in one transaction. Returns whether it was new.
    /// (Events caused by the store's own state changes are recorded inside those changes'
    /// transactions: confirmed and failed settlements, refused deductions, indexed chain events.)
    async fn record_event(&self, event: &NewEvent) -> StoreResult<bool>;

    /// Adds an endpoint.
    async fn insert_webhook_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()>;

    /// The endpoints of `provider`, oldest first.
    async fn webhook_endpoints(&self, provider: Address) -> StoreResult<Vec<Endpoint>>;

    /// The endpoint `id` (of `provider`, when given).
    async fn webhook_endpoint(
        &self,
        provider: Option<Address>,
        id: &str,
    ) -> StoreResult<Option<Endpoint>>;

    /// Writes every mutable field of an endpoint (matched by provider and id); whether it exists.
    async fn update_webhook_endpoint(&self, endpoint: &Endpoint) -> StoreResult<bool>;

    /// Deletes an endpoint of `provider` and its deliveries; whether it existed.
    async fn delete_webhook_endpoint(&self, provider: Address, id: &str) -> StoreResult<bool>;

    /// Every endpoint's stored secrets, by id (to seal them under the current key at startup).
    async fn webhook_secrets(&self) -> StoreResult<Vec<EndpointSecrets>>;

    /// Rewrites an endpoint's stored secrets to `new`'s, only if they are still `old`'s (a
    /// rotation in between wins); whether they were rewritten.
    async fn replace_webhook_secrets(
        &self,
        old: &EndpointSecrets,
        new: &EndpointSecrets,
    ) -> StoreResult<bool>;

    /// The oldest pending delivery of each enabled endpoint, when due at `now` (deliveries to one
    /// endpoint go in event order: a later one waits for the earlier), soonest first.
    async fn due_deliveries(&self, now: u64, limit: u32) -> StoreResult<Vec<Delivery>>;

    /// The pending deliveries of one endpoint, in event order, up to (not including) the first
    /// that is not yet due at `now`.
    async fn pending_deliveries(
        &self,
        endpoint_id: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>>;

    /// Records attempts at pending deliveries of one endpoint, in one transaction:
    /// `(event_seq, attempts, attempt)` each (`attempts` is the count including it). A delivery
    /// no longer pending is left alone; a 410 also disables the endpoint.
    async fn finish_deliveries(
        &self,
        endpoint_id: &str,
        attempts: &[(u64, u32, Attempt)],
        at: u64,
    ) -> StoreResult<()>;

    /// Puts the delivery of event `event_id` to `provider`'s endpoint back to pending, due now,
    /// with its attempts reset (manual redelivery of a dead or delivered one). Whether it exists.
    async fn redeliver(
        &self,
        provider: Address,
        endpoint_id: &str,
        event_id: &str,
        at: u64,
    ) -> StoreResult<bool>;

    /// The latest deliveries to `provider`'s endpoint, newest first.
    async fn deliveries(
        &self,
        provider: Address,
        endpoint_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>>;

    /// `provider`'s events after `after` (a `seq`), oldest first.
    async fn events(&self, provider: Address, after: u64, limit: u32) -> StoreResult<Vec<Event>>;

    /// A provider's analytics over a range (see [`AnalyticsQuery`]): settled volume from the
    /// rollups kept with each confirmation, subscriptions, metered usage, webhook health and
    /// the latest payments.
    async fn analytics(&self, q: &AnalyticsQuery) -> StoreResult<AnalyticsData>;

    /// Opens a dashboard session: `token_hash` (keccak-256 of the cookie's token) stands for the
    /// API key with `key_hash` until `expires_at`. Expired sessions are dropped on the way.
    async fn insert_dashboard_session(
        &self,
        token_hash: B256,
        key_hash: B256,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()>;

    /// The provider of an unexpired session whose API key is not revoked.
    async fn dashboard_session(&self, token_hash: B256, now: u64) -> StoreResult<Option<Address>>;

    /// Ends a session (logout); whether it existed.
    async fn delete_dashboard_session(&self, token_hash: B256) -> StoreResult<bool>;

    /// Takes the lease `name` for `holder` for `ttl` (on the database's clock) when it is free,
    /// lapsed, or already `holder`'s (then it is extended). The tenure's fencing token when
    /// taken; `None` while another holder's lease runs. See [`Lease`].
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> StoreResult<Option<u64>>;

    /// Extends `holder`'s running tenure `token` of `name` to `ttl` from now; `false` when it
    /// lapsed or passed to another holder (the holder must stop acting under it).
    async fn renew_lease(
        &self,
        name: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
    ) -> StoreResult<bool>;

    /// Passes `from`'s tenure `token` of `name` to `holder` at once, running or not, for `ttl`:
    /// for a holder known to be dead (a process of this host that no longer exists). The new
    /// token; `None` when the tenure is no longer `from`'s `token`.
    async fn take_over_lease(
        &self,
        name: &str,
        holder: &str,
        from: &str,
        token: u64,
        ttl: Duration,
    ) -> StoreResult<Option<u64>>;

    /// Ends `holder`'s tenure `token` of `name` now (another holder may take it at once);
    /// whether it was still that tenure.
    async fn release_lease(&self, name: &str, holder: &str, token: u64) -> StoreResult<bool>;

    /// Counts `relay`, a lifecycle transaction about to be relayed at the facilitator's gas,
    /// unless its subscription or its subscriber is at its bound (see [`RelayBounds`]): then it
    /// is [`RelayOutcome::Refused`], with when a slot frees up, and nothing is counted. Exact
    /// under concurrency, also between replicas: of two counts for the last slot, one is
    /// refused. The subscriber's counts that left every window are dropped on the way.
    async fn take_relay(&self, relay: &Relay, bounds: &RelayBounds) -> StoreResult<RelayOutcome>;

    /// Takes back the count `seq` of [`Store::take_relay`] (nothing was sent after all, say the
    /// chain refused the call at simulation); whether it was there.
    async fn release_relay(&self, seq: u64) -> StoreResult<bool>;

    /// The leases whose names start with `prefix`, by name.
    async fn leases(&self, prefix: &str) -> StoreResult<Vec<Lease>>;

    /// Deletes the leases whose names start with `prefix` and that lapsed more than
    /// `lapsed_for` ago (on the database's clock); how many. Only for names that are not taken
    /// again, such as a replica's own lease named after a process that is gone: a name taken
    /// again after its row was deleted starts its fencing tokens over.
    async fn prune_leases(&self, prefix: &str, lapsed_for: Duration) -> StoreResult<u64>;
}

/// Opens the store named by `url`: `sqlite://PATH` (created if missing; WAL) or
/// `postgres://...`, then runs the migrations.
pub async fn open(url: &str) -> StoreResult<Arc<dyn Store>> {
    let store: Arc<dyn Store> = match url {
        #[cfg(feature = "sqlite")]
        _ if url.starts_with("sqlite:") => Arc::new(SqliteStore::connect(url).await?),
        #[cfg(feature = "postgres")]
        _ if url.starts_with("postgres:") || url.starts_with("postgresql:") => {
            Arc::new(PostgresStore::connect(url).await?)
        }
        _ => return Err(StoreError::UnsupportedUrl(url.to_owned())),
    };
    store.migrate().await?;
    Ok(store)
}
