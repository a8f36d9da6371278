//! Load with attacks mixed in: N paid requests through a real gate at concurrency C, with R
//! replays of spent proofs and G garbage `X-PAYMENT` requests interleaved, all over loopback
//! HTTP in one process (devnet in process, real facilitator, real gate, real agents signing
//! EIP-3009 authorizations). Every outcome is checked at the end; any wrong one fails the run.
//!
//! ```text
//! cargo bench -p tollgate-agent --bench load                  # N = 10,000, C = 256, R = G = 1,000
//! cargo bench -p tollgate-agent --bench load -- --quick       # N = 500, R = G = 100
//! TOLLGATE_LOAD_PAID=500 cargo bench -p tollgate-agent --bench load
//! cargo bench -p tollgate-agent --bench load -- --devnet-only   # the devnet's own memory per tx
//! ```
//!
//! Settings (environment): `TOLLGATE_LOAD_PAID`, `TOLLGATE_LOAD_CONCURRENCY`,
//! `TOLLGATE_LOAD_REPLAYS`, `TOLLGATE_LOAD_GARBAGE`, `TOLLGATE_LOAD_SEED`.
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    dead_code,
    unreachable_pub
)]

#[path = "load/attacks.rs"]
mod attacks;
#[path = "load/calibrate.rs"]
mod calibrate;
#[path = "load/harness.rs"]
mod harness;

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use attacks::{Garbage, Rng, Spent};
use harness::{AGENTS, FEE, PRICE, System};
use tokio::sync::Semaphore;
use tollgate_agent::{
    Agent, PayRequest, PaymentKind,
    header::{HeaderMap, HeaderValue},
};
use tollgate_chain::U256;
use tollgate_protocol::SettlementStatus;

/// How many spent payments are kept for replays and tampering (bounded memory).
const SPENT_POOL: usize = 1024;
/// How many wrong outcomes are kept verbatim for the report.
const NOTES: usize = 20;

#[derive(Clone, Copy, Debug)]
struct Config {
    paid: usize,
    concurrency: usize,
    replays: usize,
    garbage: usize,
    seed: u64,
}

impl Config {
    fn from_env() -> Self {
        let quick = std::env::args().any(|a| a == "--quick");
        let (paid, attacks) = if quick { (500, 100) } else { (10_000, 1_000) };
        Self {
            paid: env("TOLLGATE_LOAD_PAID", paid),
            concurrency: env("TOLLGATE_LOAD_CONCURRENCY", 256).max(1),
            replays: env("TOLLGATE_LOAD_REPLAYS", attacks),
            garbage: env("TOLLGATE_LOAD_GARBAGE", attacks),
            seed: env("TOLLGATE_LOAD_SEED", 7) as u64,
        }
    }
}

