//! MCP sessions are bounded (`[mcp]` `max_sessions`, `max_sessions_per_client`,
//! `session_idle_timeout_secs`): a flood of `initialize` calls gets 429 per client and 503 once
//! every slot is taken, the process's memory stays within the cap's worth of sessions, closed
//! and idle sessions free their slots, a call in flight keeps its session, and the agent still
//! gets through once there is room.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Router, routing::any};
use serde_json::{Map, Value, json};
use tollgate_agent::{Agent, Amount, SpendPolicy};
use tollgate_gateway::Secrets;
use tollgate_testkit::harness::{PAYER, TestNet};

use crate::support::{config, serve_gateway, testnet};

const PRICE: u64 = 50_000;
/// `initialize` calls in the flood.
const FLOOD: usize = 10_000;
/// The flood's clients (told apart by `X-Forwarded-For`), each sending `FLOOD / CLIENTS` in turn.
const CLIENTS: usize = 200;
const MAX_SESSIONS: usize = 1000;
const PER_CLIENT: usize = 10;
/// What one open session may cost at most, in bytes: measured at 55-60 KB on this build (the
/// gateway before the caps grew by 10,000 × ~57 KB under this flood), with room.
const SESSION_BYTES: u64 = 80 * 1024;
/// Room for what the flood costs besides the sessions (32 connections, the allocator's slack).
const SLACK_BYTES: u64 = 24 * 1024 * 1024;

/// This process's resident memory, bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// An upstream answering `upstream <path>`, `/slow` after `slow`.
async fn upstream(slow: Duration) -> String {
    let app = Router::new().fallback(any(move |uri: axum::http::Uri| async move {
        if uri.path() == "/slow" {
            tokio::time::sleep(slow).await;
        }
        format!("upstream {}", uri.path())
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A gateway with the paid tool `quote`, the free `echo` and `slow`, `server` and `mcp` keys
/// added; its MCP URL.
async fn gateway(
    net: &TestNet,
    dir: &tempfile::TempDir,
    upstream: &str,
    server: &str,
    mcp: &str,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listen = listener.local_addr().unwrap().to_string();
    let memo = format!(
        "sqlite://{}",
        dir.path()
            .join(format!(
                "memos-{}.db",
                listener.local_addr().unwrap().port()
            ))
            .display()
    );
    let routes = format!(
        r#"[server]
{server}
[[routes]]
prefix = "/healthz"
free = true
[mcp]
{mcp}
[[mcp.tools]]
name = "quote"
upstream_path = "/v1/quote"
method = "GET"
price = "{PRICE}"
[[mcp.tools]]
name = "echo"
upstream_path = "/v1/echo"
[[mcp.tools]]
name = "slow"
upstream_path = "/slow"
"#
    );
    let cfg = config(net, &listen, upstream, &memo, "", &routes);
    let _gw = serve_gateway(&cfg, &Secrets::new(), listener).await;
    format!("http://{listen}/mcp")
}

/// The answer to one `initialize`.
#[derive(Debug)]
struct Opened {
    status: u16,
    session: Option<String>,
    code: Option<String>,
    retry_after: bool,
}

/// Posts a JSON-RPC `initialize`, as `forwarded_for` when given, and reads the whole answer.
async fn initialize(http: &reqwest::Client, url: &str, forwarded_for: Option<&str>) -> Opened {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "flood", "version": "1"}
        }
    });
    let mut req = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(ip) = forwarded_for {
        req = req.header("x-forwarded-for", ip);
    }
    let r = req.send().await.expect("initialize");
    let status = r.status().as_u16();
    let session = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let retry_after = r.headers().contains_key("retry-after");
    let text = r.text().await.unwrap_or_default();
    let code = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
    if status == 200 {
        assert!(text.contains("\"serverInfo\""), "{text}");
    }
    Opened {
        status,
        session,
        code,
        retry_after,
    }
}

