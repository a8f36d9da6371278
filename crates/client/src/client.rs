//! [`FacilitatorClient`]: the typed calls of the facilitator's HTTP API.

use std::{
    fmt,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy::primitives::{Address, B256, keccak256};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::{Serialize, de::DeserializeOwned};
use tollgate_protocol::{
    AllowanceUsage, ApiErrorBody, AuthorizeRequest, AuthorizeResponse, DeductRequest,
    PendingResponse, QuoteQuery, RaiseAllowanceRequest, SubscribeRequest, SubscriptionQuote,
    SubscriptionView,
    api::{
        analytics::{Report, ReportParams},
        authorize::{StatusQuery, VerifyProofRequest, VerifyProofResponse},
        plans::{CreatePlanRequest, NetworkQuery, Plan},
        providers::{
            ChallengeRequest, ChallengeResponse, RegisterRequest, RegisterResponse, RevokeResponse,
        },
        webhooks::{CreateEndpoint, Delivery, Endpoint, EventRecord, Page, Rotate, UpdateEndpoint},
    },
    headers::IDEMPOTENCY_KEY,
    x402::{SettleRequest, SettleResponse, SupportedResponse, VerifyRequest, VerifyResponse},
};

use crate::{Error, Result, discovery::DiscoveryCache};

/// Default bound on each request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound on connecting.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default lifetime of the cached discovery document.
pub const DEFAULT_DISCOVERY_TTL: Duration = Duration::from_secs(600);
/// Default minimum interval between two discovery fetches while a copy is held.
pub const DEFAULT_DISCOVERY_MIN_REFRESH: Duration = Duration::from_secs(30);
/// Default largest answer read.
pub const DEFAULT_MAX_ANSWER: usize = 4 * 1024 * 1024;

/// A client of one facilitator. Cheap to clone: clones share the HTTP connections and the
/// discovery cache.
///
/// Every call is one HTTP request (no retries: callers that resend decide when; every
/// facilitator operation is idempotent per signed body or idempotency key). Provider calls
/// (plans, usage, webhooks, analytics, key revocation) present the API key given to the
/// builder as `Authorization: Bearer`; no other call sends it.
#[derive(Clone)]
pub struct FacilitatorClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    base: String,
    http: reqwest::Client,
    api_key: Option<String>,
    max_answer: usize,
    pub(crate) discovery: DiscoveryCache,
}

impl fmt::Debug for FacilitatorClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FacilitatorClient")
            .field("base", &self.inner.base)
            .field(
                "api_key",
                &self.inner.api_key.as_ref().map(|_| "<redacted>"),
            )
            .field("max_answer", &self.inner.max_answer)
            .field("discovery", &self.inner.discovery)
            .finish_non_exhaustive()
    }
}

