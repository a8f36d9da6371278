//! The HTTP server under Tollgate's services (the facilitator, `tollgate gateway`, `tollgate dev`):
//! axum's router on hyper's HTTP/1.1 connection, with the limits a public service needs.
//!
//! - **Slow clients**: a request's header must arrive within [`Limits::header_read_timeout`]
//!   (this also closes idle keep-alive connections), and each request, body included, must be
//!   answered within [`Limits::request_timeout`] (408 otherwise).
//! - **Size**: headers are bounded by [`Limits::max_header_bytes`] and [`Limits::max_headers`]
//!   (431 otherwise); bodies are bounded by the services themselves.
//! - **Connections**: at most [`Limits::max_connections`] at once; more wait in the listen
//!   backlog.
//! - **Rate**: a token bucket per client address ([`RateLimit`]), 429 with `Retry-After`.
//!
//! Refusals carry the facilitator's error shape, `{"error": {"code", "message"}}`, with the codes
//! `RateLimited` and `RequestTimeout`.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use axum::{Router, routing::get};
//! use tollgate_server::{Limits, RateLimit};
//!
//! let app = Router::new().route("/", get(|| async { "hello" }));
//! let limits = Limits {
//!     rate_limit: Some(RateLimit::per_second(20, 40)),
//!     ..Limits::default()
//! };
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! tollgate_server::serve(listener, app, &limits, std::future::pending()).await
//! # }
//! ```

mod config;
mod rate;

use std::{future::Future, net::SocketAddr, pin::pin, sync::Arc, time::Duration};

use axum::{
    Router,
    extract::{ConnectInfo, Request},
    http::{HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::sync::{Semaphore, watch};
use tollgate_protocol::ApiErrorCode;
use tower::ServiceExt;

pub use config::{InvalidField, ServerConfig};
pub use rate::{ClientAddress, RateLimit, client_key};

/// The limits a server enforces. [`Limits::default`] suits a public service; every service
/// exposes them in its config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The whole request header must arrive within this time after the connection opens or the
    /// previous response was sent; otherwise the connection is closed. Default 10 s.
    pub header_read_timeout: Duration,
    /// Largest request header section (start line included), in bytes, at least 8,192. A larger
    /// one is answered 431. Default 16 KiB.
    pub max_header_bytes: usize,
    /// Most header fields in a request; more are answered 431. Default 64.
    pub max_headers: usize,
    /// A request (its body read included) must be answered within this time; otherwise 408.
    /// Default 30 s.
    pub request_timeout: Duration,
    /// Most connections served at once; further ones wait in the listen backlog. Default 4,096.
    pub max_connections: usize,
    /// Requests allowed per client; `None` for no limit. Default 50/s with bursts of 100, per
    /// peer address, loopback and private-network clients exempt.
    pub rate_limit: Option<RateLimit>,
}

/// Default [`Limits::header_read_timeout`].
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`Limits::max_header_bytes`].
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;
/// Smallest [`Limits::max_header_bytes`].
pub const MIN_HEADER_BYTES: usize = 8 * 1024;
/// Default [`Limits::max_headers`].
pub const DEFAULT_MAX_HEADERS: usize = 64;
/// Default [`Limits::request_timeout`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`Limits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_headers: DEFAULT_MAX_HEADERS,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            rate_limit: Some(RateLimit::default()),
        }
    }
}

impl Limits {
    /// No rate limit, the other limits as given (e.g. for a development server).
    pub fn without_rate_limit(self) -> Self {
        Self {
            rate_limit: None,
            ..self
        }
    }

    /// The request timeout and the rate limit as layers of `app`. [`serve`] applies them; call
    /// this yourself to put them inside layers of your own (metrics that should count the 429s)
    /// and serve the result with [`serve_prepared`].
    pub fn layer<S: Clone + Send + Sync + 'static>(&self, app: Router<S>) -> Router<S> {
        let timeout = self.request_timeout;
        let app = app.layer(middleware::from_fn(move |req: Request, next: Next| {
            within(timeout, req, next)
        }));
        match &self.rate_limit {
            Some(limit) => {
                let limiter = Arc::new(rate::Limiter::new(limit.clone()));
                app.layer(middleware::from_fn(move |req: Request, next: Next| {
                    let limiter = Arc::clone(&limiter);
                    async move { limiter.admit(req, next).await }
                }))
            }
            None => app,
        }
    }
}

async fn within(timeout: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            let mut response = refusal(
                StatusCode::REQUEST_TIMEOUT,
                ApiErrorCode::RequestTimeout,
                &format!(
                    "the request was not completed within {} s",
                    timeout.as_secs_f64()
                ),
            );
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

/// A refusal in the error shape of Tollgate's services, `{"error": {"code", "message"}}`: the
/// one renderer of the refusals the serving layers (timeout, rate limit) and the gateway answer
/// themselves, each with a code of the protocol's [`ApiErrorCode`].
pub fn refusal(status: StatusCode, code: ApiErrorCode, message: &str) -> Response {
    let body = tollgate_protocol::ApiErrorBody::new(code, message);
    (status, axum::Json(body)).into_response()
}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves; then stops accepting,
/// lets in-flight requests finish and returns. Handlers can read the peer's address as
/// [`ConnectInfo<SocketAddr>`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_prepared(listener, limits.layer(app), limits, shutdown).await
}

/// [`serve`] for an `app` that already carries [`Limits::layer`]: only the connection limits
/// (header timeout and size, connection cap) are applied here.
pub async fn serve_prepared(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Connections hold a receiver; dropping the sender asks them to finish, and `closed()`
    // resolves once every connection has.
    let (stop_tx, stop_rx) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = app.clone().map_request(move |req: Request<Incoming>| {
            let mut req = req.map(axum::body::Body::new);
            req.extensions_mut().insert(ConnectInfo(peer));
            req
        });
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_header_size(limits.max_header_bytes.max(MIN_HEADER_BYTES))
            .max_headers(limits.max_headers);
        let mut stop = stop_rx.clone();
        let done = done_rx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _done = done;
            let conn = http
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                .with_upgrades();
            let mut conn = pin!(conn);
            tokio::select! {
                result = conn.as_mut() => log_end(peer, result),
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    log_end(peer, conn.await);
                }
            }
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

fn log_end(peer: SocketAddr, result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
}
