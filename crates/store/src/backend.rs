//! How the two databases run the store's operations, and the one [`Store`] implementation
//! over them.
//!
//! Every operation is written once, in its domain module, over a [`Conn`]. A [`Backend`] only
//! says where it runs: a read on a read connection; a write in a transaction that commits before
//! the caller hears of it. Both databases run every write in their group commit (`group`: one
//! writer, many writes per commit, each all or nothing).

use std::{fmt, future::Future, ops::DerefMut, pin::Pin, time::Duration};

use alloy::primitives::{Address, B256};
use async_trait::async_trait;
use tollgate_protocol::SettlementStatus;

use crate::{
    AllowanceCycle, AnalyticsData, AnalyticsQuery, Attempt, ChargeOutcome, CollectAttempts,
    Confirmed, DeductOutcome, Deduction, Delivery, Endpoint, EndpointSecrets, Event, IndexedState,
    IndexedSubscription, Lease, NewCharge, NewEvent, NewSettlement, OverageCharge, PlanOwner,
    Recorded, RefusedCollect, Relay, RelayBounds, RelayOutcome, Renewal, RenewalIssue, Settlement,
    Store, StoreResult, SubscriptionEvent, analytics, conn::Conn, group::Merge, leases, metering,
    providers, relays, renewals, settlements, webhooks,
};

/// A boxed, sendable future (a write's operation, which SQLite hands to its writer task).
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a database runs the store's operations; [`Store`] is implemented once over it.
///
/// A write's operation owns what it needs (`'static`): SQLite runs it later, on its writer task.
pub(crate) trait Backend: Send + Sync + fmt::Debug + 'static {
    /// The connection the operations run on.
    type Conn: Conn;
    /// A read connection, back to its pool when dropped.
    type Reader: DerefMut<Target = Self::Conn> + Send;

    /// [`Store::migrate`].
    fn run_migrations(&self) -> impl Future<Output = StoreResult<()>> + Send;

    /// [`Store::ping`]: reachable *and* writable.
    fn check_writable(&self) -> impl Future<Output = StoreResult<()>> + Send;

    /// A read connection.
    fn reader(&self) -> impl Future<Output = StoreResult<Self::Reader>> + Send;

    /// Runs a write, all or nothing, and returns its result once committed. `op` may run more
    /// than once, each time from a clone (`group`: a batch in which a write failed is run
    /// again); only its last run, in the transaction that commits, counts, so it must act on
    /// nothing but the database.
    fn write<T, F>(&self, op: F) -> impl Future<Output = StoreResult<T>> + Send
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Self::Conn) -> BoxFuture<'c, StoreResult<T>>
            + Clone
            + Send
            + 'static;

    /// Runs a write in the next group commit merged with the writes of its kind waiting with
    /// it (`group::Merge`), and returns its result once committed.
    fn write_merged<M: Merge<Self::Conn>>(
        &self,
        item: M,
    ) -> impl Future<Output = StoreResult<M::Output>> + Send;

    /// [`Store::deduct_allowance`]: each database keeps a deduction exact under concurrency its
    /// own way.
    fn deduct(&self, d: &Deduction) -> impl Future<Output = StoreResult<DeductOutcome>> + Send;

    /// [`Store::take_relay`]: in a transaction that holds the subscriber's lock to its commit.
    fn relay(
        &self,
        relay: &Relay,
        bounds: &RelayBounds,
    ) -> impl Future<Output = StoreResult<RelayOutcome>> + Send;
}

#[async_trait]
impl<B: Backend> Store for B {
    async fn migrate(&self) -> StoreResult<()> {
        self.run_migrations().await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.check_writable().await
    }
    async fn insert_settlement(&self, new: &NewSettlement) -> StoreResult<Recorded> {
        self.write_merged(settlements::Insert(new.clone())).await
    }

    async fn settlement(&self, key: B256) -> StoreResult<Option<Settlement>> {
        settlements::get(&mut *self.reader().await?, key).await
    }

    async fn mark_submitted(&self, key: B256, tx_hash: B256, at: u64) -> StoreResult<()> {
        self.write(move |c| Box::pin(settlements::mark_submitted(c, key, tx_hash, at)))
            .await
    }

    async fn mark_pending(&self, key: B256, at: u64) -> StoreResult<()> {
        self.write(move |c| Box::pin(settlements::mark_pending(c, key, at)))
            .await
    }

