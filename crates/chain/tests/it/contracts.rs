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

// ------------------------------------------------------------------------------------- token

async fn token_metadata_and_type_hashes(f: &Fixture) {
    let chain = f.chain.as_ref();
    let token = f.deployment.token;
    assert_eq!(
        read(chain, token, &Token::decimalsCall {}).await.unwrap(),
        6
    );
    assert_eq!(
        read(chain, token, &Token::nameCall {}).await.unwrap(),
        "USD Coin"
    );
    assert_eq!(
        read(chain, token, &Token::versionCall {}).await.unwrap(),
        "2"
    );
    assert_eq!(
        read(chain, token, &Token::symbolCall {}).await.unwrap(),
        "USDC"
    );
    assert_eq!(
        read(chain, token, &Token::ownerCall {}).await.unwrap(),
        addr(f, 0)
    );
    assert_eq!(
        read(chain, token, &Token::totalSupplyCall {})
            .await
            .unwrap(),
        DEV_TOKENS * U256::from(f.accounts.len())
    );
    for a in &f.accounts {
        assert_eq!(balance(f, a.address).await, DEV_TOKENS);
    }
    // Our EIP-712 domain and type hashes are the contract's.
    let domain = usdc_domain(f);
    assert_eq!(
        read(chain, token, &Token::DOMAIN_SEPARATORCall {})
            .await
            .unwrap(),
        domain.separator()
    );
    let d = read(chain, token, &Token::eip712DomainCall {})
        .await
        .unwrap();
    assert_eq!(
        (d.domainName.as_str(), d.domainVersion.as_str()),
        ("USD Coin", "2")
    );
    assert_eq!(
        (d.chainId, d.verifyingContract),
        (U256::from(f.chain.chain_id()), token)
    );
    let hash = |s: std::borrow::Cow<'static, str>| keccak256(s.as_bytes());
    assert_eq!(
        read(
            chain,
            token,
            &Token::TRANSFER_WITH_AUTHORIZATION_TYPEHASHCall {}
        )
        .await
        .unwrap(),
        hash(TransferWithAuthorization::eip712_encode_type())
    );
    assert_eq!(
        read(
            chain,
            token,
            &Token::RECEIVE_WITH_AUTHORIZATION_TYPEHASHCall {}
        )
        .await
        .unwrap(),
        hash(ReceiveWithAuthorization::eip712_encode_type())
    );
    assert_eq!(
        read(chain, token, &Token::CANCEL_AUTHORIZATION_TYPEHASHCall {})
            .await
            .unwrap(),
        hash(CancelAuthorization::eip712_encode_type())
    );
    assert_eq!(
        read(chain, token, &Token::PERMIT_TYPEHASHCall {})
            .await
            .unwrap(),
        hash(Permit::eip712_encode_type())
    );
    assert_eq!(
        read(
            chain,
            f.deployment.router,
            &PaymentRouter::feeRecipientCall {}
        )
        .await
        .unwrap(),
        addr(f, 0)
    );
    assert_eq!(
        read(chain, f.deployment.router, &PaymentRouter::tokenCall {})
            .await
            .unwrap(),
        token
    );
}

async fn transfer_with_authorization_vrs(f: &Fixture) {
    let (payer, payee, relayer) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let (after, before) = open_window(f).await;
    let auth = transfer_auth(payer, payee, 1_250_000, after, before, 1);
    assert!(!auth_used(f, payer, auth.nonce).await);
    let sig = sign_vrs(&key(f, 1), &auth, &usdc_domain(f)).unwrap();
    let receipt = exec(f, relayer, f.deployment.token, &twa_vrs(&auth, sig)).await;

    assert!(auth_used(f, payer, auth.nonce).await);
    assert_eq!(balance(f, payer).await, DEV_TOKENS - units(1_250_000));
    assert_eq!(balance(f, payee).await, DEV_TOKENS + units(1_250_000));
    assert_eq!(
        balance(f, relayer).await,
        DEV_TOKENS,
        "the relayer only pays gas"
    );
    let used = events::<Token::AuthorizationUsed>(&receipt, f.deployment.token);
    assert_eq!(used.len(), 1);
    assert_eq!((used[0].authorizer, used[0].nonce), (payer, auth.nonce));
    let transfers = events::<Token::Transfer>(&receipt, f.deployment.token);
    assert_eq!(transfers.len(), 1);
    assert_eq!(
        (transfers[0].from, transfers[0].to, transfers[0].value),
        (payer, payee, units(1_250_000))
    );
}

