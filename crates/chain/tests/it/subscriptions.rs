//! The subscriptions contract's behaviour, every case on every backend: plans, subscribing
//! (directly and by signature with a permit), renewals with time travel (a late one bills one
//! cycle, from its own time), failed renewals, pause / resume / cancel (directly and by
//! signature), and the per-cycle overage cap.

use alloy::{
    primitives::{Address, B256, U256, keccak256},
    sol_types::SolStruct,
};
use tollgate_chain::{
    Receipt, Revert,
    authorization::{Action, ActionKind, Permit, Subscribe, sign, subscriptions_domain},
    contracts::{SubscriptionState, Subscriptions, Token, read},
};
use tollgate_devnet::DEV_TOKENS;
use tollgate_testkit::Fixture;

use crate::contracts::{
    addr, balance, events, exec, key, now, on_every_backend, reverts, stranger_key, units,
    usdc_domain,
};

/// 30 days.
const INTERVAL: u64 = 30 * 24 * 3_600;
/// Billed per cycle.
const AMOUNT: u64 = 9_990_000;
/// The overage cap subscribers start with.
const MAX_OVERAGE: u64 = 500_000;

/// Dev accounts by role.
const PROVIDER: usize = 5;
const PAY_TO: usize = 6;
const OPERATOR: usize = 7;
const KEEPER: usize = 8;
const STRANGER: usize = 9;

fn subs(f: &Fixture) -> Address {
    f.deployment.subscriptions
}

/// Creates a plan by the provider (with the operator), checks it is stored, returns its id.
async fn create_plan(f: &Fixture, amount: u64, salt: u8) -> B256 {
    create_plan_for(f, units(amount), salt).await
}

async fn create_plan_for(f: &Fixture, amount: U256, salt: u8) -> B256 {
    let call = Subscriptions::createPlanCall {
        token: f.deployment.token,
        payTo: addr(f, PAY_TO),
        amount,
        interval: INTERVAL,
        operator: addr(f, OPERATOR),
        salt: B256::repeat_byte(salt),
    };
    let receipt = exec(f, addr(f, PROVIDER), subs(f), &call).await;
    let plan_id = read(
        f.chain.as_ref(),
        subs(f),
        &Subscriptions::planIdForCall {
            provider: addr(f, PROVIDER),
            salt: B256::repeat_byte(salt),
        },
    )
    .await
    .unwrap();
    let created = events::<Subscriptions::PlanCreated>(&receipt, subs(f));
    assert_eq!(created.len(), 1);
    assert_eq!(
        (created[0].planId, created[0].provider),
        (plan_id, addr(f, PROVIDER))
    );
    assert_eq!((created[0].amount, created[0].interval), (amount, INTERVAL));
    plan_id
}

/// Approves the subscriptions contract for `value` of subscriber `i`'s tokens.
async fn approve(f: &Fixture, i: usize, value: U256) {
    exec(
        f,
        addr(f, i),
        f.deployment.token,
        &Token::approveCall {
            spender: subs(f),
            value,
        },
    )
    .await;
}

/// Subscribes dev account `i` directly (after approving ample allowance); returns id and receipt.
async fn subscribe(f: &Fixture, i: usize, plan_id: B256, max_overage: u64) -> (B256, Receipt) {
    approve(f, i, units(1_000_000_000)).await;
    let nonce = subscriber_nonce(f, addr(f, i)).await;
    let receipt = exec(
        f,
        addr(f, i),
        subs(f),
        &Subscriptions::subscribeCall {
            planId: plan_id,
            maxOverage: units(max_overage),
        },
    )
    .await;
    let id = read(
        f.chain.as_ref(),
        subs(f),
        &Subscriptions::subscriptionIdForCall {
            planId: plan_id,
            subscriber: addr(f, i),
            nonce,
        },
    )
    .await
    .unwrap();
    (id, receipt)
}

