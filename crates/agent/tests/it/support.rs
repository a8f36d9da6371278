//! Fixtures: the devnet with the contracts, a real facilitator on a loopback port, an axum app
//! gated by `tollgate-gate`, and agents with dev keys.

use std::{
    ops::Deref,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Router, routing::get};
use tollgate_agent::{Agent, AgentBuilder, Amount, Payment, SpendPolicy};
use tollgate_chain::{Address, U256, authorization::router_nonce};
use tollgate_facilitator::settlement_key;
use tollgate_gate::{Gate, Pricing};
use tollgate_protocol::SignedPayment;
use tollgate_testkit::harness::{DEVNET_NETWORK, TestNet};
pub use tollgate_testkit::harness::{FEE, PAYEE, PAYER};

/// A network x402 does not name: the agent learns its chain id from the facilitator (Tollgate
/// path) or from [`AgentBuilder::network`] (generic path).
pub const NETWORK: &str = DEVNET_NETWORK;
/// The price of `/v1/quote`.
pub const PRICE: u64 = 500_000;

/// The shared [`TestNet`] (the devnet, a facilitator serving [`NETWORK`] for a fee of [`FEE`])
/// with what the agent's tests add: agents, gated apps, and what the facilitator recorded.
pub struct Harness(TestNet);

impl Deref for Harness {
    type Target = TestNet;

    fn deref(&self) -> &TestNet {
        &self.0
    }
}

impl Harness {
    pub async fn new() -> Self {
        let net = TestNet::builder()
            .networks([NETWORK])
            .settings(|s| s.fee = U256::from(FEE))
            .start()
            .await
            .expect("test network");
        Self(net)
    }

    /// On anvil as a real chain runs: a block every `block_secs` seconds (no automine),
    /// `confirmations` before the facilitator calls a settlement confirmed, and a facilitator
    /// that answers "pending" after 300 ms.
    pub async fn on_slow_anvil(confirmations: u64, block_secs: u64) -> Self {
        let net = TestNet::builder()
            .backend(tollgate_testkit::Backend::Anvil)
            .networks([NETWORK])
            .confirmations(confirmations)
            .settings(|s| {
                s.fee = U256::from(FEE);
                s.confirmation_timeout = Duration::from_millis(300);
            })
            .start()
            .await
            .expect("test network");
        net.mine_every(block_secs).await;
        Self(net)
    }

    /// Stops the facilitator's server (the chain goes on).
    pub async fn stop_facilitator(&mut self) {
        self.0.stop().await;
    }

    /// The signed payment the facilitator recorded for `payment` (a Tollgate one).
    pub async fn signed_payment(&self, payment: &Payment) -> SignedPayment {
        let nonce = router_nonce(payment.pay_to, payment.memo.unwrap(), U256::from(FEE));
        let key = settlement_key(self.chain_id(), self.token(), payment.payer, nonce);
        let store = self.facilitator.store();
        let row = store.settlement(key).await.unwrap().expect("recorded");
        serde_json::from_str(&row.new.request).unwrap()
    }

    pub async fn balance(&self, who: Address) -> U256 {
        self.token_balance(who).await
    }

    /// An agent builder paying with dev account `i`'s key.
    pub fn agent_builder(&self, i: usize, policy: SpendPolicy) -> AgentBuilder {
        Agent::builder(self.account(i).signer(), policy)
    }

    /// An agent paying with [`PAYER`]'s key.
    pub fn agent(&self, policy: SpendPolicy) -> Agent {
        self.agent_builder(PAYER, policy).build().unwrap()
    }

    /// A gate for this chain and facilitator, paid to [`PAYEE`], serving `/v1/quote` at
    /// [`PRICE`] and an ungated `/free`.
    pub async fn gated_app(&self) -> App {
        self.gated_app_via(&self.url).await
    }

    /// [`Harness::gated_app`], its gate (and its 402s) naming the facilitator at `facilitator`.
    pub async fn gated_app_via(&self, facilitator: &str) -> App {
        let gate = self.gate_via(facilitator).await;
        self.app_of(gate).await
    }

    /// [`Harness::gated_app`] whose gate holds a pending x402 settlement's request `hold`
    /// before its 503 (`GateBuilder::pending_hold`).
    pub async fn gated_app_holding(&self, hold: Duration) -> App {
        let gate = self
            .gate_builder(&self.url)
            .pending_hold(hold)
            .build()
            .await
            .expect("gate");
        self.app_of(gate).await
    }

