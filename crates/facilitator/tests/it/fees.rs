//! What a real chain does that the devnet hides, on anvil with 2 s blocks and 2 confirmations:
//! a base-fee rise that prices out a settlement in flight (sent again with the same nonce at a
//! higher fee, answered once), a relayer falling under the floor and running dry (reported
//! before; refused with 503 before anything is written), and a node rate limiting with 429
//! (backed off and asked again, no payment lost or doubled).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use alloy::primitives::{Address, B256, U256};
use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};
use tollgate_chain::{
    Chain,
    rpc::{RpcChain, RpcOptions},
};
use tollgate_testkit::Fixture;

use crate::support::{Backend, Harness, RELAYER};

const PAYEE: Address = Address::repeat_byte(0x55);

async fn payment(h: &Harness, memo: u8) -> Value {
    let sp = h
        .signed_payment(2, PAYEE, 500_000, B256::repeat_byte(memo))
        .await;
    json!({ "signedPayment": sp })
}

fn hex_u128(v: &Value) -> u128 {
    u128::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// Whether the store holds a settlement row for the payment `body`.
async fn recorded(h: &Harness, body: &Value) -> bool {
    let nonce = body["signedPayment"]["authorization"]["nonce"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let key = tollgate_facilitator::settlement_key(h.chain_id(), h.token(), h.address(2), nonce);
    h.facilitator
        .store()
        .settlement(key)
        .await
        .unwrap()
        .is_some()
}

/// The latest block's base fee.
async fn latest_base_fee(url: &str) -> u128 {
    let v: Value = reqwest::Client::new()
        .post(url)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber", "params": ["latest", false]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    hex_u128(&v["result"]["baseFeePerGas"])
}

/// The hashes of the transactions anvil holds unmined.
async fn pending_hashes(h: &Harness) -> Vec<B256> {
    let content = h.rpc("txpool_content", json!([])).await;
    let mut out = Vec::new();
    for by_nonce in content["pending"]
        .as_object()
        .into_iter()
        .flat_map(|o| o.values())
    {
        for tx in by_nonce.as_object().into_iter().flat_map(|o| o.values()) {
            out.push(tx["hash"].as_str().unwrap().parse().unwrap());
        }
    }
    out
}

/// A settlement broadcast at one fee, then priced out by a base-fee rise before any block takes
/// it: the facilitator sends it again with the same nonce at a higher fee, the new version is
/// mined, and the payment is answered once, with the mined version's hash; the first version is
/// never mined and the payee is paid once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_priced_out_by_a_base_fee_rise_is_sent_again_at_a_higher_fee_and_answered_once()
 {
    let h = Harness::with_confirmations(Backend::Anvil, 2, |s| {
        s.confirmation_timeout = Duration::from_secs(90);
    })
    .await;
    // No blocks while the settlement goes out: it waits in the pool at the fee it was priced at.
    h.rpc("evm_setIntervalMining", json!([0])).await;
    h.rpc("evm_setAutomine", json!([false])).await;
    let before = h.token_balance(PAYEE).await;
    let body = payment(&h, 1).await;
    let request = {
        let http = h.http.clone();
        let url = format!("{}/authorize", h.url);
        let body = body.clone();
        tokio::spawn(async move {
            let r = http.post(url).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    let first = loop {
        if let [hash] = pending_hashes(&h).await[..] {
            break hash;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let original = h.rpc("eth_getTransactionByHash", json!([first])).await;
    let offered = hex_u128(&original["maxFeePerGas"]);
    // The next block's base fee far above what the settlement offers, then blocks every 2 s.
    let risen = offered * 20;
    h.rpc(
        "anvil_setNextBlockBaseFeePerGas",
        json!([format!("{risen:#x}")]),
    )
    .await;
    h.mine_every(2).await;

    let (status, v) = request.await.unwrap();
    assert_eq!(status, 200, "{v}");
    let mined: B256 = v["payment"]["txHash"].as_str().unwrap().parse().unwrap();
    assert_ne!(
        mined, first,
        "the first version could not be mined at its fee"
    );
    let receipt = h
        .fixture
        .chain
        .receipt(mined)
        .await
        .unwrap()
        .expect("mined");
    assert!(receipt.success);
    assert!(
        receipt.effective_gas_price > offered,
        "mined at {} wei/gas, above the first version's {offered}",
        receipt.effective_gas_price
    );
    let tx = h.rpc("eth_getTransactionByHash", json!([mined])).await;
    assert_eq!(
        tx["nonce"], original["nonce"],
        "the same nonce: one of them only can be mined"
    );
    assert_eq!(tx["input"], original["input"], "the same settlement");
    assert!(
        h.rpc("eth_getTransactionReceipt", json!([first]))
            .await
            .is_null(),
        "the first version is not mined"
    );
    assert_eq!(
        h.token_balance(PAYEE).await - before,
        U256::from(500_000 - 1_000)
    );

    // The proof names the version mined, and the facilitator vouches for it.
    let (status, check) = h
        .post("/proofs/verify", &json!({ "proof": v["proof"] }))
        .await;
    assert_eq!(status, 200, "{check}");
    assert_eq!(check["valid"], true, "{check}");
    // Answered once: the same payment again is the same proof.
    let (again, w) = h.post("/authorize", &body).await;
    assert_eq!(again, 200, "{w}");
    assert_eq!(w["payment"]["txHash"], v["payment"]["txHash"]);
    // And blocks later the pool holds nothing of it.
    h.rpc("evm_mine", json!([])).await;
    assert!(pending_hashes(&h).await.is_empty());
}

/// With `max_fee_gwei` below the fee market, nothing is sent: the payment is answered 503
/// before anything is written. With the cap above the base fee but below what the market would
/// offer, a transaction offers the cap, not more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_fee_above_the_cap_sends_nothing_and_writes_nothing() {
    tollgate_chain::install_crypto_provider();
    let fixture = Fixture::new(Backend::Anvil).await.expect("anvil");
    let url = fixture.rpc_url().unwrap().to_owned();
    let wallet = tollgate_testkit::dev_wallet(&fixture.accounts[RELAYER..=RELAYER]).unwrap();
    let chain_id = fixture.chain.chain_id();
    let capped = async |cap: u128| {
        RpcChain::connect(
            &url,
            wallet.clone(),
            RpcOptions {
                chain_id: Some(chain_id),
                max_fee_per_gas: Some(cap),
                ..RpcOptions::default()
            },
        )
        .await
        .unwrap()
    };
    let latest = latest_base_fee(&url).await;
    let chain = capped(latest / 4).await;
    let h = Harness::assemble(fixture, Arc::new(chain), 1, None, |_| {}).await;
    let nonce_before = h.fixture.chain.nonce(h.address(RELAYER)).await.unwrap();
    let body = payment(&h, 2).await;
    let (status, v) = h.post("/authorize", &body).await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"]["code"], "Unavailable", "{v}");
    assert_eq!(
        h.fixture.chain.nonce(h.address(RELAYER)).await.unwrap(),
        nonce_before,
        "nothing sent"
    );
    assert!(!recorded(&h, &body).await, "nothing recorded");

    // A cap between the base fee and the market's offer (twice the base fee and a tip): the
    // transaction offers the cap.
    let base = latest_base_fee(&url).await;
    let cap = base + base / 2;
    let chain = capped(cap).await;
    let relayer = h.address(RELAYER);
    let hash = chain
        .send(tollgate_chain::TxRequest {
            from: relayer,
            to: Some(relayer),
            ..tollgate_chain::TxRequest::default()
        })
        .await
        .unwrap();
    let tx = h.rpc("eth_getTransactionByHash", json!([hash])).await;
    assert_eq!(hex_u128(&tx["maxFeePerGas"]), cap, "{tx}");
    assert!(hex_u128(&tx["maxPriorityFeePerGas"]) <= cap, "{tx}");
}

/// A relayer under the floor is reported (`/readyz`, the gauges, one `relayer.low_balance`
/// event for the operator) while it still pays; one that cannot pay a settlement is refused 503
/// `Unavailable` with `Retry-After` before anything is written, and `/readyz` is 503; funded
/// again, the same payment settles once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayer_under_the_floor_is_reported_and_a_dry_one_refuses_before_writing() {
    let operator = Address::repeat_byte(0x0e);
    let h = Harness::with_confirmations(Backend::Anvil, 1, |s| {
        s.operator = Some(operator);
    })
    .await;
    let relayer = h.address(RELAYER);
    let price = h.fixture.chain.max_fee_per_gas().await.unwrap();
    let settlement = U256::from(300_000u64) * U256::from(price);
    let set_balance = async |wei: U256| {
        h.rpc("anvil_setBalance", json!([relayer, format!("{wei:#x}")]))
            .await;
        // Past the funds reading's lifetime.
        tokio::time::sleep(tollgate_facilitator::funds::FUNDS_TTL + Duration::from_millis(200))
            .await;
    };

    // Ten settlements' gas: under the floor of 100, still paying.
    set_balance(settlement * U256::from(10)).await;
    let (status, v) = h.post("/authorize", &payment(&h, 3).await).await;
    assert_eq!(status, 200, "{v}");
    let ready = h
        .http
        .get(format!("{}/readyz", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    let r: Value = ready.json().await.unwrap();
    let funds = r["checks"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with("funds:"))
        .map(|(_, v)| v.as_str().unwrap().to_owned())
        .expect("a funds check");
    assert!(
        funds.contains("below the floor") && funds.contains(&relayer.to_string()),
        "{funds}"
    );
    let metrics = h
        .http
        .get(format!("{}/metrics", h.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let below = metrics
        .lines()
        .find(|l| {
            l.starts_with("tollgate_relayer_below_floor{") && l.contains(&format!("{relayer:#x}"))
        })
        .expect("the gauge");
    assert!(below.ends_with(" 1.0") || below.ends_with(" 1"), "{below}");
    let events = h
        .facilitator
        .store()
        .events(operator, 0, 100)
        .await
        .unwrap();
    let low: Vec<_> = events
        .iter()
        .filter(|e| e.new.r#type == "relayer.low_balance")
        .collect();
    assert_eq!(low.len(), 1, "{events:?}");
    let data: Value = serde_json::from_str(&low[0].new.data).unwrap();
    assert_eq!(data["relayer"], json!(relayer));
    // Still low at the next readings: reported once.
    h.post("/authorize", &payment(&h, 4).await).await;
    tokio::time::sleep(tollgate_facilitator::funds::FUNDS_TTL + Duration::from_millis(200)).await;
    h.http
        .get(format!("{}/readyz", h.url))
        .send()
        .await
        .unwrap();
    let events = h
        .facilitator
        .store()
        .events(operator, 0, 100)
        .await
        .unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.new.r#type == "relayer.low_balance")
            .count(),
        1
    );

    // Dry: less than one settlement's gas at any price (the price falls as near-empty blocks
    // lower the base fee).
    set_balance(U256::from(1_000_000_000u64)).await;
    let nonce_before = h.fixture.chain.nonce(relayer).await.unwrap();
    let body = payment(&h, 5).await;
    let r = h
        .http
        .post(format!("{}/authorize", h.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.headers().get("retry-after").is_some());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "Unavailable", "{v}");
    assert_eq!(h.fixture.chain.nonce(relayer).await.unwrap(), nonce_before);
    assert!(!recorded(&h, &body).await, "nothing recorded");
    let ready = h
        .http
        .get(format!("{}/readyz", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        ready.status().as_u16(),
        503,
        "a replica that cannot pay is not ready"
    );

    // Funded again: the same payment settles, once.
    let before = h.token_balance(PAYEE).await;
    set_balance(settlement * U256::from(1_000)).await;
    let (status, v) = h.post("/authorize", &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        h.token_balance(PAYEE).await - before,
        U256::from(500_000 - 1_000)
    );
}

/// A proxy in front of anvil that answers `429 Too Many Requests` (with `Retry-After: 1` on
/// every other one) to every third request, and counts them. A request asked again after its
/// 429 is forwarded: which requests the limit meets does not depend on how concurrent requests
/// interleave (one met at each of its five attempts would fail the test by chance).
#[derive(Clone)]
struct RateLimiter {
    upstream: String,
    seen: Arc<AtomicU64>,
    limited: Arc<AtomicU64>,
    refused: Arc<std::sync::Mutex<std::collections::HashSet<Bytes>>>,
    http: reqwest::Client,
}

async fn limit(State(p): State<RateLimiter>, body: Bytes) -> Response {
    let n = p.seen.fetch_add(1, Ordering::Relaxed);
    let first = p
        .refused
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(body.clone());
    if n % 3 == 2 && first {
        let k = p.limited.fetch_add(1, Ordering::Relaxed);
        let mut r = (StatusCode::TOO_MANY_REQUESTS, "rate limited").into_response();
        if k % 2 == 0 {
            r.headers_mut().insert("retry-after", "1".parse().unwrap());
        }
        return r;
    }
    crate::support::forward_rpc(&p.http, &p.upstream, body).await
}

/// A node that rate limits a third of the requests (eth_sendRawTransaction included): each is
/// asked again after a pause, and every payment of a burst settles exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answering_429_is_backed_off_and_every_payment_settles_once() {
    tollgate_chain::install_crypto_provider();
    let fixture = Fixture::new(Backend::Anvil).await.expect("anvil");
    let proxy = RateLimiter {
        upstream: fixture.rpc_url().unwrap().to_owned(),
        seen: Arc::default(),
        limited: Arc::default(),
        refused: Arc::default(),
        http: reqwest::Client::new(),
    };
    let app = Router::new()
        .route("/", post(limit))
        .with_state(proxy.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let _server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let chain = crate::support::relayer_chain_via(&fixture, &url).await;
    let h = Harness::assemble(fixture, chain, 2, None, |s| {
        s.confirmation_timeout = Duration::from_secs(60);
    })
    .await;
    h.mine_every(1).await;
    let before = h.token_balance(PAYEE).await;
    let bodies: Vec<Value> = {
        let mut v = Vec::new();
        for memo in 10..16u8 {
            v.push(payment(&h, memo).await);
        }
        v
    };
    let mut tasks = tokio::task::JoinSet::new();
    for body in bodies.clone() {
        let http = h.http.clone();
        let url = format!("{}/authorize", h.url);
        tasks.spawn(async move {
            let r = http.post(url).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        });
    }
    let mut hashes = std::collections::HashSet::new();
    while let Some(r) = tasks.join_next().await {
        let (status, v) = r.unwrap();
        assert_eq!(status, 200, "{v}");
        hashes.insert(v["payment"]["txHash"].as_str().unwrap().to_owned());
    }
    assert_eq!(hashes.len(), bodies.len(), "one settlement each");
    assert!(
        proxy.limited.load(Ordering::Relaxed) > 0,
        "the node rate limited some requests"
    );
    assert_eq!(
        h.token_balance(PAYEE).await - before,
        U256::from(bodies.len() as u64 * (500_000 - 1_000)),
        "each paid once"
    );
    // Again, all of them: the same proofs, nothing more moved.
    for body in &bodies {
        let (status, v) = h.post("/authorize", body).await;
        assert_eq!(status, 200, "{v}");
        assert!(hashes.contains(v["payment"]["txHash"].as_str().unwrap()));
    }
    assert_eq!(
        h.token_balance(PAYEE).await - before,
        U256::from(bodies.len() as u64 * (500_000 - 1_000))
    );
}

/// A relayer whose estimated balance (lowered by the payments given out since its last reading)
/// crosses the floor before a reading does is still reported when a reading finds it below: on
/// the devnet, whose fees never move, so the floor is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fall_below_the_floor_is_reported_even_after_payments_estimated_it_there() {
    let operator = Address::repeat_byte(0x0f);
    let h = Harness::with(Backend::Devnet, |s| s.operator = Some(operator)).await;
    let chain = &h.fixture.chain;
    let relayer = h.address(RELAYER);
    let settlement = U256::from(300_000u64) * U256::from(chain.max_fee_per_gas().await.unwrap());
    // Leaves the relayer `settlements` settlements' gas (and a little), sending the rest away.
    let keep = async |settlements: u64| {
        let target = settlement * U256::from(settlements) + settlement / U256::from(4);
        let balance = chain.balance(relayer).await.unwrap();
        let fee = U256::from(21_000u64) * U256::from(chain.max_fee_per_gas().await.unwrap());
        let tx = tollgate_chain::TxRequest {
            from: relayer,
            to: Some(Address::repeat_byte(0xee)),
            value: balance - target - fee,
            gas: Some(21_000),
            ..tollgate_chain::TxRequest::default()
        };
        chain
            .send_and_wait(tx, tollgate_chain::WaitOptions::default())
            .await
            .unwrap();
        tokio::time::sleep(tollgate_facilitator::funds::FUNDS_TTL + Duration::from_millis(200))
            .await;
    };
    let low_events = async || {
        h.facilitator
            .store()
            .events(operator, 0, 100)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.new.r#type == "relayer.low_balance")
            .count()
    };

    // Two settlements above the floor at a reading; three payments take the estimate under it.
    keep(102).await;
    for memo in 20..23u8 {
        let (status, v) = h.post("/authorize", &payment(&h, memo).await).await;
        assert_eq!(status, 200, "{v}");
    }
    assert_eq!(
        low_events().await,
        0,
        "no reading found it below the floor yet"
    );
    // A reading below the floor: reported, once.
    keep(50).await;
    let (status, v) = h.post("/authorize", &payment(&h, 23).await).await;
    assert_eq!(status, 200, "{v}");
    h.http
        .get(format!("{}/readyz", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(low_events().await, 1);
}

/// The funds check before an x402 `/settle` takes neither a relayer's turn nor its gas: with two
/// relayers, settlements one after another go out from both (a check that took a turn left every
/// other relayer idle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_settlements_go_out_from_every_relayer_in_turn() {
    const SECOND: usize = 6;
    let h = Harness::start(
        tollgate_testkit::harness::TestNet::builder()
            .backend(Backend::Devnet)
            .relayers([RELAYER, SECOND]),
    )
    .await;
    let pay_to = h.account(7).address;
    let mut senders = std::collections::BTreeSet::new();
    for n in 0..4u8 {
        let req = h.requirements(pay_to, 10_000);
        let payload = h
            .x402_payload(
                1 + usize::from(n % 2),
                pay_to,
                10_000,
                B256::repeat_byte(0x60 + n),
            )
            .await;
        let body =
            json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": req });
        let (status, r) = h.post("/settle", &body).await;
        assert_eq!((status, &r["success"]), (200, &json!(true)), "{r}");
        let tx: B256 = r["transaction"].as_str().unwrap().parse().unwrap();
        senders.insert(h.fixture.chain.receipt(tx).await.unwrap().unwrap().from);
    }
    assert_eq!(
        senders,
        [h.address(RELAYER), h.address(SECOND)].into(),
        "both relayers sent"
    );
}
