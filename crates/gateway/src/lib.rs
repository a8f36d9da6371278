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
//! [[routes]]
//! prefix = "/v1/quote"
//! price = "500000"          # one-time, in the token's smallest unit (0.50)
//! description = "A price quote"
//!
//! [[routes]]
//! prefix = "/healthz"
//! free = true
//! ```

mod path;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use alloy::primitives::Address;
use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, HeaderName, StatusCode, Uri, header, uri::PathAndQuery},
    response::{IntoResponse, Response},
    routing::{MethodRouter, any},
};
use serde::Deserialize;
use tollgate_gate::{Gate, Pricing};
use tollgate_protocol::Amount;
use tower::ServiceExt as _;

/// The gateway's configuration (TOML; unknown keys are errors).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the gateway listens (default `127.0.0.1:8090`).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Base URL clients reach the gateway at (default `http://` + listen); the 402's `resource`
    /// URLs are built on it.
    #[serde(default)]
    pub public_url: Option<String>,
    /// The upstream API's base URL.
    pub upstream: String,
    /// Timeout for one upstream request (default 30 s).
    #[serde(default = "default_upstream_timeout")]
    pub upstream_timeout_secs: u64,
    /// Paths under no route: refused with 404 (default) or proxied without payment (in their
    /// canonical form). A case or `;parameter` variant of a route is not "under no route": it is
    /// refused with 400 `AmbiguousPath` either way.
    #[serde(default)]
    pub pass_unmatched: bool,
    /// `[server]`: slow-client timeouts, header size, connection cap and the per-client rate
    /// limit (see [`tollgate_server::ServerConfig`]; behind a reverse proxy set
    /// `client_address = "x-forwarded-for"`).
    #[serde(default)]
    pub server: tollgate_server::ServerConfig,
    /// The payment terms.
    pub gate: GateConfig,
    /// Route prefixes and their prices.
    pub routes: Vec<Route>,
}

/// `[gate]`: what payments must pay and where they settle.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// Network name (an x402 V1 name, or one the facilitator serves).
    pub network: String,
    /// Token contract.
    pub token: Address,
    /// The token's EIP-712 domain name (default "USD Coin").
    #[serde(default = "default_token_name")]
    pub token_name: String,
    /// The token's EIP-712 domain version (default "2").
    #[serde(default = "default_token_version")]
    pub token_version: String,
    /// Who gets paid.
    pub pay_to: Address,
    /// The facilitator's base URL.
    pub facilitator: String,
    /// The once-only memo set: `sqlite://PATH` (default `.tollgate/gateway-memos.db`) or
    /// `postgres://…` (shared by several gateway replicas).
    #[serde(default = "default_memo_store")]
    pub memo_store: String,
    /// Name of the environment variable holding the 32-byte memo secret as hex; replicas must
    /// share it. Unset: a random secret (one replica only; 402 terms die with the process).
    #[serde(default)]
    pub memo_secret_env: Option<String>,
    /// How long 402 terms can be paid, seconds (default 300).
    #[serde(default = "default_memo_ttl")]
    pub memo_ttl_secs: u64,
}

/// One `[[routes]]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Path prefix (`/v1/quote` matches `/v1/quote` and `/v1/quote/...`, not `/v1/quotes`; the
    /// longest matching prefix wins). Written canonically: no `//`, dot segments, `;`, escapes of
    /// unreserved characters or lower-case hex escapes. Prefixes that differ only in case are
    /// the same route to a case-folding upstream and are refused; a request spelling a route in
    /// another case (`/V1/QUOTE`) is refused with 400 (see the crate docs).
    pub prefix: String,
    /// One-time price per request, smallest units.
    #[serde(default)]
    pub price: Option<Amount>,
    /// No payment needed.
    #[serde(default)]
    pub free: bool,
    /// The 402's `description`.
    #[serde(default)]
    pub description: String,
    /// The 402's `mimeType` (default `application/json`).
    #[serde(default = "default_mime")]
    pub mime_type: String,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8090))
}
fn default_upstream_timeout() -> u64 {
    30
}
fn default_token_name() -> String {
    "USD Coin".into()
}
fn default_token_version() -> String {
    "2".into()
}
fn default_memo_store() -> String {
    "sqlite://.tollgate/gateway-memos.db".into()
}
fn default_memo_ttl() -> u64 {
    300
}
fn default_mime() -> String {
    "application/json".into()
}

