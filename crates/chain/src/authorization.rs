//! EIP-712 typed data for every intent the contracts accept a signature for, and the signing and
//! verification of those intents.
//!
//! - The token (USDC-compatible): EIP-3009 [`TransferWithAuthorization`],
//!   [`ReceiveWithAuthorization`] and [`CancelAuthorization`], and EIP-2612 [`Permit`], under
//!   [`token_domain`] (the token's name and version, e.g. "USD Coin" / "2").
//! - The payment router: a [`RouterPayment`] is a `ReceiveWithAuthorization` to the router whose
//!   nonce is [`router_nonce`]`(payTo, memo, fee)`, so the signature binds payee, memo and fee.
//! - Subscriptions: [`Subscribe`] and [`Action`] (pause, resume, cancel, raise allowance) under
//!   [`subscriptions_domain`].
//!
//! Signatures are produced in the form the contracts verify: low-`s`, `v` 27 or 28, as 65 bytes
//! `r ‖ s ‖ v` ([`sign`]) for the `bytes signature` overloads, or as [`Vrs`] ([`sign_vrs`]) for
//! the `(v, r, s)` ones. [`recover`] applies the contracts' rules (exactly 65 bytes, `v` 27/28,
//! low `s`), so a signature it accepts is one the contracts accept from the recovered signer.
//!
//! ```
//! use tollgate_chain::{
//!     Address, B256, U256,
//!     accounts::dev_accounts,
//!     authorization::{TransferWithAuthorization, recover, sign, token_domain},
//! };
//!
//! let payer = dev_accounts(1)[0].signer();
//! let domain = token_domain("USD Coin", "2", 8453, Address::repeat_byte(0x11));
//! let authorization = TransferWithAuthorization {
//!     from: payer.address(),
//!     to: Address::repeat_byte(0x22),
//!     value: U256::from(1_000_000u64),
//!     validAfter: U256::ZERO,
//!     validBefore: U256::from(u64::MAX),
//!     nonce: B256::repeat_byte(0x33),
//! };
//! let signature = sign(&payer, &authorization, &domain)?;
//! assert_eq!(signature.len(), 65);
//! assert_eq!(recover(&authorization, &domain, &signature)?, payer.address());
//! # Ok::<_, tollgate_chain::Error>(())
//! ```

use std::borrow::Cow;

use alloy::{
    primitives::{Address, B256, Bytes, Signature, U256, keccak256},
    signers::SignerSync,
    sol,
    sol_types::{Eip712Domain, SolStruct, SolValue},
};

use crate::{Error, Result};

/// The EIP-712 domain name of the subscriptions contract.
pub const SUBSCRIPTIONS_DOMAIN_NAME: &str = "Tollgate Subscriptions";
/// The EIP-712 domain version of the subscriptions contract.
pub const SUBSCRIPTIONS_DOMAIN_VERSION: &str = "1";

/// secp256k1n / 2: ECDSA signatures with a larger `s` are malleable and rejected (EIP-2).
const HALF_CURVE_ORDER: U256 = U256::from_be_slice(&alloy::hex!(
    "7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0"
));

