//! The payment proof's signature: an EIP-712 attestation by the facilitator's proof key over the
//! settled payment (network, chain id, token, payer, payee, amount, fee, memo, transaction, block,
//! issuance and expiry). Gates verify it offline against the facilitator's published signers.

use alloy::{
    primitives::{Address, U256},
    signers::SignerSync,
    sol,
    sol_types::{Eip712Domain, SolStruct},
};
use tollgate_protocol::PaymentProof;

use crate::{Result, authorization};

sol! {
    /// What a payment proof attests, as EIP-712 typed data.
    #[derive(Debug, PartialEq, Eq)]
    struct ProofClaims {
        string network;
        uint256 chainId;
        address token;
        address payer;
        address payTo;
        uint256 amount;
        uint256 fee;
        bytes32 memo;
        bytes32 txHash;
        uint64 block;
        uint64 issuedAt;
        uint64 expiry;
    }
}

/// The EIP-712 domain of payment proofs (name "Tollgate Payment Proof", version "1"; no chain id:
/// the claims carry the network's).
pub fn proof_domain() -> Eip712Domain {
    Eip712Domain::new(
        Some("Tollgate Payment Proof".into()),
        Some("1".into()),
        None,
        None,
        None,
    )
}

/// The typed claims of a proof.
pub fn claims(proof: &PaymentProof) -> ProofClaims {
    ProofClaims {
        network: proof.network.to_string(),
        chainId: U256::from(proof.chain_id),
        token: proof.token,
        payer: proof.payer,
        payTo: proof.pay_to,
        amount: proof.amount.get(),
        fee: proof.fee.get(),
        memo: proof.memo,
        txHash: proof.tx_hash,
        block: proof.block,
        issuedAt: proof.issued_at,
        expiry: proof.expiry,
    }
}

/// Signs `proof` in place with the facilitator's proof key (sets `signer` and `signature`).
pub fn sign(
    signer: &(impl SignerSync + alloy::signers::Signer),
    proof: &mut PaymentProof,
) -> Result<()> {
    proof.signer = signer.address();
    proof.signature = authorization::sign(signer, &claims(proof), &proof_domain())?;
    Ok(())
}

/// Recovers the address that signed `proof`'s claims (to compare with the published signers).
/// Malformed signatures are errors, never panics.
pub fn recover(proof: &PaymentProof) -> Result<Address> {
    authorization::recover(&claims(proof), &proof_domain(), &proof.signature)
}

/// The EIP-712 digest of a proof's claims.
pub fn digest(proof: &PaymentProof) -> alloy::primitives::B256 {
    claims(proof).eip712_signing_hash(&proof_domain())
}

#[cfg(test)]
mod tests {
    use alloy::primitives::{B256, Bytes};
    use tollgate_protocol::Amount;

    use super::*;

    #[test]
    fn sign_then_recover_and_tamper() {
        let key = crate::accounts::dev_accounts(1)[0].signer();
        let mut p = PaymentProof {
            version: 1,
            network: "base-sepolia".parse().unwrap(),
            chain_id: 84532,
            token: Address::repeat_byte(1),
            payer: Address::repeat_byte(2),
            pay_to: Address::repeat_byte(3),
            amount: Amount::from_units(500_000),
            fee: Amount::from_units(1_000),
            memo: B256::repeat_byte(4),
            tx_hash: B256::repeat_byte(5),
            block: 9,
            issued_at: 100,
            expiry: 700,
            signer: Address::ZERO,
            signature: Bytes::new(),
        };
        sign(&key, &mut p).unwrap();
        assert_eq!(p.signer, key.address());
        assert_eq!(recover(&p).unwrap(), key.address());
        let mut tampered = p.clone();
        tampered.amount = Amount::from_units(500_001);
        assert_ne!(recover(&tampered).unwrap(), key.address());
        tampered = p.clone();
        tampered.signature = Bytes::from_static(&[1, 2, 3]);
        assert!(recover(&tampered).is_err());
    }
}