async fn transfer_with_authorization_bytes(f: &Fixture) {
    let (payer, payee, relayer) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let (after, before) = open_window(f).await;
    let auth = transfer_auth(payer, payee, 7, after, before, 2);
    let sig = sign(&key(f, 1), &auth, &usdc_domain(f)).unwrap();
    exec(f, relayer, f.deployment.token, &twa_bytes(&auth, sig)).await;
    assert!(auth_used(f, payer, auth.nonce).await);
    assert_eq!(balance(f, payer).await, DEV_TOKENS - units(7));
    assert_eq!(balance(f, payee).await, DEV_TOKENS + units(7));

    // A bytes signature with v 0/1 (y parity) instead of 27/28 is refused.
    let auth = transfer_auth(payer, payee, 7, after, before, 3);
    let mut sig = sign(&key(f, 1), &auth, &usdc_domain(f)).unwrap().to_vec();
    sig[64] -= 27;
    let r = reverts(
        f,
        relayer,
        f.deployment.token,
        &twa_bytes(&auth, sig.into()),
    )
    .await;
    assert_eq!(r, Revert::InvalidSignature);
    // So is a signature of the wrong length.
    let r = reverts(
        f,
        relayer,
        f.deployment.token,
        &twa_bytes(&auth, Bytes::from(vec![1u8; 64])),
    )
    .await;
    assert_eq!(r, Revert::InvalidSignature);
    assert!(!auth_used(f, payer, auth.nonce).await);
}

async fn receive_with_authorization_only_by_payee(f: &Fixture) {
    let (payer, payee, stranger) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let (after, before) = open_window(f).await;
    let domain = usdc_domain(f);
    let auth = ReceiveWithAuthorization {
        from: payer,
        to: payee,
        value: units(500),
        validAfter: U256::from(after),
        validBefore: U256::from(before),
        nonce: B256::repeat_byte(4),
    };
    let sig = sign(&key(f, 1), &auth, &domain).unwrap();
    let r = reverts(
        f,
        stranger,
        f.deployment.token,
        &rwa_bytes(&auth, sig.clone()),
    )
    .await;
    assert_eq!(
        r,
        Revert::CallerMustBePayee {
            caller: stranger,
            payee
        }
    );
    let vrs = sign_vrs(&key(f, 1), &auth, &domain).unwrap();
    let r = reverts(f, stranger, f.deployment.token, &rwa_vrs(&auth, vrs)).await;
    assert_eq!(
        r,
        Revert::CallerMustBePayee {
            caller: stranger,
            payee
        }
    );
    assert!(!auth_used(f, payer, auth.nonce).await);

    exec(f, payee, f.deployment.token, &rwa_bytes(&auth, sig)).await;
    assert_eq!(balance(f, payer).await, DEV_TOKENS - units(500));
    assert_eq!(balance(f, payee).await, DEV_TOKENS + units(500));

    // The (v, r, s) form, for a second authorization.
    let auth2 = ReceiveWithAuthorization {
        nonce: B256::repeat_byte(5),
        ..auth
    };
    let vrs = sign_vrs(&key(f, 1), &auth2, &domain).unwrap();
    exec(f, payee, f.deployment.token, &rwa_vrs(&auth2, vrs)).await;
    assert_eq!(balance(f, payee).await, DEV_TOKENS + units(1_000));
    // A TransferWithAuthorization signature is not a ReceiveWithAuthorization one.
    let auth3 = ReceiveWithAuthorization {
        nonce: B256::repeat_byte(6),
        ..auth
    };
    let as_transfer = transfer_auth(payer, payee, 500, after, before, 6);
    let wrong_type = sign(&key(f, 1), &as_transfer, &domain).unwrap();
    let r = reverts(f, payee, f.deployment.token, &rwa_bytes(&auth3, wrong_type)).await;
    assert_eq!(r, Revert::InvalidSignature);
}

async fn cancel_authorization_then_use(f: &Fixture) {
    let (payer, payee, relayer) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let (after, before) = open_window(f).await;
    let domain = usdc_domain(f);
    let auth = transfer_auth(payer, payee, 100, after, before, 7);
    let transfer_sig = sign(&key(f, 1), &auth, &domain).unwrap();

    // Cancelled with the (v, r, s) form, submitted by a relayer.
    let cancel = CancelAuthorization {
        authorizer: payer,
        nonce: auth.nonce,
    };
    let vrs = sign_vrs(&key(f, 1), &cancel, &domain).unwrap();
    let call = Token::cancelAuthorization_0Call {
        authorizer: payer,
        nonce: auth.nonce,
        v: vrs.v,
        r: vrs.r,
        s: vrs.s,
    };
    let receipt = exec(f, relayer, f.deployment.token, &call).await;
    let cancelled = events::<Token::AuthorizationCanceled>(&receipt, f.deployment.token);
    assert_eq!(cancelled.len(), 1);
    assert_eq!(
        (cancelled[0].authorizer, cancelled[0].nonce),
        (payer, auth.nonce)
    );
    assert!(auth_used(f, payer, auth.nonce).await);

    let r = reverts(
        f,
        relayer,
        f.deployment.token,
        &twa_bytes(&auth, transfer_sig),
    )
    .await;
    assert_eq!(
        r,
        Revert::AuthorizationAlreadyUsed {
            authorizer: payer,
            nonce: auth.nonce
        }
    );
    // Cancelling twice is refused too.
    let r = reverts(f, relayer, f.deployment.token, &call).await;
    assert_eq!(
        r,
        Revert::AuthorizationAlreadyUsed {
            authorizer: payer,
            nonce: auth.nonce
        }
    );
    assert_eq!(balance(f, payer).await, DEV_TOKENS);

    // The bytes form; a cancellation signed by someone else is refused.
    let cancel = CancelAuthorization {
        authorizer: payer,
        nonce: B256::repeat_byte(8),
    };
    let forged = sign(&key(f, 2), &cancel, &domain).unwrap();
    let call = Token::cancelAuthorization_1Call {
        authorizer: payer,
        nonce: cancel.nonce,
        signature: forged,
    };
    assert_eq!(
        reverts(f, relayer, f.deployment.token, &call).await,
        Revert::InvalidSignature
    );
    let signature = sign(&key(f, 1), &cancel, &domain).unwrap();
    let call = Token::cancelAuthorization_1Call {
        authorizer: payer,
        nonce: cancel.nonce,
        signature,
    };
    exec(f, relayer, f.deployment.token, &call).await;
    assert!(auth_used(f, payer, cancel.nonce).await);
}

