//! Renewals with time travel: three cycles, a late renewal (one cycle, from its own time), and a
//! failed renewal that pauses until a resume pays.

use super::*;

pub(super) async fn renewals_over_three_cycles(f: &Fixture) {
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
pub(super) async fn late_renewal_bills_one_cycle(f: &Fixture) {
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

pub(super) async fn failed_renewal_pauses_and_resume_pays(f: &Fixture) {
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
