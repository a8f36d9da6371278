//! The agent's persisted state: the subscriptions it holds, per plan, in a small JSON file
//! ([`AgentBuilder::state_file`](crate::AgentBuilder::state_file)), so that a later process
//! serves on the subscription an earlier one created instead of subscribing (and paying) again.
//!
//! The file is rewritten whole on every change: a temporary file beside it (mode 0600), fsynced,
//! then renamed over it, so a crash leaves the old file or the new one, never a torn one. Each
//! change is applied to the file as read again under an exclusive lock on `<file>.lock`, so two
//! processes sharing the file never lose each other's records. The file is a few hundred bytes and
//! changes once per subscription made or forgotten (each after an on-chain confirmation), so it is
//! written synchronously.

use std::{
    collections::BTreeMap,
    fs::{File, OpenOptions},
    io::{ErrorKind, Write as _},
    path::{Path, PathBuf},
    sync::Mutex,
};

use alloy::primitives::{Address, B256};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The version of the file's format.
const FORMAT: u32 = 1;

/// The default state file of an agent whose key is in `key_file`: beside it, named after it
/// (`agent.key` → `agent.state.json`).
///
/// ```
/// use std::path::Path;
/// let state = tollgate_agent::default_state_file(Path::new("/keys/agent.key"));
/// assert_eq!(state, Path::new("/keys/agent.state.json"));
/// ```
pub fn default_state_file(key_file: &Path) -> PathBuf {
    key_file.with_extension("state.json")
}

/// Where a held subscription serves: through this facilitator (base URL, no trailing slash), on
/// this network, for this plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PlanKey {
    pub(crate) facilitator: String,
    pub(crate) network: String,
    pub(crate) plan_id: B256,
}

/// One remembered subscription, as the file holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Record {
    id: B256,
    plan_id: B256,
    network: String,
    facilitator: String,
}

/// The file's content.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    version: u32,
    /// Whose subscriptions these are: a file is refused by an agent with another key.
    subscriber: Address,
    subscriptions: Vec<Record>,
}

/// The persisted state of one agent: its file, and the records as last read or written.
#[derive(Debug)]
pub(crate) struct StateFile {
    path: PathBuf,
    subscriber: Address,
    /// Serialises this process's changes (the file lock serialises processes).
    write: Mutex<()>,
}

impl StateFile {
    /// Opens (or, when missing, starts) `path` for `subscriber`; returns the subscriptions it
    /// holds.
    pub(crate) fn open(path: PathBuf, subscriber: Address) -> Result<(Self, Vec<(PlanKey, B256)>)> {
        let state = Self {
            path,
            subscriber,
            write: Mutex::new(()),
        };
        let held = state.read()?.into_iter().collect();
        Ok((state, held))
    }

    /// Remembers `id` as the subscription for `key`.
    pub(crate) fn remember(&self, key: &PlanKey, id: B256) -> Result<()> {
        self.change(|held| {
            held.insert(key.clone(), id);
        })
    }

    /// Forgets `id` for `key` (not another subscription that replaced it).
    pub(crate) fn forget(&self, key: &PlanKey, id: B256) -> Result<()> {
        self.change(|held| {
            if held.get(key) == Some(&id) {
                held.remove(key);
            }
        })
    }

    /// Forgets `id`, whatever plan it is remembered for.
    pub(crate) fn forget_id(&self, id: B256) -> Result<()> {
        self.change(|held| held.retain(|_, held_id| *held_id != id))
    }

    fn error(&self, source: std::io::Error) -> Error {
        Error::StateFile {
            path: self.path.clone(),
            source,
        }
    }