/// Why the gateway cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The config is not valid TOML for this schema (the message names the key).
    #[error("config: {0}")]
    Parse(#[from] toml::de::Error),
    /// A value is unusable.
    #[error("config: {0}")]
    Invalid(String),
    /// The gate could not be built.
    #[error("gate: {0}")]
    Gate(#[from] tollgate_gate::BuildError),
}

impl Config {
    /// Parses and checks a config.
    pub fn from_toml_str(s: &str) -> Result<Self, Error> {
        let config: Self = toml::from_str(s)?;
        if !(config.upstream.starts_with("http://") || config.upstream.starts_with("https://")) {
            return Err(Error::Invalid(format!(
                "upstream: {:?} is not an http(s) URL",
                config.upstream
            )));
        }
        config.limits()?;
        if config.routes.is_empty() {
            return Err(Error::Invalid(
                "routes: at least one [[routes]] entry is required".into(),
            ));
        }
        for (i, r) in config.routes.iter().enumerate() {
            if !r.prefix.starts_with('/') || r.prefix.contains('{') || r.prefix.contains('*') {
                return Err(Error::Invalid(format!(
                    "routes[{i}].prefix: {:?} must be a literal path starting with /",
                    r.prefix
                )));
            }
            match (r.price, r.free) {
                (Some(_), true) => {
                    return Err(Error::Invalid(format!(
                        "routes[{i}]: set price or free, not both"
                    )));
                }
                (None, false) => {
                    return Err(Error::Invalid(format!(
                        "routes[{i}]: set price (smallest units) or free = true"
                    )));
                }
                _ => {}
            }
        }
        config.prefixes()?;
        Ok(config)
    }

    /// The routes' prefixes, checked: written canonically, and no two covering the same paths.
    fn prefixes(&self) -> Result<Vec<path::Prefix>, Error> {
        let mut prefixes: Vec<path::Prefix> = Vec::with_capacity(self.routes.len());
        for (i, r) in self.routes.iter().enumerate() {
            let prefix = path::Prefix::parse(&r.prefix)
                .map_err(|e| Error::Invalid(format!("routes[{i}].prefix: {e}")))?;
            if let Some(j) = prefixes.iter().position(|p| p.overlaps(&prefix)) {
                return Err(Error::Invalid(format!(
                    "routes[{i}].prefix: {:?} covers the same paths as routes[{j}] (route \
                     prefixes match regardless of case)",
                    r.prefix
                )));
            }
            prefixes.push(prefix);
        }
        Ok(prefixes)
    }

    /// The HTTP server's limits from `[server]`, with the request timeout raised to at least
    /// `upstream_timeout_secs` + 5 s, so that a slow upstream is answered 504, not 408.
    pub fn limits(&self) -> Result<tollgate_server::Limits, Error> {
        let mut limits = self
            .server
            .limits()
            .map_err(|e| Error::Invalid(format!("server.{e}")))?;
        limits.request_timeout = limits.request_timeout.max(Duration::from_secs(
            self.upstream_timeout_secs.saturating_add(5),
        ));
        Ok(limits)
    }

    /// Reads and parses a config file.
    pub fn load(path: &std::path::Path) -> Result<Self, Error> {
        let s = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml_str(&s)
    }
}

#[derive(Clone, Debug)]
struct Upstream {
    base: String,
    http: reqwest::Client,
}

/// Builds the gateway's router. `memo_secret` comes from the binary (see
/// [`GateConfig::memo_secret_env`]).
pub async fn router(config: &Config, memo_secret: Option<[u8; 32]>) -> Result<Router, Error> {
    let public_url = config
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", config.listen));
    let g = &config.gate;
    let mut builder = Gate::builder()
        .network(g.network.clone())
        .token(g.token, g.token_name.clone(), g.token_version.clone())
        .pay_to(g.pay_to)
        .facilitator(g.facilitator.clone())
        .public_url(public_url)
        .memo_ttl(Duration::from_secs(g.memo_ttl_secs))
        .memo_store_url(g.memo_store.clone());
    if let Some(secret) = memo_secret {
        builder = builder.memo_secret(secret);
    }
    let gate = builder.build().await?;
    let upstream = Upstream {
        base: config.upstream.trim_end_matches('/').to_owned(),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(config.upstream_timeout_secs))
            .build()
            .map_err(|e| Error::Invalid(format!("upstream client: {e}")))?,
    };
    let mut routes = Vec::with_capacity(config.routes.len());
    for (prefix, r) in config.prefixes()?.into_iter().zip(&config.routes) {
        let mut target = any(proxy);
        if let Some(price) = r.price {
            target = target.layer(
                gate.payment_gate([Pricing::one_time(price)])
                    .description(r.description.clone())
                    .mime_type(r.mime_type.clone()),
            );
        }
        routes.push((prefix, target.with_state(upstream.clone())));
    }
    let dispatch = Dispatch {
        routes: path::RouteTable::new(routes),
        unmatched: config
            .pass_unmatched
            .then(|| any(proxy).with_state(upstream)),
    };
    Ok(Router::new().fallback(route).with_state(Arc::new(dispatch)))
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
            return refusal(StatusCode::BAD_REQUEST, "InvalidPath", &e.to_string());
        }
    };
    let target = match dispatch.routes.route(&canonical) {
        path::Routed::To(Some(target)) => target,
        path::Routed::To(None) => match &dispatch.unmatched {
            Some(target) => target,
            None => {
                return refusal(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    "no such route on this gateway",
                );
            }
        },
        path::Routed::Ambiguous { strict, loose } => {
            let name = |r: Option<&str>| r.map_or("no route".to_owned(), |r| format!("route {r}"));
            tracing::debug!(path = %raw, "refused a path whose route depends on case or ;parameters");
            return refusal(
                StatusCode::BAD_REQUEST,
                "AmbiguousPath",
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
                "InvalidPath",
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

/// A refusal in the error shape of Tollgate's services, `{"error": {"code", "message"}}`.
fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    let body = tollgate_protocol::ApiErrorBody::new(code, message);
    (status, axum::Json(body)).into_response()
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

/// Headers that belong to one hop (RFC 9110 §7.6.1) and never pass through a proxy.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

fn copy_headers(from: &HeaderMap, skip_host: bool) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(from.len());
    for (name, value) in from {
        if HOP_BY_HOP.contains(name)
            || name == header::TRANSFER_ENCODING
            || (skip_host && name == header::HOST)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

async fn proxy(State(up): State<Upstream>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path_and_query}", up.base);
    let request = up
        .http
        .request(parts.method.clone(), &url)
        .headers(copy_headers(&parts.headers, true))
        .body(reqwest::Body::wrap_stream(body.into_data_stream()));
    match request.send().await {
        Ok(resp) => {
            let status = resp.status();
            let headers = copy_headers(resp.headers(), false);
            let mut out = Response::new(Body::from_stream(resp.bytes_stream()));
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            out
        }
        Err(e) => {
            tracing::error!(%url, error = %e, "upstream request failed");
            let status = if e.is_timeout() {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            let code = if status == StatusCode::GATEWAY_TIMEOUT {
                "UpstreamTimeout"
            } else {
                "UpstreamUnavailable"
            };
            refusal(status, code, "the upstream API is unavailable")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
upstream = "http://127.0.0.1:9000"
[gate]
network = "base-sepolia"
token = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
pay_to = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
facilitator = "http://127.0.0.1:8402"
[[routes]]
prefix = "/v1/quote"
price = "500000"
[[routes]]
prefix = "/healthz"
free = true
"#;

    #[test]
    fn parses_and_validates() {
        let c = Config::from_toml_str(GOOD).unwrap();
        assert_eq!(c.routes[0].price, Some(Amount::from_units(500_000)));
        assert!(c.routes[1].free);
        assert_eq!(c.listen, default_listen());
        for (bad, needle) in [
            (GOOD.replace("price = \"500000\"", ""), "routes[0]"),
            (
                GOOD.replace("free = true", "free = true\nprice = \"1\""),
                "not both",
            ),
            (GOOD.replace("upstream = ", "nope = 1\nupstream = "), "nope"),
            (GOOD.replace("http://127.0.0.1:9000", "ftp://x"), "upstream"),
            (GOOD.replace("\"/v1/quote\"", "\"v1\""), "prefix"),
            (
                GOOD.replace("\"/v1/quote\"", "\"/v1//quote\""),
                "write \"/v1/quote\"",
            ),
            (
                GOOD.replace("\"/healthz\"", "\"/V1/Quote/\""),
                "routes[1].prefix: \"/V1/Quote/\" covers the same paths as routes[0]",
            ),
        ] {
            let err = Config::from_toml_str(&bad).unwrap_err().to_string();
            assert!(err.contains(needle), "{err} should mention {needle}");
        }
    }

    #[test]
    fn the_example_config_parses() {
        Config::from_toml_str(include_str!("../../../examples/gateway.toml")).unwrap();
    }

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "close".parse().unwrap());
        h.insert(header::HOST, "x".parse().unwrap());
        h.insert("x-custom", "1".parse().unwrap());
        let out = copy_headers(&h, true);
        assert!(out.get(header::CONNECTION).is_none() && out.get(header::HOST).is_none());
        assert_eq!(out.get("x-custom").unwrap(), "1");
    }
}
