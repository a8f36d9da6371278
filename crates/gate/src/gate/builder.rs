//! [`GateBuilder`]: a gate's settings, their defaults and their checks.

use std::{
    fmt,
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

use alloy::primitives::{Address, B256};
use secrecy::{ExposeSecret as _, SecretString};
use tollgate_chain::{
    Chain, Wallet,
    rpc::{RpcChain, RpcOptions},
};
use tollgate_client::FacilitatorClient;
use tollgate_protocol::{PlanTerms, network};

use super::{Gate, Inner};
use crate::{
    BuildError, facilitator,
    memo::MemoSecret,
    store::{self, MemoStore},
    subscription::{
        self, Checker, DEFAULT_SUBSCRIPTION_CACHE_TTL, DEFAULT_SUBSCRIPTION_GRACE,
        DEFAULT_SUBSCRIPTION_POLL_INTERVAL,
    },
};

/// Default memo lifetime: how long the terms of a 402 can be paid.
pub const DEFAULT_MEMO_TTL: Duration = Duration::from_secs(300);
/// Default bound on every request to the facilitator.
pub const DEFAULT_FACILITATOR_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`GateBuilder::pending_hold`]: how long a paying request whose x402 settlement is
/// still pending is held open for its outcome before the 503 `SettlementPending`.
pub const DEFAULT_PENDING_HOLD: Duration = Duration::from_secs(15);
/// How long the facilitator's published proof signers are trusted without asking again.
pub const DEFAULT_SIGNERS_TTL: Duration = Duration::from_secs(600);
/// At most one refresh of the signers per this long (on an unknown signer, or while the
/// facilitator is unreachable).
pub const DEFAULT_SIGNERS_MIN_REFRESH: Duration = Duration::from_secs(30);

/// The token's decimals unless [`GateBuilder::token_decimals`] says otherwise (USDC's).
pub const DEFAULT_TOKEN_DECIMALS: u8 = 6;