    /// Applies `f` to the records as the file holds them now, and writes the result.
    fn change(&self, f: impl FnOnce(&mut BTreeMap<PlanKey, B256>)) -> Result<()> {
        let _this_process = self.write.lock().unwrap_or_else(|e| e.into_inner());
        let _other_processes = self.lock_file()?;
        let mut held = self.read()?;
        f(&mut held);
        let document = Document {
            version: FORMAT,
            subscriber: self.subscriber,
            subscriptions: held
                .into_iter()
                .map(|(key, id)| Record {
                    id,
                    plan_id: key.plan_id,
                    network: key.network,
                    facilitator: key.facilitator,
                })
                .collect(),
        };
        let bytes = serde_json::to_vec_pretty(&document)
            .map_err(|e| self.error(std::io::Error::new(ErrorKind::InvalidData, e)))?;
        write_atomically(&self.path, &bytes).map_err(|e| self.error(e))
    }

    /// The records the file holds (none when it does not exist).
    fn read(&self) -> Result<BTreeMap<PlanKey, B256>> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(self.error(e)),
        };
        let invalid =
            |message: String| self.error(std::io::Error::new(ErrorKind::InvalidData, message));
        let document: Document = serde_json::from_slice(&bytes)
            .map_err(|e| invalid(format!("not an agent state file: {e}")))?;
        if document.version != FORMAT {
            return Err(invalid(format!(
                "format version {} (this agent reads {FORMAT})",
                document.version
            )));
        }
        if document.subscriber != self.subscriber {
            return Err(invalid(format!(
                "it holds the subscriptions of {}, not of this agent ({})",
                document.subscriber, self.subscriber
            )));
        }
        Ok(document
            .subscriptions
            .into_iter()
            .map(|r| {
                let key = PlanKey {
                    facilitator: r.facilitator.trim_end_matches('/').to_owned(),
                    network: r.network,
                    plan_id: r.plan_id,
                };
                (key, r.id)
            })
            .collect())
    }

    /// An exclusive lock on `<file>.lock`, released when the returned file is dropped.
    fn lock_file(&self) -> Result<File> {
        let mut name = self.path.clone().into_os_string();
        name.push(".lock");
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options
            .open(PathBuf::from(name))
            .map_err(|e| self.error(e))?;
        file.lock().map_err(|e| self.error(e))?;
        Ok(file)
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it (mode 0600 whatever the
/// umask), fsynced, renamed over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    let tmp = PathBuf::from(name);
    // A temporary file left by a crash would keep its mode: start afresh.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(&tmp)?;
    f.write_all(bytes)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    // The rename itself is durable once the directory is synced.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(plan: u8) -> PlanKey {
        PlanKey {
            facilitator: "http://127.0.0.1:8402".into(),
            network: "tollgate-devnet".into(),
            plan_id: B256::repeat_byte(plan),
        }
    }

    #[test]
    fn records_survive_a_reopen_and_merge_across_handles() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.state.json");
        let me = Address::repeat_byte(1);
        let (a, held) = StateFile::open(path.clone(), me).unwrap();
        assert!(held.is_empty());
        // Two handles on one file (two processes): neither loses the other's record.
        let (b, _) = StateFile::open(path.clone(), me).unwrap();
        a.remember(&key(1), B256::repeat_byte(0xa1)).unwrap();
        b.remember(&key(2), B256::repeat_byte(0xb2)).unwrap();
        let (_, mut held) = StateFile::open(path.clone(), me).unwrap();
        held.sort();
        assert_eq!(
            held,
            vec![
                (key(1), B256::repeat_byte(0xa1)),
                (key(2), B256::repeat_byte(0xb2))
            ]
        );
        // Forgetting another id than the one held changes nothing.
        a.forget(&key(1), B256::repeat_byte(0xff)).unwrap();
        a.forget_id(B256::repeat_byte(0xb2)).unwrap();
        let (_, held) = StateFile::open(path.clone(), me).unwrap();
        assert_eq!(held, vec![(key(1), B256::repeat_byte(0xa1))]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Another key's file is refused, and so is garbage.
        let other = StateFile::open(path.clone(), Address::repeat_byte(2)).unwrap_err();
        assert!(other.to_string().contains("agent.state.json"), "{other}");
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(
            StateFile::open(path, me),
            Err(Error::StateFile { .. })
        ));
    }
}
