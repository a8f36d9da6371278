//! A test network: a [`Fixture`] chain with a real facilitator over it, on a fresh SQLite store
//! (or one the test brings), served on `127.0.0.1:0`, plus the helpers the SDK and facilitator
//! tests share: API keys through [`Facilitator::issue_api_key`], payments signed with the dev
//! accounts' keys, balances and the chain's clock.
//!
//! ```no_run
//! # async fn demo() -> tollgate_testkit::Result<()> {
//! use tollgate_testkit::{Backend, harness::{PAYEE, TestNet}};
//! let net = TestNet::builder()
//!     .backend(Backend::Devnet)
//!     .networks(["base-sepolia"])
//!     .settings(|s| s.webhook_allow_private = true)
//!     .start()
//!     .await?;
//! let key = net.api_key(PAYEE, "test").await;
//! # let _ = (net.url.as_str(), key); Ok(()) }
//! ```

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use tempfile::TempDir;
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tollgate_chain::{Address, B256, Chain, Deployment, U256, accounts::DevAccount};
use tollgate_facilitator::{
    Facilitator, NetworkSpec, Settings,
    store::{self, Store},
};
use tollgate_protocol::{SignedPayment, x402::PaymentPayload};

use crate::{
    Backend, Error, Fixture, Result,
    signing::{ExactTerms, RouterTerms, TOKEN_NAME, TOKEN_VERSION},
};

/// The facilitator's relayer: dev account 8.
pub const RELAYER: usize = 8;
/// The facilitator's proof key: dev account 9 (a key of its own, as the facilitator requires).
pub const PROOF_KEY: usize = 9;
/// The payee the SDK tests use: dev account 7.
pub const PAYEE: usize = 7;
/// The payer the SDK tests use: dev account 1.
pub const PAYER: usize = 1;
/// A network name x402 does not know (the facilitator's default one here).
pub const DEVNET_NETWORK: &str = "tollgate-devnet";
/// The fee [`TestNet::signed_payment`] commits to: the facilitator's default fee.
pub const FEE: u64 = 1_000;
/// The timeout of [`TestNet::http`].
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

/// A chain fixture with a facilitator served on loopback. Dropping it stops the server (in-flight
/// requests finish) and the chain, and removes the store's directory.
pub struct TestNet {
    /// The chain, its contracts and dev accounts.
    pub fixture: Fixture,
    /// The facilitator, to call in process.
    pub facilitator: Facilitator,
    /// Where the facilitator is served (`http://127.0.0.1:<port>`, no trailing slash).
    pub url: String,
    /// An HTTP client with a generous timeout ([`HTTP_TIMEOUT`]).
    pub http: reqwest::Client,
    server: Option<Server>,
    _dir: TempDir,
}

impl fmt::Debug for TestNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestNet")
            .field("fixture", &self.fixture)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The facilitator's server task and what stops it.
struct Server {
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

type Tweak<'a> = Box<dyn FnOnce(&mut Settings) + 'a>;

/// How to start a [`TestNet`]: see [`TestNet::builder`].
pub struct TestNetBuilder<'a> {
    backend: Backend,
    fixture: Option<Fixture>,
    chain: Option<Arc<dyn Chain>>,
    networks: Vec<String>,
    confirmations: u64,
    store: Option<Arc<dyn Store>>,
    relayers: Vec<usize>,
    proof_key: usize,
    tweaks: Vec<Tweak<'a>>,
}

impl fmt::Debug for TestNetBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestNetBuilder")
            .field("backend", &self.backend)
            .field("networks", &self.networks)
            .field("confirmations", &self.confirmations)
            .finish_non_exhaustive()
    }
}

impl<'a> TestNetBuilder<'a> {
    /// The chain backend (default [`Backend::Devnet`]); ignored with [`Self::fixture`].
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Runs over this chain fixture instead of a fresh one.
    pub fn fixture(mut self, fixture: Fixture) -> Self {
        self.fixture = Some(fixture);
        self
    }

    /// The facilitator reaches the chain through `chain` (e.g. a fault-injecting proxy in front
    /// of the fixture's node) instead of the fixture's own handle.
    pub fn chain(mut self, chain: Arc<dyn Chain>) -> Self {
        self.chain = Some(chain);
        self
    }

