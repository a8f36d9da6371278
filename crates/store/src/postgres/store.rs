//! [`Store`] for [`PostgresStore`]: one statement on a pooled connection, or several in a
//! transaction of their own. The operations themselves are the shared ones of each domain module.

use alloy::primitives::{Address, B256};
use async_trait::async_trait;
use tollgate_protocol::SettlementStatus;

use super::{MIGRATOR, PostgresStore};
use crate::{
    AllowanceCycle, AnalyticsData, AnalyticsQuery, Attempt, ChargeOutcome, DeductOutcome,
    Deduction, Delivery, Endpoint, EndpointSecrets, Event, IndexedState, IndexedSubscription,
    NewCharge, NewEvent, NewSettlement, OverageCharge, PlanOwner, Renewal, Settlement, Store,
    StoreResult, SubscriptionEvent, analytics, metering, providers, renewals, settlements,
    webhooks,
};

/// Runs `$op` on a new transaction `$tx` of `$store` and commits it when `$op` succeeds (an
/// error rolls it back).
macro_rules! in_transaction {
    ($store:expr, |$tx:ident| $op:expr) => {{
        let mut tx = $store.pool.begin().await?;
        let $tx = &mut *tx;
        let out = $op.await?;
        tx.commit().await?;
        Ok(out)
    }};
}

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
        settlements::insert(&mut *self.conn().await?, new).await
    }

    async fn settlement(&self, key: B256) -> StoreResult<Option<Settlement>> {
        settlements::get(&mut *self.conn().await?, key).await
    }

    async fn mark_submitted(&self, key: B256, tx_hash: B256, at: u64) -> StoreResult<()> {
        settlements::mark_submitted(&mut *self.conn().await?, key, tx_hash, at).await
    }

    async fn mark_pending(&self, key: B256, at: u64) -> StoreResult<()> {
        settlements::mark_pending(&mut *self.conn().await?, key, at).await
    }

    async fn mark_confirmed(
        &self,
        key: B256,
        tx_hash: B256,
        block: u64,
        proof: Option<&str>,
        at: u64,
    ) -> StoreResult<Settlement> {
        in_transaction!(self, |c| settlements::mark_confirmed(
            c, key, tx_hash, block, proof, at
        ))
    }

    async fn mark_failed(&self, key: B256, error: &str, at: u64) -> StoreResult<()> {
        in_transaction!(self, |c| settlements::mark_failed(c, key, error, at))
    }

    async fn unfinished(&self, limit: u32) -> StoreResult<Vec<Settlement>> {
        settlements::unfinished(&mut *self.conn().await?, limit).await
    }

    async fn count_by_status(&self) -> StoreResult<Vec<(SettlementStatus, u64)>> {
        settlements::count_by_status(&mut *self.conn().await?).await
    }

    async fn insert_api_key(
        &self,
        key_hash: B256,
        provider: Address,
        label: &str,
        at: u64,
    ) -> StoreResult<()> {
        providers::insert_api_key(&mut *self.conn().await?, key_hash, provider, label, at).await
    }

    async fn api_key_provider(&self, key_hash: B256) -> StoreResult<Option<Address>> {
        providers::api_key_provider(&mut *self.conn().await?, key_hash).await
    }

    async fn revoke_api_key(&self, key_hash: B256, at: u64) -> StoreResult<bool> {
        providers::revoke_api_key(&mut *self.conn().await?, key_hash, at).await
    }

    async fn insert_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()> {
        let c = &mut *self.conn().await?;
        providers::insert_challenge(c, challenge_hash, address, expires_at, at).await
    }

    async fn consume_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        at: u64,
    ) -> StoreResult<bool> {
        let c = &mut *self.conn().await?;
        providers::consume_challenge(c, challenge_hash, address, at).await
    }

    async fn insert_plan(&self, plan: &PlanOwner) -> StoreResult<PlanOwner> {
        providers::insert_plan(&mut *self.conn().await?, plan).await
    }

    async fn plan_owner(&self, network: &str, plan_id: B256) -> StoreResult<Option<PlanOwner>> {
        providers::plan_owner(&mut *self.conn().await?, network, plan_id).await
    }

    async fn keeper_cursor(&self, network: &str) -> StoreResult<u64> {
        renewals::cursor(&mut *self.conn().await?, network).await
    }

    async fn index_subscription_events(
        &self,
        network: &str,
        events: &[SubscriptionEvent],
        next_block: u64,
        at: u64,
    ) -> StoreResult<()> {
        in_transaction!(self, |c| renewals::index_events(
            c, network, events, next_block, at
        ))
    }

    async fn due_subscriptions(
        &self,
        network: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<IndexedSubscription>> {
        renewals::due(&mut *self.conn().await?, network, now, limit).await
    }

    async fn indexed_subscription(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<IndexedSubscription>> {
        renewals::indexed(&mut *self.conn().await?, network, id).await
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
        let c = &mut *self.conn().await?;
        renewals::update_seen(c, network, id, state, cycle, next_due, at).await
    }

    async fn record_renewal(
        &self,
        renewal: &Renewal,
        state: IndexedState,
        next_due: u64,
    ) -> StoreResult<bool> {
        in_transaction!(self, |c| renewals::record(c, renewal, state, next_due))
    }

    async fn renewals(&self, network: &str, id: B256) -> StoreResult<Vec<Renewal>> {
        renewals::list(&mut *self.conn().await?, network, id).await
    }

    async fn deduct_allowance(&self, d: &Deduction) -> StoreResult<DeductOutcome> {
        if d.key.is_none() {
            // The common case, one statement and one round trip: the row lock is held only for
            // the statement, so deductions of one hot subscription do not queue behind network
            // round trips. Anything else (a new cycle, exhausted, closed) takes the path below.
            if let Some(row) = metering::deduct_existing(&mut *self.conn().await?, d).await? {
                return Ok(DeductOutcome::Applied(row));
            }
        }
        let mut tx = self.pool.begin().await?;
        // The upsert locks the cycle's row until commit: deductions of one cycle run one at a
        // time from here, so the key check and the cap check see every earlier one.
        let outcome = metering::deduct(&mut *tx, d, true).await?;
        // A key conflict writes nothing: dropping the transaction rolls the upsert back.
        if outcome != DeductOutcome::KeyConflict {
            tx.commit().await?;
        }
        Ok(outcome)
    }

    async fn allowance_cycle(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Option<AllowanceCycle>> {
        metering::cycle_row(&mut *self.conn().await?, network, id, cycle).await
    }

    async fn latest_allowance_cycle(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<AllowanceCycle>> {
        metering::latest_cycle(&mut *self.conn().await?, network, id).await
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
        in_transaction!(self, |c| metering::upsert_cycle(
            c, network, id, cycle, cap, close, at
        ))
    }

    async fn cycles_to_bill(
        &self,
        network: &str,
        min_unbilled: u64,
        started_before: u64,
        limit: u32,
    ) -> StoreResult<Vec<AllowanceCycle>> {
        let c = &mut *self.conn().await?;
        metering::cycles_to_bill(c, network, min_unbilled, started_before, limit).await
    }

    async fn begin_charge(&self, charge: &NewCharge) -> StoreResult<bool> {
        in_transaction!(self, |c| metering::begin_charge(c, charge))
    }

    async fn pending_charges(&self, network: &str, limit: u32) -> StoreResult<Vec<OverageCharge>> {
        metering::pending_charges(&mut *self.conn().await?, network, limit).await
    }

    async fn finish_charge(
        &self,
        network: &str,
        reference: B256,
        outcome: &ChargeOutcome,
        at: u64,
    ) -> StoreResult<bool> {
        in_transaction!(self, |c| metering::finish_charge(
            c, network, reference, outcome, at
        ))
    }

    async fn overage_charges(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Vec<OverageCharge>> {
        metering::charges(&mut *self.conn().await?, network, id, cycle).await
    }

    async fn record_event(&self, event: &NewEvent) -> StoreResult<bool> {
        in_transaction!(self, |c| webhooks::emit(c, event))
    }

    async fn insert_webhook_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        webhooks::insert_endpoint(&mut *self.conn().await?, endpoint).await
    }

    async fn webhook_endpoints(&self, provider: Address) -> StoreResult<Vec<Endpoint>> {
        webhooks::endpoints(&mut *self.conn().await?, provider).await
    }

    async fn webhook_endpoint(
        &self,
        provider: Option<Address>,
        id: &str,
    ) -> StoreResult<Option<Endpoint>> {
        webhooks::endpoint(&mut *self.conn().await?, provider, id).await
    }

    async fn update_webhook_endpoint(&self, endpoint: &Endpoint) -> StoreResult<bool> {
        webhooks::update_endpoint(&mut *self.conn().await?, endpoint).await
    }

    async fn delete_webhook_endpoint(&self, provider: Address, id: &str) -> StoreResult<bool> {
        in_transaction!(self, |c| webhooks::delete_endpoint(c, provider, id))
    }

    async fn webhook_secrets(&self) -> StoreResult<Vec<EndpointSecrets>> {
        webhooks::secrets(&mut *self.conn().await?).await
    }

    async fn replace_webhook_secrets(
        &self,
        old: &EndpointSecrets,
        new: &EndpointSecrets,
    ) -> StoreResult<bool> {
        webhooks::replace_secrets(&mut *self.conn().await?, old, new).await
    }

    async fn due_deliveries(&self, now: u64, limit: u32) -> StoreResult<Vec<Delivery>> {
        webhooks::due_deliveries(&mut *self.conn().await?, now, limit).await
    }

    async fn pending_deliveries(
        &self,
        endpoint_id: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        webhooks::pending_deliveries(&mut *self.conn().await?, endpoint_id, now, limit).await
    }

    async fn finish_deliveries(
        &self,
        endpoint_id: &str,
        attempts: &[(u64, u32, Attempt)],
        at: u64,
    ) -> StoreResult<()> {
        in_transaction!(self, |c| webhooks::finish_deliveries(
            c,
            endpoint_id,
            attempts,
            at
        ))
    }

    async fn redeliver(
        &self,
        provider: Address,
        endpoint_id: &str,
        event_id: &str,
        at: u64,
    ) -> StoreResult<bool> {
        let c = &mut *self.conn().await?;
        webhooks::redeliver(c, provider, endpoint_id, event_id, at).await
    }

    async fn deliveries(
        &self,
        provider: Address,
        endpoint_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        webhooks::deliveries(&mut *self.conn().await?, provider, endpoint_id, limit).await
    }

    async fn events(&self, provider: Address, after: u64, limit: u32) -> StoreResult<Vec<Event>> {
        webhooks::events(&mut *self.conn().await?, provider, after, limit).await
    }

    async fn analytics(&self, q: &AnalyticsQuery) -> StoreResult<AnalyticsData> {
        analytics::read(&mut *self.conn().await?, q).await
    }

    async fn insert_dashboard_session(
        &self,
        token_hash: B256,
        key_hash: B256,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()> {
        in_transaction!(self, |c| providers::insert_session(
            c, token_hash, key_hash, expires_at, at
        ))
    }

    async fn dashboard_session(&self, token_hash: B256, now: u64) -> StoreResult<Option<Address>> {
        providers::session_provider(&mut *self.conn().await?, token_hash, now).await
    }

    async fn delete_dashboard_session(&self, token_hash: B256) -> StoreResult<bool> {
        providers::delete_session(&mut *self.conn().await?, token_hash).await
    }
}