sol! {
    /// EIP-3009: `from` authorizes anyone to move `value` to `to` within the validity window.
    #[derive(Debug, PartialEq, Eq)]
    struct TransferWithAuthorization {
        /// The payer and signer.
        address from;
        /// The payee.
        address to;
        /// The amount, in token units.
        uint256 value;
        /// Valid strictly after this timestamp.
        uint256 validAfter;
        /// Valid strictly before this timestamp.
        uint256 validBefore;
        /// A unique nonce chosen by the signer.
        bytes32 nonce;
    }

    /// EIP-3009: `from` authorizes `to` (and only `to`, as caller) to pull `value`.
    #[derive(Debug, PartialEq, Eq)]
    struct ReceiveWithAuthorization {
        /// The payer and signer.
        address from;
        /// The payee, which must submit it.
        address to;
        /// The amount, in token units.
        uint256 value;
        /// Valid strictly after this timestamp.
        uint256 validAfter;
        /// Valid strictly before this timestamp.
        uint256 validBefore;
        /// A unique nonce chosen by the signer.
        bytes32 nonce;
    }

    /// EIP-3009: `authorizer` cancels its unused authorization `nonce`.
    #[derive(Debug, PartialEq, Eq)]
    struct CancelAuthorization {
        /// The signer of the authorization to cancel.
        address authorizer;
        /// The nonce to cancel.
        bytes32 nonce;
    }

    /// EIP-2612: `owner` sets `spender`'s allowance to `value`.
    #[derive(Debug, PartialEq, Eq)]
    struct Permit {
        /// The token holder and signer.
        address owner;
        /// The spender.
        address spender;
        /// The new allowance.
        uint256 value;
        /// The holder's current permit nonce (`Token.nonces(owner)`).
        uint256 nonce;
        /// The last timestamp at which the permit is valid.
        uint256 deadline;
    }

    /// `subscriber` subscribes to `planId` with an overage cap of `maxOverage` per cycle.
    #[derive(Debug, PartialEq, Eq)]
    struct Subscribe {
        /// The plan.
        bytes32 planId;
        /// The subscriber and signer.
        address subscriber;
        /// The cap on overage charges per cycle.
        uint256 maxOverage;
        /// The subscriber's current nonce (`Subscriptions.nonces(subscriber)`).
        uint256 nonce;
        /// The last timestamp at which the signature is valid.
        uint256 deadline;
    }

    /// The subscriber of subscription `id` performs `action` (see [`ActionKind`]).
    #[derive(Debug, PartialEq, Eq)]
    struct Action {
        /// The subscription.
        bytes32 id;
        /// 1 pause, 2 resume, 3 cancel, 4 raise allowance.
        uint8 action;
        /// The new overage cap for a raise, otherwise 0.
        uint256 value;
        /// The subscriber's current nonce (`Subscriptions.nonces(subscriber)`).
        uint256 nonce;
        /// The last timestamp at which the signature is valid.
        uint256 deadline;
    }
}

/// What an [`Action`] signature authorizes, with the contract's codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ActionKind {
    /// `pauseWithSig`.
    Pause = 1,
    /// `resumeWithSig`.
    Resume = 2,
    /// `cancelWithSig`.
    Cancel = 3,
    /// `raiseAllowanceWithSig` (the value is the new cap).
    RaiseAllowance = 4,
}

impl Action {
    /// The `Action` for `kind` on subscription `id`; `value` is the new cap for
    /// [`ActionKind::RaiseAllowance`] and must be 0 otherwise (the contract signs 0).
    pub fn new(id: B256, kind: ActionKind, value: U256, nonce: U256, deadline: U256) -> Self {
        Self {
            id,
            action: kind as u8,
            value,
            nonce,
            deadline,
        }
    }
}

/// The EIP-712 domain of a token: its name and version (`Token.name()`, `Token.version()`), the
/// chain id and the token's address.
pub fn token_domain(
    name: impl Into<Cow<'static, str>>,
    version: impl Into<Cow<'static, str>>,
    chain_id: u64,
    token: Address,
) -> Eip712Domain {
    Eip712Domain::new(
        Some(name.into()),
        Some(version.into()),
        Some(U256::from(chain_id)),
        Some(token),
        None,
    )
}

/// The EIP-712 domain of the subscriptions contract at `subscriptions` on `chain_id`.
pub fn subscriptions_domain(chain_id: u64, subscriptions: Address) -> Eip712Domain {
    token_domain(
        SUBSCRIPTIONS_DOMAIN_NAME,
        SUBSCRIPTIONS_DOMAIN_VERSION,
        chain_id,
        subscriptions,
    )
}

/// The EIP-3009 nonce of a router payment: `keccak256(abi.encode(payTo, memo, fee))`, equal to
/// `PaymentRouter.paymentNonce(payTo, memo, fee)`.
pub fn router_nonce(pay_to: Address, memo: B256, fee: U256) -> B256 {
    keccak256((pay_to, memo, fee).abi_encode())
}

