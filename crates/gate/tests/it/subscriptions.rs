//! `X-Service-Sub`: subscriptions created on the devnet, checked by the gate on-chain through its
//! cache, invalidated by the contract's events.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, Bytes, U256},
    sol_types::SolCall,
};
use async_trait::async_trait;
use axum::{Extension, Router, routing::get};
use tollgate_chain::{
    Chain, ChainLog, Confirmation, LogFilter, Receipt, TxRequest, WaitOptions,
    contracts::{self, Subscriptions, Token},
};
use tollgate_gate::{Gate, Pricing, VerifiedSubscription, X_PAYMENT_RESPONSE};
use tollgate_protocol::{Amount, PlanTerms};

use crate::support::{Harness, PAYEE, PAYER, Reply};

const PLAN_AMOUNT: u64 = 5_000_000;
const INTERVAL: u64 = 30 * 24 * 3600;
const ONE_TIME: u64 = 250_000;

/// A [`Chain`] that delegates to the devnet and counts `call`s (subscription status reads).
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn Chain>,
    calls: AtomicUsize,
}

#[async_trait]
impl Chain for Counting {
    fn chain_id(&self) -> u64 {
        self.inner.chain_id()
    }
    fn signers(&self) -> Vec<Address> {
        self.inner.signers()
    }
    async fn block_number(&self) -> tollgate_chain::Result<u64> {
        self.inner.block_number().await
    }
    async fn timestamp(&self) -> tollgate_chain::Result<u64> {
        self.inner.timestamp().await
    }
    async fn balance(&self, account: Address) -> tollgate_chain::Result<U256> {
        self.inner.balance(account).await
    }
    async fn nonce(&self, account: Address) -> tollgate_chain::Result<u64> {
        self.inner.nonce(account).await
    }
    async fn code(&self, account: Address) -> tollgate_chain::Result<Bytes> {
        self.inner.code(account).await
    }
    async fn call(
        &self,
        from: Option<Address>,
        to: Address,
        data: Bytes,
    ) -> tollgate_chain::Result<Bytes> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.call(from, to, data).await
    }
    async fn send(&self, tx: TxRequest) -> tollgate_chain::Result<B256> {
        self.inner.send(tx).await
    }
    async fn receipt(&self, tx_hash: B256) -> tollgate_chain::Result<Option<Receipt>> {
        self.inner.receipt(tx_hash).await
    }
    async fn knows_transaction(&self, tx_hash: B256) -> tollgate_chain::Result<bool> {
        self.inner.knows_transaction(tx_hash).await
    }
    async fn logs(&self, filter: &LogFilter) -> tollgate_chain::Result<Vec<ChainLog>> {
        self.inner.logs(filter).await
    }
    async fn wait(&self, tx_hash: B256, opts: WaitOptions) -> tollgate_chain::Result<Confirmation> {
        self.inner.wait(tx_hash, opts).await
    }
    async fn advance_time(&self, seconds: u64) -> tollgate_chain::Result<()> {
        self.inner.advance_time(seconds).await
    }
}

struct Setup {
    h: Harness,
    counting: Arc<Counting>,
}

impl Setup {
    async fn new() -> Self {
        let h = Harness::new().await;
        let counting = Arc::new(Counting {
            inner: Arc::clone(&h.fixture.chain),
            calls: AtomicUsize::new(0),
        });
        Self { h, counting }
    }

    fn subs(&self) -> Address {
        self.h.fixture.deployment.subscriptions
    }

    async fn send(&self, from: usize, to: Address, data: Vec<u8>) {
        let tx = TxRequest::call(self.h.address(from), to, data);
        let c = self
            .h
            .fixture
            .chain
            .send_and_wait(tx, WaitOptions::default())
            .await
            .expect("transaction");
        assert!(matches!(c, Confirmation::Confirmed(_)), "{c:?}");
    }

