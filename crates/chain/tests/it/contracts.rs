//! The token's and the payment router's behaviour, every case on every backend (the embedded
//! devnet in process, anvil, and the devnet behind its JSON-RPC server), with the signatures made
//! by [`tollgate_chain::authorization`]. Also the helpers the subscription cases share.

use alloy::{
    primitives::{Address, B256, Bytes, U256, keccak256},
    signers::local::Secp256k1Signer,
    sol_types::{Eip712Domain, SolCall, SolError, SolEvent, SolStruct},
};
use tollgate_chain::{
    Error, Receipt, Revert, TxRequest, WaitOptions,
    authorization::{
        CancelAuthorization, Permit, ReceiveWithAuthorization, RouterPayment,
        TransferWithAuthorization, Vrs, router_nonce, sign, sign_vrs, token_domain,
    },
    contracts::{PaymentRouter, Token, read},
};
use tollgate_devnet::DEV_TOKENS;
use tollgate_testkit::Fixture;

mod authorizations;
mod permit_and_mint;
mod router;

use authorizations::{
    bad_signatures_are_refused, cancel_authorization_then_use,
    receive_with_authorization_only_by_payee, replayed_authorization_is_refused,
    token_metadata_and_type_hashes, transfer_with_authorization_bytes,
    transfer_with_authorization_vrs, under_funded_payer, validity_window,
};
use permit_and_mint::{only_the_owner_mints, permit_sets_allowance};
use router::{
    router_authorization_cannot_be_received_by_others, settle_fee_exceeds_amount,
    settle_pays_payee_and_fee, settle_replay_is_refused,
    settle_signature_binds_pay_to_memo_and_fee,
    simulate_transfers_answers_each_as_alone_and_changes_nothing,
};

/// Instantiates each `async fn case(f: &Fixture)` of the calling module once per backend, as
/// `<backend>::<case>` tests, each on a fresh fixture.
macro_rules! on_every_backend {
    ($($case:ident),+ $(,)?) => {
        mod devnet {
            $(
                #[tokio::test]
                async fn $case() {
                    let f = ::tollgate_testkit::Fixture::new(::tollgate_testkit::Backend::Devnet)
                        .await
                        .expect("devnet fixture");
                    Box::pin(super::$case(&f)).await;
                }
            )+
        }
        mod anvil {
            $(
                #[tokio::test]
                async fn $case() {
                    let f = ::tollgate_testkit::Fixture::new(::tollgate_testkit::Backend::Anvil)
                        .await
                        .expect("anvil fixture (run scripts/install-tools once)");
                    Box::pin(super::$case(&f)).await;
                }
            )+
        }
        mod devnet_rpc {
            $(
                #[tokio::test]
                async fn $case() {
                    let f = ::tollgate_testkit::Fixture::new(::tollgate_testkit::Backend::DevnetRpc)
                        .await
                        .expect("devnet JSON-RPC fixture");
                    Box::pin(super::$case(&f)).await;
                }
            )+
        }
    };
}
pub(crate) use on_every_backend;

// ------------------------------------------------------------------------------------- helpers

/// Sends `call` to `to` from `from` and waits; panics unless it is mined successfully.
pub(crate) async fn exec<C: SolCall>(f: &Fixture, from: Address, to: Address, call: &C) -> Receipt {
    let tx = TxRequest::call(from, to, call.abi_encode());
    match f.chain.send_and_wait(tx, WaitOptions::default()).await {
        Ok(confirmation) => {
            let receipt = confirmation
                .receipt()
                .cloned()
                .unwrap_or_else(|| panic!("{} not mined in time", C::SIGNATURE));
            assert!(receipt.success, "{} failed on-chain", C::SIGNATURE);
            receipt
        }
        Err(e) => panic!("{} from {from} on {:?}: {e}", C::SIGNATURE, f.backend),
    }
}

/// Expects `call` from `from` to revert: both the simulation (`call`) and the transaction (refused
/// by `send`'s pre-flight estimate) must report it, with the same error. Returns the decoded error.
pub(crate) async fn reverts<C: SolCall>(
    f: &Fixture,
    from: Address,
    to: Address,
    call: &C,
) -> Revert {
    let data: Bytes = call.abi_encode().into();
    let simulated = match f.chain.call(Some(from), to, data.clone()).await {
        Err(Error::Revert(r)) => r,
        other => panic!(
            "{} simulated on {:?}: expected a revert, got {other:?}",
            C::SIGNATURE,
            f.backend
        ),
    };
    let sent = match f
        .chain
        .send_and_wait(TxRequest::call(from, to, data), WaitOptions::default())
        .await
    {
        Err(Error::Revert(r)) => r,
        other => panic!(
            "{} sent on {:?}: expected a revert, got {other:?}",
            C::SIGNATURE,
            f.backend
        ),
    };
    assert_eq!(
        simulated.name(),
        sent.name(),
        "{} on {:?}: call and send disagree",
        C::SIGNATURE,
        f.backend
    );
    sent
}