/// A payment through the router: what the payer signs is [`RouterPayment::authorization`], and
/// `PaymentRouter.settle` takes these fields plus the signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterPayment {
    /// The payer and signer.
    pub from: Address,
    /// The payee, who receives `amount - fee`.
    pub pay_to: Address,
    /// The total amount pulled from the payer.
    pub amount: U256,
    /// The router's fee, at most `amount`.
    pub fee: U256,
    /// The payment memo (bound into the nonce).
    pub memo: B256,
    /// Valid strictly after this timestamp.
    pub valid_after: U256,
    /// Valid strictly before this timestamp.
    pub valid_before: U256,
}

impl RouterPayment {
    /// The `ReceiveWithAuthorization` to `router` the payer signs (under the token's domain).
    pub fn authorization(&self, router: Address) -> ReceiveWithAuthorization {
        ReceiveWithAuthorization {
            from: self.from,
            to: router,
            value: self.amount,
            validAfter: self.valid_after,
            validBefore: self.valid_before,
            nonce: router_nonce(self.pay_to, self.memo, self.fee),
        }
    }

    /// The router's `settle` call for this payment with the payer's signature.
    pub fn settle_call(&self, signature: Bytes) -> crate::contracts::PaymentRouter::settleCall {
        crate::contracts::PaymentRouter::settleCall {
            from: self.from,
            payTo: self.pay_to,
            amount: self.amount,
            fee: self.fee,
            memo: self.memo,
            validAfter: self.valid_after,
            validBefore: self.valid_before,
            signature,
        }
    }
}

/// An ECDSA signature split as the `(uint8 v, bytes32 r, bytes32 s)` overloads take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Vrs {
    /// Recovery id, 27 or 28.
    pub v: u8,
    /// `r`.
    pub r: B256,
    /// `s`.
    pub s: B256,
}

impl Vrs {
    /// Splits a signature.
    pub fn from_signature(signature: &Signature) -> Self {
        Self {
            v: signature.v_byte(),
            r: signature.r().into(),
            s: signature.s().into(),
        }
    }

    /// Splits a 65-byte `r ‖ s ‖ v` signature, checked as [`parse_signature`] does.
    pub fn from_bytes(signature: &[u8]) -> Result<Self> {
        parse_signature(signature).map(|s| Self::from_signature(&s))
    }

    /// The 65-byte `r ‖ s ‖ v` form.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(65);
        out.extend_from_slice(self.r.as_slice());
        out.extend_from_slice(self.s.as_slice());
        out.push(self.v);
        out.into()
    }
}

/// Signs `typed` under `domain`, returning the canonical (low-`s`) signature.
pub fn sign_typed<T: SolStruct>(
    signer: &impl SignerSync,
    typed: &T,
    domain: &Eip712Domain,
) -> Result<Signature> {
    let hash = typed.eip712_signing_hash(domain);
    let signature = signer.sign_hash_sync(&hash)?;
    Ok(signature.normalized_s())
}

/// Signs `typed` under `domain` as the 65-byte `r ‖ s ‖ v` signature (v 27/28) the contracts'
/// `bytes signature` overloads take.
pub fn sign<T: SolStruct>(
    signer: &impl SignerSync,
    typed: &T,
    domain: &Eip712Domain,
) -> Result<Bytes> {
    sign_typed(signer, typed, domain).map(|s| Bytes::from(s.as_bytes()))
}

/// Signs `typed` under `domain` as the `(v, r, s)` the contracts' split-signature overloads take.
pub fn sign_vrs<T: SolStruct>(
    signer: &impl SignerSync,
    typed: &T,
    domain: &Eip712Domain,
) -> Result<Vrs> {
    sign_typed(signer, typed, domain).map(|s| Vrs::from_signature(&s))
}

