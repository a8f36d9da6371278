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

mod actions;
mod overage;
mod plans;
mod renewals;
mod subscribing;

use actions::{pause_resume_cancel_by_signature, pause_resume_cancel_directly};
use overage::{
    overage_cap_resets_each_cycle, overage_is_capped_per_cycle, raise_allowance_then_charge,
};
use plans::plans_are_created_once_and_validated;
use renewals::{
    failed_renewal_pauses_and_resume_pays, late_renewal_bills_one_cycle, renewals_over_three_cycles,
};
use subscribing::{
    deprecated_plan_refuses_new_subscribers, subscribe_bills_the_first_cycle,
    subscribe_with_sig_and_permit, subscribe_without_funds_creates_nothing,
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
