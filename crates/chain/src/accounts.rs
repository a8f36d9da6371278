//! Deterministic development accounts: the standard test mnemonic's first keys (anvil's accounts).

use alloy::{
    primitives::{Address, B256},
    signers::local::{MnemonicBuilder, Secp256k1Signer},
};

/// The standard test mnemonic used by anvil, hardhat and foundry.
pub const DEV_MNEMONIC: &str = "test test test test test test test test test test test junk";

/// How many development accounts the devnet derives and funds.
pub const DEV_ACCOUNT_COUNT: u32 = 10;

/// A development account: address and private key.
#[derive(Clone)]
pub struct DevAccount {
    /// Its address.
    pub address: Address,
    /// Its private key (a well-known test key: never use it for real funds).
    pub private_key: B256,
}

impl std::fmt::Debug for DevAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevAccount")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl DevAccount {
    /// A libsecp256k1-backed signer for this account.
    pub fn signer(&self) -> Secp256k1Signer {
        Secp256k1Signer::from_bytes(&self.private_key).expect("a derived key is a valid key")
    }
}

/// Derives the first `count` accounts of [`DEV_MNEMONIC`] at `m/44'/60'/0'/0/i`.
pub fn dev_accounts(count: u32) -> Vec<DevAccount> {
    (0..count)
        .map(|i| {
            let signer = MnemonicBuilder::english()
                .phrase(DEV_MNEMONIC)
                .index(i)
                .and_then(|b| b.build())
                .expect("the standard test mnemonic derives");
            DevAccount {
                address: signer.address(),
                private_key: signer.to_bytes(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_anvils_accounts() {
        let accounts = dev_accounts(2);
        assert_eq!(
            accounts[0].address,
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
                .parse::<Address>()
                .unwrap()
        );
        assert_eq!(
            accounts[1].address,
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
                .parse::<Address>()
                .unwrap()
        );
        assert_eq!(accounts[0].signer().address(), accounts[0].address);
    }
}
