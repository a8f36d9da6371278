//! The HTTP surface: the router and the server, and per area (`settlements`, `x402`,
//! `subscriptions`, `plans`, `providers`, `webhooks`, `analytics`, `health`, and the dashboard's
//! in [`crate::dashboard`]) the handlers that map the wire (`tollgate-protocol` types, path and
//! query parameters, headers) to a call of the area's service ([`Facilitator::settlements`],
//! [`Facilitator::plans`], …) and back. The one place a domain [`Error`](crate::error::Error)
//! becomes a response is [`error`]; the extractors that answer malformed requests in the same
//! shape are in [`extract`].
//!
//! Each area's module declares its routes once, in its `routes` function: method, path
//! template, handler and OpenAPI operation together ([`Routes`]). [`routes`] collects the areas
//! in order, and from that one list come the router, the OpenAPI document
//! ([`crate::openapi`]) and the path templates the metrics are labelled with
//! ([`crate::openapi::paths`]).
//!
//! A new endpoint: its request and response types in `tollgate-protocol`; one handler in
//! `api/<area>.rs`, with its `r.get(path, handler, op(…)…)` line in that module's `routes`; one
//! method of the area's service (`Plans`, `Subscriptions`, …); and the client's method in
//! `tollgate-client`.

use std::{future::Future, sync::Arc, time::Instant};

use axum::{
    Router,
    extract::{DefaultBodyLimit, MatchedPath, Request, State},
    middleware::{self, Next},
    response::Response,
};

use tower::{Layer as _, ServiceExt as _};
use tower_http::cors::{Any, CorsLayer};

use crate::{api::error::ApiError, error::Error, facilitator::Facilitator};
pub(crate) use routes::Routes;

mod analytics;
pub(crate) mod error;
pub(crate) mod extract;
mod health;
mod plans;
pub(crate) mod providers;
mod routes;
mod settlements;
mod subscriptions;
mod webhooks;
mod x402;

/// Default request body limit (64 KiB).
pub const DEFAULT_MAX_BODY: usize = 64 * 1024;

/// Every route of the facilitator with its OpenAPI operation, area by area; the one list the
/// router, the OpenAPI document ([`crate::openapi`]) and the metrics' route labels are built
/// from.
pub(crate) fn routes() -> Routes {
    let mut r = Routes::new();
    settlements::routes(&mut r);
    subscriptions::routes(&mut r);
    webhooks::routes(&mut r);
    analytics::routes(&mut r);
    crate::dashboard::routes(&mut r);
    providers::routes(&mut r);
    plans::routes(&mut r);
    x402::routes(&mut r);
    health::routes(&mut r);
    r
}

/// The facilitator's router.
pub fn router(f: Facilitator) -> Router {
    let app = routes()
        .router()
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .fallback(|| async { Error::NotFound("no such endpoint; see /openapi.json".into()) });
    // Inside the metrics layer, so that rate-limited and timed-out requests are counted too.
    f.settings()
        .server
        .layer(app)
        .layer(middleware::from_fn_with_state(f.clone(), observe))
        .layer(middleware::from_fn(cross_origin))
        .layer(DefaultBodyLimit::max(f.settings().max_body_bytes))
        .with_state(f)
}

/// How often [`serve`] reads the relayers' funds afresh (see [`crate::funds`]).
const FUNDS_WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves `f` on `listener` under its [`Settings::server`](crate::Settings::server) limits until
/// `shutdown` resolves; in-flight requests (settlements included) finish first.
pub async fn serve(
    f: Facilitator,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Relayer accounts are leased before the first request, and renewed in the background
    // (see `crate::replica`).
    let held = f.hold_relayers().await;
    tracing::info!(
        replica = f.replica_id(),
        relayers = held.len(),
        of = f.relayers().len(),
        "relayer accounts held"
    );
    let _keep_leases = AbortOnDrop(tokio::spawn(Arc::clone(f.core()).keep_leases()));
    // Unfinished `/authorize` settlements (a crash, a slow chain, a replica that died) are driven
    // to their end in the background, by one replica of a fleet at a time; the task stops with
    // the server.
    let sweeper = tokio::spawn({
        let f = f.clone();
        async move {
            loop {
                tokio::time::sleep(RECONCILE_EVERY).await;
                if f.core().lead(crate::replica::RECONCILER).await {
                    f.settlements().reconcile().await;
                }
            }
        }
    });
    let _stop_sweeper = AbortOnDrop(sweeper);
    // Relayer funds are read now and then even when no payment comes, so that a relayer falling
    // under the floor (gas spent by the keeper, a price rise) is reported before it runs dry.
    let _watch_funds = AbortOnDrop(tokio::spawn({
        let f = f.clone();
        async move {
            loop {
                f.core().watch_funds().await;
                tokio::time::sleep(FUNDS_WATCH_EVERY).await;
            }
        }
    }));
    let limits = f.settings().server.clone();
    let served =
        tollgate_server::serve_prepared(listener, router(f.clone()), &limits, shutdown).await;
    // In-flight requests are done: the other replicas may take this one's leases at once.
    f.release_leases().await;
    served
}

/// How often unfinished settlements are driven forward in the background.
const RECONCILE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Stops a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether a browser page of another origin may call `path`: the calls a gate's paywall page
/// makes (`POST /authorize`, the discovery document, the status URL). They are authenticated
/// by the payer's signature and claim only (no cookies, no API key), so any origin may make
/// them; every other endpoint stays same-origin.
fn cross_origin_path(path: &str) -> bool {
    path == "/authorize" || path == "/.well-known/tollgate" || path.starts_with("/settlements/")
}

/// The CORS policy of [`cross_origin_path`]: any origin; preflights allow `GET` and `POST` with a
/// `Content-Type` header and may be cached for ten minutes.
fn cors() -> CorsLayer {
    use axum::http::{Method, header};
    CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([header::CONTENT_TYPE])
        .max_age(std::time::Duration::from_secs(600))
}

/// [`cors`] (tower-http's [`CorsLayer`]) on [`cross_origin_path`]: an `OPTIONS` request there is
/// a preflight, answered here, outside the other layers; other responses there are marked
/// readable by any origin. Other paths pass through untouched.
async fn cross_origin(req: Request, next: Next) -> Response {
    if !cross_origin_path(req.uri().path()) {
        return next.run(req).await;
    }
    let rest = tower::service_fn(move |req: Request| {
        let next = next.clone();
        async move { Ok::<_, std::convert::Infallible>(next.run(req).await) }
    });
    match cors().layer(rest).oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// Records every request's route template, status and latency in the facilitator's metrics.
async fn observe(State(f): State<Facilitator>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let started = Instant::now();
    let response = next.run(req).await;
    f.metrics()
        .http_request(&route, response.status().as_u16(), started.elapsed());
    response
}
