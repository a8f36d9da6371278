//! `GET /.well-known/tollgate`, cached: the facilitator's proof signers and networks.
//!
//! The document is kept for the client's TTL ([`crate::ClientBuilder::discovery_cache`]; by
//! default for good, until [`FacilitatorClient::forget_discovery`]). Past it, it is fetched
//! again, and if that fails the stale copy is served (with a warning) rather than failing every
//! caller. Fetches are serialized, and at most one is attempted per minimum refresh interval
//! while a copy is held: an unknown proof signer ([`FacilitatorClient::is_signer`], a key
//! rotation) or a facilitator that is down costs one request per interval, not one per caller.

use std::{
    ops::Deref,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::primitives::Address;
use tollgate_protocol::api::discovery::{NetworkInfo, WELL_KNOWN_PATH, WellKnown};

use crate::{FacilitatorClient, Result, client::unix_now};

/// A discovery document as read, with the local clock's time of reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    /// The document.
    pub document: WellKnown,
    /// The local clock (unix seconds) when it was read: with each network's `chainTime`, the
    /// offset between the chain's clock and the local one.
    pub read_at: u64,
}

impl Deref for Discovered {
    type Target = WellKnown;

    fn deref(&self) -> &WellKnown {
        &self.document
    }
}

impl Discovered {
    /// "Now" on `net`'s chain, given the local clock `local_now`: the chain's time as published,
    /// moved on by what the local clock moved since (the offset between the two clocks holds
    /// however long the document is cached, until the chain jumps). Without a published time,
    /// the local clock.
    pub fn chain_now(&self, net: &NetworkInfo, local_now: u64) -> u64 {
        match net.chain_time {
            Some(chain) => {
                let now = i128::from(chain) + i128::from(local_now) - i128::from(self.read_at);
                u64::try_from(now.max(0)).unwrap_or(u64::MAX)
            }
            None => local_now,
        }
    }
}

#[derive(Debug)]
struct Cached {
    info: Arc<Discovered>,
    fetched: Instant,
}

/// The cache of one client (shared by its clones).
#[derive(Debug)]
pub(crate) struct DiscoveryCache {
    /// How long a document is used without asking again (`None`: until forgotten).
    ttl: Option<Duration>,
    /// At most one fetch per this long while a copy is held.
    min_refresh: Duration,
    cache: Mutex<Option<Cached>>,
    /// Serializes fetches; holds when the last one was attempted.
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

impl DiscoveryCache {
    pub(crate) fn new(ttl: Option<Duration>, min_refresh: Duration) -> Self {
        Self {
            ttl,
            min_refresh,
            cache: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(None),
        }
    }

    fn cached(&self) -> Option<(Arc<Discovered>, Instant)> {
        // A cache: a poisoned one is still a valid one.
        let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        c.as_ref().map(|c| (Arc::clone(&c.info), c.fetched))
    }

    fn fresh(&self, at: Instant) -> bool {
        self.ttl.is_none_or(|ttl| at.elapsed() < ttl)
    }
}

impl FacilitatorClient {
    /// The facilitator's discovery document: cached (see the [module](crate::discovery)
    /// documentation); past its TTL fetched again, and if that fails the stale copy is used.
    pub async fn discovery(&self) -> Result<Arc<Discovered>> {
        let d = &self.inner.discovery;
        if let Some((info, at)) = d.cached()
            && d.fresh(at)
        {
            return Ok(info);
        }
        self.refresh_discovery(false).await
    }

    /// The discovery document held now, if any, fresh or not; never asks the facilitator (for
    /// synchronous readers that warmed the cache with [`discovery`](Self::discovery)).
    pub fn cached_discovery(&self) -> Option<Arc<Discovered>> {
        self.inner.discovery.cached().map(|(info, _)| info)
    }

    /// Whether `signer` is one of the facilitator's published proof signers, with the document
    /// it was checked against. An unknown signer triggers a refresh (a key rotation), at most
    /// once per minimum refresh interval.
    pub async fn is_signer(&self, signer: Address) -> Result<(bool, Arc<Discovered>)> {
        let info = self.discovery().await?;
        if info.proof_signers.contains(&signer) {
            return Ok((true, info));
        }
        let info = self.refresh_discovery(true).await?;
        Ok((info.proof_signers.contains(&signer), info))
    }

    /// Drops the cached document: the next [`discovery`](Self::discovery) reads it afresh
    /// (after the facilitator refused something signed by it, e.g. a validity window by a
    /// chain clock that has jumped since).
    pub fn forget_discovery(&self) {
        *self
            .inner
            .discovery
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// `GET /.well-known/tollgate`, uncached.
    pub async fn fetch_discovery(&self) -> Result<WellKnown> {
        self.get(WELL_KNOWN_PATH).await
    }

    /// Fetches the document, unless the cache makes it unnecessary: a fetch for an expired
    /// cache is skipped when another caller refreshed it meanwhile, and any fetch is skipped
    /// when one was attempted within the minimum refresh interval.
    async fn refresh_discovery(&self, unknown_signer: bool) -> Result<Arc<Discovered>> {
        let d = &self.inner.discovery;
        let mut last = d.fetching.lock().await;
        let before = d.cached();
        if let Some((info, at)) = &before {
            let recently_tried = last.is_some_and(|l| l.elapsed() < d.min_refresh);
            if recently_tried || (d.fresh(*at) && !unknown_signer) {
                return Ok(Arc::clone(info));
            }
        }
        *last = Some(Instant::now());
        match self.fetch_discovery().await {
            Ok(document) => {
                let info = Arc::new(Discovered {
                    document,
                    read_at: unix_now(),
                });
                *d.cache.lock().unwrap_or_else(|e| e.into_inner()) = Some(Cached {
                    info: Arc::clone(&info),
                    fetched: Instant::now(),
                });
                Ok(info)
            }
            Err(e) => match before {
                Some((info, _)) => {
                    tracing::warn!(error = %e, "cannot refresh the facilitator's discovery document; using the cached one");
                    Ok(info)
                }
                None => Err(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tollgate_protocol::Amount;

    use super::*;

    fn doc(chain_time: Option<u64>, read_at: u64) -> (Discovered, NetworkInfo) {
        let net = NetworkInfo {
            chain_id: 1,
            chain_time,
            confirmations: 1,
            decimals: 6,
            fee: Amount::ZERO,
            router: Address::ZERO,
            rpc_url: None,
            subscriptions: None,
            token: Address::ZERO,
            token_name: "USD Coin".into(),
            token_version: "2".into(),
        };
        let wk = Discovered {
            document: WellKnown {
                facilitator: "http://f".into(),
                networks: BTreeMap::from([("n".to_owned(), net.clone())]),
                nonce: String::new(),
                proof_signers: Vec::new(),
                x402_version: 1,
            },
            read_at,
        };
        (wk, net)
    }

    #[test]
    fn the_chain_clock_keeps_its_offset_to_the_local_one() {
        // Read at local 1000 when the chain said 1000 + 30 days; 50 s later locally.
        let (wk, net) = doc(Some(1_000 + 2_592_000), 1_000);
        assert_eq!(wk.chain_now(&net, 1_050), 1_050 + 2_592_000);
        // A chain behind the local clock.
        let (wk, net) = doc(Some(900), 1_000);
        assert_eq!(wk.chain_now(&net, 1_010), 910);
        // No published time: the local clock.
        let (wk, net) = doc(None, 1_000);
        assert_eq!(wk.chain_now(&net, 1_234), 1_234);
    }
}
