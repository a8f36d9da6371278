//! `Agent::subscribe` end to end: the devnet, a plan created on-chain, the real facilitator's
//! relay.

use alloy::{primitives::B256, sol_types::SolCall};
use tollgate_agent::{Agent, Amount, Error, Refusal, Subscribe, SubscriptionStatus};
use tollgate_chain::{
    Address, TxRequest, U256, WaitOptions,
    contracts::{self, Subscriptions},
};

use crate::support::{Harness, NETWORK, PAYEE, PAYER, policy};

pub const PROVIDER: usize = 5;
pub const AMOUNT: u64 = 2_000_000;
pub const INTERVAL: u64 = 7 * 24 * 3600;

/// A plan of [`PROVIDER`]'s billing [`AMOUNT`] to [`PAYEE`] every [`INTERVAL`], created on-chain.
pub async fn create_plan(h: &Harness, salt: u8) -> B256 {
    let f = &h.fixture;
    let provider = h.address(PROVIDER);
    let call = Subscriptions::createPlanCall {
        token: h.token(),
        payTo: h.address(PAYEE),
        amount: U256::from(AMOUNT),
        interval: INTERVAL,
        operator: Address::ZERO,
        salt: B256::repeat_byte(salt),
    };
    let subs = f.deployment.subscriptions;
    f.chain
        .send_and_wait(
            TxRequest::call(provider, subs, call.abi_encode()),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    contracts::read(
        f.chain.as_ref(),
        subs,
        &Subscriptions::planIdForCall {
            provider,
            salt: B256::repeat_byte(salt),
        },
    )
    .await
    .unwrap()
}

/// [`PAYER`]'s agent, using the harness's facilitator.
pub fn subscriber(h: &Harness, cap: u64, budget: u64) -> Agent {
    h.agent_builder(PAYER, policy(cap, budget))
        .facilitators([h.url.clone()])
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_subscribes_through_the_facilitator() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 1).await;
    let agent = subscriber(&h, AMOUNT, 10 * AMOUNT);
    let payee = h.balance(h.address(PAYEE)).await;
    let started = h.fixture.chain.timestamp().await.unwrap();

    let sub = agent
        .subscribe(Subscribe {
            plan_id,
            max_overage: Amount::from_units(300_000),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(sub.status, SubscriptionStatus::Active);
    assert_eq!(sub.plan_id, plan_id);
    assert_eq!(sub.allowance_cap, Amount::from_units(300_000));
    assert_eq!(sub.allowance_remaining, Amount::from_units(300_000));
    assert!(sub.paid_through >= started + INTERVAL);
    assert!(sub.tx_hash.is_some());
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee + U256::from(AMOUNT)
    );
    assert_eq!(agent.spent(), Amount::from_units(AMOUNT));

    // Through an explicit facilitator and network, a second subscription of the same agent.
    let again = agent
        .subscribe(
            Subscribe::new(plan_id, Amount::ZERO)
                .facilitator(h.url.clone())
                .network(NETWORK),
        )
        .await
        .unwrap();
    assert_ne!(again.id, sub.id);
    assert_eq!(again.allowance_cap, Amount::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_subscription_is_bounded_by_the_budget_never_by_the_per_request_cap() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 4).await;
    // 1.00 a request, a budget of ten plans: a plan of AMOUNT a cycle is over the per-request
    // cap, and within the default cap per cycle (the budget), with or without subscribing on
    // its own.
    for (i, policy) in [
        policy(AMOUNT / 5, 10 * AMOUNT),
        policy(AMOUNT / 5, 10 * AMOUNT).no_subscriptions(),
    ]
    .into_iter()
    .enumerate()
    {
        let agent = h
            .agent_builder(PAYER + i, policy)
            .facilitators([h.url.clone()])
            .build()
            .unwrap();
        let sub = agent
            .subscribe(Subscribe::new(plan_id, Amount::from_units(AMOUNT / 10)))
            .await
            .unwrap();
        assert_eq!(sub.status, SubscriptionStatus::Active);
        assert_eq!(agent.spent(), Amount::from_units(AMOUNT));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_typed_and_create_nothing() {
    let h = Harness::new().await;
    let plan_id = create_plan(&h, 2).await;
    let payee = h.balance(h.address(PAYEE)).await;

    // The policy: the first cycle over the cap per cycle, over the budget, a foreign payee.
    let over_cap = h
        .agent_builder(
            PAYER,
            policy(AMOUNT, 10 * AMOUNT).subscriptions(Amount::from_units(AMOUNT - 1), Amount::ZERO),
        )
        .facilitators([h.url.clone()])
        .build()
        .unwrap();
    let err = over_cap
        .subscribe(Subscribe::new(plan_id, Amount::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PolicyViolation {
                what: Refusal::OverCap { .. }
            }
        ),
        "{err:?}"
    );
    let over_budget = subscriber(&h, AMOUNT, AMOUNT - 1);
    let err = over_budget
        .subscribe(Subscribe::new(plan_id, Amount::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PolicyViolation {
                what: Refusal::OverBudget { .. }
            }
        ),
        "{err:?}"
    );
    let payees = h
        .agent_builder(PAYER, policy(AMOUNT, 10 * AMOUNT).payees([h.address(0)]))
        .facilitators([h.url.clone()])
        .build()
        .unwrap();
    let err = payees
        .subscribe(Subscribe::new(plan_id, Amount::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PolicyViolation {
                what: Refusal::Payee(_)
            }
        ),
        "{err:?}"
    );

    // No facilitator configured or given.
    let lonely = h.agent(policy(AMOUNT, 10 * AMOUNT));
    let err = lonely
        .subscribe(Subscribe::new(plan_id, Amount::ZERO))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoFacilitator), "{err:?}");

    // A poor agent (a fresh key without tokens).
    let poor = Agent::builder(
        tollgate_agent::Secp256k1Signer::random(),
        policy(AMOUNT, 10 * AMOUNT),
    )
    .facilitators([h.url.clone()])
    .build()
    .unwrap();
    let err = poor
        .subscribe(Subscribe::new(plan_id, Amount::ZERO))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InsufficientFunds { .. }), "{err:?}");
    assert_eq!(poor.spent(), Amount::ZERO, "the reservation is released");

    // A deprecated plan.
    let call = Subscriptions::deprecatePlanCall { planId: plan_id };
    h.fixture
        .chain
        .send_and_wait(
            TxRequest::call(
                h.address(PROVIDER),
                h.fixture.deployment.subscriptions,
                call.abi_encode(),
            ),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    let agent = subscriber(&h, AMOUNT, 10 * AMOUNT);
    let err = agent
        .subscribe(Subscribe::new(plan_id, Amount::ZERO))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PlanDeprecated), "{err:?}");
    assert_eq!(agent.spent(), Amount::ZERO);
    assert_eq!(h.balance(h.address(PAYEE)).await, payee);
}
