//! `fleet`: the load tool `scripts/scale-out` runs against a fleet of Tollgate replicas behind a
//! load balancer. It drives paid requests through the gates' balancer (agents paying through the
//! facilitators' balancer) and x402 `/settle` calls straight to the facilitators' balancer, while
//! the script kills and restarts a facilitator and stops an RPC endpoint; then it checks what
//! must hold whatever happened:
//!
//! - every payment an agent was served for settled exactly once on-chain (one `PaymentSettled`
//!   per memo), every x402 payment answered `success` is its own successful transfer (batched
//!   payments share a transaction), and the payee's balance moved by exactly those amounts;
//! - every proof is served at most once by the gate fleet (each one replayed at every gate
//!   replica is refused);
//! - every x402 payload settles once: a repeat after its success is refused;
//! - every webhook event is delivered at least once, and always under its one id;
//! - a subscription to a plan with a cycle of a few seconds, renewed by the fleet's keeper while
//!   replicas die, is billed once per cycle (one `SubscriptionRenewed` per cycle, in order) and
//!   never left behind (at most one cycle due when it is cancelled).
//!
//! `fleet deploy --rpc URL --out FILE` deploys the contracts on a bare node (anvil) exactly as
//! the devnet's genesis does, and writes a `devnet.json`-shaped description of them.
//!
//! ```text
//! cargo run -p tollgate-cli --example fleet -- --help
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, U256, keccak256},
    sol_types::SolEvent,
};
use anyhow::{Context as _, bail, ensure};
use axum::{Router, extract::State, http::HeaderMap, routing::post};
use clap::Parser;
use serde_json::{Value, json};
use tollgate_agent::{Agent, PayRequest, SpendPolicy};
use tollgate_chain::{
    Chain, LogFilter, Wallet,
    accounts::dev_accounts,
    authorization::{TransferWithAuthorization, sign, token_domain},
    contracts::{PaymentRouter, Token},
    rpc::{RpcChain, RpcOptions},
};
use tollgate_protocol::{
    Amount,
    x402::{ExactEvmAuthorization, ExactEvmPayload, PaymentPayload},
};

/// Drives a Tollgate fleet through its load balancer and checks the money rules afterwards.
#[derive(Debug, Parser)]
struct Args {
    /// The facilitators' load balancer.
    #[arg(long)]
    facilitator: String,
    /// The gates' load balancer.
    #[arg(long)]
    gate: String,
    /// Each gate replica, directly (proofs are replayed at every one).
    #[arg(long = "gate-replica", required = true)]
    gate_replicas: Vec<String>,
    /// A JSON-RPC URL of the chain for the checks (not one the script stops).
    #[arg(long)]
    rpc: String,
    /// The network name.
    #[arg(long)]
    network: String,
    /// The token.
    #[arg(long)]
    token: Address,
    /// The PaymentRouter.
    #[arg(long)]
    router: Address,
    /// The provider the gates pay (x402 payments go to it too).
    #[arg(long)]
    pay_to: Address,
    /// The provider's API key (to register the webhook receiver and read its events).
    #[arg(long, env = "TOLLGATE_API_KEY")]
    api_key: String,
    /// The paid path behind the gates.
    #[arg(long, default_value = "/v1/quote")]
    path: String,
    /// Paid requests through the gates.
    #[arg(long, default_value_t = 200)]
    paid: usize,
    /// x402 `/settle` payments through the facilitators.
    #[arg(long, default_value_t = 100)]
    x402: usize,
    /// Paid requests and x402 payments in flight at once, each.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// The dev accounts (of the standard test mnemonic) whose agents pay the gates.
    #[arg(long, value_delimiter = ',', default_value = "5,6,7")]
    payers: Vec<usize>,
    /// The dev accounts that sign the x402 payments.
    #[arg(long, value_delimiter = ',', default_value = "8,9")]
    x402_payers: Vec<usize>,
    /// Pace: at most this many requests started per second, both kinds together (0: as fast
    /// as they go), so that the faults the script injects land in the middle of the load.
    #[arg(long, default_value_t = 0)]
    rate: u32,
    /// The Subscriptions contract.
    #[arg(long)]
    subscriptions: Address,
    /// The cycle of the plan subscribed to during the run, in seconds (0: no subscription).
    #[arg(long, default_value_t = 3)]
    plan_interval: u64,
    /// The dev account that subscribes.
    #[arg(long, default_value_t = 9)]
    subscriber: usize,
    /// Amount of each x402 payment, in the token's units.
    #[arg(long, default_value_t = 10_000)]
    x402_amount: u64,
}

