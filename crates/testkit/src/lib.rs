//! Shared test fixtures for Tollgate: a chain with the contracts deployed and funded dev accounts,
//! on any of the backends ([`Backend`]): the embedded devnet in process, a real anvil node
//! ([`Anvil`]) over JSON-RPC, or the embedded devnet behind its own JSON-RPC server.
//!
//! Every backend has the same genesis as far as tests can tell: the contracts deployed by dev
//! account 0 at the same addresses, and every dev account holding
//! [`DEV_TOKENS`].
//!
//! [`signing`] signs payments with the dev accounts' keys; with the `facilitator` feature,
//! `harness::TestNet` (feature `facilitator`) adds a real facilitator served on loopback.
//!
//! ```no_run
//! # async fn demo() -> tollgate_testkit::Result<()> {
//! use tollgate_testkit::{Backend, Fixture};
//! let fx = Fixture::new(Backend::Anvil).await?;
//! let block = fx.chain.block_number().await?;
//! # Ok(()) }
//! ```
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod anvil;
#[cfg(feature = "facilitator")]
pub mod harness;
pub mod load;
#[cfg(feature = "facilitator")]
pub mod mpp;
#[cfg(feature = "facilitator")]
pub mod node_proxy;
pub mod peer;
pub mod signing;
pub mod usdc;

use std::{fmt, sync::Arc};

use tempfile::TempDir;
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tollgate_chain::{
    Chain, Deployment, Wallet,
    accounts::{DevAccount, dev_accounts},
    contracts::{TokenParams, deploy},
    rpc::{RpcChain, RpcOptions},
};
use tollgate_devnet::{DEV_TOKENS, Devnet, DevnetConfig};

pub use anvil::{ANVIL_CHAIN_ID, Anvil, binary as anvil_binary, repo_root};

/// Errors setting up a fixture.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// anvil is missing, did not start, or did not answer.
    #[error("anvil: {0}")]
    Anvil(String),
    /// The chain layer failed (deployment, connection).
    #[error(transparent)]
    Chain(#[from] tollgate_chain::Error),
    /// A temporary directory or listener could not be created.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Circle's USDC could not be deployed ([`usdc`]).
    #[error("USDC: {0}")]
    Usdc(String),
    /// The facilitator, its store or an HTTP client could not be set up.
    #[error("setting up: {0}")]
    Setup(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Result alias for the fixtures.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How many dev accounts the fixtures use (anvil's default count, the devnet's default).
pub const ACCOUNTS: u32 = tollgate_chain::accounts::DEV_ACCOUNT_COUNT;

/// Which chain a [`Fixture`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The embedded devnet, called in process (journal in a temporary directory).
    Devnet,
    /// A real anvil node, through [`RpcChain`].
    Anvil,
    /// The embedded devnet behind its JSON-RPC server on loopback, through [`RpcChain`].
    DevnetRpc,
}

impl Backend {
    /// Every backend, for tests that run on each.
    pub const ALL: [Backend; 3] = [Backend::Devnet, Backend::Anvil, Backend::DevnetRpc];
}

/// A chain with the contracts deployed and the dev accounts funded. Dropping it stops the chain
/// (kills anvil, shuts the server down, removes the devnet's state directory).
pub struct Fixture {
    /// The chain, signing with every dev account's key.
    pub chain: Arc<dyn Chain>,
    /// Where the contracts are.
    pub deployment: Deployment,
    /// The dev accounts (account 0 deployed the contracts and is the router's fee recipient).
    pub accounts: Vec<DevAccount>,
    /// Which backend this is.
    pub backend: Backend,
    /// The token's name, symbol and EIP-712 version (its domain's name and version): the
    /// devnet's token's ([`TokenParams::default`]), or USDC's on a [`usdc::fixture`].
    pub token_params: TokenParams,
    guard: Guard,
}

impl fmt::Debug for Fixture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fixture")
            .field("backend", &self.backend)
            .field("chain", &self.chain)
            .field("deployment", &self.deployment)
            .field("token_params", &self.token_params)
            .finish_non_exhaustive()
    }
}

/// What keeps a fixture's chain alive.
#[derive(Debug)]
enum Guard {
    Devnet {
        devnet: Arc<Devnet>,
        _dir: TempDir,
    },
    Anvil(Anvil),
    DevnetRpc {
        devnet: Arc<Devnet>,
        url: String,
        _server: ServerGuard,
        _dir: TempDir,
    },
}

/// Stops the devnet's JSON-RPC server when dropped.
#[derive(Debug)]
struct ServerGuard {
    _shutdown: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        // Dropping the sender asks for a graceful shutdown; aborting makes sure of it.
        self.task.abort();
    }
}

impl Fixture {
    /// Starts a fixture on `backend`.
    pub async fn new(backend: Backend) -> Result<Self> {
        match backend {
            Backend::Devnet => devnet_fixture().await,
            Backend::Anvil => anvil_fixture().await,
            Backend::DevnetRpc => devnet_rpc_fixture().await,
        }
    }