async fn replayed_authorization_is_refused(f: &Fixture) {
    let (payer, payee, relayer) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let (after, before) = open_window(f).await;
    let auth = transfer_auth(payer, payee, 300, after, before, 9);
    let sig = sign(&key(f, 1), &auth, &usdc_domain(f)).unwrap();
    exec(
        f,
        relayer,
        f.deployment.token,
        &twa_bytes(&auth, sig.clone()),
    )
    .await;
    let r = reverts(f, relayer, f.deployment.token, &twa_bytes(&auth, sig)).await;
    assert_eq!(
        r,
        Revert::AuthorizationAlreadyUsed {
            authorizer: payer,
            nonce: auth.nonce
        }
    );
    // The same authorization in the other form is the same nonce.
    let vrs = sign_vrs(&key(f, 1), &auth, &usdc_domain(f)).unwrap();
    let r = reverts(f, payee, f.deployment.token, &twa_vrs(&auth, vrs)).await;
    assert_eq!(
        r,
        Revert::AuthorizationAlreadyUsed {
            authorizer: payer,
            nonce: auth.nonce
        }
    );
    assert_eq!(
        balance(f, payer).await,
        DEV_TOKENS - units(300),
        "paid exactly once"
    );
    assert_eq!(balance(f, payee).await, DEV_TOKENS + units(300));
}

async fn validity_window(f: &Fixture) {
    let (payer, payee, relayer) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let domain = usdc_domain(f);
    let t = now(f).await;

    // Not yet valid: validAfter an hour ahead.
    let early = transfer_auth(payer, payee, 10, t + 3_600, t + 7_200, 10);
    let sig = sign(&key(f, 1), &early, &domain).unwrap();
    match reverts(
        f,
        relayer,
        f.deployment.token,
        &twa_bytes(&early, sig.clone()),
    )
    .await
    {
        Revert::AuthorizationNotYetValid {
            valid_after,
            timestamp,
        } => {
            assert_eq!(valid_after, U256::from(t + 3_600));
            assert!(
                timestamp >= U256::from(t) && timestamp < valid_after,
                "{timestamp}"
            );
        }
        other => panic!("expected AuthorizationNotYetValid, got {other:?}"),
    }
    // validAfter is exclusive: at exactly validAfter it is still not valid.
    let boundary = transfer_auth(payer, payee, 10, t + 3_600, t + 100_000, 11);
    let boundary_sig = sign(&key(f, 1), &boundary, &domain).unwrap();
    f.chain.advance_time(3_601).await.unwrap();
    exec(f, relayer, f.deployment.token, &twa_bytes(&early, sig)).await;
    exec(
        f,
        relayer,
        f.deployment.token,
        &twa_bytes(&boundary, boundary_sig),
    )
    .await;
    assert_eq!(balance(f, payee).await, DEV_TOKENS + units(20));

    // Expired: validBefore is the latest block's time, so every later block is too late.
    let t = now(f).await;
    let late = transfer_auth(payer, payee, 10, 0, t, 12);
    let sig = sign(&key(f, 1), &late, &domain).unwrap();
    match reverts(f, relayer, f.deployment.token, &twa_bytes(&late, sig)).await {
        Revert::AuthorizationExpired {
            valid_before,
            timestamp,
        } => {
            assert_eq!(valid_before, U256::from(t));
            assert!(timestamp >= valid_before);
        }
        other => panic!("expected AuthorizationExpired, got {other:?}"),
    }
    assert!(!auth_used(f, payer, late.nonce).await);
}

