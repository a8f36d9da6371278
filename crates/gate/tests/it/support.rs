//! Fixtures: the devnet with the contracts, a real facilitator on a loopback port, an axum app
//! gated by the layer on another, and a client that pays as an agent (or an x402 client) does.

use std::{
    ops::Deref,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use alloy::primitives::{Address, B256};
use axum::{Router, routing::get};
use serde_json::Value;
use tollgate_facilitator::Settings;
use tollgate_gate::{Gate, GateBuilder, PaymentGateLayer, Pricing};
use tollgate_protocol::{AuthorizeResponse, PaymentProof, x402::PaymentPayload};
pub use tollgate_testkit::Backend;
use tollgate_testkit::harness::{DEVNET_NETWORK, TestNet};
pub use tollgate_testkit::harness::{PAYEE, PAYER, PROOF_KEY};

/// The gate's network: an x402 V1 name (the devnet runs under it), so x402 clients could pay.
pub const NETWORK: &str = "base-sepolia";
/// A second network the facilitator serves on the same chain, for wrong-network proofs.
pub const OTHER_NETWORK: &str = DEVNET_NETWORK;
/// Prices of the gated routes.
pub const QUOTE_PRICE: u64 = 500_000;
pub const PREMIUM_PRICE: u64 = 1_000_000;

/// The shared [`TestNet`] (the devnet, a facilitator serving [`NETWORK`] and [`OTHER_NETWORK`])
/// with what the gate's tests add: gates, and payments through `/authorize`.
pub struct Harness(TestNet);

impl Deref for Harness {
    type Target = TestNet;

    fn deref(&self) -> &TestNet {
        &self.0
    }
}

impl Harness {
    pub async fn new() -> Self {
        Self::on(Backend::Devnet).await
    }

    /// On `backend` (the devnet in process, or anvil).
    pub async fn on(backend: Backend) -> Self {
        Self::on_with(backend, |_| {}).await
    }

    /// On `backend`, with the facilitator's settings adjusted.
    pub async fn on_with(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> Self {
        let net = TestNet::builder()
            .backend(backend)
            .networks([NETWORK, OTHER_NETWORK])
            .settings(tweak)
            .start()
            .await
            .expect("test network");
        Self(net)
    }

    /// On anvil as a real chain runs: a block every `block_secs` seconds (no automine) and
    /// `confirmations` before the facilitator calls a settlement confirmed, with its settings
    /// adjusted.
    pub async fn on_slow_anvil(
        confirmations: u64,
        block_secs: u64,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        let net = TestNet::builder()
            .backend(Backend::Anvil)
            .networks([NETWORK, OTHER_NETWORK])
            .confirmations(confirmations)
            .settings(tweak)
            .start()
            .await
            .expect("test network");
        net.mine_every(block_secs).await;
        Self(net)
    }

    /// Circle's FiatToken v2.2 on anvil at USDC's Base Sepolia address, as [`NETWORK`], a block
    /// every 2 s and 2 confirmations (the token's EIP-712 domain is `USDC`, `2`).
    pub async fn usdc() -> Self {
        let (fixture, _usdc) = tollgate_testkit::usdc::fixture()
            .await
            .expect("USDC on anvil");
        let net = TestNet::builder()
            .fixture(fixture)
            .networks([NETWORK])
            .confirmations(2)
            .start()
            .await
            .expect("test network");
        net.mine_every(2).await;
        Self(net)
    }

    /// A gate builder for this chain and facilitator, paid to [`PAYEE`].
    pub fn gate_builder(&self) -> GateBuilder {
        Gate::builder()
            .network(NETWORK)
            .token(self.token(), "USD Coin", "2")
            .pay_to(self.address(PAYEE))
            .facilitator(&self.url)
    }

    pub async fn gate(&self) -> Gate {
        self.gate_builder().build().await.expect("gate")
    }

    /// Pays as a Tollgate agent does: signs a router payment committing to the 402's memo and the
    /// facilitator's fee, posts it to `/authorize`, returns the proof's header value.
    pub async fn authorize(
        &self,
        network: &str,
        pay_to: Address,
        amount: u64,
        memo: B256,
    ) -> (String, PaymentProof) {
        let sp = self
            .signed_payment(network, PAYER, pay_to, amount, memo)
            .await;
        let r = self
            .http
            .post(format!("{}/authorize", self.url))
            .json(&serde_json::json!({ "signedPayment": sp }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "authorize");
        let a: AuthorizeResponse = r.json().await.unwrap();
        (a.proof, a.payment)
    }

    /// Pays the first entry of a 402 body with `/authorize`.
    pub async fn pay_402(&self, body: &Value) -> (String, PaymentProof) {
        let e = &body["accepts"][0];
        let memo: B256 = e["memo"].as_str().unwrap().parse().unwrap();
        let pay_to: Address = e["payTo"].as_str().unwrap().parse().unwrap();
        let amount: u64 = e["amount"].as_str().unwrap().parse().unwrap();
        self.authorize(e["network"].as_str().unwrap(), pay_to, amount, memo)
            .await
    }

    /// An x402 V1 `exact` payment on [`NETWORK`] as x402-fetch signs it.
    pub async fn x402_payload(
        &self,
        payer: usize,
        pay_to: Address,
        amount: u64,
        nonce: B256,
    ) -> PaymentPayload {
        self.0
            .x402_payload(NETWORK, payer, pay_to, amount, nonce)
            .await
    }
}

/// An axum app gated by a [`Gate`], served on loopback, counting handler invocations.
pub struct App {
    pub url: String,
    pub hits: Arc<AtomicUsize>,
    pub http: reqwest::Client,
    _server: tokio::task::JoinHandle<()>,
}

pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl App {
    /// `/v1/quote` (nested under `/v1`, [`QUOTE_PRICE`]), `/premium` ([`PREMIUM_PRICE`]) and an
    /// ungated `/free`.
    pub async fn serve(gate: &Gate) -> Self {
        Self::serve_with(gate, |layer| layer).await
    }

    /// [`serve`](Self::serve) with each gated route's layer set by `set`.
    pub async fn serve_with(
        gate: &Gate,
        set: impl Fn(PaymentGateLayer) -> PaymentGateLayer,
    ) -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let handler = {
            let hits = Arc::clone(&hits);
            move || {
                let hits = Arc::clone(&hits);
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    axum::Json(serde_json::json!({ "quote": 42 }))
                }
            }
        };
        let v1 = Router::new().route("/quote", get(handler.clone()));
        let quote = Router::new().nest("/v1", v1).route_layer(set(gate
            .payment_gate([Pricing::one_time(QUOTE_PRICE)])
            .description("a quote")
            .mime_type("application/json")));
        let premium = Router::new()
            .route("/premium", get(handler))
            .route_layer(set(gate.payment_gate([Pricing::one_time(PREMIUM_PRICE)])));
        let app = quote
            .merge(premium)
            .route("/free", get(|| async { "free" }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            hits,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            _server: server,
        }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut req = self.http.get(format!("{}{path}", self.url));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn pay(&self, path: &str, x_payment: &str) -> Reply {
        self.get(path, &[("x-payment", x_payment)]).await
    }

    /// [`pay`](Self::pay) with the payment's retry token (`X-PAYMENT-RETRY`).
    pub async fn pay_retrying(&self, path: &str, x_payment: &str, token: &str) -> Reply {
        self.get(
            path,
            &[("x-payment", x_payment), ("x-payment-retry", token)],
        )
        .await
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self._server.abort();
    }
}
