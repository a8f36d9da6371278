//! Overage: the per-cycle cap, raising the allowance, and the cap's reset each cycle.

use super::*;

pub(super) async fn overage_is_capped_per_cycle(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let (subscriber, provider, operator, stranger) = (
        addr(f, 1),
        addr(f, PROVIDER),
        addr(f, OPERATOR),
        addr(f, STRANGER),
    );
    let pay_to = addr(f, PAY_TO);
    let (id, _) = subscribe(f, 1, plan_id, MAX_OVERAGE).await;

    // A stranger (even the payee) may not charge.
    for who in [stranger, pay_to, subscriber] {
        assert_eq!(
            reverts(f, who, subs(f), &charge(id, 1, 1, 1)).await,
            Revert::Unauthorized { caller: who }
        );
    }
    // Zero amount; wrong cycle.
    assert_eq!(
        reverts(f, provider, subs(f), &charge(id, 1, 0, 1)).await,
        Revert::ZeroAmount
    );
    assert_eq!(
        reverts(f, provider, subs(f), &charge(id, 2, 1, 1)).await,
        Revert::WrongCycle { id, expected: 1 }
    );

    // Provider and operator charge up to exactly the cap.
    let receipt = exec(f, provider, subs(f), &charge(id, 1, 200_000, 1)).await;
    let charged = events::<Subscriptions::OverageCharged>(&receipt, subs(f));
    assert_eq!(charged.len(), 1);
    assert_eq!(
        (
            charged[0].id,
            charged[0].cycle,
            charged[0].amount,
            charged[0].used,
            charged[0].r#ref
        ),
        (id, 1, units(200_000), units(200_000), B256::repeat_byte(1))
    );
    exec(f, operator, subs(f), &charge(id, 1, 300_000, 2)).await;
    assert_eq!(remaining(f, id).await, U256::ZERO);
    assert_eq!(subscription(f, id).await.overageUsed, units(MAX_OVERAGE));
    // One unit more is refused.
    let r = reverts(f, provider, subs(f), &charge(id, 1, 1, 3)).await;
    assert_eq!(
        r,
        Revert::AllowanceExhausted {
            id,
            remaining: U256::ZERO
        }
    );
    // A reused reference is refused (before the cap is considered).
    let r = reverts(f, provider, subs(f), &charge(id, 1, 1, 1)).await;
    assert_eq!(
        r,
        Revert::ChargeAlreadyApplied {
            id,
            reference: B256::repeat_byte(1)
        }
    );
    let key = keccak256([id.as_slice(), B256::repeat_byte(1).as_slice()].concat());
    assert!(
        read(
            f.chain.as_ref(),
            subs(f),
            &Subscriptions::chargeAppliedCall { key }
        )
        .await
        .unwrap()
    );

    // The per-cycle invariant: plan amount + maxOverage, to the unit.
    assert_eq!(
        balance(f, subscriber).await,
        DEV_TOKENS - units(AMOUNT + MAX_OVERAGE)
    );
    assert_eq!(
        balance(f, pay_to).await,
        DEV_TOKENS + units(AMOUNT + MAX_OVERAGE)
    );
}

