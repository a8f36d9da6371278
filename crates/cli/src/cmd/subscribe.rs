//! `tollgate subscribe --plan ID`: subscribe to a plan through a facilitator (the agent SDK's
//! `Agent::subscribe`).

use std::{io::Write as _, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use tollgate_agent::{Agent, Amount, SpendPolicy, Subscribe, Subscription};

use super::pay::{chain, exit_code, parse_tokens, read_signer, report};

/// Flags of `tollgate subscribe`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Signs an EIP-2612 permit to the subscriptions contract (the current allowance plus 12 cycles of
plan amount + max overage) and the Subscribe intent; the facilitator relays subscribeWithSig,
which creates the subscription and its allowance and bills the first cycle in one transaction.
Prints the confirmed subscription as JSON to stdout.

Exit codes: as `tollgate pay` (0 subscribed, 2 usage, 3 refused by the spending policy,
4 refused by the facilitator or the chain — PlanDeprecated, InsufficientFunds —, 5 network).

Environment: TOLLGATE_KEY (hex private key, when neither --key nor --key-file is given).

Example:
  TOLLGATE_KEY=0x... tollgate subscribe --plan 0x... --max-overage 250000 \\
    --facilitator http://127.0.0.1:8402 --max 5.00")]
pub(crate) struct Args {
    /// The plan id (0x-prefixed 32 bytes).
    #[arg(long, value_name = "ID")]
    plan: tollgate_chain::B256,
    /// The overage cap per cycle, an integer in the token's smallest unit.
    #[arg(long, default_value = "0", value_name = "UNITS")]
    max_overage: Amount,
    /// The facilitator's base URL.
    #[arg(long, value_name = "URL")]
    facilitator: String,
    /// The network (default: the facilitator's only network with subscriptions).
    #[arg(long, value_name = "NAME")]
    network: Option<String>,
    /// The subscriber's private key (hex). Prefer --key-file or TOLLGATE_KEY.
    #[arg(long, value_name = "HEX", conflicts_with = "key_file")]
    key: Option<String>,
    /// A file holding the subscriber's private key (hex).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// The most the first cycle may cost, in tokens.
    #[arg(long, default_value = "1.00", value_name = "AMOUNT", value_parser = parse_tokens)]
    max: Amount,
}

/// Runs `tollgate subscribe`; the exit code says how it ended.
pub(crate) async fn run(args: Args) -> ExitCode {
    let agent = match prepare(&args) {
        Ok(a) => a,
        Err(e) => {
            report(&format!("error: {e:#}"));
            return ExitCode::from(super::pay::USAGE_EXIT);
        }
    };
    let mut subscribe = Subscribe::new(args.plan, args.max_overage).facilitator(args.facilitator);
    subscribe.network = args.network;
    match agent.subscribe(subscribe).await {
        Ok(sub) => {
            let mut out = std::io::stdout().lock();
            let text = render(&sub).to_string();
            if let Err(e) = writeln!(out, "{text}").and_then(|()| out.flush()) {
                report(&format!("error: writing the subscription: {e}"));
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            report(&format!("error: {}", chain(&e)));
            ExitCode::from(exit_code(&e))
        }
    }
}

fn prepare(args: &Args) -> anyhow::Result<Agent> {
    let signer = read_signer(args.key.as_deref(), args.key_file.as_deref())?;
    Agent::builder(signer, SpendPolicy::new(args.max, args.max))
        .build()
        .context("building the agent")
}

/// The subscription as the facilitator's `/subscriptions` answers it.
fn render(s: &Subscription) -> serde_json::Value {
    serde_json::json!({
        "id": s.id,
        "status": s.status,
        "planId": s.plan_id,
        "paidThrough": s.paid_through,
        "allowance": { "cap": s.allowance_cap, "remaining": s.allowance_remaining },
        "txHash": s.tx_hash,
    })
}
