//! Bounds on MCP sessions. rmcp keeps each streamable-HTTP session in memory (its worker task,
//! its channels, a clone of the server) for as long as it lives, and anyone may open one with an
//! `initialize`; so the endpoint admits a session only while fewer than `mcp.max_sessions` are
//! open and the client holds fewer than `mcp.max_sessions_per_client`, and closes a session that
//! has had no request in flight for `mcp.session_idle_timeout_secs`.
//!
//! - [`admit`] runs in front of rmcp for every request that may open a session (a POST without
//!   `Mcp-Session-Id`). It takes a slot for it or refuses: 429 `RateLimited` over the client's
//!   cap, 503 `Unavailable` when every slot is taken, both with `Retry-After`, before rmcp reads
//!   the body. The slot goes to [`Sessions::create_session`] in a task-local (rmcp's
//!   `create_session` sees no request), which binds it to the new session before rmcp starts the
//!   session's task, so no end of the session can come before it is counted. A request that
//!   opens no session (a notification, a malformed body) gives its slot back when answered.
//! - rmcp calls `close_session` however a session ends (DELETE, a failed handshake, the reaper
//!   below); the first call frees its slot.
//! - Idle sessions are closed by a reaper here, not by rmcp's keep-alive: rmcp's clock runs
//!   while a tool call is in flight (no session event arrives until the tool answers), so a
//!   slow paid call would lose its session and its result. Here a request keeps its session
//!   busy until its response stream ends.

use std::{
    cell::RefCell,
    collections::HashMap,
    net::IpAddr,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, Weak},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use axum::{
    extract::{Request, State},
    http::{HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::Response,
};
use futures_core::Stream;
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::streamable_http_server::{
        SessionId, SessionManager,
        session::{
            ServerSseMessage,
            local::{LocalSessionManager, LocalSessionManagerError},
        },
    },
};
use tollgate_protocol::ApiErrorCode;
use tollgate_server::ClientAddress;

/// The header naming the session a request belongs to.
const SESSION_HEADER: &str = "mcp-session-id";

/// How the endpoint bounds its sessions (`[mcp]`'s `max_sessions`, `max_sessions_per_client`,
/// `session_idle_timeout_secs`, and `[server]`'s `client_address` and `rate_limit_private`).
#[derive(Clone, Debug)]
pub(crate) struct SessionLimits {
    /// Most sessions open at once.
    pub(crate) max_sessions: usize,
    /// Most sessions open at once per client.
    pub(crate) max_per_client: usize,
    /// A session with no request in flight for this long is closed.
    pub(crate) idle_timeout: Duration,
    /// What identifies a client.
    pub(crate) client: ClientAddress,
    /// Whether loopback and private-network clients are held to `max_per_client`.
    pub(crate) limit_private: bool,
}

impl SessionLimits {
    /// The key the request's client is counted under, or `None` when it is not held to the
    /// per-client cap: the rate limiter's key (`tollgate_server`'s: the peer, or the last
    /// `X-Forwarded-For` address; an IPv6 client by its /64).
    fn client_of(&self, req: &Request) -> Option<IpAddr> {
        tollgate_server::client_key(req, self.client, self.limit_private)
    }

    /// The `Retry-After` of a refusal: a slot frees when a session ends, at the latest after
    /// the idle timeout; clients are asked back within 10 s.
    fn retry_after(&self) -> u64 {
        self.idle_timeout.as_secs().clamp(1, 10)
    }
}

/// rmcp's in-memory session manager, with every session counted against [`SessionLimits`]
/// (cheap to clone: the middleware and rmcp share one).
#[derive(Clone, Debug)]
pub(crate) struct Sessions(Arc<Shared>);

/// What the clones of a [`Sessions`] share.
#[derive(Debug)]
struct Shared {
    local: LocalSessionManager,
    limits: SessionLimits,
    counts: Mutex<Counts>,
}

/// The slots taken, by client, and the open sessions.
#[derive(Debug, Default)]
struct Counts {
    /// Slots taken: open sessions and requests that may open one.
    taken: usize,
    /// Slots taken per client held to the per-client cap.
    per_client: HashMap<IpAddr, usize>,
    /// The open sessions.
    open: HashMap<SessionId, Open>,
}

