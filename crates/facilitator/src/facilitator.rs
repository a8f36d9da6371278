//! The facilitator's state: [`Facilitator`], the handle on its services (one per area:
//! [`Settlements`], [`X402`], [`Subscriptions`], [`Plans`], [`Webhooks`], [`Analytics`]), and
//! [`Core`], what they share: the networks (each a chain backend plus the contract addresses),
//! the store, the proof key and the relayer keys, and the settings that bound what it accepts.
//!
//! A new endpoint's domain logic is one method of its area's service (in the area's module:
//! `settle`, `x402`, `subscriptions`, `plans`/`providers`, `webhooks`, `analytics`), called by
//! its handler in `api/<area>.rs`; state only that area uses is a field of its service, state
//! several share is in [`Core`].

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use alloy::{
    primitives::{Address, B256, U256},
    signers::local::Secp256k1Signer,
    sol_types::Eip712Domain,
};
use tollgate_chain::{Chain, authorization::token_domain};

use crate::{
    analytics::Analytics, metrics::Metrics, plans::Plans, settle::Settlements, store::Store,
    subscriptions::Subscriptions, webhooks::Webhooks, x402::X402,
};

/// One network the facilitator settles on.
#[derive(Clone, Debug)]
pub struct NetworkSpec {
    /// Canonical network name (an x402 V1 name or a custom one).
    pub name: String,
    /// Chain id.
    pub chain_id: u64,
    /// The token settled.
    pub token: Address,
    /// The token's EIP-712 domain name (e.g. "USD Coin").
    pub token_name: String,
    /// The token's EIP-712 domain version (e.g. "2").
    pub token_version: String,
    /// The PaymentRouter for `/authorize`.
    pub router: Address,
    /// The Subscriptions contract, if deployed.
    pub subscriptions: Option<Address>,
    /// Confirmation depth.
    pub confirmations: u64,
}

