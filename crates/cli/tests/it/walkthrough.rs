//! The book's walkthrough (`docs/src/walkthrough.md`), run verbatim: the `sh` block after
//! `<!-- walkthrough -->`, one command at a time through `bash -c`, against `tollgate dev` on
//! free ports, a real upstream API and a webhook receiver. A fresh key registers as a provider,
//! publishes a plan and gates the API with `tollgate gateway` (plan, metered and one-time
//! routes); a second agent, with the CLI only, pays once, subscribes, is served, meters to
//! exhaustion, raises, is renewed after time travel, pauses, resumes, cancels and subscribes
//! again. Every exit status and output is checked, every balance on chain, and every webhook is
//! received once, signed.

// The transcript (each command, its exit status and output) goes to stderr, which the test
// runner shows when the test fails.
#![allow(clippy::print_stderr)]

use crate::readme::{self, Output, Walk};
use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::primitives::{Address, U256};
use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::{get, post},
};
use tollgate_chain::contracts::{self, Token};

/// One token in units.
const TOKEN: u64 = 1_000_000;
/// The plan's amount per cycle (2.00).
const PLAN_AMOUNT: u64 = 2 * TOKEN;
/// The one-time route's price (0.50).
const PRICE: u64 = TOKEN / 2;
/// The facilitator's fee on a one-time payment (0.001; none on subscription billing).
const FEE: u64 = 1_000;
/// Metered usage in the first cycle: 4 calls of 0.10.
const METERED: u64 = 4 * TOKEN / 10;

/// The upstream API: counts requests per path.
async fn serve_upstream() -> (String, Arc<Mutex<HashMap<String, usize>>>) {
    let hits = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let app =
        Router::new()
            .route(
                "/{*path}",
                get(
                    |State(hits): State<Arc<Mutex<HashMap<String, usize>>>>,
                     uri: axum::http::Uri| async move {
                        *hits
                            .lock()
                            .unwrap()
                            .entry(uri.path().to_owned())
                            .or_default() += 1;
                        format!(r#"{{"served":"{}"}}"#, uri.path())
                    },
                ),
            )
            .with_state(Arc::clone(&hits));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, hits)
}

