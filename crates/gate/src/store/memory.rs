//! [`MemoStore`] in this process's memory.

use std::{
    collections::{HashMap, hash_map::Entry},
    sync::{Arc, Mutex, MutexGuard},
};

use alloy::primitives::B256;
use async_trait::async_trait;

use super::MemoStore;
use crate::StoreError;

/// The once-only set in this process's memory (URL `memory:`, the gate's default): a map from
/// key to expiry behind one lock, held for a lookup and an insert. Clones share the set.
///
/// A restart forgets it: a proof still valid then would be served again. A gate that restarts
/// within the lifetime of the proofs it accepts (a memo's `ttl`, an x402 authorization's
/// `validBefore`), or that runs as several processes, needs a durable set
/// (`sqlite://PATH`, `postgres://…`: [`super::DatabaseMemoStore`]).
#[derive(Clone, Debug, Default)]
pub struct MemoryMemoStore {
    keys: Arc<Mutex<HashMap<B256, u64>>>,
}

impl MemoryMemoStore {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many keys it holds (expired ones included until pruned).
    pub fn len(&self) -> usize {
        self.keys().len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn keys(&self) -> MutexGuard<'_, HashMap<B256, u64>> {
        // Nothing panics while holding the lock; a poisoned map is still a consistent one.
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl MemoStore for MemoryMemoStore {
    async fn claim(&self, key: B256, expires_at: u64) -> Result<bool, StoreError> {
        Ok(match self.keys().entry(key) {
            Entry::Occupied(_) => false,
            Entry::Vacant(slot) => {
                slot.insert(expires_at);
                true
            }
        })
    }

    async fn release(&self, key: B256) -> Result<(), StoreError> {
        self.keys().remove(&key);
        Ok(())
    }

    async fn take(&self, key: B256) -> Result<bool, StoreError> {
        Ok(self.keys().remove(&key).is_some())
    }

    async fn prune(&self, now: u64) -> Result<u64, StoreError> {
        let mut keys = self.keys();
        let before = keys.len();
        keys.retain(|_, expires_at| *expires_at > now);
        Ok((before - keys.len()) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn behaves_as_a_once_only_set() {
        let s = MemoryMemoStore::new();
        super::super::tests::behaves_as_a_once_only_set(Arc::new(s.clone())).await;
        s.prune(u64::MAX).await.unwrap();
        assert!(s.is_empty(), "every key pruned");
    }
}
