//! EIP-2612 permits and minting on the token.

use super::*;

pub(super) async fn permit_sets_allowance(f: &Fixture) {
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

pub(super) async fn only_the_owner_mints(f: &Fixture) {
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
