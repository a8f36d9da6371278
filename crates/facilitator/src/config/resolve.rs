//! Turning the key sources of `[keys]` into keys ([`Config::resolve`]): environment variables
//! through the lookup closure the binary injects (this crate never reads the environment), files
//! from disk with their permissions checked, inline keys with a warning.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use super::{Config, ConfigError, HexKey, KeySource, Secret};
use crate::webhooks::SecretsKeys;

/// The keys of `[keys]`, read and checked by [`Config::resolve`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ResolvedKeys {
    /// The relayer keys, in configuration order.
    pub relayers: Vec<Secret>,
    /// The proof-signing key.
    pub proof: Secret,
    /// `keys.webhook_secrets` (with `keys.webhook_secrets_previous`), for
    /// [`Settings::webhook_secrets`](crate::Settings).
    pub webhook_secrets: Option<SecretsKeys>,
    /// Things the binary should log as warnings (inline keys, key files readable by others).
    pub warnings: Vec<KeyWarning>,
}

/// A key that resolved but is kept less safely than it should be.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyWarning {
    /// The key is written inline in the config.
    Inline {
        /// The key's config path (`keys.proof`, `keys.relayers[0]`).
        key: String,
    },
    /// The key file can be read by its group or by others (Unix).
    FileReadableByOthers {
        /// The key's config path.
        key: String,
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

impl fmt::Display for KeyWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inline { key } => write!(
                f,
                "`{key}` is an inline key in the config file; prefer \"env:VAR\" or \"file:PATH\""
            ),
            Self::FileReadableByOthers { key, path, mode } => write!(
                f,
                "`{key}`: key file {} is readable by group or others (mode {mode:03o}); chmod 600 it",
                path.display()
            ),
        }
    }
}

