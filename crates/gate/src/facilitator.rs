//! The facilitator as a gate sees it, over HTTP: its published signers and networks
//! (`GET /.well-known/tollgate`, cached), and the x402 V1 `POST /verify` and `POST /settle`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::primitives::Address;
use serde::{Deserialize, de::DeserializeOwned};
use tollgate_protocol::{
    AllowanceUsage, DeductRequest,
    x402::{SettleRequest, SettleResponse, VerifyRequest, VerifyResponse},
};

use crate::{DeductError, FacilitatorError};

/// What `GET /.well-known/tollgate` publishes that a gate uses.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WellKnown {
    /// Addresses whose proof signatures the facilitator stands behind.
    #[serde(default)]
    pub(crate) proof_signers: Vec<Address>,
    /// Per network name.
    #[serde(default)]
    pub(crate) networks: HashMap<String, NetworkInfo>,
}

/// One network the facilitator settles on.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NetworkInfo {
    pub(crate) chain_id: u64,
    #[serde(default)]
    pub(crate) router: Option<Address>,
}

impl WellKnown {
    pub(crate) fn network(&self, name: &str) -> Option<&NetworkInfo> {
        self.networks
            .iter()
            .find(|(n, _)| tollgate_protocol::network::same_network(n, name))
            .map(|(_, i)| i)
    }
}

#[derive(Debug)]
struct Cached {
    info: Arc<WellKnown>,
    fetched: Instant,
}

/// The facilitator client: one per [`crate::Gate`].
#[derive(Debug)]
pub(crate) struct FacilitatorClient {
    base: String,
    http: reqwest::Client,
    /// How long published signers are trusted without asking again.
    ttl: Duration,
    /// How often an unknown signer may trigger a refresh.
    min_refresh: Duration,
    cache: Mutex<Option<Cached>>,
    /// Serializes fetches; holds when the last one was attempted.
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

impl FacilitatorClient {
    pub(crate) fn new(
        base: String,
        http: reqwest::Client,
        ttl: Duration,
        min_refresh: Duration,
    ) -> Self {
        Self {
            base,
            http,
            ttl,
            min_refresh,
            cache: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(None),
        }
    }

    fn cached(&self) -> Option<(Arc<WellKnown>, Instant)> {
        let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        c.as_ref().map(|c| (Arc::clone(&c.info), c.fetched))
    }

    /// The published signers and networks: cached for the TTL; past it, fetched again, and if
    /// that fails the stale copy is used (with a warning) rather than refusing every proof.
    pub(crate) async fn info(&self) -> Result<Arc<WellKnown>, FacilitatorError> {
        if let Some((info, at)) = self.cached()
            && at.elapsed() < self.ttl
        {
            return Ok(info);
        }
        self.refresh(false).await
    }

    /// Whether `signer` is published. An unknown signer triggers a refresh (a key rotation), at
    /// most once per `min_refresh`.
    pub(crate) async fn is_signer(
        &self,
        signer: Address,
    ) -> Result<(bool, Arc<WellKnown>), FacilitatorError> {
        let info = self.info().await?;
        if info.proof_signers.contains(&signer) {
            return Ok((true, info));
        }
        let info = self.refresh(true).await?;
        Ok((info.proof_signers.contains(&signer), info))
    }

    /// Fetches `/.well-known/tollgate`, unless the cache makes it unnecessary: a fetch for an
    /// expired cache is skipped when another caller refreshed it meanwhile, and any fetch is
    /// skipped when one was attempted within `min_refresh` (so an unknown signer, or a facilitator
    /// that is down, costs one request per `min_refresh`, not one per proof).
    async fn refresh(&self, unknown_signer: bool) -> Result<Arc<WellKnown>, FacilitatorError> {
        let mut last = self.fetching.lock().await;
        let before = self.cached();
        if let Some((info, at)) = &before {
            let fresh = at.elapsed() < self.ttl;
            let recently_tried = last.is_some_and(|l| l.elapsed() < self.min_refresh);
            if recently_tried || (fresh && !unknown_signer) {
                return Ok(Arc::clone(info));
            }
        }
        *last = Some(Instant::now());
        match self.get_json::<WellKnown>("/.well-known/tollgate").await {
            Ok(info) => {
                let info = Arc::new(info);
                *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = Some(Cached {
                    info: Arc::clone(&info),
                    fetched: Instant::now(),
                });
                Ok(info)
            }
            Err(e) => match before {
                Some((info, _)) => {
                    tracing::warn!(error = %e, "cannot refresh the facilitator's proof signers; using the cached ones");
                    Ok(info)
                }
                None => Err(e),
            },
        }
    }

