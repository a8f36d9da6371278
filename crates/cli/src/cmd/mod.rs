//! One module per subcommand.

pub(crate) mod demo;
pub(crate) mod dev;
pub(crate) mod devnet;
pub(crate) mod facilitator;
pub(crate) mod gateway;
pub(crate) mod pay;
pub(crate) mod plan;
pub(crate) mod provider;
pub(crate) mod subscribe;
pub(crate) mod webhooks;

use std::{io::Write as _, path::Path};

/// Writes `bytes` (and a newline) to `path` atomically: a temporary file, fsynced, renamed.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}