impl Config {
    /// Reads the keys of `[keys]`: environment variables through `lookup` (the binary passes
    /// `|var| std::env::var(var).ok()`), files from disk. Checks that each is a valid secp256k1
    /// key and that all are distinct. Errors and `Debug` output never contain a key.
    pub fn resolve(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<ResolvedKeys, ConfigError> {
        let mut warnings = Vec::new();
        let mut relayers = Vec::with_capacity(self.keys.relayers.len());
        for (i, source) in self.keys.relayers.iter().enumerate() {
            let key = format!("keys.relayers[{i}]");
            let secret = source.resolve(&key, &lookup, &mut warnings)?;
            if let Some(j) = relayers
                .iter()
                .position(|r: &Secret| r.address() == secret.address())
            {
                return Err(ConfigError::SameKey {
                    key,
                    other: format!("keys.relayers[{j}]"),
                });
            }
            relayers.push(secret);
        }
        let proof = self
            .keys
            .proof
            .resolve("keys.proof", &lookup, &mut warnings)?;
        if let Some(i) = relayers.iter().position(|r| r.address() == proof.address()) {
            return Err(ConfigError::SameKey {
                key: "keys.proof".into(),
                other: format!("keys.relayers[{i}]"),
            });
        }
        let webhook_secrets = match &self.keys.webhook_secrets {
            None => None,
            Some(source) => {
                let current = source.resolve("keys.webhook_secrets", &lookup, &mut warnings)?;
                let mut previous = Vec::with_capacity(self.keys.webhook_secrets_previous.len());
                for (i, source) in self.keys.webhook_secrets_previous.iter().enumerate() {
                    let key = format!("keys.webhook_secrets_previous[{i}]");
                    previous.push(source.resolve(&key, &lookup, &mut warnings)?);
                }
                Some(SecretsKeys::new(current).with_previous(previous))
            }
        };
        Ok(ResolvedKeys {
            relayers,
            proof,
            webhook_secrets,
            warnings,
        })
    }
}

impl<K: HexKey> KeySource<K> {
    /// Reads the key named by this source (`key` is its setting, for errors and warnings).
    pub(super) fn resolve(
        &self,
        key: &str,
        lookup: &impl Fn(&str) -> Option<String>,
        warnings: &mut Vec<KeyWarning>,
    ) -> Result<K, ConfigError>
    where
        K: Clone,
    {
        let invalid = |error| ConfigError::InvalidKey {
            key: key.to_owned(),
            source_name: self.to_string(),
            error,
        };
        match self {
            Self::Literal(secret) => {
                warnings.push(KeyWarning::Inline {
                    key: key.to_owned(),
                });
                Ok(secret.clone())
            }
            Self::Env(var) => {
                let value = lookup(var).ok_or_else(|| ConfigError::SecretNotSet {
                    key: key.to_owned(),
                    var: var.clone(),
                })?;
                K::from_hex(&value).map_err(invalid)
            }
            Self::File(path) => {
                check_key_file(key, path, warnings)?;
                let value =
                    std::fs::read_to_string(path).map_err(|error| ConfigError::SecretFile {
                        key: key.to_owned(),
                        path: path.clone(),
                        error,
                    })?;
                K::from_hex(&value).map_err(invalid)
            }
        }
    }
}

/// Refuses a key file others can write; warns about one others can read.
#[cfg(unix)]
fn check_key_file(
    key: &str,
    path: &Path,
    warnings: &mut Vec<KeyWarning>,
) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt as _;
    let metadata = std::fs::metadata(path).map_err(|error| ConfigError::SecretFile {
        key: key.to_owned(),
        path: path.to_owned(),
        error,
    })?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(ConfigError::InsecureKeyFile {
            key: key.to_owned(),
            path: path.to_owned(),
            mode,
        });
    }
    if mode & 0o044 != 0 {
        warnings.push(KeyWarning::FileReadableByOthers {
            key: key.to_owned(),
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_key_file(
    _key: &str,
    _path: &Path,
    _warnings: &mut Vec<KeyWarning>,
) -> Result<(), ConfigError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config::SecretsKeySource, webhooks::SecretsKey};

    #[test]
    fn the_webhook_secrets_key_resolves_without_echo() {
        let base = r#"
            [[networks]]
            name = "tollgate-devnet"
            chain_id = 31337
            rpc_url = "embedded"
            token = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
            router = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
        "#;
        let relayer = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let proof = "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
        let keys = |extra: &str| {
            format!("[keys]\nrelayers = [\"0x{relayer}\"]\nproof = \"0x{proof}\"\n{extra}\n{base}")
        };
        let hex = "ab".repeat(32);
        let old = "cd".repeat(32);
        let config = Config::from_toml_str(&keys(&format!(
            "webhook_secrets = \"env:WH\"\nwebhook_secrets_previous = [\"0x{old}\"]"
        )))
        .unwrap();
        assert!(
            matches!(&config.keys.webhook_secrets, Some(SecretsKeySource::Env(v)) if v == "WH")
        );
        let resolved = config
            .resolve(|var| (var == "WH").then(|| hex.clone()))
            .unwrap();
        let printed = format!("{config:?} {resolved:?}");
        assert!(
            !printed.contains("abab") && !printed.contains("cdcd"),
            "{printed}"
        );
        assert!(resolved.warnings.contains(&KeyWarning::Inline {
            key: "keys.webhook_secrets_previous[0]".into()
        }));
        let sealed = SecretsKeys::new(SecretsKey::from_hex(&old).unwrap())
            .seal("we_x", "whsec_x")
            .unwrap();
        assert_eq!(
            resolved
                .webhook_secrets
                .unwrap()
                .open("we_x", &sealed)
                .unwrap(),
            "whsec_x",
            "a previous key still opens"
        );

        let e = config.resolve(|_| None).unwrap_err();
        assert!(e.to_string().contains("keys.webhook_secrets"), "{e}");
        let e = config
            .resolve(|_| Some("0x12".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("keys.webhook_secrets") && !e.contains("0x12"),
            "{e}"
        );
        let e = Config::from_toml_str(&keys(&format!("webhook_secrets_previous = [\"0x{old}\"]")))
            .unwrap_err();
        assert!(
            e.to_string().contains("`keys.webhook_secrets` is required"),
            "{e}"
        );
        let e = Config::from_toml_str(&keys("webhook_secrets = \"0xzz\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("keys.webhook_secrets") && !e.contains("0xzz"),
            "{e}"
        );
        let none = Config::from_toml_str(&keys("")).unwrap();
        assert!(none.resolve(|_| None).unwrap().webhook_secrets.is_none());
    }
}
