//! A launcher for the real anvil binary (`@foundry-rs/anvil`, installed by `scripts/install-tools`).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, BufReader},
    process::{Child, ChildStderr, Command},
    time::Instant,
};
use tollgate_chain::{
    Wallet,
    rpc::{RpcChain, RpcOptions},
};

use crate::{Error, Result};

/// anvil's default chain id.
pub const ANVIL_CHAIN_ID: u64 = 31337;
/// How long anvil may take to answer its first `eth_chainId`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// The line anvil prints once its server listens (followed by `host:port`).
const LISTENING: &str = "Listening on ";

/// A running anvil node on a free loopback port, killed when dropped.
#[derive(Debug)]
pub struct Anvil {
    child: Child,
    url: String,
    port: u16,
    chain_id: u64,
    /// Where anvil writes the states it no longer keeps in memory (one per block past its
    /// in-memory window, as JSON: ~1 GB over 10,000 blocks). Its own default, under
    /// `~/.foundry/anvil/tmp`, is cleaned only on a graceful exit, which a killed node never
    /// makes; this one goes with the node. Declared after `child`, so the node is killed first.
    _states: tempfile::TempDir,
}

impl Anvil {
    /// Starts anvil with chain id 31337.
    pub async fn spawn() -> Result<Self> {
        Self::spawn_with(ANVIL_CHAIN_ID).await
    }

    /// Starts anvil with the given chain id and waits until it answers `eth_chainId`.
    ///
    /// The binary is `$ANVIL_BIN` when set, else the one `scripts/install-tools` puts under the
    /// repository's `.tools/`. anvil picks its own free port (`--port 0`) and reports it on stdout,
    /// so two tests never race for one port.
    pub async fn spawn_with(chain_id: u64) -> Result<Self> {
        let bin = binary()?;
        let states = tempfile::Builder::new().prefix("anvil-states-").tempdir()?;
        let mut child = Command::new(&bin)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--chain-id",
                &chain_id.to_string(),
            ])
            .arg("--cache-path")
            .arg(states.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::Anvil(format!("cannot run {}: {e}", bin.display())))?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");

        // Read stdout until anvil says where it listens; keep what it printed for errors.
        let mut lines = BufReader::new(stdout).lines();
        let mut printed = String::new();
        let port = loop {
            match tokio::time::timeout_at(deadline, lines.next_line()).await {
                Ok(Ok(Some(line))) => {
                    if let Some(port) = line.strip_prefix(LISTENING).and_then(parse_port) {
                        break port;
                    }
                    printed.push_str(&line);
                    printed.push('\n');
                }
                Ok(Ok(None)) | Ok(Err(_)) => {
                    let status = child.wait().await.ok();
                    return Err(failed(
                        &bin,
                        &format!("exited ({status:?})"),
                        &printed,
                        &mut stderr,
                    )
                    .await);
                }
                Err(_) => {
                    return Err(failed(
                        &bin,
                        "printed no listening address in time",
                        &printed,
                        &mut stderr,
                    )
                    .await);
                }
            }
        };
        // anvil logs every request on stdout and warnings on stderr: drain both, or it blocks
        // once a pipe buffer fills. The tasks end when the child dies (the pipes close).
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        tokio::spawn(async move { tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await });

        let url = format!("http://127.0.0.1:{port}");
        let options = RpcOptions {
            chain_id: Some(chain_id),
            request_timeout: Duration::from_secs(1),
            ..RpcOptions::default()
        };
        loop {
            match RpcChain::connect(&url, Wallet::default(), options.clone()).await {
                Ok(_) => break,
                Err(e) if Instant::now() >= deadline => {
                    return Err(Error::Anvil(format!(
                        "anvil at {url} did not answer eth_chainId in time: {e}"
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        Ok(Self {
            child,
            url,
            port,
            chain_id,
            _states: states,
        })
    }

    /// The JSON-RPC URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The port anvil listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The chain id it was started with.
    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The operating system's id of the anvil process, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// `127.0.0.1:8545` → 8545.
fn parse_port(address: &str) -> Option<u16> {
    address.trim().rsplit_once(':')?.1.parse().ok()
}

async fn failed(bin: &Path, what: &str, stdout: &str, stderr: &mut ChildStderr) -> Error {
    let mut err = String::new();
    // anvil has exited or is stuck: whatever it wrote to stderr is there already.
    let _ = tokio::time::timeout(Duration::from_millis(500), stderr.read_to_string(&mut err)).await;
    Error::Anvil(format!(
        "{} {what}\n--- stderr ---\n{}\n--- stdout ---\n{}",
        bin.display(),
        err.trim_end(),
        stdout.trim_end()
    ))
}

/// The anvil binary: `$ANVIL_BIN`, else `<tools>/node_modules/@foundry-rs/anvil-<platform>/bin/anvil`
/// (`<tools>`: [`crate::peer::tools_dir`], `<repo>/.tools` by default).
pub fn binary() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("ANVIL_BIN") {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(Error::Anvil(format!(
                "ANVIL_BIN={} is not a file",
                bin.display()
            )))
        };
    }
    let platform = match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => "linux-amd64",
        ("linux", "aarch64") => "linux-arm64",
        ("macos", "x86_64") => "darwin-amd64",
        ("macos", "aarch64") => "darwin-arm64",
        (os, arch) => {
            return Err(Error::Anvil(format!(
                "no anvil package for {os}-{arch}; set ANVIL_BIN"
            )));
        }
    };
    let bin = crate::peer::tools_dir()
        .join("node_modules/@foundry-rs")
        .join(format!("anvil-{platform}"))
        .join("bin/anvil");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(Error::Anvil(format!(
            "anvil is not installed at {}: run scripts/install-tools (or set ANVIL_BIN)",
            bin.display()
        )))
    }
}

/// The workspace root (this crate lives in `<root>/crates/testkit`).
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_listening_line() {
        assert_eq!(parse_port("127.0.0.1:43817"), Some(43817));
        assert_eq!(parse_port("[::1]:8545 "), Some(8545));
        assert_eq!(parse_port("nothing"), None);
    }
}
