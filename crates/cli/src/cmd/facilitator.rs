//! `tollgate facilitator --config FILE [--check]`.

use std::path::PathBuf;

use std::io::Write as _;

use anyhow::Context as _;
use tollgate_facilitator::{
    check::{self, CheckOptions, Status},
    config::{Config, ResolvedKeys, RpcEndpoint},
    start,
};

/// Flags of `tollgate facilitator`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The config is a TOML file (see examples/facilitator.toml): listen address, public URL, store
(sqlite://PATH or postgres://...), relayer and proof-signing keys (env:VAR, file:PATH, or inline
hex — inline keys are warned about), the webhook-secrets key (keys.webhook_secrets: 32 bytes as
64 hex digits, e.g. `openssl rand -hex 32`; webhook signing secrets are stored encrypted under
it, and without it no webhook endpoint can be added), the fee, settlement bounds and the networks
(an x402 V1 name such as base-sepolia, or a custom one with its chain id; RPC URL, token, router,
subscriptions, confirmation depth). Unknown keys are errors.

Endpoints: POST /authorize, GET /settlements/{key}, POST /proofs/verify, POST /verify,
POST /settle, GET /supported, GET /.well-known/tollgate, POST /providers/challenge,
POST /providers/register, POST /providers/keys/revoke, POST /plans, GET /plans/{id},
POST /plans/{id}/deprecate, POST /subscriptions, GET /subscriptions/quote,
GET /subscriptions/{id}, /healthz, /readyz, /metrics, /openapi.json.

--check checks the config against its chains and exits without serving: every RPC endpoint
(rpc_url, rpc_fallback_urls, public_rpc_url) reachable and on the network's chain id; the token,
router and subscriptions contracts present; the router settling the configured token, with our
PaymentRouter's code; the token's EIP-712 name and version equal to token_name/token_version;
each relayer holding the gas of 100 settlements (300000 gas each) at the node's current gas
price; public_rpc_url set where subscriptions are sold (a warning). One line per check on stdout,
`ok`, `warn` or `FAIL` with the change that fixes it; the exit status is 0 only when nothing
fails. Serving runs the same checks at start: it refuses a node of another chain or a missing
contract, and logs the other failures as warnings.

Flags over the file (each also read from its environment variable): --rpc-url (TOLLGATE_RPC_URL)
for the rpc_url of the only [[networks]] entry (an error with several), --listen
(TOLLGATE_FACILITATOR_LISTEN; port 0 picks a free one) for listen, and public_url with it when the
file leaves public_url to its default. `tollgate dev` writes TOLLGATE_RPC_URL in
STATE_DIR/dev.env, so after `. .tollgate/dev/dev.env` the example reads its devnet, whatever its
--port-base. An override is logged.

Environment: TOLLGATE_LOG (log filter, default info; -v for debug).

Example:
  TOLLGATE_RELAYER_KEY=0x... TOLLGATE_PROOF_KEY=0x... tollgate facilitator --config examples/facilitator.toml --check
  TOLLGATE_RELAYER_KEY=0x... TOLLGATE_PROOF_KEY=0x... tollgate facilitator --config examples/facilitator.toml")]
pub(crate) struct Args {
    /// The facilitator's TOML config file.
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// Check the config against its chains (endpoints, chain ids, contracts, token domain,
    /// relayer gas, public RPC URL), print one line per check and exit: 0 when nothing fails.
    /// Serves nothing.
    #[arg(long)]
    check: bool,
    /// The chain's JSON-RPC URL, over the file's rpc_url (a config with one network).
    #[arg(
        long,
        value_name = "URL",
        env = "TOLLGATE_RPC_URL",
        hide_env_values = true
    )]
    rpc_url: Option<String>,
    /// Where to listen, over the file's listen (port 0: a free port).
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_FACILITATOR_LISTEN")]
    listen: Option<std::net::SocketAddr>,
}

