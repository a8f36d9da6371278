//! [`Gate`]: the provider's configuration and the spec's calls on it, one responsibility per
//! file:
//!
//! - [`builder`]: [`GateBuilder`], the settings and their checks;
//! - [`required`]: what a 402 demands ([`Pricing`], [`Offer`], [`Gate::build_payment_required`]
//!   and the x402 V1 requirements of a price);
//! - [`one_time`]: the Tollgate proof path ([`Gate::verify_payment_proof`]);
//! - [`x402`]: the x402 V1 path ([`Gate::settle_x402`]);
//! - [`v2`]: x402 V2 beside it ([`Gate::payment_required_v2`], [`Gate::settle_x402_v2`]);
//! - [`mpp`]: MPP beside x402 ([`Gate::mpp_challenge`], [`Gate::settle_mpp`]);
//! - here: the [`Gate`] itself, its accessors, subscriptions and metered usage, and the memo
//!   store's pruning.

mod builder;
mod mpp;
mod one_time;
mod required;
mod v2;
mod x402;

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use alloy::primitives::{Address, B256};
use tollgate_chain::Chain;
use tollgate_protocol::{AllowanceUsage, Amount, DeductRequest, Network, PlanTerms};

pub use builder::{
    DEFAULT_FACILITATOR_TIMEOUT, DEFAULT_MEMO_TTL, DEFAULT_PENDING_HOLD,
    DEFAULT_SIGNERS_MIN_REFRESH, DEFAULT_SIGNERS_TTL, DEFAULT_TOKEN_DECIMALS, GateBuilder,
};
pub use mpp::MppFailure;
pub use one_time::{Expected, VerifiedPayment};
pub use required::{Offer, Pricing};
pub use x402::X402Failure;

use crate::{
    DeductError, SubscriptionError, facilitator,
    memo::{MemoSecret, MemoTerms},
    store::MemoStore,
    subscription::{Checker, VerifiedSubscription},
};

/// How often expired entries are pruned from the memo store.
const PRUNE_EVERY_SECS: u64 = 60;

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
    network: Network,
    /// `network` as it goes on the wire: the canonical x402 name when it is one.
    wire_network: Network,
    token: Address,
    token_name: String,
    token_version: String,
    token_decimals: u8,
    pay_to: Address,
    facilitator_url: String,
    public_url: Option<String>,
    secret: MemoSecret,
    /// The HMAC key of MPP challenges, derived from `secret`.
    mpp_key: tollgate_protocol::mpp::ChallengeKey,
    memo_ttl: Duration,
    plans: Vec<PlanTerms>,
    facilitator: tollgate_client::FacilitatorClient,
    store: Arc<dyn MemoStore>,
    chain: Option<Arc<dyn Chain>>,
    subscriptions: Option<Checker>,
    api_key: Option<secrecy::SecretString>,
    /// The network's CAIP-2 id (`eip155:<chain id>`), when known: the gate then speaks x402 V2
    /// too.
    caip2: Option<Network>,
    /// [`GateBuilder::pending_hold`].
    pending_hold: Duration,
    /// When the chain's clock was last read afresh ([`Gate::chain_now`]), unix seconds.
    clock_read: AtomicU64,
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

pub(crate) use tollgate_protocol::unix_now;

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
    pub fn network(&self) -> &Network {
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

    /// The network's CAIP-2 id (`eip155:84532`), which x402 V2 names it by; `None` when the gate
    /// could not learn the chain id ([`GateBuilder::chain_id`]) and so answers x402 V1 only.
    pub fn caip2(&self) -> Option<&Network> {
        self.inner.caip2.as_ref()
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
        // A route that sells no subscription refuses the id as such (a 402), whether or not the
        // gate could check subscriptions.
        if accepted_plans.is_empty() {
            return Err(SubscriptionError::NotOffered);
        }
        let checker = self
            .inner
            .subscriptions
            .as_ref()
            .ok_or(SubscriptionError::NotConfigured)?;
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

    /// "Now" by the chain's clock (unix seconds), by which x402 validity windows are checked as
    /// the facilitator checks them: the `chainTime` the facilitator's discovery publishes for
    /// this gate's network, moved on by the local clock since it was read (the cached document;
    /// read afresh when `reread`, at most once a second, so that refused windows cannot make
    /// the gate ask the facilitator once each). The local clock when the facilitator cannot say.
    pub(crate) async fn chain_now(&self, reread: bool) -> u64 {
        let f = &self.inner.facilitator;
        if reread {
            let now = unix_now();
            let last = self.inner.clock_read.swap(now, Ordering::Relaxed);
            if last != now {
                f.forget_discovery();
            }
        }
        let read = f.discovery().await;
        let local = unix_now();
        match read {
            Ok(d) => d
                .network(&self.inner.network)
                .map_or(local, |net| d.chain_now(net, local)),
            Err(e) => {
                tracing::debug!(error = %e, "no discovery document: checking windows by the local clock");
                local
            }
        }
    }

    /// The facilitator client (its discovery cache).
    pub(crate) fn facilitator_client(&self) -> &tollgate_client::FacilitatorClient {
        &self.inner.facilitator
    }

    /// The token's EIP-712 domain name and version.
    pub(crate) fn token_domain(&self) -> (&str, &str) {
        (&self.inner.token_name, &self.inner.token_version)
    }

    pub(crate) fn public_url(&self) -> Option<&str> {
        self.inner.public_url.as_deref()
    }

    /// The network as it goes on the wire: the canonical x402 name when it is one.
    fn wire_network(&self) -> &Network {
        &self.inner.wire_network
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
}
