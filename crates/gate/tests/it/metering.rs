//! The spec's state table end to end, on the devnet and on anvil: a provider publishes a plan
//! through the facilitator, gates a subscription route and a metered route with the layer, and a
//! subscriber goes through every state: ACTIVE served; exhausted → 402 `AllowanceExhausted`;
//! raised → served again; next cycle → cap reset; paused and cancelled → 402
//! `SubscriptionNotActive`; deprecated plan → `PlanDeprecated` for new subscriptions while the
//! existing one is still served.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use axum::{
    Router,
    routing::{get, post},
};
use serde_json::{Value, json};
use tollgate_chain::{
    Error as ChainError, Revert, TxRequest, WaitOptions,
    contracts::{Subscriptions, Token},
};
use tollgate_gate::{Gate, Pricing};
use tollgate_protocol::{Amount, PlanTerms};

use crate::support::{Backend, Harness, NETWORK, PAYEE, PAYER};

const PLAN_AMOUNT: u64 = 5_000_000;
const INTERVAL: u64 = 30 * 24 * 3600;
const PROCESS_PRICE: u64 = 100_000;
const REPORT_PRICE: u64 = 1_000_000;

struct World {
    h: Harness,
    key: String,
    plan: PlanTerms,
    url: String,
    http: reqwest::Client,
    processed: Arc<AtomicUsize>,
    _server: tokio::task::JoinHandle<()>,
}