/// An open session.
#[derive(Debug)]
struct Open {
    /// Its client's key, if it counts against one.
    client: Option<IpAddr>,
    /// Requests whose response is still streaming.
    in_flight: usize,
    /// When it last had a request in flight.
    last_active: Instant,
}

impl Counts {
    fn release(&mut self, client: Option<IpAddr>) {
        self.taken = self.taken.saturating_sub(1);
        if let Some(c) = client
            && let Some(n) = self.per_client.get_mut(&c)
        {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&c);
            }
        }
    }
}

/// Why a session was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Full {
    /// The client holds `max_per_client` sessions.
    Client,
    /// All `max_sessions` slots are taken.
    Endpoint,
}

/// A slot taken by a request that may open a session: bound to the session it opens, or given
/// back when dropped.
#[derive(Debug)]
struct Slot {
    /// `None` once bound.
    shared: Option<Arc<Shared>>,
    client: Option<IpAddr>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.counts().release(self.client);
        }
    }
}

tokio::task_local! {
    /// The slot of the request being served, for [`Sessions::create_session`] to bind.
    static OPENING: RefCell<Option<Slot>>;
}

impl Sessions {
    /// rmcp's session manager under `limits`, with rmcp's own idle timeout off (see the module
    /// docs), and the reaper that closes idle sessions in its place (it stops once the sessions
    /// are dropped).
    pub(crate) fn new(limits: SessionLimits) -> Self {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = None;
        let shared = Arc::new(Shared {
            local,
            limits,
            counts: Mutex::default(),
        });
        tokio::spawn(reap(Arc::downgrade(&shared)));
        Self(shared)
    }
}

impl Shared {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a slot for a request from `client`, or says which cap is reached.
    fn take(self: &Arc<Self>, client: Option<IpAddr>) -> Result<Slot, Full> {
        let mut counts = self.counts();
        if let Some(c) = client
            && counts.per_client.get(&c).copied().unwrap_or(0) >= self.limits.max_per_client
        {
            return Err(Full::Client);
        }
        if counts.taken >= self.limits.max_sessions {
            return Err(Full::Endpoint);
        }
        counts.taken += 1;
        if let Some(c) = client {
            *counts.per_client.entry(c).or_default() += 1;
        }
        Ok(Slot {
            shared: Some(Arc::clone(self)),
            client,
        })
    }

    /// Binds `slot` to the new session `id`: it stays taken until the session ends.
    fn bind(&self, mut slot: Slot, id: &SessionId) {
        slot.shared = None;
        self.open(id, slot.client);
    }

    fn open(&self, id: &SessionId, client: Option<IpAddr>) {
        self.counts().open.insert(
            id.clone(),
            Open {
                client,
                in_flight: 0,
                last_active: Instant::now(),
            },
        );
    }

    /// Forgets session `id` and frees its slot; `false` if it was not open.
    fn forget(&self, id: &SessionId) -> bool {
        let mut counts = self.counts();
        match counts.open.remove(id) {
            Some(open) => {
                counts.release(open.client);
                true
            }
            None => false,
        }
    }

    /// Marks a request of session `id` in flight until the guard drops.
    fn busy(self: &Arc<Self>, id: &SessionId) -> Result<Busy, LocalSessionManagerError> {
        let mut counts = self.counts();
        let open = counts
            .open
            .get_mut(id)
            .ok_or_else(|| LocalSessionManagerError::SessionNotFound(id.clone()))?;
        open.in_flight += 1;
        open.last_active = Instant::now();
        Ok(Busy {
            sessions: Arc::downgrade(self),
            id: id.clone(),
        })
    }

    /// Notes activity on session `id`.
    fn touch(&self, id: &SessionId) {
        if let Some(open) = self.counts().open.get_mut(id) {
            open.last_active = Instant::now();
        }
    }

