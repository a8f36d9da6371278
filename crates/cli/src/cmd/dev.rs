//! `tollgate dev`: the whole product on one machine — the embedded devnet with the contracts, a
//! facilitator, and a demo gated API, all on 127.0.0.1, with a "try this" guide.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    sync::Arc,
};

use alloy::primitives::{Address, B256};
use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tollgate_chain::Chain;
use tollgate_devnet::{Devnet, DevnetConfig, server};
use tollgate_facilitator::{
    Facilitator, NetworkSpec, Settings, store,
    webhooks::{SecretsKey, SecretsKeys},
};

/// Flags of `tollgate dev`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Starts, on 127.0.0.1:
  - the embedded devnet (JSON-RPC), contracts deployed, dev accounts funded;
  - a facilitator (POST /authorize, the x402 V1 and V2 API, /.well-known/tollgate) with the analytics
    dashboard at /dashboard (log in with the provider's apiKey from dev.json) and GET /analytics;
  - the renewal keeper (renewals and metered usage charged on-chain automatically) and the
    webhook delivery worker (endpoints on this machine are allowed in dev mode);
  - a demo plan of the provider: 5.00 per 30-day cycle (its id is planId in dev.json);
  - a demo API gated by Tollgate: GET /v1/quote (one-time 0.50), GET /v1/report
    (the demo plan's subscribers, or one-time 1.00), POST /v1/process (subscribers, metered
    0.10 per call from their overage allowance; or one-time 0.10), GET /healthz (free).
Writes STATE_DIR/dev.json (chainId, network, rpcUrl, facilitatorUrl, apiUrl, contracts,
accounts with roles relayer/provider/payer, the provider's apiKey, the demo planId, and the
webhookSecretsKey that encrypts webhook signing secrets in the store). A restart with the same
state directory keeps all state. The state directory is created 0700, and dev.json and the
databases 0600: they hold keys.

One `tollgate dev` per state directory: it holds STATE_DIR/dev.lock (an advisory lock, with its
pid and URLs) while it runs, and a second one on the same directory stops at once, before
touching the journal or the database, naming the running one's pid and URLs. Use another
--state-dir for a second instance.

Ports: devnet 8545, facilitator 8402, API 8080; --port-base P uses P, P+1, P+2
(--port-base 0 picks free ports). The server limits below apply to all three listeners.

Writes STATE_DIR/dev.env, for a shell to source, with the URLs actually bound:
  export TOLLGATE_FACILITATOR=http://127.0.0.1:8402   # the facilitator
  export TOLLGATE_RPC_URL=http://127.0.0.1:8545       # the devnet's JSON-RPC
  export TOLLGATE_API_URL=http://127.0.0.1:8080       # the demo API
`tollgate gateway` and `tollgate facilitator` take these over their config files' values
(gate.facilitator; the only network's rpc_url), as `tollgate webhooks` takes
TOLLGATE_FACILITATOR, so examples/gateway.toml and examples/facilitator.toml follow --port-base
without edits:

  tollgate dev --port-base 18000 &
  . .tollgate/dev/dev.env
  TOLLGATE_UPSTREAM_URL=http://127.0.0.1:9000 tollgate gateway --config examples/gateway.toml

  tollgate dev
  tollgate dev --network base-sepolia --chain-id 84532   # unmodified x402 clients can pay it")]
pub(crate) struct Args {
    /// Directory for the devnet journal, the facilitator's database and dev.json.
    #[arg(long, default_value = ".tollgate/dev", env = "TOLLGATE_STATE_DIR")]
    state_dir: PathBuf,
    /// Network name (an x402 V1 name such as base-sepolia makes x402 clients able to pay).
    #[arg(long, default_value = "tollgate-devnet")]
    network: String,
    /// Chain id.
    #[arg(long, default_value_t = 31337)]
    chain_id: u64,
    /// First of three consecutive ports (devnet, facilitator, API); 0 picks free ports.
    #[arg(long)]
    port_base: Option<u16>,
    #[command(flatten)]
    server: super::devnet::ServerArgs,
}

/// Roles of the dev accounts in `dev.json`.
const RELAYER: usize = 0;
const PROVIDER: usize = 1;
const PAYERS: [usize; 2] = [2, 3];
/// The proof-signing key: dev account 9 (a well-known test key; never for real funds).
const PROOF_KEY: usize = 9;

/// `dev.json`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DevInfo {
    pub(crate) chain_id: u64,
    pub(crate) network: String,
    pub(crate) rpc_url: String,
    pub(crate) facilitator_url: String,
    pub(crate) api_url: String,
    pub(crate) contracts: tollgate_chain::Deployment,
    pub(crate) accounts: Vec<DevAccountInfo>,
    pub(crate) api_key: String,
    /// The key webhook signing secrets are encrypted with in the facilitator's store (64 hex
    /// digits; `keys.webhook_secrets` in a facilitator config). Kept across restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) webhook_secrets_key: Option<String>,
    pub(crate) proof_signer: Address,
    /// The demo plan (`GET /v1/report` and `POST /v1/process` accept its subscriptions).
    pub(crate) plan_id: B256,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DevAccountInfo {
    pub(crate) address: Address,
    pub(crate) private_key: B256,
    pub(crate) role: String,
}

async fn bind(port: u16) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{port} (use --port-base to pick other ports)"))
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let limits = args.server.limits()?;
    let dir = &args.state_dir;
    super::create_private_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Before the journal is restored or the database opened: one `tollgate dev` per directory.
    let mut lock = StateLock::take(dir)?;
    let ports: [u16; 3] = match args.port_base {
        None => [8545, 8402, 8080],
        Some(0) => [0, 0, 0],
        Some(p) => [
            p,
            p.checked_add(1).context("port base too high")?,
            p.checked_add(2).context("port base too high")?,
        ],
    };

    let devnet = Devnet::start(DevnetConfig {
        chain_id: args.chain_id,
        network: args.network.clone(),
        state_dir: Some(dir.join("devnet")),
        ..Default::default()
    })
    .with_context(|| format!("starting the devnet in {}", dir.join("devnet").display()))?;
    let rpc_listener = bind(ports[0]).await?;
    let facilitator_listener = bind(ports[1]).await?;
    let api_listener = bind(ports[2]).await?;
    let url = |l: &tokio::net::TcpListener| -> anyhow::Result<String> {
        Ok(format!("http://{}", l.local_addr()?))
    };
    let (rpc_url, facilitator_url, api_url) = (
        url(&rpc_listener)?,
        url(&facilitator_listener)?,
        url(&api_listener)?,
    );
    lock.record(&format!(
        "devnet {rpc_url}, facilitator {facilitator_url}, API {api_url}"
    ))?;

    let accounts = devnet.accounts().to_vec();
    let d = devnet.deployment();
    let store_url = format!("sqlite://{}", dir.join("facilitator.db").display());
    let store = store::open(&store_url)
        .await
        .with_context(|| format!("opening {store_url}"))?;
    // The webhook-secrets key: kept across restarts in dev.json (0600), like the API key.
    let path = dir.join("dev.json");
    let previous = existing_info(&path);
    let secrets_key = match previous
        .as_ref()
        .and_then(|i| i.webhook_secrets_key.as_deref())
    {
        Some(hex) => SecretsKey::from_hex(hex)
            .with_context(|| format!("webhookSecretsKey in {}", path.display()))?,
        None => SecretsKey::generate()?,
    };
    let settings = Settings {
        public_url: facilitator_url.clone(),
        // Dev mode: webhook endpoints on this machine are allowed.
        webhook_allow_private: true,
        webhook_secrets: Some(SecretsKeys::new(secrets_key.clone())),
        server: limits.clone(),
        // Gates read subscriptions from the devnet's JSON-RPC server, found through discovery.
        public_rpc_urls: std::collections::BTreeMap::from([(
            args.network.clone(),
            rpc_url.clone(),
        )]),
        ..Settings::default()
    };
    let spec = NetworkSpec {
        name: args.network.clone(),
        chain_id: args.chain_id,
        token: d.token,
        token_name: devnet.config().token.name.clone(),
        token_version: devnet.config().token.version.clone(),
        router: d.router,
        subscriptions: Some(d.subscriptions),
        confirmations: 1,
    };
    let facilitator = Facilitator::new(
        settings,
        vec![(spec, devnet.clone() as Arc<dyn Chain>)],
        vec![accounts[RELAYER].address],
        accounts[PROOF_KEY].private_key,
        store,
    )?;
    facilitator
        .seal_webhook_secrets()
        .await
        .with_context(|| format!("the webhook secrets in {store_url}"))?;

    // The provider's API key: issued by the facilitator (stored hashed), kept across restarts
    // in dev.json.
    let provider = accounts[PROVIDER].address;
    let api_key = match previous {
        Some(i) => facilitator
            .restore_api_key(&i.api_key, provider, DEV_KEY_LABEL)
            .await
            .map(|()| i.api_key),
        None => facilitator.issue_api_key(provider, DEV_KEY_LABEL).await,
    }
    .context("storing the provider's API key")?;

    let role = |i: usize| {
        if i == RELAYER {
            Some("relayer")
        } else if i == PROVIDER {
            Some("provider")
        } else if PAYERS.contains(&i) {
            Some("payer")
        } else {
            None
        }
    };
    // The facilitator serves first: the demo plan is published through it, as a provider would.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let rpc_task = tokio::spawn({
        let (devnet, limits, stopped) = (devnet.clone(), limits.clone(), stop(stop_rx.clone()));
        async move { server::serve_with(devnet, rpc_listener, &limits, stopped).await }
    });
    // Renewals and overage charges are collected automatically, as in production; the keeper
    // stops with this scope.
    let _keeper = facilitator.spawn_keeper();
    let _webhooks = facilitator.spawn_webhooks();
    let proof_signer = facilitator.proof_signer();
    let fac_task = tokio::spawn(tollgate_facilitator::serve(
        facilitator,
        facilitator_listener,
        stop(stop_rx.clone()),
    ));
    let plan = super::demo::publish_plan(&facilitator_url, &api_key, &args.network).await?;

    let info = DevInfo {
        chain_id: args.chain_id,
        network: args.network.clone(),
        rpc_url: rpc_url.clone(),
        facilitator_url: facilitator_url.clone(),
        api_url: api_url.clone(),
        contracts: d,
        accounts: accounts
            .iter()
            .enumerate()
            .filter_map(|(i, a)| {
                role(i).map(|r| DevAccountInfo {
                    address: a.address,
                    private_key: a.private_key,
                    role: r.into(),
                })
            })
            .collect(),
        api_key,
        webhook_secrets_key: Some(secrets_key.expose_hex()),
        proof_signer,
        plan_id: plan.plan_id,
    };
    super::write_atomically(&path, &serde_json::to_vec_pretty(&info)?)
        .with_context(|| format!("writing {}", path.display()))?;
    let env_path = dir.join("dev.env");
    super::write_atomically(&env_path, dev_env(&info, &env_path).as_bytes())
        .with_context(|| format!("writing {}", env_path.display()))?;

    let api = super::demo::router(
        &info,
        &accounts[PROVIDER],
        plan,
        devnet.clone() as Arc<dyn Chain>,
        dir,
        api_listener.local_addr()?,
    )
    .await?;
    let api_task = tokio::spawn(async move {
        tollgate_server::serve(api_listener, api, &limits, stop(stop_rx)).await
    });
    print_guide(&info, &path);
    crate::shutdown_signal().await;
    let _ = stop_tx.send(true);
    for (name, task) in [
        ("devnet RPC", rpc_task),
        ("facilitator", fac_task),
        ("API", api_task),
    ] {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("{name} stopped with an error: {e}"),
            Err(e) => tracing::error!("{name} task failed: {e}"),
        }
    }
    Ok(())
}

