//! Reference peers for the side-by-side benches: the `tests/interop` node scripts.

/// A node script of `tests/interop` that prints `LISTENING <port>`, started with `args` (it is
/// killed when the returned handle drops); `None`, after saying why, without node or `.tools`.
pub(crate) async fn server(script: &str, args: &[&str]) -> Option<NodeServer> {
    let root = tollgate_testkit::repo_root();
    let packages = tollgate_testkit::peer::tools_dir().join("node_modules");
    if !packages.join("@x402/core/package.json").is_file() {
        eprintln!("skipped: {script} needs the pinned @x402 packages: run scripts/install-tools");
        return None;
    }
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|out| out.status.success()) {
        eprintln!(
            "skipped: {script} needs `node` (Node.js 20) on PATH: install it, then run \
             scripts/install-tools"
        );
        return None;
    }
    let mut command = tokio::process::Command::new("node");
    command
        .arg(root.join("tests/interop").join(script))
        .args(["--port", "0"])
        .args(args);
    spawn_listening(script, command).await
}

/// A peer facilitator started by `command`, which must print `LISTENING <port>` on stdout once
/// it serves on that loopback port (it is killed when the returned handle drops); `None`, after
/// saying why, if it cannot start.
pub(crate) async fn spawn_listening(
    name: &str,
    mut command: tokio::process::Command,
) -> Option<NodeServer> {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| eprintln!("skipped: cannot run {name}: {e}"))
        .ok()?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take()?).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(port) = line.strip_prefix("LISTENING ") {
            let url = format!("http://127.0.0.1:{}", port.trim());
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Some(NodeServer { child, url });
        }
    }
    eprintln!("skipped: {name} exited before listening");
    None
}

/// A running node server ([`server`]).
pub(crate) struct NodeServer {
    /// Killed when the handle drops.
    child: tokio::process::Child,
    pub(crate) url: String,
}

impl NodeServer {
    /// The server's process id while it runs (the command's own: a script that `exec`s the
    /// server hands it its id).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}
