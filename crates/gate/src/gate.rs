//! [`Gate`]: the provider's configuration and the spec's calls on it.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy::{
    primitives::{Address, B256, keccak256},
    sol_types::SolEvent,
};
use tollgate_chain::{Chain, contracts::PaymentRouter};
use tollgate_protocol::{
    AllowanceUsage, Amount, DeductRequest, PaymentOption, PaymentProof, PaymentRequired, PlanTerms,
    ServiceExtension, network,
    x402::{
        self, Eip712Extra, ErrorReason, PaymentPayload, PaymentRequirements, SettleResponse,
        SettlementResponseHeader, VerifyRequest,
    },
};

use crate::{
    BuildError, DeductError, FacilitatorError, InvalidProof, StoreError, SubscriptionError,
    facilitator,
    memo::{self, MemoCheck, MemoSecret, MemoTerms},
    store::{self, MemoStore},
    subscription::{
        self, Checker, DEFAULT_SUBSCRIPTION_CACHE_TTL, DEFAULT_SUBSCRIPTION_GRACE,
        DEFAULT_SUBSCRIPTION_POLL_INTERVAL, VerifiedSubscription,
    },
};

/// Default memo lifetime: how long the terms of a 402 can be paid.
pub const DEFAULT_MEMO_TTL: Duration = Duration::from_secs(300);
/// Default bound on every request to the facilitator.
pub const DEFAULT_FACILITATOR_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the facilitator's published proof signers are trusted without asking again.
pub const DEFAULT_SIGNERS_TTL: Duration = Duration::from_secs(600);
/// At most one refresh of the signers per this long (on an unknown signer, or while the
/// facilitator is unreachable).
pub const DEFAULT_SIGNERS_MIN_REFRESH: Duration = Duration::from_secs(30);
/// How often expired entries are pruned from the memo store.
const PRUNE_EVERY_SECS: u64 = 60;

/// One way to pay for a gated resource: the spec's pricing entries
/// (`{ type: "one-time", amount }`, `{ type: "subscription", plan }`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pricing {
    /// Pay per request: an x402 `exact` payment of `amount` (token's smallest unit).
    OneTime {
        /// The price per request.
        amount: Amount,
    },
    /// A subscription to a plan. Its terms (in the 402) come from [`GateBuilder::plan`]; a request
    /// with `X-Service-Sub` is served when the id is an ACTIVE, paid subscription to this plan,
    /// checked on the chain given with [`GateBuilder::subscriptions`] (required).
    Subscription {
        /// The plan's id.
        plan: B256,
    },
}

impl Pricing {
    /// A one-time price in the token's smallest unit (`500_000` is 0.50 of a 6-decimal token).
    pub fn one_time(amount: impl Into<Amount>) -> Self {
        Self::OneTime {
            amount: amount.into(),
        }
    }

    /// A subscription to `plan`.
    pub fn subscription(plan: B256) -> Self {
        Self::Subscription { plan }
    }
}

/// What a 402 offers ([`Gate::build_payment_required`]).
#[derive(Clone, Copy, Debug)]
pub struct Offer<'a> {
    /// The request method the terms are for (`GET`).
    pub method: &'a str,
    /// The absolute URL of the resource (`https://api.example.com/v1/quote`); its path is what
    /// memos bind.
    pub resource_url: &'a str,
    /// The ways to pay.
    pub pricing: &'a [Pricing],
    /// Human-readable description (may be empty).
    pub description: &'a str,
    /// MIME type of the resource (may be empty).
    pub mime_type: &'a str,
}

/// What a proof must pay for ([`Gate::verify_payment_proof`]).
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    /// The request's method.
    pub method: &'a str,
    /// The request's path (`/v1/quote`, no query), as in the 402 whose memo the proof carries.
    pub resource: &'a str,
    /// The one-time price.
    pub price: Amount,
}

/// A proof that paid for this request; its memo is now spent.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedPayment {
    /// Who paid.
    pub payer: Address,
    /// Gross amount paid.
    pub amount: Amount,
    /// The settlement transaction.
    pub tx_hash: B256,
    /// The network.
    pub network: String,
    /// The memo spent.
    pub memo: B256,
}

impl VerifiedPayment {
    /// The `X-PAYMENT-RESPONSE` header for the paid response.
    pub fn settlement_header(&self) -> SettlementResponseHeader {
        SettlementResponseHeader {
            success: true,
            transaction: self.tx_hash.to_string(),
            network: self.network.clone(),
            payer: Some(self.payer),
        }
    }
}

