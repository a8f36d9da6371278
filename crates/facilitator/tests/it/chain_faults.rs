//! Chain faults between the facilitator and a real anvil node: a deliberate fault injector (a
//! JSON-RPC proxy) makes the node look down, slow, erroring or dropping transactions, and anvil
//! reorganizes for real (`anvil_reorg`). Every answer is a clear 503 or a pending state (never a
//! false success or a false failure), and once the node is healthy the system finishes the work
//! by itself: every payment settles exactly once.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::primitives::{Address, B256, U256, keccak256};
use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};
use tollgate_chain::contracts::PaymentRouter;
use tollgate_testkit::Fixture;

use crate::support::{Backend, Harness, RELAYER};

/// What the proxy does to each JSON-RPC request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Forward it.
    Pass,
    /// Answer HTTP 503 (the node is down).
    Down,
    /// Answer a JSON-RPC internal error.
    Errors,
    /// Answer a JSON-RPC internal error to this method only, forward the rest.
    ErrorsOn(&'static str),
    /// Forward it after this delay.
    Slow(Duration),
    /// Swallow `eth_sendRawTransaction` (answer the hash, forward nothing), forward the rest.
    DropSends,
}

#[derive(Clone)]
struct Proxy {
    upstream: String,
    mode: Arc<Mutex<Mode>>,
    dropped: Arc<Mutex<Vec<B256>>>,
    http: reqwest::Client,
}

struct FaultyRpc {
    url: String,
    proxy: Proxy,
    _task: tokio::task::JoinHandle<()>,
}

impl FaultyRpc {
    async fn start(upstream: &str) -> Self {
        let proxy = Proxy {
            upstream: upstream.to_owned(),
            mode: Arc::new(Mutex::new(Mode::Pass)),
            dropped: Arc::default(),
            http: reqwest::Client::new(),
        };
        let app = Router::new()
            .route("/", post(relay))
            .with_state(proxy.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url,
            proxy,
            _task: task,
        }
    }

    fn set(&self, mode: Mode) {
        *self.proxy.mode.lock().unwrap() = mode;
    }

    fn dropped(&self) -> Vec<B256> {
        self.proxy.dropped.lock().unwrap().clone()
    }
}

async fn relay(State(p): State<Proxy>, body: Bytes) -> Response {
    let mode = *p.mode.lock().unwrap();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let erroring = |method: &str| {
        request["method"] == method
            || request
                .as_array()
                .is_some_and(|batch| batch.iter().any(|r| r["method"] == method))
    };
    match mode {
        Mode::Down => return (StatusCode::SERVICE_UNAVAILABLE, "node down").into_response(),
        Mode::ErrorsOn(method) if !erroring(method) => {}
        Mode::Errors | Mode::ErrorsOn(_) => {
            let error = |r: &Value| {
                json!({ "jsonrpc": "2.0", "id": r["id"],
                        "error": { "code": -32603, "message": "internal error" } })
            };
            let answer = match request.as_array() {
                Some(batch) => Value::Array(batch.iter().map(error).collect()),
                None => error(&request),
            };
            return axum::Json(answer).into_response();
        }
        Mode::Slow(delay) => tokio::time::sleep(delay).await,
        Mode::DropSends if request["method"] == "eth_sendRawTransaction" => {
            let raw = request["params"][0].as_str().unwrap_or_default();
            let bytes = alloy::primitives::hex::decode(raw).unwrap_or_default();
            let hash = keccak256(bytes);
            p.dropped.lock().unwrap().push(hash);
            return axum::Json(json!({ "jsonrpc": "2.0", "id": request["id"], "result": hash }))
                .into_response();
        }
        Mode::DropSends | Mode::Pass => {}
    }
    crate::support::forward_rpc(&p.http, &p.upstream, body).await
}

