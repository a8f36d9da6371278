//! `tollgate gateway`: a reverse proxy that puts any upstream HTTP API behind a Tollgate payment
//! gate by route prefix and price, with no code from the provider. Request and response bodies
//! stream both ways; headers pass through except hop-by-hop ones.
//!
//! **Paths.** The gateway prices the path the upstream will serve and forwards exactly that path.
//! It first brings the path to one canonical spelling: percent-escapes of unreserved characters
//! (`A-Z a-z 0-9 - . _ ~`) decoded (`/v1/%70remium` is `/v1/premium`), other escapes in
//! upper-case hex, runs of `/` collapsed (`//paid` is `/paid`). Paths with dot segments or
//! encoded separators (`/free/../paid`, `/v1/./x`, `/free/%2e%2e/paid`, `/free%2f..%2fpaid`,
//! `%5C`, a raw `\`) or encoded control characters (`%00`) are refused with 400 `InvalidPath`.
//! Routes then match the canonical path by longest prefix, segment by segment. **Case:** some
//! upstreams fold case (Express by default) and some drop `;parameters` from a segment (Tomcat,
//! Spring), so a path is routed both exactly and with case folded and `;parameters` dropped; when
//! the two readings reach different routes (`/v1/PREMIUM` next to `/v1` and `/v1/premium`,
//! `/PAID` or `/paid;x` next to `/paid`) the request is refused with 400 `AmbiguousPath`, with
//! or without `pass_unmatched`. Write the route's spelling; case below a route (`/v1/Other`)
//! and on unmatched paths is free. The upstream receives the canonical path and the query as
//! sent. Refusals carry the error shape `{"error": {"code", "message"}}`.
//!
//! ```toml
//! listen = "127.0.0.1:8090"
//! upstream = "http://127.0.0.1:9000"
//!
//! [gate]
//! network = "base-sepolia"
//! token = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
//! token_name = "USDC"
//! token_version = "2"
//! pay_to = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
//! facilitator = "http://127.0.0.1:8402"
//!
//! api_key_env = "TOLLGATE_API_KEY"   # the provider's API key, for metered routes
//!
//! [[routes]]
//! prefix = "/v1/quote"
//! price = "500000"          # one-time, in the token's smallest unit (0.50)
//! description = "A price quote"
//!
//! [[routes]]
//! prefix = "/v1/chat"
//! plan = "0x6b1f…"          # subscribers of this plan pass with X-Service-Sub
//! price = "250000"          # everyone else: the 402 offers the plan and this one-time price
//!
//! [[routes]]
//! prefix = "/v1/process"
//! plan = "0x6b1f…"
//! metered = "0.10"          # deducted from the subscriber's allowance per admitted request
//!
//! [[routes]]
//! prefix = "/healthz"
//! free = true
//! ```
//!
//! **Plans.** A `plan` route's terms come from the facilitator (`GET /plans/{id}`) and the
//! subscription check from its discovery (`/.well-known/tollgate`: the network's subscriptions
//! contract and the `rpcUrl` it publishes), so the config names only the facilitator, the plan
//! and prices. Without a published `rpcUrl` (the facilitator's `networks.<n>.public_rpc_url`)
//! set `gate.rpc_url_env`; the gateway refuses to start otherwise. A deprecated or unknown plan
//! is a startup error too. `X-Service-Sub` on a route without a plan is answered 402
//! `SubscriptionNotActive` (`reason: "subscription_not_offered"`).
//!
//! **MCP tools.** An `[mcp]` section serves priced MCP tools over streamable HTTP at `path`
//! (default `/mcp`), each a call to the upstream, paid per call over x402's MCP transport (see
//! [`mcp`]):
//!
//! ```toml
//! [mcp]
//! [[mcp.tools]]
//! name = "quote"
//! description = "A price quote"
//! upstream_path = "/v1/quote"
//! method = "GET"             # arguments as query parameters (POST: a JSON body)
//! price = "50000"            # per call, smallest units; absent: free
//! ```
//!
//! Its sessions are bounded: `mcp.max_sessions` (default 1024; an `initialize` beyond is
//! answered 503 `Unavailable`), `mcp.max_sessions_per_client` (default 32, 429 `RateLimited`;
//! clients told apart by `server.client_address`, loopback and private ones only with
//! `server.rate_limit_private`), and `mcp.session_idle_timeout_secs` (default 120: a session
//! with no request in flight that long is closed). An open session holds about 60 KB.
//!
//! **State.** The SQLite memo store's directory (`.tollgate/` by default) is created at start;
//! a path that cannot be created or opened is named in the error.

mod config;
mod error;
pub mod mcp;
mod path;
mod proxy;

use std::{fmt, sync::Arc, time::Duration};