/// Builds a [`FacilitatorClient`] ([`FacilitatorClient::builder`]).
#[must_use]
pub struct ClientBuilder {
    base: String,
    api_key: Option<String>,
    http: Option<reqwest::Client>,
    timeout: Duration,
    connect_timeout: Duration,
    user_agent: Option<String>,
    discovery_ttl: Option<Duration>,
    discovery_min_refresh: Duration,
    max_answer: usize,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base", &self.base)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("discovery_ttl", &self.discovery_ttl)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// The provider's API key (`tg_…`, from [`FacilitatorClient::register`]), for the provider
    /// calls. Never logged; an empty key is no key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into()).filter(|k| !k.is_empty());
        self
    }

    /// Uses this HTTP client (its timeouts, redirect policy and user agent) instead of building
    /// one; the timeouts and user agent given here are then ignored.
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// The bound on each request, body included (default [`DEFAULT_TIMEOUT`]); connecting is
    /// bounded by `connect` (default [`DEFAULT_CONNECT_TIMEOUT`], never more than `request`).
    pub fn timeouts(mut self, request: Duration, connect: Duration) -> Self {
        self.timeout = request;
        self.connect_timeout = connect;
        self
    }

    /// A `User-Agent` to send (default: none).
    pub fn user_agent(mut self, agent: impl Into<String>) -> Self {
        self.user_agent = Some(agent.into());
        self
    }

    /// How long the discovery document is used without asking again (`None`: until
    /// [`FacilitatorClient::forget_discovery`]), and at most how often it is fetched while a copy
    /// is held (on an unknown proof signer, or while the facilitator is unreachable, in which
    /// case the copy stays in use). Default [`DEFAULT_DISCOVERY_TTL`] and
    /// [`DEFAULT_DISCOVERY_MIN_REFRESH`].
    pub fn discovery_cache(mut self, ttl: Option<Duration>, min_refresh: Duration) -> Self {
        self.discovery_ttl = ttl;
        self.discovery_min_refresh = min_refresh;
        self
    }

    /// The largest answer body read (default [`DEFAULT_MAX_ANSWER`]); a larger one is
    /// [`Error::TooLarge`].
    pub fn max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer = bytes;
        self
    }

    /// The client. Checks the base URL (absolute http(s)); a trailing `/` is dropped. Redirects
    /// are not followed by a client built here.
    pub fn build(self) -> Result<FacilitatorClient> {
        let base = check_base_url(&self.base)?;
        let http = match self.http {
            Some(http) => http,
            None => {
                // reqwest is built without a bundled TLS provider: install ring's.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let mut b = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .timeout(self.timeout)
                    .connect_timeout(self.connect_timeout.min(self.timeout));
                if let Some(agent) = self.user_agent {
                    b = b.user_agent(agent);
                }
                b.build().map_err(Error::Build)?
            }
        };
        Ok(FacilitatorClient {
            inner: Arc::new(Inner {
                base,
                http,
                api_key: self.api_key,
                max_answer: self.max_answer,
                discovery: DiscoveryCache::new(self.discovery_ttl, self.discovery_min_refresh),
            }),
        })
    }
}