    async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, FacilitatorError> {
        let url = format!("{}{path}", self.base);
        let r = self.http.get(&url).send().await;
        read(url, r).await
    }

    async fn post_json<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, FacilitatorError> {
        let url = format!("{}{path}", self.base);
        let r = self.http.post(&url).json(body).send().await;
        read(url, r).await
    }

    /// `POST /verify`.
    pub(crate) async fn verify(
        &self,
        req: &VerifyRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.post_json("/verify", req).await
    }

    /// `POST /settle`, naming the settler by `Idempotency-Key` (its retries of the same payload
    /// get the first outcome again).
    pub(crate) async fn settle(
        &self,
        req: &SettleRequest,
        settler: &str,
    ) -> Result<SettleResponse, FacilitatorError> {
        let url = format!("{}/settle", self.base);
        let r = self
            .http
            .post(&url)
            .header("idempotency-key", settler)
            .json(req)
            .send()
            .await;
        read(url, r).await
    }

    /// `POST /subscriptions/{id}/usage` with the provider's API key.
    pub(crate) async fn deduct(
        &self,
        api_key: &str,
        id: alloy::primitives::B256,
        req: &DeductRequest,
    ) -> Result<AllowanceUsage, DeductError> {
        let url = format!("{}/subscriptions/{id}/usage", self.base);
        let sent = self
            .http
            .post(&url)
            .bearer_auth(api_key)
            .json(req)
            .send()
            .await;
        let r = match sent {
            Ok(r) => r,
            Err(source) => {
                return Err(DeductError::Unavailable(FacilitatorError::Request {
                    url,
                    source,
                }));
            }
        };
        let status = r.status();
        if status.is_success() {
            return r.json().await.map_err(|source| {
                DeductError::Unavailable(FacilitatorError::Request { url, source })
            });
        }
        #[derive(Deserialize, Default)]
        struct Body {
            error: ErrorBody,
        }
        #[derive(Deserialize, Default)]
        struct ErrorBody {
            code: String,
            #[serde(default)]
            message: String,
        }
        let body = r.json::<Body>().await.unwrap_or_default().error;
        if status.is_server_error() {
            return Err(DeductError::Unavailable(FacilitatorError::Status {
                url,
                status: status.as_u16(),
                code: Some(body.code).filter(|c| !c.is_empty()),
            }));
        }
        let message = body.message;
        Err(match body.code.as_str() {
            "AllowanceExhausted" => DeductError::AllowanceExhausted { message },
            "SubscriptionNotActive" => DeductError::SubscriptionNotActive { message },
            _ => DeductError::Refused {
                status: status.as_u16(),
                code: body.code,
                message,
            },
        })
    }
}

async fn read<T: DeserializeOwned>(
    url: String,
    r: Result<reqwest::Response, reqwest::Error>,
) -> Result<T, FacilitatorError> {
    let r = match r {
        Ok(r) => r,
        Err(source) => return Err(FacilitatorError::Request { url, source }),
    };
    let status = r.status();
    if !status.is_success() {
        #[derive(Deserialize)]
        struct Body {
            error: Code,
        }
        #[derive(Deserialize)]
        struct Code {
            code: String,
        }
        let code = r.json::<Body>().await.ok().map(|b| b.error.code);
        return Err(FacilitatorError::Status {
            url,
            status: status.as_u16(),
            code,
        });
    }
    r.json::<T>()
        .await
        .map_err(|source| FacilitatorError::Request { url, source })
}
