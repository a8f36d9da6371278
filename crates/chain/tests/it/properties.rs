//! Property tests of the payment proof's EIP-712 encoding ([`tollgate_chain::proof`]): for any
//! field values, our digest is the one alloy computes from its own declaration of the struct and
//! the one written out by hand from EIP-712; our signatures recover with alloy's recovery; alloy's
//! signatures (k256, another secp256k1 implementation than the facilitator's) verify with ours;
//! and any change to a signed field recovers another address.

use alloy::{
    primitives::{Address, B256, Bytes, Signature, U256, keccak256},
    signers::{
        SignerSync,
        local::{PrivateKeySigner, Secp256k1Signer},
    },
    sol_types::{Eip712Domain, SolStruct, eip712_domain},
};
use proptest::prelude::*;
use tollgate_chain::proof;
use tollgate_protocol::{Amount, PaymentProof};

/// The proof's typed data as the spec states it, declared here apart from the crate's.
mod spec {
    alloy::sol! {
        #[derive(Debug)]
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
}

/// The type string, written out.
const TYPE: &str = "ProofClaims(string network,uint256 chainId,address token,address payer,\
                    address payTo,uint256 amount,uint256 fee,bytes32 memo,bytes32 txHash,\
                    uint64 block,uint64 issuedAt,uint64 expiry)";

fn spec_claims(p: &PaymentProof) -> spec::ProofClaims {
    spec::ProofClaims {
        network: p.network.to_string(),
        chainId: U256::from(p.chain_id),
        token: p.token,
        payer: p.payer,
        payTo: p.pay_to,
        amount: p.amount.get(),
        fee: p.fee.get(),
        memo: p.memo,
        txHash: p.tx_hash,
        block: p.block,
        issuedAt: p.issued_at,
        expiry: p.expiry,
    }
}

/// The spec's domain, built by alloy's macro: name and version, nothing else.
fn spec_domain() -> Eip712Domain {
    eip712_domain! {
        name: "Tollgate Payment Proof",
        version: "1",
    }
}

/// alloy's digest of the spec's struct under the spec's domain.
fn alloy_digest(p: &PaymentProof) -> B256 {
    spec_claims(p).eip712_signing_hash(&spec_domain())
}

/// EIP-712 by hand: `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct(claims))`.
fn hand_digest(p: &PaymentProof) -> B256 {
    fn word_u64(v: u64) -> [u8; 32] {
        U256::from(v).to_be_bytes()
    }
    fn word_address(a: Address) -> [u8; 32] {
        let mut w = [0u8; 32];
        w[12..].copy_from_slice(a.as_slice());
        w
    }
    let mut domain = Vec::new();
    domain.extend_from_slice(keccak256("EIP712Domain(string name,string version)").as_slice());
    domain.extend_from_slice(keccak256("Tollgate Payment Proof").as_slice());
    domain.extend_from_slice(keccak256("1").as_slice());
    let mut data = Vec::new();
    data.extend_from_slice(keccak256(TYPE).as_slice());
    data.extend_from_slice(keccak256(p.network.as_bytes()).as_slice());
    data.extend_from_slice(&word_u64(p.chain_id));
    data.extend_from_slice(&word_address(p.token));
    data.extend_from_slice(&word_address(p.payer));
    data.extend_from_slice(&word_address(p.pay_to));
    data.extend_from_slice(&p.amount.get().to_be_bytes::<32>());
    data.extend_from_slice(&p.fee.get().to_be_bytes::<32>());
    data.extend_from_slice(p.memo.as_slice());
    data.extend_from_slice(p.tx_hash.as_slice());
    data.extend_from_slice(&word_u64(p.block));
    data.extend_from_slice(&word_u64(p.issued_at));
    data.extend_from_slice(&word_u64(p.expiry));
    let mut msg = vec![0x19, 0x01];
    msg.extend_from_slice(keccak256(&domain).as_slice());
    msg.extend_from_slice(keccak256(&data).as_slice());
    keccak256(&msg)
}

fn any_u256() -> impl Strategy<Value = U256> {
    prop_oneof![
        any::<[u64; 4]>().prop_map(U256::from_limbs),
        any::<u64>().prop_map(U256::from),
        Just(U256::ZERO),
        Just(U256::MAX),
    ]
}

fn any_b256() -> impl Strategy<Value = B256> {
    any::<[u8; 32]>().prop_map(B256::from)
}

fn any_address() -> impl Strategy<Value = Address> {
    any::<[u8; 20]>().prop_map(Address::from)
}

fn any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![any::<u64>(), Just(0), Just(u64::MAX)]
}

fn any_network() -> impl Strategy<Value = tollgate_protocol::Network> {
    prop_oneof![
        prop::sample::select(&["base", "base-sepolia", "base-mainnet", "eip155:84532"][..])
            .prop_map(str::to_owned),
        "[a-z0-9][a-z0-9-]{0,38}[a-z0-9]",
        "eip155:[1-9][0-9]{0,15}",
    ]
    .prop_map(|s| s.parse().unwrap())
}

/// An unsigned proof with arbitrary fields.
fn any_proof() -> impl Strategy<Value = PaymentProof> {
    (
        (any_network(), any_u64(), any_address(), any_address()),
        (any_address(), any_u256(), any_u256(), any_b256()),
        (any_b256(), any_u64(), any_u64(), any_u64()),
    )
        .prop_map(
            |(
                (network, chain_id, token, payer),
                (pay_to, amount, fee, memo),
                (tx_hash, block, issued_at, expiry),
            )| PaymentProof {
                version: 1,
                network,
                chain_id,
                token,
                payer,
                pay_to,
                amount: Amount(amount),
                fee: Amount(fee),
                memo,
                tx_hash,
                block,
                issued_at,
                expiry,
                signer: Address::ZERO,
                signature: Bytes::new(),
            },
        )
}

