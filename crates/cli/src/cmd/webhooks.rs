//! `tollgate webhooks …`: a provider's webhook endpoints, their deliveries and its event log,
//! through the facilitator's API.

use anyhow::Context as _;
use tollgate_protocol::{
    api::webhooks::{CreateEndpoint, EventFilter, Page, Rotate, UpdateEndpoint},
    webhook::EventType,
};

/// The help's epilogue; its list of event types is [`EventType::ALL`].
fn after_help() -> String {
    // The types, wrapped at 90 columns.
    let mut types = String::new();
    let mut line = 0;
    for t in EventType::ALL {
        let name = t.as_str();
        if line > 0 && line + 1 + name.len() > 90 {
            types.push('\n');
            line = 0;
        } else if line > 0 {
            types.push(' ');
            line += 1;
        }
        types.push_str(name);
        line += name.len();
    }
    format!(
        "\
Events (JSON {{id, type, createdAt, data}}) are POSTed to the endpoint signed per Standard
Webhooks 1.0 (headers webhook-id, webhook-timestamp, webhook-signature). Verify them with
tollgate_gate::verify_webhook or any Standard Webhooks library, with the endpoint's secret.

Event types ({relayer}: the operator's, the provider account fees.fee_recipient):
{types}

Example:
  export TOLLGATE_API_KEY=tg_...
  tollgate webhooks create --facilitator http://127.0.0.1:8402 --url https://api.example.com/hooks \\
      --events {settled},{renewed}
  tollgate webhooks list --facilitator http://127.0.0.1:8402",
        relayer = EventType::RelayerLowBalance,
        settled = EventType::PaymentSettled,
        renewed = EventType::SubscriptionRenewed,
    )
}

/// Flags of `tollgate webhooks`.
#[derive(Debug, clap::Args)]
#[command(after_help = after_help())]
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

fn types(list: Option<String>) -> Option<EventFilter> {
    list.map(|l| EventFilter::from_comma_list(&l))
}

/// What a call without a body answers: its HTTP status.
#[derive(serde::Serialize)]
struct Done {
    status: u16,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let base = args
        .facilitator
        .context("--facilitator URL (or TOLLGATE_FACILITATOR) is required")?;
    let key = args
        .api_key
        .context("--api-key (or TOLLGATE_API_KEY) is required")?;
    let f = super::plan::client(&base, Some(&key))?;
    let id_ok = |what: &str, id: &str| -> anyhow::Result<()> {
        anyhow::ensure!(
            id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "not {what}: {id:?}"
        );
        Ok(())
    };
    use super::plan::print_json as print;
    match args.command {
        Command::Create {
            url,
            events,
            description,
        } => print(
            &f.create_endpoint(&CreateEndpoint {
                url,
                events: types(events),
                description,
            })
            .await?,
        ),
        Command::List => print(&f.endpoints().await?),
        Command::Show { id } => {
            id_ok("an id", &id)?;
            print(&f.endpoint(&id).await?)
        }
        Command::Update {
            id,
            url,
            events,
            description,
            enabled,
        } => {
            id_ok("an id", &id)?;
            let change = UpdateEndpoint {
                url,
                events: types(events),
                description,
                enabled,
            };
            print(&f.update_endpoint(&id, &change).await?)
        }
        Command::Delete { id } => {
            id_ok("an id", &id)?;
            f.delete_endpoint(&id).await?;
            print(&Done { status: 204 })
        }
        Command::Rotate { id, overlap } => {
            id_ok("an id", &id)?;
            let rotate = Rotate {
                overlap_secs: overlap,
            };
            print(&f.rotate_endpoint_secret(&id, &rotate).await?)
        }
        Command::Deliveries { id, limit } => {
            id_ok("an id", &id)?;
            let page = Page {
                after: None,
                limit: Some(limit.unwrap_or(100)),
            };
            print(&f.deliveries(&id, &page).await?)
        }
        Command::Redeliver { id, event } => {
            id_ok("an id", &id)?;
            id_ok("an event id", &event)?;
            f.redeliver(&id, &event).await?;
            print(&Done { status: 202 })
        }
        Command::Events { after, limit } => {
            let page = Page {
                after: Some(after.unwrap_or(0)),
                limit: Some(limit.unwrap_or(100)),
            };
            print(&f.events(&page).await?)
        }
    }
}