/// Builds a [`Gate`]. Required: [`network`](Self::network), [`token`](Self::token),
/// [`pay_to`](Self::pay_to), [`facilitator`](Self::facilitator).
pub struct GateBuilder {
    network: Option<String>,
    token: Option<(Address, String, String)>,
    token_decimals: u8,
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
    plan_ids: Vec<B256>,
    rpc_url: Option<String>,
    subscriptions: Option<(Arc<dyn Chain>, Address)>,
    subscription_cache_ttl: Duration,
    subscription_poll_interval: Duration,
    subscription_grace: Duration,
    api_key: Option<SecretString>,
    chain_id: Option<u64>,
    pending_hold: Duration,
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
    /// [`DEFAULT_FACILITATOR_TIMEOUT`], a random memo secret, and the `memory:` memo store.
    pub fn builder() -> GateBuilder {
        GateBuilder {
            network: None,
            token: None,
            token_decimals: DEFAULT_TOKEN_DECIMALS,
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
            plan_ids: Vec::new(),
            rpc_url: None,
            subscriptions: None,
            subscription_cache_ttl: DEFAULT_SUBSCRIPTION_CACHE_TTL,
            subscription_poll_interval: DEFAULT_SUBSCRIPTION_POLL_INTERVAL,
            subscription_grace: DEFAULT_SUBSCRIPTION_GRACE,
            api_key: None,
            chain_id: None,
            pending_hold: DEFAULT_PENDING_HOLD,
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

    /// The network's EIP-155 chain id, which x402 V2 names it by (`eip155:<id>` in the
    /// `PAYMENT-REQUIRED` header). Needed only for a custom network name: an x402 V1 name or a
    /// CAIP-2 id gives it, and so does the chain of [`on_chain`](Self::on_chain) or
    /// [`subscriptions`](Self::subscriptions); otherwise [`build`](Self::build) reads it from the
    /// facilitator's discovery. A gate that cannot learn it answers x402 V1 only (and logs why).
    pub fn chain_id(mut self, chain_id: u64) -> Self {
        self.chain_id = Some(chain_id);
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

    /// The token's decimals (default [`DEFAULT_TOKEN_DECIMALS`], USDC's), which an MPP
    /// challenge declares beside its amount in the token's smallest unit
    /// ([`crate::PaymentGateLayer::mpp`]).
    pub fn token_decimals(mut self, decimals: u8) -> Self {
        self.token_decimals = decimals;
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

    /// The once-only memo store (default: [`crate::store::MemoryMemoStore`], this process's
    /// memory).
    pub fn memo_store(mut self, store: Arc<dyn MemoStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The memo store by URL ([`crate::store::open`]): `memory:` (the default), `sqlite://gate.db`
    /// (feature `sqlite`), `postgres://…` (feature `postgres`; shared by replicas).
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

    /// Sells by subscription to the plan `plan_id` ([`Pricing::Subscription`](crate::Pricing::Subscription)
    /// entries refer to it). [`build`](Self::build) loads its terms from the facilitator
    /// (`GET /plans/{id}`) and, unless [`subscriptions`](Self::subscriptions) is given, sets up
    /// the subscription check from the facilitator's discovery: the network's subscriptions
    /// contract, read over [`rpc_url`](Self::rpc_url) or the `rpcUrl` the facilitator publishes.
    /// An unknown plan ([`BuildError::UnknownPlan`]), a deprecated one
    /// ([`BuildError::PlanDeprecated`]) or no chain to read ([`BuildError::NoRpc`]) fail the
    /// build.
    pub fn plan(mut self, plan_id: B256) -> Self {
        self.plan_ids.push(plan_id);
        self
    }

    /// The terms of a plan, given by hand, for a gate that does not ask the facilitator (offline
    /// use: pair it with [`subscriptions`](Self::subscriptions)). [`plan`](Self::plan) loads
    /// them instead.
    pub fn plan_terms(mut self, terms: PlanTerms) -> Self {
        self.plans.push(terms);
        self
    }

    /// The chain's JSON-RPC endpoint (`http(s)://`) that [`plan`](Self::plan) checks
    /// subscriptions on, instead of the `rpcUrl` the facilitator publishes. The URL may carry
    /// credentials: only its scheme, host and port are ever logged.
    pub fn rpc_url(mut self, url: impl Into<String>) -> Self {
        self.rpc_url = Some(url.into());
        self
    }

    /// Checks `X-Service-Sub` subscriptions on `chain`, against the `Subscriptions` contract at
    /// `contract` (the offline path; [`plan`](Self::plan) finds both through the facilitator).
    /// Without either, a request carrying `X-Service-Sub` on a route priced with
    /// [`Pricing::Subscription`](crate::Pricing::Subscription) gets a 500
    /// (`SubscriptionsNotConfigured`) and [`Gate::payment_gate`] logs an error when it is built.
    /// Building the gate then starts a background watcher of the contract's events (on the
    /// current tokio runtime), stopped when the last clone of the gate is dropped.
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

    /// The provider's facilitator API key (from `tollgate provider register`), which
    /// [`Gate::deduct_allowance`] and metered routes ([`crate::PaymentGateLayer::metered`])
    /// present. Held in a [`SecretString`]: zeroed on drop, never printed by `Debug` or logged.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(SecretString::from(key.into()));
        self
    }

    /// How long a paying request whose x402 settlement was sent but not confirmed is held open,
    /// asking the facilitator again, before it is answered 503 `SettlementPending` with its
    /// retry token (default [`DEFAULT_PENDING_HOLD`]; zero answers at once). Each ask is cut at
    /// what is left of the hold, so a request is answered within the facilitator timeout plus
    /// the hold: keep the two under the server's request timeout.
    pub fn pending_hold(mut self, hold: Duration) -> Self {
        self.pending_hold = hold;
        self
    }

    /// Builds the gate: checks every setting, builds the facilitator HTTP client and opens the
    /// memo store. With [`plan`](Self::plan), also loads the plans and the network from the
    /// facilitator and connects to the chain; otherwise does not contact the facilitator
    /// (signers are fetched on the first proof).
    pub async fn build(mut self) -> Result<Gate, BuildError> {
        let network = self.network.ok_or(BuildError::Missing("network"))?;
        let network = match tollgate_protocol::Network::parse(network) {
            Ok(network) => network,
            Err(e) => {
                return Err(BuildError::Invalid {
                    setting: "network",
                    problem: e.to_string(),
                });
            }
        };
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
        let own_chain_id = self
            .chain
            .as_ref()
            .or(self.subscriptions.as_ref().map(|(c, _)| c))
            .map(|c| c.chain_id());
        let api_key = self.api_key.filter(|k| !k.expose_secret().is_empty());
        let facilitator = facilitator::client(
            &facilitator_url,
            api_key.as_ref().map(|k| k.expose_secret()),
            self.facilitator_timeout,
            self.signers_ttl,
            self.signers_min_refresh,
        )?;
        let mut loaded_chain_id = None;
        if !self.plan_ids.is_empty() {
            let found = load_plans(
                &facilitator,
                &network,
                token,
                &self.plan_ids,
                self.rpc_url.take(),
                self.subscriptions.is_none(),
            )
            .await?;
            self.plans.extend(found.plans);
            loaded_chain_id = Some(found.chain_id);
            if found.subscriptions.is_some() {
                self.subscriptions = found.subscriptions;
            }
        }
        let chain_id = resolve_chain_id(
            &network,
            self.chain_id,
            own_chain_id,
            &facilitator,
            loaded_chain_id,
        )
        .await?;
        let store = match (self.store, self.store_url) {
            (Some(s), _) => s,
            (None, Some(url)) => store::open(&url).await?,
            (None, None) => store::open(store::DEFAULT_URL).await?,
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
        // The canonical x402 name when it is one (`base-mainnet` → `base`).
        let wire_network = network::lookup(&network)
            .map_or_else(|| network.clone(), tollgate_protocol::Network::from);
        Ok(Gate {
            inner: Arc::new(Inner {
                network,
                wire_network,
                token,
                token_name,
                token_version,
                token_decimals: self.token_decimals,
                pay_to,
                facilitator,
                facilitator_url,
                public_url,
                mpp_key: super::mpp::challenge_key(&MemoSecret(secret)),
                secret: MemoSecret(secret),
                memo_ttl: self.memo_ttl,
                plans: self.plans,
                store,
                chain: self.chain,
                subscriptions,
                api_key,
                caip2: chain_id.map(tollgate_protocol::Network::eip155),
                pending_hold: self.pending_hold,
                clock_read: AtomicU64::new(0),
                last_prune: AtomicU64::new(0),
            }),
        })
    }
}

/// The network's chain id (for the x402 V2 `eip155:<id>`): given, named by the network, the
/// gate's chain's own, the discovery's; `None` (x402 V1 only, logged) when the facilitator cannot
/// say. A given id that contradicts the network's name or chain fails the build.
async fn resolve_chain_id(
    network: &str,
    given: Option<u64>,
    chain: Option<u64>,
    facilitator: &FacilitatorClient,
    loaded: Option<u64>,
) -> Result<Option<u64>, BuildError> {
    let named = network::chain_id_of(network).ok();
    let known = [named, chain, loaded].into_iter().flatten().next();
    {
        match (given, known) {
            (Some(given), Some(known)) if given != known => Err(BuildError::Invalid {
                setting: "chain_id",
                problem: format!("{given}, but network {network:?} is chain {known}"),
            }),
            (Some(given), _) => Ok(Some(given)),
            (None, Some(known)) => Ok(Some(known)),
            (None, None) => match facilitator.discovery().await {
                Ok(d) => Ok(d.network(network).map(|n| n.chain_id).or_else(|| {
                    tracing::warn!(
                        network,
                        "the facilitator does not serve this network: x402 V2 is not offered"
                    );
                    None
                })),
                Err(e) => {
                    tracing::warn!(network, error = %e, "cannot learn the network's chain id from the facilitator: x402 V2 is not offered (set GateBuilder::chain_id)");
                    Ok(None)
                }
            },
        }
    }
}

/// What [`GateBuilder::plan`] found through the facilitator.
struct Found {
    chain_id: u64,
    plans: Vec<PlanTerms>,
    subscriptions: Option<(Arc<dyn Chain>, Address)>,
}

/// [`GateBuilder::plan`]'s part of the build: the terms of each plan id from the facilitator,
/// and, when `need_chain`, the subscriptions contract and a chain (over `rpc_url`, else the
/// published `rpcUrl`) from its discovery.
async fn load_plans(
    facilitator: &FacilitatorClient,
    network: &str,
    token: Address,
    plan_ids: &[B256],
    rpc_url: Option<String>,
    need_chain: bool,
) -> Result<Found, BuildError> {
    let discovery = facilitator
        .fetch_discovery()
        .await
        .map_err(BuildError::Facilitator)?;
    let net = discovery
        .network(network)
        .ok_or_else(|| BuildError::Network {
            facilitator: facilitator.base_url().to_owned(),
            problem: format!("does not serve network {network:?}"),
        })?;
    let mut plans = Vec::with_capacity(plan_ids.len());
    for &id in plan_ids {
        let plan = facilitator
            .plan(id, Some(network))
            .await
            .map_err(|e| match e.status() {
                Some(404) => BuildError::UnknownPlan(id),
                _ => BuildError::Facilitator(e),
            })?;
        if plan.deprecated {
            return Err(BuildError::PlanDeprecated(id));
        }
        if plan.token != token {
            return Err(BuildError::Invalid {
                setting: "plan",
                problem: format!(
                    "plan {id} is paid in token {}, this gate takes {token}",
                    plan.token
                ),
            });
        }
        plans.push(PlanTerms {
            plan_id: id,
            amount: plan.amount,
            interval: plan.interval,
            token: plan.token,
        });
    }
    if !need_chain {
        return Ok(Found {
            chain_id: net.chain_id,
            plans,
            subscriptions: None,
        });
    }
    let contract = net.subscriptions.ok_or_else(|| BuildError::Network {
        facilitator: facilitator.base_url().to_owned(),
        problem: format!("publishes no subscriptions contract for network {network:?}"),
    })?;
    let url = match (rpc_url, &net.rpc_url) {
        (Some(url), _) => url,
        (None, Some(url)) => url.clone(),
        (None, None) => {
            return Err(BuildError::NoRpc {
                network: network.to_owned(),
            });
        }
    };
    // Not quoted in the error: the URL may carry credentials.
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(BuildError::Invalid {
            setting: "rpc_url",
            problem: "not an http(s) URL".into(),
        });
    }
    // Reads only: a wallet without keys.
    let wallet = Wallet::from_keys([]).map_err(BuildError::Chain)?;
    let options = RpcOptions {
        chain_id: Some(net.chain_id),
        ..RpcOptions::default()
    };
    let chain = RpcChain::connect(&url, wallet, options)
        .await
        .map_err(BuildError::Chain)?;
    Ok(Found {
        chain_id: net.chain_id,
        plans,
        subscriptions: Some((Arc::new(chain), contract)),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_api_key() {
        let key = format!("tg_{}", "5a".repeat(32));
        let builder = Gate::builder()
            .network("base-sepolia")
            .facilitator("http://127.0.0.1:9")
            .api_key(key.clone());
        let shown = format!("{builder:?} {builder:#?}");
        assert!(
            !shown.contains(&key) && shown.contains("api_key"),
            "{shown}"
        );
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
}
