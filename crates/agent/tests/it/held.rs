//! Subscriptions the agent holds across processes (its state file), and subscriptions a request
//! names itself (`X-Service-Sub`): refused ones never turn into a one-time payment unless asked,
//! and an exhausted allowance is raised within the policy.

use std::time::{Duration, Instant};

use alloy::{primitives::B256, sol_types::SolCall};
use tollgate_agent::{
    Agent, Amount, Error, PayRequest, PaymentKind, SpendPolicy, Subscribe, X_SERVICE_SUB,
};
use tollgate_chain::{TxRequest, U256, WaitOptions, contracts::Subscriptions};

use crate::{
    pay_subscription::{
        METERED, agent_of, created_events, fetch, gate, nonce, provider_key, published_plan,
        report_app, subscribing, subscription_of,
    },
    subscribe::{AMOUNT, create_plan},
    support::{App, Harness, PAYEE, PAYER, PRICE},
};

/// An agent of [`PAYER`] under `policy`, remembering its subscriptions in `state`.
fn agent_with_state(h: &Harness, policy: SpendPolicy, state: &std::path::Path) -> Agent {
    h.agent_builder(PAYER, policy)
        .facilitators([h.url.clone()])
        .state_file(state)
        .build()
        .unwrap()
}

/// `GET /v1/report` naming subscription `id`.
fn named(app: &App, id: B256) -> PayRequest {
    PayRequest::get(&app.url("/v1/report")).unwrap().header(
        X_SERVICE_SUB.parse().unwrap(),
        id.to_string().parse().unwrap(),
    )
}