/// Why an x402 V1 payment was not settled ([`Gate::settle_x402`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum X402Failure {
    /// Refused, with the x402 reason code (the 402's `error`).
    #[error("x402 payment refused: {0}")]
    Refused(ErrorReason),
    /// The facilitator could not be asked (a 503).
    #[error("the facilitator is unavailable")]
    FacilitatorUnavailable(#[source] FacilitatorError),
    /// The memo store could not take the once-only lock (a 503).
    #[error("the memo store is unavailable")]
    StoreUnavailable(#[source] StoreError),
    /// Sent to be settled, outcome not known yet (the chain is slow, or the facilitator's answer
    /// was lost): a 503. The payment is kept for this request: sending the same `X-PAYMENT`
    /// again picks up the outcome and is served once, never charged again.
    #[error("the payment is being settled (transaction {})", transaction.map_or_else(|| "unknown".to_owned(), |t| t.to_string()))]
    Pending {
        /// The settlement transaction, when the facilitator named one.
        transaction: Option<B256>,
    },
}

/// A provider's payment gate: network, token, payee, facilitator, memo secret and the once-only
/// memo store. Cheap to clone (one `Arc`). Built with [`Gate::builder`].
///
/// The spec's provider calls are its methods ([`Gate::verify_payment_proof`],
/// [`Gate::build_payment_required`], [`Gate::payment_gate`]) and the free function
/// [`crate::parse_payment_proof`].
#[derive(Clone)]
pub struct Gate {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    network: String,
    token: Address,
    token_name: String,
    token_version: String,
    pay_to: Address,
    facilitator_url: String,
    public_url: Option<String>,
    secret: MemoSecret,
    memo_ttl: Duration,
    plans: Vec<PlanTerms>,
    facilitator: tollgate_client::FacilitatorClient,
    store: Arc<dyn MemoStore>,
    chain: Option<Arc<dyn Chain>>,
    subscriptions: Option<Checker>,
    api_key: Option<String>,
    last_prune: AtomicU64,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        f.debug_struct("Gate")
            .field("network", &i.network)
            .field("token", &i.token)
            .field("pay_to", &i.pay_to)
            .field("facilitator", &i.facilitator_url)
            .field("memo_ttl", &i.memo_ttl)
            .field("store", &i.store)
            .field("on_chain", &i.chain.is_some())
            .field("subscriptions", &i.subscriptions)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Gate`]. Required: [`network`](Self::network), [`token`](Self::token),
/// [`pay_to`](Self::pay_to), [`facilitator`](Self::facilitator).
pub struct GateBuilder {
    network: Option<String>,
    token: Option<(Address, String, String)>,
    pay_to: Option<Address>,
    facilitator: Option<String>,
    public_url: Option<String>,
    secret: Option<[u8; 32]>,
    memo_ttl: Duration,
    facilitator_timeout: Duration,
    signers_ttl: Duration,
    signers_min_refresh: Duration,
    store: Option<Arc<dyn MemoStore>>,
    store_url: Option<String>,
    chain: Option<Arc<dyn Chain>>,
    plans: Vec<PlanTerms>,
    subscriptions: Option<(Arc<dyn Chain>, Address)>,
    subscription_cache_ttl: Duration,
    subscription_poll_interval: Duration,
    subscription_grace: Duration,
    api_key: Option<String>,
}

impl fmt::Debug for GateBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateBuilder")
            .field("network", &self.network)
            .field("token", &self.token)
            .field("pay_to", &self.pay_to)
            .field("facilitator", &self.facilitator)
            .field("memo_secret", &self.secret.map(|_| "<redacted>"))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// A builder with the defaults: memo TTL [`DEFAULT_MEMO_TTL`], facilitator timeout
    /// [`DEFAULT_FACILITATOR_TIMEOUT`], a random memo secret, and an in-memory SQLite memo store.
    pub fn builder() -> GateBuilder {
        GateBuilder {
            network: None,
            token: None,
            pay_to: None,
            facilitator: None,
            public_url: None,
            secret: None,
            memo_ttl: DEFAULT_MEMO_TTL,
            facilitator_timeout: DEFAULT_FACILITATOR_TIMEOUT,
            signers_ttl: DEFAULT_SIGNERS_TTL,
            signers_min_refresh: DEFAULT_SIGNERS_MIN_REFRESH,
            store: None,
            store_url: None,
            chain: None,
            plans: Vec::new(),
            subscriptions: None,
            subscription_cache_ttl: DEFAULT_SUBSCRIPTION_CACHE_TTL,
            subscription_poll_interval: DEFAULT_SUBSCRIPTION_POLL_INTERVAL,
            subscription_grace: DEFAULT_SUBSCRIPTION_GRACE,
            api_key: None,
        }
    }
}

impl GateBuilder {
    /// The network payments settle on: an x402 V1 name (`base`, `base-sepolia`, …; `<name>-mainnet`
    /// is accepted for mainnets) or a custom name the facilitator serves (x402 V1 clients cannot
    /// pay a custom name).
    pub fn network(mut self, name: impl Into<String>) -> Self {
        self.network = Some(name.into());
        self
    }

    /// The token contract and its EIP-712 domain name and version (USDC: `"USD Coin"` / `"2"` on
    /// Base, `"USDC"` / `"2"` on Base Sepolia), which x402 clients sign with.
    pub fn token(
        mut self,
        address: Address,
        eip712_name: impl Into<String>,
        eip712_version: impl Into<String>,
    ) -> Self {
        self.token = Some((address, eip712_name.into(), eip712_version.into()));
        self
    }

    /// Who gets paid.
    pub fn pay_to(mut self, address: Address) -> Self {
        self.pay_to = Some(address);
        self
    }

    /// The facilitator's base URL (`https://facilitator.example.com`).
    pub fn facilitator(mut self, base_url: impl Into<String>) -> Self {
        self.facilitator = Some(base_url.into());
        self
    }

    /// This API's public base URL (`https://api.example.com`), for the absolute `resource` URLs
    /// of 402 bodies. Without it, the layer uses the request's `Host` header over `http`
    /// (or `X-Forwarded-Proto`).
    pub fn public_url(mut self, base_url: impl Into<String>) -> Self {
        self.public_url = Some(base_url.into());
        self
    }

    /// The 32-byte secret memos are MACed with. Default: random per process, which is right for a
    /// single process; **replicas behind one load balancer must share one secret** (a 402 from
    /// one replica is paid at another), and so must restarts that should honour 402s issued
    /// before them. Keep it secret: whoever holds it can mint memos.
    pub fn memo_secret(mut self, secret: [u8; 32]) -> Self {
        self.secret = Some(secret);
        self
    }

    /// How long the terms of a 402 can be paid (default 300 s); also the 402's
    /// `maxTimeoutSeconds`. A proof for an expired memo is refused, so leave time for the client
    /// to settle and retry.
    pub fn memo_ttl(mut self, ttl: Duration) -> Self {
        self.memo_ttl = ttl;
        self
    }

    /// The bound on each request to the facilitator (default 10 s). x402 `/settle` waits for the
    /// transfer's confirmation: on a slow chain, raise it.
    pub fn facilitator_timeout(mut self, timeout: Duration) -> Self {
        self.facilitator_timeout = timeout;
        self
    }

    /// How long the facilitator's published proof signers are trusted (default 600 s), and at
    /// most how often they are fetched again (default 30 s; on an unknown signer, or while the
    /// facilitator is unreachable, in which case the last known signers stay in use).
    pub fn signers_cache(mut self, ttl: Duration, min_refresh: Duration) -> Self {
        self.signers_ttl = ttl;
        self.signers_min_refresh = min_refresh;
        self
    }

    /// The once-only memo store (default: `sqlite::memory:`, one process only).
    pub fn memo_store(mut self, store: Arc<dyn MemoStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The memo store by URL ([`crate::store::open`]): `sqlite://gate.db`, `sqlite::memory:`,
    /// `postgres://…` (shared by replicas).
    pub fn memo_store_url(mut self, url: impl Into<String>) -> Self {
        self.store_url = Some(url.into());
        self
    }

    /// Also checks each proof on-chain: the transaction's receipt must carry the router's
    /// `PaymentSettled(memo, payer, payTo, amount, fee)`.
    pub fn on_chain(mut self, chain: Arc<dyn Chain>) -> Self {
        self.chain = Some(chain);
        self
    }

    /// The terms of a plan that [`Pricing::Subscription`] entries refer to (until plans are
    /// fetched from the facilitator).
    pub fn plan(mut self, terms: PlanTerms) -> Self {
        self.plans.push(terms);
        self
    }

    /// Checks `X-Service-Sub` subscriptions on `chain`, against the `Subscriptions` contract at
    /// `contract`. Required when any route is priced with [`Pricing::Subscription`]: without it,
    /// a request carrying `X-Service-Sub` gets a 500 (`SubscriptionsNotConfigured`) and
    /// [`Gate::payment_gate`] logs an error when it is built. Building the gate then starts a
    /// background watcher of the contract's events (on the current tokio runtime), stopped when
    /// the last clone of the gate is dropped.
    pub fn subscriptions(mut self, chain: Arc<dyn Chain>, contract: Address) -> Self {
        self.subscriptions = Some((chain, contract));
        self
    }

    /// How long a subscription's on-chain status is reused without reading the chain again
    /// (default [`DEFAULT_SUBSCRIPTION_CACHE_TTL`], 5 s; zero disables the cache). Ids whose
    /// status changes with an event (pause, cancel, resume, renewal, failed renewal) are evicted
    /// by the watcher sooner, within [`subscription_poll_interval`](Self::subscription_poll_interval):
    /// the TTL bounds staleness only when the watcher cannot reach the chain.
    pub fn subscription_cache_ttl(mut self, ttl: Duration) -> Self {
        self.subscription_cache_ttl = ttl;
        self
    }

    /// How often the watcher polls the subscriptions contract's events (default
    /// [`DEFAULT_SUBSCRIPTION_POLL_INTERVAL`], 1 s): the staleness bound after an event.
    pub fn subscription_poll_interval(mut self, interval: Duration) -> Self {
        self.subscription_poll_interval = interval;
        self
    }

    /// How long past its `paidThrough` an ACTIVE subscription that was not renewed yet is still
    /// served (default [`DEFAULT_SUBSCRIPTION_GRACE`]: none; the chain's clock decides). With a
    /// renewal keeper, set it to cover the keeper's lag so subscribers are not refused between
    /// the end of a cycle and its collection. Whole seconds.
    pub fn subscription_grace(mut self, grace: Duration) -> Self {
        self.subscription_grace = grace;
        self
    }

    /// Builds the gate: checks the settings, builds the facilitator HTTP client and opens the memo
    /// store. Does not contact the facilitator (signers are fetched on the first proof).
    /// The provider's facilitator API key (from `tollgate provider register`), which
    /// [`Gate::deduct_allowance`] and metered routes ([`crate::PaymentGateLayer::metered`])
    /// present. Never logged.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Builds the gate; checks every setting.
    pub async fn build(self) -> Result<Gate, BuildError> {
        let network = self.network.ok_or(BuildError::Missing("network"))?;
        if network.is_empty() {
            return Err(BuildError::Invalid {
                setting: "network",
                problem: "empty".into(),
            });
        }
        let (token, token_name, token_version) = self.token.ok_or(BuildError::Missing("token"))?;
        let pay_to = self.pay_to.ok_or(BuildError::Missing("pay_to"))?;
        if pay_to == Address::ZERO {
            return Err(BuildError::Invalid {
                setting: "pay_to",
                problem: "the zero address".into(),
            });
        }
        let facilitator_url = self.facilitator.ok_or(BuildError::Missing("facilitator"))?;
        let facilitator_url = check_base_url("facilitator", &facilitator_url)?;
        let public_url = self
            .public_url
            .map(|u| check_base_url("public_url", &u))
            .transpose()?;
        if self.memo_ttl.as_secs() == 0 {
            return Err(BuildError::Invalid {
                setting: "memo_ttl",
                problem: "must be at least one second".into(),
            });
        }
        if self.facilitator_timeout.is_zero() {
            return Err(BuildError::Invalid {
                setting: "facilitator_timeout",
                problem: "must be positive".into(),
            });
        }
        let api_key = self.api_key.filter(|k| !k.is_empty());
        let facilitator = facilitator::client(
            &facilitator_url,
            api_key.as_deref(),
            self.facilitator_timeout,
            self.signers_ttl,
            self.signers_min_refresh,
        )?;
        let store = match (self.store, self.store_url) {
            (Some(s), _) => s,
            (None, Some(url)) => store::open(&url).await?,
            (None, None) => store::open("sqlite::memory:").await?,
        };
        let subscriptions = match self.subscriptions {
            None => None,
            Some((chain, contract)) => {
                if self.subscription_poll_interval.is_zero() {
                    return Err(BuildError::Invalid {
                        setting: "subscription_poll_interval",
                        problem: "must be positive".into(),
                    });
                }
                if contract == Address::ZERO {
                    return Err(BuildError::Invalid {
                        setting: "subscriptions",
                        problem: "the zero address".into(),
                    });
                }
                let rt =
                    tokio::runtime::Handle::try_current().map_err(|_| BuildError::Invalid {
                        setting: "subscriptions",
                        problem:
                            "the gate must be built on a tokio runtime (it runs a watcher task)"
                                .into(),
                    })?;
                let settings = subscription::Settings {
                    contract,
                    cache_ttl: self.subscription_cache_ttl,
                    poll_interval: self.subscription_poll_interval,
                    grace: self.subscription_grace,
                };
                Some(Checker::start(chain, settings, &rt))
            }
        };
        let secret = self.secret.unwrap_or_else(|| B256::random().0);
        Ok(Gate {
            inner: Arc::new(Inner {
                network,
                token,
                token_name,
                token_version,
                pay_to,
                facilitator,
                facilitator_url,
                public_url,
                secret: MemoSecret(secret),
                memo_ttl: self.memo_ttl,
                plans: self.plans,
                store,
                chain: self.chain,
                subscriptions,
                api_key,
                last_prune: AtomicU64::new(0),
            }),
        })
    }
}

fn check_base_url(setting: &'static str, url: &str) -> Result<String, BuildError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| BuildError::Invalid {
            setting,
            problem: e.to_string(),
        })?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(BuildError::Invalid {
            setting,
            problem: format!("{url:?} is not an absolute http(s) URL"),
        });
    }
    Ok(url.trim_end_matches('/').to_owned())
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The path of an absolute URL (or of a path), without query or fragment.
pub(crate) fn path_of(url: &str) -> &str {
    let rest = match url.find("://") {
        Some(i) => {
            let after = &url[i + 3..];
            match after.find('/') {
                Some(j) => &after[j..],
                None => "/",
            }
        }
        None => url,
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    if end == 0 { "/" } else { &rest[..end] }
}

impl Gate {
    /// The network name.
    pub fn network(&self) -> &str {
        &self.inner.network
    }

    /// The token contract.
    pub fn token(&self) -> Address {
        self.inner.token
    }

    /// Who gets paid.
    pub fn pay_to(&self) -> Address {
        self.inner.pay_to
    }

    /// The facilitator's base URL.
    pub fn facilitator_url(&self) -> &str {
        &self.inner.facilitator_url
    }

    /// The memo TTL.
    pub fn memo_ttl(&self) -> Duration {
        self.inner.memo_ttl
    }

    /// Whether `id` is an ACTIVE subscription to one of `accepted_plans`, paid through now (the
    /// chain's clock) within the grace ([`GateBuilder::subscription_grace`]). Reads the chain at
    /// most once per id per [`GateBuilder::subscription_cache_ttl`]; see
    /// [`GateBuilder::subscriptions`] for the event-driven eviction.
    pub async fn verify_subscription(
        &self,
        id: B256,
        accepted_plans: &[B256],
    ) -> Result<VerifiedSubscription, SubscriptionError> {
        let checker = self
            .inner
            .subscriptions
            .as_ref()
            .ok_or(SubscriptionError::NotConfigured)?;
        if accepted_plans.is_empty() {
            return Err(SubscriptionError::NotOffered);
        }
        checker.check(id, accepted_plans).await
    }

    /// The spec's `deductAllowance`: deducts `amount` (the token's smallest unit) of metered
    /// usage from the subscription's overage allowance for its current cycle, through the
    /// facilitator with the provider's API key ([`GateBuilder::api_key`]). Exact under
    /// concurrency: a deduction that would cross the cap fails with
    /// [`DeductError::AllowanceExhausted`] and deducts nothing; answer that request with a 402
    /// (the layer's [`crate::PaymentGateLayer::metered`] does this for you). The facilitator
    /// charges the usage on-chain in batches and at the end of each cycle.
    ///
    /// ```no_run
    /// # async fn demo(gate: tollgate_gate::Gate, id: alloy::primitives::B256) {
    /// match gate.deduct_allowance(id, 100_000u64).await {
    ///     Ok(usage) => println!("{} left this cycle", usage.remaining),
    ///     Err(e) => println!("402 {}", e.code()),
    /// }
    /// # }
    /// ```
    pub async fn deduct_allowance(
        &self,
        subscription_id: B256,
        amount: impl Into<Amount>,
    ) -> Result<AllowanceUsage, DeductError> {
        self.deduct(subscription_id, amount.into(), None).await
    }

    /// [`deduct_allowance`](Self::deduct_allowance) that counts once per `idempotency_key` (1 to
    /// 200 bytes, unique per subscription): a retry after a timeout cannot deduct twice.
    pub async fn deduct_allowance_once(
        &self,
        subscription_id: B256,
        amount: impl Into<Amount>,
        idempotency_key: &str,
    ) -> Result<AllowanceUsage, DeductError> {
        self.deduct(
            subscription_id,
            amount.into(),
            Some(idempotency_key.to_owned()),
        )
        .await
    }

    async fn deduct(
        &self,
        id: B256,
        amount: Amount,
        idempotency_key: Option<String>,
    ) -> Result<AllowanceUsage, DeductError> {
        if self.inner.api_key.is_none() {
            return Err(DeductError::NotConfigured);
        }
        let req = DeductRequest {
            network: Some(self.inner.network.clone()),
            amount,
            idempotency_key,
        };
        self.inner
            .facilitator
            .deduct(id, &req)
            .await
            .map_err(facilitator::deduct_error)
    }

    /// How many times this gate has read a subscription from the chain (cache misses).
    pub fn subscription_chain_reads(&self) -> u64 {
        self.inner.subscriptions.as_ref().map_or(0, Checker::reads)
    }

    /// Whether [`GateBuilder::subscriptions`] was given.
    pub(crate) fn checks_subscriptions(&self) -> bool {
        self.inner.subscriptions.is_some()
    }

    pub(crate) fn public_url(&self) -> Option<&str> {
        self.inner.public_url.as_deref()
    }

    /// The network as it goes on the wire: the canonical x402 name when it is one.
    fn wire_network(&self) -> &str {
        network::canonical_name(&self.inner.network).unwrap_or(&self.inner.network)
    }

    fn terms<'a>(&'a self, method: &'a str, path: &'a str, price: Amount) -> MemoTerms<'a> {
        MemoTerms {
            method,
            path,
            price,
            pay_to: self.inner.pay_to,
            network: &self.inner.network,
            token: self.inner.token,
        }
    }

    /// The spec's `verifyPaymentProof`: checks that `proof` pays for the request described by
    /// `expected`, then spends its memo (at most once, atomically, across every gate sharing the
    /// memo store).
    ///
    /// Checks, in order: the proof's expiry; network, token and payee; amount ≥ price; the memo
    /// (issued by this gate for this method, resource, price, payee and network; not expired);
    /// the facilitator's EIP-712 signature, against the signers it publishes at
    /// `/.well-known/tollgate` (cached); in on-chain mode, the settlement event; and finally that
    /// the memo was not used before. Nothing is spent unless every check passed.
    ///
    /// ```no_run
    /// use tollgate_gate::{Expected, Gate, parse_payment_proof};
    ///
    /// # async fn handle(gate: &Gate, x_payment: &str) -> Result<(), Box<dyn std::error::Error>> {
    /// let proof = parse_payment_proof(x_payment)?;
    /// let expected = Expected { method: "GET", resource: "/v1/quote", price: 500_000u64.into() };
    /// match gate.verify_payment_proof(&proof, &expected).await {
    ///     Ok(paid) => println!("paid by {} in {}", paid.payer, paid.tx_hash),
    ///     Err(reason) => println!("402 again: {}", reason.code()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn verify_payment_proof(
        &self,
        proof: &PaymentProof,
        expected: &Expected<'_>,
    ) -> Result<VerifiedPayment, InvalidProof> {
        let i = &self.inner;
        let now = unix_now();
        if proof.expiry <= now {
            return Err(InvalidProof::Expired {
                expiry: proof.expiry,
            });
        }
        if !network::same_network(&proof.network, &i.network) {
            return Err(InvalidProof::WrongNetwork {
                expected: i.network.clone(),
                found: proof.network.clone(),
            });
        }
        if proof.token != i.token {
            return Err(InvalidProof::WrongToken {
                expected: i.token,
                found: proof.token,
            });
        }
        if proof.pay_to != i.pay_to {
            return Err(InvalidProof::WrongPayee {
                expected: i.pay_to,
                found: proof.pay_to,
            });
        }
        if proof.amount < expected.price {
            return Err(InvalidProof::Underpaid {
                price: expected.price,
                paid: proof.amount,
            });
        }
        let terms = self.terms(expected.method, expected.resource, expected.price);
        let memo_expiry = match memo::check(&i.secret, &terms, &proof.memo, now) {
            Ok(e) => e,
            Err(MemoCheck::Forged) => return Err(InvalidProof::MemoForgedOrForeign),
            Err(MemoCheck::Expired(expiry)) => return Err(InvalidProof::MemoExpired { expiry }),
        };
        let signer = match tollgate_chain::proof::recover(proof) {
            Ok(s) if s == proof.signer => s,
            _ => return Err(InvalidProof::BadSignature),
        };
        let (known, info) = i
            .facilitator
            .is_signer(signer)
            .await
            .map_err(InvalidProof::FacilitatorUnavailable)?;
        if !known {
            return Err(InvalidProof::UnknownSigner(signer));
        }
        let published = info.network(&i.network);
        if let Some(n) = published
            && n.chain_id != proof.chain_id
        {
            return Err(InvalidProof::WrongNetwork {
                expected: format!("{} (chain {})", i.network, n.chain_id),
                found: format!("{} (chain {})", proof.network, proof.chain_id),
            });
        }
        if let Some(chain) = &i.chain {
            check_on_chain(&**chain, proof, published.map(|n| n.router)).await?;
        }
        self.maybe_prune(now);
        match i.store.claim(proof.memo, memo_expiry).await {
            Ok(true) => Ok(VerifiedPayment {
                payer: proof.payer,
                amount: proof.amount,
                tx_hash: proof.tx_hash,
                network: proof.network.clone(),
                memo: proof.memo,
            }),
            Ok(false) => Err(InvalidProof::Replayed),
            Err(e) => Err(InvalidProof::StoreUnavailable(e)),
        }
    }

    /// The spec's `buildPaymentRequired`: the superset 402 body for `offer`, with a fresh memo per
    /// entry and `error` as the top-level reason.
    ///
    /// ```no_run
    /// use tollgate_gate::{Gate, Offer, Pricing};
    ///
    /// # fn body(gate: &Gate) {
    /// let pricing = [Pricing::one_time(500_000u64)];
    /// let offer = Offer {
    ///     method: "GET",
    ///     resource_url: "https://api.example.com/v1/quote",
    ///     pricing: &pricing,
    ///     description: "A price quote",
    ///     mime_type: "application/json",
    /// };
    /// let required = gate.build_payment_required(&offer, "payment required");
    /// assert_eq!(required.accepts[0].requirements.scheme, "exact");
    /// # }
    /// ```
    ///
    /// - a one-time price is an `exact` entry, first (x402 clients fall back to `accepts[0]`),
    ///   with the spec's fields, the x402 V1 mirror fields and
    ///   `service: {subscriptionScheme: false, facilitator}`;
    /// - with a subscription offered too, the first plan rides on that entry
    ///   (`service.planId`, `subscriptionScheme: true`, `plan` terms): a generic client pays
    ///   one-time, a Tollgate agent subscribes;
    /// - a subscription-only offer is one `scheme: "subscription"` entry per plan (generic x402
    ///   clients cannot pay it). Further plans beside a one-time price are left out when the
    ///   network is an x402 V1 name (x402 clients refuse a 402 with any non-`exact` entry).
    ///
    /// A plan without terms from [`GateBuilder::plan`] is advertised by id only.
    pub fn build_payment_required(&self, offer: &Offer<'_>, error: &str) -> PaymentRequired {
        let i = &self.inner;
        let path = path_of(offer.resource_url);
        let expiry = unix_now().saturating_add(i.memo_ttl.as_secs());
        let one_time = offer.pricing.iter().find_map(|p| match p {
            Pricing::OneTime { amount } => Some(*amount),
            Pricing::Subscription { .. } => None,
        });
        let plans: Vec<B256> = offer
            .pricing
            .iter()
            .filter_map(|p| match p {
                Pricing::Subscription { plan } => Some(*plan),
                Pricing::OneTime { .. } => None,
            })
            .collect();
        let terms_of = |plan: B256| i.plans.iter().find(|t| t.plan_id == plan).cloned();
        let option = |scheme: &str, amount: Amount, service: ServiceExtension, plan| {
            let memo = memo::issue(&i.secret, &self.terms(offer.method, path, amount), expiry);
            PaymentOption {
                requirements: self.requirements(scheme, amount, offer),
                token: i.token,
                amount,
                memo,
                service: Some(service),
                plan,
            }
        };
        let service = |plan_id: Option<B256>| ServiceExtension {
            plan_id,
            subscription_scheme: plan_id.is_some(),
            facilitator: i.facilitator_url.clone(),
        };
        let mut accepts = Vec::new();
        let rest = match one_time {
            Some(amount) => {
                let first = plans.first().copied();
                accepts.push(option(
                    x402::SCHEME_EXACT,
                    amount,
                    service(first),
                    first.and_then(terms_of),
                ));
                if network::is_x402_v1_name(&i.network) {
                    &[][..]
                } else {
                    plans.get(1..).unwrap_or_default()
                }
            }
            None => &plans[..],
        };
        for plan in rest {
            let terms = terms_of(*plan);
            let amount = terms.as_ref().map_or(Amount::ZERO, |t| t.amount);
            accepts.push(option("subscription", amount, service(Some(*plan)), terms));
        }
        PaymentRequired::new(accepts, error)
    }

    /// This gate's x402 V1 requirements for a resource.
    fn requirements(&self, scheme: &str, amount: Amount, offer: &Offer<'_>) -> PaymentRequirements {
        let i = &self.inner;
        PaymentRequirements {
            scheme: scheme.to_owned(),
            network: self.wire_network().to_owned(),
            max_amount_required: amount,
            resource: offer.resource_url.to_owned(),
            description: offer.description.to_owned(),
            mime_type: offer.mime_type.to_owned(),
            pay_to: i.pay_to,
            max_timeout_seconds: i.memo_ttl.as_secs(),
            asset: i.token,
            output_schema: None,
            extra: Some(
                Eip712Extra {
                    name: i.token_name.clone(),
                    version: i.token_version.clone(),
                }
                .to_value(),
            ),
        }
    }

    /// Settles an x402 V1 `exact` payment for `offer`'s one-time `price` before the resource is
    /// served: checks it against this gate's own requirements for this resource, takes the
    /// once-only lock on (network, token, payer, nonce) in the memo store, then asks the
    /// facilitator to `/verify` and `/settle` it, naming this gate as the settler (an
    /// `Idempotency-Key` derived from the memo secret, the same on every replica).
    ///
    /// The lock is kept once settled (a replay is refused with `duplicate_settlement`) and
    /// released when the payment was refused or nothing was sent, so that the client may retry.
    /// When the settlement was sent but its outcome is not known (the facilitator answered
    /// "pending", or its answer was lost), the lock is kept and the payment marked pending: the
    /// client's retry with the same `X-PAYMENT` (one of them, if several race) picks up the
    /// outcome from the facilitator and is served; it is never asked to pay again.
    pub async fn settle_x402(
        &self,
        payload: &PaymentPayload,
        offer: &Offer<'_>,
        price: Amount,
    ) -> Result<SettleResponse, X402Failure> {
        let i = &self.inner;
        let requirements = self.requirements(x402::SCHEME_EXACT, price, offer);
        let now = unix_now();
        x402::check_exact_evm(payload, &requirements, now).map_err(X402Failure::Refused)?;
        let auth = &payload.payload.authorization;
        let key = x402_lock_key(self.wire_network(), i.token, auth.from, auth.nonce);
        let pending = pending_key(key);
        let until = u64::try_from(auth.valid_before.get()).unwrap_or(u64::MAX);
        self.maybe_prune(now);
        let first = i
            .store
            .claim(key, until)
            .await
            .map_err(X402Failure::StoreUnavailable)?;
        // Not the first: a replay (refused), or a retry of a payment left pending (taken up by
        // exactly one request).
        if !first
            && !i
                .store
                .take(pending)
                .await
                .map_err(X402Failure::StoreUnavailable)?
        {
            return Err(X402Failure::Refused(ErrorReason::DuplicateSettlement));
        }
        let settler = settler_key(&i.secret, key);
        let result = self
            .verify_and_settle(payload, requirements, &settler, first)
            .await;
        let kept = match &result {
            Ok(_) => Ok(()),
            Err(X402Failure::Pending { .. }) => i.store.claim(pending, until).await.map(|_| ()),
            Err(_) => i.store.release(key).await,
        };
        if let Err(e) = kept {
            tracing::warn!(error = %e, "cannot update the x402 once-only lock");
        }
        result
    }

    /// `/verify` (for a payment seen the first time) then `/settle`. Once `/settle` was sent, an
    /// answer that is not a verdict is [`X402Failure::Pending`]: the payment may be on its way.
    async fn verify_and_settle(
        &self,
        payload: &PaymentPayload,
        requirements: PaymentRequirements,
        settler: &str,
        first: bool,
    ) -> Result<SettleResponse, X402Failure> {
        let f = &self.inner.facilitator;
        let req = VerifyRequest::new(payload.clone(), requirements);
        if first {
            let verdict = f.verify(&req).await.map_err(|e| {
                if e.is_refusal() {
                    tracing::warn!(error = %e, "the facilitator refused an x402 payment");
                    X402Failure::Refused(ErrorReason::InvalidPayment)
                } else {
                    X402Failure::FacilitatorUnavailable(e)
                }
            })?;
            if !verdict.is_valid {
                return Err(X402Failure::Refused(
                    verdict
                        .invalid_reason
                        .unwrap_or(ErrorReason::InvalidPayment),
                ));
            }
        }
        let settled = match f.settle(&req, Some(settler)).await {
            Ok(s) => s,
            Err(e) if e.is_refusal() => {
                tracing::warn!(error = %e, "the facilitator refused an x402 settlement");
                return Err(X402Failure::Refused(ErrorReason::InvalidPayment));
            }
            Err(e) => {
                tracing::warn!(error = %e, "no answer from the facilitator's /settle: the payment is pending");
                return Err(X402Failure::Pending { transaction: None });
            }
        };
        if settled.success {
            return Ok(settled);
        }
        let reason = settled
            .error_reason
            .clone()
            .unwrap_or(ErrorReason::UnexpectedSettleError);
        match (reason, settled.tx_hash()) {
            // Sent, not confirmed yet (Tollgate's facilitator answers a slow settlement so).
            (ErrorReason::InvalidTransactionState, Some(tx)) => Err(X402Failure::Pending {
                transaction: Some(tx),
            }),
            (reason, _) => Err(X402Failure::Refused(reason)),
        }
    }

    /// Prunes expired memo-store entries at most once a minute, off the request path.
    fn maybe_prune(&self, now: u64) {
        let last = self.inner.last_prune.load(Ordering::Relaxed);
        if now < last + PRUNE_EVERY_SECS
            || self
                .inner
                .last_prune
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let store = Arc::clone(&self.inner.store);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                match store.prune(now).await {
                    Ok(n) if n > 0 => tracing::debug!(pruned = n, "pruned expired memos"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "cannot prune the memo store"),
                }
            });
        }
    }
}

