//! `tollgate plan create|show|deprecate`: plans published through the facilitator.

use std::io::Write as _;

use anyhow::Context as _;
use serde_json::{Value, json};

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

Amounts are integers in the token's smallest unit (6 decimals: 1000000 = 1.00).

Example:
  TOLLGATE_API_KEY=tg_... tollgate plan create --facilitator http://127.0.0.1:8402 \\
      --network tollgate-devnet --amount 5000000 --idempotency-key pro-monthly")]
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
    /// The amount per cycle, in the token's smallest unit.
    #[arg(long, value_name = "UNITS", value_parser = parse_units)]
    amount: String,
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
    id: String,
    #[command(flatten)]
    common: Common,
    /// The network (optional when the facilitator serves one).
    #[arg(long, value_name = "NAME")]
    network: Option<String>,
}

#[derive(Debug, clap::Args)]
struct DeprecateArgs {
    /// The plan id (0x + 64 hex digits).
    id: String,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    auth: Auth,
    /// The network (optional when the facilitator serves one).
    #[arg(long, value_name = "NAME")]
    network: Option<String>,
}

fn parse_units(s: &str) -> Result<String, String> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        Ok(s.to_owned())
    } else {
        Err("an integer amount in the token's smallest unit".into())
    }
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let plan = match args.command {
        Command::Create(a) => {
            let key = a.idempotency_key.unwrap_or_else(|| {
                let key = alloy::primitives::B256::random().to_string();
                let _ = writeln!(std::io::stderr(), "idempotency key: {key}");
                key
            });
            let mut body = json!({
                "network": a.network,
                "amount": a.amount,
                "interval": a.interval,
                "idempotencyKey": key,
            });
            if let Some(pay_to) = a.pay_to {
                body["payTo"] = json!(pay_to);
            }
            call(
                http.post(format!("{}/plans", base(&a.common)))
                    .bearer_auth(&a.auth.api_key)
                    .json(&body),
            )
            .await?
        }
        Command::Show(a) => {
            let url = plan_url(&a.common, &a.id, "", a.network.as_deref())?;
            call(http.get(url)).await?
        }
        Command::Deprecate(a) => {
            let url = plan_url(&a.common, &a.id, "/deprecate", a.network.as_deref())?;
            call(http.post(url).bearer_auth(&a.auth.api_key)).await?
        }
    };
    writeln!(
        std::io::stdout(),
        "{}",
        serde_json::to_string_pretty(&plan)?
    )?;
    Ok(())
}

/// `{facilitator}/plans/{id}{suffix}?network=...`, the id and network escaped.
fn plan_url(
    c: &Common,
    id: &str,
    suffix: &str,
    network: Option<&str>,
) -> anyhow::Result<tollgate_agent::Url> {
    let mut url = tollgate_agent::Url::parse(base(c))
        .with_context(|| format!("invalid facilitator URL {:?}", c.facilitator))?;
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("the facilitator URL cannot take a path"))?
        .pop_if_empty()
        .push("plans")
        .push(id);
    if !suffix.is_empty() {
        url.set_path(&format!("{}{suffix}", url.path()));
    }
    if let Some(n) = network {
        url.query_pairs_mut().append_pair("network", n);
    }
    Ok(url)
}

fn base(c: &Common) -> &str {
    c.facilitator.trim_end_matches('/')
}

/// Sends `req` and returns its JSON body, or the facilitator's error as an error.
pub(super) async fn call(req: reqwest::RequestBuilder) -> anyhow::Result<Value> {
    let response = req.send().await.context("reaching the facilitator")?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .with_context(|| format!("the facilitator answered {status} without JSON"))?;
    if !status.is_success() {
        let code = body["error"]["code"].as_str().unwrap_or("Error");
        let message = body["error"]["message"].as_str().unwrap_or("");
        anyhow::bail!("the facilitator answered {status}: {code}: {message}");
    }
    Ok(body)
}