/// Sends `call` to the subscriptions contract as [`PAYER`] (pause, cancel: paying gas).
async fn as_subscriber(h: &Harness, call: impl SolCall) {
    h.fixture
        .chain
        .send_and_wait(
            TxRequest::call(
                h.address(PAYER),
                h.fixture.deployment.subscriptions,
                call.abi_encode(),
            ),
            WaitOptions::default(),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_agent_reuses_the_subscription_its_state_file_remembers() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 11).await;
    let gate = gate(&h, plan_id, None).await;
    let app = report_app(&gate, plan_id, false).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("agent.state.json");
    let payer = h.address(PAYER);
    let (balance, payee) = (h.balance(payer).await, h.balance(h.address(PAYEE)).await);

    // The first process subscribes (first cycle billed) and remembers it.
    let first = agent_with_state(&h, subscribing(0), &state);
    let id = subscription_of(&fetch(&first, &app).await);
    drop(first);
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(text.contains(&id.to_string()), "{text}");
    assert!(text.contains(&plan_id.to_string()), "{text}");

    // A second process with the same file serves on it: nothing paid, nothing created.
    let second = agent_with_state(&h, subscribing(0), &state);
    let r = fetch(&second, &app).await;
    assert_eq!(subscription_of(&r), id);
    assert_eq!(r.payment.unwrap().amount, Amount::ZERO);
    assert_eq!(second.spent(), Amount::ZERO);
    assert_eq!(nonce(&h, payer).await, U256::from(1));
    assert_eq!(created_events(&h).await, 1);
    assert_eq!(h.balance(payer).await, balance - U256::from(AMOUNT));
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee + U256::from(AMOUNT)
    );
    assert_eq!(app.hits(), 2);

    // A process without the file finds it on chain (the facilitator's signed listing) and
    // adopts it rather than subscribing again.
    let stateless = agent_of(&h, PAYER, subscribing(0));
    let r = fetch(&stateless, &app).await;
    assert_eq!(subscription_of(&r), id);
    assert_eq!(stateless.spent(), Amount::ZERO);
    assert_eq!(created_events(&h).await, 1);

    // Cancelled: the next process forgets it (one-time payment this time), and the file too.
    as_subscriber(&h, Subscriptions::cancelCall { id }).await;
    let started = Instant::now();
    loop {
        let third = agent_with_state(&h, subscribing(0), &state);
        let r = fetch(&third, &app).await;
        if r.payment.as_ref().unwrap().kind == PaymentKind::Tollgate {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never refused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(!text.contains(&id.to_string()), "{text}");

    // A subscription made with `Agent::subscribe` is remembered as well.
    let other_plan = create_plan(&h, 12).await;
    let sub = agent_with_state(&h, subscribing(0), &state)
        .subscribe(Subscribe::new(other_plan, Amount::ZERO).facilitator(h.url.clone()))
        .await
        .unwrap();
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(text.contains(&sub.id.to_string()), "{text}");

    // Another key's agent refuses the file.
    let err = h
        .agent_builder(crate::pay_subscription::OTHER, subscribing(0))
        .state_file(&state)
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::StateFile { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_paused_subscription_fails_unless_one_time_is_asked_for() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 13).await;
    let gate = gate(&h, plan_id, None).await;
    let app = report_app(&gate, plan_id, false).await;
    let payer = h.address(PAYER);
    let agent = agent_of(&h, PAYER, subscribing(0));
    let sub = agent
        .subscribe(Subscribe::new(plan_id, Amount::ZERO))
        .await
        .unwrap();
    // Served on it while active.
    let r = agent.pay(named(&app, sub.id)).await.unwrap();
    assert_eq!(r.status, 200);
    let p = r.payment.expect("the gate's receipt says how it was paid");
    assert_eq!(p.kind, PaymentKind::Subscription { id: sub.id });
    assert_eq!((p.amount, p.metered), (Amount::ZERO, Some(Amount::ZERO)));
    assert_eq!(p.header, sub.id.to_string());

    as_subscriber(&h, Subscriptions::pauseCall { id: sub.id }).await;
    let balance = h.balance(payer).await;
    // Refused by name, nothing paid (until the gate sees the pause it still serves).
    let started = Instant::now();
    let err = loop {
        match agent.pay(named(&app, sub.id)).await {
            Err(e) => break e,
            Ok(r) => {
                assert_eq!(r.status, 200);
                assert_eq!(r.payment.unwrap().amount, Amount::ZERO);
            }
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never refused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(matches!(err, Error::SubscriptionNotActive), "{err:?}");
    assert_eq!(h.balance(payer).await, balance);

    // Asked for: exactly one one-time payment, without X-Service-Sub.
    let r = agent
        .pay(named(&app, sub.id).fallback_one_time())
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let p = r.payment.unwrap();
    assert_eq!(p.kind, PaymentKind::Tollgate);
    assert_eq!(p.amount, Amount::from_units(PRICE));
    assert!(r.earlier_payments.is_empty());
    assert_eq!(h.balance(payer).await, balance - U256::from(PRICE));
    assert_eq!(nonce(&h, payer).await, U256::from(1), "no new subscription");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_named_subscription_is_raised_within_the_policy_or_refused() {
    let h = Harness::new().await;
    let api_key = provider_key(&h).await;
    let plan_id = published_plan(&h, &api_key).await;
    let gate = gate(&h, plan_id, Some(api_key)).await;
    let app = report_app(&gate, plan_id, true).await;
    let payer = h.address(PAYER);
    // Subscribed with room for one metered request.
    let plain = agent_of(&h, PAYER, subscribing(METERED));
    let sub = plain
        .subscribe(Subscribe::new(plan_id, Amount::from_units(METERED)))
        .await
        .unwrap();
    let served = plain.pay(named(&app, sub.id)).await.unwrap();
    assert_eq!(served.status, 200);
    let metered = served.payment.and_then(|p| p.metered);
    assert_eq!(
        metered,
        Some(Amount::from_units(METERED)),
        "the receipt names the deduction"
    );
    let balance = h.balance(payer).await;

    // Exhausted, and the policy allows no raise: refused by name, nothing paid.
    let err = plain.pay(named(&app, sub.id)).await.unwrap_err();
    assert!(matches!(err, Error::AllowanceExhausted), "{err:?}");
    assert_eq!(h.balance(payer).await, balance);
    assert_eq!(app.hits(), 1);

    // A policy that raises up to three requests' worth: raised once, served.
    let raising = agent_of(
        &h,
        PAYER,
        subscribing(METERED).raise_overage_to(Amount::from_units(3 * METERED)),
    );
    assert_eq!(raising.pay(named(&app, sub.id)).await.unwrap().status, 200);
    assert_eq!(raising.spent(), Amount::from_units(2 * METERED));
    assert_eq!(raising.pay(named(&app, sub.id)).await.unwrap().status, 200);
    // At the ceiling: refused, not raised again.
    let err = raising.pay(named(&app, sub.id)).await.unwrap_err();
    assert!(matches!(err, Error::AllowanceExhausted), "{err:?}");
    assert_eq!(app.hits(), 3);

    // With the fallback: one one-time payment. (Overage is charged on-chain in batches, so the
    // balance is compared around this one call.)
    let before = h.balance(payer).await;
    let r = raising
        .pay(named(&app, sub.id).fallback_one_time())
        .await
        .unwrap();
    assert_eq!(r.payment.unwrap().kind, PaymentKind::Tollgate);
    assert_eq!(h.balance(payer).await, before - U256::from(PRICE));
    assert_eq!(app.hits(), 4);

    // The agent's own subscriptions are raised too (pay_on_subscription's path).
    let auto = agent_of(
        &h,
        PAYER,
        subscribing(METERED).raise_overage_to(Amount::from_units(4 * METERED)),
    );
    auto.use_subscription(plan_id, sub.id);
    let r = fetch(&auto, &app).await;
    assert_eq!(subscription_of(&r), sub.id);
    assert_eq!(app.hits(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lifecycle_is_gasless_listed_and_the_held_subscription_released() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 14).await;
    let gate = gate(&h, plan_id, None).await;
    let app = report_app(&gate, plan_id, false).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("agent.state.json");
    let payer = h.address(PAYER);
    let agent = agent_with_state(&h, subscribing(0), &state);
    let id = subscription_of(&fetch(&agent, &app).await);
    let gas = h.fixture.chain.balance(payer).await.unwrap();

    // Listed: this agent's only; another agent lists its own (none) and cannot act on it.
    let mine = agent.subscriptions(None, None).await.unwrap();
    assert_eq!(mine.iter().map(|s| s.id).collect::<Vec<_>>(), [id]);
    let other = agent_of(&h, crate::pay_subscription::OTHER, subscribing(0));
    assert!(other.subscriptions(None, None).await.unwrap().is_empty());
    let err = other
        .pause(tollgate_agent::SubscriptionRef::new(id))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotSubscriber { .. }), "{err:?}");

    let target = tollgate_agent::SubscriptionRef::new(id);
    let paused = agent.pause(target.clone()).await.unwrap();
    assert_eq!(paused.status, tollgate_agent::SubscriptionStatus::Paused);
    // Again: answered as it is.
    let again = agent.pause(target.clone()).await.unwrap();
    assert_eq!(again.status, tollgate_agent::SubscriptionStatus::Paused);
    let started = Instant::now();
    while !matches!(
        agent.pay(named(&app, id)).await,
        Err(Error::SubscriptionNotActive)
    ) {
        assert!(started.elapsed() < Duration::from_secs(10), "never refused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let resumed = agent.resume(target.clone()).await.unwrap();
    assert_eq!(resumed.status, tollgate_agent::SubscriptionStatus::Active);
    let started = Instant::now();
    while agent.pay(named(&app, id)).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never served again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Cancelled: final, released here and in the state file.
    let cancelled = agent.cancel(target.clone()).await.unwrap();
    assert_eq!(
        cancelled.status,
        tollgate_agent::SubscriptionStatus::Cancelled
    );
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(!text.contains(&id.to_string()), "{text}");
    let err = agent.resume(target).await.unwrap_err();
    assert!(matches!(err, Error::SubscriptionNotActive), "{err:?}");
    // No gas paid by the subscriber.
    assert_eq!(h.fixture.chain.balance(payer).await.unwrap(), gas);

    // The next request subscribes anew.
    let renewed = subscription_of(&fetch(&agent, &app).await);
    assert_ne!(renewed, id);
    assert_eq!(
        nonce(&h, payer).await,
        U256::from(5),
        "subscribe, pause, resume, cancel, subscribe"
    );
}
