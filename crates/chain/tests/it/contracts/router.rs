//! The payment router: settlement to payee and fee, what its signature binds, replays, and
//! `simulateTransfers`.

use super::*;

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

pub(super) async fn settle_pays_payee_and_fee(f: &Fixture) {
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

pub(super) async fn settle_signature_binds_pay_to_memo_and_fee(f: &Fixture) {
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

pub(super) async fn settle_fee_exceeds_amount(f: &Fixture) {
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

pub(super) async fn settle_replay_is_refused(f: &Fixture) {
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

pub(super) async fn router_authorization_cannot_be_received_by_others(f: &Fixture) {
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
pub(super) async fn simulate_transfers_answers_each_as_alone_and_changes_nothing(f: &Fixture) {
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