/// Bounds and knobs of settlement.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Base URL clients reach this facilitator at (status URLs are built on it).
    pub public_url: String,
    /// Fee per `/authorize` settlement, in the token's smallest unit.
    pub fee: U256,
    /// How long to wait for confirmation before answering 202 pending.
    pub confirmation_timeout: Duration,
    /// Reject authorizations whose `validBefore` is further out than this (seconds).
    pub max_validity_secs: u64,
    /// Proof lifetime after issuance (seconds).
    pub proof_ttl_secs: u64,
    /// How many blocks back to search for a settlement event during recovery.
    pub log_lookback_blocks: u64,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// The HTTP server's limits ([`crate::serve`]): header and request timeouts, header size,
    /// connections, the per-client rate limit.
    pub server: tollgate_server::Limits,
    /// How often the renewal keeper runs ([`Facilitator::spawn_keeper`]); zero disables it.
    pub keeper_interval: Duration,
    /// Metered usage is charged on-chain once the oldest unbilled deduction of a cycle is this
    /// old (and at the end of each cycle).
    pub overage_batch_interval: Duration,
    /// Metered usage is charged on-chain once a cycle's unbilled usage reaches this amount (the
    /// token's smallest unit).
    pub overage_batch_amount: u64,
    /// The delays before each retry of a failed webhook delivery (attempt 2, 3, …); the
    /// delivery is dead after the last. Default: the Standard Webhooks schedule
    /// ([`crate::webhooks::DEFAULT_RETRY_SCHEDULE`]).
    pub webhook_retry_schedule: Vec<Duration>,
    /// How long one webhook delivery attempt may take.
    pub webhook_timeout: Duration,
    /// Whether webhook endpoints may be loopback or private addresses (dev mode only: otherwise
    /// the SSRF guard refuses them).
    pub webhook_allow_private: bool,
    /// The keys webhook signing secrets are sealed with at rest (`keys.webhook_secrets`).
    /// `None`: no endpoint can be added and no secret rotated (503 `WebhooksNotConfigured`).
    pub webhook_secrets: Option<crate::webhooks::SecretsKeys>,
    /// Per network name, a public JSON-RPC endpoint published in discovery (`rpcUrl`) for gates
    /// to read subscriptions from (`networks.<n>.public_rpc_url`). Never the node URL the
    /// facilitator itself uses, which may carry credentials. Default: none.
    pub public_rpc_urls: BTreeMap<String, String>,
    /// How long a lease of this replica's runs in the store without renewal (relayer accounts,
    /// the keeper, the reconciler, webhook queues: see [`crate::replica`]); a dead replica's
    /// leases pass to the others after it. Default [`crate::replica::DEFAULT_LEASE_TTL`].
    pub lease_ttl: Duration,
    /// This replica's name in the store's leases; `None`: host, process id and a random suffix.
    pub replica_id: Option<String>,
    /// The bounds on the subscriber's relayed lifecycle transactions (pause, resume, cancel),
    /// per subscription and per subscriber; see
    /// [`SubscriptionsSection`](crate::config::SubscriptionsSection) for the rule.
    pub relay_bounds: crate::store::RelayBounds,
    /// A relayer holding less than this many settlements' gas is reported (`/readyz`, metrics,
    /// a `relayer.low_balance` event); see [`crate::funds`]. Default
    /// [`crate::funds::DEFAULT_FLOOR_SETTLEMENTS`].
    pub relayer_floor_settlements: u64,
    /// Whether x402 `/verify` may answer from each network's token view, kept block by block
    /// from the token's logs, instead of simulating every payment: no round trip to the node
    /// for a payer and payee whose transfer was simulated before. It polls the node every
    /// 500 ms while verifications come. Its rules are in SECURITY.md, "`/verify` from the
    /// token's view". Default `true` (a node that cannot serve it, such as the embedded devnet,
    /// simulates every payment).
    pub token_view: bool,
    /// The provider account whose webhook endpoints receive the facilitator's own events
    /// (`relayer.low_balance`): the operator's, `fees.fee_recipient` when started from a
    /// config. `None`: those events are only logged.
    pub operator: Option<Address>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            public_url: "http://127.0.0.1:8402".into(),
            fee: U256::from(1_000),
            confirmation_timeout: Duration::from_secs(10),
            max_validity_secs: 3600,
            proof_ttl_secs: 600,
            log_lookback_blocks: 10_000,
            max_body_bytes: crate::api::DEFAULT_MAX_BODY,
            server: tollgate_server::Limits::default(),
            keeper_interval: crate::keeper::DEFAULT_INTERVAL,
            overage_batch_interval: crate::metering::DEFAULT_BATCH_INTERVAL,
            overage_batch_amount: crate::metering::DEFAULT_BATCH_AMOUNT,
            webhook_retry_schedule: crate::webhooks::DEFAULT_RETRY_SCHEDULE.to_vec(),
            webhook_timeout: crate::webhooks::DEFAULT_TIMEOUT,
            webhook_allow_private: false,
            webhook_secrets: None,
            public_rpc_urls: BTreeMap::new(),
            lease_ttl: crate::replica::DEFAULT_LEASE_TTL,
            replica_id: None,
            relay_bounds: crate::config::SubscriptionsSection::default().relay_bounds(),
            relayer_floor_settlements: crate::funds::DEFAULT_FLOOR_SETTLEMENTS,
            operator: None,
            token_view: true,
        }
    }
}

/// A configured network with its chain.
pub(crate) struct Network {
    pub(crate) spec: NetworkSpec,
    /// `spec.name`, checked once at build, for the answers that carry it.
    pub(crate) name: tollgate_protocol::Network,
    pub(crate) chain: Arc<dyn Chain>,
    pub(crate) domain: Eip712Domain,
    /// x402 transfers settled together ([`crate::batch`]).
    pub(crate) batches: crate::batch::Batches,
    /// x402 transfers simulated together ([`crate::simulate`]).
    pub(crate) simulations: crate::simulate::Simulations,
    /// The token's state block by block, for `/verify` without a round trip ([`crate::view`]).
    pub(crate) view: crate::view::View,
    /// Last chain timestamp seen and when, to keep "now" on the chain's clock without a round
    /// trip per request.
    clock: Mutex<(u64, Instant)>,
    /// Held while the clock is read from the chain, with when it last was: the requests that
    /// find it stale together wait for one reading instead of each asking.
    clock_reading: tokio::sync::Mutex<Option<Instant>>,
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Network")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl Network {
    /// The current time on this network: the later of the wall clock and the chain's clock
    /// (devnets travel in time), refreshed from the chain at most once a second.
    pub(crate) async fn now(&self) -> u64 {
        // The chain's time as last read, moved on by the wall clock since; whether that reading
        // is fresh (under a second old).
        let cached = || {
            let (ts, at) = *self.clock.lock().unwrap_or_else(|e| e.into_inner());
            (
                ts + at.elapsed().as_secs(),
                at.elapsed() < Duration::from_secs(1) && ts != 0,
            )
        };
        // The token view's block, read at its last poll, is a reading too.
        if let Some((ts, at)) = self.view.clock() {
            return (ts + at.elapsed().as_secs()).max(unix_now());
        }
        let (mut chain_ts, fresh) = cached();
        if !fresh {
            // One reading at a time: a request that waited for another's takes its result
            // (or, when that reading failed, the time as last read).
            let asked = Instant::now();
            let mut last = self.clock_reading.lock().await;
            let (ts, fresh) = cached();
            if fresh || last.is_some_and(|at| at >= asked) {
                chain_ts = ts;
            } else {
                if let Ok(t) = self.chain.timestamp().await {
                    *self.clock.lock().unwrap_or_else(|e| e.into_inner()) = (t, Instant::now());
                    chain_ts = t;
                }
                *last = Some(Instant::now());
            }
        }
        chain_ts.max(unix_now())
    }
}