async fn bad_signatures_are_refused(f: &Fixture) {
    let (payer, payee, relayer) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let (after, before) = open_window(f).await;
    let domain = usdc_domain(f);
    let token = f.deployment.token;
    let auth = transfer_auth(payer, payee, 42, after, before, 13);

    // Signed by someone other than `from`.
    let sig = sign(&key(f, 4), &auth, &domain).unwrap();
    assert_eq!(
        reverts(f, relayer, token, &twa_bytes(&auth, sig)).await,
        Revert::InvalidSignature
    );
    // Signed for another chain id.
    let other_chain = token_domain("USD Coin", "2", f.chain.chain_id() + 1, token);
    let sig = sign(&key(f, 1), &auth, &other_chain).unwrap();
    assert_eq!(
        reverts(f, relayer, token, &twa_bytes(&auth, sig)).await,
        Revert::InvalidSignature
    );
    let vrs = sign_vrs(&key(f, 1), &auth, &other_chain).unwrap();
    assert_eq!(
        reverts(f, relayer, token, &twa_vrs(&auth, vrs)).await,
        Revert::InvalidSignature
    );
    // Signed for another token version (domain).
    let other_version = token_domain("USD Coin", "1", f.chain.chain_id(), token);
    let sig = sign(&key(f, 1), &auth, &other_version).unwrap();
    assert_eq!(
        reverts(f, relayer, token, &twa_bytes(&auth, sig)).await,
        Revert::InvalidSignature
    );
    // The malleated (high-s) twin of a valid signature, in both forms: ecrecover would accept it.
    let good = sign_vrs(&key(f, 1), &auth, &domain).unwrap();
    let twin = high_s(good);
    assert!(tollgate_chain::authorization::recover(&auth, &domain, &twin.to_bytes()).is_err());
    assert_eq!(
        reverts(f, relayer, token, &twa_vrs(&auth, twin)).await,
        Revert::InvalidSignature
    );
    assert_eq!(
        reverts(f, relayer, token, &twa_bytes(&auth, twin.to_bytes())).await,
        Revert::InvalidSignature
    );
    // A tampered amount.
    let more = TransferWithAuthorization {
        value: units(43),
        ..auth.clone()
    };
    assert_eq!(
        reverts(f, relayer, token, &twa_vrs(&more, good)).await,
        Revert::InvalidSignature
    );

    assert!(!auth_used(f, payer, auth.nonce).await);
    assert_eq!(balance(f, payer).await, DEV_TOKENS);
    // The canonical one still works.
    exec(f, relayer, token, &twa_vrs(&auth, good)).await;
    assert_eq!(balance(f, payer).await, DEV_TOKENS - units(42));
}

async fn under_funded_payer(f: &Fixture) {
    let (payer, payee, relayer) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let (after, before) = open_window(f).await;
    let domain = usdc_domain(f);
    let mut auth = transfer_auth(payer, payee, 0, after, before, 14);
    auth.value = DEV_TOKENS + units(1);
    let sig = sign(&key(f, 1), &auth, &domain).unwrap();
    let r = reverts(f, relayer, f.deployment.token, &twa_bytes(&auth, sig)).await;
    assert_eq!(
        r,
        Revert::InsufficientFunds {
            account: payer,
            balance: DEV_TOKENS,
            needed: DEV_TOKENS + units(1)
        }
    );
    assert!(
        !auth_used(f, payer, auth.nonce).await,
        "a failed transfer consumes no nonce"
    );

    // A payer with no tokens at all (a key no backend knows).
    let nobody = stranger_key(1);
    let auth = transfer_auth(nobody.address(), payee, 1, after, before, 15);
    let sig = sign(&nobody, &auth, &domain).unwrap();
    let r = reverts(f, relayer, f.deployment.token, &twa_bytes(&auth, sig)).await;
    assert_eq!(
        r,
        Revert::InsufficientFunds {
            account: nobody.address(),
            balance: U256::ZERO,
            needed: units(1)
        }
    );
}

