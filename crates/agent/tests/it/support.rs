//! Fixtures: the devnet with the contracts, a real facilitator on a loopback port, an axum app
//! gated by `tollgate-gate`, and agents with dev keys.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Router, routing::get};
use tollgate_agent::{Agent, AgentBuilder, Amount, SpendPolicy};
use tollgate_chain::{
    Address, U256,
    contracts::{self, Token},
};
use tollgate_facilitator::{Facilitator, NetworkSpec, Settings, store};
use tollgate_gate::{Gate, Pricing};
use tollgate_testkit::{Backend, Fixture};

/// The relayer and the proof key: dev accounts 8 and 9.
pub const RELAYER: usize = 8;
pub const PROOF_KEY: usize = 9;
/// A network x402 does not name: the agent learns its chain id from the facilitator (Tollgate
/// path) or from [`AgentBuilder::network`] (generic path).
pub const NETWORK: &str = "tollgate-devnet";
/// The payee and the payer.
pub const PAYEE: usize = 7;
pub const PAYER: usize = 1;
/// The price of `/v1/quote` and the facilitator's fee.
pub const PRICE: u64 = 500_000;
pub const FEE: u64 = 1_000;

pub struct Harness {
    pub fixture: Fixture,
    pub facilitator_url: String,
    _server: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn new() -> Self {
        tollgate_chain::install_crypto_provider();
        let fixture = Fixture::new(Backend::Devnet).await.expect("chain fixture");
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
        let store = store::open(&url).await.expect("store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
        let settings = Settings {
            public_url: facilitator_url.clone(),
            fee: U256::from(FEE),
            ..Settings::default()
        };
        let d = fixture.deployment;
        let spec = NetworkSpec {
            name: NETWORK.into(),
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
            vec![(spec, Arc::clone(&fixture.chain))],
            vec![fixture.accounts[RELAYER].address],
            fixture.accounts[PROOF_KEY].private_key,
            store,
        )
        .expect("facilitator");
        let server = tokio::spawn(tollgate_facilitator::serve(
            facilitator,
            listener,
            std::future::pending(),
        ));
        Self {
            fixture,
            facilitator_url,
            _server: server,
            _dir: dir,
        }
    }

    pub fn address(&self, i: usize) -> Address {
        self.fixture.accounts[i].address
    }

    pub fn token(&self) -> Address {
        self.fixture.deployment.token
    }

    pub fn chain_id(&self) -> u64 {
        self.fixture.chain.chain_id()
    }

    pub async fn balance(&self, who: Address) -> U256 {
        contracts::read(
            &*self.fixture.chain,
            self.token(),
            &Token::balanceOfCall { account: who },
        )
        .await
        .unwrap()
    }

    /// An agent builder paying with dev account `i`'s key.
    pub fn agent_builder(&self, i: usize, policy: SpendPolicy) -> AgentBuilder {
        Agent::builder(self.fixture.accounts[i].signer(), policy)
    }

    /// An agent paying with [`PAYER`]'s key.
    pub fn agent(&self, policy: SpendPolicy) -> Agent {
        self.agent_builder(PAYER, policy).build().unwrap()
    }

    /// A gate for this chain and facilitator, paid to [`PAYEE`], serving `/v1/quote` at
    /// [`PRICE`] and an ungated `/free`.
    pub async fn gated_app(&self) -> App {
        let gate = self.gate().await;
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
        Gate::builder()
            .network(NETWORK)
            .token(self.token(), "USD Coin", "2")
            .pay_to(self.address(PAYEE))
            .facilitator(&self.facilitator_url)
            .build()
            .await
            .expect("gate")
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
