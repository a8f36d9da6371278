//! `tollgate subscription list|show|pause|resume|cancel`: a subscriber's subscriptions through
//! the facilitator, gasless (the agent SDK's `Agent::subscriptions`, `pause`, `resume`,
//! `cancel`).

use std::{io::Write as _, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use tollgate_agent::{Agent, Amount, SpendPolicy, SubscriptionRef};
use tollgate_chain::B256;

use super::{
    pay::{NETWORK_EXIT, PAYMENT_FAILED_EXIT, USAGE_EXIT, chain, exit_code, read_signer, report},
    subscribe::{render, tx_text},
};
use crate::amount;

/// Flags of `tollgate subscription`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// List your subscriptions (every one on the facilitator's network, each read from the
    /// chain) as a JSON array. The listing is signed with your key: nobody else can list them.
    List(ListArgs),
    /// Show a subscription as JSON (no key needed).
    Show(ShowArgs),
    /// Pause one of your subscriptions: gates refuse it (SubscriptionNotActive) and renewals
    /// stop until you resume it. Gasless: you sign, the facilitator relays pauseWithSig.
    Pause(ActArgs),
    /// Resume one of your paused subscriptions. If its paid period has ended, a new cycle is
    /// billed first (bounded by --max). Gasless: the facilitator relays resumeWithSig.
    Resume(ResumeArgs),
    /// Cancel one of your subscriptions, for good (subscribe again for a new one); your state
    /// file forgets it. Gasless: the facilitator relays cancelWithSig.
    #[command(after_help = "\
Each action is answered once the transaction is confirmed, and prints the subscription as JSON
to stdout (txHash: the action's transaction) and one line to stderr (`cancelled ID; tx HASH`).
Repeating one is safe: a subscription already in the asked state is answered as it is, with no
transaction. Logs are warnings only; -v shows the agent's steps.

Exit codes: as `tollgate subscribe` (0 done, 2 usage, 3 refused by the spending policy, 4 refused
by the facilitator or the chain — SubscriptionNotActive, NotSubscriber, unknown subscription —,
5 network).

Example:
  tollgate subscription cancel 0x<id> --facilitator http://127.0.0.1:8402 --key-file agent.key")]
    Cancel(ActArgs),
}

/// Where the subscriptions are.
#[derive(Debug, clap::Args)]
struct Place {
    /// The facilitator's base URL.
    #[arg(long, value_name = "URL")]
    facilitator: String,
    /// The network (default: the facilitator's only network with subscriptions).
    #[arg(long, value_name = "NAME")]
    network: Option<String>,
}

/// The subscriber's key, as `tollgate subscribe` takes it.
#[derive(Debug, clap::Args)]
struct Key {
    /// The subscriber's private key (hex). Prefer --key-file or TOLLGATE_KEY.
    #[arg(long, value_name = "HEX", conflicts_with = "key_file")]
    key: Option<String>,
    /// A file holding the subscriber's private key (hex).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// The agent's state file (default: beside --key-file, `agent.key` -> `agent.state.json`).
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    #[command(flatten)]
    place: Place,
    #[command(flatten)]
    key: Key,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// The subscription id (0x + 64 hex digits).
    id: B256,
    #[command(flatten)]
    place: Place,
}

#[derive(Debug, clap::Args)]
struct ActArgs {
    /// The subscription id (0x + 64 hex digits).
    id: B256,
    #[command(flatten)]
    place: Place,
    #[command(flatten)]
    key: Key,
}

#[derive(Debug, clap::Args)]
#[command(after_help = amount::NOTATION)]
struct ResumeArgs {
    #[command(flatten)]
    act: ActArgs,
    /// The most the cycle billed on resuming (when the paid period has ended) may cost.
    #[arg(long, default_value = "1.00", value_name = "AMOUNT", value_parser = amount::parse)]
    max: Amount,
}

/// Runs `tollgate subscription`; the exit code says how it ended.
pub(crate) async fn run(args: Args) -> ExitCode {
    let out = match args.command {
        Command::Show(a) => show(a).await,
        Command::List(a) => match agent(&a.key, Amount::ZERO) {
            Ok(agent) => agent
                .subscriptions(Some(&a.place.facilitator), a.place.network.as_deref())
                .await
                .map(|subs| serde_json::Value::Array(subs.iter().map(render).collect()))
                .map_err(Failure::Agent),
            Err(e) => return usage(&e),
        },
        Command::Pause(a) => act(a, Amount::ZERO, Action::Pause).await,
        Command::Resume(a) => act(a.act, a.max, Action::Resume).await,
        Command::Cancel(a) => act(a, Amount::ZERO, Action::Cancel).await,
    };
    match out {
        Ok(value) => {
            let mut out = std::io::stdout().lock();
            if let Err(e) = writeln!(out, "{value}").and_then(|()| out.flush()) {
                report(&format!("error: writing the answer: {e}"));
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(Failure::Usage(e)) => usage(&e),
        Err(Failure::Exit(code, e)) => {
            report(&format!("error: {e:#}"));
            ExitCode::from(code)
        }
        Err(Failure::Agent(e)) => {
            report(&format!("error: {}", chain(&e)));
            ExitCode::from(exit_code(&e))
        }
    }
}

#[derive(Clone, Copy)]
enum Action {
    Pause,
    Resume,
    Cancel,
}

impl Action {
    /// The summary line's verb.
    fn done(self) -> &'static str {
        match self {
            Self::Pause => "paused",
            Self::Resume => "resumed",
            Self::Cancel => "cancelled",
        }
    }
}

/// How a subcommand failed: before reaching the facilitator (usage), in the agent, or
/// otherwise with an exit code of `tollgate pay`'s.
enum Failure {
    Usage(anyhow::Error),
    Agent(tollgate_agent::Error),
    Exit(u8, anyhow::Error),
}

impl From<tollgate_agent::Error> for Failure {
    fn from(e: tollgate_agent::Error) -> Self {
        Self::Agent(e)
    }
}

fn usage(e: &anyhow::Error) -> ExitCode {
    report(&format!("error: {e:#}"));
    ExitCode::from(USAGE_EXIT)
}

/// The subscriber's agent; `max` bounds what an action may bill.
fn agent(key: &Key, max: Amount) -> anyhow::Result<Agent> {
    let signer = read_signer(key.key.as_deref(), key.key_file.as_deref())?;
    let mut builder = Agent::builder(signer, SpendPolicy::new(max, max));
    if let Some(state) = key.state.clone().or_else(|| {
        key.key_file
            .as_deref()
            .map(tollgate_agent::default_state_file)
    }) {
        builder = builder.state_file(state);
    }
    builder.build().context("building the agent")
}

async fn act(a: ActArgs, max: Amount, action: Action) -> Result<serde_json::Value, Failure> {
    let agent = agent(&a.key, max).map_err(Failure::Usage)?;
    let mut target = SubscriptionRef::new(a.id).facilitator(a.place.facilitator);
    target.network = a.place.network;
    let sub = match action {
        Action::Pause => agent.pause(target).await?,
        Action::Resume => agent.resume(target).await?,
        Action::Cancel => agent.cancel(target).await?,
    };
    report(&format!(
        "{} {}; tx {}",
        action.done(),
        sub.id,
        tx_text(&sub)
    ));
    Ok(render(&sub))
}

async fn show(a: ShowArgs) -> Result<serde_json::Value, Failure> {
    let client = tollgate_client::FacilitatorClient::builder(&a.place.facilitator)
        .build()
        .context("the facilitator URL")
        .map_err(Failure::Usage)?;
    match client.subscription(a.id, a.place.network.as_deref()).await {
        Ok(view) => Ok(render(&view.into())),
        Err(e) if e.status() == Some(404) => {
            Err(Failure::Agent(tollgate_agent::Error::UnknownSubscription {
                id: a.id,
            }))
        }
        Err(e) => {
            let code = if e.transport().is_some() {
                NETWORK_EXIT
            } else {
                PAYMENT_FAILED_EXIT
            };
            Err(Failure::Exit(
                code,
                anyhow::Error::new(e).context("GET /subscriptions/{id}"),
            ))
        }
    }
}