/// A facilitator on anvil that reaches it through a [`FaultyRpc`].
async fn faulty(confirmations: u64, confirmation_timeout: Duration) -> (Harness, FaultyRpc) {
    tollgate_chain::install_crypto_provider();
    let fixture = Fixture::new(Backend::Anvil).await.expect("anvil");
    let proxy = FaultyRpc::start(fixture.rpc_url().unwrap()).await;
    let chain = tollgate_chain::rpc::RpcChain::connect(
        &proxy.url,
        tollgate_testkit::dev_wallet(&fixture.accounts[RELAYER..=RELAYER]).unwrap(),
        tollgate_chain::rpc::RpcOptions {
            chain_id: Some(fixture.chain.chain_id()),
            request_timeout: Duration::from_secs(3),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let h = Harness::assemble(fixture, Arc::new(chain), confirmations, None, |s| {
        s.confirmation_timeout = confirmation_timeout;
    })
    .await;
    (h, proxy)
}

/// `POST /authorize` of this payment: (status, body).
async fn authorize(h: &Harness, body: &Value) -> (u16, Value) {
    h.post("/authorize", body).await
}

async fn payment(h: &Harness, memo: u8) -> Value {
    let sp = h
        .signed_payment(
            2,
            Address::repeat_byte(0x44),
            500_000,
            B256::repeat_byte(memo),
        )
        .await;
    json!({ "signedPayment": sp })
}

/// Polls the status URL until it answers 200; the proof's body.
async fn settled(h: &Harness, status_url: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = h.http.get(status_url).send().await.unwrap();
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        match status {
            200 => return v,
            202 | 503 => {}
            other => panic!("status URL answered {other}: {v}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never settled: {status} {v}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn payee_balance(h: &Harness) -> U256 {
    h.token_balance(Address::repeat_byte(0x44)).await
}

/// A JSON-RPC call straight to anvil (not through the proxy).
async fn anvil_rpc(http: &reqwest::Client, url: &str, method: &str, params: Value) -> Value {
    let v: Value = http
        .post(url)
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(v.get("error").is_none(), "{method}: {v}");
    v["result"].clone()
}

/// How many `PaymentSettled` events the chain holds.
async fn settlements_on_chain(h: &Harness) -> usize {
    let chain = &h.fixture.chain;
    let latest = chain.block_number().await.unwrap();
    chain
        .logs(&tollgate_chain::LogFilter {
            from_block: 0,
            to_block: Some(latest),
            addresses: vec![h.fixture.deployment.router],
            topics: [
                Some(vec![
                    <PaymentRouter::PaymentSettled as alloy::sol_types::SolEvent>::SIGNATURE_HASH,
                ]),
                None,
                None,
                None,
            ],
        })
        .await
        .unwrap()
        .len()
}

/// Two nodes of one chain (two proxies in front of one anvil), the second a fallback: the primary
/// down or erroring, then the fallback down, is a failover each time, never a 503; every payment
/// settles once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_or_erroring_fails_over_to_the_next_and_nothing_is_lost() {
    use tollgate_chain::{
        failover::{FailoverChain, FailoverOptions},
        rpc::{RpcChain, RpcOptions},
    };
    tollgate_chain::install_crypto_provider();
    let fixture = Fixture::new(Backend::Anvil).await.expect("anvil");
    let primary = FaultyRpc::start(fixture.rpc_url().unwrap()).await;
    let fallback = FaultyRpc::start(fixture.rpc_url().unwrap()).await;
    let chain_id = fixture.chain.chain_id();
    let node = |url: &str| -> Arc<dyn tollgate_chain::Chain> {
        Arc::new(
            RpcChain::connect_lazy(
                url,
                chain_id,
                tollgate_testkit::dev_wallet(&fixture.accounts[RELAYER..=RELAYER]).unwrap(),
                RpcOptions {
                    request_timeout: Duration::from_secs(3),
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    };
    let nodes = vec![node(&primary.url), node(&fallback.url)];
    // Longer than any one payment takes here, so that the primary is still cooling down when
    // its health is read after the payment.
    let cool_down = Duration::from_secs(4);
    let chain = Arc::new(FailoverChain::new(nodes, FailoverOptions { cool_down }).unwrap());
    let h = Harness::assemble(fixture, chain.clone(), 1, None, |_| {}).await;
    let cases = [
        (Mode::Down, Mode::Pass),
        (Mode::Errors, Mode::Pass),
        // Erroring only on receipts, after the settlement went out through it: the wait goes
        // on against the fallback.
        (Mode::ErrorsOn("eth_getTransactionReceipt"), Mode::Pass),
        (Mode::Pass, Mode::Down),
        (Mode::Pass, Mode::Pass),
    ];
    for (i, (a, b)) in cases.into_iter().enumerate() {
        primary.set(a);
        fallback.set(b);
        // Past the cool-downs of the case before: every node is tried afresh.
        tokio::time::sleep(cool_down + Duration::from_millis(100)).await;
        let body = payment(&h, 0x60 + u8::try_from(i).unwrap()).await;
        let (status, v) = authorize(&h, &body).await;
        assert_eq!(status, 200, "primary {a:?}, fallback {b:?}: {v}");
        assert_eq!(v["status"], "confirmed", "{v}");
        // The primary is skipped while it is out; the fallback is never needed otherwise.
        assert_eq!(
            chain.health(),
            [a == Mode::Pass, true],
            "primary {a:?}, fallback {b:?}"
        );
        let (ready, r) = h.get("/readyz").await;
        assert_eq!(ready, 200, "primary {a:?}, fallback {b:?}: {r}");
    }
    assert_eq!(payee_balance(&h).await, U256::from(5 * 499_000));
    assert_eq!(settlements_on_chain(&h).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_or_erroring_is_a_clear_503_and_nothing_is_lost() {
    let (h, rpc) = faulty(1, Duration::from_secs(10)).await;
    let body = payment(&h, 1).await;
    for mode in [Mode::Down, Mode::Errors] {
        rpc.set(mode);
        let (status, v) = authorize(&h, &body).await;
        assert_eq!(status, 503, "{mode:?}: {v}");
        assert!(v["error"]["code"].is_string(), "{v}");
        assert_eq!(h.get("/readyz").await.0, 503, "{mode:?}: not ready");
        // Nothing was recorded as failed: the same request still goes through later.
    }
    rpc.set(Mode::Pass);
    assert_eq!(h.get("/readyz").await.0, 200);
    let (status, first) = authorize(&h, &body).await;
    assert_eq!(status, 200, "{first}");
    let (_, again) = authorize(&h, &body).await;
    assert_eq!(again["proof"], first["proof"]);
    // The client lost that answer and asks again while the node is down: a settled payment is
    // answered from the store, without the chain.
    for mode in [Mode::Down, Mode::Errors] {
        rpc.set(mode);
        let (status, again) = authorize(&h, &body).await;
        assert_eq!(
            (status, &again["proof"]),
            (200, &first["proof"]),
            "{mode:?}: {again}"
        );
    }
    rpc.set(Mode::Pass);
    assert_eq!(payee_balance(&h).await, U256::from(499_000));
    assert_eq!(settlements_on_chain(&h).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_node_answers_pending_and_the_payment_finishes_by_itself() {
    let (h, rpc) = faulty(1, Duration::from_millis(500)).await;
    let body = payment(&h, 2).await;
    // Each call of the node takes longer than the whole confirmation wait.
    rpc.set(Mode::Slow(Duration::from_millis(1_000)));
    let (status, v) = authorize(&h, &body).await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["status"], "pending");
    let status_url = v["statusUrl"].as_str().unwrap().to_owned();
    rpc.set(Mode::Pass);
    let proof = settled(&h, &status_url).await;
    assert!(proof["proof"].is_string());
    assert_eq!(payee_balance(&h).await, U256::from(499_000));
    assert_eq!(settlements_on_chain(&h).await, 1);
}

/// The node takes the settlement, mines it, then answers every receipt read with an internal
/// error: a wait that cannot read the receipt is no verdict on the transaction. `/authorize`
/// answers 202 pending and x402 `/settle` `invalid_transaction_state` naming the transaction
/// (never a failure, which would tell the payer that money that moved did not); once the node
/// answers receipts again, each payment is proven once, a retry answered from the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_erroring_on_receipts_after_the_send_answers_pending_and_each_settles_once() {
    let (h, rpc) = faulty(1, Duration::from_secs(2)).await;
    let pay_to = Address::repeat_byte(0x44);
    let body = payment(&h, 6).await;
    let x402 = h
        .settle_body(3, pay_to, 500_000, B256::repeat_byte(0x66))
        .await;
    rpc.set(Mode::ErrorsOn("eth_getTransactionReceipt"));
    let (status, v) = authorize(&h, &body).await;
    assert_eq!(status, 202, "pending, not failed: {v}");
    assert_eq!(v["status"], "pending", "{v}");
    let status_url = v["statusUrl"].as_str().unwrap().to_owned();
    let (_, a) = h.post("/settle", &x402).await;
    assert_eq!(a["success"], false, "{a}");
    assert_eq!(a["errorReason"], "invalid_transaction_state", "{a}");
    let tx: B256 = a["transaction"].as_str().unwrap().parse().unwrap();
    // Both moved meanwhile.
    assert_eq!(payee_balance(&h).await, U256::from(499_000 + 500_000));
    rpc.set(Mode::Pass);
    let proof = settled(&h, &status_url).await;
    assert!(proof["proof"].is_string(), "{proof}");
    let (_, again) = h.post("/settle", &x402).await;
    assert_eq!(again["success"], true, "{again}");
    assert_eq!(again["transaction"], tx.to_string(), "{again}");
    assert_eq!(payee_balance(&h).await, U256::from(499_000 + 500_000));
    assert_eq!(settlements_on_chain(&h).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_transaction_is_sent_again_and_leaves_no_nonce_gap() {
    let (h, rpc) = faulty(1, Duration::from_millis(500)).await;
    let first = payment(&h, 3).await;
    rpc.set(Mode::DropSends);
    let (status, v) = authorize(&h, &first).await;
    assert_eq!(
        status, 202,
        "a dropped transaction is pending, not failed: {v}"
    );
    assert_eq!(rpc.dropped().len(), 1);
    let status_url = v["statusUrl"].as_str().unwrap().to_owned();
    rpc.set(Mode::Pass);
    // The next settlement from the same relayer is not stuck behind the dropped nonce (it is
    // mined at once; a 202 only means this busy machine was slower than the short wait).
    let (status, second) = authorize(&h, &payment(&h, 4).await).await;
    match status {
        200 => {}
        202 => {
            settled(&h, second["statusUrl"].as_str().unwrap()).await;
        }
        other => panic!("{other}: {second}"),
    }
    // The dropped one is sent again (status URL or background reconciler) and settles once.
    let proof = settled(&h, &status_url).await;
    let tx: B256 = proof["payment"]["txHash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(!rpc.dropped().contains(&tx), "settled by a new transaction");
    assert_eq!(payee_balance(&h).await, U256::from(2 * 499_000));
    assert_eq!(settlements_on_chain(&h).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_before_the_required_depth_is_followed_not_proven() {
    // Two confirmations: the proof waits for a block on top of the settlement's.
    let (h, _rpc) = faulty(2, Duration::from_millis(800)).await;
    let anvil = h.fixture.rpc_url().unwrap().to_owned();
    let body = payment(&h, 5).await;
    let (status, v) = authorize(&h, &body).await;
    assert_eq!(status, 202, "one block deep is not enough: {v}");
    let status_url = v["statusUrl"].as_str().unwrap().to_owned();
    let first_tx: B256 = v["txHash"].as_str().unwrap().parse().unwrap();
    // The block holding the settlement is replaced by an empty one.
    anvil_rpc(&h.http, &anvil, "anvil_reorg", json!([1, []])).await;
    assert!(
        h.fixture.chain.receipt(first_tx).await.unwrap().is_none(),
        "reorged out"
    );
    // Blocks keep coming; the facilitator follows the chain it sees and proves only a
    // settlement that has the depth.
    let mine = tokio::spawn({
        let (http, anvil) = (h.http.clone(), anvil.clone());
        async move {
            for _ in 0..60 {
                anvil_rpc(&http, &anvil, "evm_mine", json!([])).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    });
    let proof = settled(&h, &status_url).await;
    mine.abort();
    let tx: B256 = proof["payment"]["txHash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let receipt = h
        .fixture
        .chain
        .receipt(tx)
        .await
        .unwrap()
        .expect("the proven transaction is on the chain");
    assert!(receipt.success);
    assert_eq!(
        proof["payment"]["block"].as_u64().unwrap(),
        receipt.block_number
    );
    assert_eq!(payee_balance(&h).await, U256::from(499_000));
    assert_eq!(settlements_on_chain(&h).await, 1);
}
