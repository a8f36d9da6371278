//! Fixtures: the devnet with the contracts, a real facilitator on a loopback port, an axum app
//! gated by the layer on another, and a client that pays as an agent (or an x402 client) does.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use alloy::primitives::{Address, B256, U256};
use axum::{Router, routing::get};
use serde_json::Value;
use tollgate_chain::{
    authorization::{
        ReceiveWithAuthorization, TransferWithAuthorization, router_nonce, sign, token_domain,
    },
    contracts::{self, Token},
};
use tollgate_facilitator::{Facilitator, NetworkSpec, Settings, store};
use tollgate_gate::{Gate, GateBuilder, Pricing};
use tollgate_protocol::{
    Amount, AuthorizeResponse, Eip3009Authorization, PaymentProof, SignedPayment,
    x402::{ExactEvmAuthorization, ExactEvmPayload, PaymentPayload},
};
pub use tollgate_testkit::Backend;
use tollgate_testkit::Fixture;

/// The relayer and the proof key: dev accounts 8 and 9.
pub const RELAYER: usize = 8;
pub const PROOF_KEY: usize = 9;
/// The gate's network: an x402 V1 name (the devnet runs under it), so x402 clients could pay.
pub const NETWORK: &str = "base-sepolia";
/// A second network the facilitator serves on the same chain, for wrong-network proofs.
pub const OTHER_NETWORK: &str = "tollgate-devnet";
/// The payee and the payer.
pub const PAYEE: usize = 7;
pub const PAYER: usize = 1;
/// Prices of the gated routes.
pub const QUOTE_PRICE: u64 = 500_000;
pub const PREMIUM_PRICE: u64 = 1_000_000;

pub struct Harness {
    pub fixture: Fixture,
    pub facilitator: Facilitator,
    pub facilitator_url: String,
    pub http: reqwest::Client,
    _server: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
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
        tollgate_chain::install_crypto_provider();
        let fixture = Fixture::new(backend).await.expect("chain fixture");
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
        let store = store::open(&url).await.expect("store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
        let mut settings = Settings {
            public_url: facilitator_url.clone(),
            ..Settings::default()
        };
        tweak(&mut settings);
        let d = fixture.deployment;
        let spec = |name: &str| NetworkSpec {
            name: name.into(),
            chain_id: fixture.chain.chain_id(),
            token: d.token,
            token_name: "USD Coin".into(),
            token_version: "2".into(),
            router: d.router,
            subscriptions: Some(d.subscriptions),
            confirmations: 1,
        };
        let facilitator = Facilitator::new(
            settings,
            vec![
                (spec(NETWORK), Arc::clone(&fixture.chain)),
                (spec(OTHER_NETWORK), Arc::clone(&fixture.chain)),
            ],
            vec![fixture.accounts[RELAYER].address],
            fixture.accounts[PROOF_KEY].private_key,
            store,
        )
        .expect("facilitator");
        let server = tokio::spawn(tollgate_facilitator::serve(
            facilitator.clone(),
            listener,
            std::future::pending(),
        ));
        Self {
            fixture,
            facilitator,
            facilitator_url,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            _server: server,
            _dir: dir,
        }
    }

    pub fn address(&self, i: usize) -> Address {
        self.fixture.accounts[i].address
    }

    /// A gate builder for this chain and facilitator, paid to [`PAYEE`].
    pub fn gate_builder(&self) -> GateBuilder {
        Gate::builder()
            .network(NETWORK)
            .token(self.fixture.deployment.token, "USD Coin", "2")
            .pay_to(self.address(PAYEE))
            .facilitator(&self.facilitator_url)
    }

    pub async fn gate(&self) -> Gate {
        self.gate_builder().build().await.expect("gate")
    }

    pub async fn token_balance(&self, who: Address) -> U256 {
        contracts::read(
            &*self.fixture.chain,
            self.fixture.deployment.token,
            &Token::balanceOfCall { account: who },
        )
        .await
        .unwrap()
    }

    pub async fn now(&self) -> u64 {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        self.fixture.chain.timestamp().await.unwrap().max(wall)
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
            .post(format!("{}/authorize", self.facilitator_url))
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

    pub async fn signed_payment(
        &self,
        network: &str,
        payer: usize,
        pay_to: Address,
        amount: u64,
        memo: B256,
    ) -> SignedPayment {
        let now = self.now().await;
        let (valid_after, valid_before, fee) = (now - 60, now + 300, 1_000u64);
        let d = self.fixture.deployment;
        let payer = &self.fixture.accounts[payer];
        let auth = ReceiveWithAuthorization {
            from: payer.address,
            to: d.router,
            value: U256::from(amount),
            validAfter: U256::from(valid_after),
            validBefore: U256::from(valid_before),
            nonce: router_nonce(pay_to, memo, U256::from(fee)),
        };
        let domain = token_domain("USD Coin", "2", self.fixture.chain.chain_id(), d.token);
        let signature = sign(&payer.signer(), &auth, &domain).unwrap();
        SignedPayment {
            network: network.into(),
            token: d.token,
            pay_to,
            amount: Amount::from_units(amount),
            memo,
            authorization: Eip3009Authorization {
                from: payer.address,
                to: d.router,
                value: Amount::from_units(amount),
                valid_after: Amount::from_units(valid_after),
                valid_before: Amount::from_units(valid_before),
                nonce: auth.nonce,
                signature,
            },
        }
    }

    /// An x402 V1 `exact` payment as x402-fetch signs it: `transferWithAuthorization` to payTo.
    pub async fn x402_payload(
        &self,
        payer: usize,
        pay_to: Address,
        amount: u64,
        nonce: B256,
    ) -> PaymentPayload {
        let now = self.now().await;
        let payer = &self.fixture.accounts[payer];
        let auth = TransferWithAuthorization {
            from: payer.address,
            to: pay_to,
            value: U256::from(amount),
            validAfter: U256::from(now - 600),
            validBefore: U256::from(now + 60),
            nonce,
        };
        let domain = token_domain(
            "USD Coin",
            "2",
            self.fixture.chain.chain_id(),
            self.fixture.deployment.token,
        );
        let signature = sign(&payer.signer(), &auth, &domain).unwrap();
        PaymentPayload {
            x402_version: 1,
            scheme: "exact".into(),
            network: NETWORK.into(),
            payload: ExactEvmPayload {
                signature,
                authorization: ExactEvmAuthorization {
                    from: payer.address,
                    to: pay_to,
                    value: Amount::from_units(amount),
                    valid_after: Amount::from_units(now - 600),
                    valid_before: Amount::from_units(now + 60),
                    nonce,
                },
            },
        }
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
        let quote = Router::new().nest("/v1", v1).route_layer(
            gate.payment_gate([Pricing::one_time(QUOTE_PRICE)])
                .description("a quote")
                .mime_type("application/json"),
        );
        let premium = Router::new()
            .route("/premium", get(handler))
            .route_layer(gate.payment_gate([Pricing::one_time(PREMIUM_PRICE)]));
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
}

impl Drop for App {
    fn drop(&mut self) {
        self._server.abort();
    }
}
