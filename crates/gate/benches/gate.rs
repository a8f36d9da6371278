//! Gate costs, measured in one run:
//!
//! - `verify_payment_proof` per second (EIP-712 recovery against the cached signers, terms, memo
//!   MAC, once-only insert into the memo store), single task, and at 64 tasks with the
//!   process's CPU per verification (on the SQLite file store, and on the in-memory store: the
//!   same hand-offs without the durable write), beside its floor on this machine (the proof's
//!   digest and signer recovery alone, on one core), with libsecp256k1 (shipped) and k256 timed
//!   side by side, and the once-only claim alone at 64 tasks on each store (what the claim adds
//!   to the floor);
//! - the gate's added cost per paid request: the same axum app with and without `payment_gate`,
//!   driven in process with `tower::ServiceExt::oneshot`, each gated request carrying a fresh
//!   valid proof; reported as a ratio and as microseconds per request, and at 64 concurrent
//!   requests as the process CPU per request gated less ungated, in recoveries;
//! - unpaid 402 responses per second at concurrency 64 over loopback HTTP (keep-alive
//!   connections driven by a minimal HTTP/1.1 load generator in this file);
//! - a paid MPP request (`Authorization: Payment`) against a paid x402 V2 one
//!   (`PAYMENT-SIGNATURE`) through the same gate, one at a time, each settled through the
//!   facilitator on the devnet (`TOLLGATE_BENCH_PAID_N` requests a round, default 200).
//!
//! ```text
//! cargo bench -p tollgate-gate --bench gate            # N = 20,000
//! TOLLGATE_BENCH_N=50000 cargo bench -p tollgate-gate --bench gate
//! ```
#![allow(missing_docs, clippy::print_stdout, clippy::print_stderr)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::primitives::{Address, B256, Bytes};
use axum::{Router, body::Body, http::Request, routing::get};
use tollgate_gate::{Expected, Gate, Offer, Pricing};
use tollgate_protocol::{Amount, PaymentProof, unix_now};
use tollgate_testkit::{
    Backend,
    harness::{PROOF_KEY, TestNet},
};
use tower::ServiceExt as _;

use tollgate_testkit::load;

const PRICE: u64 = 500_000;

