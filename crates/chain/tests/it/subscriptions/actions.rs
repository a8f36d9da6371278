//! The subscriber's actions: pause, resume and cancel, directly and by signature.

use super::*;

pub(super) async fn pause_resume_cancel_directly(f: &Fixture) {
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

pub(super) async fn pause_resume_cancel_by_signature(f: &Fixture) {
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
