//! A node across the network, on loopback: a JSON-RPC proxy in front of a node (anvil, or the
//! devnet's RPC server) that adds a round trip to every request, can refuse calls past a
//! per-second limit with `429 Too Many Requests` as hosted providers do, and counts the calls it
//! forwarded by method (what a provider bills, and what a facilitator's design decides).
//!
//! Both facilitators of a side-by-side bench point at [`NodeProxy::url`] instead of the node, so
//! each pays the same delay and limit and is counted the same way.
//!
//! ```no_run
//! # async fn demo(anvil_url: &str) -> std::io::Result<()> {
//! use std::time::Duration;
//! use tollgate_testkit::node_proxy::{NodeProxy, ProxyOptions};
//! let proxy = NodeProxy::start(anvil_url, ProxyOptions {
//!     round_trip: Duration::from_millis(20),
//!     calls_per_second: Some(500),
//! })
//! .await?;
//! // ... point the facilitator at proxy.url(), run the load ...
//! let calls = proxy.calls();
//! println!("{} calls, {} refused", calls.forwarded(), calls.refused);
//! # Ok(()) }
//! ```

use std::{
    collections::BTreeMap,
    io,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use tokio::{net::TcpListener, task::JoinHandle};

/// What the proxy adds between its clients and the node.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProxyOptions {
    /// Added to every request: half before it is forwarded, half before the answer is returned.
    pub round_trip: Duration,
    /// At most this many JSON-RPC calls (a batch counts each of its calls) are forwarded in any
    /// one-second window; a request past it is answered `429` with `Retry-After: 1` and a
    /// JSON-RPC error, and forwarded to nobody. `None`: no limit.
    pub calls_per_second: Option<u32>,
}

/// The calls a proxy saw, by JSON-RPC method.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// Calls forwarded to the node, by method (`eth_call`, `eth_sendRawTransaction`, …).
    pub by_method: BTreeMap<String, u64>,
    /// HTTP requests forwarded (a batch is one request of several calls).
    pub requests: u64,
    /// Calls refused with `429` (not forwarded, not in `by_method`).
    pub refused: u64,
}

impl Calls {
    /// Every call forwarded, all methods.
    pub fn forwarded(&self) -> u64 {
        self.by_method.values().sum()
    }

    /// The calls of one method.
    pub fn of(&self, method: &str) -> u64 {
        self.by_method.get(method).copied().unwrap_or(0)
    }

    /// What happened since `earlier`, a snapshot of the same proxy.
    pub fn since(&self, earlier: &Calls) -> Calls {
        let by_method = self
            .by_method
            .iter()
            .map(|(m, n)| (m.clone(), n - earlier.of(m)))
            .filter(|(_, n)| *n > 0)
            .collect();
        Calls {
            by_method,
            requests: self.requests - earlier.requests,
            refused: self.refused - earlier.refused,
        }
    }

    /// `method=count` pairs, largest first, for a bench's report.
    pub fn summary(&self) -> String {
        let mut v: Vec<_> = self.by_method.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter()
            .map(|(m, n)| format!("{m}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

struct Shared {
    upstream: String,
    http: reqwest::Client,
    options: ProxyOptions,
    calls: Mutex<Calls>,
    /// The current one-second window: its start and the calls forwarded in it.
    window: Mutex<(Instant, u64)>,
}

/// A running proxy; stopped when dropped.
pub struct NodeProxy {
    addr: SocketAddr,
    url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl NodeProxy {
    /// Starts a proxy on `127.0.0.1:0` in front of the node at `upstream` (an `http://` URL).
    pub async fn start(upstream: &str, options: ProxyOptions) -> io::Result<Self> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()
            .map_err(io::Error::other)?;
        let shared = Arc::new(Shared {
            upstream: upstream.to_string(),
            http,
            options,
            calls: Mutex::new(Calls::default()),
            window: Mutex::new((Instant::now(), 0)),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .fallback(forward)
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            // Ends only with the listener (the task is aborted on drop).
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            addr,
            url: format!("http://{addr}"),
            shared,
            task,
        })
    }

    /// The proxy's URL: give it to the facilitator as its node.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A snapshot of the calls seen so far.
    pub fn calls(&self) -> Calls {
        lock(&self.shared.calls).clone()
    }
}

impl std::fmt::Debug for NodeProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeProxy")
            .field("url", &self.url)
            .field("upstream", &self.shared.upstream)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl Drop for NodeProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The methods of a JSON-RPC request body: one for a call, each element's for a batch; an
/// unparsable body counts as one call named `invalid`.
fn methods(body: &[u8]) -> Vec<String> {
    fn method(v: &serde_json::Value) -> String {
        v.get("method")
            .and_then(|m| m.as_str())
            .unwrap_or("invalid")
            .to_string()
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(calls)) => calls.iter().map(method).collect(),
        Ok(v) => vec![method(&v)],
        Err(_) => vec!["invalid".into()],
    }
}

impl Shared {
    /// Takes `n` calls from the current window; false when the limit would be passed.
    fn admit(&self, n: u64) -> bool {
        let Some(limit) = self.options.calls_per_second else {
            return true;
        };
        let mut w = lock(&self.window);
        let now = Instant::now();
        if now.duration_since(w.0) >= Duration::from_secs(1) {
            *w = (now, 0);
        }
        if w.1 + n > u64::from(limit) {
            return false;
        }
        w.1 += n;
        true
    }
}

async fn forward(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let half = shared.options.round_trip / 2;
    if !half.is_zero() {
        tokio::time::sleep(half).await;
    }
    let methods = methods(&body);
    let n = methods.len() as u64;
    if !shared.admit(n) {
        lock(&shared.calls).refused += n;
        if !half.is_zero() {
            tokio::time::sleep(half).await;
        }
        let mut r = (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":429,"message":"Too Many Requests"}}"#,
        )
            .into_response();
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    }
    {
        let mut calls = lock(&shared.calls);
        calls.requests += 1;
        for m in methods {
            *calls.by_method.entry(m).or_default() += 1;
        }
    }
    let answer = shared
        .http
        .post(&shared.upstream)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await;
    let response = match answer {
        Ok(r) => {
            let status =
                StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            match r.bytes().await {
                Ok(bytes) => {
                    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
                }
                Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
            }
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    if !half.is_zero() {
        tokio::time::sleep(half).await;
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_call_of_a_batch() {
        assert_eq!(
            methods(br#"{"jsonrpc":"2.0","id":1,"method":"eth_call"}"#),
            ["eth_call"]
        );
        assert_eq!(
            methods(br#"[{"method":"eth_call"},{"method":"eth_blockNumber"}]"#),
            ["eth_call", "eth_blockNumber"]
        );
        assert_eq!(methods(b"nonsense"), ["invalid"]);
    }

    #[test]
    fn since_subtracts_an_earlier_snapshot() {
        let mut a = Calls::default();
        a.by_method.insert("eth_call".into(), 3);
        a.requests = 3;
        let mut b = a.clone();
        *b.by_method.get_mut("eth_call").unwrap() += 2;
        b.by_method.insert("eth_chainId".into(), 1);
        b.requests += 3;
        b.refused = 4;
        let d = b.since(&a);
        assert_eq!(d.of("eth_call"), 2);
        assert_eq!(d.of("eth_chainId"), 1);
        assert_eq!((d.forwarded(), d.requests, d.refused), (3, 3, 4));
        assert_eq!(d.summary(), "eth_call=2 eth_chainId=1");
    }
}