impl World {
    async fn new(backend: Backend) -> Self {
        let h = Harness::on(backend).await;
        // The provider (the payee) gets an API key and publishes its plan through the facilitator.
        let key = h.api_key(PAYEE, "test").await;
        let r = h
            .http
            .post(format!("{}/plans", h.url))
            .bearer_auth(&key)
            .json(&json!({
                "network": NETWORK, "amount": PLAN_AMOUNT.to_string(), "interval": INTERVAL,
                "idempotencyKey": "state-table"
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: Value = r.json().await.unwrap();
        let plan = PlanTerms {
            plan_id: v["planId"].as_str().unwrap().parse().unwrap(),
            amount: Amount::from_units(PLAN_AMOUNT),
            interval: INTERVAL,
            token: h.fixture.deployment.token,
        };
        let gate = h
            .gate_builder()
            .plan_terms(plan.clone())
            .subscriptions(
                Arc::clone(&h.fixture.chain),
                h.fixture.deployment.subscriptions,
            )
            .subscription_poll_interval(Duration::from_millis(200))
            .api_key(&key)
            .build()
            .await
            .unwrap();
        let (url, processed, server) = serve(&gate, plan.plan_id).await;
        Self {
            h,
            key,
            plan,
            url,
            http: reqwest::Client::new(),
            processed,
            _server: server,
        }
    }

    fn subs(&self) -> Address {
        self.h.fixture.deployment.subscriptions
    }

    async fn send(&self, from: usize, to: Address, data: Vec<u8>) -> tollgate_chain::Receipt {
        let tx = TxRequest::call(self.h.address(from), to, data);
        let c = self
            .h
            .fixture
            .chain
            .send_and_wait(tx, WaitOptions::default())
            .await
            .expect("transaction");
        let r = c.receipt().cloned().expect("confirmed");
        assert!(r.success);
        r
    }

    /// [`PAYER`] subscribes on-chain with an overage cap of `cap`.
    async fn subscribe(&self, cap: u64) -> Result<B256, ChainError> {
        let call = Subscriptions::subscribeCall {
            planId: self.plan.plan_id,
            maxOverage: U256::from(cap),
        };
        let tx = TxRequest::call(self.h.address(PAYER), self.subs(), call.abi_encode());
        let c = self
            .h
            .fixture
            .chain
            .send_and_wait(tx, WaitOptions::default())
            .await?;
        let r = c.receipt().cloned().expect("confirmed");
        Ok(r.logs
            .iter()
            .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
            .expect("SubscriptionCreated")
            .id)
    }

    async fn request(&self, method: &str, path: &str, id: B256) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        let req = match method {
            "POST" => self.http.post(url).body("payload"),
            _ => self.http.get(url),
        };
        let r = req
            .header("x-service-sub", id.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn process(&self, id: B256) -> (u16, Value) {
        self.request("POST", "/v1/process", id).await
    }

    async fn report(&self, id: B256) -> (u16, Value) {
        self.request("GET", "/v1/report", id).await
    }

    async fn used(&self, id: B256) -> u64 {
        let r = self
            .http
            .get(format!(
                "{}/subscriptions/{id}/usage?network={NETWORK}",
                self.h.url
            ))
            .bearer_auth(&self.key)
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        v["used"].as_str().unwrap().parse().unwrap()
    }
}

/// `GET /v1/report` (subscription or one-time) and `POST /v1/process` (subscription metered at
/// [`PROCESS_PRICE`], or one-time), as `tollgate dev` serves them.
async fn serve(gate: &Gate, plan: B256) -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let processed = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&processed);
    let report = Router::new()
        .route(
            "/v1/report",
            get(|| async { axum::Json(json!({ "report": "daily" })) }),
        )
        .route_layer(
            gate.payment_gate([Pricing::subscription(plan), Pricing::one_time(REPORT_PRICE)]),
        );
    let process = Router::new()
        .route(
            "/v1/process",
            post(move || {
                let count = Arc::clone(&count);
                async move {
                    count.fetch_add(1, Ordering::SeqCst);
                    axum::Json(json!({ "processed": true }))
                }
            }),
        )
        .route_layer(
            gate.payment_gate([
                Pricing::subscription(plan),
                Pricing::one_time(PROCESS_PRICE),
            ])
            .metered(PROCESS_PRICE),
        );
    let app = report.merge(process);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, processed, server)
}

/// Repeats `attempt` until it returns `Some` (the gate's watcher makes on-chain changes visible
/// within its poll interval); panics after 20 s.
async fn eventually<T, F: Future<Output = Option<T>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    for _ in 0..200 {
        if let Some(v) = attempt().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within 20 s");
}

fn code(v: &Value) -> Option<&str> {
    v["error"].as_str()
}

async fn state_table(backend: Backend) {
    let w = World::new(backend).await;
    let approve = Token::approveCall {
        spender: w.subs(),
        value: U256::MAX,
    };
    w.send(PAYER, w.h.fixture.deployment.token, approve.abi_encode())
        .await;
    let id = w.subscribe(250_000).await.unwrap();

    // ACTIVE: served; the metered route deducts per call.
    let (s, v) = w.report(id).await;
    assert_eq!(s, 200, "{v}");
    for _ in 0..2 {
        let (s, v) = w.process(id).await;
        assert_eq!(s, 200, "{v}");
    }
    assert_eq!(w.used(id).await, 200_000);

    // Exhausted: 50000 left, a call costs 100000: 402, nothing deducted, the handler not run.
    let (s, v) = w.process(id).await;
    assert_eq!((s, code(&v)), (402, Some("AllowanceExhausted")), "{v}");
    assert_eq!(v["reason"], "allowance_exhausted");
    assert!(
        v["accepts"].as_array().is_some_and(|a| !a.is_empty()),
        "fresh terms: {v}"
    );
    assert_eq!(w.processed.load(Ordering::SeqCst), 2);
    assert_eq!(w.used(id).await, 200_000);
    // The subscription itself still serves unmetered routes.
    assert_eq!(w.report(id).await.0, 200);

    // Raised by the subscriber: the next metered request passes.
    let raise = Subscriptions::raiseAllowanceCall {
        id,
        newMaxOverage: U256::from(450_000),
    };
    w.send(PAYER, w.subs(), raise.abi_encode()).await;
    let (s, v) = w.process(id).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(w.used(id).await, 300_000);

    // Next cycle: the keeper charges cycle 1's usage and renews; the cap is whole again.
    let payer_before = w.h.token_balance(w.h.address(PAYER)).await;
    w.h.fixture.chain.advance_time(INTERVAL).await.unwrap();
    let r = w.h.facilitator.run_keeper_once().await;
    assert_eq!((r.renewed, r.overage.charged), (1, 1), "{r:?}");
    assert_eq!(
        w.h.token_balance(w.h.address(PAYER)).await,
        payer_before - U256::from(300_000 + PLAN_AMOUNT)
    );
    eventually("served after the renewal", || async {
        (w.process(id).await.0 == 200).then_some(())
    })
    .await;
    for _ in 0..3 {
        let (s, v) = w.process(id).await;
        assert_eq!(s, 200, "{v}");
    }
    assert_eq!(w.used(id).await, 400_000, "cycle 2 counts from zero");
    let (s, v) = w.process(id).await;
    assert_eq!((s, code(&v)), (402, Some("AllowanceExhausted")), "{v}");

    // Paused: SubscriptionNotActive, on every route.
    w.send(
        PAYER,
        w.subs(),
        Subscriptions::pauseCall { id }.abi_encode(),
    )
    .await;
    let v = eventually("refused once paused", || async {
        let (s, v) = w.report(id).await;
        (s == 402).then_some(v)
    })
    .await;
    assert_eq!(code(&v), Some("SubscriptionNotActive"), "{v}");
    let (s, v) = w.process(id).await;
    assert_eq!((s, code(&v)), (402, Some("SubscriptionNotActive")), "{v}");

    // Cancelled: SubscriptionNotActive.
    let second = w.subscribe(0).await.unwrap();
    assert_eq!(w.report(second).await.0, 200);
    w.send(
        PAYER,
        w.subs(),
        Subscriptions::cancelCall { id: second }.abi_encode(),
    )
    .await;
    let v = eventually("refused once cancelled", || async {
        let (s, v) = w.report(second).await;
        (s == 402).then_some(v)
    })
    .await;
    assert_eq!(code(&v), Some("SubscriptionNotActive"), "{v}");

    // Deprecated: no new subscriptions; an existing one keeps being served.
    let third = w.subscribe(0).await.unwrap();
    let r = w
        .http
        .post(format!(
            "{}/plans/{}/deprecate?network={NETWORK}",
            w.h.url, w.plan.plan_id
        ))
        .bearer_auth(&w.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    match w.subscribe(0).await {
        Err(ChainError::Revert(Revert::PlanDeprecated { plan_id })) => {
            assert_eq!(plan_id, w.plan.plan_id)
        }
        other => panic!("expected PlanDeprecated, got {other:?}"),
    }
    let (s, v) = w.report(third).await;
    assert_eq!(s, 200, "{v}");
}

mod devnet {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn state_table() {
        super::state_table(super::Backend::Devnet).await;
    }
}

mod anvil {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn state_table() {
        super::state_table(super::Backend::Anvil).await;
    }
}
