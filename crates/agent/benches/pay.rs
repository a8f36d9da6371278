//! End-to-end latency of a paid request on the devnet, as `tollgate pay` makes it: request → 402
//! → sign → facilitator `/authorize` (settlement through the router, confirmation, proof) →
//! request with `X-PAYMENT` → 200. Sequential, one agent, one payment at a time.
//!
//! ```text
//! cargo bench -p tollgate-agent --bench pay           # 300 paid requests
//! TOLLGATE_BENCH_N=1000 cargo bench -p tollgate-agent --bench pay
//! ```
#![allow(
    missing_docs,
    clippy::print_stdout,
    clippy::print_stderr,
    dead_code,
    unreachable_pub
)]

// The integration tests' fixtures: devnet, a real facilitator, an app gated by tollgate-gate.
#[path = "../tests/it/support.rs"]
mod support;

use std::time::Instant;

use tollgate_agent::PayRequest;

fn main() {
    tollgate_chain::install_crypto_provider();
    let n: usize = std::env::var("TOLLGATE_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let h = support::Harness::new().await;
        let app = h.gated_app().await;
        let agent = h.agent(support::policy(1_000_000, 1_000_000 * n as u64));
        let url = format!("{}/v1/quote", app.url);
        let mut lat = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let r = agent.pay(PayRequest::get(&url).unwrap()).await.expect("paid");
            assert_eq!(r.status, 200);
            lat.push(t.elapsed());
        }
        lat.sort();
        let ms = |i: usize| lat[i.min(n - 1)].as_secs_f64() * 1e3;
        println!("agent pay bench (devnet, {n} sequential paid requests)");
        println!("  end-to-end paid request latency  p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms", ms(n / 2), ms(n * 9 / 10), ms(n * 99 / 100), ms(n - 1));
    });
}
