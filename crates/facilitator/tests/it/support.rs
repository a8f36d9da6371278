//! Fixtures: a chain (devnet or anvil) with the contracts, a facilitator on a real store, served
//! on a loopback port, and a client that signs payments as an agent would.

use std::{sync::Arc, time::Duration};

use alloy::primitives::{Address, B256, U256};
use tollgate_chain::{
    accounts::DevAccount,
    authorization::{
        ReceiveWithAuthorization, TransferWithAuthorization, router_nonce, sign, token_domain,
    },
    contracts::{self, Token},
};
use tollgate_facilitator::{Facilitator, NetworkSpec, Settings, store};
use tollgate_protocol::{
    Amount, Eip3009Authorization, SignedPayment,
    x402::{ExactEvmAuthorization, ExactEvmPayload, PaymentPayload, PaymentRequirements},
};
pub use tollgate_testkit::Backend;
use tollgate_testkit::Fixture;

/// The relayer and the proof key: dev accounts 8 and 9 (distinct keys, as required).
pub const RELAYER: usize = 8;
pub const PROOF_KEY: usize = 9;
/// The network name the tests use.
pub const NETWORK: &str = "tollgate-devnet";

pub struct Harness {
    pub fixture: Fixture,
    pub facilitator: Facilitator,
    pub url: String,
    pub http: reqwest::Client,
    _server: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn new(backend: Backend) -> Self {
        Self::with(backend, |_| {}).await
    }

    pub async fn with(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> Self {
        Self::with_confirmations(backend, 1, tweak).await
    }

    pub async fn with_confirmations(
        backend: Backend,
        confirmations: u64,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::build(backend, confirmations, None, tweak).await
    }

    /// On PostgreSQL (a schema of its own), when `TOLLGATE_TEST_DATABASE_URL` is set.
    pub async fn on_postgres(backend: Backend) -> Option<(Self, PgSchema)> {
        Self::on_postgres_with(backend, |_| {}).await
    }

    /// [`on_postgres`](Self::on_postgres) with adjusted settings.
    pub async fn on_postgres_with(
        backend: Backend,
        tweak: impl FnOnce(&mut Settings),
    ) -> Option<(Self, PgSchema)> {
        let url = std::env::var("TOLLGATE_TEST_DATABASE_URL").ok()?;
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let schema = format!("tg_it_{}_{n}", std::process::id());
        let pg = store::PostgresStore::connect_with_schema(&url, &schema)
            .await
            .expect("postgres");
        store::Store::migrate(&pg).await.unwrap();
        let h = Self::build(backend, 1, Some(Arc::new(pg)), tweak).await;
        Some((h, PgSchema { url, schema }))
    }

    async fn build(
        backend: Backend,
        confirmations: u64,
        store: Option<Arc<dyn store::Store>>,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        tollgate_chain::install_crypto_provider();
        let fixture = Fixture::new(backend).await.expect("chain fixture");
        let chain = Arc::clone(&fixture.chain);
        Self::assemble(fixture, chain, confirmations, store, tweak).await
    }

    /// A facilitator on `fixture`'s contracts that reaches the chain through `chain` (e.g. a
    /// fault-injecting proxy in front of the fixture's node).
    pub async fn assemble(
        fixture: Fixture,
        chain: Arc<dyn tollgate_chain::Chain>,
        confirmations: u64,
        store: Option<Arc<dyn store::Store>>,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = match store {
            Some(s) => s,
            None => {
                let url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
                store::open(&url).await.expect("store")
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut settings = Settings {
            public_url: url.clone(),
            ..Settings::default()
        };
        tweak(&mut settings);
        let d = fixture.deployment;
        let spec = NetworkSpec {
            name: NETWORK.into(),
            chain_id: fixture.chain.chain_id(),
            token: d.token,
            token_name: "USD Coin".into(),
            token_version: "2".into(),
            router: d.router,
            subscriptions: Some(d.subscriptions),
            confirmations,
        };
        let facilitator = Facilitator::new(
            settings,
            vec![(spec, chain)],
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
            url,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            _server: server,
            _dir: dir,
        }
    }

    /// Another facilitator over the same chain and contracts with an empty store of its own (a
    /// second operator settling the same payments), with the directory that holds its store.
    pub async fn facilitator_with_fresh_store(&self) -> (Facilitator, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("other.db").display());
        let store = store::open(&url).await.expect("store");
        let d = self.fixture.deployment;
        let spec = NetworkSpec {
            name: NETWORK.into(),
            chain_id: self.fixture.chain.chain_id(),
            token: d.token,
            token_name: "USD Coin".into(),
            token_version: "2".into(),
            router: d.router,
            subscriptions: Some(d.subscriptions),
            confirmations: 1,
        };
        let f = Facilitator::new(
            Settings::default(),
            vec![(spec, Arc::clone(&self.fixture.chain))],
            vec![self.fixture.accounts[RELAYER].address],
            self.fixture.accounts[PROOF_KEY].private_key,
            store,
        )
        .expect("facilitator");
        (f, dir)
    }

    pub fn account(&self, i: usize) -> &DevAccount {
        &self.fixture.accounts[i]
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

    /// A payment as an agent signs it: a `ReceiveWithAuthorization` to the router whose nonce
    /// commits to payTo, memo and the facilitator's fee.
    pub async fn signed_payment(
        &self,
        payer: usize,
        pay_to: Address,
        amount: u64,
        memo: B256,
    ) -> SignedPayment {
        let now = self.now().await;
        self.signed_payment_with(payer, pay_to, amount, memo, 1_000, now - 60, now + 300)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn signed_payment_with(
        &self,
        payer: usize,
        pay_to: Address,
        amount: u64,
        memo: B256,
        fee: u64,
        valid_after: u64,
        valid_before: u64,
    ) -> SignedPayment {
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
            network: NETWORK.into(),
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

    /// x402 V1 requirements for `amount` to `pay_to`, as an x402 resource server builds them.
    pub fn requirements(&self, pay_to: Address, amount: u64) -> PaymentRequirements {
        serde_json::from_value(serde_json::json!({
            "scheme": "exact",
            "network": NETWORK,
            "maxAmountRequired": amount.to_string(),
            "resource": "http://127.0.0.1/v1/quote",
            "description": "a quote",
            "mimeType": "application/json",
            "payTo": pay_to,
            "maxTimeoutSeconds": 60,
            "asset": self.fixture.deployment.token,
            "extra": { "name": "USD Coin", "version": "2" }
        }))
        .unwrap()
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

    pub async fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    pub async fn post_raw(
        &self,
        path: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> (u16, serde_json::Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }
}

/// Drops a test's PostgreSQL schema.
pub struct PgSchema {
    url: String,
    schema: String,
}

impl PgSchema {
    pub async fn drop_schema(self) {
        let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await
            .unwrap();
    }
}

/// Runs a test body on each backend.
#[macro_export]
macro_rules! on_backends {
    ($($case:ident),* $(,)?) => {
        mod devnet {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::super::support::Backend::Devnet).await })*
        }
        mod anvil {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::super::support::Backend::Anvil).await })*
        }
    };
}