    /// A plan of [`PAYEE`]'s, created on-chain.
    async fn create_plan(&self, salt: u8) -> PlanTerms {
        let token = self.h.fixture.deployment.token;
        let payee = self.h.address(PAYEE);
        let call = Subscriptions::createPlanCall {
            token,
            payTo: payee,
            amount: U256::from(PLAN_AMOUNT),
            interval: INTERVAL,
            operator: payee,
            salt: B256::repeat_byte(salt),
        };
        self.send(PAYEE, self.subs(), call.abi_encode()).await;
        let plan_id = contracts::read(
            &*self.h.fixture.chain,
            self.subs(),
            &Subscriptions::planIdForCall {
                provider: payee,
                salt: B256::repeat_byte(salt),
            },
        )
        .await
        .unwrap();
        PlanTerms {
            plan_id,
            amount: Amount::from_units(PLAN_AMOUNT),
            interval: INTERVAL,
            token,
        }
    }

    /// [`PAYER`] approves and subscribes to `plan`; returns the subscription id.
    async fn subscribe(&self, plan: B256) -> B256 {
        let chain = &*self.h.fixture.chain;
        let payer = self.h.address(PAYER);
        let nonce = contracts::read(
            chain,
            self.subs(),
            &Subscriptions::noncesCall { subscriber: payer },
        )
        .await
        .unwrap();
        let approve = Token::approveCall {
            spender: self.subs(),
            value: U256::from(PLAN_AMOUNT) * U256::from(100),
        };
        self.send(PAYER, self.h.fixture.deployment.token, approve.abi_encode())
            .await;
        let subscribe = Subscriptions::subscribeCall {
            planId: plan,
            maxOverage: U256::ZERO,
        };
        self.send(PAYER, self.subs(), subscribe.abi_encode()).await;
        let id = contracts::read(
            chain,
            self.subs(),
            &Subscriptions::subscriptionIdForCall {
                planId: plan,
                subscriber: payer,
                nonce,
            },
        )
        .await
        .unwrap();
        let (state, _) = {
            let s = contracts::read(chain, self.subs(), &Subscriptions::statusCall { id })
                .await
                .unwrap();
            (s.state, s.paidThrough)
        };
        assert_eq!(state, 1, "the new subscription is ACTIVE");
        id
    }

    async fn subscriber_action(&self, data: Vec<u8>) {
        self.send(PAYER, self.subs(), data).await;
    }

    /// A gate checking subscriptions through the counting chain, with a 60 s cache TTL (so that
    /// only the event watcher can make changes visible within seconds).
    async fn gate(&self, plans: &[&PlanTerms]) -> Gate {
        let mut b = self
            .h
            .gate_builder()
            .subscriptions(Arc::clone(&self.counting) as Arc<dyn Chain>, self.subs())
            .subscription_cache_ttl(Duration::from_secs(60));
        for p in plans {
            b = b.plan_terms((*p).clone());
        }
        b.build().await.expect("gate")
    }

    fn status_reads(&self) -> usize {
        self.counting.calls.load(Ordering::SeqCst)
    }
}