use axum::{
    Router,
    extract::{Request, State},
    http::{StatusCode, Uri, uri::PathAndQuery},
    response::Response,
    routing::{MethodRouter, any},
};
use tollgate_gate::{BuildError, Gate, Pricing};
use tollgate_protocol::ApiErrorCode;
use tollgate_server::refusal;
use tower::ServiceExt as _;

pub use config::{Config, GateConfig, McpConfig, Route, ToolConfig};
pub use error::{Error, Result};
use proxy::Upstream;

/// What the binary reads from the environment for the gateway (see [`GateConfig::memo_secret_env`],
/// [`GateConfig::api_key_env`], [`GateConfig::rpc_url_env`]). `Debug` shows none of it.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Secrets {
    /// The 32-byte memo secret; `None`: random per process.
    pub memo_secret: Option<[u8; 32]>,
    /// The provider's facilitator API key (metered routes).
    pub api_key: Option<String>,
    /// A JSON-RPC URL of the chain, overriding the facilitator's published `rpcUrl`.
    pub rpc_url: Option<String>,
}

impl Secrets {
    /// No secrets: a random memo secret, no API key, the published `rpcUrl`.
    pub fn new() -> Self {
        Self::default()
    }

    /// With the memo secret.
    pub fn memo_secret(mut self, secret: [u8; 32]) -> Self {
        self.memo_secret = Some(secret);
        self
    }

    /// With the provider's API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// With a JSON-RPC URL of the chain.
    pub fn rpc_url(mut self, url: impl Into<String>) -> Self {
        self.rpc_url = Some(url.into());
        self
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |v: bool| if v { "<set>" } else { "<unset>" };
        f.debug_struct("Secrets")
            .field("memo_secret", &set(self.memo_secret.is_some()))
            .field("api_key", &set(self.api_key.is_some()))
            .field("rpc_url", &set(self.rpc_url.is_some()))
            .finish()
    }
}

/// The host of a base URL (`http://api.example.com:8090` → `api.example.com`), for the MCP
/// endpoint's `Host` check.
fn url_host(url: &str) -> Option<String> {
    let uri: Uri = url.parse().ok()?;
    uri.host().map(|h| h.trim_matches(['[', ']']).to_owned())
}

/// Builds the gateway's router: the gate (loading the routes' plans from the facilitator), the
/// memo store (its directory created), and a proxy behind each route's payment gate.
pub async fn router(config: &Config, secrets: &Secrets) -> Result<Router> {
    let public_url = config
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", config.listen));
    let g = &config.gate;
    create_state_dir(&g.memo_store)?;
    let mut builder = Gate::builder()
        .network(g.network.clone())
        .token(g.token, g.token_name.clone(), g.token_version.clone())
        .token_decimals(g.token_decimals)
        .pay_to(g.pay_to)
        .facilitator(g.facilitator.clone())
        .public_url(public_url.clone())
        .memo_ttl(Duration::from_secs(g.memo_ttl_secs))
        .pending_hold(Duration::from_secs(g.pending_hold_secs))
        .memo_store_url(g.memo_store.clone());
    for plan in config.plans() {
        builder = builder.plan(plan);
    }
    if let Some(secret) = secrets.memo_secret {
        builder = builder.memo_secret(secret);
    }
    if let Some(key) = &secrets.api_key {
        builder = builder.api_key(key.clone());
    }
    if let Some(url) = &secrets.rpc_url {
        builder = builder.rpc_url(url.clone());
    }
    let gate = builder.build().await.map_err(|e| gate_error(config, e))?;
    let upstream = Upstream::new(
        &config.upstream,
        Duration::from_secs(config.upstream_timeout_secs),
    )?;
    let mut routes = Vec::with_capacity(config.routes.len());
    for (i, (prefix, r)) in config.routes()?.into_iter().enumerate() {
        let mut target = any(proxy::proxy);
        if !r.free {
            let pricing = r
                .plan
                .map(Pricing::subscription)
                .into_iter()
                .chain(r.price.map(Pricing::one_time));
            let mut layer = gate
                .payment_gate(pricing)
                .description(r.description.clone())
                .mime_type(r.mime_type.clone())
                .paywall(r.paywall)
                .payment_identifier(r.payment_identifier)
                .mpp(r.mpp);
            if let Some(amount) = r
                .metered_amount(g.token_decimals)
                .map_err(|e| Error::Invalid(format!("routes[{i}].metered: {e}")))?
            {
                layer = layer.metered(amount);
            }
            target = target.layer(layer);
        }
        routes.push((prefix, target.with_state(upstream.clone())));
    }
    let mut router = Router::new();
    if let Some(m) = &config.mcp {
        let hosts = url_host(&public_url).into_iter().collect();
        let limits = mcp::SessionLimits {
            max_sessions: m.max_sessions,
            max_per_client: m.max_sessions_per_client,
            idle_timeout: Duration::from_secs(m.session_idle_timeout_secs),
            client: config.server.client_address,
            limit_private: config.server.rate_limit_private,
        };
        let service = mcp::service(
            gate.clone(),
            m.tools.clone(),
            upstream.clone(),
            hosts,
            limits,
        );
        router = router.nest_service(&m.path, service);
    }
    let dispatch = Dispatch {
        routes: path::RouteTable::new(routes),
        unmatched: config
            .pass_unmatched
            .then(|| any(proxy::proxy).with_state(upstream)),
    };
    Ok(router.fallback(route).with_state(Arc::new(dispatch)))
}