/// A valid secp256k1 private key.
fn any_key() -> impl Strategy<Value = B256> {
    any::<[u8; 32]>()
        .prop_map(B256::from)
        .prop_filter("a valid secp256k1 scalar", |k| {
            PrivateKeySigner::from_bytes(k).is_ok()
        })
}

/// One signed field of a proof, replaced.
#[derive(Clone, Debug)]
enum Change {
    Network(tollgate_protocol::Network),
    ChainId(u64),
    Token(Address),
    Payer(Address),
    PayTo(Address),
    Amount(U256),
    Fee(U256),
    Memo(B256),
    TxHash(B256),
    Block(u64),
    IssuedAt(u64),
    Expiry(u64),
}

fn any_change() -> impl Strategy<Value = Change> {
    prop_oneof![
        any_network().prop_map(Change::Network),
        any_u64().prop_map(Change::ChainId),
        any_address().prop_map(Change::Token),
        any_address().prop_map(Change::Payer),
        any_address().prop_map(Change::PayTo),
        any_u256().prop_map(Change::Amount),
        any_u256().prop_map(Change::Fee),
        any_b256().prop_map(Change::Memo),
        any_b256().prop_map(Change::TxHash),
        any_u64().prop_map(Change::Block),
        any_u64().prop_map(Change::IssuedAt),
        any_u64().prop_map(Change::Expiry),
    ]
}

/// `p` with `change` applied; `None` when the value is the one it had.
fn changed(p: &PaymentProof, change: Change) -> Option<PaymentProof> {
    let mut t = p.clone();
    match change {
        Change::Network(v) => t.network = v,
        Change::ChainId(v) => t.chain_id = v,
        Change::Token(v) => t.token = v,
        Change::Payer(v) => t.payer = v,
        Change::PayTo(v) => t.pay_to = v,
        Change::Amount(v) => t.amount = Amount(v),
        Change::Fee(v) => t.fee = Amount(v),
        Change::Memo(v) => t.memo = v,
        Change::TxHash(v) => t.tx_hash = v,
        Change::Block(v) => t.block = v,
        Change::IssuedAt(v) => t.issued_at = v,
        Change::Expiry(v) => t.expiry = v,
    }
    (t != *p).then_some(t)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Our digest is alloy's, from the spec's declaration, and EIP-712 written out by hand; the
    /// type string is the spec's.
    #[test]
    fn digest_is_eip712(p in any_proof()) {
        let ours = proof::digest(&p);
        prop_assert_eq!(ours, alloy_digest(&p));
        prop_assert_eq!(ours, hand_digest(&p));
        prop_assert_eq!(proof::claims(&p).eip712_type_hash(), keccak256(TYPE));
        prop_assert_eq!(
            proof::proof_domain().separator(),
            spec_domain().separator()
        );
    }

    /// A proof signed by our code: 65 bytes `r ‖ s ‖ v` with `v` 27/28 and a low `s`, and alloy's
    /// recovery over alloy's digest gives the signer.
    #[test]
    fn our_signature_recovers_with_alloy(p in any_proof(), key in any_key()) {
        let signer = Secp256k1Signer::from_bytes(&key).unwrap();
        let mut p = p;
        proof::sign(&signer, &mut p).unwrap();
        prop_assert_eq!(p.signer, signer.address());
        prop_assert_eq!(p.signature.len(), 65);
        prop_assert!(matches!(p.signature[64], 27 | 28));
        let parsed = Signature::from_raw(&p.signature).unwrap();
        prop_assert!(parsed.normalize_s().is_none(), "high s");
        prop_assert_eq!(
            parsed.recover_address_from_prehash(&alloy_digest(&p)).unwrap(),
            signer.address()
        );
        prop_assert_eq!(proof::recover(&p).unwrap(), signer.address());
        // The same key in alloy's k256 signer is the same address.
        prop_assert_eq!(PrivateKeySigner::from_bytes(&key).unwrap().address(), signer.address());
    }

    /// A signature made by alloy (k256, over the spec's typed data) verifies with ours.
    #[test]
    fn alloy_signature_verifies_with_ours(p in any_proof(), key in any_key()) {
        let signer = PrivateKeySigner::from_bytes(&key).unwrap();
        let typed = signer.sign_typed_data_sync(&spec_claims(&p), &spec_domain()).unwrap();
        let by_hash = signer.sign_hash_sync(&alloy_digest(&p)).unwrap();
        for sig in [typed, by_hash] {
            let mut signed = p.clone();
            signed.signer = signer.address();
            signed.signature = Bytes::from(sig.as_bytes());
            prop_assert_eq!(proof::recover(&signed).unwrap(), signer.address());
        }
    }

    /// Any signed field changed after signing: the signature recovers another address (or none).
    #[test]
    fn any_change_breaks_the_signature(
        p in any_proof(),
        key in any_key(),
        change in any_change(),
    ) {
        let other = changed(&p, change);
        prop_assume!(other.is_some());
        let signer = Secp256k1Signer::from_bytes(&key).unwrap();
        let mut p = p;
        proof::sign(&signer, &mut p).unwrap();
        let mut tampered = other.unwrap();
        tampered.signer = p.signer;
        tampered.signature = p.signature.clone();
        prop_assert_ne!(proof::digest(&tampered), proof::digest(&p));
        let recovered = proof::recover(&tampered).ok();
        prop_assert_ne!(recovered, Some(signer.address()));
    }
}