    /// Takes the sessions idle for the idle timeout at `now` out of the count.
    fn expired(&self, now: Instant) -> Vec<SessionId> {
        let idle = self.limits.idle_timeout;
        let mut counts = self.counts();
        let ids: Vec<SessionId> = counts
            .open
            .iter()
            .filter(|(_, o)| o.in_flight == 0 && now.duration_since(o.last_active) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            if let Some(open) = counts.open.remove(id) {
                counts.release(open.client);
            }
        }
        ids
    }
}

/// Closes the sessions idle for the idle timeout, a few times per timeout, until the sessions
/// are dropped.
async fn reap(sessions: Weak<Shared>) {
    let every = match sessions.upgrade() {
        Some(s) => {
            (s.limits.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
        }
        None => return,
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        for id in sessions.expired(Instant::now()) {
            tracing::debug!(session = %id, "closing an idle MCP session");
            if let Err(e) = sessions.local.close_session(&id).await {
                tracing::debug!(session = %id, error = %e, "closing an idle MCP session");
            }
        }
    }
}

/// A request of a session in flight: the session is not idle until it drops.
#[derive(Debug)]
struct Busy {
    sessions: Weak<Shared>,
    id: SessionId,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(sessions) = self.sessions.upgrade()
            && let Some(open) = sessions.counts().open.get_mut(&self.id)
        {
            open.in_flight = open.in_flight.saturating_sub(1);
            open.last_active = Instant::now();
        }
    }
}

/// A response stream that keeps its session busy while it lives.
struct Tracked {
    inner: Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>,
    _busy: Busy,
}