impl Network {
    /// Searches the last `lookback` blocks for logs of `address` matching `topics` that pass
    /// `accept`, and returns the receipt of the first such transaction that succeeded and is at
    /// least `depth` blocks deep (1: included) — recovery after a crash or a front-run.
    pub(crate) async fn find_at_depth(
        &self,
        address: alloy::primitives::Address,
        topics: [Option<Vec<B256>>; 4],
        lookback: u64,
        depth: u64,
        accept: impl Fn(&tollgate_chain::ChainLog) -> bool,
    ) -> tollgate_chain::Result<Option<tollgate_chain::Receipt>> {
        let latest = self.chain.block_number().await?;
        let filter = tollgate_chain::LogFilter {
            from_block: latest.saturating_sub(lookback),
            to_block: Some(latest),
            addresses: vec![address],
            topics,
        };
        for l in self.chain.logs(&filter).await?.iter().filter(|l| accept(l)) {
            if let Some(r) = self.chain.receipt(l.tx_hash).await?
                && r.success
                && latest + 1 >= r.block_number + depth.max(1)
            {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }
}

/// The time since the Unix epoch, to the nanosecond (zero for a clock set before it).
pub(crate) fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

pub(crate) use tollgate_protocol::unix_now;

/// Errors building a [`Facilitator`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No network configured.
    #[error("no network configured")]
    NoNetwork,
    /// No relayer key.
    #[error("no relayer key configured")]
    NoRelayer,
    /// A relayer key the network's chain backend does not hold.
    #[error("network {network}: the chain backend holds no key for relayer {relayer}")]
    RelayerNotHeld {
        /// Network name.
        network: String,
        /// Relayer address.
        relayer: Address,
    },
    /// The chain id the backend reports differs from the configured one.
    #[error("network {network}: configured chain id {configured}, backend reports {actual}")]
    ChainIdMismatch {
        /// Network name.
        network: String,
        /// Configured.
        configured: u64,
        /// Reported.
        actual: u64,
    },
    /// The proof key is also a relayer key (keys must be separate).
    #[error("the proof-signing key must differ from every relayer key")]
    ProofKeyIsRelayer,
    /// The proof key is not a valid secp256k1 key.
    #[error("invalid proof-signing key")]
    InvalidProofKey,
    /// Two networks with one name.
    #[error("network {0} configured twice")]
    DuplicateNetwork(String),
    /// A network name that is not of a network's form ([`tollgate_protocol::Network`]).
    #[error("network {0:?} is not a well-formed network name")]
    MalformedNetwork(String),
    /// The HTTP client for webhook deliveries could not be built.
    #[error("cannot build the webhook HTTP client")]
    Http,
}

/// The facilitator: a handle on its services, one per area, which share the facilitator's
/// core (networks, store, keys, settings, metrics, leases, relayer funds). Cheap to clone;
/// all clones share state.
///
/// The HTTP handlers ([`crate::router`]) call a service: [`settlements`](Self::settlements)
/// (`/authorize`, status, proofs), [`x402`](Self::x402) (`/verify`, `/settle`, `/supported`),
/// [`subscriptions`](Self::subscriptions) (relayed subscriptions, their lifecycle and metered
/// usage, and the keeper), [`plans`](Self::plans) (plans, provider registration and API keys),
/// [`webhooks`](Self::webhooks) (endpoints, deliveries, events) and
/// [`analytics`](Self::analytics). A new endpoint is a protocol type, one handler with its route
/// and OpenAPI operation in `api/<area>.rs`, one method of the area's service and the client's
/// method in `tollgate-client`. This type keeps construction, the accessors and the background
/// tasks' entry points.
#[derive(Clone)]
pub struct Facilitator {
    inner: Arc<Services>,
}

/// The services, each holding the shared [`Core`].
struct Services {
    core: Arc<Core>,
    settlements: Settlements,
    x402: X402,
    subscriptions: Subscriptions,
    plans: Plans,
    webhooks: Webhooks,
    analytics: Analytics,
}

/// What every service shares: the networks, the store, the proof key and the relayer accounts
/// (with this replica's leases on them and their funds), the settings, the per-key locks and the
/// metrics. Its methods are the ones several areas use: [`network`](Self::network) and
/// [`relayer`](Self::relayer) here, the relayer funds in [`crate::funds`], the leases in
/// [`crate::replica`].
pub(crate) struct Core {
    pub(crate) networks: HashMap<String, Network>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) proof_signer: Secp256k1Signer,
    pub(crate) relayers: Vec<Address>,
    next_relayer: AtomicUsize,
    pub(crate) settings: Settings,
    pub(crate) locks: KeyLocks,
    pub(crate) metrics: Metrics,
    pub(crate) leases: crate::replica::Leases,
    pub(crate) funds: Arc<crate::funds::Funds>,
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core")
            .field("networks", &self.networks.keys().collect::<Vec<_>>())
            .field("relayers", &self.relayers)
            .field("proof_signer", &self.proof_signer.address())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Facilitator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = &self.inner.core;
        f.debug_struct("Facilitator")
            .field("networks", &core.networks.keys().collect::<Vec<_>>())
            .field("relayers", &core.relayers)
            .field("proof_signer", &core.proof_signer.address())
            .finish_non_exhaustive()
    }
}