/// Test-only: the failpoint to arm (`tollgate_facilitator::fault`), read from the environment
/// by the binary (never by the library). Builds without failpoints refuse to start with it set.
const FAILPOINT_ENV: &str = "TOLLGATE_FAILPOINT";

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let mut config =
        Config::load(&args.config).with_context(|| format!("loading {}", args.config.display()))?;
    override_file(&mut config, args.rpc_url, args.listen)?;
    let keys = config
        .resolve(|var| std::env::var(var).ok())
        .context("resolving keys")?;
    for w in &keys.warnings {
        tracing::warn!("{w}");
    }
    if args.check {
        return check(&config, &keys).await;
    }
    let mut settings = start::settings(&config);
    if let Ok(name) = std::env::var(FAILPOINT_ENV) {
        tollgate_facilitator::fault::arm(&name).context(FAILPOINT_ENV)?;
        tracing::warn!("{FAILPOINT_ENV}={name}: the process aborts when it reaches that step");
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    if config.listen.port() == 0 && settings.public_url.ends_with(":0") {
        // Port 0 picks a free port: status URLs must name the one actually bound.
        settings.public_url = format!("http://{addr}");
    }
    let facilitator = start::build(&config, &keys, settings, None)
        .await
        .context("starting the facilitator")?;
    tracing::info!(
        listen = %addr,
        public_url = %facilitator.settings().public_url,
        proof_signer = %facilitator.proof_signer(),
        networks = ?facilitator.networks().iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        store = if config.store.is_postgres() { "postgres" } else { "sqlite" },
        "facilitator listening"
    );
    let _keeper = facilitator.spawn_keeper(); // renewals; stops when dropped
    let _webhooks = facilitator.spawn_webhooks(); // the outbox's deliveries; stops when dropped
    tollgate_facilitator::serve(facilitator, listener, crate::shutdown_signal()).await?;
    tracing::info!("facilitator stopped");
    Ok(())
}

/// The flags over the file: `--rpc-url` for the only network's `rpc_url`, `--listen` for
/// `listen` (and `public_url`, when the file left it to its default).
fn override_file(
    config: &mut Config,
    rpc_url: Option<String>,
    listen: Option<std::net::SocketAddr>,
) -> anyhow::Result<()> {
    if let Some(url) = rpc_url {
        let [network] = config.networks.as_mut_slice() else {
            anyhow::bail!(
                "--rpc-url (TOLLGATE_RPC_URL) sets the rpc_url of a config's only network; this \
                 one has {}: unset it, or set each rpc_url in the file",
                config.networks.len()
            );
        };
        anyhow::ensure!(
            ["http://", "https://", "ws://", "wss://"]
                .iter()
                .any(|scheme| url.starts_with(scheme)),
            "--rpc-url (TOLLGATE_RPC_URL): not an http(s) or ws(s) URL"
        );
        network.rpc = RpcEndpoint::Url(url.into());
        tracing::info!(network = %network.name, rpc_url = %network.rpc, "rpc_url from --rpc-url (TOLLGATE_RPC_URL)");
    }
    if let Some(listen) = listen {
        if config.public_url == default_public_url(config.listen) {
            config.public_url = default_public_url(listen);
        }
        config.listen = listen;
        tracing::info!(%listen, public_url = %config.public_url, "listen from --listen (TOLLGATE_FACILITATOR_LISTEN)");
    }
    Ok(())
}

/// The facilitator config's default `public_url` for `listen`: `http://` + listen, with an
/// unspecified address replaced by loopback.
fn default_public_url(listen: std::net::SocketAddr) -> String {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", std::net::SocketAddr::new(ip, listen.port()))
}

/// `--check`: the report on stdout, an error when a check failed.
async fn check(config: &Config, keys: &ResolvedKeys) -> anyhow::Result<()> {
    let mut options = CheckOptions::default();
    options.floor_settlements = config.settlement.relayer_floor_settlements;
    let report = check::check(config, keys, &options).await;
    let mut out = std::io::stdout().lock();
    write!(out, "{report}")?;
    out.flush()?;
    let failed = report
        .findings
        .iter()
        .filter(|f| f.status == Status::Fail)
        .count();
    anyhow::ensure!(failed == 0, "{failed} check(s) failed");
    Ok(())
}
