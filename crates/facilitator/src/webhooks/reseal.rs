//! Bringing the stored signing secrets in line with the configured `keys.webhook_secrets`:
//! sealing those still in plaintext or under a previous key, at startup and on each write.

use super::{SealError, SecretsKeys, is_sealed};
use crate::{
    store::{Endpoint, EndpointSecrets, StoreError},
    webhooks::Webhooks,
};

/// Seals whichever of `e`'s secrets is still plaintext (stored by an older version).
pub(super) fn seal_plaintext(keys: &SecretsKeys, e: &mut Endpoint) -> Result<(), SealError> {
    if !is_sealed(&e.secret) {
        e.secret = keys.seal(&e.id, &e.secret)?;
    }
    if let Some(old) = e.old_secret.as_mut()
        && !is_sealed(old)
    {
        *old = keys.seal(&e.id, old)?;
    }
    Ok(())
}

/// Why the stored webhook secrets do not fit the configured key
/// ([`Facilitator::seal_webhook_secrets`](crate::Facilitator::seal_webhook_secrets)). Never
/// contains a secret or key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretsError {
    /// Secrets are stored encrypted, but no key is configured.
    #[error(
        "the store holds encrypted signing secrets of {endpoints} webhook endpoint(s), but \
         `keys.webhook_secrets` is not set: configure the key they were encrypted with"
    )]
    KeyMissing {
        /// How many endpoints have an encrypted secret.
        endpoints: usize,
    },
    /// Secrets stored in plaintext by an older version, and no key to encrypt them with.
    #[error(
        "the store holds plaintext signing secrets of {endpoints} webhook endpoint(s) (written by \
         an older version), but `keys.webhook_secrets` is not set: set it to a 32-byte key (64 hex \
         digits, e.g. from `openssl rand -hex 32`) and they are encrypted at startup"
    )]
    PlaintextWithoutKey {
        /// How many endpoints there are.
        endpoints: usize,
    },
    /// A stored secret does not open under the configured keys.
    #[error("webhook endpoint {endpoint}: {source}")]
    Seal {
        /// The endpoint.
        endpoint: String,
        /// Why.
        #[source]
        source: SealError,
    },
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl Webhooks {
    /// Brings the stored webhook secrets in line with the configured keys; run at startup,
    /// before serving. Every secret still in plaintext (stored by a version before encryption
    /// at rest) or sealed under a previous key (`keys.webhook_secrets_previous`) is sealed
    /// under the current key; every other one is checked to open. Returns how many endpoints
    /// were rewritten.
    ///
    /// Fails, naming the setting, when the store holds secrets but no key is configured, or a
    /// secret was sealed under a key that is not configured (a wrong key) or does not open:
    /// deliveries are never signed with a secret that could not be read.
    pub async fn seal_secrets(&self) -> Result<usize, SecretsError> {
        let all = self.core.store().webhook_secrets().await?;
        let Some(keys) = &self.core.settings().webhook_secrets else {
            let sealed = all
                .iter()
                .filter(|e| is_sealed(&e.secret) || e.old_secret.as_deref().is_some_and(is_sealed))
                .count();
            return match (all.len(), sealed) {
                (0, _) => Ok(0),
                (_, 0) => Err(SecretsError::PlaintextWithoutKey {
                    endpoints: all.len(),
                }),
                (_, endpoints) => Err(SecretsError::KeyMissing { endpoints }),
            };
        };
        let mut rewritten = 0;
        for old in &all {
            let reseal = |stored: &str| -> Result<Option<String>, SecretsError> {
                let wrap = |source| SecretsError::Seal {
                    endpoint: old.id.clone(),
                    source,
                };
                if keys.needs_reseal(&old.id, stored).map_err(wrap)? {
                    let plain = keys.open(&old.id, stored).map_err(wrap)?;
                    Ok(Some(keys.seal(&old.id, &plain).map_err(wrap)?))
                } else {
                    Ok(None)
                }
            };
            let secret = reseal(&old.secret)?;
            let old_secret = match old.old_secret.as_deref() {
                Some(s) => reseal(s)?,
                None => None,
            };
            if secret.is_none() && old_secret.is_none() {
                continue;
            }
            let new = EndpointSecrets {
                id: old.id.clone(),
                secret: secret.unwrap_or_else(|| old.secret.clone()),
                old_secret: old_secret.or_else(|| old.old_secret.clone()),
            };
            // A rotation in between (another replica) wrote sealed secrets already.
            if self.core.store().replace_webhook_secrets(old, &new).await? {
                rewritten += 1;
            }
        }
        if rewritten > 0 {
            tracing::info!(
                endpoints = rewritten,
                key = keys.current().id(),
                "webhook signing secrets encrypted under the current keys.webhook_secrets"
            );
        }
        Ok(rewritten)
    }
}