async fn subscriber_nonce(f: &Fixture, subscriber: Address) -> U256 {
    read(
        f.chain.as_ref(),
        subs(f),
        &Subscriptions::noncesCall { subscriber },
    )
    .await
    .unwrap()
}

async fn status(f: &Fixture, id: B256) -> (SubscriptionState, u64) {
    let s = read(f.chain.as_ref(), subs(f), &Subscriptions::statusCall { id })
        .await
        .unwrap();
    (SubscriptionState::from_u8(s.state), s.paidThrough)
}

async fn subscription(f: &Fixture, id: B256) -> Subscriptions::subscriptionsReturn {
    read(
        f.chain.as_ref(),
        subs(f),
        &Subscriptions::subscriptionsCall { id },
    )
    .await
    .unwrap()
}

async fn remaining(f: &Fixture, id: B256) -> U256 {
    read(
        f.chain.as_ref(),
        subs(f),
        &Subscriptions::remainingAllowanceCall { id },
    )
    .await
    .unwrap()
}

fn charge(id: B256, cycle: u32, amount: u64, reference: u8) -> Subscriptions::chargeOverageCall {
    Subscriptions::chargeOverageCall {
        id,
        cycle,
        amount: units(amount),
        r#ref: B256::repeat_byte(reference),
    }
}

/// Signs an `Action` by dev account `i` with its current nonce, valid for an hour.
async fn sign_action(
    f: &Fixture,
    i: usize,
    id: B256,
    kind: ActionKind,
    value: u64,
) -> (U256, alloy::primitives::Bytes) {
    let deadline = U256::from(now(f).await + 3_600);
    let nonce = subscriber_nonce(f, addr(f, i)).await;
    let action = Action::new(id, kind, units(value), nonce, deadline);
    let domain = subscriptions_domain(f.chain.chain_id(), subs(f));
    (deadline, sign(&key(f, i), &action, &domain).unwrap())
}

/// Advances to the subscription's due time and collects `cycle` as the keeper.
async fn advance_and_collect(f: &Fixture, id: B256, cycle: u32) -> Receipt {
    f.chain.advance_time(INTERVAL).await.unwrap();
    let call = Subscriptions::collectCall { id, cycle };
    let collected = read(f.chain.as_ref(), subs(f), &call).await.unwrap();
    assert!(collected, "collect of cycle {cycle} simulates as paid");
    exec(f, addr(f, KEEPER), subs(f), &call).await
}

// ------------------------------------------------------------------------------------- plans