pub(super) async fn raise_allowance_then_charge(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let (subscriber, provider) = (addr(f, 1), addr(f, PROVIDER));
    let (id, _) = subscribe(f, 1, plan_id, MAX_OVERAGE).await;
    exec(f, provider, subs(f), &charge(id, 1, MAX_OVERAGE, 1)).await;
    let r = reverts(f, provider, subs(f), &charge(id, 1, 1, 2)).await;
    assert_eq!(
        r,
        Revert::AllowanceExhausted {
            id,
            remaining: U256::ZERO
        }
    );

    // Not a raise.
    for requested in [MAX_OVERAGE, MAX_OVERAGE - 1, 0] {
        let r = reverts(
            f,
            subscriber,
            subs(f),
            &Subscriptions::raiseAllowanceCall {
                id,
                newMaxOverage: units(requested),
            },
        )
        .await;
        assert_eq!(
            r,
            Revert::AllowanceNotRaised {
                current: units(MAX_OVERAGE),
                requested: units(requested)
            }
        );
    }
    let receipt = exec(
        f,
        subscriber,
        subs(f),
        &Subscriptions::raiseAllowanceCall {
            id,
            newMaxOverage: units(800_000),
        },
    )
    .await;
    assert_eq!(
        events::<Subscriptions::AllowanceRaised>(&receipt, subs(f))[0].maxOverage,
        units(800_000)
    );
    assert_eq!(remaining(f, id).await, units(300_000));
    let r = reverts(f, provider, subs(f), &charge(id, 1, 300_001, 2)).await;
    assert_eq!(
        r,
        Revert::AllowanceExhausted {
            id,
            remaining: units(300_000)
        }
    );
    exec(f, provider, subs(f), &charge(id, 1, 300_000, 2)).await;

    // By signature, submitted by the provider itself.
    let (deadline, signature) = sign_action(f, 1, id, ActionKind::RaiseAllowance, 1_000_000).await;
    // A signature for another value does not authorize this one.
    let r = reverts(
        f,
        provider,
        subs(f),
        &Subscriptions::raiseAllowanceWithSigCall {
            id,
            newMaxOverage: units(5_000_000),
            deadline,
            signature: signature.clone(),
        },
    )
    .await;
    assert_eq!(r, Revert::InvalidSignature);
    exec(
        f,
        provider,
        subs(f),
        &Subscriptions::raiseAllowanceWithSigCall {
            id,
            newMaxOverage: units(1_000_000),
            deadline,
            signature,
        },
    )
    .await;
    assert_eq!(remaining(f, id).await, units(200_000));
    exec(f, provider, subs(f), &charge(id, 1, 200_000, 3)).await;
    let r = reverts(f, provider, subs(f), &charge(id, 1, 1, 4)).await;
    assert_eq!(
        r,
        Revert::AllowanceExhausted {
            id,
            remaining: U256::ZERO
        }
    );
    let (deadline, signature) = sign_action(f, 1, id, ActionKind::RaiseAllowance, 1_000_000).await;
    let r = reverts(
        f,
        provider,
        subs(f),
        &Subscriptions::raiseAllowanceWithSigCall {
            id,
            newMaxOverage: units(1_000_000),
            deadline,
            signature,
        },
    )
    .await;
    assert_eq!(
        r,
        Revert::AllowanceNotRaised {
            current: units(1_000_000),
            requested: units(1_000_000)
        }
    );

    assert_eq!(
        balance(f, subscriber).await,
        DEV_TOKENS - units(AMOUNT + 1_000_000)
    );
}

pub(super) async fn overage_cap_resets_each_cycle(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let (subscriber, provider) = (addr(f, 1), addr(f, PROVIDER));
    let (id, _) = subscribe(f, 1, plan_id, MAX_OVERAGE).await;
    let mut before = DEV_TOKENS;

    for cycle in 1..=3u32 {
        if cycle > 1 {
            advance_and_collect(f, id, cycle).await;
            // A late charge for the previous cycle cannot eat into this one.
            let r = reverts(f, provider, subs(f), &charge(id, cycle - 1, 1, 0xf0)).await;
            assert_eq!(
                r,
                Revert::WrongCycle {
                    id,
                    expected: cycle
                }
            );
        }
        assert_eq!(
            remaining(f, id).await,
            units(MAX_OVERAGE),
            "cap restored in cycle {cycle}"
        );
        let base = 10 * cycle as u8;
        exec(
            f,
            provider,
            subs(f),
            &charge(id, cycle, MAX_OVERAGE - 1, base),
        )
        .await;
        exec(f, provider, subs(f), &charge(id, cycle, 1, base + 1)).await;
        let r = reverts(f, provider, subs(f), &charge(id, cycle, 1, base + 2)).await;
        assert_eq!(
            r,
            Revert::AllowanceExhausted {
                id,
                remaining: U256::ZERO
            }
        );
        let after = balance(f, subscriber).await;
        assert_eq!(
            before - after,
            units(AMOUNT + MAX_OVERAGE),
            "pulled in cycle {cycle}"
        );
        before = after;
    }
    assert_eq!(
        balance(f, addr(f, PAY_TO)).await,
        DEV_TOKENS + units(3 * (AMOUNT + MAX_OVERAGE))
    );
}