    /// The network names the facilitator serves, all on the fixture's chain and contracts
    /// (default [`DEVNET_NETWORK`] alone).
    pub fn networks<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.networks = names.into_iter().map(Into::into).collect();
        self
    }

    /// The networks' confirmation depth (default 1).
    pub fn confirmations(mut self, confirmations: u64) -> Self {
        self.confirmations = confirmations;
        self
    }

    /// The facilitator's store (default: a fresh SQLite file in a temporary directory).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The dev accounts that relay settlements (default [`RELAYER`] alone).
    pub fn relayers(mut self, accounts: impl IntoIterator<Item = usize>) -> Self {
        self.relayers = accounts.into_iter().collect();
        self
    }

    /// The dev account whose key signs proofs (default [`PROOF_KEY`]).
    pub fn proof_key(mut self, account: usize) -> Self {
        self.proof_key = account;
        self
    }

    /// Adjusts the facilitator's settings, after `public_url` is set to the server's URL.
    pub fn settings(mut self, tweak: impl FnOnce(&mut Settings) + 'a) -> Self {
        self.tweaks.push(Box::new(tweak));
        self
    }

    /// Starts the chain (unless given), the store and the facilitator, and serves it.
    pub async fn start(self) -> Result<TestNet> {
        tollgate_chain::install_crypto_provider();
        let fixture = match self.fixture {
            Some(fixture) => fixture,
            None => Fixture::new(self.backend).await?,
        };
        let dir = tempfile::tempdir()?;
        let store = match self.store {
            Some(store) => store,
            None => sqlite_store(&dir, "facilitator.db").await?,
        };
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let mut settings = Settings {
            public_url: url.clone(),
            ..Settings::default()
        };
        for tweak in self.tweaks {
            tweak(&mut settings);
        }
        let chain = self.chain.unwrap_or_else(|| Arc::clone(&fixture.chain));
        let networks = self
            .networks
            .iter()
            .map(|name| {
                (
                    fixture_spec(name, &fixture, self.confirmations),
                    Arc::clone(&chain),
                )
            })
            .collect();
        let facilitator = Facilitator::new(
            settings,
            networks,
            self.relayers.iter().map(|&i| fixture.address(i)).collect(),
            fixture.account(self.proof_key).private_key,
            store,
        )
        .map_err(setup)?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(tollgate_facilitator::serve(
            facilitator.clone(),
            listener,
            async move {
                let _ = stopped.await;
            },
        ));
        let http = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            // Redirects are answers the tests check (the dashboard's 303 to its login form).
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(setup)?;
        Ok(TestNet {
            fixture,
            facilitator,
            url,
            http,
            server: Some(Server { stop, task }),
            _dir: dir,
        })
    }
}

impl TestNet {
    /// A builder: [`Backend::Devnet`], [`DEVNET_NETWORK`], one confirmation, a fresh SQLite
    /// store, default settings.
    pub fn builder<'a>() -> TestNetBuilder<'a> {
        TestNetBuilder {
            backend: Backend::Devnet,
            fixture: None,
            chain: None,
            networks: vec![DEVNET_NETWORK.to_owned()],
            confirmations: 1,
            store: None,
            relayers: vec![RELAYER],
            proof_key: PROOF_KEY,
            tweaks: Vec::new(),
        }
    }

    /// The defaults of [`TestNet::builder`] on `backend`.
    pub async fn start(backend: Backend) -> Result<Self> {
        Self::builder().backend(backend).start().await
    }

    /// Stops the facilitator's server (in-flight requests finish; connections close) and waits
    /// for it.
    pub async fn stop(&mut self) {
        if let Some(Server { stop, task }) = self.server.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
    }

    /// Another facilitator over the same chain and contracts (networks named `networks`, default
    /// settings) with an empty SQLite store of its own: a second operator settling the same
    /// payments. Not served; the directory holds its store.
    pub async fn other_facilitator(&self, networks: &[&str]) -> Result<(Facilitator, TempDir)> {
        let dir = tempfile::tempdir()?;
        let store = sqlite_store(&dir, "other.db").await?;
        Ok((self.facilitator_on(networks, RELAYER, store)?, dir))
    }

    /// Another replica of this facilitator: the same chain, contracts and store (so the same
    /// settlements), networks named `networks`, default settings, sending from dev account
    /// `relayer`. Not served.
    pub fn replica(&self, networks: &[&str], relayer: usize) -> Result<Facilitator> {
        self.facilitator_on(networks, relayer, Arc::clone(self.facilitator.store()))
    }

    fn facilitator_on(
        &self,
        networks: &[&str],
        relayer: usize,
        store: Arc<dyn Store>,
    ) -> Result<Facilitator> {
        let networks = networks
            .iter()
            .map(|name| {
                (
                    fixture_spec(name, &self.fixture, 1),
                    Arc::clone(&self.fixture.chain),
                )
            })
            .collect();
        Facilitator::new(
            Settings::default(),
            networks,
            vec![self.address(relayer)],
            self.account(PROOF_KEY).private_key,
            store,
        )
        .map_err(setup)
    }

    /// Dev account `i`.
    pub fn account(&self, i: usize) -> &DevAccount {
        self.fixture.account(i)
    }

