//! One module per subcommand.

pub(crate) mod demo;
pub(crate) mod deploy;
pub(crate) mod dev;
pub(crate) mod devnet;
pub(crate) mod facilitator;
pub(crate) mod gateway;
pub(crate) mod pay;
pub(crate) mod plan;
pub(crate) mod provider;
pub(crate) mod subscribe;
pub(crate) mod subscription;
pub(crate) mod webhooks;

use std::{io::Write as _, path::Path};

/// Writes `bytes` (and a newline) to `path` atomically: a temporary file, fsynced, renamed. The
/// file is created with mode 0600 (owner only, whatever the umask): these summaries hold keys.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    // A temporary file left by a crash would keep its mode: start afresh.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(&tmp)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(bytes)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}

/// Creates a state directory (and its missing parents) with mode 0700; an existing one keeps
/// its mode.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}
