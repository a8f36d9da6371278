//! Subscribing: the first cycle billed, by signature with a permit, deprecated plans, and a
//! subscriber without funds.

use super::*;

pub(super) async fn subscribe_bills_the_first_cycle(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let subscriber = addr(f, 1);
    let (id, receipt) = subscribe(f, 1, plan_id, MAX_OVERAGE).await;
    let paid_through = receipt.block_timestamp + INTERVAL;

    assert_eq!(
        status(f, id).await,
        (SubscriptionState::Active, paid_through)
    );
    let s = subscription(f, id).await;
    assert_eq!(
        (s.planId, s.subscriber, s.cycle, s.paidThrough),
        (plan_id, subscriber, 1, paid_through)
    );
    assert_eq!(
        (s.maxOverage, s.overageUsed),
        (units(MAX_OVERAGE), U256::ZERO)
    );
    assert_eq!(balance(f, subscriber).await, DEV_TOKENS - units(AMOUNT));
    assert_eq!(
        balance(f, addr(f, PAY_TO)).await,
        DEV_TOKENS + units(AMOUNT)
    );
    assert_eq!(
        balance(f, subs(f)).await,
        U256::ZERO,
        "the contract holds nothing"
    );
    assert_eq!(subscriber_nonce(f, subscriber).await, U256::from(1));
    assert_eq!(remaining(f, id).await, units(MAX_OVERAGE));

    let created = events::<Subscriptions::SubscriptionCreated>(&receipt, subs(f));
    assert_eq!(created.len(), 1);
    assert_eq!(
        (created[0].id, created[0].planId, created[0].subscriber),
        (id, plan_id, subscriber)
    );
    assert_eq!(
        (created[0].maxOverage, created[0].paidThrough),
        (units(MAX_OVERAGE), paid_through)
    );
    let renewed = events::<Subscriptions::SubscriptionRenewed>(&receipt, subs(f));
    assert_eq!(renewed.len(), 1);
    assert_eq!(
        (
            renewed[0].id,
            renewed[0].cycle,
            renewed[0].amount,
            renewed[0].paidThrough
        ),
        (id, 1, units(AMOUNT), paid_through)
    );

    // A second subscription to the same plan is another id (the nonce moved on).
    let (second, _) = subscribe(f, 1, plan_id, 0).await;
    assert_ne!(second, id);
    assert_eq!(balance(f, subscriber).await, DEV_TOKENS - units(2 * AMOUNT));
    // Unknown plan.
    let r = reverts(
        f,
        subscriber,
        subs(f),
        &Subscriptions::subscribeCall {
            planId: B256::repeat_byte(9),
            maxOverage: U256::ZERO,
        },
    )
    .await;
    assert_eq!(
        r,
        Revert::UnknownPlan {
            plan_id: B256::repeat_byte(9)
        }
    );
}

