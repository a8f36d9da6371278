//! EIP-3009 on the token: its metadata and type hashes, transfers and receipts with authorization
//! (both signature encodings), cancellation, replays, validity windows, bad signatures and
//! under-funded payers.

use super::*;

pub(super) async fn token_metadata_and_type_hashes(f: &Fixture) {
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

pub(super) async fn transfer_with_authorization_vrs(f: &Fixture) {
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

pub(super) async fn transfer_with_authorization_bytes(f: &Fixture) {
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

pub(super) async fn receive_with_authorization_only_by_payee(f: &Fixture) {
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

pub(super) async fn cancel_authorization_then_use(f: &Fixture) {
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

pub(super) async fn replayed_authorization_is_refused(f: &Fixture) {
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

pub(super) async fn validity_window(f: &Fixture) {
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

pub(super) async fn bad_signatures_are_refused(f: &Fixture) {
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

pub(super) async fn under_funded_payer(f: &Fixture) {
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