/// `STATE_DIR/dev.lock`, locked (an advisory lock on the open file) for as long as this value
/// lives: the running `tollgate dev`'s pid and, once bound, its URLs.
#[derive(Debug)]
struct StateLock {
    file: std::fs::File,
    path: PathBuf,
}

impl StateLock {
    /// Locks `dir`'s lock file, or fails at once naming the `tollgate dev` that holds it.
    fn take(dir: &Path) -> anyhow::Result<Self> {
        use std::io::Read as _;
        let path = dir.join("dev.lock");
        let mut options = std::fs::OpenOptions::new();
        // Not truncated on opening: the holder's record must survive a second start's attempt.
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                anyhow::bail!(
                    "{} is in use by a running tollgate dev ({}); stop it, or pass another \
                     --state-dir",
                    dir.display(),
                    if holder.is_empty() {
                        "starting"
                    } else {
                        holder
                    }
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        let mut lock = Self { file, path };
        lock.record("starting")?;
        Ok(lock)
    }

    /// Replaces the record: `pid N, WHAT`.
    fn record(&mut self, what: &str) -> anyhow::Result<()> {
        use std::io::{Seek as _, SeekFrom};
        let line = format!("pid {}, {what}\n", std::process::id());
        self.file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)))
            .and_then(|_| self.file.write_all(line.as_bytes()))
            .and_then(|()| self.file.sync_data())
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// `dev.env`: the URLs as shell exports (the names `tollgate gateway`, `tollgate facilitator`
/// and `tollgate webhooks` read).
fn dev_env(info: &DevInfo, path: &Path) -> String {
    format!(
        "# tollgate dev's URLs, for a shell: . {}\n\
         export TOLLGATE_FACILITATOR={}\n\
         export TOLLGATE_RPC_URL={}\n\
         export TOLLGATE_API_URL={}",
        path.display(),
        info.facilitator_url,
        info.rpc_url,
        info.api_url
    )
}