/// What the run did, for the checks and the report.
#[derive(Default)]
struct Run {
    /// Memos of the payments agents were served for.
    paid: Vec<(B256, String, u64)>,
    paid_errors: Vec<String>,
    /// x402 payments answered success: (transaction, payer, nonce, amount).
    x402: Vec<(B256, Address, B256, u64)>,
    x402_errors: Vec<String>,
    x402_retries: usize,
}

/// `fleet deploy`: the contracts on a bare node.
#[derive(Debug, Parser)]
struct DeployArgs {
    /// The node's JSON-RPC URL.
    #[arg(long)]
    rpc: String,
    /// Where to write the description (chainId, rpcUrl, contracts, accounts).
    #[arg(long)]
    out: std::path::PathBuf,
}

/// Deploys as the devnet's genesis does: dev account 0 deploys from its current nonce and
/// receives the fees; every dev account gets the devnet's token allotment.
async fn deploy(args: DeployArgs) -> anyhow::Result<()> {
    let accounts = dev_accounts(tollgate_chain::accounts::DEV_ACCOUNT_COUNT);
    let mut chain = None;
    for _ in 0..100 {
        match RpcChain::connect(
            &args.rpc,
            Wallet::from_keys(accounts.iter().map(|a| a.private_key))?,
            RpcOptions::default(),
        )
        .await
        {
            Ok(c) => {
                chain = Some(c);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let chain = chain.context("the node did not answer")?;
    let holders: Vec<Address> = accounts.iter().map(|a| a.address).collect();
    let d = tollgate_chain::contracts::deploy(
        &chain,
        accounts[0].address,
        accounts[0].address,
        &tollgate_chain::contracts::TokenParams::default(),
        &holders,
        tollgate_devnet::DEV_TOKENS,
    )
    .await?;
    let info = json!({
        "chainId": chain.chain_id(),
        "network": "tollgate-devnet",
        "rpcUrl": args.rpc,
        "contracts": { "token": d.token, "router": d.router, "subscriptions": d.subscriptions },
        "accounts": accounts.iter().map(|a| json!({
            "address": a.address, "privateKey": a.private_key
        })).collect::<Vec<_>>(),
    });
    std::fs::write(&args.out, serde_json::to_vec_pretty(&info)?)?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tollgate_chain::install_crypto_provider();
    if std::env::args().nth(1).as_deref() == Some("deploy") {
        return deploy(DeployArgs::parse_from(std::env::args().skip(1))).await;
    }
    let args = Args::parse();
    let chain = RpcChain::connect(
        &args.rpc,
        Wallet::from_keys(std::iter::empty())?,
        RpcOptions::default(),
    )
    .await
    .context("the chain's JSON-RPC")?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;

    // The webhook receiver, registered as the provider's endpoint.
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook_url = format!("http://{}/hook", listener.local_addr()?);
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(Arc::clone(&received));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let endpoint: Value = http
        .post(format!("{}/webhooks/endpoints", args.facilitator))
        .bearer_auth(&args.api_key)
        .json(&json!({ "url": hook_url, "description": "scale-out receiver" }))
        .send()
        .await?
        .error_for_status()
        .context("registering the webhook receiver")?
        .json()
        .await?;
    eprintln!("fleet: webhook receiver {hook_url} ({})", endpoint["id"]);

    let before = token_balance(&chain, args.token, args.pay_to).await?;
    let subscription = if args.plan_interval > 0 {
        Some(subscribe(&args, &chain, &http).await?)
    } else {
        None
    };
    let started = Instant::now();
    let run = Arc::new(Mutex::new(Run::default()));
    let pace = Pace::new(args.rate);
    let (paid, x402) = tokio::join!(
        paid_requests(&args, &chain, Arc::clone(&run), pace.clone()),
        x402_payments(&args, &chain, &http, Arc::clone(&run), pace.clone()),
    );
    paid?;
    x402?;
    let elapsed = started.elapsed();
    // The subscription: one more cycle after the faults, then cancelled (no renewal after).
    let renewals = match &subscription {
        Some((agent, id)) => {
            tokio::time::sleep(Duration::from_secs(args.plan_interval + 2)).await;
            let cancelled_at = chain.timestamp().await?;
            agent
                .cancel(tollgate_agent::SubscriptionRef::new(*id))
                .await
                .context("cancelling the subscription")?;
            Some(renewal_record(&args, &chain, *id, cancelled_at).await?)
        }
        None => None,
    };
    let run = std::mem::take(&mut *run.lock().unwrap_or_else(|e| e.into_inner()));
    eprintln!(
        "fleet: {} paid requests ({} failed), {} x402 settlements ({} failed, {} retried) in {:.1} s",
        run.paid.len(),
        run.paid_errors.len(),
        run.x402.len(),
        run.x402_errors.len(),
        run.x402_retries,
        elapsed.as_secs_f64()
    );
    for e in run.paid_errors.iter().chain(&run.x402_errors).take(10) {
        eprintln!("fleet:   {e}");
    }

    let mut failures = Vec::new();
    let mut check = |name: &str, ok: bool, detail: String| {
        println!("{} {name}: {detail}", if ok { "OK  " } else { "FAIL" });
        if !ok {
            failures.push(name.to_owned());
        }
    };

    // Every served payment settled exactly once.
    let settled = settlement_events(&chain, args.router, &run.paid).await?;
    let twice: Vec<_> = settled.iter().filter(|(_, n)| **n > 1).collect();
    let missing = run
        .paid
        .iter()
        .filter(|(m, _, _)| !settled.contains_key(m))
        .count();
    check(
        "paid requests settled exactly once",
        twice.is_empty() && missing == 0,
        format!(
            "{} served, {} PaymentSettled events, {} settled twice, {} not settled",
            run.paid.len(),
            settled.values().sum::<usize>(),
            twice.len(),
            missing
        ),
    );
    // Every x402 success is its own transfer in a successful transaction (several may share
    // one: the facilitators batch the payments that come together): the token's
    // `AuthorizationUsed(payer, nonce)` followed by `Transfer(payer, payee, amount)`.
    let mut ok = 0;
    for (tx, payer, nonce, amount) in &run.x402 {
        let Some(receipt) = chain.receipt(*tx).await? else {
            continue;
        };
        let logs: Vec<_> = receipt
            .logs
            .iter()
            .filter(|l| l.address == args.token)
            .collect();
        let carried = logs.windows(2).any(|pair| {
            Token::AuthorizationUsed::decode_log(pair[0])
                .is_ok_and(|u| u.authorizer == *payer && u.nonce == *nonce)
                && Token::Transfer::decode_log(pair[1]).is_ok_and(|t| {
                    t.from == *payer && t.to == args.pay_to && t.value == U256::from(*amount)
                })
        });
        if receipt.success && carried {
            ok += 1;
        }
    }
    let distinct: BTreeSet<_> = run.x402.iter().map(|(_, p, n, _)| (*p, *n)).collect();
    let transactions: BTreeSet<_> = run.x402.iter().map(|(tx, ..)| *tx).collect();
    check(
        "x402 settlements are transfers that happened, once each",
        ok == run.x402.len() && distinct.len() == run.x402.len(),
        format!(
            "{} answered success, {ok} transfers mined successfully, in {} transactions",
            run.x402.len(),
            transactions.len()
        ),
    );
    // The payee got exactly that.
    let after = token_balance(&chain, args.token, args.pay_to).await?;
    let router_net: u64 = settled
        .keys()
        .filter_map(|m| run.paid.iter().find(|(p, _, _)| p == m))
        .map(|(_, _, net)| *net)
        .sum();
    let x402_total: u64 = run.x402.iter().map(|(.., a)| a).sum();
    let subscribed = renewals
        .as_ref()
        .map_or(0, |r| u64::from(r.cycle) * PLAN_AMOUNT);
    let expected =
        before + U256::from(router_net) + U256::from(x402_total) + U256::from(subscribed);
    check(
        "the payee's balance moved by exactly the settled amounts",
        after == expected,
        format!("before {before}, after {after}, expected {expected}"),
    );
    // Every proof is served at most once by the fleet.
    let mut served_again = 0;
    for (_, header, _) in &run.paid {
        for gate in &args.gate_replicas {
            let status = http
                .get(format!("{gate}{}", args.path))
                .header("x-payment", header)
                .send()
                .await?
                .status()
                .as_u16();
            if status != 402 {
                served_again += 1;
            }
        }
    }
    check(
        "each proof served at most once by the gate fleet",
        served_again == 0,
        format!(
            "{} proofs replayed at {} replicas, {served_again} served again",
            run.paid.len(),
            args.gate_replicas.len()
        ),
    );
    // Webhooks: every event delivered, always under its id.
    let (delivered, mismatched, events) =
        webhooks_delivered(&args, &http, &received, Duration::from_secs(90)).await?;
    check(
        "every webhook event delivered at least once, under one id",
        delivered == events && mismatched == 0,
        format!("{events} events, {delivered} delivered, {mismatched} deliveries under another id"),
    );

    if let Some(r) = &renewals {
        // Cycle 1 is billed by the subscription itself, each later one by a renewal.
        let in_order: Vec<u32> = (1..=r.cycle).collect();
        check(
            "every renewal billed exactly once",
            r.renewed == in_order,
            format!(
                "cycle {}, SubscriptionRenewed for cycles {:?}",
                r.cycle, r.renewed
            ),
        );
        check(
            "no renewal skipped",
            r.paid_through + args.plan_interval + 3 >= r.cancelled_at,
            format!(
                "paid through {}, cancelled at {} (cycle {} s)",
                r.paid_through, r.cancelled_at, args.plan_interval
            ),
        );
    }

    let settlements = run.paid.len() + run.x402.len();
    println!(
        "RESULT settlements={settlements} seconds={:.1} settlements_per_second={:.1} paid_failed={} x402_failed={}",
        elapsed.as_secs_f64(),
        settlements as f64 / elapsed.as_secs_f64(),
        run.paid_errors.len(),
        run.x402_errors.len(),
    );
    if !failures.is_empty() {
        bail!("invariants failed: {}", failures.join(", "));
    }
    Ok(())
}

/// Per cycle of the plan subscribed to, in the token's units.
const PLAN_AMOUNT: u64 = 100_000;

/// Publishes a plan with a cycle of `plan_interval` seconds and subscribes the subscriber to it.
async fn subscribe(
    args: &Args,
    chain: &RpcChain,
    http: &reqwest::Client,
) -> anyhow::Result<(Agent, B256)> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let plan: Value = http
        .post(format!("{}/plans", args.facilitator))
        .bearer_auth(&args.api_key)
        .json(&json!({
            "network": args.network,
            "amount": PLAN_AMOUNT.to_string(),
            "interval": args.plan_interval,
            "idempotencyKey": format!("scale-out-{}", now.as_nanos()),
        }))
        .send()
        .await?
        .error_for_status()
        .context("publishing the plan")?
        .json()
        .await?;
    let plan_id: B256 = plan["planId"].as_str().context("planId")?.parse()?;
    let accounts = dev_accounts(tollgate_chain::accounts::DEV_ACCOUNT_COUNT);
    let signer = accounts
        .get(args.subscriber)
        .context("no such dev account")?
        .signer();
    let policy = SpendPolicy::new(
        Amount::from_units(10_000_000),
        Amount::from_units(u64::MAX / 4),
    )
    .subscriptions(Amount::from_units(PLAN_AMOUNT), Amount::ZERO);
    let agent = Agent::builder(signer, policy)
        .network(args.network.clone(), chain.chain_id())
        .facilitators([args.facilitator.clone()])
        .build()?;
    let sub = agent
        .subscribe(tollgate_agent::Subscribe::new(plan_id, Amount::ZERO))
        .await
        .context("subscribing")?;
    eprintln!(
        "fleet: subscribed {} to plan {plan_id} ({} s cycles)",
        sub.id, args.plan_interval
    );
    Ok((agent, sub.id))
}

/// What the chain says of the subscription after its cancellation.
struct Renewals {
    cycle: u32,
    paid_through: u64,
    cancelled_at: u64,
    /// The cycles of its `SubscriptionRenewed` events, in log order.
    renewed: Vec<u32>,
}

async fn renewal_record(
    args: &Args,
    chain: &RpcChain,
    id: B256,
    cancelled_at: u64,
) -> anyhow::Result<Renewals> {
    use tollgate_chain::contracts::Subscriptions;
    let sub = tollgate_chain::contracts::read(
        chain,
        args.subscriptions,
        &Subscriptions::subscriptionsCall { id },
    )
    .await?;
    let latest = chain.block_number().await?;
    let logs = chain
        .logs(&LogFilter {
            from_block: 0,
            to_block: Some(latest),
            addresses: vec![args.subscriptions],
            topics: [
                Some(vec![Subscriptions::SubscriptionRenewed::SIGNATURE_HASH]),
                Some(vec![id]),
                None,
                None,
            ],
        })
        .await?;
    let renewed = logs
        .iter()
        .filter_map(|l| Subscriptions::SubscriptionRenewed::decode_log(&l.log).ok())
        .map(|e| e.cycle)
        .collect();
    Ok(Renewals {
        cycle: sub.cycle,
        paid_through: sub.paidThrough,
        cancelled_at,
        renewed,
    })
}

/// The deliveries received: (`webhook-id` header, body `id`).
type Received = Arc<Mutex<Vec<(String, String)>>>;

/// A shared pace: each request waits for its slot.
#[derive(Clone)]
struct Pace(Option<Arc<tokio::sync::Mutex<tokio::time::Interval>>>);

impl Pace {
    fn new(rate: u32) -> Self {
        Self((rate > 0).then(|| {
            let every = Duration::from_secs(1) / rate;
            Arc::new(tokio::sync::Mutex::new(tokio::time::interval(every)))
        }))
    }

    async fn wait(&self) {
        if let Some(i) = &self.0 {
            i.lock().await.tick().await;
        }
    }
}

/// The webhook receiver: records (webhook-id header, body id).
async fn receive(
    State(received): State<Received>,
    headers: HeaderMap,
    body: String,
) -> &'static str {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body_id = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["id"].as_str().map(str::to_owned))
        .unwrap_or_default();
    received
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((id, body_id));
    "ok"
}

async fn token_balance(chain: &RpcChain, token: Address, who: Address) -> anyhow::Result<U256> {
    Ok(tollgate_chain::contracts::read(
        chain,
        token,
        &tollgate_chain::contracts::Token::balanceOfCall { account: who },
    )
    .await?)
}

/// Paid requests through the gates' balancer, `concurrency` agents at once.
async fn paid_requests(
    args: &Args,
    chain: &RpcChain,
    run: Arc<Mutex<Run>>,
    pace: Pace,
) -> anyhow::Result<()> {
    let accounts = dev_accounts(tollgate_chain::accounts::DEV_ACCOUNT_COUNT);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..args.concurrency {
        let payer = args.payers[w % args.payers.len()];
        let signer = accounts.get(payer).context("no such dev account")?.signer();
        let agent = Agent::builder(
            signer,
            // One-time payments only: the fleet measures those.
            SpendPolicy::new(
                Amount::from_units(10_000_000),
                Amount::from_units(u64::MAX / 4),
            )
            .no_subscriptions(),
        )
        .network(args.network.clone(), chain.chain_id())
        .facilitators([args.facilitator.clone()])
        .request_timeout(Duration::from_secs(60))
        .build()?;
        let (url, total) = (format!("{}{}", args.gate, args.path), args.paid);
        let (next, run, pace) = (Arc::clone(&next), Arc::clone(&run), pace.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return;
                }
                pace.wait().await;
                let outcome = async {
                    let res = agent.pay(PayRequest::get(&format!("{url}?i={i}"))?).await?;
                    ensure!(res.status == 200, "status {}", res.status);
                    let p = res.payment.context("served without a payment")?;
                    let memo = p.memo.context("no memo")?;
                    let net = p.amount.get() - p.fee.map_or(U256::ZERO, |f| f.get());
                    Ok((memo, p.header, u64::try_from(net)?))
                }
                .await;
                let mut run = run.lock().unwrap_or_else(|e| e.into_inner());
                match outcome {
                    Ok(paid) => run.paid.push(paid),
                    Err(e) => run.paid_errors.push(format!("paid request {i}: {e:#}")),
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    Ok(())
}

/// x402 V1 `exact` payments through the facilitators' balancer, each retried (the same
/// payload) until answered, then repeated once to see it refused.
async fn x402_payments(
    args: &Args,
    chain: &RpcChain,
    http: &reqwest::Client,
    run: Arc<Mutex<Run>>,
    pace: Pace,
) -> anyhow::Result<()> {
    let accounts = dev_accounts(tollgate_chain::accounts::DEV_ACCOUNT_COUNT);
    let domain = token_domain("USD Coin", "2", chain.chain_id(), args.token);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..args.concurrency {
        let payer = args.x402_payers[w % args.x402_payers.len()];
        let payer = accounts.get(payer).context("no such dev account")?.clone();
        let (http, domain, next, run, pace) = (
            http.clone(),
            domain.clone(),
            Arc::clone(&next),
            Arc::clone(&run),
            pace.clone(),
        );
        let (facilitator, network, token, pay_to, amount, total) = (
            args.facilitator.clone(),
            tollgate_protocol::Network::parse(args.network.clone())
                .context("--network is not a network name")?,
            args.token,
            args.pay_to,
            args.x402_amount,
            args.x402,
        );
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return;
                }
                pace.wait().await;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let nonce = keccak256(format!("scale-out x402 {i} {now}"));
                let auth = TransferWithAuthorization {
                    from: payer.address,
                    to: pay_to,
                    value: U256::from(amount),
                    validAfter: U256::from(now - 600),
                    validBefore: U256::from(now + 600),
                    nonce,
                };
                let Ok(signature) = sign(&payer.signer(), &auth, &domain) else {
                    continue;
                };
                let payload = PaymentPayload {
                    x402_version: 1,
                    scheme: "exact".into(),
                    network: network.clone(),
                    payload: ExactEvmPayload {
                        signature,
                        authorization: ExactEvmAuthorization {
                            from: payer.address,
                            to: pay_to,
                            value: Amount::from_units(amount),
                            valid_after: Amount::from_units(now - 600),
                            valid_before: Amount::from_units(now + 600),
                            nonce,
                        },
                    },
                };
                let body = json!({
                    "x402Version": 1,
                    "paymentPayload": payload,
                    "paymentRequirements": {
                        "scheme": "exact", "network": network,
                        "maxAmountRequired": amount.to_string(),
                        "resource": "http://scale-out/x402", "description": "scale-out",
                        "mimeType": "application/json", "payTo": pay_to,
                        "maxTimeoutSeconds": 60, "asset": token,
                        "extra": { "name": "USD Coin", "version": "2" }
                    }
                });
                // Our own secret per payment: a retry after a lost answer (a replica killed
                // mid-request) gets the first settler's outcome again, not `duplicate_settlement`.
                let settler = keccak256(format!("scale-out settler {i} {now} {nonce}"));
                let mut outcome = Err(String::from("never answered"));
                for attempt in 0..20 {
                    if attempt > 0 {
                        run.lock().unwrap_or_else(|e| e.into_inner()).x402_retries += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    let Ok(res) = http
                        .post(format!("{facilitator}/settle"))
                        .header("idempotency-key", settler.to_string())
                        .json(&body)
                        .send()
                        .await
                    else {
                        continue;
                    };
                    if res.status().is_server_error() {
                        continue;
                    }
                    let v: Value = res.json().await.unwrap_or(Value::Null);
                    if v["success"] == true {
                        outcome = v["transaction"]
                            .as_str()
                            .and_then(|t| t.parse::<B256>().ok())
                            .ok_or_else(|| format!("success without a transaction: {v}"));
                        break;
                    }
                    // A failure the facilitator may recover from on a retry of the same payload
                    // (a replica that died mid-settlement; a transaction not confirmed in time,
                    // named with `invalid_transaction_state`); anything else is final.
                    let pending = v["errorReason"] == "invalid_transaction_state"
                        && v["transaction"].as_str().is_some_and(|t| !t.is_empty());
                    if v["errorReason"] != "unexpected_settle_error" && !pending {
                        outcome = Err(format!("refused: {v}"));
                        break;
                    }
                }
                let mut repeat_refused = true;
                if outcome.is_ok()
                    && let Ok(res) = http
                        .post(format!("{facilitator}/settle"))
                        .json(&body)
                        .send()
                        .await
                {
                    let v: Value = res.json().await.unwrap_or(Value::Null);
                    repeat_refused = v["success"] != true;
                }
                let mut run = run.lock().unwrap_or_else(|e| e.into_inner());
                match outcome {
                    Ok(tx) if repeat_refused => {
                        run.x402.push((tx, payer.address, nonce, amount));
                    }
                    Ok(tx) => run.x402_errors.push(format!(
                        "x402 {i}: a repeat of settled {tx} answered success"
                    )),
                    Err(e) => run.x402_errors.push(format!("x402 {i}: {e}")),
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    let run = run.lock().unwrap_or_else(|e| e.into_inner());
    if run
        .x402_errors
        .iter()
        .any(|e| e.contains("answered success"))
    {
        bail!("a settled x402 payload was answered success twice");
    }
    Ok(())
}

/// `PaymentSettled` events of the router per memo, for the memos paid.
async fn settlement_events(
    chain: &RpcChain,
    router: Address,
    paid: &[(B256, String, u64)],
) -> anyhow::Result<BTreeMap<B256, usize>> {
    let latest = chain.block_number().await?;
    let mut counts = BTreeMap::new();
    for memos in paid.chunks(200) {
        let logs = chain
            .logs(&LogFilter {
                from_block: 0,
                to_block: Some(latest),
                addresses: vec![router],
                topics: [
                    Some(vec![PaymentRouter::PaymentSettled::SIGNATURE_HASH]),
                    Some(memos.iter().map(|(m, _, _)| *m).collect()),
                    None,
                    None,
                ],
            })
            .await?;
        for l in logs {
            if let Some(memo) = l.log.topics().get(1) {
                *counts.entry(*memo).or_insert(0) += 1;
            }
        }
    }
    Ok(counts)
}

/// Waits until every event of the provider was received: (events delivered, deliveries whose
/// `webhook-id` differs from their body's id, events).
async fn webhooks_delivered(
    args: &Args,
    http: &reqwest::Client,
    received: &Mutex<Vec<(String, String)>>,
    wait: Duration,
) -> anyhow::Result<(usize, usize, usize)> {
    let deadline = Instant::now() + wait;
    loop {
        let mut ids = BTreeSet::new();
        let mut after = 0u64;
        loop {
            let page: Value = http
                .get(format!(
                    "{}/events?after={after}&limit=100",
                    args.facilitator
                ))
                .bearer_auth(&args.api_key)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let events = page.as_array().cloned().unwrap_or_default();
            if events.is_empty() {
                break;
            }
            for e in &events {
                ids.insert(e["id"].as_str().unwrap_or_default().to_owned());
                after = after.max(e["seq"].as_u64().unwrap_or(after));
            }
            if events.len() < 100 {
                break;
            }
        }
        let got = received.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mismatched = got.iter().filter(|(h, b)| h != b).count();
        let seen: BTreeSet<&String> = got.iter().map(|(_, b)| b).collect();
        let delivered = ids.iter().filter(|id| seen.contains(id)).count();
        if delivered == ids.len() || Instant::now() > deadline {
            return Ok((delivered, mismatched, ids.len()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