/// `/v1/report` gated by `pricing`, counting handler invocations; the handler echoes the
/// subscriber it was served for.
struct SubApp {
    url: String,
    hits: Arc<AtomicUsize>,
    http: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for SubApp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl SubApp {
    async fn serve(gate: &Gate, pricing: Vec<Pricing>) -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        let handler = move |sub: Option<Extension<VerifiedSubscription>>| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let subscriber = sub.map(|Extension(s)| s.subscriber.to_string());
                axum::Json(serde_json::json!({ "report": "ok", "subscriber": subscriber }))
            }
        };
        let app = Router::new()
            .route("/v1/report", get(handler))
            .route_layer(gate.payment_gate(pricing));
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
            server,
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    async fn get(&self, headers: &[(&str, &str)]) -> Reply {
        let mut req = self.http.get(format!("{}/v1/report", self.url));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn with_sub(&self, id: &str) -> Reply {
        self.get(&[("x-service-sub", id)]).await
    }

    /// Polls until the answer to `id` has `status`, for at most `within`.
    async fn until(&self, id: &str, status: u16, within: Duration) -> Reply {
        let start = Instant::now();
        loop {
            let r = self.with_sub(id).await;
            if r.status == status || start.elapsed() > within {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn assert_not_active(r: &Reply, reason: &str) {
    assert_eq!(r.status, 402, "{}", r.body);
    assert_eq!(r.body["error"], "SubscriptionNotActive", "{}", r.body);
    assert_eq!(r.body["reason"], reason, "{}", r.body);
    assert!(
        r.body["accepts"][0]["memo"].is_string(),
        "fresh terms: {}",
        r.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_is_served_and_pause_resume_cancel_show_within_seconds() {
    let s = Setup::new().await;
    let plan = s.create_plan(1).await;
    let id = s.subscribe(plan.plan_id).await;
    let gate = s.gate(&[&plan]).await;
    let app = SubApp::serve(&gate, vec![Pricing::subscription(plan.plan_id)]).await;
    let id_s = id.to_string();

    let r = app.with_sub(&id_s).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["subscriber"],
        s.h.address(PAYER).to_string(),
        "{}",
        r.body
    );
    assert!(r.headers.get(X_PAYMENT_RESPONSE).is_none());
    assert_eq!(app.hits(), 1);

    // Paused by the subscriber: refused within ~3 s although the TTL is 60 s.
    s.subscriber_action(Subscriptions::pauseCall { id }.abi_encode())
        .await;
    let t = Instant::now();
    let r = app.until(&id_s, 402, Duration::from_secs(3)).await;
    assert_not_active(&r, "subscription_paused");
    eprintln!("pause visible after {:?}", t.elapsed());
    // Requests until then were served within the staleness bound; from now on none is.
    let hits = app.hits();
    assert_not_active(&app.with_sub(&id_s).await, "subscription_paused");
    assert_eq!(app.hits(), hits);

    // Resumed: served again.
    s.subscriber_action(Subscriptions::resumeCall { id }.abi_encode())
        .await;
    let r = app.until(&id_s, 200, Duration::from_secs(3)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(app.hits(), hits + 1);

    // Cancelled: refused for good.
    s.subscriber_action(Subscriptions::cancelCall { id }.abi_encode())
        .await;
    let r = app.until(&id_s, 402, Duration::from_secs(3)).await;
    assert_not_active(&r, "subscription_cancelled");
    // Once refused, the handler does not run again.
    let hits = app.hits();
    assert_not_active(&app.with_sub(&id_s).await, "subscription_cancelled");
    assert_eq!(app.hits(), hits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_malformed_foreign_and_overdue_ids_are_refused() {
    let s = Setup::new().await;
    let plan = s.create_plan(1).await;
    let other = s.create_plan(2).await;
    let id = s.subscribe(plan.plan_id).await;
    let foreign = s.subscribe(other.plan_id).await;
    let gate = s.gate(&[&plan]).await;
    let app = SubApp::serve(&gate, vec![Pricing::subscription(plan.plan_id)]).await;

    assert_not_active(
        &app.with_sub(&B256::repeat_byte(0x42).to_string()).await,
        "unknown_subscription",
    );
    for bad in ["nope", "0x1234", &"ab".repeat(32), &format!("{id}ff")] {
        assert_not_active(&app.with_sub(bad).await, "malformed_subscription_id");
    }
    // Two headers are refused too.
    let r = app
        .get(&[
            ("x-service-sub", &id.to_string()),
            ("x-service-sub", &id.to_string()),
        ])
        .await;
    assert_not_active(&r, "malformed_subscription_id");
    assert_not_active(&app.with_sub(&foreign.to_string()).await, "foreign_plan");
    assert_eq!(app.hits(), 0);

    // Served, then overdue once the chain's clock passes paidThrough without a collection.
    assert_eq!(app.with_sub(&id.to_string()).await.status, 200);
    s.h.fixture.chain.advance_time(INTERVAL + 60).await.unwrap();
    let r = app
        .until(&id.to_string(), 402, Duration::from_secs(3))
        .await;
    assert_not_active(&r, "subscription_overdue");
    let hits = app.hits();
    assert_not_active(&app.with_sub(&id.to_string()).await, "subscription_overdue");
    assert_eq!(app.hits(), hits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_gate_reads_the_chain_once_per_id() {
    let s = Setup::new().await;
    let plan = s.create_plan(1).await;
    let id = s.subscribe(plan.plan_id).await;
    let gate = s.gate(&[&plan]).await;
    let app = SubApp::serve(&gate, vec![Pricing::subscription(plan.plan_id)]).await;
    let before = s.status_reads();
    let id_s = id.to_string();
    // 50 one after another, 50 at once.
    for _ in 0..50 {
        assert_eq!(app.with_sub(&id_s).await.status, 200);
    }
    let concurrent: Vec<_> = (0..50)
        .map(|_| {
            let http = app.http.clone();
            let url = format!("{}/v1/report", app.url);
            let id_s = id_s.clone();
            tokio::spawn(async move {
                http.get(url)
                    .header("x-service-sub", id_s)
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    for t in concurrent {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(app.hits(), 100);
    let reads = s.status_reads() - before;
    eprintln!("100 requests, {reads} chain status reads");
    assert!(reads <= 2, "{reads} chain reads for 100 requests");
    assert!(gate.subscription_chain_reads() <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_scheme_offers_both_and_serves_each_way() {
    let s = Setup::new().await;
    let plan = s.create_plan(1).await;
    let id = s.subscribe(plan.plan_id).await;
    let gate = s.gate(&[&plan]).await;
    let app = SubApp::serve(
        &gate,
        vec![
            Pricing::subscription(plan.plan_id),
            Pricing::one_time(ONE_TIME),
        ],
    )
    .await;

    // Neither: the exact entry carries the plan.
    let r = app.get(&[]).await;
    assert_eq!(r.status, 402, "{}", r.body);
    let e = &r.body["accepts"][0];
    assert_eq!(e["scheme"], "exact");
    assert_eq!(e["amount"], ONE_TIME.to_string());
    assert_eq!(e["service"]["subscriptionScheme"], true);
    assert_eq!(e["service"]["planId"], plan.plan_id.to_string());
    assert_eq!(e["service"]["facilitator"], s.h.url);
    assert_eq!(e["plan"]["planId"], plan.plan_id.to_string());
    assert_eq!(app.hits(), 0);

    // X-PAYMENT pays one-time, unchanged.
    let (proof, _) = s.h.pay_402(&r.body).await;
    let r = app.get(&[("x-payment", &proof)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.headers.get(X_PAYMENT_RESPONSE).is_some());
    assert_eq!(app.hits(), 1);

    // X-Service-Sub: the subscription path, no payment.
    let r = app.with_sub(&id.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.headers.get(X_PAYMENT_RESPONSE).is_none());
    assert_eq!(app.hits(), 2);
    // A refused subscription still gets both offers.
    let r = app.with_sub(&B256::repeat_byte(9).to_string()).await;
    assert_not_active(&r, "unknown_subscription");
    assert_eq!(r.body["accepts"][0]["service"]["subscriptionScheme"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_without_a_subscriptions_chain_says_so() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let plan = B256::repeat_byte(3);
    let app = SubApp::serve(&gate, vec![Pricing::subscription(plan)]).await;
    let r = app.with_sub(&B256::repeat_byte(1).to_string()).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "SubscriptionsNotConfigured");
    assert_eq!(app.hits(), 0);
}
