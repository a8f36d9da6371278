//! `tollgate plan create|show|deprecate`: plans published through the facilitator.

use std::{io::Write as _, time::Duration};

use alloy::primitives::B256;
use anyhow::Context as _;
use tollgate_client::FacilitatorClient;
use tollgate_protocol::{Amount, api::plans::CreatePlanRequest};

/// Flags of `tollgate plan`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Publish a plan on-chain through the facilitator (its relayer pays the gas); prints the
    /// plan as JSON.
    #[command(after_help = "\
The facilitator creates the plan with Subscriptions.createPlan and waits for confirmation. The
same --idempotency-key again returns the same plan instead of creating another (without one, a
random key is used and printed to stderr, so a retry can reuse it).

Amounts are tokens with a decimal point (5.00; at most 6 decimals, 1.00 = 1000000 units) or
units of the token's smallest unit with a prefix (units:5000000).

Example:
  TOLLGATE_API_KEY=tg_... tollgate plan create --facilitator http://127.0.0.1:8402 \\
      --network tollgate-devnet --amount 5.00 --idempotency-key pro-monthly")]
    Create(CreateArgs),
    /// Show a plan's on-chain terms and its provider as JSON (no API key needed).
    Show(ShowArgs),
    /// Deprecate a plan you created: it takes no new subscriptions; existing subscriptions keep
    /// running until cancelled. Prints the plan as JSON.
    Deprecate(DeprecateArgs),
}

#[derive(Debug, clap::Args)]
struct Common {
    /// The facilitator's base URL.
    #[arg(long, value_name = "URL")]
    facilitator: String,
}

#[derive(Debug, clap::Args)]
struct Auth {
    /// The provider API key from `tollgate provider register`.
    #[arg(
        long,
        env = "TOLLGATE_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    api_key: String,
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    auth: Auth,
    /// The network the plan lives on.
    #[arg(long, value_name = "NAME")]
    network: String,
    /// The amount per cycle.
    #[arg(long, value_name = "AMOUNT", value_parser = crate::amount::parse)]
    amount: Amount,
    /// The cycle length in seconds (default 30 days).
    #[arg(long, value_name = "SECS", default_value_t = 2_592_000)]
    interval: u64,
    /// Who is paid (default: the provider's own address).
    #[arg(long, value_name = "ADDR")]
    pay_to: Option<alloy::primitives::Address>,
    /// Makes retries safe: the same key returns the same plan.
    #[arg(long, value_name = "S")]
    idempotency_key: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// The plan id (0x + 64 hex digits).
    id: B256,
    #[command(flatten)]
    common: Common,
    /// The network (optional when the facilitator serves one).
    #[arg(long, value_name = "NAME")]
    network: Option<String>,
}

#[derive(Debug, clap::Args)]
struct DeprecateArgs {
    /// The plan id (0x + 64 hex digits).
    id: B256,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    auth: Auth,
    /// The network (optional when the facilitator serves one).
    #[arg(long, value_name = "NAME")]
    network: Option<String>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let plan = match args.command {
        Command::Create(a) => {
            let key = a.idempotency_key.unwrap_or_else(|| {
                let key = B256::random().to_string();
                let _ = writeln!(std::io::stderr(), "idempotency key: {key}");
                key
            });
            client(&a.common.facilitator, Some(&a.auth.api_key))?
                .create_plan(&CreatePlanRequest {
                    network: a.network.parse().context("--network")?,
                    amount: a.amount,
                    interval: a.interval,
                    pay_to: a.pay_to,
                    idempotency_key: key,
                })
                .await?
        }
        Command::Show(a) => {
            client(&a.common.facilitator, None)?
                .plan(a.id, a.network.as_deref())
                .await?
        }
        Command::Deprecate(a) => {
            client(&a.common.facilitator, Some(&a.auth.api_key))?
                .deprecate_plan(a.id, a.network.as_deref())
                .await?
        }
    };
    print_json(&plan)
}

/// A client of the facilitator at `base` (with the provider's API key, for the provider calls).
/// Calls wait for on-chain confirmations, so they are bounded generously.
pub(super) fn client(base: &str, api_key: Option<&str>) -> anyhow::Result<FacilitatorClient> {
    let mut builder = FacilitatorClient::builder(base)
        .timeouts(Duration::from_secs(120), Duration::from_secs(10))
        .user_agent(concat!("tollgate/", env!("CARGO_PKG_VERSION")));
    if let Some(key) = api_key {
        builder = builder.api_key(key);
    }
    builder
        .build()
        .with_context(|| format!("invalid facilitator URL {base:?}"))
}

/// Writes `value` to stdout as pretty JSON.
pub(super) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    writeln!(
        std::io::stdout(),
        "{}",
        serde_json::to_string_pretty(value)?
    )?;
    Ok(())
}