fn env(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .replace(['_', ','], "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

#[derive(Clone, Copy, Debug)]
enum Job {
    Paid(usize),
    Replay,
    Garbage(Garbage),
}

#[derive(Default)]
struct KindStats {
    sent: u64,
    refused: u64,
    wrong: u64,
    answers: BTreeMap<String, u64>,
}

/// What the load tasks share.
struct Shared {
    agents: Vec<Agent>,
    client: reqwest::Client,
    url: String,
    spent: Mutex<VecDeque<Spent>>,
    paid_ok: AtomicU64,
    paid_wrong: AtomicU64,
    replays_refused: AtomicU64,
    replays_wrong: AtomicU64,
    garbage_refused: AtomicU64,
    garbage_wrong: AtomicU64,
    server_errors: AtomicU64,
    done_paid: AtomicU64,
    done_replays: AtomicU64,
    done_garbage: AtomicU64,
    latencies_us: Mutex<Vec<u32>>,
    garbage_kinds: Mutex<BTreeMap<Garbage, KindStats>>,
    replay_answers: Mutex<BTreeMap<String, u64>>,
    notes: Mutex<Vec<String>>,
}

impl Shared {
    fn note(&self, what: String) {
        let mut notes = self.notes.lock().unwrap();
        if notes.len() < NOTES {
            notes.push(what);
        }
    }

    /// A spent payment, waiting for the first ones to complete.
    async fn some_spent(&self, rng: &mut Rng) -> Spent {
        loop {
            {
                let pool = self.spent.lock().unwrap();
                if !pool.is_empty() {
                    return pool[rng.below(pool.len())].clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn paid(&self, i: usize) {
        let agent = &self.agents[i % self.agents.len()];
        let started = Instant::now();
        let result = agent.pay(PayRequest::get(&self.url).expect("url")).await;
        let elapsed = started.elapsed();
        self.done_paid.fetch_add(1, Ordering::Relaxed);
        let r = match result {
            Ok(r) => r,
            Err(e) => {
                self.paid_wrong.fetch_add(1, Ordering::Relaxed);
                self.note(format!("paid #{i}: error: {e}"));
                return;
            }
        };
        if r.status.is_server_error() {
            self.server_errors.fetch_add(1, Ordering::Relaxed);
        }
        let good_payment = r.payment.as_ref().is_some_and(|p| {
            p.kind == PaymentKind::Tollgate
                && p.amount.get() == U256::from(PRICE)
                && p.proof.is_some()
                && p.settlement.as_ref().is_some_and(|s| s.success)
        });
        let good_body =
            r.json::<serde_json::Value>().ok() == Some(serde_json::json!({ "quote": 42 }));
        if r.status != 200 || !good_payment || !good_body {
            self.paid_wrong.fetch_add(1, Ordering::Relaxed);
            self.note(format!(
                "paid #{i}: status {}, payment {:?}, body {:?}",
                r.status,
                r.payment.as_ref().map(|p| (&p.kind, p.amount)),
                String::from_utf8_lossy(&r.body)
            ));
            return;
        }
        self.paid_ok.fetch_add(1, Ordering::Relaxed);
        self.latencies_us
            .lock()
            .unwrap()
            .push(elapsed.as_micros().min(u32::MAX as u128) as u32);
        let payment = r.payment.expect("checked");
        let spent = Spent {
            header: payment.header,
            proof: payment.proof.expect("checked"),
        };
        let mut pool = self.spent.lock().unwrap();
        if pool.len() == SPENT_POOL {
            pool.pop_front();
        }
        pool.push_back(spent);
    }

    async fn replay(&self, mut rng: Rng) {
        let spent = self.some_spent(&mut rng).await;
        let mut headers = HeaderMap::new();
        headers.insert("x-payment", HeaderValue::from_str(&spent.header).unwrap());
        let answer = self.probe(headers).await;
        self.done_replays.fetch_add(1, Ordering::Relaxed);
        let right = matches!(&answer, Answer::Http { status: 402, error, reason }
            if error == "InvalidPaymentProof" && reason == "replayed");
        if right {
            self.replays_refused.fetch_add(1, Ordering::Relaxed);
        } else {
            self.replays_wrong.fetch_add(1, Ordering::Relaxed);
            self.note(format!("replay of memo {}: {answer:?}", spent.proof.memo));
        }
        *self
            .replay_answers
            .lock()
            .unwrap()
            .entry(answer.label())
            .or_default() += 1;
    }

    async fn garbage(&self, kind: Garbage, mut rng: Rng) {
        let spent = if kind.needs_spent() {
            Some(self.some_spent(&mut rng).await)
        } else {
            None
        };
        let headers = kind.headers(&mut rng, spent.as_ref());
        let size: usize = headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum();
        let answer = self.probe(headers).await;
        self.done_garbage.fetch_add(1, Ordering::Relaxed);
        let right = match &answer {
            Answer::Http {
                status,
                error,
                reason,
            } => kind.expected(*status, error, reason),
            Answer::Transport(_) => false,
        };
        if right {
            self.garbage_refused.fetch_add(1, Ordering::Relaxed);
        } else {
            self.garbage_wrong.fetch_add(1, Ordering::Relaxed);
            self.note(format!("garbage {}: {answer:?}", kind.name()));
        }
        let mut kinds = self.garbage_kinds.lock().unwrap();
        let stats = kinds.entry(kind).or_default();
        stats.sent += 1;
        if right {
            stats.refused += 1;
        } else {
            stats.wrong += 1;
        }
        let mut label = answer.label();
        if kind == Garbage::OverHeaderLimit {
            // Which sizes got past the server's limit.
            let kib = size / 1024;
            label = format!("{label} [{kib}-{} KiB]", kib + 1);
        }
        *stats.answers.entry(label).or_default() += 1;
    }

    /// One plain request to the gated URL with `headers`.
    async fn probe(&self, headers: HeaderMap) -> Answer {
        let response = match self.client.get(&self.url).headers(headers).send().await {
            Ok(r) => r,
            Err(e) => return Answer::Transport(format!("{e:?}")),
        };
        let status = response.status().as_u16();
        if response.status().is_server_error() {
            self.server_errors.fetch_add(1, Ordering::Relaxed);
        }
        let body = response.bytes().await.unwrap_or_default();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let error = json["error"]
            .as_str()
            .or_else(|| json["error"]["code"].as_str())
            .unwrap_or_default()
            .to_owned();
        let reason = json["reason"].as_str().unwrap_or_default().to_owned();
        Answer::Http {
            status,
            error,
            reason,
        }
    }
}

#[derive(Debug)]
enum Answer {
    Http {
        status: u16,
        error: String,
        reason: String,
    },
    Transport(String),
}

impl Answer {
    fn label(&self) -> String {
        match self {
            Answer::Http {
                status,
                error,
                reason,
            } => {
                let error = if error.len() > 40 {
                    format!("{}…", &error[..40])
                } else {
                    error.clone()
                };
                match (error.is_empty(), reason.is_empty()) {
                    (true, _) => format!("{status}"),
                    (false, true) => format!("{status} {error}"),
                    (false, false) => format!("{status} {error}/{reason}"),
                }
            }
            Answer::Transport(_) => "transport error".into(),
        }
    }
}

/// `VmRSS` or `VmHWM` of this process, in KiB.
fn proc_status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    tollgate_chain::install_crypto_provider();
    let config = Config::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if std::env::args().any(|a| a == "--devnet-only") {
        rt.block_on(calibrate::devnet_only(config.paid));
    } else {
        rt.block_on(run(config));
    }
}

async fn run(c: Config) {
    eprintln!(
        "load: {} paid, concurrency {}, {} replays, {} garbage, {} agents, seed {}",
        c.paid, c.concurrency, c.replays, c.garbage, AGENTS, c.seed
    );
    let rss_before_setup = proc_status_kib("VmRSS:");
    let system = System::start().await;
    let per_agent = c.paid.div_ceil(AGENTS) as u64;
    // Room for a double payment to show up in `spent()` rather than as a policy refusal.
    let agents = system.agents(PRICE * (2 * per_agent + 16));
    let payee_before = system.balance(system.payee()).await;
    let mut payers_before = U256::ZERO;
    for p in system.payers() {
        payers_before += system.balance(p).await;
    }
    let first_block = system.block().await + 1;

    let shared = Arc::new(Shared {
        agents: agents.clone(),
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
        url: system.url(),
        spent: Mutex::new(VecDeque::with_capacity(SPENT_POOL)),
        paid_ok: AtomicU64::new(0),
        paid_wrong: AtomicU64::new(0),
        replays_refused: AtomicU64::new(0),
        replays_wrong: AtomicU64::new(0),
        garbage_refused: AtomicU64::new(0),
        garbage_wrong: AtomicU64::new(0),
        server_errors: AtomicU64::new(0),
        done_paid: AtomicU64::new(0),
        done_replays: AtomicU64::new(0),
        done_garbage: AtomicU64::new(0),
        latencies_us: Mutex::new(Vec::with_capacity(c.paid)),
        garbage_kinds: Mutex::new(BTreeMap::new()),
        replay_answers: Mutex::new(BTreeMap::new()),
        notes: Mutex::new(Vec::new()),
    });

    // The schedule: every kind of job shuffled together (garbage kinds in turn).
    let mut rng = Rng::new(c.seed);
    let mut jobs: Vec<Job> = (0..c.paid).map(Job::Paid).collect();
    jobs.extend((0..c.replays).map(|_| Job::Replay));
    jobs.extend((0..c.garbage).map(|i| Job::Garbage(Garbage::ALL[i % Garbage::ALL.len()])));
    for i in (1..jobs.len()).rev() {
        jobs.swap(i, rng.below(i + 1));
    }
    let total = jobs.len();

    // Memory: sampled every second; progress: every 2 s.
    let stop = Arc::new(AtomicBool::new(false));
    let rss_start = proc_status_kib("VmRSS:");
    let t0 = Instant::now();
    let sampler = tokio::spawn({
        let stop = Arc::clone(&stop);
        let shared = Arc::clone(&shared);
        async move {
            let mut samples: Vec<(f64, u64, u64)> = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut n = 0u64;
            let mut last = (0u64, Instant::now());
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let rss = proc_status_kib("VmRSS:");
                let paid = shared.done_paid.load(Ordering::Relaxed);
                samples.push((t0.elapsed().as_secs_f64(), paid, rss));
                if n > 0 && n.is_multiple_of(2) {
                    let rate = (paid - last.0) as f64 / last.1.elapsed().as_secs_f64();
                    last = (paid, Instant::now());
                    eprintln!(
                        "[{:6.1}s] paid {paid}/{} ({rate:.0}/s)  replays {}/{}  garbage {}/{}  rss {:.0} MiB",
                        t0.elapsed().as_secs_f64(),
                        c.paid,
                        shared.done_replays.load(Ordering::Relaxed),
                        c.replays,
                        shared.done_garbage.load(Ordering::Relaxed),
                        c.garbage,
                        mib(rss),
                    );
                }
                n += 1;
            }
            samples
        }
    });

    let slots = Arc::new(Semaphore::new(c.concurrency));
    for job in jobs {
        let permit = Arc::clone(&slots).acquire_owned().await.unwrap();
        let shared = Arc::clone(&shared);
        let seed = rng.next();
        tokio::spawn(async move {
            let _permit = permit;
            match job {
                Job::Paid(i) => shared.paid(i).await,
                Job::Replay => shared.replay(Rng::new(seed)).await,
                Job::Garbage(kind) => shared.garbage(kind, Rng::new(seed)).await,
            }
        });
    }
    // Every job has finished once every slot is free again.
    let _all = slots.acquire_many(c.concurrency as u32).await.unwrap();
    let wall = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    let rss_end = proc_status_kib("VmRSS:");
    let hwm = proc_status_kib("VmHWM:");
    let rss_max = samples.iter().map(|s| s.2).max().unwrap_or(0).max(rss_end);

    // The books.
    let last_block = system.block().await;
    let payee_gain = system.balance(system.payee()).await - payee_before;
    let mut payers_after = U256::ZERO;
    for p in system.payers() {
        payers_after += system.balance(p).await;
    }
    let payers_paid = payers_before - payers_after;
    let (events, exact_events) = system.settled_events(first_block, last_block).await;
    let by_status = system.settlements().await;
    let count = |s: SettlementStatus| {
        by_status
            .iter()
            .find(|(st, _)| *st == s)
            .map_or(0, |(_, n)| *n)
    };
    let confirmed = count(SettlementStatus::Confirmed);
    let not_confirmed: u64 = by_status
        .iter()
        .filter(|(s, _)| *s != SettlementStatus::Confirmed)
        .map(|(_, n)| n)
        .sum();
    let spent_total = agents
        .iter()
        .fold(U256::ZERO, |acc, a| acc + a.spent().get());
    let hits = system.hits.load(Ordering::SeqCst);

    let n = c.paid as u64;
    let paid_ok = shared.paid_ok.load(Ordering::Relaxed);
    let mut lat = std::mem::take(&mut *shared.latencies_us.lock().unwrap());
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1000.0
    };
    let secs = wall.as_secs_f64();

    let mut failures: Vec<String> = Vec::new();
    let mut check = |what: &str, got: String, want: String| -> &'static str {
        if got == want {
            "ok"
        } else {
            failures.push(format!("{what}: got {got}, expected {want}"));
            "**WRONG**"
        }
    };
    let rows = [
        (
            "paid requests answered 200 (right body, receipt)",
            paid_ok.to_string(),
            n.to_string(),
        ),
        (
            "paid requests with a wrong outcome",
            shared.paid_wrong.load(Ordering::Relaxed).to_string(),
            "0".into(),
        ),
        ("handler invocations", hits.to_string(), n.to_string()),
        (
            "replays refused (402 InvalidPaymentProof/replayed)",
            shared.replays_refused.load(Ordering::Relaxed).to_string(),
            c.replays.to_string(),
        ),
        (
            "garbage refused (the expected 4xx)",
            shared.garbage_refused.load(Ordering::Relaxed).to_string(),
            c.garbage.to_string(),
        ),
        (
            "5xx answers",
            shared.server_errors.load(Ordering::Relaxed).to_string(),
            "0".into(),
        ),
        (
            "payee balance increase",
            payee_gain.to_string(),
            (U256::from(n) * U256::from(PRICE - FEE)).to_string(),
        ),
        (
            "payers' balance decrease",
            payers_paid.to_string(),
            (U256::from(n) * U256::from(PRICE)).to_string(),
        ),
        (
            "facilitator store: confirmed settlements",
            confirmed.to_string(),
            n.to_string(),
        ),
        (
            "facilitator store: settlements not confirmed",
            not_confirmed.to_string(),
            "0".into(),
        ),
        (
            "on-chain PaymentSettled events in the run's blocks",
            events.to_string(),
            n.to_string(),
        ),
        (
            "… paying the payee exactly price and fee",
            exact_events.to_string(),
            n.to_string(),
        ),
        (
            "agents' total spent()",
            spent_total.to_string(),
            (U256::from(n) * U256::from(PRICE)).to_string(),
        ),
    ];
    println!();
    println!(
        "load with attacks mixed in: {} paid, concurrency {}, {} replays, {} garbage ({} agents, seed {})",
        c.paid, c.concurrency, c.replays, c.garbage, AGENTS, c.seed
    );
    println!();
    println!("| check | got | expected | |");
    println!("|---|---|---|---|");
    for (what, got, want) in rows {
        let verdict = check(what, got.clone(), want.clone());
        println!("| {what} | {got} | {want} | {verdict} |");
    }
    println!();
    println!("| measure | result |");
    println!("|---|---|");
    println!("| wall time | {secs:.2} s |");
    println!("| paid requests/s | {:.0} |", paid_ok as f64 / secs);
    println!(
        "| all requests/s (paid + replays + garbage) | {:.0} |",
        total as f64 / secs
    );
    println!(
        "| HTTP requests to the gate/s (2 per paid request) | {:.0} |",
        (2 * c.paid + c.replays + c.garbage) as f64 / secs
    );
    println!(
        "| paid request latency (whole `Agent::pay`) | p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms |",
        pct(0.50),
        pct(0.95),
        pct(0.99),
        pct(1.0)
    );
    println!(
        "| RSS: before setup / after setup / max sampled (1 s) / at end | {:.0} / {:.0} / {:.0} / {:.0} MiB |",
        mib(rss_before_setup),
        mib(rss_start),
        mib(rss_max),
        mib(rss_end)
    );
    println!("| peak RSS (VmHWM) | **{:.0} MiB** |", mib(hwm));
    println!("| blocks in the run | {} |", last_block + 1 - first_block);
    println!();
    // RSS against progress, about ten points.
    let step = (samples.len() / 10).max(1);
    let series: Vec<String> = samples
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i + 1 == samples.len())
        .map(|(_, (t, paid, rss))| format!("{t:.0}s/{paid} paid: {:.0}", mib(*rss)))
        .collect();
    println!("RSS over the run (MiB): {}", series.join(", "));
    println!();
    println!(
        "replay answers: {:?}",
        shared.replay_answers.lock().unwrap()
    );
    println!();
    println!("| garbage kind | sent | refused as expected | answers |");
    println!("|---|---|---|---|");
    for (kind, s) in shared.garbage_kinds.lock().unwrap().iter() {
        let answers: Vec<String> = s.answers.iter().map(|(a, n)| format!("{a} ×{n}")).collect();
        println!(
            "| {} | {} | {}{} | {} |",
            kind.name(),
            s.sent,
            s.refused,
            if s.wrong > 0 {
                " **(wrong: see notes)**"
            } else {
                ""
            },
            answers.join(", ")
        );
    }
    let notes = shared.notes.lock().unwrap();
    if !notes.is_empty() {
        println!();
        println!("first wrong outcomes:");
        for n in notes.iter() {
            println!("  {n}");
        }
    }
    if !failures.is_empty() {
        panic!(
            "{} wrong outcome(s):\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    println!();
    println!("zero wrong outcomes");
}