async fn permit_sets_allowance(f: &Fixture) {
    let (owner, spender, relayer) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let chain = f.chain.as_ref();
    let token = f.deployment.token;
    let domain = usdc_domain(f);
    let deadline = U256::from(now(f).await + 3_600);
    assert_eq!(
        read(chain, token, &Token::noncesCall { owner })
            .await
            .unwrap(),
        U256::ZERO
    );

    let permit = Permit {
        owner,
        spender,
        value: units(5_000),
        nonce: U256::ZERO,
        deadline,
    };
    let vrs = sign_vrs(&key(f, 1), &permit, &domain).unwrap();
    let call = Token::permit_1Call {
        owner,
        spender,
        value: permit.value,
        deadline,
        v: vrs.v,
        r: vrs.r,
        s: vrs.s,
    };
    let receipt = exec(f, relayer, token, &call).await;
    let approvals = events::<Token::Approval>(&receipt, token);
    assert_eq!(approvals.len(), 1);
    assert_eq!(
        (approvals[0].owner, approvals[0].spender, approvals[0].value),
        (owner, spender, units(5_000))
    );
    assert_eq!(
        read(chain, token, &Token::allowanceCall { owner, spender })
            .await
            .unwrap(),
        units(5_000)
    );
    assert_eq!(
        read(chain, token, &Token::noncesCall { owner })
            .await
            .unwrap(),
        U256::from(1)
    );
    // Replaying it fails: the nonce moved on, so the digest differs.
    assert_eq!(
        reverts(f, relayer, token, &call).await,
        Revert::InvalidSignature
    );

    // The spender uses it.
    exec(
        f,
        spender,
        token,
        &Token::transferFromCall {
            from: owner,
            to: spender,
            value: units(2_000),
        },
    )
    .await;
    assert_eq!(
        read(chain, token, &Token::allowanceCall { owner, spender })
            .await
            .unwrap(),
        units(3_000)
    );
    assert_eq!(balance(f, owner).await, DEV_TOKENS - units(2_000));
    let r = reverts(
        f,
        spender,
        token,
        &Token::transferFromCall {
            from: owner,
            to: spender,
            value: units(3_001),
        },
    )
    .await;
    assert_eq!(
        r,
        Revert::InsufficientAllowance {
            spender,
            allowance: units(3_000),
            needed: units(3_001)
        }
    );

    // The bytes form with the next nonce.
    let permit = Permit {
        owner,
        spender,
        value: units(9),
        nonce: U256::from(1),
        deadline,
    };
    let signature = sign(&key(f, 1), &permit, &domain).unwrap();
    exec(
        f,
        relayer,
        token,
        &Token::permit_0Call {
            owner,
            spender,
            value: permit.value,
            deadline,
            signature,
        },
    )
    .await;
    assert_eq!(
        read(chain, token, &Token::allowanceCall { owner, spender })
            .await
            .unwrap(),
        units(9)
    );

    // Expired: the deadline is before the block time.
    let past = U256::from(now(f).await - 1);
    let permit = Permit {
        owner,
        spender,
        value: units(1),
        nonce: U256::from(2),
        deadline: past,
    };
    let signature = sign(&key(f, 1), &permit, &domain).unwrap();
    match reverts(
        f,
        relayer,
        token,
        &Token::permit_0Call {
            owner,
            spender,
            value: units(1),
            deadline: past,
            signature,
        },
    )
    .await
    {
        Revert::PermitExpired {
            deadline,
            timestamp,
        } => {
            assert_eq!(deadline, past);
            assert!(timestamp > past);
        }
        other => panic!("expected PermitExpired, got {other:?}"),
    }
    // Signed by someone else.
    let permit = Permit {
        owner,
        spender,
        value: units(1),
        nonce: U256::from(2),
        deadline,
    };
    let signature = sign(&key(f, 2), &permit, &domain).unwrap();
    let r = reverts(
        f,
        relayer,
        token,
        &Token::permit_0Call {
            owner,
            spender,
            value: units(1),
            deadline,
            signature,
        },
    )
    .await;
    assert_eq!(r, Revert::InvalidSignature);
    assert_eq!(
        read(chain, token, &Token::allowanceCall { owner, spender })
            .await
            .unwrap(),
        units(9)
    );
}