/// Where a payment whose settlement is pending is marked, beside its once-only key.
fn pending_key(key: B256) -> B256 {
    keccak256([b"tollgate-gate/x402/pending".as_slice(), key.as_slice()].concat())
}

/// The `Idempotency-Key` this gate settles `key` under: secret (derived from the memo secret, so
/// nobody else can pick up its outcome) and the same on every replica that shares the secret.
fn settler_key(secret: &MemoSecret, key: B256) -> String {
    let mut buf = Vec::with_capacity(96);
    buf.extend_from_slice(b"tollgate-gate/x402/settler");
    buf.extend_from_slice(&secret.0);
    buf.extend_from_slice(key.as_slice());
    keccak256(&buf).to_string()
}

/// The once-only key of an x402 authorization: its network, token, payer and nonce.
fn x402_lock_key(network: &str, token: Address, from: Address, nonce: B256) -> B256 {
    let mut buf = Vec::with_capacity(128);
    buf.extend_from_slice(b"tollgate-gate/x402/v1");
    buf.extend_from_slice(&(network.len() as u32).to_be_bytes());
    buf.extend_from_slice(network.as_bytes());
    buf.extend_from_slice(token.as_slice());
    buf.extend_from_slice(from.as_slice());
    buf.extend_from_slice(nonce.as_slice());
    keccak256(&buf)
}