fn check_base_url(url: &str) -> Result<String> {
    let invalid = |problem: &str| Error::InvalidUrl {
        url: url.to_owned(),
        problem: problem.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
        return Err(invalid("not an absolute http(s) URL"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid("a base URL has no query or fragment"));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// What `POST /authorize` or a settlement's status URL answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authorization {
    /// 200: the transfer is confirmed; the proof is issued.
    Confirmed(Box<AuthorizeResponse>),
    /// 202: broadcast, not confirmed yet; poll its status URL.
    Pending(PendingResponse),
}

impl FacilitatorClient {
    /// A client of the facilitator at `base_url` with the defaults.
    pub fn new(base_url: impl Into<String>) -> Result<Self> {
        Self::builder(base_url).build()
    }

    /// A builder for a client of the facilitator at `base_url`
    /// (`https://facilitator.example.com`).
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base: base_url.into(),
            api_key: None,
            http: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            user_agent: None,
            discovery_ttl: Some(DEFAULT_DISCOVERY_TTL),
            discovery_min_refresh: DEFAULT_DISCOVERY_MIN_REFRESH,
            max_answer: DEFAULT_MAX_ANSWER,
        }
    }

    /// The facilitator's base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// Whether the client holds a provider API key.
    pub fn has_api_key(&self) -> bool {
        self.inner.api_key.is_some()
    }

    // -----------------------------------------------------------------------------------------
    // One-time payments
    // -----------------------------------------------------------------------------------------

    /// `POST /authorize`: settles the client-signed transfer and answers the proof once it is
    /// confirmed, or where to poll. The same body again (the same authorization) answers the
    /// same settlement: it is safe to resend while the outcome is unknown.
    pub async fn authorize(&self, req: &AuthorizeRequest) -> Result<Authorization> {
        let url = self.url("/authorize");
        let sent = self.inner.http.post(&url).json(req).send().await;
        self.authorization(url, sent).await
    }

    /// `GET` on a settlement's status URL (as [`PendingResponse::status_url`] or
    /// [`status_url`](Self::status_url) give it).
    pub async fn settlement_at(&self, status_url: &str) -> Result<Authorization> {
        let sent = self.inner.http.get(status_url).send().await;
        self.authorization(status_url.to_owned(), sent).await
    }

    /// `GET /settlements/{key}`: where the settlement of `key`
    /// ([`tollgate_protocol::api::authorize::settlement_key`]) stands; `token` is
    /// `keccak256(claim)` when it was authorized with a claim.
    pub async fn settlement(&self, key: B256, token: Option<B256>) -> Result<Authorization> {
        let url = self.url(&format!("/settlements/{key}"));
        let sent = self
            .inner
            .http
            .get(&url)
            .query(&StatusQuery { token })
            .send()
            .await;
        self.authorization(url, sent).await
    }

    /// The status URL of the settlement `key` for the holder of `claim`:
    /// `{base}/settlements/{key}?token=keccak256(claim)`.
    pub fn status_url(&self, key: B256, claim: B256) -> String {
        format!(
            "{}/settlements/{key}?token={}",
            self.inner.base,
            keccak256(claim)
        )
    }

    async fn authorization(
        &self,
        url: String,
        sent: reqwest::Result<Response>,
    ) -> Result<Authorization> {
        let response = sent.map_err(|e| transport(&url, e))?;
        let status = response.status();
        let body = self.read_body(&url, response, status).await?;
        let decode = |source| Error::Decode {
            url: url.clone(),
            status: status.as_u16(),
            source,
        };
        match status {
            StatusCode::OK => serde_json::from_slice(&body)
                .map(|r| Authorization::Confirmed(Box::new(r)))
                .map_err(decode),
            StatusCode::ACCEPTED => serde_json::from_slice(&body)
                .map(Authorization::Pending)
                .map_err(decode),
            _ => Err(status_error(url.clone(), status, &body)),
        }
    }

    /// `POST /proofs/verify`: whether this facilitator issued the proof (base64, as
    /// `X-PAYMENT` carries it) for a confirmed settlement, unexpired.
    pub async fn verify_proof(&self, proof: &str) -> Result<VerifyProofResponse> {
        let body = VerifyProofRequest {
            proof: proof.to_owned(),
        };
        self.post("/proofs/verify", &body).await
    }

    // -----------------------------------------------------------------------------------------
    // x402 V1
    // -----------------------------------------------------------------------------------------

    /// `POST /verify`: checks an x402 payment against its requirements without settling it.
    pub async fn verify(&self, req: &VerifyRequest) -> Result<VerifyResponse> {
        self.post("/verify", req).await
    }

    /// `POST /settle`: settles an x402 payment. `idempotency_key` names the settler (sent as
    /// `Idempotency-Key`): its retries of the same payload get the first outcome again.
    pub async fn settle(
        &self,
        req: &SettleRequest,
        idempotency_key: Option<&str>,
    ) -> Result<SettleResponse> {
        let url = self.url("/settle");
        let mut rb = self.inner.http.post(&url);
        if let Some(key) = idempotency_key {
            rb = rb.header(IDEMPOTENCY_KEY, key);
        }
        self.send(url, rb.json(req)).await
    }

    /// `GET /supported`: the x402 kinds the facilitator settles.
    pub async fn supported(&self) -> Result<SupportedResponse> {
        self.get("/supported").await
    }

    // -----------------------------------------------------------------------------------------
    // Plans (provider API key for creating and deprecating)
    // -----------------------------------------------------------------------------------------

    /// `POST /plans` (API key): publishes a plan on-chain through the facilitator's relayer and
    /// waits for confirmation. The same idempotency key again returns the same plan.
    pub async fn create_plan(&self, req: &CreatePlanRequest) -> Result<Plan> {
        let url = self.url("/plans");
        let rb = self.authorized(self.inner.http.post(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `GET /plans/{id}?network=`: a plan's on-chain terms and its provider (`network` is
    /// optional when the facilitator serves one).
    pub async fn plan(&self, id: B256, network: Option<&str>) -> Result<Plan> {
        let url = self.url(&format!("/plans/{id}"));
        let rb = self.inner.http.get(&url).query(&network_query(network));
        self.send(url, rb).await
    }

    /// `POST /plans/{id}/deprecate?network=` (API key, the plan's provider only): the plan takes
    /// no new subscriptions; existing ones keep running. Idempotent.
    pub async fn deprecate_plan(&self, id: B256, network: Option<&str>) -> Result<Plan> {
        let url = self.url(&format!("/plans/{id}/deprecate"));
        let rb = self
            .authorized(self.inner.http.post(&url))?
            .query(&network_query(network));
        self.send(url, rb).await
    }

    // -----------------------------------------------------------------------------------------
    // Subscriptions
    // -----------------------------------------------------------------------------------------

    /// `GET /subscriptions/quote`: everything a subscriber signs against (plan terms, nonces,
    /// allowance, the chain's clock).
    pub async fn quote(&self, query: &QuoteQuery) -> Result<SubscriptionQuote> {
        let url = self.url("/subscriptions/quote");
        let rb = self.inner.http.get(&url).query(query);
        self.send(url, rb).await
    }

    /// `POST /subscriptions`: relays a signed `Subscribe` intent and its permit; answers once
    /// the subscription (and its first billing) is confirmed. The same signed intent again
    /// answers the same subscription.
    pub async fn subscribe(&self, req: &SubscribeRequest) -> Result<SubscriptionView> {
        self.post("/subscriptions", req).await
    }

    /// `GET /subscriptions/{id}?network=`: a subscription as the chain holds it.
    pub async fn subscription(&self, id: B256, network: Option<&str>) -> Result<SubscriptionView> {
        let url = self.url(&format!("/subscriptions/{id}"));
        let rb = self.inner.http.get(&url).query(&network_query(network));
        self.send(url, rb).await
    }

    /// `POST /subscriptions/{id}/usage` (API key, the plan's provider): deducts metered usage
    /// from the subscription's overage allowance for the current cycle (the spec's
    /// `deductAllowance`).
    pub async fn deduct(&self, id: B256, req: &DeductRequest) -> Result<AllowanceUsage> {
        let url = self.url(&format!("/subscriptions/{id}/usage"));
        let rb = self.authorized(self.inner.http.post(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `GET /subscriptions/{id}/usage?network=` (API key): the subscription's overage allowance
    /// in its current cycle.
    pub async fn usage(&self, id: B256, network: Option<&str>) -> Result<AllowanceUsage> {
        let url = self.url(&format!("/subscriptions/{id}/usage"));
        let rb = self
            .authorized(self.inner.http.get(&url))?
            .query(&network_query(network));
        self.send(url, rb).await
    }

    /// `POST /subscriptions/{id}/allowance`: relays the subscriber's signed raise of its overage
    /// cap. A `503 Pending` answer means: send the same request again.
    pub async fn raise_allowance(
        &self,
        id: B256,
        req: &RaiseAllowanceRequest,
    ) -> Result<SubscriptionView> {
        self.post(&format!("/subscriptions/{id}/allowance"), req)
            .await
    }

    // -----------------------------------------------------------------------------------------
    // Providers
    // -----------------------------------------------------------------------------------------

    /// `POST /providers/challenge`: the text `address` signs (EIP-191) to register.
    pub async fn challenge(&self, address: Address) -> Result<ChallengeResponse> {
        self.post("/providers/challenge", &ChallengeRequest { address })
            .await
    }

    /// `POST /providers/register`: trades a signed challenge for an API key (shown this once).
    pub async fn register(&self, req: &RegisterRequest) -> Result<RegisterResponse> {
        self.post("/providers/register", req).await
    }

    /// `POST /providers/keys/revoke` (API key): revokes the client's API key.
    pub async fn revoke_api_key(&self) -> Result<RevokeResponse> {
        let url = self.url("/providers/keys/revoke");
        let rb = self.authorized(self.inner.http.post(&url))?;
        self.send(url, rb).await
    }

    // -----------------------------------------------------------------------------------------
    // Webhooks (API key)
    // -----------------------------------------------------------------------------------------

    /// `POST /webhooks/endpoints`: adds an endpoint; the answer carries its signing secret, this
    /// once.
    pub async fn create_endpoint(&self, req: &CreateEndpoint) -> Result<Endpoint> {
        let url = self.url("/webhooks/endpoints");
        let rb = self.authorized(self.inner.http.post(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `GET /webhooks/endpoints`: the provider's endpoints (without secrets).
    pub async fn endpoints(&self) -> Result<Vec<Endpoint>> {
        let url = self.url("/webhooks/endpoints");
        let rb = self.authorized(self.inner.http.get(&url))?;
        self.send(url, rb).await
    }

    /// `GET /webhooks/endpoints/{id}`.
    pub async fn endpoint(&self, id: &str) -> Result<Endpoint> {
        let url = self.segments(&["webhooks", "endpoints", id])?;
        let rb = self.authorized(self.inner.http.get(&url))?;
        self.send(url, rb).await
    }

    /// `PATCH /webhooks/endpoints/{id}`: changes the URL, event types, description or enabled
    /// state.
    pub async fn update_endpoint(&self, id: &str, req: &UpdateEndpoint) -> Result<Endpoint> {
        let url = self.segments(&["webhooks", "endpoints", id])?;
        let rb = self.authorized(self.inner.http.patch(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `DELETE /webhooks/endpoints/{id}`: the endpoint and its pending deliveries.
    pub async fn delete_endpoint(&self, id: &str) -> Result<()> {
        let url = self.segments(&["webhooks", "endpoints", id])?;
        let rb = self.authorized(self.inner.http.delete(&url))?;
        self.send_empty(url, rb).await
    }

    /// `POST /webhooks/endpoints/{id}/rotate`: a new signing secret (in the answer, this once);
    /// the old one keeps signing beside it for the overlap.
    pub async fn rotate_endpoint_secret(&self, id: &str, req: &Rotate) -> Result<Endpoint> {
        let url = self.segments(&["webhooks", "endpoints", id, "rotate"])?;
        let rb = self.authorized(self.inner.http.post(&url))?.json(req);
        self.send(url, rb).await
    }

    /// `GET /webhooks/endpoints/{id}/deliveries?limit=`: the endpoint's latest deliveries.
    pub async fn deliveries(&self, id: &str, page: &Page) -> Result<Vec<Delivery>> {
        let url = self.segments(&["webhooks", "endpoints", id, "deliveries"])?;
        let rb = self.authorized(self.inner.http.get(&url))?.query(page);
        self.send(url, rb).await
    }

    /// `POST /webhooks/endpoints/{id}/deliveries/{event_id}/redeliver`: delivers the event to
    /// the endpoint again (e.g. a dead-lettered one).
    pub async fn redeliver(&self, id: &str, event_id: &str) -> Result<()> {
        let url = self.segments(&[
            "webhooks",
            "endpoints",
            id,
            "deliveries",
            event_id,
            "redeliver",
        ])?;
        let rb = self.authorized(self.inner.http.post(&url))?;
        self.send_empty(url, rb).await
    }

    /// `GET /events?after=&limit=`: the provider's events, oldest first.
    pub async fn events(&self, page: &Page) -> Result<Vec<EventRecord>> {
        let url = self.url("/events");
        let rb = self.authorized(self.inner.http.get(&url))?.query(page);
        self.send(url, rb).await
    }

    // -----------------------------------------------------------------------------------------
    // Analytics (API key)
    // -----------------------------------------------------------------------------------------

    /// `GET /analytics`: the provider's report over a range.
    pub async fn analytics(&self, params: &ReportParams) -> Result<Report> {
        let url = self.url("/analytics");
        let rb = self.authorized(self.inner.http.get(&url))?.query(params);
        self.send(url, rb).await
    }

    // -----------------------------------------------------------------------------------------
    // Plumbing
    // -----------------------------------------------------------------------------------------

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.inner.base)
    }

    /// `{base}/seg/seg/…`, each segment percent-escaped.
    fn segments(&self, segments: &[&str]) -> Result<String> {
        let mut url = reqwest::Url::parse(&self.inner.base).map_err(|e| Error::InvalidUrl {
            url: self.inner.base.clone(),
            problem: e.to_string(),
        })?;
        url.path_segments_mut()
            .map_err(|()| Error::InvalidUrl {
                url: self.inner.base.clone(),
                problem: "cannot take a path".into(),
            })?
            .pop_if_empty()
            .extend(segments);
        Ok(url.into())
    }

    fn authorized(&self, rb: RequestBuilder) -> Result<RequestBuilder> {
        let key = self.inner.api_key.as_deref().ok_or(Error::MissingApiKey)?;
        Ok(rb.bearer_auth(key))
    }

    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = self.url(path);
        let rb = self.inner.http.request(Method::GET, &url);
        self.send(url, rb).await
    }

    async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T> {
        let url = self.url(path);
        let rb = self.inner.http.post(&url).json(body);
        self.send(url, rb).await
    }

    async fn send<T: DeserializeOwned>(&self, url: String, rb: RequestBuilder) -> Result<T> {
        let response = rb.send().await.map_err(|e| transport(&url, e))?;
        let status = response.status();
        let body = self.read_body(&url, response, status).await?;
        if !status.is_success() {
            return Err(status_error(url, status, &body));
        }
        serde_json::from_slice(&body).map_err(|source| Error::Decode {
            url,
            status: status.as_u16(),
            source,
        })
    }

    async fn send_empty(&self, url: String, rb: RequestBuilder) -> Result<()> {
        let response = rb.send().await.map_err(|e| transport(&url, e))?;
        let status = response.status();
        let body = self.read_body(&url, response, status).await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(status_error(url, status, &body))
        }
    }

    /// The answer's body, at most `max_answer` bytes. An error answer's body that cannot be read
    /// whole is empty (the status says enough).
    async fn read_body(
        &self,
        url: &str,
        response: Response,
        status: StatusCode,
    ) -> Result<Vec<u8>> {
        let limit = self.inner.max_answer;
        match read_limited(response, limit).await {
            Ok(Some(body)) => Ok(body),
            _ if !status.is_success() => Ok(Vec::new()),
            Ok(None) => Err(Error::TooLarge {
                url: url.to_owned(),
                limit,
            }),
            Err(e) => Err(transport(url, e)),
        }
    }
}

fn network_query(network: Option<&str>) -> NetworkQuery {
    NetworkQuery {
        network: network.map(str::to_owned),
    }
}

/// Reads at most `limit` bytes of body; `None` when it is longer.
async fn read_limited(mut response: Response, limit: usize) -> reqwest::Result<Option<Vec<u8>>> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// A transport failure of one attempt: a connection refused never reached the facilitator.
fn transport(url: &str, source: reqwest::Error) -> Error {
    let url = url.to_owned();
    if source.is_connect() {
        Error::Transport {
            url,
            source,
            never_sent: true,
        }
    } else if source.is_timeout() {
        Error::Timeout { url, source }
    } else {
        Error::Transport {
            url,
            never_sent: source.is_builder(),
            source,
        }
    }
}

fn status_error(url: String, status: StatusCode, body: &[u8]) -> Error {
    let parsed = serde_json::from_slice::<ApiErrorBody>(body).ok();
    let raw = match parsed {
        Some(_) => String::new(),
        None => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    Error::Status {
        url,
        status: status.as_u16(),
        body: parsed,
        raw,
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