async fn only_the_owner_mints(f: &Fixture) {
    let token = f.deployment.token;
    let (owner, other) = (addr(f, 0), addr(f, 1));
    let r = reverts(
        f,
        other,
        token,
        &Token::mintCall {
            to: other,
            amount: units(1),
        },
    )
    .await;
    assert_eq!(r, Revert::Unauthorized { caller: other });
    let supply = read(f.chain.as_ref(), token, &Token::totalSupplyCall {})
        .await
        .unwrap();
    exec(
        f,
        owner,
        token,
        &Token::mintCall {
            to: other,
            amount: units(77),
        },
    )
    .await;
    assert_eq!(balance(f, other).await, DEV_TOKENS + units(77));
    assert_eq!(
        read(f.chain.as_ref(), token, &Token::totalSupplyCall {})
            .await
            .unwrap(),
        supply + units(77)
    );
    let r = reverts(
        f,
        owner,
        token,
        &Token::mintCall {
            to: Address::ZERO,
            amount: units(1),
        },
    )
    .await;
    assert_eq!(r, Revert::ZeroAddress);
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

// ------------------------------------------------------------------------------------- router

async fn router_payment(f: &Fixture, amount: u64, fee: u64, memo: u8) -> RouterPayment {
    let (_, before) = open_window(f).await;
    RouterPayment {
        from: addr(f, 1),
        pay_to: addr(f, 2),
        amount: units(amount),
        fee: units(fee),
        memo: B256::repeat_byte(memo),
        valid_after: U256::ZERO,
        valid_before: U256::from(before),
    }
}

fn sign_payment(f: &Fixture, payment: &RouterPayment) -> Bytes {
    sign(
        &key(f, 1),
        &payment.authorization(f.deployment.router),
        &usdc_domain(f),
    )
    .unwrap()
}

async fn settle_pays_payee_and_fee(f: &Fixture) {
    let router = f.deployment.router;
    let (fee_recipient, relayer) = (addr(f, 0), addr(f, 4));
    let payment = router_payment(f, 1_000_000, 10_000, 0xaa).await;
    let nonce = router_nonce(payment.pay_to, payment.memo, payment.fee);
    let on_chain = read(
        f.chain.as_ref(),
        router,
        &PaymentRouter::paymentNonceCall {
            payTo: payment.pay_to,
            memo: payment.memo,
            fee: payment.fee,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        on_chain, nonce,
        "router_nonce must equal PaymentRouter.paymentNonce"
    );

    let receipt = exec(
        f,
        relayer,
        router,
        &payment.settle_call(sign_payment(f, &payment)),
    )
    .await;
    assert_eq!(
        balance(f, payment.from).await,
        DEV_TOKENS - units(1_000_000)
    );
    assert_eq!(
        balance(f, payment.pay_to).await,
        DEV_TOKENS + units(990_000)
    );
    assert_eq!(balance(f, fee_recipient).await, DEV_TOKENS + units(10_000));
    assert_eq!(balance(f, relayer).await, DEV_TOKENS);
    assert_eq!(
        balance(f, router).await,
        U256::ZERO,
        "the router holds nothing"
    );
    assert!(auth_used(f, payment.from, nonce).await);

    let settled = events::<PaymentRouter::PaymentSettled>(&receipt, router);
    assert_eq!(settled.len(), 1);
    let e = &settled[0];
    assert_eq!(
        (e.memo, e.from, e.payTo, e.amount, e.fee),
        (
            payment.memo,
            payment.from,
            payment.pay_to,
            payment.amount,
            payment.fee
        )
    );
    // Through the chain's log query as well.
    let logs = f
        .chain
        .logs(&tollgate_chain::LogFilter {
            from_block: receipt.block_number,
            to_block: Some(receipt.block_number),
            addresses: vec![router],
            topics: [
                Some(vec![PaymentRouter::PaymentSettled::SIGNATURE_HASH]),
                Some(vec![payment.memo]),
                None,
                None,
            ],
        })
        .await
        .unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].tx_hash, receipt.tx_hash);

    // A zero fee pays everything to the payee and nothing to the fee recipient.
    let free = router_payment(f, 500, 0, 0xab).await;
    exec(
        f,
        relayer,
        router,
        &free.settle_call(sign_payment(f, &free)),
    )
    .await;
    assert_eq!(balance(f, free.pay_to).await, DEV_TOKENS + units(990_500));
    assert_eq!(balance(f, fee_recipient).await, DEV_TOKENS + units(10_000));
    // A fee equal to the amount pays everything to the fee recipient.
    let all_fee = router_payment(f, 300, 300, 0xac).await;
    exec(
        f,
        relayer,
        router,
        &all_fee.settle_call(sign_payment(f, &all_fee)),
    )
    .await;
    assert_eq!(
        balance(f, all_fee.pay_to).await,
        DEV_TOKENS + units(990_500)
    );
    assert_eq!(balance(f, fee_recipient).await, DEV_TOKENS + units(10_300));
}

async fn settle_signature_binds_pay_to_memo_and_fee(f: &Fixture) {
    let router = f.deployment.router;
    let relayer = addr(f, 4);
    let payment = router_payment(f, 1_000, 10, 0x01).await;
    let signature = sign_payment(f, &payment);
    let variants = [
        RouterPayment {
            pay_to: addr(f, 5),
            ..payment
        },
        RouterPayment {
            fee: units(0),
            ..payment
        },
        RouterPayment {
            fee: units(11),
            ..payment
        },
        RouterPayment {
            memo: B256::repeat_byte(0x02),
            ..payment
        },
        RouterPayment {
            amount: units(1_001),
            ..payment
        },
        RouterPayment {
            from: addr(f, 3),
            ..payment
        },
    ];
    for v in variants {
        let r = reverts(f, relayer, router, &v.settle_call(signature.clone())).await;
        assert_eq!(r, Revert::InvalidSignature, "{v:?}");
    }
    // A signature over a TransferWithAuthorization with the same fields is not accepted either.
    let a = payment.authorization(router);
    let as_transfer = TransferWithAuthorization {
        from: a.from,
        to: a.to,
        value: a.value,
        validAfter: a.validAfter,
        validBefore: a.validBefore,
        nonce: a.nonce,
    };
    let wrong_type = sign(&key(f, 1), &as_transfer, &usdc_domain(f)).unwrap();
    assert_eq!(
        reverts(f, relayer, router, &payment.settle_call(wrong_type)).await,
        Revert::InvalidSignature
    );
    assert_eq!(balance(f, payment.from).await, DEV_TOKENS);
    exec(f, relayer, router, &payment.settle_call(signature)).await;
    assert_eq!(balance(f, payment.pay_to).await, DEV_TOKENS + units(990));
}

