//! Building a running facilitator from its [`Config`]: chain backends, store, keys.

use std::sync::Arc;

use alloy::primitives::B256;
use tollgate_chain::{
    Chain, Wallet,
    failover::{FailoverChain, FailoverOptions},
    rpc::{RpcChain, RpcOptions},
};

use crate::{
    BuildError, Facilitator, NetworkSpec, Settings,
    check::{self, CheckOptions, Finding, Status},
    config::{Config, ResolvedKeys, RpcEndpoint},
    store,
};

/// Why the facilitator could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A network is configured as `embedded` but no embedded chain was supplied.
    #[error("network {0} uses rpc_url = \"embedded\", which only `tollgate dev` provides")]
    NoEmbeddedChain(String),
    /// A chain backend could not be reached.
    #[error("network {network}: {source}")]
    Chain {
        /// Network name.
        network: String,
        /// Cause.
        #[source]
        source: tollgate_chain::Error,
    },
    /// A network failed a check the facilitator does not serve without
    /// ([`Finding::fatal`]: a node of another chain, a contract missing).
    #[error("network {network}: {}", findings.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused {
        /// Network name.
        network: String,
        /// The fatal findings, each with its fix.
        findings: Vec<Finding>,
    },
    /// The store could not be opened or migrated.
    #[error("store: {0}")]
    Store(#[from] store::StoreError),
    /// The parts do not fit together.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The stored webhook secrets do not fit `keys.webhook_secrets` (missing or wrong key).
    #[error(transparent)]
    WebhookSecrets(#[from] crate::webhooks::SecretsError),
}

/// The settings a config describes (fault injection off).
pub fn settings(config: &Config) -> Settings {
    Settings {
        public_url: config.public_url.clone(),
        fee: config.fees.settlement_fee.get(),
        confirmation_timeout: config.settlement.confirmation_timeout(),
        max_validity_secs: config.settlement.max_validity_secs,
        proof_ttl_secs: config.settlement.proof_ttl_secs,
        max_body_bytes: config.limits.max_body_bytes,
        server: config.server.clone(),
        keeper_interval: std::time::Duration::from_secs(config.subscriptions.keeper_interval_secs),
        overage_batch_interval: std::time::Duration::from_secs(
            config.subscriptions.overage_batch_secs,
        ),
        overage_batch_amount: u64::try_from(config.subscriptions.overage_batch_amount.get())
            .unwrap_or(crate::store::MAX_METERED),
        webhook_timeout: std::time::Duration::from_secs(config.webhooks.timeout_secs.max(1)),
        webhook_allow_private: config.webhooks.allow_private_targets,
        lease_ttl: std::time::Duration::from_secs(config.replicas.lease_ttl_secs.max(1)),
        replica_id: config.replicas.id.clone(),
        relay_bounds: config.subscriptions.relay_bounds(),
        relayer_floor_settlements: config.settlement.relayer_floor_settlements,
        token_view: config.settlement.token_view,
        operator: config.fees.fee_recipient.filter(|a| !a.is_zero()),
        public_rpc_urls: config
            .networks
            .iter()
            .filter_map(|n| Some((n.name.clone(), n.public_rpc_url.clone()?)))
            .collect(),
        ..Settings::default()
    }
}

/// Connects every network (an [`RpcChain`] holding the relayer keys, or the supplied `embedded`
/// chain, which must hold them already) and checks it ([`check`]): a node of another chain or a
/// missing token, router or subscriptions contract is [`StartError::Refused`], every other failed
/// check a warning in the log. Then opens and migrates the store, assembles the
/// facilitator, and seals its stored webhook secrets under `keys.webhook_secrets`
/// ([`Facilitator::seal_webhook_secrets`]: a missing or wrong key is an error here).
pub async fn build(
    config: &Config,
    keys: &ResolvedKeys,
    mut settings: Settings,
    embedded: Option<Arc<dyn Chain>>,
) -> Result<Facilitator, StartError> {
    if settings.webhook_secrets.is_none() {
        settings.webhook_secrets = keys.webhook_secrets.clone();
    }
    let relayer_keys: Vec<B256> = keys
        .relayers
        .iter()
        .map(|k| k.signer().to_bytes())
        .collect();
    let relayers = keys.relayers.iter().map(|k| k.address()).collect();
    let wallet =
        Wallet::from_keys(relayer_keys.iter().copied()).map_err(|source| StartError::Chain {
            network: "*".into(),
            source,
        })?;
    let mut networks = Vec::new();
    let options = CheckOptions {
        floor_settlements: config.settlement.relayer_floor_settlements,
        ..CheckOptions::default()
    };
    let relayer_addresses: Vec<_> = keys.relayers.iter().map(|k| k.address()).collect();
    for (i, n) in config.networks.iter().enumerate() {
        let (probed, reader) = check::endpoints(i, n, &options).await;
        let refused = |findings| StartError::Refused {
            network: n.name.clone(),
            findings,
        };
        refuse_or_warn(&n.name, probed).map_err(refused)?;
        let chain: Arc<dyn Chain> = match &n.rpc {
            RpcEndpoint::Embedded => embedded
                .clone()
                .ok_or_else(|| StartError::NoEmbeddedChain(n.name.clone()))?,
            RpcEndpoint::Url(url) => {
                let options = RpcOptions {
                    chain_id: Some(n.chain_id),
                    max_fee_per_gas: n.max_fee_per_gas,
                    ..RpcOptions::default()
                };
                let failed = |source| StartError::Chain {
                    network: n.name.clone(),
                    source,
                };
                if n.rpc_fallbacks.is_empty() {
                    let chain = RpcChain::connect(url.expose_secret(), wallet.clone(), options)
                        .await
                        .map_err(failed)?;
                    Arc::new(chain)
                } else {
                    // Any node may be down at start (that is what the others are for): each
                    // checks its chain id before its first use instead.
                    let mut nodes: Vec<Arc<dyn Chain>> = Vec::new();
                    for u in std::iter::once(url).chain(&n.rpc_fallbacks) {
                        let node = RpcChain::connect_lazy(
                            u.expose_secret(),
                            n.chain_id,
                            wallet.clone(),
                            options.clone(),
                        )
                        .map_err(failed)?;
                        nodes.push(Arc::new(node));
                    }
                    let chain =
                        FailoverChain::new(nodes, FailoverOptions::default()).map_err(failed)?;
                    Arc::new(chain)
                }
            }
        };
        let gas_price = match reader {
            Some((_, url)) => check::gas_price(&url, options.timeout).await,
            None => None,
        };
        let found = check::contracts_and_relayers(
            i,
            n,
            &chain,
            config.fees.fee_recipient,
            &relayer_addresses,
            gas_price,
            &options,
        )
        .await;
        refuse_or_warn(&n.name, found).map_err(refused)?;
        let spec = NetworkSpec {
            name: n.name.clone(),
            chain_id: n.chain_id,
            token: n.token,
            token_name: n.token_name.clone(),
            token_version: n.token_version.clone(),
            router: n.router,
            subscriptions: n.subscriptions,
            confirmations: n.confirmations,
        };
        networks.push((spec, chain));
    }
    let store = store::open(config.store.as_str()).await?;
    for n in &config.networks {
        // Only moves a fresh cursor forward; a keeper that read further keeps its place.
        if n.start_block > 0 {
            store
                .index_subscription_events(
                    &n.name,
                    &[],
                    n.start_block,
                    crate::facilitator::unix_now(),
                )
                .await?;
        }
    }
    let facilitator = Facilitator::new(
        settings,
        networks,
        relayers,
        keys.proof.signer().to_bytes(),
        store,
    )?;
    facilitator.seal_webhook_secrets().await?;
    Ok(facilitator)
}

/// The fatal findings, as an error; the other failed ones logged as warnings.
fn refuse_or_warn(network: &str, findings: Vec<Finding>) -> Result<(), Vec<Finding>> {
    let (fatal, rest): (Vec<_>, Vec<_>) = findings.into_iter().partition(|f| f.fatal);
    for f in rest.iter().filter(|f| f.status != Status::Ok) {
        tracing::warn!(network, "{f}");
    }
    if fatal.is_empty() { Ok(()) } else { Err(fatal) }
}