async fn check_on_chain(
    chain: &dyn Chain,
    proof: &PaymentProof,
    router: Option<Address>,
) -> Result<(), InvalidProof> {
    if chain.chain_id() != proof.chain_id {
        return Err(InvalidProof::WrongNetwork {
            expected: format!("chain {}", chain.chain_id()),
            found: format!("chain {}", proof.chain_id),
        });
    }
    let receipt = chain
        .receipt(proof.tx_hash)
        .await
        .map_err(InvalidProof::ChainUnavailable)?
        .ok_or(InvalidProof::NotSettledOnChain("no such transaction"))?;
    if !receipt.success {
        return Err(InvalidProof::NotSettledOnChain("the transaction reverted"));
    }
    let settled = receipt
        .logs
        .iter()
        .filter(|l| router.is_none_or(|r| l.address == r))
        .filter_map(|l| PaymentRouter::PaymentSettled::decode_log(l).ok())
        .any(|ev| {
            ev.memo == proof.memo
                && ev.from == proof.payer
                && ev.payTo == proof.pay_to
                && ev.amount == proof.amount.get()
                && ev.fee == proof.fee.get()
        });
    if settled {
        Ok(())
    } else {
        Err(InvalidProof::NotSettledOnChain(
            "no matching PaymentSettled event",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(path_of("https://a.example/v1/quote?x=1#f"), "/v1/quote");
        assert_eq!(path_of("http://127.0.0.1:8080"), "/");
        assert_eq!(path_of("/v1/q?x"), "/v1/q");
        assert_eq!(path_of(""), "/");
    }

    #[tokio::test]
    async fn builder_names_what_is_missing_or_wrong() {
        let e = Gate::builder().build().await.unwrap_err();
        assert!(matches!(e, BuildError::Missing("network")), "{e}");
        let base = || {
            Gate::builder()
                .network("base-sepolia")
                .token(Address::repeat_byte(1), "USDC", "2")
                .pay_to(Address::repeat_byte(2))
        };
        let e = base().build().await.unwrap_err();
        assert!(matches!(e, BuildError::Missing("facilitator")), "{e}");
        let e = base().facilitator("ftp://x").build().await.unwrap_err();
        assert!(
            matches!(
                e,
                BuildError::Invalid {
                    setting: "facilitator",
                    ..
                }
            ),
            "{e}"
        );
        let e = base()
            .facilitator("http://f")
            .memo_ttl(Duration::ZERO)
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                BuildError::Invalid {
                    setting: "memo_ttl",
                    ..
                }
            ),
            "{e}"
        );
        let g = base()
            .facilitator("http://f/")
            .memo_secret([0xab; 32])
            .build()
            .await
            .unwrap();
        assert_eq!(g.facilitator_url(), "http://f");
        assert!(!format!("{g:?}").contains("abab"), "{g:?}");
    }

    #[tokio::test]
    async fn payment_required_shapes() {
        let plan = PlanTerms {
            plan_id: B256::repeat_byte(7),
            amount: Amount::from_units(5_000_000),
            interval: 2_592_000,
            token: Address::repeat_byte(1),
        };
        let g = Gate::builder()
            .network("base-sepolia")
            .token(Address::repeat_byte(1), "USDC", "2")
            .pay_to(Address::repeat_byte(2))
            .facilitator("http://f.example")
            .plan(plan.clone())
            .build()
            .await
            .unwrap();
        let offer = |pricing| Offer {
            method: "GET",
            resource_url: "https://api.example/v1/quote",
            pricing,
            description: "a quote",
            mime_type: "application/json",
        };
        // One-time only.
        let one = [Pricing::one_time(500_000u64)];
        let b = g.build_payment_required(&offer(&one), "X-PAYMENT header is required");
        let v = serde_json::to_value(&b).unwrap();
        assert!(!v.to_string().contains("null"), "{v}");
        assert_eq!(v["accepts"][0]["scheme"], "exact");
        assert_eq!(v["accepts"][0]["service"]["subscriptionScheme"], false);
        assert!(v["accepts"][0]["service"].get("planId").is_none());
        assert_eq!(v["accepts"][0]["maxTimeoutSeconds"], 300);
        assert_eq!(v["accepts"][0]["extra"]["name"], "USDC");
        b.accepts[0]
            .requirements
            .check_x402_v1_compatible()
            .unwrap();
        serde_json::from_value::<x402::PaymentRequiredResponse>(v).unwrap();
        // One-time and a plan: the plan rides on the exact entry.
        let both = [
            Pricing::one_time(500_000u64),
            Pricing::subscription(plan.plan_id),
        ];
        let b = g.build_payment_required(&offer(&both), "x");
        assert_eq!(b.accepts.len(), 1);
        let e = &b.accepts[0];
        assert_eq!(e.service.as_ref().unwrap().plan_id, Some(plan.plan_id));
        assert!(e.service.as_ref().unwrap().subscription_scheme);
        assert_eq!(e.plan.as_ref(), Some(&plan));
        e.requirements.check_x402_v1_compatible().unwrap();
        // Subscription only.
        let sub = [Pricing::subscription(plan.plan_id)];
        let b = g.build_payment_required(&offer(&sub), "x");
        assert_eq!(b.accepts[0].requirements.scheme, "subscription");
        assert_eq!(b.accepts[0].amount, plan.amount);
        // Memos verify for the method/path/price they were issued for.
        let b = g.build_payment_required(&offer(&one), "x");
        let t = g.terms("GET", "/v1/quote", Amount::from_units(500_000));
        memo::check(&g.inner.secret, &t, &b.accepts[0].memo, unix_now()).unwrap();
    }
}