    /// A JSON-RPC call to the chain's node over HTTP (anvil, or a devnet with a listener): its
    /// `result`.
    ///
    /// # Panics
    /// If the fixture has no node URL, or the node answers an error.
    pub async fn rpc(&self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let url = self.fixture.rpc_url().expect("a node with a JSON-RPC URL");
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let answer = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("the node answers")
            .bytes()
            .await
            .expect("the node's answer");
        let r: serde_json::Value = serde_json::from_slice(&answer).expect("a JSON-RPC answer");
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    /// Makes anvil mine a block every `secs` seconds and no longer on each transaction: a chain
    /// as real ones run, where a settlement waits for its blocks.
    pub async fn mine_every(&self, secs: u64) {
        self.rpc("evm_setIntervalMining", serde_json::json!([secs]))
            .await;
    }

    /// Dev account `i`'s address.
    pub fn address(&self, i: usize) -> Address {
        self.fixture.address(i)
    }

    /// The token.
    pub fn token(&self) -> Address {
        self.fixture.deployment.token
    }

    /// The chain id.
    pub fn chain_id(&self) -> u64 {
        self.fixture.chain.chain_id()
    }

    /// A new API key of dev account `who` (as a provider), issued by the facilitator.
    ///
    /// # Panics
    /// If the store refuses it.
    pub async fn api_key(&self, who: usize, label: &str) -> String {
        self.facilitator
            .issue_api_key(self.address(who), label)
            .await
            .expect("issue an API key")
    }

    /// `who`'s token balance.
    ///
    /// # Panics
    /// If the chain does not answer.
    pub async fn token_balance(&self, who: Address) -> U256 {
        self.fixture
            .token_balance(who)
            .await
            .expect("token balance")
    }

    /// The chain's time or the wall clock, whichever is later.
    ///
    /// # Panics
    /// If the chain does not answer.
    pub async fn now(&self) -> u64 {
        self.fixture.now().await.expect("chain time")
    }

    /// A router payment of `amount` to `pay_to` committing to `memo` and [`FEE`], signed by dev
    /// account `payer` as an agent signs it, valid from a minute ago for five minutes.
    pub async fn signed_payment(
        &self,
        network: &str,
        payer: usize,
        pay_to: Address,
        amount: u64,
        memo: B256,
    ) -> SignedPayment {
        let now = self.now().await;
        let terms = RouterTerms {
            pay_to,
            amount,
            memo,
            fee: FEE,
            valid_after: now - 60,
            valid_before: now + 300,
        };
        self.fixture
            .sign_router_payment(network, payer, &terms)
            .expect("sign")
    }

    /// An x402 V1 `exact` payment on `network` as x402-fetch signs it:
    /// `transferWithAuthorization` of `amount` from dev account `payer` to `pay_to`, valid from
    /// ten minutes ago for one minute.
    pub async fn x402_payload(
        &self,
        network: &str,
        payer: usize,
        pay_to: Address,
        amount: u64,
        nonce: B256,
    ) -> PaymentPayload {
        let now = self.now().await;
        let terms = ExactTerms {
            pay_to,
            amount,
            nonce,
            valid_after: now - 600,
            valid_before: now + 60,
        };
        self.fixture
            .sign_exact(network, payer, &terms)
            .expect("sign")
    }
}

/// The facilitator's view of `deployment` on chain `chain_id` under `name`.
pub fn network_spec(
    name: &str,
    chain_id: u64,
    deployment: &Deployment,
    confirmations: u64,
) -> NetworkSpec {
    NetworkSpec {
        name: name.into(),
        chain_id,
        token: deployment.token,
        token_name: TOKEN_NAME.into(),
        token_version: TOKEN_VERSION.into(),
        router: deployment.router,
        subscriptions: Some(deployment.subscriptions),
        confirmations,
    }
}

/// [`network_spec`] of `fixture`'s chain and contracts, with its token's EIP-712 name and version
/// ([`Fixture::token_params`]).
fn fixture_spec(name: &str, fixture: &Fixture, confirmations: u64) -> NetworkSpec {
    NetworkSpec {
        token_name: fixture.token_params.name.clone(),
        token_version: fixture.token_params.version.clone(),
        ..network_spec(
            name,
            fixture.chain.chain_id(),
            &fixture.deployment,
            confirmations,
        )
    }
}

/// A fresh, migrated SQLite store in `dir`.
pub async fn sqlite_store(dir: &TempDir, file: &str) -> Result<Arc<dyn Store>> {
    let url = format!("sqlite://{}", dir.path().join(file).display());
    store::open(&url).await.map_err(setup)
}

/// A PostgreSQL schema of its own for one test or bench run, with a migrated store in it.
/// [`PgSchema::drop_schema`] removes it.
#[derive(Debug)]
pub struct PgSchema {
    url: String,
    schema: String,
}

impl PgSchema {
    /// A fresh schema on the database at `url` (named `<prefix>_<process id>_<n>`) and a
    /// migrated store in it.
    pub async fn create(url: &str, prefix: &str) -> Result<(Arc<dyn Store>, Self)> {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let schema = format!("{prefix}_{}_{n}", std::process::id());
        let pg = store::PostgresStore::connect_with_schema(url, &schema)
            .await
            .map_err(setup)?;
        Store::migrate(&pg).await.map_err(setup)?;
        let guard = Self {
            url: url.to_owned(),
            schema,
        };
        Ok((Arc::new(pg), guard))
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.schema
    }

    /// Drops the schema and everything in it.
    pub async fn drop_schema(self) -> Result<()> {
        let pool = sqlx::PgPool::connect(&self.url).await.map_err(setup)?;
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await
            .map_err(setup)?;
        Ok(())
    }
}

fn setup(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Setup(Box::new(e))
}