async fn settle_fee_exceeds_amount(f: &Fixture) {
    let payment = router_payment(f, 100, 101, 0x03).await;
    let r = reverts(
        f,
        addr(f, 4),
        f.deployment.router,
        &payment.settle_call(sign_payment(f, &payment)),
    )
    .await;
    assert_eq!(
        r,
        Revert::FeeExceedsAmount {
            amount: units(100),
            fee: units(101)
        }
    );
    let zero_payee = RouterPayment {
        pay_to: Address::ZERO,
        ..router_payment(f, 100, 1, 0x04).await
    };
    let r = reverts(
        f,
        addr(f, 4),
        f.deployment.router,
        &zero_payee.settle_call(sign_payment(f, &zero_payee)),
    )
    .await;
    assert_eq!(r, Revert::ZeroAddress);
    // The router itself as the payee would keep the payment for good (issue 35).
    let to_router = RouterPayment {
        pay_to: f.deployment.router,
        ..router_payment(f, 100, 1, 0x06).await
    };
    let r = reverts(
        f,
        addr(f, 4),
        f.deployment.router,
        &to_router.settle_call(sign_payment(f, &to_router)),
    )
    .await;
    assert_eq!(
        r,
        Revert::InvalidPayee {
            payee: f.deployment.router
        }
    );
    assert_eq!(r.name(), "InvalidPayee");
    assert_eq!(balance(f, payment.from).await, DEV_TOKENS);
    assert_eq!(balance(f, f.deployment.router).await, U256::ZERO);
}

async fn settle_replay_is_refused(f: &Fixture) {
    let router = f.deployment.router;
    let payment = router_payment(f, 2_000, 20, 0x05).await;
    let call = payment.settle_call(sign_payment(f, &payment));
    exec(f, addr(f, 4), router, &call).await;
    let nonce = router_nonce(payment.pay_to, payment.memo, payment.fee);
    // Whoever submits it again.
    for submitter in [addr(f, 4), addr(f, 5), payment.from] {
        let r = reverts(f, submitter, router, &call).await;
        assert_eq!(
            r,
            Revert::AuthorizationAlreadyUsed {
                authorizer: payment.from,
                nonce
            }
        );
    }
    assert_eq!(balance(f, payment.from).await, DEV_TOKENS - units(2_000));
    // Under-funded payer: the token's error bubbles up unchanged.
    let mut big = router_payment(f, 0, 0, 0x06).await;
    big.amount = DEV_TOKENS;
    let r = reverts(
        f,
        addr(f, 4),
        router,
        &big.settle_call(sign_payment(f, &big)),
    )
    .await;
    assert_eq!(
        r,
        Revert::InsufficientFunds {
            account: payment.from,
            balance: DEV_TOKENS - units(2_000),
            needed: DEV_TOKENS
        }
    );
    // Expired authorization.
    let t = now(f).await;
    let late = RouterPayment {
        valid_before: U256::from(t),
        ..router_payment(f, 1, 0, 0x07).await
    };
    match reverts(
        f,
        addr(f, 4),
        router,
        &late.settle_call(sign_payment(f, &late)),
    )
    .await
    {
        Revert::AuthorizationExpired { valid_before, .. } => {
            assert_eq!(valid_before, U256::from(t))
        }
        other => panic!("expected AuthorizationExpired, got {other:?}"),
    }
}

async fn router_authorization_cannot_be_received_by_others(f: &Fixture) {
    let router = f.deployment.router;
    let payment = router_payment(f, 700, 7, 0x08).await;
    let signature = sign_payment(f, &payment);
    let auth = payment.authorization(router);
    // A front-runner tries to pull the router's authorization to itself directly on the token.
    let thief = addr(f, 6);
    let r = reverts(
        f,
        thief,
        f.deployment.token,
        &rwa_bytes(&auth, signature.clone()),
    )
    .await;
    assert_eq!(
        r,
        Revert::CallerMustBePayee {
            caller: thief,
            payee: router
        }
    );
    // Or rewrites `to` to itself: the signature does not cover that.
    let rewritten = ReceiveWithAuthorization {
        to: thief,
        ..auth.clone()
    };
    let r = reverts(
        f,
        thief,
        f.deployment.token,
        &rwa_bytes(&rewritten, signature.clone()),
    )
    .await;
    assert_eq!(r, Revert::InvalidSignature);
    // Or uses it as a transfer to the router with someone else's relay.
    let as_transfer = Token::transferWithAuthorization_0Call {
        from: auth.from,
        to: auth.to,
        value: auth.value,
        validAfter: auth.validAfter,
        validBefore: auth.validBefore,
        nonce: auth.nonce,
        signature: signature.clone(),
    };
    assert_eq!(
        reverts(f, thief, f.deployment.token, &as_transfer).await,
        Revert::InvalidSignature
    );
    assert_eq!(balance(f, payment.from).await, DEV_TOKENS);
    // The honest settlement still goes through.
    exec(f, thief, router, &payment.settle_call(signature)).await;
    assert_eq!(balance(f, payment.pay_to).await, DEV_TOKENS + units(693));
    assert_eq!(balance(f, thief).await, DEV_TOKENS);
}