async fn plans_are_created_once_and_validated(f: &Fixture) {
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

// ------------------------------------------------------------------------------------- subscribing

async fn subscribe_bills_the_first_cycle(f: &Fixture) {
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

async fn subscribe_with_sig_and_permit(f: &Fixture) {
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

async fn deprecated_plan_refuses_new_subscribers(f: &Fixture) {
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

async fn subscribe_without_funds_creates_nothing(f: &Fixture) {
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

// ------------------------------------------------------------------------------------- renewals

async fn renewals_over_three_cycles(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let subscriber = addr(f, 1);
    let (id, receipt) = subscribe(f, 1, plan_id, 0).await;
    let mut paid_through = receipt.block_timestamp + INTERVAL;

    // Not due yet; and only the next cycle may be collected.
    let keeper = addr(f, KEEPER);
    let r = reverts(
        f,
        keeper,
        subs(f),
        &Subscriptions::collectCall { id, cycle: 2 },
    )
    .await;
    assert_eq!(r, Revert::NotDue { id, paid_through });
    for cycle in [0, 1, 3] {
        let r = reverts(
            f,
            keeper,
            subs(f),
            &Subscriptions::collectCall { id, cycle },
        )
        .await;
        assert_eq!(r, Revert::WrongCycle { id, expected: 2 });
    }
    let unknown = B256::repeat_byte(0x77);
    let r = reverts(
        f,
        keeper,
        subs(f),
        &Subscriptions::collectCall {
            id: unknown,
            cycle: 2,
        },
    )
    .await;
    assert_eq!(r, Revert::UnknownSubscription { id: unknown });

    for cycle in 2..=4u32 {
        let receipt = advance_and_collect(f, id, cycle).await;
        // A renewal starts its cycle when it is collected, never before the previous end (a
        // collection on time continues the paid period; see `late_renewal_bills_one_cycle`).
        assert!(receipt.block_timestamp >= paid_through);
        paid_through = receipt.block_timestamp + INTERVAL;
        let renewed = events::<Subscriptions::SubscriptionRenewed>(&receipt, subs(f));
        assert_eq!(renewed.len(), 1);
        assert_eq!(
            (
                renewed[0].id,
                renewed[0].cycle,
                renewed[0].amount,
                renewed[0].paidThrough
            ),
            (id, cycle, units(AMOUNT), paid_through)
        );
        assert_eq!(
            status(f, id).await,
            (SubscriptionState::Active, paid_through)
        );
        assert_eq!(subscription(f, id).await.cycle, cycle);
        let paid = units(u64::from(cycle) * AMOUNT);
        assert_eq!(balance(f, subscriber).await, DEV_TOKENS - paid);
        assert_eq!(balance(f, addr(f, PAY_TO)).await, DEV_TOKENS + paid);
        assert_eq!(
            balance(f, keeper).await,
            DEV_TOKENS,
            "the keeper is paid nothing"
        );
        // Collecting the same cycle again.
        let r = reverts(
            f,
            keeper,
            subs(f),
            &Subscriptions::collectCall { id, cycle },
        )
        .await;
        assert_eq!(
            r,
            Revert::WrongCycle {
                id,
                expected: cycle + 1
            }
        );
        let r = reverts(
            f,
            keeper,
            subs(f),
            &Subscriptions::collectCall {
                id,
                cycle: cycle + 1,
            },
        )
        .await;
        assert_eq!(r, Revert::NotDue { id, paid_through });
    }
}

/// Issue 33: a keeper down (or a relayer dry) for several intervals bills one cycle when it
/// comes back, starting at the renewal's time, never the backlog: the subscriber was refused as
/// overdue from `paidThrough` on, and is not billed for that time.
async fn late_renewal_bills_one_cycle(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let (subscriber, pay_to, keeper) = (addr(f, 2), addr(f, PAY_TO), addr(f, KEEPER));
    let (id, receipt) = subscribe(f, 2, plan_id, MAX_OVERAGE).await;
    let paid_through = receipt.block_timestamp + INTERVAL;
    // The first cycle's overage, used up.
    exec(
        f,
        addr(f, PROVIDER),
        subs(f),
        &charge(id, 1, MAX_OVERAGE, 1),
    )
    .await;
    let (held, owed) = (balance(f, subscriber).await, balance(f, pay_to).await);

    // Three intervals and a day pass after the paid period with no collection.
    f.chain
        .advance_time(4 * INTERVAL + 24 * 3_600)
        .await
        .unwrap();
    assert!(now(f).await >= paid_through + 3 * INTERVAL);
    let call = Subscriptions::collectCall { id, cycle: 2 };
    assert!(read(f.chain.as_ref(), subs(f), &call).await.unwrap());
    let receipt = exec(f, keeper, subs(f), &call).await;

    // One cycle moves, and the new one runs from the renewal.
    let renewed_through = receipt.block_timestamp + INTERVAL;
    let renewed = events::<Subscriptions::SubscriptionRenewed>(&receipt, subs(f));
    assert_eq!(
        renewed
            .iter()
            .map(|e| (e.id, e.cycle, e.amount, e.paidThrough))
            .collect::<Vec<_>>(),
        [(id, 2, units(AMOUNT), renewed_through)]
    );
    assert_eq!(balance(f, subscriber).await, held - units(AMOUNT));
    assert_eq!(balance(f, pay_to).await, owed + units(AMOUNT));
    assert_eq!(
        status(f, id).await,
        (SubscriptionState::Active, renewed_through)
    );
    let s = subscription(f, id).await;
    assert_eq!((s.cycle, s.overageUsed), (2, U256::ZERO));
    assert_eq!(remaining(f, id).await, units(MAX_OVERAGE));

    // Nothing else is due: the next cycle waits a whole interval from the renewal.
    let next = Subscriptions::collectCall { id, cycle: 3 };
    let r = reverts(f, keeper, subs(f), &next).await;
    assert_eq!(
        r,
        Revert::NotDue {
            id,
            paid_through: renewed_through
        }
    );
    f.chain.advance_time(INTERVAL / 2).await.unwrap();
    let r = reverts(f, keeper, subs(f), &next).await;
    assert_eq!(
        r,
        Revert::NotDue {
            id,
            paid_through: renewed_through
        }
    );
    assert_eq!(balance(f, subscriber).await, held - units(AMOUNT));

    // ... and is collected then, once.
    f.chain.advance_time(INTERVAL / 2).await.unwrap();
    let receipt = exec(f, keeper, subs(f), &next).await;
    assert!(receipt.block_timestamp >= renewed_through);
    assert_eq!(
        status(f, id).await,
        (
            SubscriptionState::Active,
            receipt.block_timestamp + INTERVAL
        )
    );
    assert_eq!(balance(f, subscriber).await, held - units(2 * AMOUNT));
    assert_eq!(balance(f, pay_to).await, owed + units(2 * AMOUNT));
}

async fn failed_renewal_pauses_and_resume_pays(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let (subscriber, sink, keeper) = (addr(f, 3), addr(f, 4), addr(f, KEEPER));
    let (id, receipt) = subscribe(f, 3, plan_id, MAX_OVERAGE).await;
    let paid_through = receipt.block_timestamp + INTERVAL;
    // The subscriber moves its tokens away, leaving one unit short of a cycle.
    let left = units(AMOUNT - 1);
    let away = balance(f, subscriber).await - left;
    exec(
        f,
        subscriber,
        f.deployment.token,
        &Token::transferCall {
            to: sink,
            value: away,
        },
    )
    .await;

    f.chain.advance_time(INTERVAL).await.unwrap();
    let call = Subscriptions::collectCall { id, cycle: 2 };
    assert!(
        !read(f.chain.as_ref(), subs(f), &call).await.unwrap(),
        "collect reports false"
    );
    let receipt = exec(f, keeper, subs(f), &call).await;
    let failed = events::<Subscriptions::RenewalFailed>(&receipt, subs(f));
    assert_eq!(failed.len(), 1);
    assert_eq!((failed[0].id, failed[0].cycle), (id, 2));
    assert_eq!(
        events::<Subscriptions::SubscriptionPaused>(&receipt, subs(f)).len(),
        1
    );
    assert!(events::<Subscriptions::SubscriptionRenewed>(&receipt, subs(f)).is_empty());
    assert_eq!(
        status(f, id).await,
        (SubscriptionState::Paused, paid_through)
    );
    assert_eq!(subscription(f, id).await.cycle, 1);
    assert_eq!(balance(f, subscriber).await, left);
    assert_eq!(
        balance(f, addr(f, PAY_TO)).await,
        DEV_TOKENS + units(AMOUNT)
    );

    // Paused: no collection, no overage.
    let r = reverts(f, keeper, subs(f), &call).await;
    assert_eq!(r, Revert::SubscriptionNotActive { id, state: 2 });
    // Overage of the last paid cycle is still owed; the next cycle's is not.
    let r = reverts(f, addr(f, PROVIDER), subs(f), &charge(id, 2, 1, 1)).await;
    assert_eq!(r, Revert::WrongCycle { id, expected: 1 });
    // Resuming while still short reverts (the due cycle must be paid).
    let r = reverts(f, subscriber, subs(f), &Subscriptions::resumeCall { id }).await;
    assert_eq!(
        r,
        Revert::InsufficientFunds {
            account: subscriber,
            balance: left,
            needed: units(AMOUNT)
        }
    );
    assert_eq!(status(f, id).await.0, SubscriptionState::Paused);

    // Topped up, the subscriber resumes: the due cycle is paid and a new period starts now.
    exec(
        f,
        sink,
        f.deployment.token,
        &Token::transferCall {
            to: subscriber,
            value: units(1),
        },
    )
    .await;
    let receipt = exec(f, subscriber, subs(f), &Subscriptions::resumeCall { id }).await;
    let new_paid_through = receipt.block_timestamp + INTERVAL;
    assert_eq!(
        status(f, id).await,
        (SubscriptionState::Active, new_paid_through)
    );
    let s = subscription(f, id).await;
    assert_eq!((s.cycle, s.overageUsed), (2, U256::ZERO));
    assert_eq!(balance(f, subscriber).await, U256::ZERO);
    assert_eq!(
        balance(f, addr(f, PAY_TO)).await,
        DEV_TOKENS + units(2 * AMOUNT)
    );
    let renewed = events::<Subscriptions::SubscriptionRenewed>(&receipt, subs(f));
    assert_eq!(renewed.len(), 1);
    assert_eq!(
        (renewed[0].cycle, renewed[0].paidThrough),
        (2, new_paid_through)
    );
    let resumed = events::<Subscriptions::SubscriptionResumed>(&receipt, subs(f));
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].paidThrough, new_paid_through);
}

// ---------------------------------------------------------------------- subscriber actions

async fn pause_resume_cancel_directly(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let (subscriber, stranger) = (addr(f, 1), addr(f, STRANGER));
    let (id, receipt) = subscribe(f, 1, plan_id, MAX_OVERAGE).await;
    let paid_through = receipt.block_timestamp + INTERVAL;
    let after_first = balance(f, subscriber).await;

    assert_eq!(
        reverts(f, stranger, subs(f), &Subscriptions::pauseCall { id }).await,
        Revert::Unauthorized { caller: stranger }
    );
    assert_eq!(
        reverts(f, stranger, subs(f), &Subscriptions::cancelCall { id }).await,
        Revert::Unauthorized { caller: stranger }
    );
    let r = reverts(
        f,
        addr(f, PROVIDER),
        subs(f),
        &Subscriptions::raiseAllowanceCall {
            id,
            newMaxOverage: units(1) << 100,
        },
    )
    .await;
    assert_eq!(
        r,
        Revert::Unauthorized {
            caller: addr(f, PROVIDER)
        }
    );
    let r = reverts(f, subscriber, subs(f), &Subscriptions::resumeCall { id }).await;
    assert_eq!(
        r,
        Revert::SubscriptionNotActive { id, state: 1 },
        "only a paused subscription resumes"
    );

    let receipt = exec(f, subscriber, subs(f), &Subscriptions::pauseCall { id }).await;
    assert_eq!(
        events::<Subscriptions::SubscriptionPaused>(&receipt, subs(f)).len(),
        1
    );
    assert_eq!(
        status(f, id).await,
        (SubscriptionState::Paused, paid_through)
    );
    let r = reverts(f, subscriber, subs(f), &Subscriptions::pauseCall { id }).await;
    assert_eq!(r, Revert::SubscriptionNotActive { id, state: 2 });

    // Resumed before the period ends: nothing is charged, the period is unchanged.
    let receipt = exec(f, subscriber, subs(f), &Subscriptions::resumeCall { id }).await;
    assert!(events::<Subscriptions::SubscriptionRenewed>(&receipt, subs(f)).is_empty());
    assert_eq!(
        status(f, id).await,
        (SubscriptionState::Active, paid_through)
    );
    assert_eq!(balance(f, subscriber).await, after_first);

    let receipt = exec(f, subscriber, subs(f), &Subscriptions::cancelCall { id }).await;
    assert_eq!(
        events::<Subscriptions::SubscriptionCancelled>(&receipt, subs(f)).len(),
        1
    );
    assert_eq!(status(f, id).await.0, SubscriptionState::Cancelled);
    let cancelled = Revert::SubscriptionNotActive { id, state: 3 };
    f.chain.advance_time(INTERVAL).await.unwrap();
    assert_eq!(
        reverts(
            f,
            addr(f, KEEPER),
            subs(f),
            &Subscriptions::collectCall { id, cycle: 2 }
        )
        .await,
        cancelled
    );
    // Usage metered before the cancellation is still owed: the last cycle can be charged, within
    // its cap, and no later one.
    let before = remaining(f, id).await;
    exec(f, addr(f, PROVIDER), subs(f), &charge(id, 1, 1, 1)).await;
    assert_eq!(remaining(f, id).await, before - units(1));
    assert_eq!(
        reverts(f, addr(f, PROVIDER), subs(f), &charge(id, 2, 1, 2)).await,
        Revert::WrongCycle { id, expected: 1 }
    );
    assert_eq!(
        reverts(f, subscriber, subs(f), &Subscriptions::resumeCall { id }).await,
        cancelled
    );
    assert_eq!(
        reverts(f, subscriber, subs(f), &Subscriptions::pauseCall { id }).await,
        cancelled
    );
    assert_eq!(
        reverts(f, subscriber, subs(f), &Subscriptions::cancelCall { id }).await,
        cancelled
    );
    let r = reverts(
        f,
        subscriber,
        subs(f),
        &Subscriptions::raiseAllowanceCall {
            id,
            newMaxOverage: units(MAX_OVERAGE + 1),
        },
    )
    .await;
    assert_eq!(r, cancelled);
    assert_eq!(
        balance(f, subscriber).await,
        after_first - units(1),
        "nothing more was pulled than the owed overage"
    );
}

async fn pause_resume_cancel_by_signature(f: &Fixture) {
    let plan_id = create_plan(f, AMOUNT, 1).await;
    let (subscriber, relayer) = (addr(f, 2), addr(f, KEEPER));
    let (id, _) = subscribe(f, 2, plan_id, MAX_OVERAGE).await;
    let domain = subscriptions_domain(f.chain.chain_id(), subs(f));

    // Pause, submitted by a relayer.
    let (deadline, signature) = sign_action(f, 2, id, ActionKind::Pause, 0).await;
    let pause = Subscriptions::pauseWithSigCall {
        id,
        deadline,
        signature,
    };
    // A resume signature does not pause, and a stranger's signature does nothing.
    let (_, resume_sig) = sign_action(f, 2, id, ActionKind::Resume, 0).await;
    let r = reverts(
        f,
        relayer,
        subs(f),
        &Subscriptions::pauseWithSigCall {
            id,
            deadline,
            signature: resume_sig,
        },
    )
    .await;
    assert_eq!(r, Revert::InvalidSignature);
    let nonce = subscriber_nonce(f, subscriber).await;
    let forged = sign(
        &key(f, 3),
        &Action::new(id, ActionKind::Pause, U256::ZERO, nonce, deadline),
        &domain,
    )
    .unwrap();
    let r = reverts(
        f,
        relayer,
        subs(f),
        &Subscriptions::pauseWithSigCall {
            id,
            deadline,
            signature: forged,
        },
    )
    .await;
    assert_eq!(r, Revert::InvalidSignature);
    exec(f, relayer, subs(f), &pause).await;
    assert_eq!(status(f, id).await.0, SubscriptionState::Paused);
    assert_eq!(subscriber_nonce(f, subscriber).await, nonce + U256::from(1));
    // Replay: the nonce moved on.
    assert_eq!(
        reverts(f, relayer, subs(f), &pause).await,
        Revert::InvalidSignature
    );

    // Expired.
    let past = U256::from(now(f).await - 1);
    let nonce = subscriber_nonce(f, subscriber).await;
    let stale = sign(
        &key(f, 2),
        &Action::new(id, ActionKind::Resume, U256::ZERO, nonce, past),
        &domain,
    )
    .unwrap();
    let r = reverts(
        f,
        relayer,
        subs(f),
        &Subscriptions::resumeWithSigCall {
            id,
            deadline: past,
            signature: stale,
        },
    )
    .await;
    assert_eq!(r, Revert::SignatureExpired { deadline: past });

    let (deadline, signature) = sign_action(f, 2, id, ActionKind::Resume, 0).await;
    exec(
        f,
        relayer,
        subs(f),
        &Subscriptions::resumeWithSigCall {
            id,
            deadline,
            signature,
        },
    )
    .await;
    assert_eq!(status(f, id).await.0, SubscriptionState::Active);

    let (deadline, signature) =
        sign_action(f, 2, id, ActionKind::RaiseAllowance, MAX_OVERAGE * 2).await;
    let receipt = exec(
        f,
        relayer,
        subs(f),
        &Subscriptions::raiseAllowanceWithSigCall {
            id,
            newMaxOverage: units(MAX_OVERAGE * 2),
            deadline,
            signature: signature.clone(),
        },
    )
    .await;
    let raised = events::<Subscriptions::AllowanceRaised>(&receipt, subs(f));
    assert_eq!(
        (raised.len(), raised[0].maxOverage),
        (1, units(MAX_OVERAGE * 2))
    );
    assert_eq!(subscription(f, id).await.maxOverage, units(MAX_OVERAGE * 2));

    let (deadline, signature) = sign_action(f, 2, id, ActionKind::Cancel, 0).await;
    exec(
        f,
        relayer,
        subs(f),
        &Subscriptions::cancelWithSigCall {
            id,
            deadline,
            signature: signature.clone(),
        },
    )
    .await;
    assert_eq!(status(f, id).await.0, SubscriptionState::Cancelled);
    f.chain.advance_time(INTERVAL).await.unwrap();
    let r = reverts(
        f,
        relayer,
        subs(f),
        &Subscriptions::collectCall { id, cycle: 2 },
    )
    .await;
    assert_eq!(r, Revert::SubscriptionNotActive { id, state: 3 });
    let r = reverts(f, addr(f, PROVIDER), subs(f), &charge(id, 2, 1, 1)).await;
    assert_eq!(r, Revert::WrongCycle { id, expected: 1 });
    let unknown = B256::repeat_byte(0x66);
    let r = reverts(
        f,
        relayer,
        subs(f),
        &Subscriptions::cancelWithSigCall {
            id: unknown,
            deadline,
            signature,
        },
    )
    .await;
    assert_eq!(r, Revert::UnknownSubscription { id: unknown });
    assert_eq!(balance(f, subscriber).await, DEV_TOKENS - units(AMOUNT));
}

// ------------------------------------------------------------------------------------- overage

async fn overage_is_capped_per_cycle(f: &Fixture) {
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

async fn raise_allowance_then_charge(f: &Fixture) {
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

async fn overage_cap_resets_each_cycle(f: &Fixture) {
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

on_every_backend!(
    plans_are_created_once_and_validated,
    subscribe_bills_the_first_cycle,
    subscribe_with_sig_and_permit,
    deprecated_plan_refuses_new_subscribers,
    subscribe_without_funds_creates_nothing,
    renewals_over_three_cycles,
    late_renewal_bills_one_cycle,
    failed_renewal_pauses_and_resume_pays,
    pause_resume_cancel_directly,
    pause_resume_cancel_by_signature,
    overage_is_capped_per_cycle,
    raise_allowance_then_charge,
    overage_cap_resets_each_cycle,
);