impl Stream for Tracked {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// The middleware in front of the MCP endpoint: a request that may open a session (a POST
/// without `Mcp-Session-Id`) takes a slot first, or is refused.
pub(crate) async fn admit(
    State(Sessions(sessions)): State<Sessions>,
    req: Request,
    next: Next,
) -> Response {
    if req.method() != Method::POST || req.headers().contains_key(SESSION_HEADER) {
        return next.run(req).await;
    }
    let client = sessions.limits.client_of(&req);
    match sessions.take(client) {
        Ok(slot) => OPENING.scope(RefCell::new(Some(slot)), next.run(req)).await,
        Err(full) => refuse(&sessions.limits, full, client),
    }
}

fn refuse(limits: &SessionLimits, full: Full, client: Option<IpAddr>) -> Response {
    let secs = limits.retry_after();
    let (status, code, message) = match full {
        Full::Client => (
            StatusCode::TOO_MANY_REQUESTS,
            ApiErrorCode::RateLimited,
            format!(
                "this client holds {} MCP sessions, the most allowed: close one (DELETE) or retry \
                 in {secs} s",
                limits.max_per_client
            ),
        ),
        Full::Endpoint => (
            StatusCode::SERVICE_UNAVAILABLE,
            ApiErrorCode::Unavailable,
            format!("the MCP endpoint has every session slot taken; retry in {secs} s"),
        ),
    };
    tracing::debug!(?client, ?full, "refused an MCP session");
    let mut response = tollgate_server::refusal(status, code, &message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.0.local.create_session().await?;
        match OPENING
            .try_with(|slot| slot.borrow_mut().take())
            .ok()
            .flatten()
        {
            Some(slot) => self.0.bind(slot, &id),
            None => {
                // Not through `admit` (no path leads here): counted, though over the caps.
                tracing::warn!(session = %id, "an MCP session opened without a slot");
                self.0.counts().taken += 1;
                self.0.open(&id, None);
            }
        }
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let _busy = self.0.busy(id)?;
        self.0.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.0.counts().open.contains_key(id) && self.0.local.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.0.forget(id);
        self.0.local.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let busy = self.0.busy(id)?;
        let inner = self.0.local.create_stream(id, message).await?;
        Ok(Tracked {
            inner: Box::pin(inner),
            _busy: busy,
        })
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.0.touch(id);
        self.0.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.touch(id);
        self.0.local.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.touch(id);
        self.0.local.resume(id, last_event_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_sessions: usize, max_per_client: usize) -> SessionLimits {
        SessionLimits {
            max_sessions,
            max_per_client,
            idle_timeout: Duration::from_secs(60),
            client: ClientAddress::XForwardedFor,
            limit_private: false,
        }
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[tokio::test]
    async fn slots_are_held_to_both_caps_and_come_back() {
        let Sessions(s) = Sessions::new(limits(3, 2));
        let a1 = s.take(ip("192.0.2.1")).unwrap();
        let a2 = s.take(ip("192.0.2.1")).unwrap();
        assert_eq!(s.take(ip("192.0.2.1")).unwrap_err(), Full::Client);
        let b = s.take(ip("192.0.2.2")).unwrap();
        assert_eq!(s.take(ip("192.0.2.3")).unwrap_err(), Full::Endpoint);
        assert_eq!(s.take(None).unwrap_err(), Full::Endpoint);
        // A slot that opened no session comes back when dropped.
        drop(a2);
        let a2 = s.take(ip("192.0.2.1")).unwrap();
        // A bound slot stays taken until its session is forgotten, once.
        let id: SessionId = "s1".into();
        s.bind(a1, &id);
        assert_eq!(s.take(ip("192.0.2.1")).unwrap_err(), Full::Client);
        assert!(s.forget(&id));
        assert!(!s.forget(&id));
        let a3 = s.take(ip("192.0.2.1")).unwrap();
        drop((a2, a3, b));
        let counts = s.counts();
        assert_eq!((counts.taken, counts.per_client.len()), (0, 0));
    }

    #[tokio::test]
    async fn a_session_with_a_request_in_flight_is_not_idle() {
        let Sessions(s) = Sessions::new(limits(3, 3));
        let (busy, idle): (SessionId, SessionId) = ("busy".into(), "idle".into());
        s.bind(s.take(None).unwrap(), &busy);
        s.bind(s.take(None).unwrap(), &idle);
        let guard = s.busy(&busy).unwrap();
        let later = Instant::now() + Duration::from_secs(61);
        assert_eq!(s.expired(later), vec![idle.clone()]);
        assert!(
            s.busy(&idle).is_err(),
            "an expired session takes no request"
        );
        // Its idle time runs from when its request ended.
        drop(guard);
        let ended = Instant::now();
        assert_eq!(
            s.expired(ended + Duration::from_secs(59)),
            Vec::<SessionId>::new()
        );
        assert_eq!(s.expired(ended + Duration::from_secs(60)), vec![busy]);
        assert_eq!(s.counts().taken, 0);
    }

    #[test]
    fn clients_are_keyed_as_the_rate_limit_keys_them() {
        use std::net::SocketAddr;

        use axum::extract::ConnectInfo;

        let request = |peer: &str, xff: Option<&str>| {
            let mut req = Request::new(axum::body::Body::empty());
            let peer: SocketAddr = format!("{peer}:1234").parse().unwrap();
            req.extensions_mut().insert(ConnectInfo(peer));
            if let Some(v) = xff {
                req.headers_mut()
                    .insert("x-forwarded-for", v.parse().unwrap());
            }
            req
        };
        let xff = limits(1, 1);
        let peer = SessionLimits {
            client: ClientAddress::Peer,
            ..limits(1, 1)
        };
        assert_eq!(
            xff.client_of(&request("10.0.0.1", Some("1.1.1.1, 198.51.100.7"))),
            ip("198.51.100.7")
        );
        assert_eq!(
            peer.client_of(&request("10.0.0.1", Some("198.51.100.7"))),
            None
        );
        assert_eq!(
            peer.client_of(&request("198.51.100.8", None)),
            ip("198.51.100.8")
        );
        assert_eq!(xff.client_of(&request("127.0.0.1", None)), None);
        assert_eq!(
            xff.client_of(&request("127.0.0.1", Some("2001:db8:1:2::5"))),
            ip("2001:db8:1:2::")
        );
        let private = SessionLimits {
            limit_private: true,
            ..limits(1, 1)
        };
        assert_eq!(
            private.client_of(&request("127.0.0.1", None)),
            ip("127.0.0.1")
        );
        assert_eq!(
            xff.client_of(&Request::new(axum::body::Body::empty())),
            None
        );
    }
}