/// Webhook deliveries as received: headers and body.
type Deliveries = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn serve_hooks() -> (String, Deliveries) {
    let got: Deliveries = Arc::default();
    let app = Router::new()
        .route(
            "/hooks",
            post(
                |State(got): State<Deliveries>, headers: HeaderMap, body: Bytes| async move {
                    got.lock().unwrap().push((headers, body));
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(Arc::clone(&got));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, got)
}

/// The `tollgate` binary's directory first on `PATH`, as after an install.
fn path_with_tollgate() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_tollgate")).parent().unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

struct Chain {
    chain: Arc<dyn tollgate_chain::Chain>,
    token: Address,
}

impl Chain {
    async fn balance(&self, who: Address) -> U256 {
        contracts::read(
            &*self.chain,
            self.token,
            &Token::balanceOfCall { account: who },
        )
        .await
        .unwrap()
    }
}

fn served(out: &Output, path: &str) -> bool {
    out.code == 0 && out.stdout.contains(&format!(r#"{{"served":"{path}"}}"#))
}

fn refused(out: &Output, reason: &str) -> bool {
    out.code == 4 && out.stderr.contains(reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_walkthrough_sells_and_subscribes_with_the_cli_only() {
    tollgate_chain::install_crypto_provider();
    let commands = readme::commands("docs/src/walkthrough.md", "<!-- walkthrough -->");
    // The reader's directory, where `tollgate dev` keeps its state (.tollgate/dev, its default).
    let dir = tempfile::tempdir().unwrap();
    let dev = crate::dev::spawn_dev(&dir.path().join(".tollgate/dev"), &[]).await;
    let info = &dev.info;
    let (upstream, hits) = serve_upstream().await;
    let (hook, deliveries) = serve_hooks().await;
    let chain = Chain {
        chain: Arc::new(
            tollgate_testkit::connect(
                info["rpcUrl"].as_str().unwrap(),
                info["chainId"].as_u64().unwrap(),
                &[],
            )
            .await
            .unwrap(),
        ),
        token: info["contracts"]["token"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
    };
    let payer = crate::dev::payer(info);
    let buyer: Address = payer["address"].as_str().unwrap().parse().unwrap();

    let mut w = Walk::new(
        commands,
        dir.path().to_owned(),
        BTreeMap::from([
            ("PATH".to_owned(), path_with_tollgate()),
            ("HOME".to_owned(), dir.path().display().to_string()),
        ]),
    );
    let gw = format!("127.0.0.1:{}", crate::free_port());
    // tollgate dev's ports, whatever they are, from its dev.env.
    w.source(". .tollgate/dev/dev.env", "TOLLGATE_").await;
    let fac = w.assign("FAC").await;
    assert_eq!(fac, info["facilitatorUrl"].as_str().unwrap());
    let rpc = w.assign("RPC").await;
    assert_eq!(rpc, info["rpcUrl"].as_str().unwrap());
    w.set("UPSTREAM", upstream);
    w.set("GW", gw.clone());
    w.set("HOOK", hook);

    // The seller: a fresh key, registered with a signature.
    w.run("openssl rand").await.ok();
    let register = w.run("tollgate provider register").await.ok();
    let provider: Address = register
        .stderr
        .split("registered provider ")
        .nth(1)
        .and_then(|rest| rest.get(..42))
        .unwrap_or_else(|| panic!("no address in: {}", register.stderr))
        .parse()
        .unwrap();
    let key = std::fs::read_to_string(dir.path().join("provider.key")).unwrap();
    assert_eq!(
        tollgate_agent::signer_from_hex(&key).unwrap().address(),
        provider
    );
    assert_eq!(chain.balance(provider).await, U256::ZERO, "a fresh key");
    let eth_of = |a| {
        let chain = Arc::clone(&chain.chain);
        async move { chain.balance(a).await.unwrap() }
    };
    assert_eq!(eth_of(provider).await, U256::ZERO, "no ETH either");
    w.set("PROVIDER", provider.to_string());
    w.export("TOLLGATE_API_KEY").await;
    assert!(w.env["TOLLGATE_API_KEY"].starts_with("tg_"));
    let endpoint = w.run("tollgate webhooks create").await.ok().json();
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{endpoint}");
    let plan = w.run("tollgate plan create").await.ok().json();
    assert_eq!(plan["amount"], PLAN_AMOUNT.to_string(), "{plan}");
    let plan_id = plan["planId"].as_str().unwrap().to_owned();
    w.set("PLAN", plan_id.clone());
    w.run("cat > gateway.toml").await.ok();
    assert_eq!(
        info["contracts"]["token"].as_str().unwrap().to_lowercase(),
        "0x5fbdb2315678afecb367f032d93f642f64180aa3",
        "the token address the walkthrough's gateway.toml names"
    );
    w.spawn("tollgate gateway --config gateway.toml", "gateway");

    // The buyer.
    w.set("AGENT_KEY", payer["privateKey"].as_str().unwrap());
    w.run("echo $AGENT_KEY > agent.key").await.ok();
    let offer = w
        .run_until(
            "curl -si http://$GW/v1/report",
            Duration::from_secs(30),
            |o| o.code == 0 && o.stdout.starts_with("HTTP/1.1 402"),
            |o| o.code == 7, // the gateway is not listening yet
        )
        .await;
    assert!(offer.stdout.contains(&plan_id), "{}", offer.stdout);
    let (buyer0, seller0) = (chain.balance(buyer).await, U256::ZERO);
    let buyer_eth = eth_of(buyer).await;

    // One-time.
    let quote = w.run("tollgate pay http://$GW/v1/quote").await.ok();
    assert!(served(&quote, "/v1/quote"), "{quote:?}");
    assert!(quote.stderr.contains("paid 0.500000"), "{}", quote.stderr);
    let mut buyer_paid = PRICE;
    let mut seller_got = PRICE - FEE;
    assert_eq!(chain.balance(buyer).await, buyer0 - U256::from(buyer_paid));
    assert_eq!(
        chain.balance(provider).await,
        seller0 + U256::from(seller_got)
    );

    // Subscribed: the first cycle billed.
    let sub = w.run("tollgate subscribe --plan $PLAN").await.ok().json();
    assert_eq!(sub["status"], "ACTIVE", "{sub}");
    assert_eq!(sub["planId"], plan_id.as_str());
    assert_eq!(sub["allowance"]["cap"], "300000");
    let first_id = sub["id"].as_str().unwrap().to_owned();
    let first_paid_through = sub["paidThrough"].as_u64().unwrap();
    w.set("SUB", first_id.clone());
    buyer_paid += PLAN_AMOUNT;
    seller_got += PLAN_AMOUNT;
    assert_eq!(chain.balance(buyer).await, buyer0 - U256::from(buyer_paid));
    assert_eq!(chain.balance(provider).await, U256::from(seller_got));

    // Served on it; metered to the cap; raised; served again.
    let report = w.run("tollgate pay http://$GW/v1/report").await.ok();
    assert!(served(&report, "/v1/report"), "{report:?}");
    assert!(!report.stderr.contains("paid "), "{}", report.stderr);
    let three = w
        .run("for i in 1 2 3; do tollgate pay http://$GW/v1/process")
        .await
        .ok();
    assert_eq!(
        three.stdout.matches(r#"{"served":"/v1/process"}"#).count(),
        3,
        "{three:?}"
    );
    let exhausted = w.run("tollgate pay http://$GW/v1/process").await;
    assert!(refused(&exhausted, "AllowanceExhausted"), "{exhausted:?}");
    let raised = w.run("tollgate subscribe --raise $SUB").await.ok().json();
    assert_eq!(raised["allowance"]["cap"], "500000", "{raised}");
    let again = w.run("tollgate pay http://$GW/v1/process").await;
    assert!(served(&again, "/v1/process"), "{again:?}");
    assert_eq!(hits.lock().unwrap()["/v1/process"], 4);
    // Metering moves no money yet (it is charged in batches).
    assert_eq!(chain.balance(buyer).await, buyer0 - U256::from(buyer_paid));

    // A week later: the overage charged, then renewed by the keeper.
    let travelled = w.run(r#"curl -s -H 'content-type: application/json' -d '{"jsonrpc":"2.0","id":1,"method":"evm_increaseTime""#).await.ok();
    assert!(travelled.stdout.contains("\"result\""), "{travelled:?}");
    let mined = w.run(r#"curl -s -H 'content-type: application/json' -d '{"jsonrpc":"2.0","id":1,"method":"evm_mine""#).await.ok();
    assert!(mined.stdout.contains("\"result\""), "{mined:?}");
    let renewed = w
        .run_until(
            "tollgate subscription show $SUB",
            Duration::from_secs(60),
            |o| {
                o.code == 0
                    && serde_json::from_str::<serde_json::Value>(&o.stdout).is_ok_and(|s| {
                        // A week from the renewal, which comes a little after the travel.
                        s["paidThrough"]
                            .as_u64()
                            .is_some_and(|p| p >= first_paid_through + 604_800)
                    })
            },
            |o| o.code == 0 && o.json()["paidThrough"].as_u64() == Some(first_paid_through),
        )
        .await;
    assert_eq!(renewed.json()["status"], "ACTIVE");
    buyer_paid += METERED + PLAN_AMOUNT;
    seller_got += METERED + PLAN_AMOUNT;
    let started = Instant::now();
    while chain.balance(buyer).await != buyer0 - U256::from(buyer_paid) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the overage and the renewal: paid {} of {buyer_paid}",
            buyer0 - chain.balance(buyer).await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(chain.balance(provider).await, U256::from(seller_got));

    // Paused: refused; resumed: served; cancelled: refused; subscribed again.
    let paused = w.run("tollgate subscription pause $SUB").await.ok().json();
    assert_eq!(paused["status"], "PAUSED", "{paused}");
    w.run_until(
        "tollgate pay http://$GW/v1/report",
        Duration::from_secs(10),
        |o| refused(o, "SubscriptionNotActive"),
        |o| served(o, "/v1/report"), // until the gate's cache hears of it
    )
    .await;
    let resumed = w.run("tollgate subscription resume $SUB").await.ok().json();
    assert_eq!(resumed["status"], "ACTIVE", "{resumed}");
    w.run_until(
        "tollgate pay http://$GW/v1/report",
        Duration::from_secs(10),
        |o| served(o, "/v1/report"),
        |o| refused(o, "SubscriptionNotActive"),
    )
    .await;
    let cancelled = w.run("tollgate subscription cancel $SUB").await.ok().json();
    assert_eq!(cancelled["status"], "CANCELLED", "{cancelled}");
    w.run_until(
        "tollgate pay http://$GW/v1/report",
        Duration::from_secs(10),
        |o| refused(o, "SubscriptionNotActive"),
        |o| served(o, "/v1/report"),
    )
    .await;
    let resubscribed = w.run("tollgate subscribe --plan $PLAN").await.ok().json();
    assert_eq!(resubscribed["status"], "ACTIVE", "{resubscribed}");
    let second_id = resubscribed["id"].as_str().unwrap().to_owned();
    assert_ne!(second_id, first_id);
    buyer_paid += PLAN_AMOUNT;
    seller_got += PLAN_AMOUNT;
    let list = w.run("tollgate subscription list").await.ok().json();
    let statuses: BTreeMap<&str, &str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        BTreeMap::from([
            (first_id.as_str(), "CANCELLED"),
            (second_id.as_str(), "ACTIVE")
        ])
    );
    w.done();

    // Every balance: the buyer paid exactly this, the seller got exactly this; no gas anywhere.
    assert_eq!(chain.balance(buyer).await, buyer0 - U256::from(buyer_paid));
    assert_eq!(chain.balance(provider).await, U256::from(seller_got));
    assert_eq!(eth_of(buyer).await, buyer_eth, "the buyer paid no gas");
    assert_eq!(eth_of(provider).await, U256::ZERO, "the seller paid no gas");

    // Every webhook, once, signed.
    let expected = BTreeMap::from([
        ("allowance.charged", 1),
        ("allowance.exhausted", 1),
        ("allowance.raised", 1),
        ("payment.settled", 1),
        ("plan.created", 1),
        ("subscription.cancelled", 1),
        ("subscription.created", 2),
        ("subscription.paused", 1),
        ("subscription.renewed", 1),
        ("subscription.resumed", 1),
    ]);
    let started = Instant::now();
    let seen = loop {
        let mut ids = std::collections::BTreeSet::new();
        let mut seen = BTreeMap::<String, usize>::new();
        for (headers, body) in deliveries.lock().unwrap().iter() {
            let delivery = tollgate_gate::verify_webhook(headers, body, &secret)
                .unwrap_or_else(|e| panic!("a bad signature ({e}): {body:?}"));
            let event = delivery.event().unwrap();
            assert!(ids.insert(event.id.clone()), "delivered twice: {body:?}");
            *seen.entry(event.type_name().to_owned()).or_default() += 1;
        }
        let seen_ref: BTreeMap<&str, usize> = seen.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        if seen_ref == expected || started.elapsed() > Duration::from_secs(30) {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let seen: BTreeMap<&str, usize> = seen.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(seen, expected, "webhooks received");
    // The upstream served exactly the admitted requests.
    let hits = hits.lock().unwrap().clone();
    assert_eq!(hits.get("/v1/quote"), Some(&1));
    assert!(hits.get("/v1/report").is_some_and(|n| *n >= 2), "{hits:?}");
    assert_eq!(hits.get("/v1/process"), Some(&4));
    drop(w);
    drop(dev);
}
