//! Relayer keys held by a chain backend, and transaction signing.

use std::{collections::HashMap, fmt, sync::Arc};

use alloy::{
    consensus::{SignableTransaction, TxEip1559, TxEnvelope},
    network::TxSignerSync,
    primitives::{Address, B256},
    signers::local::Secp256k1Signer,
};

use crate::{Error, Result};

/// The signing keys a backend may send from. Cheap to clone. Keys never appear in `Debug`.
#[derive(Clone, Default)]
pub struct Wallet {
    signers: Arc<HashMap<Address, Secp256k1Signer>>,
}

impl fmt::Debug for Wallet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wallet")
            .field("addresses", &self.addresses())
            .finish()
    }
}

impl Wallet {
    /// A wallet of the given private keys.
    pub fn from_keys(keys: impl IntoIterator<Item = B256>) -> Result<Self> {
        let signers = keys
            .into_iter()
            .map(|k| {
                let s = Secp256k1Signer::from_bytes(&k)
                    .map_err(|e| Error::InvalidInput(format!("private key: {e}")))?;
                Ok((s.address(), s))
            })
            .collect::<Result<HashMap<_, _>>>()?;
        Ok(Self {
            signers: Arc::new(signers),
        })
    }

    /// The addresses this wallet can sign for, sorted.
    pub fn addresses(&self) -> Vec<Address> {
        let mut a: Vec<_> = self.signers.keys().copied().collect();
        a.sort();
        a
    }

    /// Whether this wallet holds the key for `address`.
    pub fn contains(&self, address: &Address) -> bool {
        self.signers.contains_key(address)
    }

    /// This wallet with the keys of `other` added.
    pub fn merged(&self, other: &Wallet) -> Wallet {
        let mut signers = (*self.signers).clone();
        signers.extend(other.signers.iter().map(|(a, s)| (*a, s.clone())));
        Self {
            signers: Arc::new(signers),
        }
    }

    /// Signs an EIP-1559 transaction as `from`.
    pub fn sign(&self, from: Address, mut tx: TxEip1559) -> Result<TxEnvelope> {
        let signer = self.signers.get(&from).ok_or(Error::UnknownSigner(from))?;
        let sig = signer.sign_transaction_sync(&mut tx)?;
        Ok(tx.into_signed(sig).into())
    }
}