/// Creates the directory of a `sqlite://PATH` memo store (not of `sqlite::memory:`), naming the
/// path it cannot create.
fn create_state_dir(memo_store: &str) -> Result<()> {
    let Some(path) = sqlite_path(memo_store) else {
        return Ok(());
    };
    match std::path::Path::new(path).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            std::fs::create_dir_all(dir).map_err(|source| Error::StateDir {
                path: dir.display().to_string(),
                source,
            })
        }
        _ => Ok(()),
    }
}

/// The file of a `sqlite://PATH[?options]` URL.
fn sqlite_path(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("sqlite://")?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && !path.starts_with(':')).then_some(path)
}

/// A gate that cannot build, in the gateway's terms: the config key to set, the memo store's
/// path.
fn gate_error(config: &Config, e: BuildError) -> Error {
    match e {
        BuildError::NoRpc { network } => Error::Invalid(format!(
            "routes sell plans, but there is no chain to check subscriptions on: the facilitator \
             at {} publishes no rpcUrl for network {network:?} (its \
             networks.<n>.public_rpc_url); set gate.rpc_url_env",
            config.gate.facilitator
        )),
        BuildError::Store(source) => match sqlite_path(&config.gate.memo_store) {
            Some(path) => Error::MemoStore {
                path: path.to_owned(),
                source,
            },
            None => Error::Gate(Box::new(BuildError::Store(source))),
        },
        e => Error::Gate(Box::new(e)),
    }
}

/// The routes, each a proxy behind its payment gate (or none, for free routes).
#[derive(Debug)]
struct Dispatch {
    routes: path::RouteTable<MethodRouter>,
    /// The free proxy for paths under no route, with `pass_unmatched`.
    unmatched: Option<MethodRouter>,
}

/// Brings the request's path to its canonical form, prices it by its route and hands it on with
/// that path: the path that was priced is the path the upstream is asked for.
async fn route(State(dispatch): State<Arc<Dispatch>>, mut req: Request) -> Response {
    let raw = req.uri().path();
    let canonical = match path::canonicalize(raw) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(path = %raw, reason = %e, "refused a path");
            return refusal(
                StatusCode::BAD_REQUEST,
                ApiErrorCode::InvalidPath,
                &e.to_string(),
            );
        }
    };
    let target = match dispatch.routes.route(&canonical) {
        path::Routed::To(Some(target)) => target,
        path::Routed::To(None) => match &dispatch.unmatched {
            Some(target) => target,
            None => {
                return refusal(
                    StatusCode::NOT_FOUND,
                    ApiErrorCode::NotFound,
                    "no such route on this gateway",
                );
            }
        },
        path::Routed::Ambiguous { strict, loose } => {
            let name = |r: Option<&str>| r.map_or("no route".to_owned(), |r| format!("route {r}"));
            tracing::debug!(path = %raw, "refused a path whose route depends on case or ;parameters");
            return refusal(
                StatusCode::BAD_REQUEST,
                ApiErrorCode::AmbiguousPath,
                &format!(
                    "the path is under {} as written but under {} ignoring case and ;parameters; \
                     spell the route as configured",
                    name(strict),
                    name(loose)
                ),
            );
        }
    };
    if canonical.as_str() != raw {
        let Some(uri) = with_path(req.uri(), canonical.as_str()) else {
            return refusal(
                StatusCode::BAD_REQUEST,
                ApiErrorCode::InvalidPath,
                "the path is not valid",
            );
        };
        *req.uri_mut() = uri;
    }
    match target.clone().oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// `uri` with its path replaced by `path` and its query kept as sent.
fn with_path(uri: &Uri, path: &str) -> Option<Uri> {
    let path_and_query = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(path_and_query).ok()?);
    Uri::from_parts(parts).ok()
}

/// Serves the gateway on `listener` under `limits` ([`Config::limits`]) until `shutdown`.
pub async fn serve(
    app: Router,
    listener: tokio::net::TcpListener,
    limits: &tollgate_server::Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tollgate_server::serve(listener, app, limits, shutdown).await
}