    /// `/v1/quote` at [`PRICE`] behind `gate`, and an ungated `/free`.
    async fn app_of(&self, gate: Gate) -> App {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        let quote = Router::new()
            .route(
                "/v1/quote",
                get(move || {
                    let hits = Arc::clone(&counted);
                    async move {
                        hits.fetch_add(1, Ordering::SeqCst);
                        axum::Json(serde_json::json!({ "quote": 42 }))
                    }
                }),
            )
            .route_layer(
                gate.payment_gate([Pricing::one_time(PRICE)])
                    .description("a quote")
                    .mime_type("application/json"),
            );
        let app = quote.route("/free", get(|| async { "free" }));
        App::serve(app, hits).await
    }
}

impl Harness {
    /// A gate for this chain and facilitator, paid to [`PAYEE`].
    pub async fn gate(&self) -> Gate {
        self.gate_via(&self.url).await
    }

    /// [`Harness::gate`] through the facilitator at `facilitator`.
    pub async fn gate_via(&self, facilitator: &str) -> Gate {
        self.gate_builder(facilitator).build().await.expect("gate")
    }
}

impl Harness {
    /// A gate builder for this chain, paid to [`PAYEE`], through the facilitator at
    /// `facilitator`.
    pub fn gate_builder(&self, facilitator: &str) -> tollgate_gate::GateBuilder {
        Gate::builder()
            .network(NETWORK)
            .token(self.token(), "USD Coin", "2")
            .pay_to(self.address(PAYEE))
            .facilitator(facilitator)
    }
}

/// A policy with these caps, in units.
pub fn policy(cap: u64, budget: u64) -> SpendPolicy {
    SpendPolicy::new(Amount::from_units(cap), Amount::from_units(budget))
}

/// An axum app on loopback, counting what its handler counts.
pub struct App {
    pub url: String,
    pub hits: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl App {
    pub async fn serve(app: Router, hits: Arc<AtomicUsize>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, hits, server }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A short timeout for hostile servers.
pub const SHORT: Duration = Duration::from_millis(500);

/// A real HTTP proxy on loopback in front of `upstream`: it forwards every request and answer
/// unchanged, except that it corrupts the `X-PAYMENT` header of the first paid request (one
/// character flipped), as a faulty or hostile middlebox might. It records every `X-PAYMENT` it
/// received, before corruption.
pub struct CorruptingProxy {
    pub url: String,
    pub seen: Arc<std::sync::Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

impl CorruptingProxy {
    pub async fn new(upstream: &str) -> Self {
        Self::start(upstream, Fault::CorruptFirstPayment).await
    }

    /// A proxy in front of a facilitator that answers every settlement status URL with the
    /// facilitator's own shape of a failed settlement (422 `SettlementReverted`), whatever the
    /// settlement's real state: a facilitator that reports a payment failed.
    pub async fn failing_status(upstream: &str) -> Self {
        Self::start(upstream, Fault::FailStatus).await
    }

    async fn start(upstream: &str, fault: Fault) -> Self {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let state = ProxyState {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            seen: Arc::clone(&seen),
            fault,
        };
        let app = Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, seen, server }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// The `X-PAYMENT` values received, in order, as the agent sent them.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for CorruptingProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[derive(Clone, Copy)]
enum Fault {
    CorruptFirstPayment,
    FailStatus,
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    http: reqwest::Client,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
    fault: Fault,
}

async fn forward(
    axum::extract::State(state): axum::extract::State<ProxyState>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::{http::header, response::IntoResponse};
    let (parts, body) = request.into_parts();
    if matches!(state.fault, Fault::FailStatus) && parts.uri.path().starts_with("/settlements/") {
        let body = serde_json::json!({ "error": {
            "code": "SettlementReverted",
            "message": "settlement transaction reverted",
        }});
        return (
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            axum::Json(body),
        )
            .into_response();
    }
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut headers = parts.headers.clone();
    for h in [header::HOST, header::CONTENT_LENGTH, header::CONNECTION] {
        headers.remove(h);
    }
    if let Some(value) = headers.get("x-payment").and_then(|v| v.to_str().ok()) {
        let value = value.to_owned();
        let first = {
            let mut seen = state.seen.lock().unwrap();
            seen.push(value.clone());
            seen.len() == 1
        };
        if first && matches!(state.fault, Fault::CorruptFirstPayment) {
            headers.insert("x-payment", flip_one(&value).parse().unwrap());
        }
    }
    let answer = state
        .http
        .request(parts.method, format!("{}{path}", state.upstream))
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let mut headers = answer.headers().clone();
    for h in [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::CONNECTION,
    ] {
        headers.remove(h);
    }
    let body = answer.bytes().await.unwrap();
    let mut response = axum::response::Response::new(axum::body::Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// `value` with its middle character replaced by another base64 character.
pub fn flip_one(value: &str) -> String {
    let mut bytes = value.as_bytes().to_vec();
    let i = bytes.len() / 2;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}
