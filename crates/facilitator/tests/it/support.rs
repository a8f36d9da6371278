//! Fixtures: a chain (devnet or anvil) with the contracts, a facilitator on a real store, served
//! on a loopback port, and a client that signs payments as an agent would.

use std::{ops::Deref, sync::Arc};

use alloy::primitives::{Address, B256};
use tollgate_facilitator::{Facilitator, Settings, store};
use tollgate_protocol::{
    SignedPayment,
    x402::{PaymentPayload, PaymentRequirements},
};
pub use tollgate_testkit::{
    Backend,
    harness::{PROOF_KEY, RELAYER},
};
use tollgate_testkit::{
    Fixture,
    harness::{self, DEVNET_NETWORK, TestNet},
    signing::RouterTerms,
};

/// The network name the tests use.
pub const NETWORK: &str = DEVNET_NETWORK;

/// The relayer's ([`RELAYER`]) handle on `fixture`'s chain through the node at `url` (a proxy in
/// front of the fixture's own node), for [`Harness::assemble`].
pub async fn relayer_chain_via(fixture: &Fixture, url: &str) -> Arc<tollgate_chain::rpc::RpcChain> {
    let chain = tollgate_chain::rpc::RpcChain::connect(
        url,
        tollgate_testkit::dev_wallet(&fixture.accounts[RELAYER..=RELAYER]).unwrap(),
        tollgate_chain::rpc::RpcOptions {
            chain_id: Some(fixture.chain.chain_id()),
            ..tollgate_chain::rpc::RpcOptions::default()
        },
    )
    .await
    .unwrap();
    Arc::new(chain)
}

/// The shared [`TestNet`] (a chain, a facilitator on a real store serving [`NETWORK`]) with what
/// the facilitator's tests add: payments for [`NETWORK`] and raw HTTP calls.
pub struct Harness(TestNet);

impl Deref for Harness {
    type Target = TestNet;

    fn deref(&self) -> &TestNet {
        &self.0
    }
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
        Self::start(
            TestNet::builder()
                .backend(backend)
                .confirmations(confirmations)
                .settings(tweak),
        )
        .await
    }

    /// On `store` (e.g. a SQLite file the test also opens, to put a fault in it).
    pub async fn with_store(backend: Backend, store: Arc<dyn store::Store>) -> Self {
        Self::start(TestNet::builder().backend(backend).store(store)).await
    }

    /// On PostgreSQL (a schema of its own); fails the test when `TOLLGATE_TEST_DATABASE_URL` is
    /// not set.
    pub async fn on_postgres(backend: Backend) -> (Self, PgSchema) {
        Self::on_postgres_with(backend, |_| {}).await
    }

    /// [`on_postgres`](Self::on_postgres) with adjusted settings.
    pub async fn on_postgres_with(
        backend: Backend,
        tweak: impl FnOnce(&mut Settings),
    ) -> (Self, PgSchema) {
        let url = tollgate_testkit::peer::database_url();
        let (pg, schema) = harness::PgSchema::create(&url, "tg_it")
            .await
            .expect("postgres");
        let h = Self::start(
            TestNet::builder()
                .backend(backend)
                .store(pg)
                .settings(tweak),
        )
        .await;
        (h, PgSchema(schema))
    }

    pub async fn start(builder: harness::TestNetBuilder<'_>) -> Self {
        Self(builder.start().await.expect("test network"))
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
        let mut builder = TestNet::builder()
            .fixture(fixture)
            .chain(chain)
            .confirmations(confirmations)
            .settings(tweak);
        if let Some(store) = store {
            builder = builder.store(store);
        }
        Self::start(builder).await
    }

    /// Another facilitator over the same chain and contracts with an empty store of its own (a
    /// second operator settling the same payments), with the directory that holds its store.
    pub async fn facilitator_with_fresh_store(&self) -> (Facilitator, tempfile::TempDir) {
        self.other_facilitator(&[NETWORK])
            .await
            .expect("facilitator")
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
        self.0
            .signed_payment(NETWORK, payer, pay_to, amount, memo)
            .await
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
        let terms = RouterTerms {
            pay_to,
            amount,
            memo,
            fee,
            valid_after,
            valid_before,
        };
        self.fixture
            .sign_router_payment(NETWORK, payer, &terms)
            .unwrap()
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

    /// Calls `method` on this harness's anvil (e.g. `evm_setAutomine`, `evm_mine`); panics on an
    /// error answer, or on the devnet.
    pub async fn anvil(&self, method: &str, params: serde_json::Value) {
        let rpc = self.fixture.rpc_url().expect("anvil");
        let r: serde_json::Value = self
            .http
            .post(rpc)
            .json(
                &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(r.get("error").is_none(), "{method}: {r}");
    }

    /// The x402 V1 `/settle` body of a payment of `amount` from dev account `payer` to
    /// `pay_to` with `nonce`, as an x402 resource server sends it.
    pub async fn settle_body(
        &self,
        payer: usize,
        pay_to: Address,
        amount: u64,
        nonce: B256,
    ) -> serde_json::Value {
        let payload = self.x402_payload(payer, pay_to, amount, nonce).await;
        serde_json::json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": self.requirements(pay_to, amount) })
    }

    /// [`settle_body`](Self::settle_body), typed: what `X402::settle` takes.
    pub async fn settle_request(
        &self,
        payer: usize,
        pay_to: Address,
        amount: u64,
        nonce: B256,
    ) -> tollgate_protocol::x402::SettleRequest {
        serde_json::from_value(self.settle_body(payer, pay_to, amount, nonce).await).unwrap()
    }

    /// Signs an x402 payment of `amount` from dev account `payer` to `pay_to` (its nonce
    /// `nonce` repeated) and settles it on a task of its own: (its body, the answer).
    pub fn settle_on_task(
        self: &Arc<Self>,
        payer: usize,
        pay_to: Address,
        amount: u64,
        nonce: u8,
    ) -> tokio::task::JoinHandle<(serde_json::Value, serde_json::Value)> {
        let h = Arc::clone(self);
        tokio::spawn(async move {
            let body = h
                .settle_body(payer, pay_to, amount, B256::repeat_byte(nonce))
                .await;
            let answer = h.post("/settle", &body).await.1;
            (body, answer)
        })
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
pub struct PgSchema(harness::PgSchema);

impl PgSchema {
    pub async fn drop_schema(self) {
        self.0.drop_schema().await.unwrap();
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

/// Forwards a JSON-RPC body to `upstream` and answers what it answered (status and body): the
/// pass-through of the tests' fault-injecting proxies in front of anvil.
pub async fn forward_rpc(
    http: &reqwest::Client,
    upstream: &str,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::{http::StatusCode, response::IntoResponse};
    match http
        .post(upstream)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
    {
        Ok(r) => {
            let status = StatusCode::from_u16(r.status().as_u16()).unwrap();
            let bytes = r.bytes().await.unwrap_or_default();
            (status, [("content-type", "application/json")], bytes).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}
