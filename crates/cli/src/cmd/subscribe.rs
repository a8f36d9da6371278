//! `tollgate subscribe --plan ID`: subscribe to a plan through a facilitator (the agent SDK's
//! `Agent::subscribe`); `tollgate subscribe --raise ID --max-overage AMOUNT`: raise an existing
//! subscription's overage cap (`Agent::raise_allowance`).

use std::{io::Write as _, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use tollgate_agent::{Agent, Amount, RaiseAllowance, SpendPolicy, Subscribe, Subscription};

use super::pay::{chain, exit_code, read_signer, report};
use crate::amount::{self, tokens};

/// The end of `tollgate subscribe --help` (`{notation}`: the amount notation).
const AFTER_HELP: &str = "\
With --plan: signs an EIP-2612 permit to the subscriptions contract (the current allowance plus
12 cycles of plan amount + max overage) and the Subscribe intent; the facilitator relays
subscribeWithSig, which creates the subscription and its allowance and bills the first cycle in
one transaction. --max bounds the first cycle.

With --raise: raises the overage cap of one of your subscriptions to --max-overage (what to do
after AllowanceExhausted). The subscription must be yours, not cancelled, and the new cap above
the current one; --max bounds the increase (new cap - current cap). Signs the EIP-712 Action
(raise allowance); the facilitator relays raiseAllowanceWithSig and answers once it is
confirmed. Repeating a raise whose answer was lost is safe: a cap already at that value is
answered without a transaction.

Either way, prints the confirmed subscription as JSON to stdout (id, status, planId, paidThrough,
allowance {cap, remaining} in units, and txHash: the transaction that created it, or the raise's),
and one summary line to stderr (`subscribed ID to plan PLAN …; tx HASH` or `raised ID's overage
cap to …; tx HASH`); logs are warnings only, -v shows the agent's steps. A new subscription is
remembered in the agent's state file (--state; default: beside --key-file), so that `tollgate pay
--subscribe` serves on it instead of subscribing again.

{notation}

Exit codes: as `tollgate pay` (0 done, 2 usage, 3 refused by the spending policy, 4 refused by
the facilitator or the chain — PlanDeprecated, InsufficientFunds, AllowanceNotRaised,
NotSubscriber, unknown subscription —, 5 network).

Environment: TOLLGATE_KEY (hex private key, when neither --key nor --key-file is given).

Examples:
  TOLLGATE_KEY=0x... tollgate subscribe --plan 0x... --max-overage 0.25 \\
    --facilitator http://127.0.0.1:8402 --max 5.00
  TOLLGATE_KEY=0x... tollgate subscribe --raise 0x... --max-overage 1.00 \\
    --facilitator http://127.0.0.1:8402 --max 0.75";

/// Flags of `tollgate subscribe`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP.replace("{notation}", amount::NOTATION))]
pub(crate) struct Args {
    /// The plan to subscribe to (0x-prefixed 32 bytes).
    #[arg(long, value_name = "ID", required_unless_present = "raise")]
    plan: Option<tollgate_chain::B256>,
    /// Raise this subscription's overage cap to --max-overage instead of subscribing.
    #[arg(
        long,
        value_name = "SUBSCRIPTION_ID",
        conflicts_with = "plan",
        requires = "max_overage"
    )]
    raise: Option<tollgate_chain::B256>,
    /// The overage cap per cycle (subscribing: default 0.00; raising: the new cap, required).
    #[arg(long, value_name = "AMOUNT", value_parser = amount::parse)]
    max_overage: Option<Amount>,
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
    /// The most the first cycle (--plan) or the cap's increase (--raise) may cost.
    #[arg(long, default_value = "1.00", value_name = "AMOUNT", value_parser = amount::parse)]
    max: Amount,
    /// The agent's state file, where the new subscription is remembered for `tollgate pay
    /// --subscribe` (default: beside --key-file, `agent.key` -> `agent.state.json`).
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
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
    let max_overage = args.max_overage.unwrap_or(Amount::ZERO);
    let raising = args.raise.is_some();
    let done = match (args.raise, args.plan) {
        (Some(id), _) => {
            let mut raise = RaiseAllowance::new(id, max_overage).facilitator(args.facilitator);
            raise.network = args.network;
            agent.raise_allowance(raise).await
        }
        (None, Some(plan)) => {
            let mut subscribe = Subscribe::new(plan, max_overage).facilitator(args.facilitator);
            subscribe.network = args.network;
            agent.subscribe(subscribe).await
        }
        (None, None) => {
            // clap requires one of them.
            report("error: pass --plan ID or --raise SUBSCRIPTION_ID");
            return ExitCode::from(super::pay::USAGE_EXIT);
        }
    };
    match done {
        Ok(sub) => {
            let tx = tx_text(&sub);
            if raising {
                report(&format!(
                    "raised {}'s overage cap to {} ({} units); tx {tx}",
                    sub.id,
                    tokens(sub.allowance_cap),
                    sub.allowance_cap
                ));
            } else {
                report(&format!(
                    "subscribed {} to plan {}: paid through {}, overage cap {}; tx {tx}",
                    sub.id,
                    sub.plan_id,
                    sub.paid_through,
                    tokens(sub.allowance_cap)
                ));
            }
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
    let mut builder = Agent::builder(signer, SpendPolicy::new(args.max, args.max));
    if let Some(state) = args.state.clone().or_else(|| {
        args.key_file
            .as_deref()
            .map(tollgate_agent::default_state_file)
    }) {
        builder = builder.state_file(state);
    }
    builder.build().context("building the agent")
}

/// A summary line's `tx …`: the subscription's transaction, or why there is none.
pub(crate) fn tx_text(s: &Subscription) -> String {
    s.tx_hash
        .map_or_else(|| "none sent (already so)".to_owned(), |t| t.to_string())
}

/// The subscription as the facilitator's `/subscriptions` answers it (`txHash`: the transaction
/// that created it or, after an action or a raise, that action's; when known).
pub(crate) fn render(s: &Subscription) -> serde_json::Value {
    serde_json::json!({
        "id": s.id,
        "status": s.status,
        "planId": s.plan_id,
        "paidThrough": s.paid_through,
        "allowance": { "cap": s.allowance_cap, "remaining": s.allowance_remaining },
        "txHash": s.tx_hash,
    })
}