fn existing_info(path: &Path) -> Option<DevInfo> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice::<DevInfo>(&bytes).ok()
}

/// The label the provider's dev API key is stored under.
const DEV_KEY_LABEL: &str = "tollgate dev";

#[allow(clippy::print_stdout)]
fn print_guide(info: &DevInfo, path: &Path) {
    let payer = info
        .accounts
        .iter()
        .find(|a| a.role == "payer")
        .expect("a payer");
    println!(
        "\nTollgate dev is running on {} (chain id {}).\n\
         \n  devnet JSON-RPC  {}\
         \n  facilitator      {}   (/.well-known/tollgate, /openapi.json, /metrics)\
         \n  demo API         {}   (/v1/quote 0.50, /v1/report 1.00 or plan, /v1/process 0.10 metered; /healthz free)\
         \n  token            {}   router {}   subscriptions {}\
         \n  demo plan        {}   (5.00 per 30 days)\
         \n  dashboard        {fac}/dashboard   (log in with the provider's apiKey: {api_key})\
         \n  summary          {}\
         \n  shell            . {dir}/dev.env   (exports TOLLGATE_FACILITATOR, TOLLGATE_RPC_URL, TOLLGATE_API_URL)\
         \n\nTry this:\
         \n  curl -i {api}/v1/quote                       # 402 with the payment terms\
         \n  tollgate pay {api}/v1/quote --key {key}   # pays 0.50 and prints the quote\
         \n  tollgate subscribe --facilitator {fac} --plan {plan} --max 5.00 --max-overage 1.00 --key {key}\
         \n  curl -X POST -H 'X-Service-Sub: <id>' {api}/v1/process   # 0.10 from the allowance\
         \n\nPress Ctrl-C to stop; state persists in {dir}.",
        info.network,
        info.chain_id,
        info.rpc_url,
        info.facilitator_url,
        info.api_url,
        info.contracts.token,
        info.contracts.router,
        info.contracts.subscriptions,
        info.plan_id,
        path.display(),
        api = info.api_url,
        fac = info.facilitator_url,
        api_key = info.api_key,
        plan = info.plan_id,
        key = payer.private_key,
        dir = path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
    );
}
