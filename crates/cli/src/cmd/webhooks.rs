//! `tollgate webhooks …`: a provider's webhook endpoints, their deliveries and its event log,
//! through the facilitator's API.

use std::io::Write as _;

use anyhow::Context as _;
use serde_json::{Value, json};

/// Flags of `tollgate webhooks`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Events (JSON {id, type, createdAt, data}) are POSTed to the endpoint signed per Standard
Webhooks 1.0 (headers webhook-id, webhook-timestamp, webhook-signature). Verify them with
tollgate_gate::verify_webhook or any Standard Webhooks library, with the endpoint's secret.

Event types: payment.settled payment.failed subscription.created subscription.renewed
subscription.renewal_failed subscription.paused subscription.resumed subscription.cancelled
allowance.charged allowance.exhausted allowance.raised plan.created plan.deprecated

Example:
  export TOLLGATE_API_KEY=tg_...
  tollgate webhooks create --facilitator http://127.0.0.1:8402 --url https://api.example.com/hooks \\
      --events payment.settled,subscription.renewed
  tollgate webhooks list --facilitator http://127.0.0.1:8402")]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
    /// The facilitator's base URL.
    #[arg(long, global = true, value_name = "URL", env = "TOLLGATE_FACILITATOR")]
    facilitator: Option<String>,
    /// The provider API key from `tollgate provider register`.
    #[arg(
        long,
        global = true,
        env = "TOLLGATE_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    api_key: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Add an endpoint; prints it with its signing secret (whsec_…), shown this once.
    Create {
        /// Where events are POSTed (http or https; private addresses only in dev mode).
        #[arg(long, value_name = "URL")]
        url: String,
        /// Comma-separated event types (default: all).
        #[arg(long, value_name = "TYPES")]
        events: Option<String>,
        /// Free text.
        #[arg(long, value_name = "TEXT")]
        description: Option<String>,
    },
    /// List your endpoints (without secrets).
    List,
    /// Show one endpoint.
    Show {
        /// The endpoint id (we_…).
        id: String,
    },
    /// Change an endpoint's URL, event types, description, or enable/disable it.
    Update {
        /// The endpoint id (we_…).
        id: String,
        /// A new URL.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// New comma-separated event types (`*` for all).
        #[arg(long, value_name = "TYPES")]
        events: Option<String>,
        /// A new description.
        #[arg(long, value_name = "TEXT")]
        description: Option<String>,
        /// Enable (true) or disable (false).
        #[arg(long, value_name = "BOOL")]
        enabled: Option<bool>,
    },
    /// Delete an endpoint and its pending deliveries.
    Delete {
        /// The endpoint id (we_…).
        id: String,
    },
    /// Rotate the signing secret; prints the new one. The old one keeps signing, beside it,
    /// for the overlap.
    Rotate {
        /// The endpoint id (we_…).
        id: String,
        /// How long the old secret keeps signing (seconds; default 86400).
        #[arg(long, value_name = "SECS")]
        overlap: Option<u64>,
    },
    /// The endpoint's latest deliveries: state (pending, delivered, dead), attempts, last error.
    Deliveries {
        /// The endpoint id (we_…).
        id: String,
        /// How many (default 100).
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
    /// Deliver an event to an endpoint again (e.g. a dead-lettered one).
    Redeliver {
        /// The endpoint id (we_…).
        id: String,
        /// The event id (evt_…).
        event: String,
    },
    /// Your events, oldest first.
    Events {
        /// Only those after this sequence number.
        #[arg(long, value_name = "SEQ")]
        after: Option<u64>,
        /// How many (default 100).
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
}

fn types(list: Option<String>) -> Option<Value> {
    list.map(|l| {
        if l.trim() == "*" {
            json!("*")
        } else {
            json!(
                l.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            )
        }
    })
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let base = args
        .facilitator
        .context("--facilitator URL (or TOLLGATE_FACILITATOR) is required")?
        .trim_end_matches('/')
        .to_owned();
    let key = args
        .api_key
        .context("--api-key (or TOLLGATE_API_KEY) is required")?;
    let http = reqwest::Client::new();
    let url = |path: &str| format!("{base}{path}");
    let endpoint = |id: &str, rest: &str| -> anyhow::Result<String> {
        anyhow::ensure!(
            id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "not an id: {id:?}"
        );
        Ok(url(&format!("/webhooks/endpoints/{id}{rest}")))
    };
    let req = match args.command {
        Command::Create {
            url: target,
            events,
            description,
        } => {
            let mut body = json!({ "url": target });
            if let Some(e) = types(events) {
                body["events"] = e;
            }
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            http.post(url("/webhooks/endpoints")).json(&body)
        }
        Command::List => http.get(url("/webhooks/endpoints")),
        Command::Show { id } => http.get(endpoint(&id, "")?),
        Command::Update {
            id,
            url: target,
            events,
            description,
            enabled,
        } => {
            let mut body = json!({});
            if let Some(u) = target {
                body["url"] = json!(u);
            }
            if let Some(e) = types(events) {
                body["events"] = e;
            }
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            if let Some(e) = enabled {
                body["enabled"] = json!(e);
            }
            http.patch(endpoint(&id, "")?).json(&body)
        }
        Command::Delete { id } => http.delete(endpoint(&id, "")?),
        Command::Rotate { id, overlap } => {
            let mut body = json!({});
            if let Some(o) = overlap {
                body["overlapSecs"] = json!(o);
            }
            http.post(endpoint(&id, "/rotate")?).json(&body)
        }
        Command::Deliveries { id, limit } => http.get(endpoint(
            &id,
            &format!("/deliveries?limit={}", limit.unwrap_or(100)),
        )?),
        Command::Redeliver { id, event } => {
            anyhow::ensure!(
                event
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "not an event id: {event:?}"
            );
            http.post(endpoint(&id, &format!("/deliveries/{event}/redeliver"))?)
        }
        Command::Events { after, limit } => http.get(url(&format!(
            "/events?after={}&limit={}",
            after.unwrap_or(0),
            limit.unwrap_or(100)
        ))),
    };
    let response = req
        .bearer_auth(&key)
        .send()
        .await
        .context("reaching the facilitator")?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if !status.is_success() {
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let code = body["error"]["code"].as_str().unwrap_or("Error");
        let message = body["error"]["message"].as_str().unwrap_or("");
        anyhow::bail!("the facilitator answered {status}: {code}: {message}");
    }
    let out = if text.is_empty() {
        json!({ "status": status.as_u16() })
    } else {
        serde_json::from_str(&text).context("the facilitator answered without JSON")?
    };
    writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(&out)?)?;
    Ok(())
}