pub(super) async fn subscribe_with_sig_and_permit(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let (subscriber, relayer) = (addr(f, 2), addr(f, KEEPER));
    let chain = f.chain.as_ref();
    let deadline = U256::from(now(f).await + 3_600);
    let domain = subscriptions_domain(chain.chain_id(), subs(f));
    let typehash = read(chain, subs(f), &Subscriptions::SUBSCRIBE_TYPEHASHCall {})
        .await
        .unwrap();
    assert_eq!(
        typehash,
        keccak256(Subscribe::eip712_encode_type().as_bytes())
    );
    let typehash = read(chain, subs(f), &Subscriptions::ACTION_TYPEHASHCall {})
        .await
        .unwrap();
    assert_eq!(typehash, keccak256(Action::eip712_encode_type().as_bytes()));
    assert_eq!(
        read(chain, subs(f), &Subscriptions::DOMAIN_SEPARATORCall {})
            .await
            .unwrap(),
        domain.separator()
    );

    let intent = Subscribe {
        planId: plan_id,
        subscriber,
        maxOverage: units(MAX_OVERAGE),
        nonce: U256::ZERO,
        deadline,
    };
    let signature = sign(&key(f, 2), &intent, &domain).unwrap();
    let permit_value = units(12 * AMOUNT);
    let permit = Permit {
        owner: subscriber,
        spender: subs(f),
        value: permit_value,
        nonce: U256::ZERO,
        deadline,
    };
    let permit_signature = sign(&key(f, 2), &permit, &usdc_domain(f)).unwrap();
    let call = Subscriptions::subscribeWithSigCall {
        planId: plan_id,
        subscriber,
        maxOverage: units(MAX_OVERAGE),
        deadline,
        signature: signature.clone(),
        permitValue: permit_value,
        permitDeadline: deadline,
        permitSignature: permit_signature.clone(),
    };
    // Someone else's signature is refused.
    let forged = Subscriptions::subscribeWithSigCall {
        signature: sign(&key(f, 3), &intent, &domain).unwrap(),
        ..call.clone()
    };
    assert_eq!(
        reverts(f, relayer, subs(f), &forged).await,
        Revert::InvalidSignature
    );

    let receipt = exec(f, relayer, subs(f), &call).await;
    let id = read(
        chain,
        subs(f),
        &Subscriptions::subscriptionIdForCall {
            planId: plan_id,
            subscriber,
            nonce: U256::ZERO,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        status(f, id).await,
        (
            SubscriptionState::Active,
            receipt.block_timestamp + INTERVAL
        )
    );
    assert_eq!(subscription(f, id).await.subscriber, subscriber);
    assert_eq!(balance(f, subscriber).await, DEV_TOKENS - units(AMOUNT));
    assert_eq!(
        balance(f, addr(f, PAY_TO)).await,
        DEV_TOKENS + units(AMOUNT)
    );
    assert_eq!(
        balance(f, relayer).await,
        DEV_TOKENS,
        "the relayer pays gas only"
    );
    let allowance = read(
        chain,
        f.deployment.token,
        &Token::allowanceCall {
            owner: subscriber,
            spender: subs(f),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        allowance,
        permit_value - units(AMOUNT),
        "the permit was applied, then the first cycle pulled"
    );
    assert_eq!(subscriber_nonce(f, subscriber).await, U256::from(1));
    assert_eq!(
        events::<Subscriptions::SubscriptionCreated>(&receipt, subs(f)).len(),
        1
    );

    // Replayed: the nonce moved on, so the signature no longer verifies.
    assert_eq!(
        reverts(f, relayer, subs(f), &call).await,
        Revert::InvalidSignature
    );
    // A fresh intent whose (already used) permit fails is still accepted: the allowance decides.
    let intent2 = Subscribe {
        nonce: U256::from(1),
        maxOverage: U256::ZERO,
        ..intent
    };
    let call2 = Subscriptions::subscribeWithSigCall {
        maxOverage: U256::ZERO,
        signature: sign(&key(f, 2), &intent2, &domain).unwrap(),
        ..call.clone()
    };
    exec(f, relayer, subs(f), &call2).await;
    assert_eq!(balance(f, subscriber).await, DEV_TOKENS - units(2 * AMOUNT));
    // Expired intent.
    let past = U256::from(now(f).await - 1);
    let intent3 = Subscribe {
        nonce: U256::from(2),
        deadline: past,
        ..intent2
    };
    let call3 = Subscriptions::subscribeWithSigCall {
        maxOverage: U256::ZERO,
        deadline: past,
        signature: sign(&key(f, 2), &intent3, &domain).unwrap(),
        ..call
    };
    assert_eq!(
        reverts(f, relayer, subs(f), &call3).await,
        Revert::SignatureExpired { deadline: past }
    );
}

pub(super) async fn deprecated_plan_refuses_new_subscribers(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let (existing, _) = subscribe(f, 1, plan_id, 0).await;
    exec(
        f,
        addr(f, PROVIDER),
        subs(f),
        &Subscriptions::deprecatePlanCall { planId: plan_id },
    )
    .await;
    approve(f, 2, units(AMOUNT)).await;
    let r = reverts(
        f,
        addr(f, 2),
        subs(f),
        &Subscriptions::subscribeCall {
            planId: plan_id,
            maxOverage: U256::ZERO,
        },
    )
    .await;
    assert_eq!(r, Revert::PlanDeprecated { plan_id });
    assert_eq!(balance(f, addr(f, 2)).await, DEV_TOKENS);
    // Existing subscriptions keep renewing.
    advance_and_collect(f, existing, 2).await;
    assert_eq!(subscription(f, existing).await.cycle, 2);
    assert_eq!(
        balance(f, addr(f, PAY_TO)).await,
        DEV_TOKENS + units(2 * AMOUNT)
    );
}

pub(super) async fn subscribe_without_funds_creates_nothing(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let relayer = addr(f, KEEPER);
    let chain = f.chain.as_ref();
    // A subscriber with no tokens, by signature with a permit (so the allowance is not the issue).
    let nobody = stranger_key(7);
    let deadline = U256::from(now(f).await + 3_600);
    let domain = subscriptions_domain(chain.chain_id(), subs(f));
    let intent = Subscribe {
        planId: plan_id,
        subscriber: nobody.address(),
        maxOverage: U256::ZERO,
        nonce: U256::ZERO,
        deadline,
    };
    let permit = Permit {
        owner: nobody.address(),
        spender: subs(f),
        value: units(AMOUNT),
        nonce: U256::ZERO,
        deadline,
    };
    let call = Subscriptions::subscribeWithSigCall {
        planId: plan_id,
        subscriber: nobody.address(),
        maxOverage: U256::ZERO,
        deadline,
        signature: sign(&nobody, &intent, &domain).unwrap(),
        permitValue: units(AMOUNT),
        permitDeadline: deadline,
        permitSignature: sign(&nobody, &permit, &usdc_domain(f)).unwrap(),
    };
    let r = reverts(f, relayer, subs(f), &call).await;
    assert_eq!(
        r,
        Revert::InsufficientFunds {
            account: nobody.address(),
            balance: U256::ZERO,
            needed: units(AMOUNT)
        }
    );
    let id = read(
        chain,
        subs(f),
        &Subscriptions::subscriptionIdForCall {
            planId: plan_id,
            subscriber: nobody.address(),
            nonce: U256::ZERO,
        },
    )
    .await
    .unwrap();
    assert_eq!(status(f, id).await, (SubscriptionState::None, 0));
    assert_eq!(subscriber_nonce(f, nobody.address()).await, U256::ZERO);
    let allowance = read(
        chain,
        f.deployment.token,
        &Token::allowanceCall {
            owner: nobody.address(),
            spender: subs(f),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        allowance,
        U256::ZERO,
        "the permit was rolled back with the rest"
    );

    // A dev account whose balance is one unit short of the plan amount.
    let pricey = create_plan_for(f, DEV_TOKENS + units(1), 2).await;
    approve(f, 3, U256::MAX).await;
    let r = reverts(
        f,
        addr(f, 3),
        subs(f),
        &Subscriptions::subscribeCall {
            planId: pricey,
            maxOverage: U256::ZERO,
        },
    )
    .await;
    assert_eq!(
        r,
        Revert::InsufficientFunds {
            account: addr(f, 3),
            balance: DEV_TOKENS,
            needed: DEV_TOKENS + units(1)
        }
    );
    assert_eq!(subscriber_nonce(f, addr(f, 3)).await, U256::ZERO);
    // Enough tokens but no allowance.
    let r = reverts(
        f,
        addr(f, 4),
        subs(f),
        &Subscriptions::subscribeCall {
            planId: plan_id,
            maxOverage: U256::ZERO,
        },
    )
    .await;
    assert_eq!(
        r,
        Revert::InsufficientAllowance {
            spender: subs(f),
            allowance: U256::ZERO,
            needed: units(AMOUNT)
        }
    );
}