fn main() {
    tollgate_chain::install_crypto_provider();
    let n: usize = std::env::var("TOLLGATE_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(n));
}

async fn run(n: usize) {
    // A real facilitator publishes the proof signer the gate trusts.
    let net = TestNet::start(Backend::Devnet).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let accounts = net.fixture.accounts.clone();
    let d = net.fixture.deployment;
    let facilitator_url = net.url.clone();
    let proof_key = accounts[PROOF_KEY].signer();
    let pay_to = accounts[1].address;

    let secret = [7u8; 32];
    let build = |store: String| {
        Gate::builder()
            .network("tollgate-devnet")
            .token(d.token, "USD Coin", "2")
            .pay_to(pay_to)
            .facilitator(facilitator_url.clone())
            .public_url("http://127.0.0.1:1")
            .memo_secret(secret)
            .memo_store_url(store)
            .build()
    };
    let gate = build(format!(
        "sqlite://{}",
        dir.path().join("memos.db").display()
    ))
    .await
    .unwrap();
    let mem_gate = build("sqlite::memory:".into()).await.unwrap();
    // The default store: this process's memory, no database.
    let default_gate = build("memory:".into()).await.unwrap();
    let pricing = [Pricing::one_time(PRICE)];
    let offer = Offer {
        method: "GET",
        resource_url: "http://127.0.0.1:1/v1/quote",
        pricing: &pricing,
        description: "",
        mime_type: "",
    };

    eprintln!("issuing {n} memos and signing {n} proofs per phase (not timed)...");
    let proofs = |count: usize| -> Vec<PaymentProof> {
        (0..count)
            .map(|i| {
                let memo = gate.build_payment_required(&offer, "").accepts[0].memo;
                let mut p = PaymentProof {
                    version: 1,
                    network: "tollgate-devnet".parse().unwrap(),
                    chain_id: 31337,
                    token: d.token,
                    payer: accounts[2].address,
                    pay_to,
                    amount: Amount::from_units(PRICE),
                    fee: Amount::from_units(1_000),
                    memo,
                    tx_hash: B256::from(alloy::primitives::U256::from(i as u64 + 1)),
                    block: 1,
                    issued_at: unix_now(),
                    expiry: unix_now() + 3600,
                    signer: Address::ZERO,
                    signature: Bytes::new(),
                };
                tollgate_chain::proof::sign(&proof_key, &mut p).unwrap();
                p
            })
            .collect()
    };

    // 1. verify_payment_proof: one task on a durable (file) memo store, one task on an in-memory
    // store (the CPU cost of verification itself), and 64 tasks on the file store.
    let expected = Expected {
        method: "GET",
        resource: "/v1/quote",
        price: Amount::from_units(PRICE),
    };
    println!("gate bench (n = {n})");
    for (label, g) in [
        ("1 task, SQLite file memo store", &gate),
        ("1 task, SQLite in-memory store", &mem_gate),
        ("1 task, memory: (the default)", &default_gate),
    ] {
        g.verify_payment_proof(&proofs(1)[0], &expected)
            .await
            .expect("warm-up: signers fetched");
        let batch = proofs(n);
        let t = Instant::now();
        for p in &batch {
            g.verify_payment_proof(p, &expected)
                .await
                .expect("valid proof");
        }
        println!(
            "  verify_payment_proof/s ({label:<31}): {:>10.0}",
            n as f64 / t.elapsed().as_secs_f64()
        );
    }
    let batch = Arc::new(proofs(n));
    let file = verify_concurrently(&gate, &batch).await;
    println!(
        "  verify_payment_proof/s (64 tasks, SQLite file store)  : {:>10.0}",
        file.per_second()
    );
    // Per core: verifications per second of CPU the whole process spent (every thread: the
    // runtime's workers, SQLite's, the in-process devnet and facilitator, which sit idle here).
    println!(
        "    per core (n / process CPU seconds, {:.0} µs CPU each)  : {:>10.0}",
        file.cpu_each() * 1e6,
        1.0 / file.cpu_each()
    );
    // The same proofs' memos again on the in-memory store (never claimed there): the same
    // hand-offs to the store's thread and back, without the file's write and WAL sync.
    let memory = verify_concurrently(&mem_gate, &batch).await;
    println!(
        "  verify_payment_proof/s (64 tasks, SQLite in memory)   : {:>10.0}  ({:.0} µs CPU each)",
        memory.per_second(),
        memory.cpu_each() * 1e6
    );
    let default = verify_concurrently(&default_gate, &batch).await;
    println!(
        "  verify_payment_proof/s (64 tasks, memory: default)    : {:>10.0}  ({:.0} µs CPU each)",
        default.per_second(),
        default.cpu_each() * 1e6
    );
    // The floor of a verification on this machine: the proof's EIP-712 digest and the
    // recovery of its signer, one after another on one core. Nothing about it can be cached
    // (every proof is new), so a verification costs at least this; the ratio is what the
    // machine's speed does not change. Both secp256k1 implementations in the build are timed,
    // interleaved, best of three each: libsecp256k1 (what `proof::recover` uses: alloy's
    // `secp256k1` feature) and RustCrypto's k256 (alloy's default without it).
    let floor = recovery_floor(&batch);
    let recovery = floor.shipped;
    println!(
        "    floor: the proof's recovery alone, 1 core        : {:>10.0}/s ({:.0} µs; a verification costs {:.2} of them)",
        1.0 / recovery,
        recovery * 1e6,
        file.cpu_each() / recovery
    );
    println!(
        "    without the durable write (in-memory store)       : {:>10.2} recoveries per verification",
        memory.cpu_each() / recovery
    );
    println!(
        "    recovery, libsecp256k1 (shipped) / k256           : {:>7.1} / {:.1} µs  (k256 takes {:.2}x)",
        floor.shipped * 1e6,
        floor.k256 * 1e6,
        floor.k256 / floor.shipped
    );
    // What the once-only claim costs a verification by itself: the same 64 tasks claiming fresh
    // keys on a store of each kind (the hand-offs to the store's thread and back, the insert,
    // and for the file its group commit and WAL sync), in recoveries. A verification costs at
    // least the floor plus this; the rest is its own work beside them.
    for (label, url, whole) in [
        (
            "file",
            format!("sqlite://{}", dir.path().join("claims.db").display()),
            &file,
        ),
        ("in-memory", "sqlite::memory:".to_owned(), &memory),
        ("memory:", "memory:".to_owned(), &default),
    ] {
        let store = tollgate_gate::store::open(&url).await.unwrap();
        let claims = in_64_tasks(n, move |i| {
            let store = Arc::clone(&store);
            async move {
                let key = B256::from(alloy::primitives::U256::from(i as u64 + 1));
                assert!(store.claim(key, u64::MAX / 2).await.unwrap(), "fresh key");
            }
        })
        .await;
        let claim = claims.cpu_each() / recovery;
        println!(
            "    the claim alone, 64 tasks, {label:<9} store         : {:>10.2} recoveries; the rest of a verification {:.2}",
            claim,
            whole.cpu_each() / recovery - 1.0 - claim
        );
    }

    // 2. Gated vs ungated, in process, same app, same run (memory and file memo stores).
    let app = || Router::new().route("/v1/quote", get(|| async { "42" }));
    let ungated = app();
    let t = Instant::now();
    for _ in 0..n {
        let r = ungated
            .clone()
            .oneshot(Request::get("/v1/quote").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let plain = t.elapsed();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    println!(
        "  ungated requests/s (in process)                       : {:>10.0}",
        n as f64 / plain.as_secs_f64()
    );
    for (label, g) in [
        ("in-memory memo store", &mem_gate),
        ("SQLite file memo store", &gate),
    ] {
        let gated = app().route_layer(g.payment_gate(pricing.clone()));
        let headers: Vec<String> = proofs(n).iter().map(PaymentProof::encode).collect();
        let t = Instant::now();
        for h in &headers {
            let req = Request::get("/v1/quote")
                .header("x-payment", h)
                .body(Body::empty())
                .unwrap();
            let r = gated.clone().oneshot(req).await.unwrap();
            assert_eq!(r.status(), 200, "a valid proof passes");
        }
        let paid = t.elapsed();
        println!(
            "  paid requests/s through payment_gate ({label:<22}): {:>7.0}  ratio {:.4}  added {:.1} µs/request",
            n as f64 / paid.as_secs_f64(),
            plain.as_secs_f64() / paid.as_secs_f64(),
            per(paid) - per(plain)
        );
    }

    // The same with 64 concurrent requests (claims group-commit): the process CPU per request,
    // gated less ungated, is what the gate adds (as a multiple of one recovery: what the
    // machine's speed does not change).
    let ungated_cpu = concurrently(n, app(), None).await;
    let gated = app().route_layer(gate.payment_gate(pricing.clone()));
    let headers: Arc<Vec<String>> = Arc::new(proofs(n).iter().map(PaymentProof::encode).collect());
    let gated_cpu = concurrently(n, gated, Some(headers)).await;
    let added = gated_cpu.cpu_each() - ungated_cpu.cpu_each();
    println!(
        "  paid requests/s, 64 concurrent (SQLite file store)   : {:>10.0}  ({:.0} µs CPU each, ungated {:.1} µs)",
        gated_cpu.per_second(),
        gated_cpu.cpu_each() * 1e6,
        ungated_cpu.cpu_each() * 1e6,
    );
    println!(
        "    the gate's CPU per paid request                   : {:>10.1} µs = {:.2} recoveries",
        added * 1e6,
        added / recovery
    );

    // 3. Unpaid 402s at concurrency 64 over loopback HTTP.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let unpaid = app().route_layer(gate.payment_gate(pricing.clone()));
    tokio::spawn(async move { axum::serve(listener, unpaid).await });
    let total = n * 5;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..64 {
        let count = total / 64 + usize::from(w < total % 64);
        tasks.push(tokio::spawn(async move {
            load::keep_alive(
                addr,
                b"GET /v1/quote HTTP/1.1\r\nHost: bench\r\n\r\n",
                count,
                402,
            )
            .await
        }));
    }
    let mut got = 0;
    for task in tasks {
        got += task.await.unwrap();
    }
    let el = t.elapsed();
    assert_eq!(got, total, "every answer was a 402");
    println!(
        "  unpaid 402 responses/s, 64 connections, loopback     : {:>10.0}",
        total as f64 / el.as_secs_f64()
    );

    // 4. A paid MPP request against a paid x402 V2 one, through the same gate, in process, one
    // at a time, each settled through the facilitator on the devnet: the same ERC-3009 transfer
    // by two wires. Rounds interleaved; the terms fetched and signed before each (not timed).
    let paid_n: usize = std::env::var("TOLLGATE_BENCH_PAID_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let gated = app().route_layer(default_gate.payment_gate(pricing.clone()).mpp(true));
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..3 {
        for (i, wire) in [Wire::X402V2, Wire::Mpp].into_iter().enumerate() {
            let mut headers = Vec::with_capacity(paid_n);
            for k in 0..paid_n {
                let nonce = B256::from(alloy::primitives::U256::from(
                    (round * 10 + i) * 1_000_000 + k + 1,
                ));
                headers.push(wire.sign(&net, &gated, pay_to, nonce).await);
            }
            let t = Instant::now();
            for (name, value) in &headers {
                let req = Request::get("/v1/quote")
                    .header(*name, value)
                    .body(Body::empty())
                    .unwrap();
                let r = gated.clone().oneshot(req).await.unwrap();
                assert_eq!(r.status(), 200, "{wire:?} pays");
            }
            rates[i].push(paid_n as f64 / t.elapsed().as_secs_f64());
        }
    }
    let best = |r: &[f64]| r.iter().copied().fold(0.0, f64::max);
    let (v2, mpp) = (best(&rates[0]), best(&rates[1]));
    println!(
        "  paid requests/s settled through the facilitator, 1 at a time (best of 3, n = {paid_n}):"
    );
    println!(
        "    x402 V2 (PAYMENT-SIGNATURE) / MPP (Authorization: Payment): {v2:>7.0} / {mpp:.0}  MPP at {:.3} of V2 (rounds: {:.0?} / {:.0?})",
        mpp / v2,
        rates[0],
        rates[1]
    );
}

/// How a bench request pays: x402 V2 or MPP, for the same price on the same route.
#[derive(Clone, Copy, Debug)]
enum Wire {
    X402V2,
    Mpp,
}

impl Wire {
    /// A fresh payment for `GET /v1/quote` of `app`: its 402 read, and signed by the payer (dev
    /// account 2) as the reference clients sign (x402's `exact`, mppx's `authorization`).
    async fn sign(
        self,
        net: &TestNet,
        app: &Router,
        pay_to: Address,
        nonce: B256,
    ) -> (&'static str, String) {
        use tollgate_protocol::{
            mpp::{AuthorizationPayload, Challenge, Credential},
            x402::v2::{PaymentPayloadV2, PaymentRequiredV2},
        };
        let req = Request::get("/v1/quote").body(Body::empty()).unwrap();
        let r = app.clone().oneshot(req).await.unwrap();
        assert_eq!(r.status(), 402);
        let header = |name: &str| r.headers()[name].to_str().unwrap().to_owned();
        match self {
            Self::X402V2 => {
                let required =
                    PaymentRequiredV2::decode_header(&header("payment-required")).unwrap();
                let accepted = required.accepts[0].clone();
                let signed = net
                    .x402_payload("tollgate-devnet", 2, pay_to, PRICE, nonce)
                    .await;
                let payload = PaymentPayloadV2 {
                    x402_version: 2,
                    resource: Some(required.resource),
                    accepted,
                    payload: signed.payload,
                    extensions: None,
                };
                ("payment-signature", payload.encode_header())
            }
            Self::Mpp => {
                let challenge = Challenge::parse_all([header("www-authenticate").as_str()])
                    .remove(0)
                    .unwrap();
                let chain_id = challenge.charge_request().unwrap().method_details.chain_id;
                let terms = tollgate_testkit::signing::ExactTerms {
                    pay_to,
                    amount: PRICE,
                    nonce: challenge.authorization_nonce(),
                    valid_after: 0,
                    valid_before: challenge.expires_unix().unwrap().unwrap(),
                };
                let signed = net
                    .fixture
                    .sign_exact("tollgate-devnet", 2, &terms)
                    .unwrap();
                let payload = AuthorizationPayload::from_exact_evm(&signed.payload);
                let credential = Credential {
                    source: Some(Credential::source_for(chain_id, payload.from)),
                    challenge,
                    payload,
                };
                ("authorization", credential.to_header_value())
            }
        }
    }
}

/// The recovery of a proof's signer from its EIP-712 digest, seconds each on one core.
struct Floor {
    /// libsecp256k1's, as shipped (`tollgate_chain::proof::recover`).
    shipped: f64,
    /// RustCrypto's k256, the same digests and signatures.
    k256: f64,
}

fn recovery_floor(proofs: &[PaymentProof]) -> Floor {
    let n = proofs.len() as f64;
    let libsecp = || {
        let t = Instant::now();
        for p in proofs {
            assert_eq!(tollgate_chain::proof::recover(p).unwrap(), p.signer);
        }
        t.elapsed().as_secs_f64() / n
    };
    let k256 = || {
        let t = Instant::now();
        for p in proofs {
            let digest = tollgate_chain::proof::digest(p);
            let sig = tollgate_chain::authorization::parse_signature(&p.signature).unwrap();
            let key = sig.recover_from_prehash(&digest).unwrap();
            assert_eq!(Address::from_public_key(&key), p.signer);
        }
        t.elapsed().as_secs_f64() / n
    };
    let (mut shipped, mut other) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        shipped = shipped.min(libsecp());
        other = other.min(k256());
    }
    Floor {
        shipped,
        k256: other,
    }
}

/// Wall and process CPU seconds of one phase of `n` operations.
struct Spent {
    n: usize,
    wall: f64,
    cpu: f64,
}

impl Spent {
    fn per_second(&self) -> f64 {
        self.n as f64 / self.wall
    }

    /// Process CPU seconds per operation (every thread).
    fn cpu_each(&self) -> f64 {
        self.cpu / self.n as f64
    }
}

/// `job(i)` for every `i < n`, 64 tasks at a time (task `w` takes `w`, `w + 64`, …).
async fn in_64_tasks<F, Fut>(n: usize, job: F) -> Spent
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let t = Instant::now();
    let cpu = cpu_seconds();
    let mut tasks = Vec::new();
    for w in 0..64 {
        let job = job.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(64) {
                job(i).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    Spent {
        n,
        wall: t.elapsed().as_secs_f64(),
        cpu: cpu_seconds() - cpu,
    }
}

/// `verify_payment_proof` of every proof of `batch` on `gate`, 64 tasks at a time.
async fn verify_concurrently(gate: &Gate, batch: &Arc<Vec<PaymentProof>>) -> Spent {
    let (gate, batch) = (gate.clone(), batch.clone());
    in_64_tasks(batch.len(), move |i| {
        let (gate, batch) = (gate.clone(), batch.clone());
        async move {
            let expected = Expected {
                method: "GET",
                resource: "/v1/quote",
                price: Amount::from_units(PRICE),
            };
            gate.verify_payment_proof(&batch[i], &expected)
                .await
                .expect("valid proof");
        }
    })
    .await
}

/// `n` GETs of `/v1/quote` through `app`, 64 at a time, each with the next of `headers` as its
/// `X-PAYMENT` (when given), every answer a 200.
async fn concurrently(n: usize, app: Router, headers: Option<Arc<Vec<String>>>) -> Spent {
    in_64_tasks(n, move |i| {
        let mut req = Request::get("/v1/quote");
        if let Some(h) = &headers {
            req = req.header("x-payment", &h[i]);
        }
        let answer = app.clone().oneshot(req.body(Body::empty()).unwrap());
        async move { assert_eq!(answer.await.unwrap().status(), 200) }
    })
    .await
}

/// CPU seconds this process has spent (user + system, every thread).
fn cpu_seconds() -> f64 {
    load::cpu_seconds(std::process::id()).expect("/proc/self/stat")
}