/// Parses a 65-byte `r ‖ s ‖ v` signature under the contracts' rules: exactly 65 bytes, `v` 27 or
/// 28, `s` in the lower half of the curve order; anything else is [`Error::InvalidInput`].
pub fn parse_signature(signature: &[u8]) -> Result<Signature> {
    let bytes: &[u8; 65] = signature.try_into().map_err(|_| {
        Error::InvalidInput(format!(
            "signature of {} bytes, expected 65",
            signature.len()
        ))
    })?;
    let v = bytes[64];
    if v != 27 && v != 28 {
        return Err(Error::InvalidInput(format!(
            "signature v of {v}, expected 27 or 28"
        )));
    }
    let signature = Signature::from_bytes_and_parity(&bytes[..64], v == 28);
    if signature.s() > HALF_CURVE_ORDER {
        return Err(Error::InvalidInput(
            "signature s is in the upper half of the curve order (malleable)".into(),
        ));
    }
    if signature.r().is_zero() || signature.s().is_zero() {
        return Err(Error::InvalidInput("signature r or s is zero".into()));
    }
    Ok(signature)
}

/// The address that signed `typed` under `domain` with the 65-byte `signature`, which must pass
/// [`parse_signature`]. The caller compares it with the expected signer (e.g. the authorization's
/// `from`). Accounts with code (EIP-1271) cannot be verified this way.
pub fn recover<T: SolStruct>(
    typed: &T,
    domain: &Eip712Domain,
    signature: &[u8],
) -> Result<Address> {
    let parsed = parse_signature(signature)?;
    parsed
        .recover_address_from_prehash(&typed.eip712_signing_hash(domain))
        .map_err(|e| Error::InvalidInput(format!("signature recovery: {e}")))
}

#[cfg(test)]
mod tests {
    use alloy::signers::local::Secp256k1Signer;

    use super::*;

    fn signer(byte: u8) -> Secp256k1Signer {
        Secp256k1Signer::from_bytes(&B256::repeat_byte(byte)).unwrap()
    }