async fn delete(http: &reqwest::Client, url: &str, session: &str) {
    let r = http
        .delete(url)
        .header("mcp-session-id", session)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

fn agent(net: &TestNet) -> Agent {
    let policy = SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(10 * PRICE));
    Agent::from_hex_key(&net.account(PAYER).private_key.to_string(), policy).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialize_flood_is_held_to_the_session_caps() {
    let net = testnet(false).await;
    let dir = tempfile::tempdir().unwrap();
    let up = upstream(Duration::ZERO).await;
    let url = gateway(
        &net,
        &dir,
        &up,
        r#"client_address = "x-forwarded-for""#,
        &format!(
            "max_sessions = {MAX_SESSIONS}\nmax_sessions_per_client = {PER_CLIENT}\n\
             session_idle_timeout_secs = 600"
        ),
    )
    .await;
    let http = reqwest::Client::new();
    let agent = agent(&net);
    // Warm: one paid call (the agent, loopback, no X-Forwarded-For) and a few sessions opened
    // and closed, so that the baseline has every code path's first allocations.
    let paid = agent.call_tool(&url, "quote", Map::new()).await.unwrap();
    assert!(!paid.is_error && paid.payment.is_some(), "{paid:?}");
    for _ in 0..20 {
        let o = initialize(&http, &url, Some("192.0.2.1")).await;
        delete(&http, &url, o.session.as_deref().unwrap()).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline = rss();

    // 10,000 initialize calls, 32 at a time, from 200 clients in turn (50 each), while the
    // process's memory is sampled.
    let peak = Arc::new(AtomicU64::new(baseline));
    let flooding = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let (peak, flooding) = (Arc::clone(&peak), Arc::clone(&flooding));
        async move {
            while flooding.load(Ordering::SeqCst) {
                peak.fetch_max(rss(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let next = Arc::new(AtomicUsize::new(0));
    let answers: Arc<Mutex<Vec<(usize, Opened)>>> = Arc::default();
    let started = Instant::now();
    let workers: Vec<_> = (0..32)
        .map(|_| {
            let (http, url, next, answers) = (
                http.clone(),
                url.clone(),
                Arc::clone(&next),
                Arc::clone(&answers),
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= FLOOD {
                        return;
                    }
                    let client = i / (FLOOD / CLIENTS);
                    let ip = format!("198.51.100.{client}");
                    let o = initialize(&http, &url, Some(&ip)).await;
                    answers.lock().unwrap().push((client, o));
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let took = started.elapsed();
    flooding.store(false, Ordering::SeqCst);
    sampler.await.unwrap();
    let peak = peak.load(Ordering::SeqCst).max(rss());
    let answers = std::mem::take(&mut *answers.lock().unwrap());

    let mut opened: HashMap<usize, Vec<String>> = HashMap::new();
    let (mut per_client, mut full) = (0, 0);
    for (client, o) in &answers {
        match (o.status, o.code.as_deref()) {
            (200, _) => opened
                .entry(*client)
                .or_default()
                .push(o.session.clone().expect("Mcp-Session-Id")),
            (429, Some("RateLimited")) => per_client += 1,
            (503, Some("Unavailable")) => full += 1,
            _ => panic!("unexpected answer {o:?}"),
        }
        assert!(o.status == 200 || o.retry_after, "{o:?}");
    }
    let open: usize = opened.values().map(Vec::len).sum();
    let grew = peak.saturating_sub(baseline);
    let bound = MAX_SESSIONS as u64 * SESSION_BYTES + SLACK_BYTES;
    eprintln!(
        "{FLOOD} initialize in {took:?}: {open} opened, {per_client} × 429, {full} × 503; \
         RSS {} MB → peak {} MB (+{} KB, {} B per open session; bound +{} KB)",
        baseline >> 20,
        peak >> 20,
        grew >> 10,
        grew / open.max(1) as u64,
        bound >> 10,
    );
    assert_eq!(answers.len(), FLOOD);
    assert_eq!(open, MAX_SESSIONS, "every slot taken, none beyond");
    assert!(opened.values().all(|s| s.len() <= PER_CLIENT), "{opened:?}");
    assert!(
        per_client > 0 && full > 0,
        "{per_client} × 429, {full} × 503"
    );
    assert!(grew <= bound, "RSS grew {grew} B, bound {bound} B");

    // Full: nobody else gets a session, the agent neither.
    let o = initialize(&http, &url, Some("203.0.113.1")).await;
    assert_eq!((o.status, o.code.as_deref()), (503, Some("Unavailable")));
    assert!(agent.call_tool(&url, "echo", Map::new()).await.is_err());
    // A client at its cap closes a session (DELETE): it may open one again, and nobody else
    // (the slot was its own) until another closes.
    let (&client, sessions) = opened.iter().find(|(_, s)| s.len() == PER_CLIENT).unwrap();
    let ip = format!("198.51.100.{client}");
    let o = initialize(&http, &url, Some(&ip)).await;
    assert_eq!((o.status, o.code.as_deref()), (429, Some("RateLimited")));
    delete(&http, &url, &sessions[0]).await;
    let o = initialize(&http, &url, Some(&ip)).await;
    assert_eq!(o.status, 200, "{o:?}");
    let o = initialize(&http, &url, Some(&ip)).await;
    assert_eq!(o.status, 429, "{o:?}");
    // Ten sessions of other clients close: the agent's calls get through (each opens a session
    // and closes it), paid once per call.
    for s in opened
        .iter()
        .filter(|(c, _)| **c != client)
        .flat_map(|(_, s)| s)
        .take(10)
    {
        delete(&http, &url, s).await;
    }
    for _ in 0..3 {
        let paid = agent.call_tool(&url, "quote", Map::new()).await.unwrap();
        assert!(!paid.is_error && paid.payment.is_some(), "{paid:?}");
    }
    assert_eq!(agent.spent(), Amount::from_units(4 * PRICE));
    // The agent closed its sessions: the ten slots are free again, and no more.
    for i in 0..10 {
        let o = initialize(&http, &url, Some(&format!("203.0.113.{}", 10 + i))).await;
        assert_eq!(o.status, 200, "slot {i}: {o:?}");
    }
    let o = initialize(&http, &url, Some("203.0.113.99")).await;
    assert_eq!(o.status, 503, "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_free_their_slots_and_calls_in_flight_keep_theirs() {
    let net = testnet(false).await;
    let dir = tempfile::tempdir().unwrap();
    let up = upstream(Duration::from_secs(4)).await;
    let http = reqwest::Client::new();
    // Three sessions at most, idle after 2 s.
    let url = gateway(
        &net,
        &dir,
        &up,
        "",
        "max_sessions = 3\nmax_sessions_per_client = 3\nsession_idle_timeout_secs = 2",
    )
    .await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let o = initialize(&http, &url, None).await;
        assert_eq!(o.status, 200, "{o:?}");
        open.push(o.session.unwrap());
    }
    assert_eq!(initialize(&http, &url, None).await.status, 503);
    // Idle for the timeout (and the reaper's quarter of it): closed, the slots free.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let r = http
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &open[0])
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "an idle session is closed");
    // A call that takes twice the idle timeout keeps its session and is answered, while the
    // other two slots fill and empty again.
    let agent = agent(&net);
    let slow = tokio::spawn({
        let url = url.clone();
        async move {
            tokio::time::timeout(
                Duration::from_secs(30),
                agent.call_tool(&url, "slow", Map::new()),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..2 {
        assert_eq!(initialize(&http, &url, None).await.status, 200);
    }
    assert_eq!(
        initialize(&http, &url, None).await.status,
        503,
        "the slow call holds one"
    );
    let done = slow
        .await
        .unwrap()
        .expect("the slow call is answered in time")
        .expect("the slow call is answered");
    assert!(!done.is_error, "{done:?}");
    assert_eq!(done.content[0]["text"], "upstream /slow");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    for _ in 0..3 {
        assert_eq!(initialize(&http, &url, None).await.status, 200);
    }

    // The server's rate limit applies to initialize too, for loopback with rate_limit_private.
    let url = gateway(
        &net,
        &dir,
        &up,
        "rate_per_second = 1\nrate_burst = 2\nrate_limit_private = true",
        "",
    )
    .await;
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(initialize(&http, &url, None).await);
    }
    assert_eq!(answers[0].status, 200);
    assert_eq!(answers[1].status, 200);
    assert_eq!(
        (answers[2].status, answers[2].code.as_deref()),
        (429, Some("RateLimited"))
    );
}
