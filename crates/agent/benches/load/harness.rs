//! The system under load, all in this process and all real: the devnet (revm, the real
//! contracts, a fsynced journal), a facilitator over loopback HTTP (SQLite store, four
//! relayers), and an axum app gated by `tollgate-gate` (SQLite file memo store) served by
//! `tollgate_server::serve` over loopback HTTP, with a handler that counts its invocations.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use alloy::sol_types::SolEvent as _;
use axum::{Router, routing::get};
use tollgate_agent::{Agent, Amount, SpendPolicy};
use tollgate_chain::{
    Address, Chain, LogFilter, U256,
    accounts::DevAccount,
    contracts::{self, PaymentRouter, Token},
};
use tollgate_devnet::{Devnet, DevnetConfig};
use tollgate_facilitator::{Facilitator, Settings, store};
use tollgate_gate::{Gate, Pricing};
use tollgate_protocol::SettlementStatus;
use tollgate_testkit::harness::network_spec;

/// The network name the devnet, the facilitator and the gate agree on.
pub const NETWORK: &str = "tollgate-devnet";
/// The price of `/v1/quote` and the facilitator's fee, in the token's smallest unit.
pub const PRICE: u64 = 500_000;
pub const FEE: u64 = 1_000;
/// The gated path.
pub const PATH: &str = "/v1/quote";
/// How many paying agents (each with its own key, HTTP client and budget).
pub const AGENTS: usize = 8;

// Dev accounts: 0 deployed the contracts (and takes the router's fee), 1-4 relay settlements,
// 5 signs proofs, 6 is paid, 10.. pay.
const RELAYERS: std::ops::Range<usize> = 1..5;
const PROOF_KEY: usize = 5;
const PAYEE: usize = 6;
const FIRST_PAYER: usize = 10;

pub struct System {
    pub devnet: Arc<Devnet>,
    pub chain: Arc<dyn Chain>,
    pub facilitator: Facilitator,
    pub gate_url: String,
    /// Invocations of the gated handler.
    pub hits: Arc<AtomicU64>,
    accounts: Vec<DevAccount>,
    _tasks: Vec<Aborting>,
    _dir: tempfile::TempDir,
}

/// Aborts a server task when dropped.
struct Aborting(tokio::task::JoinHandle<std::io::Result<()>>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl System {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let devnet = Devnet::start(DevnetConfig {
            state_dir: Some(dir.path().join("devnet")),
            accounts: (FIRST_PAYER + AGENTS) as u32,
            ..DevnetConfig::default()
        })
        .expect("devnet");
        let chain: Arc<dyn Chain> = devnet.clone();
        let accounts = devnet.accounts().to_vec();
        let d = devnet.deployment();

        // The facilitator, on loopback, with its default server limits (loopback is exempt from
        // its rate limit).
        let fstore = store::open(&format!(
            "sqlite://{}",
            dir.path().join("facilitator.db").display()
        ))
        .await
        .expect("facilitator store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
        let spec = network_spec(NETWORK, devnet.chain_id(), &d, 1);
        let facilitator = Facilitator::new(
            Settings {
                public_url: facilitator_url.clone(),
                fee: U256::from(FEE),
                ..Settings::default()
            },
            vec![(spec, Arc::clone(&chain))],
            accounts[RELAYERS].iter().map(|a| a.address).collect(),
            accounts[PROOF_KEY].private_key,
            fstore,
        )
        .expect("facilitator");
        let f_task = tokio::spawn(tollgate_facilitator::serve(
            facilitator.clone(),
            listener,
            std::future::pending(),
        ));

        // The gate and the app it guards, served with the server's limits minus the rate limit.
        let gate = Gate::builder()
            .network(NETWORK)
            .token(d.token, "USD Coin", "2")
            .pay_to(accounts[PAYEE].address)
            .facilitator(&facilitator_url)
            .memo_store_url(format!(
                "sqlite://{}",
                dir.path().join("memos.db").display()
            ))
            .build()
            .await
            .expect("gate");
        let hits = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&hits);
        let app = Router::new()
            .route(
                PATH,
                get(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { axum::Json(serde_json::json!({ "quote": 42 })) }
                }),
            )
            .route_layer(
                gate.payment_gate([Pricing::one_time(PRICE)])
                    .description("a quote")
                    .mime_type("application/json"),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gate_url = format!("http://{}", listener.local_addr().unwrap());
        let limits = tollgate_server::Limits::default().without_rate_limit();
        let g_task = tokio::spawn(async move {
            tollgate_server::serve(listener, app, &limits, std::future::pending()).await
        });

        Self {
            devnet,
            chain,
            facilitator,
            gate_url,
            hits,
            accounts,
            _tasks: vec![Aborting(f_task), Aborting(g_task)],
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("{}{PATH}", self.gate_url)
    }

    pub fn payee(&self) -> Address {
        self.accounts[PAYEE].address
    }

    pub fn payers(&self) -> Vec<Address> {
        self.accounts[FIRST_PAYER..FIRST_PAYER + AGENTS]
            .iter()
            .map(|a| a.address)
            .collect()
    }

    /// The paying agents, each allowed `budget_each` in total, [`PRICE`] per request.
    pub fn agents(&self, budget_each: u64) -> Vec<Agent> {
        self.accounts[FIRST_PAYER..FIRST_PAYER + AGENTS]
            .iter()
            .map(|a| {
                let policy =
                    SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(budget_each));
                Agent::builder(a.signer(), policy)
                    .request_timeout(Duration::from_secs(60))
                    .build()
                    .expect("agent")
            })
            .collect()
    }

    pub async fn balance(&self, who: Address) -> U256 {
        let token = self.devnet.deployment().token;
        contracts::read(&*self.chain, token, &Token::balanceOfCall { account: who })
            .await
            .expect("balanceOf")
    }

    pub async fn block(&self) -> u64 {
        self.chain.block_number().await.expect("block number")
    }

    /// `PaymentSettled` events of the router in blocks `from..=to`: how many, and how many pay
    /// the payee exactly [`PRICE`] with fee [`FEE`].
    pub async fn settled_events(&self, from: u64, to: u64) -> (u64, u64) {
        let filter = LogFilter {
            from_block: from,
            to_block: Some(to),
            addresses: vec![self.devnet.deployment().router],
            topics: [
                Some(vec![PaymentRouter::PaymentSettled::SIGNATURE_HASH]),
                None,
                None,
                None,
            ],
        };
        let logs = self.chain.logs(&filter).await.expect("logs");
        let exact = logs
            .iter()
            .filter_map(|l| PaymentRouter::PaymentSettled::decode_log(&l.log).ok())
            .filter(|ev| {
                ev.payTo == self.payee()
                    && ev.amount == U256::from(PRICE)
                    && ev.fee == U256::from(FEE)
            })
            .count();
        (logs.len() as u64, exact as u64)
    }

    /// The facilitator store's settlements by status.
    pub async fn settlements(&self) -> Vec<(SettlementStatus, u64)> {
        self.facilitator
            .store()
            .count_by_status()
            .await
            .expect("count_by_status")
    }
}