impl Facilitator {
    /// Assembles a facilitator. Each chain backend must hold the relayer keys (e.g.
    /// [`tollgate_chain::rpc::RpcChain`] connected with a wallet of them, or
    /// `tollgate_devnet::Devnet::add_signers`).
    pub fn new(
        settings: Settings,
        networks: Vec<(NetworkSpec, Arc<dyn Chain>)>,
        relayers: Vec<Address>,
        proof_key: B256,
        store: Arc<dyn Store>,
    ) -> Result<Self, BuildError> {
        if networks.is_empty() {
            return Err(BuildError::NoNetwork);
        }
        if relayers.is_empty() {
            return Err(BuildError::NoRelayer);
        }
        let proof_signer =
            Secp256k1Signer::from_bytes(&proof_key).map_err(|_| BuildError::InvalidProofKey)?;
        if relayers.contains(&proof_signer.address()) {
            return Err(BuildError::ProofKeyIsRelayer);
        }
        let metrics = Metrics::new(
            networks.iter().map(|(s, _)| s.name.clone()),
            crate::openapi::paths().iter().copied(),
        );
        let mut map = HashMap::new();
        for (spec, chain) in networks {
            if chain.chain_id() != spec.chain_id {
                return Err(BuildError::ChainIdMismatch {
                    network: spec.name,
                    configured: spec.chain_id,
                    actual: chain.chain_id(),
                });
            }
            let held = chain.signers();
            if let Some(r) = relayers.iter().find(|r| !held.contains(r)) {
                return Err(BuildError::RelayerNotHeld {
                    network: spec.name,
                    relayer: *r,
                });
            }
            let domain = token_domain(
                spec.token_name.clone(),
                spec.token_version.clone(),
                spec.chain_id,
                spec.token,
            );
            let name = spec.name.clone();
            let Ok(wire_name) = tollgate_protocol::Network::parse(name.clone()) else {
                return Err(BuildError::MalformedNetwork(name));
            };
            let batches = crate::batch::Batches::new(crate::batch::Target {
                chain: Arc::clone(&chain),
                router: spec.router,
                wait: tollgate_chain::WaitOptions {
                    confirmations: spec.confirmations,
                    timeout: settings.confirmation_timeout,
                },
            });
            let simulations = crate::simulate::Simulations::new(crate::simulate::Target {
                chain: Arc::clone(&chain),
                token: spec.token,
                router: spec.router,
            });
            let view = crate::view::View::new(
                Arc::clone(&chain),
                spec.token,
                settings.log_lookback_blocks,
                settings.token_view,
            );
            let network = Network {
                spec,
                name: wire_name,
                chain,
                domain,
                batches,
                simulations,
                view,
                clock: Mutex::new((0, Instant::now())),
                clock_reading: tokio::sync::Mutex::default(),
            };
            if map.insert(name.clone(), network).is_some() {
                return Err(BuildError::DuplicateNetwork(name));
            }
        }
        tollgate_chain::install_crypto_provider();
        let webhook_http = reqwest::Client::builder()
            .timeout(settings.webhook_timeout)
            .connect_timeout(settings.webhook_timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            // The SSRF guard again at connect time, on the addresses actually connected to.
            .dns_resolver(crate::webhooks::GuardedResolver {
                allow_private: settings.webhook_allow_private,
            })
            .user_agent(concat!("Tollgate-Webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|_| BuildError::Http)?;
        let leases = crate::replica::Leases::new(
            settings
                .replica_id
                .clone()
                .unwrap_or_else(crate::replica::replica_id),
            settings.lease_ttl,
        );
        let funds = Arc::new(crate::funds::Funds::default());
        let mut names: Vec<String> = map.keys().cloned().collect();
        names.sort();
        funds.register_gauges(&metrics, &names, &relayers);
        let core = Arc::new(Core {
            funds,
            networks: map,
            store,
            proof_signer,
            relayers,
            next_relayer: AtomicUsize::new(0),
            settings,
            locks: KeyLocks::default(),
            metrics,
            leases,
        });
        Ok(Self {
            inner: Arc::new(Services {
                settlements: Settlements::new(Arc::clone(&core)),
                x402: X402::new(Arc::clone(&core)),
                subscriptions: Subscriptions::new(Arc::clone(&core)),
                plans: Plans::new(Arc::clone(&core)),
                webhooks: Webhooks::new(Arc::clone(&core), webhook_http),
                analytics: Analytics::new(Arc::clone(&core)),
                core,
            }),
        })
    }

    /// Settlement with a proof: `/authorize`, the status URL, proof verification and the
    /// reconciliation of unfinished settlements.
    pub fn settlements(&self) -> &Settlements {
        &self.inner.settlements
    }

    /// The x402 facilitator API, V1 and V2: verify, settle, supported.
    pub fn x402(&self) -> &X402 {
        &self.inner.x402
    }

    /// Subscriptions: relayed subscribe and lifecycle actions, metered usage, and the keeper.
    pub fn subscriptions(&self) -> &Subscriptions {
        &self.inner.subscriptions
    }

    /// Plans and providers: publishing plans, provider registration and API keys.
    pub fn plans(&self) -> &Plans {
        &self.inner.plans
    }

    /// Webhooks: providers' endpoints, the delivery of their events, the event log.
    pub fn webhooks(&self) -> &Webhooks {
        &self.inner.webhooks
    }

    /// A provider's analytics.
    pub fn analytics(&self) -> &Analytics {
        &self.inner.analytics
    }

    /// The core the services share.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }

    /// The proof-signing address gates verify against.
    pub fn proof_signer(&self) -> Address {
        self.inner.core.proof_signer()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.core.store
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.core.settings
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.core.metrics
    }

    /// The configured networks' specs, sorted by name.
    pub fn networks(&self) -> Vec<NetworkSpec> {
        self.inner.core.networks()
    }

    /// The addresses that send settlement transactions (every replica's configuration lists
    /// them all; each replica sends from those it holds: [`Facilitator::held_relayers`]).
    pub fn relayers(&self) -> &[Address] {
        &self.inner.core.relayers
    }

    /// This replica's id: the holder name of its leases in the store.
    pub fn replica_id(&self) -> &str {
        self.inner.core.replica_id()
    }

    /// The relayer accounts this replica sends from now (those whose lease it holds), in
    /// configuration order.
    pub fn held_relayers(&self) -> Vec<Address> {
        self.inner.core.held_relayers()
    }

    /// Renews this replica's relayer leases and evens them out across the live replicas (see
    /// [`crate::replica`]); the accounts held afterwards.
    pub async fn hold_relayers(&self) -> Vec<Address> {
        self.inner.core.hold_relayers().await
    }

    /// Gives up every lease this replica holds, for good (at shutdown: the others take them over
    /// at once instead of after the TTL; this replica sends nothing more).
    pub async fn release_leases(&self) {
        self.inner.core.release_leases().await;
    }

    /// Runs the renewal keeper once ([`Subscriptions::run_keeper_once`]).
    pub async fn run_keeper_once(&self) -> crate::KeeperReport {
        self.inner.subscriptions.run_keeper_once().await
    }

    /// Spawns the renewal keeper ([`Subscriptions::spawn_keeper`]).
    pub fn spawn_keeper(&self) -> crate::KeeperHandle {
        self.inner.subscriptions.spawn_keeper()
    }

    /// Delivers the due webhooks until nothing is due ([`Webhooks::deliver_once`]).
    pub async fn deliver_webhooks_once(&self) -> crate::DeliveryReport {
        self.inner.webhooks.deliver_once().await
    }

    /// Spawns the webhook delivery worker ([`Webhooks::spawn`]).
    pub fn spawn_webhooks(&self) -> crate::WebhookHandle {
        self.inner.webhooks.spawn()
    }

    /// Seals the webhook secrets still stored in the clear or under a previous key
    /// ([`Webhooks::seal_secrets`]).
    pub async fn seal_webhook_secrets(&self) -> Result<usize, crate::webhooks::SecretsError> {
        self.inner.webhooks.seal_secrets().await
    }

    /// Issues an API key for `provider` ([`Plans::issue_api_key`]).
    pub async fn issue_api_key(
        &self,
        provider: Address,
        label: &str,
    ) -> crate::error::Result<String> {
        self.inner.plans.issue_api_key(provider, label).await
    }

    /// Stores an API key issued earlier ([`Plans::restore_api_key`]).
    pub async fn restore_api_key(
        &self,
        api_key: &str,
        provider: Address,
        label: &str,
    ) -> crate::error::Result<()> {
        self.inner
            .plans
            .restore_api_key(api_key, provider, label)
            .await
    }
}

impl Core {
    /// The proof-signing address.
    pub(crate) fn proof_signer(&self) -> Address {
        self.proof_signer.address()
    }

    /// The store.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The settings.
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The configured networks' specs, sorted by name.
    pub(crate) fn networks(&self) -> Vec<NetworkSpec> {
        let mut v: Vec<_> = self.networks.values().map(|n| n.spec.clone()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The network named `name` (an x402 V1 alias or its canonical name).
    pub(crate) fn network(&self, name: &str) -> Option<&Network> {
        let canonical = tollgate_protocol::network::canonical_name(name).unwrap_or(name);
        self.networks
            .get(canonical)
            .or_else(|| self.networks.get(name))
    }

    /// The next relayer this replica holds, round robin; when it holds none, it tries to take
    /// their leases first.
    pub(crate) async fn relayer(&self) -> Result<Address, crate::replica::NoRelayer> {
        let mut held = self.held_relayers();
        if held.is_empty() {
            held = self.hold_relayers().await;
        }
        if held.is_empty() {
            return Err(crate::replica::NoRelayer);
        }
        let i = self.next_relayer.fetch_add(1, Ordering::Relaxed);
        Ok(held[i % held.len()])
    }

    /// After a simulation refused an authorization as already used: waits (within the
    /// confirmation timeout) until the latest block shows it used. A simulation runs on the
    /// node's pending state, which runs ahead of its blocks and logs: the transaction that used
    /// it (another replica's, one of a replica that died, a front-runner's) may still be on its
    /// way into a block, and its settlement event is found only once it is there. Whether it is
    /// used at the latest block by then.
    pub(crate) async fn used_at_latest(
        &self,
        net: &Network,
        from: Address,
        nonce: B256,
    ) -> tollgate_chain::Result<bool> {
        let deadline = Instant::now() + self.settings.confirmation_timeout;
        loop {
            let used = tollgate_chain::contracts::read(
                &*net.chain,
                net.spec.token,
                &tollgate_chain::contracts::Token::authorizationStateCall {
                    authorizer: from,
                    nonce,
                },
            )
            .await?;
            if used || Instant::now() >= deadline {
                return Ok(used);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Per-key async locks, so one facilitator handles one authorization at a time while different
/// authorizations proceed in parallel. Entries are dropped when no task holds them.
#[derive(Default)]
pub(crate) struct KeyLocks {
    map: Mutex<HashMap<B256, Arc<tokio::sync::Mutex<()>>>>,
}

impl KeyLocks {
    pub(crate) async fn lock(&self, key: B256) -> KeyGuard<'_> {
        let m = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default()
            .clone();
        let guard = m.clone().lock_owned().await;
        KeyGuard {
            locks: self,
            key,
            _guard: Some(guard),
            mutex: m,
        }
    }
}

pub(crate) struct KeyGuard<'a> {
    locks: &'a KeyLocks,
    key: B256,
    _guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    mutex: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        drop(self._guard.take());
        let mut map = self.locks.map.lock().unwrap_or_else(|e| e.into_inner());
        // Two references: the map's and ours. Nobody else waits: remove the entry.
        if Arc::strong_count(&self.mutex) == 2 {
            map.remove(&self.key);
        }
    }
}