    /// The embedded devnet, for the devnet backends.
    pub fn devnet(&self) -> Option<&Arc<Devnet>> {
        match &self.guard {
            Guard::Devnet { devnet, .. } | Guard::DevnetRpc { devnet, .. } => Some(devnet),
            Guard::Anvil(_) => None,
        }
    }

    /// The JSON-RPC URL, for the RPC backends.
    pub fn rpc_url(&self) -> Option<&str> {
        match &self.guard {
            Guard::Anvil(anvil) => Some(anvil.url()),
            Guard::DevnetRpc { url, .. } => Some(url),
            Guard::Devnet { .. } => None,
        }
    }

    /// The anvil node, for [`Backend::Anvil`].
    pub fn anvil(&self) -> Option<&Anvil> {
        match &self.guard {
            Guard::Anvil(anvil) => Some(anvil),
            _ => None,
        }
    }
}

/// A wallet of the dev accounts' keys.
pub fn dev_wallet(accounts: &[DevAccount]) -> Result<Wallet> {
    Ok(Wallet::from_keys(accounts.iter().map(|a| a.private_key))?)
}

/// Connects an [`RpcChain`] to `url`, signing with the dev accounts' keys.
pub async fn connect(url: &str, chain_id: u64, accounts: &[DevAccount]) -> Result<RpcChain> {
    let options = RpcOptions {
        chain_id: Some(chain_id),
        ..RpcOptions::default()
    };
    Ok(RpcChain::connect(url, dev_wallet(accounts)?, options).await?)
}

/// Connects to a fresh `anvil` and deploys the contracts exactly as the embedded devnet's genesis
/// does: deployed by dev account 0 (also the fee recipient) from nonce 0, so at the same
/// addresses, with [`DEV_TOKENS`] minted to every dev account.
pub async fn anvil_chain(anvil: &Anvil) -> Result<(Arc<dyn Chain>, Deployment, Vec<DevAccount>)> {
    let accounts = dev_accounts(ACCOUNTS);
    let chain: Arc<dyn Chain> = Arc::new(connect(anvil.url(), anvil.chain_id(), &accounts).await?);
    let deployer = accounts[0].address;
    let holders: Vec<_> = accounts.iter().map(|a| a.address).collect();
    let deployment = deploy(
        chain.as_ref(),
        deployer,
        deployer,
        &TokenParams::default(),
        &holders,
        DEV_TOKENS,
    )
    .await?;
    Ok((chain, deployment, accounts))
}

/// A fixture on a fresh anvil node ([`Backend::Anvil`]).
pub async fn anvil_fixture() -> Result<Fixture> {
    let anvil = Anvil::spawn().await?;
    let (chain, deployment, accounts) = anvil_chain(&anvil).await?;
    Ok(Fixture {
        chain,
        deployment,
        accounts,
        backend: Backend::Anvil,
        token_params: TokenParams::default(),
        guard: Guard::Anvil(anvil),
    })
}

fn start_devnet() -> Result<(Arc<Devnet>, TempDir)> {
    let dir = tempfile::tempdir()?;
    let devnet = Devnet::start(DevnetConfig {
        state_dir: Some(dir.path().to_owned()),
        ..DevnetConfig::default()
    })?;
    Ok((devnet, dir))
}

/// A fixture on the embedded devnet, called in process ([`Backend::Devnet`]).
pub async fn devnet_fixture() -> Result<Fixture> {
    let (devnet, dir) = start_devnet()?;
    Ok(Fixture {
        chain: devnet.clone(),
        deployment: devnet.deployment(),
        accounts: devnet.accounts().to_vec(),
        backend: Backend::Devnet,
        token_params: devnet.config().token.clone(),
        guard: Guard::Devnet { devnet, _dir: dir },
    })
}

/// A fixture on the embedded devnet served over JSON-RPC on loopback ([`Backend::DevnetRpc`]).
pub async fn devnet_rpc_fixture() -> Result<Fixture> {
    let (devnet, dir) = start_devnet()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let (shutdown, stop) = oneshot::channel::<()>();
    let task = tokio::spawn(tollgate_devnet::server::serve(
        devnet.clone(),
        listener,
        async move {
            let _ = stop.await;
        },
    ));
    let server = ServerGuard {
        _shutdown: shutdown,
        task,
    };
    let accounts = devnet.accounts().to_vec();
    let chain = connect(&url, devnet.config().chain_id, &accounts).await?;
    Ok(Fixture {
        chain: Arc::new(chain),
        deployment: devnet.deployment(),
        accounts,
        backend: Backend::DevnetRpc,
        token_params: devnet.config().token.clone(),
        guard: Guard::DevnetRpc {
            devnet,
            url,
            _server: server,
            _dir: dir,
        },
    })
}
