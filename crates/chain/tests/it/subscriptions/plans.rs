//! Plans: created once, validated.

use super::*;

pub(super) async fn plans_are_created_once_and_validated(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let plan = read(
        f.chain.as_ref(),
        subs(f),
        &Subscriptions::plansCall { planId: plan_id },
    )
    .await
    .unwrap();
    assert_eq!(
        (plan.provider, plan.operator, plan.token),
        (addr(f, PROVIDER), addr(f, OPERATOR), f.deployment.token)
    );
    assert_eq!(
        (plan.payTo, plan.amount, plan.interval, plan.deprecated),
        (addr(f, PAY_TO), units(AMOUNT), INTERVAL, false)
    );
    let expected_id = keccak256(
        [
            &[0u8; 12][..],
            addr(f, PROVIDER).as_slice(),
            B256::repeat_byte(1).as_slice(),
        ]
        .concat(),
    );
    assert_eq!(
        plan_id, expected_id,
        "planIdFor = keccak256(abi.encode(provider, salt))"
    );

    let provider = addr(f, PROVIDER);
    let base = Subscriptions::createPlanCall {
        token: f.deployment.token,
        payTo: addr(f, PAY_TO),
        amount: units(AMOUNT),
        interval: INTERVAL,
        operator: Address::ZERO,
        salt: B256::repeat_byte(1),
    };
    assert_eq!(
        reverts(f, provider, subs(f), &base).await,
        Revert::PlanExists { plan_id }
    );
    // The same salt from another provider is another plan.
    exec(f, addr(f, STRANGER), subs(f), &base).await;

    let fresh = Subscriptions::createPlanCall {
        salt: B256::repeat_byte(2),
        ..base.clone()
    };
    for bad in [
        Subscriptions::createPlanCall {
            amount: U256::ZERO,
            ..fresh.clone()
        },
        Subscriptions::createPlanCall {
            interval: 0,
            ..fresh.clone()
        },
        Subscriptions::createPlanCall {
            token: Address::ZERO,
            ..fresh.clone()
        },
        Subscriptions::createPlanCall {
            payTo: Address::ZERO,
            ..fresh.clone()
        },
    ] {
        assert_eq!(
            reverts(f, provider, subs(f), &bad).await,
            Revert::InvalidPlan
        );
    }

    // Deprecation: provider or operator only, idempotent.
    let deprecate = Subscriptions::deprecatePlanCall { planId: plan_id };
    let stranger = addr(f, STRANGER);
    assert_eq!(
        reverts(f, stranger, subs(f), &deprecate).await,
        Revert::Unauthorized { caller: stranger }
    );
    let receipt = exec(f, addr(f, OPERATOR), subs(f), &deprecate).await;
    assert_eq!(
        events::<Subscriptions::PlanRetired>(&receipt, subs(f)).len(),
        1
    );
    let receipt = exec(f, provider, subs(f), &deprecate).await;
    assert!(
        events::<Subscriptions::PlanRetired>(&receipt, subs(f)).is_empty(),
        "retired once"
    );
    let unknown = Subscriptions::deprecatePlanCall {
        planId: B256::repeat_byte(0xee),
    };
    assert_eq!(
        reverts(f, provider, subs(f), &unknown).await,
        Revert::UnknownPlan {
            plan_id: B256::repeat_byte(0xee)
        }
    );
}
