//! Values shared by the unit tests of this crate: a payment proof, and an x402 V1 offer with a
//! payment that meets it.

use alloy::primitives::{Address, B256, Bytes, address};

use crate::{
    Amount, PaymentProof,
    x402::{
        Eip712Extra, ExactEvmAuthorization, ExactEvmPayload, PaymentPayload, PaymentRequirements,
    },
};

/// The unix time at which [`payload`] is fresh.
pub(crate) const NOW: u64 = 1_750_000_000;

/// A version 1 proof of a payment of 0.5 units on `base-sepolia` (not validly signed).
pub(crate) fn proof() -> PaymentProof {
    PaymentProof {
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
        block: 7,
        issued_at: 1_700_000_000,
        expiry: 1_700_000_600,
        signer: Address::repeat_byte(6),
        signature: Bytes::from(vec![9; 65]),
    }
}

/// An `exact` offer of 10 000 units of USDC on `base-sepolia`.
pub(crate) fn requirements() -> PaymentRequirements {
    PaymentRequirements {
        scheme: "exact".into(),
        network: "base-sepolia".parse().unwrap(),
        max_amount_required: Amount::from_units(10_000),
        resource: "https://api.example.com/weather".into(),
        description: String::new(),
        mime_type: String::new(),
        pay_to: address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
        max_timeout_seconds: 60,
        asset: address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
        output_schema: None,
        extra: Some(
            Eip712Extra {
                name: "USDC".into(),
                version: "2".into(),
            }
            .to_value(),
        ),
    }
}

/// A payment of exactly [`requirements`], valid at [`NOW`] (its signature is not checked here).
pub(crate) fn payload() -> PaymentPayload {
    PaymentPayload {
        x402_version: 1,
        scheme: "exact".into(),
        network: "base-sepolia".parse().unwrap(),
        payload: ExactEvmPayload {
            signature: Bytes::from(vec![0x11; 65]),
            authorization: ExactEvmAuthorization {
                from: address!("0x857b06519E91e3A54538791bDbb0E22373e36b66"),
                to: address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
                value: Amount::from_units(10_000),
                valid_after: Amount::from_units(NOW - 600),
                valid_before: Amount::from_units(NOW + 60),
                nonce: B256::repeat_byte(0xab),
            },
        },
    }
}
