//! The HTTP surface: the router and the server, and per area the handlers that map the wire
//! (`tollgate-protocol` types, path and query parameters, headers) to the domain
//! ([`Facilitator`] methods) and back. The one place a domain [`Error`](crate::error::Error)
//! becomes a response is [`error`]; the extractors that answer malformed requests in the same
//! shape are in [`extract`].

use std::{future::Future, time::Instant};

use axum::{
    Router,
    extract::{DefaultBodyLimit, MatchedPath, Request, State},
    middleware::{self, Next},
    response::Response,
    routing::{get, post},
};

use tower::{Layer as _, ServiceExt as _};
use tower_http::cors::{Any, CorsLayer};

use crate::{api::error::ApiError, error::Error, facilitator::Facilitator};

mod analytics;
pub(crate) mod error;
pub(crate) mod extract;
mod health;
mod plans;
pub(crate) mod providers;
mod settlements;
mod subscriptions;
mod webhooks;
mod x402;

/// Default request body limit (64 KiB).
pub const DEFAULT_MAX_BODY: usize = 64 * 1024;

/// The facilitator's router.
pub fn router(f: Facilitator) -> Router {
    let app = Router::new()
        .route("/authorize", post(settlements::authorize))
        .route("/settlements/{key}", get(settlements::status))
        .route(
            "/subscriptions",
            get(subscriptions::list).post(subscriptions::create),
        )
        .route("/subscriptions/quote", get(subscriptions::quote))
        .route("/subscriptions/{id}", get(subscriptions::show))
        .route(
            "/subscriptions/{id}/usage",
            get(subscriptions::usage).post(subscriptions::deduct),
        )
        .route("/subscriptions/{id}/allowance", post(subscriptions::raise))
        .route("/subscriptions/{id}/pause", post(subscriptions::pause))
        .route("/subscriptions/{id}/resume", post(subscriptions::resume))
        .route("/subscriptions/{id}/cancel", post(subscriptions::cancel))
        .route(
            "/webhooks/endpoints",
            get(webhooks::list).post(webhooks::create),
        )
        .route(
            "/webhooks/endpoints/{id}",
            get(webhooks::show)
                .patch(webhooks::update)
                .delete(webhooks::delete),
        )
        .route("/webhooks/endpoints/{id}/rotate", post(webhooks::rotate))
        .route(
            "/webhooks/endpoints/{id}/deliveries",
            get(webhooks::deliveries),
        )
        .route(
            "/webhooks/endpoints/{id}/deliveries/{event_id}/redeliver",
            post(webhooks::redeliver),
        )
        .route("/events", get(webhooks::events))
        .route("/analytics", get(analytics::show))
        .route("/dashboard", get(crate::dashboard::show))
        .route(
            "/dashboard/login",
            get(crate::dashboard::login_form).post(crate::dashboard::login),
        )
        .route("/dashboard/logout", post(crate::dashboard::logout))
        .route("/providers/challenge", post(providers::challenge))
        .route("/providers/register", post(providers::register))
        .route("/providers/keys/revoke", post(providers::revoke))
        .route("/plans", post(plans::create))
        .route("/plans/{id}", get(plans::show))
        .route("/plans/{id}/deprecate", post(plans::deprecate))
        .route("/proofs/verify", post(settlements::verify_proof))
        .route("/verify", post(x402::verify))
        .route("/settle", post(x402::settle))
        .route("/supported", get(x402::supported))
        .route("/.well-known/tollgate", get(health::well_known))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(health::openapi))
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
    let _keep_leases = AbortOnDrop(tokio::spawn(f.clone().keep_leases()));
    // Unfinished `/authorize` settlements (a crash, a slow chain, a replica that died) are driven
    // to their end in the background, by one replica of a fleet at a time; the task stops with
    // the server.
    let sweeper = tokio::spawn({
        let f = f.clone();
        async move {
            loop {
                tokio::time::sleep(RECONCILE_EVERY).await;
                if f.lead(crate::replica::RECONCILER).await {
                    f.reconcile().await;
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
                f.watch_funds().await;
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
