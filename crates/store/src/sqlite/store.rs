//! [`Store`] for [`SqliteStore`]: reads on a reader connection, writes in the group commit. The
//! operations themselves are the shared ones of each domain module.

use alloy::primitives::{Address, B256};
use async_trait::async_trait;
use tollgate_protocol::SettlementStatus;

use super::{MIGRATOR, SqliteStore};
use crate::{
    AllowanceCycle, AnalyticsData, AnalyticsQuery, Attempt, ChargeOutcome, DeductOutcome,
    Deduction, Delivery, Endpoint, EndpointSecrets, Event, IndexedState, IndexedSubscription,
    NewCharge, NewEvent, NewSettlement, OverageCharge, PlanOwner, Renewal, Settlement, Store,
    StoreResult, SubscriptionEvent, analytics, metering, providers, renewals, settlements,
    webhooks,
};

#[async_trait]
impl Store for SqliteStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        Ok(())
    }

    async fn ping(&self) -> StoreResult<()> {
        // Takes the write lock (and gives it back): reachable *and* writable.
        let tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        tx.rollback().await?;
        Ok(())
    }

    async fn insert_settlement(&self, new: &NewSettlement) -> StoreResult<Settlement> {
        let new = new.clone();
        self.write(move |c| Box::pin(async move { settlements::insert(c, &new).await }))
            .await
    }

    async fn settlement(&self, key: B256) -> StoreResult<Option<Settlement>> {
        settlements::get(&mut *self.read().await?, key).await
    }

    async fn mark_submitted(&self, key: B256, tx_hash: B256, at: u64) -> StoreResult<()> {
        self.write(move |c| Box::pin(settlements::mark_submitted(c, key, tx_hash, at)))
            .await
    }

    async fn mark_pending(&self, key: B256, at: u64) -> StoreResult<()> {
        self.write(move |c| Box::pin(settlements::mark_pending(c, key, at)))
            .await
    }

    async fn mark_confirmed(
        &self,
        key: B256,
        tx_hash: B256,
        block: u64,
        proof: Option<&str>,
        at: u64,
    ) -> StoreResult<Settlement> {
        let proof = proof.map(str::to_owned);
        self.write(move |c| {
            Box::pin(async move {
                settlements::mark_confirmed(c, key, tx_hash, block, proof.as_deref(), at).await
            })
        })
        .await
    }

    async fn mark_failed(&self, key: B256, error: &str, at: u64) -> StoreResult<()> {
        let error = error.to_owned();
        self.write(move |c| {
            Box::pin(async move { settlements::mark_failed(c, key, &error, at).await })
        })
        .await
    }

    async fn unfinished(&self, limit: u32) -> StoreResult<Vec<Settlement>> {
        settlements::unfinished(&mut *self.read().await?, limit).await
    }

    async fn count_by_status(&self) -> StoreResult<Vec<(SettlementStatus, u64)>> {
        settlements::count_by_status(&mut *self.read().await?).await
    }

    async fn insert_api_key(
        &self,
        key_hash: B256,
        provider: Address,
        label: &str,
        at: u64,
    ) -> StoreResult<()> {
        let label = label.to_owned();
        self.write(move |c| {
            Box::pin(
                async move { providers::insert_api_key(c, key_hash, provider, &label, at).await },
            )
        })
        .await
    }

    async fn api_key_provider(&self, key_hash: B256) -> StoreResult<Option<Address>> {
        providers::api_key_provider(&mut *self.read().await?, key_hash).await
    }

    async fn revoke_api_key(&self, key_hash: B256, at: u64) -> StoreResult<bool> {
        self.write(move |c| Box::pin(providers::revoke_api_key(c, key_hash, at)))
            .await
    }

    async fn insert_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()> {
        self.write(move |c| {
            Box::pin(providers::insert_challenge(
                c,
                challenge_hash,
                address,
                expires_at,
                at,
            ))
        })
        .await
    }

    async fn consume_provider_challenge(
        &self,
        challenge_hash: B256,
        address: Address,
        at: u64,
    ) -> StoreResult<bool> {
        self.write(move |c| Box::pin(providers::consume_challenge(c, challenge_hash, address, at)))
            .await
    }

    async fn insert_plan(&self, plan: &PlanOwner) -> StoreResult<PlanOwner> {
        let plan = plan.clone();
        self.write(move |c| Box::pin(async move { providers::insert_plan(c, &plan).await }))
            .await
    }

    async fn plan_owner(&self, network: &str, plan_id: B256) -> StoreResult<Option<PlanOwner>> {
        providers::plan_owner(&mut *self.read().await?, network, plan_id).await
    }

    async fn keeper_cursor(&self, network: &str) -> StoreResult<u64> {
        renewals::cursor(&mut *self.read().await?, network).await
    }

    async fn index_subscription_events(
        &self,
        network: &str,
        events: &[SubscriptionEvent],
        next_block: u64,
        at: u64,
    ) -> StoreResult<()> {
        let (network, events) = (network.to_owned(), events.to_vec());
        self.write(move |c| {
            Box::pin(
                async move { renewals::index_events(c, &network, &events, next_block, at).await },
            )
        })
        .await
    }

    async fn due_subscriptions(
        &self,
        network: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<IndexedSubscription>> {
        renewals::due(&mut *self.read().await?, network, now, limit).await
    }

    async fn indexed_subscription(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<IndexedSubscription>> {
        renewals::indexed(&mut *self.read().await?, network, id).await
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
        let network = network.to_owned();
        self.write(move |c| {
            Box::pin(async move {
                renewals::update_seen(c, &network, id, state, cycle, next_due, at).await
            })
        })
        .await
    }

    async fn record_renewal(
        &self,
        renewal: &Renewal,
        state: IndexedState,
        next_due: u64,
    ) -> StoreResult<bool> {
        let r = renewal.clone();
        self.write(move |c| Box::pin(async move { renewals::record(c, &r, state, next_due).await }))
            .await
    }

    async fn renewals(&self, network: &str, id: B256) -> StoreResult<Vec<Renewal>> {
        renewals::list(&mut *self.read().await?, network, id).await
    }

    async fn deduct_allowance(&self, d: &Deduction) -> StoreResult<DeductOutcome> {
        let d = d.clone();
        // The single writer needs no row lock: the idempotency key is checked first.
        self.write(move |c| Box::pin(async move { metering::deduct(c, &d, false).await }))
            .await
    }

    async fn allowance_cycle(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Option<AllowanceCycle>> {
        metering::cycle_row(&mut *self.read().await?, network, id, cycle).await
    }

    async fn latest_allowance_cycle(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<AllowanceCycle>> {
        metering::latest_cycle(&mut *self.read().await?, network, id).await
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
        let network = network.to_owned();
        self.write(move |c| {
            Box::pin(
                async move { metering::upsert_cycle(c, &network, id, cycle, cap, close, at).await },
            )
        })
        .await
    }

    async fn cycles_to_bill(
        &self,
        network: &str,
        min_unbilled: u64,
        started_before: u64,
        limit: u32,
    ) -> StoreResult<Vec<AllowanceCycle>> {
        let c = &mut *self.read().await?;
        metering::cycles_to_bill(c, network, min_unbilled, started_before, limit).await
    }

    async fn begin_charge(&self, charge: &NewCharge) -> StoreResult<bool> {
        let charge = charge.clone();
        self.write(move |c| Box::pin(async move { metering::begin_charge(c, &charge).await }))
            .await
    }

    async fn pending_charges(&self, network: &str, limit: u32) -> StoreResult<Vec<OverageCharge>> {
        metering::pending_charges(&mut *self.read().await?, network, limit).await
    }

    async fn finish_charge(
        &self,
        network: &str,
        reference: B256,
        outcome: &ChargeOutcome,
        at: u64,
    ) -> StoreResult<bool> {
        let (network, outcome) = (network.to_owned(), outcome.clone());
        self.write(move |c| {
            Box::pin(
                async move { metering::finish_charge(c, &network, reference, &outcome, at).await },
            )
        })
        .await
    }

    async fn overage_charges(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Vec<OverageCharge>> {
        metering::charges(&mut *self.read().await?, network, id, cycle).await
    }

    async fn record_event(&self, event: &NewEvent) -> StoreResult<bool> {
        let e = event.clone();
        self.write(move |c| Box::pin(async move { webhooks::emit(c, &e).await }))
            .await
    }

    async fn insert_webhook_endpoint(&self, endpoint: &Endpoint) -> StoreResult<()> {
        let e = endpoint.clone();
        self.write(move |c| Box::pin(async move { webhooks::insert_endpoint(c, &e).await }))
            .await
    }

    async fn webhook_endpoints(&self, provider: Address) -> StoreResult<Vec<Endpoint>> {
        webhooks::endpoints(&mut *self.read().await?, provider).await
    }

    async fn webhook_endpoint(
        &self,
        provider: Option<Address>,
        id: &str,
    ) -> StoreResult<Option<Endpoint>> {
        webhooks::endpoint(&mut *self.read().await?, provider, id).await
    }

    async fn update_webhook_endpoint(&self, endpoint: &Endpoint) -> StoreResult<bool> {
        let e = endpoint.clone();
        self.write(move |c| Box::pin(async move { webhooks::update_endpoint(c, &e).await }))
            .await
    }

    async fn delete_webhook_endpoint(&self, provider: Address, id: &str) -> StoreResult<bool> {
        let id = id.to_owned();
        self.write(move |c| {
            Box::pin(async move { webhooks::delete_endpoint(c, provider, &id).await })
        })
        .await
    }

    async fn webhook_secrets(&self) -> StoreResult<Vec<EndpointSecrets>> {
        webhooks::secrets(&mut *self.read().await?).await
    }

    async fn replace_webhook_secrets(
        &self,
        old: &EndpointSecrets,
        new: &EndpointSecrets,
    ) -> StoreResult<bool> {
        let (old, new) = (old.clone(), new.clone());
        self.write(move |c| Box::pin(async move { webhooks::replace_secrets(c, &old, &new).await }))
            .await
    }

    async fn due_deliveries(&self, now: u64, limit: u32) -> StoreResult<Vec<Delivery>> {
        webhooks::due_deliveries(&mut *self.read().await?, now, limit).await
    }

    async fn pending_deliveries(
        &self,
        endpoint_id: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        webhooks::pending_deliveries(&mut *self.read().await?, endpoint_id, now, limit).await
    }

    async fn finish_deliveries(
        &self,
        endpoint_id: &str,
        attempts: &[(u64, u32, Attempt)],
        at: u64,
    ) -> StoreResult<()> {
        let (endpoint_id, attempts) = (endpoint_id.to_owned(), attempts.to_vec());
        self.write(move |c| {
            Box::pin(
                async move { webhooks::finish_deliveries(c, &endpoint_id, &attempts, at).await },
            )
        })
        .await
    }

    async fn redeliver(
        &self,
        provider: Address,
        endpoint_id: &str,
        event_id: &str,
        at: u64,
    ) -> StoreResult<bool> {
        let (endpoint_id, event_id) = (endpoint_id.to_owned(), event_id.to_owned());
        self.write(move |c| {
            Box::pin(
                async move { webhooks::redeliver(c, provider, &endpoint_id, &event_id, at).await },
            )
        })
        .await
    }

    async fn deliveries(
        &self,
        provider: Address,
        endpoint_id: &str,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        webhooks::deliveries(&mut *self.read().await?, provider, endpoint_id, limit).await
    }

    async fn events(&self, provider: Address, after: u64, limit: u32) -> StoreResult<Vec<Event>> {
        webhooks::events(&mut *self.read().await?, provider, after, limit).await
    }

    async fn analytics(&self, q: &AnalyticsQuery) -> StoreResult<AnalyticsData> {
        analytics::read(&mut *self.read().await?, q).await
    }

    async fn insert_dashboard_session(
        &self,
        token_hash: B256,
        key_hash: B256,
        expires_at: u64,
        at: u64,
    ) -> StoreResult<()> {
        self.write(move |c| {
            Box::pin(providers::insert_session(
                c, token_hash, key_hash, expires_at, at,
            ))
        })
        .await
    }

    async fn dashboard_session(&self, token_hash: B256, now: u64) -> StoreResult<Option<Address>> {
        providers::session_provider(&mut *self.read().await?, token_hash, now).await
    }

    async fn delete_dashboard_session(&self, token_hash: B256) -> StoreResult<bool> {
        self.write(move |c| Box::pin(providers::delete_session(c, token_hash)))
            .await
    }
}