    fn transfer(from: Address) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from,
            to: Address::repeat_byte(0xb0),
            value: U256::from(1_500_000u64),
            validAfter: U256::ZERO,
            validBefore: U256::from(2_000_000_000u64),
            nonce: B256::repeat_byte(0x42),
        }
    }

    fn domain(chain_id: u64) -> Eip712Domain {
        token_domain("USD Coin", "2", chain_id, Address::repeat_byte(0x70))
    }

    #[test]
    fn type_strings_match_the_contracts() {
        assert_eq!(
            TransferWithAuthorization::eip712_encode_type(),
            "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
        );
        assert_eq!(
            ReceiveWithAuthorization::eip712_encode_type(),
            "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
        );
        assert_eq!(
            CancelAuthorization::eip712_encode_type(),
            "CancelAuthorization(address authorizer,bytes32 nonce)"
        );
        assert_eq!(
            Permit::eip712_encode_type(),
            "Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)"
        );
        assert_eq!(
            Subscribe::eip712_encode_type(),
            "Subscribe(bytes32 planId,address subscriber,uint256 maxOverage,uint256 nonce,uint256 deadline)"
        );
        assert_eq!(
            Action::eip712_encode_type(),
            "Action(bytes32 id,uint8 action,uint256 value,uint256 nonce,uint256 deadline)"
        );
    }

    #[test]
    fn sign_then_recover_round_trips() {
        let payer = signer(1);
        let typed = transfer(payer.address());
        let signature = sign(&payer, &typed, &domain(8453)).unwrap();
        assert_eq!(signature.len(), 65);
        assert!(matches!(signature[64], 27 | 28));
        assert_eq!(
            recover(&typed, &domain(8453), &signature).unwrap(),
            payer.address()
        );

        let vrs = sign_vrs(&payer, &typed, &domain(8453)).unwrap();
        assert_eq!(
            vrs.to_bytes(),
            signature,
            "both forms carry the same (deterministic) signature"
        );
        assert_eq!(Vrs::from_bytes(&signature).unwrap(), vrs);
    }

    #[test]
    fn a_changed_message_or_domain_recovers_someone_else() {
        let payer = signer(2);
        let typed = transfer(payer.address());
        let signature = sign(&payer, &typed, &domain(8453)).unwrap();
        let other_chain = recover(&typed, &domain(84532), &signature).unwrap();
        assert_ne!(other_chain, payer.address());
        let other_token = token_domain("USD Coin", "2", 8453, Address::repeat_byte(0x71));
        assert_ne!(
            recover(&typed, &other_token, &signature).unwrap(),
            payer.address()
        );
        let more = TransferWithAuthorization {
            value: typed.value + U256::from(1),
            ..typed
        };
        assert_ne!(
            recover(&more, &domain(8453), &signature).unwrap(),
            payer.address()
        );
    }

    #[test]
    fn subscription_intents_round_trip() {
        let subscriber = signer(3);
        let domain = subscriptions_domain(31337, Address::repeat_byte(0x55));
        let subscribe = Subscribe {
            planId: B256::repeat_byte(1),
            subscriber: subscriber.address(),
            maxOverage: U256::from(10),
            nonce: U256::ZERO,
            deadline: U256::from(u64::MAX),
        };
        let sig = sign(&subscriber, &subscribe, &domain).unwrap();
        assert_eq!(
            recover(&subscribe, &domain, &sig).unwrap(),
            subscriber.address()
        );
        let action = Action::new(
            B256::repeat_byte(2),
            ActionKind::RaiseAllowance,
            U256::from(20),
            U256::from(1),
            U256::MAX,
        );
        assert_eq!(action.action, 4);
        let sig = sign(&subscriber, &action, &domain).unwrap();
        assert_eq!(
            recover(&action, &domain, &sig).unwrap(),
            subscriber.address()
        );
        let pause = Action {
            action: ActionKind::Pause as u8,
            ..action
        };
        assert_ne!(
            recover(&pause, &domain, &sig).unwrap(),
            subscriber.address()
        );
    }

    #[test]
    fn malformed_signatures_are_errors_not_panics() {
        let payer = signer(4);
        let typed = transfer(payer.address());
        let good = sign(&payer, &typed, &domain(1)).unwrap();
        let check = |bytes: &[u8]| match recover(&typed, &domain(1), bytes) {
            Err(Error::InvalidInput(_)) => {}
            other => panic!("expected InvalidInput, got {other:?}"),
        };
        check(&[]);
        check(&good[..64]);
        check(&[good.as_ref(), &[0]].concat());
        for v in [0u8, 1, 26, 29, 255] {
            let mut bad = good.to_vec();
            bad[64] = v;
            check(&bad);
        }
        // The malleated twin (n - s, flipped v) is the same point but must be refused.
        let sig = parse_signature(&good).unwrap();
        let n = U256::from_be_slice(&alloy::hex!(
            "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"
        ));
        let high = Signature::new(sig.r(), n - sig.s(), !sig.v());
        check(&high.as_bytes());
        let mut zero = [0u8; 65];
        zero[64] = 27;
        check(&zero);
        assert!(Vrs::from_bytes(&good[..10]).is_err());
    }

    #[test]
    fn router_nonce_is_abi_encode_of_pay_to_memo_fee() {
        let pay_to = Address::repeat_byte(0xaa);
        let memo = B256::repeat_byte(0xbb);
        let fee = U256::from(250u64);
        let mut words = [0u8; 96];
        words[12..32].copy_from_slice(pay_to.as_slice());
        words[32..64].copy_from_slice(memo.as_slice());
        words[64..96].copy_from_slice(&fee.to_be_bytes::<32>());
        assert_eq!(router_nonce(pay_to, memo, fee), keccak256(words));
        assert_ne!(
            router_nonce(pay_to, memo, fee + U256::from(1)),
            router_nonce(pay_to, memo, fee)
        );
    }
}