/// The router's `simulateTransfers` (one `eth_call` for many x402 verifications) answers each
/// transfer exactly as the token's own call of it answers alone, sees no transfer's effects in
/// another (two payloads with one nonce both pass), and changes nothing, even sent as a
/// transaction.
async fn simulate_transfers_answers_each_as_alone_and_changes_nothing(f: &Fixture) {
    let (payer, payee, relayer) = (addr(f, 1), addr(f, 2), addr(f, 3));
    let (token, router) = (f.deployment.token, f.deployment.router);
    let domain = usdc_domain(f);
    let t = now(f).await;
    let signed = |auth: TransferWithAuthorization| {
        let sig = sign(&key(f, 1), &auth, &domain).unwrap();
        (auth, sig)
    };
    // Used before the simulation.
    let (used, used_sig) = signed(transfer_auth(payer, payee, 3, 0, t + 3_600, 0x30));
    exec(f, relayer, token, &twa_bytes(&used, used_sig.clone())).await;
    let before = (balance(f, payer).await, balance(f, payee).await);
    let mut unfunded = transfer_auth(payer, payee, 0, 0, t + 3_600, 0x33);
    unfunded.value = before.0 + units(1);
    let (forged, _) = signed(transfer_auth(payer, payee, 9, 0, t + 3_600, 0x34));
    let cases = [
        signed(transfer_auth(payer, payee, 5, 0, t + 3_600, 0x31)),
        // The same nonce again (another amount): passes too, as it would alone.
        signed(transfer_auth(payer, payee, 6, 0, t + 3_600, 0x31)),
        (used, used_sig),
        signed(transfer_auth(payer, payee, 7, 0, t, 0x32)),
        signed(unfunded),
        (forged, Bytes::from(vec![7u8; 65])),
    ];
    let transfers: Vec<_> = cases
        .iter()
        .map(|(a, sig)| PaymentRouter::Transfer {
            from: a.from,
            to: a.to,
            value: a.value,
            validAfter: a.validAfter,
            validBefore: a.validBefore,
            nonce: a.nonce,
            signature: sig.clone(),
        })
        .collect();
    let call = PaymentRouter::simulateTransfersCall {
        transfers: transfers.clone(),
    };
    let answer = f
        .chain
        .call(Some(relayer), router, call.abi_encode().into())
        .await
        .expect("simulateTransfers answers");
    let results = PaymentRouter::simulateTransfersCall::abi_decode_returns(&answer).unwrap();
    assert_eq!(results.len(), cases.len());
    let mut named = Vec::new();
    for ((auth, sig), result) in cases.iter().zip(&results) {
        let alone = f
            .chain
            .call(
                Some(relayer),
                token,
                twa_bytes(auth, sig.clone()).abi_encode().into(),
            )
            .await;
        let batched = if result.as_ref() == PaymentRouter::Simulated::SELECTOR {
            Ok(())
        } else {
            Err(Revert::decode(result))
        };
        match (&alone, &batched) {
            (Ok(_), Ok(())) => named.push("passes"),
            // An expiry names the block time it saw: the call alone runs after the batch, and
            // may see the next second.
            (
                Err(Error::Revert(Revert::AuthorizationExpired {
                    valid_before,
                    timestamp,
                })),
                Err(
                    batched @ Revert::AuthorizationExpired {
                        valid_before: batched_before,
                        timestamp: batched_at,
                    },
                ),
            ) => {
                assert_eq!(valid_before, batched_before, "nonce {}", auth.nonce);
                assert!(timestamp >= batched_at, "nonce {}", auth.nonce);
                named.push(batched.name());
            }
            (Err(Error::Revert(alone)), Err(batched)) => {
                assert_eq!(alone, batched, "nonce {}", auth.nonce);
                named.push(batched.name());
            }
            _ => panic!(
                "nonce {}: alone {alone:?}, in the batch {batched:?}",
                auth.nonce
            ),
        }
    }
    assert_eq!(
        named,
        [
            "passes",
            "passes",
            "AuthorizationAlreadyUsed",
            "AuthorizationExpired",
            "InsufficientFunds",
            "InvalidSignature"
        ]
    );
    // Nothing moved, no nonce was used, even by a transaction of it.
    exec(f, relayer, router, &call).await;
    assert!(!auth_used(f, payer, B256::repeat_byte(0x31)).await);
    assert_eq!((balance(f, payer).await, balance(f, payee).await), before);
}