    async fn confirm_settlement(
        &self,
        new: &NewSettlement,
        tx_hash: B256,
        block: u64,
        proof: Option<&str>,
        at: u64,
    ) -> StoreResult<Confirmed> {
        self.write_merged(settlements::Confirm {
            new: new.clone(),
            tx_hash,
            block,
            proof: proof.map(str::to_owned),
            at,
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

    async fn bind_payment_identifier(
        &self,
        id_hash: B256,
        key: B256,
        at: u64,
    ) -> StoreResult<B256> {
        self.write(move |c| Box::pin(settlements::bind_id(c, id_hash, key, at)))
            .await
    }

    async fn rebind_payment_identifier(
        &self,
        id_hash: B256,
        from: B256,
        to: B256,
        at: u64,
    ) -> StoreResult<bool> {
        self.write(move |c| Box::pin(settlements::rebind_id(c, id_hash, from, to, at)))
            .await
    }

    async fn unfinished(&self, limit: u32) -> StoreResult<Vec<Settlement>> {
        settlements::unfinished(&mut *self.reader().await?, limit).await
    }

    async fn count_by_status(&self) -> StoreResult<Vec<(SettlementStatus, u64)>> {
        settlements::count_by_status(&mut *self.reader().await?).await
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
        providers::api_key_provider(&mut *self.reader().await?, key_hash).await
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
        providers::plan_owner(&mut *self.reader().await?, network, plan_id).await
    }

    async fn keeper_cursor(&self, network: &str) -> StoreResult<u64> {
        renewals::cursor(&mut *self.reader().await?, network).await
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
        renewals::due(&mut *self.reader().await?, network, now, limit).await
    }

    async fn indexed_subscription(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<IndexedSubscription>> {
        renewals::indexed(&mut *self.reader().await?, network, id).await
    }

    async fn subscriptions_of(
        &self,
        network: &str,
        subscriber: Address,
    ) -> StoreResult<Vec<IndexedSubscription>> {
        renewals::of_subscriber(&mut *self.reader().await?, network, subscriber).await
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
        renewals::list(&mut *self.reader().await?, network, id).await
    }

    async fn count_refused_collect(
        &self,
        refused: &RefusedCollect,
        limit: u32,
    ) -> StoreResult<CollectAttempts> {
        let r = refused.clone();
        self.write(move |c| Box::pin(async move { renewals::count_refused(c, &r, limit).await }))
            .await
    }

    async fn renewal_issues(
        &self,
        provider: Address,
        limit: u32,
    ) -> StoreResult<Vec<RenewalIssue>> {
        renewals::issues(&mut *self.reader().await?, provider, limit).await
    }

    async fn deduct_allowance(&self, d: &Deduction) -> StoreResult<DeductOutcome> {
        Backend::deduct(self, d).await
    }

    async fn allowance_cycle(
        &self,
        network: &str,
        id: B256,
        cycle: u32,
    ) -> StoreResult<Option<AllowanceCycle>> {
        metering::cycle_row(&mut *self.reader().await?, network, id, cycle).await
    }

    async fn latest_allowance_cycle(
        &self,
        network: &str,
        id: B256,
    ) -> StoreResult<Option<AllowanceCycle>> {
        metering::latest_cycle(&mut *self.reader().await?, network, id).await
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
        let c = &mut *self.reader().await?;
        metering::cycles_to_bill(c, network, min_unbilled, started_before, limit).await
    }

    async fn begin_charge(&self, charge: &NewCharge) -> StoreResult<bool> {
        let charge = charge.clone();
        self.write(move |c| Box::pin(async move { metering::begin_charge(c, &charge).await }))
            .await
    }

    async fn pending_charges(&self, network: &str, limit: u32) -> StoreResult<Vec<OverageCharge>> {
        metering::pending_charges(&mut *self.reader().await?, network, limit).await
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
        metering::charges(&mut *self.reader().await?, network, id, cycle).await
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
        webhooks::endpoints(&mut *self.reader().await?, provider).await
    }

    async fn webhook_endpoint(
        &self,
        provider: Option<Address>,
        id: &str,
    ) -> StoreResult<Option<Endpoint>> {
        webhooks::endpoint(&mut *self.reader().await?, provider, id).await
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
        webhooks::secrets(&mut *self.reader().await?).await
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
        webhooks::due_deliveries(&mut *self.reader().await?, now, limit).await
    }

    async fn pending_deliveries(
        &self,
        endpoint_id: &str,
        now: u64,
        limit: u32,
    ) -> StoreResult<Vec<Delivery>> {
        webhooks::pending_deliveries(&mut *self.reader().await?, endpoint_id, now, limit).await
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
        webhooks::deliveries(&mut *self.reader().await?, provider, endpoint_id, limit).await
    }

    async fn events(&self, provider: Address, after: u64, limit: u32) -> StoreResult<Vec<Event>> {
        webhooks::events(&mut *self.reader().await?, provider, after, limit).await
    }

    async fn analytics(&self, q: &AnalyticsQuery) -> StoreResult<AnalyticsData> {
        analytics::read(&mut *self.reader().await?, q).await
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
        providers::session_provider(&mut *self.reader().await?, token_hash, now).await
    }

    async fn delete_dashboard_session(&self, token_hash: B256) -> StoreResult<bool> {
        self.write(move |c| Box::pin(providers::delete_session(c, token_hash)))
            .await
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> StoreResult<Option<u64>> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.write(move |c| Box::pin(async move { leases::acquire(c, &name, &holder, ttl).await }))
            .await
    }

    async fn renew_lease(
        &self,
        name: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
    ) -> StoreResult<bool> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.write(move |c| {
            Box::pin(async move { leases::renew(c, &name, &holder, token, ttl).await })
        })
        .await
    }

    async fn take_over_lease(
        &self,
        name: &str,
        holder: &str,
        from: &str,
        token: u64,
        ttl: Duration,
    ) -> StoreResult<Option<u64>> {
        let (name, holder, from) = (name.to_owned(), holder.to_owned(), from.to_owned());
        self.write(move |c| {
            Box::pin(async move { leases::take_over(c, &name, &holder, &from, token, ttl).await })
        })
        .await
    }

    async fn release_lease(&self, name: &str, holder: &str, token: u64) -> StoreResult<bool> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.write(move |c| {
            Box::pin(async move { leases::release(c, &name, &holder, token).await })
        })
        .await
    }

    async fn take_relay(&self, relay: &Relay, bounds: &RelayBounds) -> StoreResult<RelayOutcome> {
        Backend::relay(self, relay, bounds).await
    }

    async fn release_relay(&self, seq: u64) -> StoreResult<bool> {
        self.write(move |c| Box::pin(relays::release(c, seq))).await
    }

    async fn leases(&self, prefix: &str) -> StoreResult<Vec<Lease>> {
        leases::list(&mut *self.reader().await?, prefix).await
    }

    async fn prune_leases(&self, prefix: &str, lapsed_for: Duration) -> StoreResult<u64> {
        let prefix = prefix.to_owned();
        self.write(move |c| Box::pin(async move { leases::prune(c, &prefix, lapsed_for).await }))
            .await
    }
}