/// The events of type `E` that `emitter` logged in `receipt`, in order.
pub(crate) fn events<E: SolEvent>(receipt: &Receipt, emitter: Address) -> Vec<E> {
    receipt
        .logs
        .iter()
        .filter(|l| l.address == emitter && l.topics().first() == Some(&E::SIGNATURE_HASH))
        .map(|l| E::decode_log(l).expect("event decodes").data)
        .collect()
}

/// The token balance of `account`.
pub(crate) async fn balance(f: &Fixture, account: Address) -> U256 {
    read(
        f.chain.as_ref(),
        f.deployment.token,
        &Token::balanceOfCall { account },
    )
    .await
    .expect("balanceOf")
}

/// The chain's clock (latest block timestamp).
pub(crate) async fn now(f: &Fixture) -> u64 {
    f.chain.timestamp().await.expect("timestamp")
}

/// Dev account `i`'s address.
pub(crate) fn addr(f: &Fixture, i: usize) -> Address {
    f.accounts[i].address
}

/// Dev account `i`'s signer.
pub(crate) fn key(f: &Fixture, i: usize) -> Secp256k1Signer {
    f.accounts[i].signer()
}

/// A key no backend knows, holding nothing.
pub(crate) fn stranger_key(seed: u8) -> Secp256k1Signer {
    Secp256k1Signer::from_bytes(&keccak256(
        [b"tollgate stranger".as_slice(), &[seed]].concat(),
    ))
    .expect("valid key")
}

/// The token's EIP-712 domain on this chain.
pub(crate) fn usdc_domain(f: &Fixture) -> Eip712Domain {
    token_domain("USD Coin", "2", f.chain.chain_id(), f.deployment.token)
}

pub(crate) fn units(n: u64) -> U256 {
    U256::from(n)
}

/// The malleated twin of a canonical signature: same point, `s' = n - s`, `v` flipped.
fn high_s(vrs: Vrs) -> Vrs {
    const N: U256 = U256::from_be_slice(&alloy::hex!(
        "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"
    ));
    let s = N - U256::from_be_bytes(vrs.s.0);
    Vrs {
        v: if vrs.v == 27 { 28 } else { 27 },
        r: vrs.r,
        s: s.into(),
    }
}

fn transfer_auth(
    from: Address,
    to: Address,
    value: u64,
    valid_after: u64,
    valid_before: u64,
    nonce: u8,
) -> TransferWithAuthorization {
    TransferWithAuthorization {
        from,
        to,
        value: units(value),
        validAfter: U256::from(valid_after),
        validBefore: U256::from(valid_before),
        nonce: B256::repeat_byte(nonce),
    }
}

fn twa_bytes(
    a: &TransferWithAuthorization,
    signature: Bytes,
) -> Token::transferWithAuthorization_0Call {
    Token::transferWithAuthorization_0Call {
        from: a.from,
        to: a.to,
        value: a.value,
        validAfter: a.validAfter,
        validBefore: a.validBefore,
        nonce: a.nonce,
        signature,
    }
}

fn twa_vrs(a: &TransferWithAuthorization, sig: Vrs) -> Token::transferWithAuthorization_1Call {
    Token::transferWithAuthorization_1Call {
        from: a.from,
        to: a.to,
        value: a.value,
        validAfter: a.validAfter,
        validBefore: a.validBefore,
        nonce: a.nonce,
        v: sig.v,
        r: sig.r,
        s: sig.s,
    }
}

fn rwa_bytes(
    a: &ReceiveWithAuthorization,
    signature: Bytes,
) -> Token::receiveWithAuthorization_0Call {
    Token::receiveWithAuthorization_0Call {
        from: a.from,
        to: a.to,
        value: a.value,
        validAfter: a.validAfter,
        validBefore: a.validBefore,
        nonce: a.nonce,
        signature,
    }
}

fn rwa_vrs(a: &ReceiveWithAuthorization, sig: Vrs) -> Token::receiveWithAuthorization_1Call {
    Token::receiveWithAuthorization_1Call {
        from: a.from,
        to: a.to,
        value: a.value,
        validAfter: a.validAfter,
        validBefore: a.validBefore,
        nonce: a.nonce,
        v: sig.v,
        r: sig.r,
        s: sig.s,
    }
}

async fn auth_used(f: &Fixture, authorizer: Address, nonce: B256) -> bool {
    read(
        f.chain.as_ref(),
        f.deployment.token,
        &Token::authorizationStateCall { authorizer, nonce },
    )
    .await
    .expect("authorizationState")
}

/// A window that is open now and for the next day.
async fn open_window(f: &Fixture) -> (u64, u64) {
    let t = now(f).await;
    (0, t + 86_400)
}

on_every_backend!(
    token_metadata_and_type_hashes,
    transfer_with_authorization_vrs,
    transfer_with_authorization_bytes,
    receive_with_authorization_only_by_payee,
    cancel_authorization_then_use,
    replayed_authorization_is_refused,
    validity_window,
    bad_signatures_are_refused,
    under_funded_payer,
    permit_sets_allowance,
    only_the_owner_mints,
    settle_pays_payee_and_fee,
    settle_signature_binds_pay_to_memo_and_fee,
    settle_fee_exceeds_amount,
    settle_replay_is_refused,
    router_authorization_cannot_be_received_by_others,
    simulate_transfers_answers_each_as_alone_and_changes_nothing,
);
