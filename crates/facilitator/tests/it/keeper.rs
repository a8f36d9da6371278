//! The renewal keeper over several cycles with time travel: one charge per due cycle, nothing
//! extra on repeated or concurrent runs, a failed pull pauses, a resume brings the subscription
//! back to the keeper, and a second facilitator over the same store double-bills nothing.

use std::sync::Arc;

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use tollgate_chain::{
    Chain, TxRequest, WaitOptions,
    contracts::{self, Subscriptions, Token},
};
use tollgate_facilitator::{
    Facilitator, KeeperReport, Settings,
    store::{IndexedState, RenewalOutcome},
};

use crate::support::{Backend, Harness, NETWORK, PROOF_KEY, RELAYER};

const PROVIDER: usize = 5;
const PAY_TO: usize = 6;
const SUBSCRIBER: usize = 3;
const ELSEWHERE: usize = 4;
const AMOUNT: u64 = 1_000_000;
const INTERVAL: u64 = 30 * 24 * 3600;

async fn send(h: &Harness, from: usize, to: Address, data: Vec<u8>) -> tollgate_chain::Receipt {
    h.fixture
        .chain
        .send_and_wait(
            TxRequest::call(h.account(from).address, to, data),
            WaitOptions::default(),
        )
        .await
        .unwrap()
        .receipt()
        .cloned()
        .expect("confirmed")
}

/// Creates a plan, approves the contract and subscribes directly; returns the subscription id.
async fn subscribe(h: &Harness, salt: u8) -> B256 {
    let d = h.fixture.deployment;
    let create = Subscriptions::createPlanCall {
        token: d.token,
        payTo: h.account(PAY_TO).address,
        amount: U256::from(AMOUNT),
        interval: INTERVAL,
        operator: Address::ZERO,
        salt: B256::repeat_byte(salt),
    };
    send(h, PROVIDER, d.subscriptions, create.abi_encode()).await;
    let plan_id = contracts::read(
        h.fixture.chain.as_ref(),
        d.subscriptions,
        &Subscriptions::planIdForCall {
            provider: h.account(PROVIDER).address,
            salt: B256::repeat_byte(salt),
        },
    )
    .await
    .unwrap();
    let approve = Token::approveCall {
        spender: d.subscriptions,
        value: U256::MAX,
    };
    send(h, SUBSCRIBER, d.token, approve.abi_encode()).await;
    let call = Subscriptions::subscribeCall {
        planId: plan_id,
        maxOverage: U256::ZERO,
    };
    let receipt = send(h, SUBSCRIBER, d.subscriptions, call.abi_encode()).await;
    receipt
        .logs
        .iter()
        .find_map(|l| Subscriptions::SubscriptionCreated::decode_log(l).ok())
        .expect("SubscriptionCreated")
        .id
}

async fn onchain(h: &Harness, id: B256) -> Subscriptions::subscriptionsReturn {
    contracts::read(
        h.fixture.chain.as_ref(),
        h.fixture.deployment.subscriptions,
        &Subscriptions::subscriptionsCall { id },
    )
    .await
    .unwrap()
}

async fn pay_to_balance(h: &Harness) -> U256 {
    h.token_balance(h.account(PAY_TO).address).await
}

fn quiet(r: &KeeperReport) -> bool {
    r.renewed == 0 && r.failed == 0 && r.errors == 0 && r.pending == 0
}

async fn renews_three_cycles_pauses_on_failure_and_resumes(backend: Backend) {
    let h = Harness::new(backend).await;
    let f = &h.facilitator;
    let d = h.fixture.deployment;
    let id = subscribe(&h, 1).await;
    let store = f.store();

    // Indexed, not due yet: nothing collected.
    let r = f.run_keeper_once().await;
    assert!(r.indexed >= 1, "{r:?}");
    assert!(quiet(&r), "{r:?}");
    let row = store
        .indexed_subscription(NETWORK, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((row.state, row.cycle), (IndexedState::Active, 1));
    assert_eq!(row.next_due, onchain(&h, id).await.paidThrough);

    // Three cycles: one charge each, and a second run bills nothing more.
    let p0 = pay_to_balance(&h).await;
    for n in 1..=3u64 {
        h.fixture.chain.advance_time(INTERVAL).await.unwrap();
        let r = f.run_keeper_once().await;
        assert_eq!(
            (r.renewed, r.failed, r.errors),
            (1, 0, 0),
            "cycle {n}: {r:?}"
        );
        let sub = onchain(&h, id).await;
        assert_eq!(u64::from(sub.cycle), 1 + n);
        assert_eq!(sub.state, 1);
        assert_eq!(pay_to_balance(&h).await, p0 + U256::from(AMOUNT * n));
        let again = f.run_keeper_once().await;
        assert!(quiet(&again), "cycle {n} again: {again:?}");
        assert_eq!(pay_to_balance(&h).await, p0 + U256::from(AMOUNT * n));
    }
    let renewals = store.renewals(NETWORK, id).await.unwrap();
    assert_eq!(
        renewals
            .iter()
            .map(|r| (r.cycle, r.outcome))
            .collect::<Vec<_>>(),
        [2, 3, 4].map(|c| (c, RenewalOutcome::Renewed))
    );

    // The subscriber moves its tokens away: the renewal fails, the subscription pauses, no charge.
    let who = h.account(SUBSCRIBER).address;
    let held = h.token_balance(who).await;
    let away = Token::transferCall {
        to: h.account(ELSEWHERE).address,
        value: held,
    };
    send(&h, SUBSCRIBER, d.token, away.abi_encode()).await;
    let p1 = pay_to_balance(&h).await;
    h.fixture.chain.advance_time(INTERVAL).await.unwrap();
    let r = f.run_keeper_once().await;
    assert_eq!((r.renewed, r.failed, r.errors), (0, 1, 0), "{r:?}");
    let sub = onchain(&h, id).await;
    assert_eq!((sub.state, sub.cycle), (2, 4));
    assert_eq!(pay_to_balance(&h).await, p1);
    let row = store
        .indexed_subscription(NETWORK, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((row.state, row.cycle), (IndexedState::Paused, 4));
    assert!(quiet(&f.run_keeper_once().await));

    // Topped up and resumed on-chain (paying the due cycle): the keeper picks it up again and
    // collects the next cycle when due.
    let back = Token::transferCall {
        to: who,
        value: held,
    };
    send(&h, ELSEWHERE, d.token, back.abi_encode()).await;
    let resume = Subscriptions::resumeCall { id };
    send(&h, SUBSCRIBER, d.subscriptions, resume.abi_encode()).await;
    assert_eq!(pay_to_balance(&h).await, p1 + U256::from(AMOUNT));
    let r = f.run_keeper_once().await;
    assert!(r.indexed >= 1 && quiet(&r), "{r:?}");
    let row = store
        .indexed_subscription(NETWORK, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state, IndexedState::Active);
    assert_eq!(row.next_due, onchain(&h, id).await.paidThrough);
    h.fixture.chain.advance_time(INTERVAL).await.unwrap();
    let r = f.run_keeper_once().await;
    assert_eq!((r.renewed, r.failed, r.errors), (1, 0, 0), "{r:?}");
    let sub = onchain(&h, id).await;
    assert_eq!((sub.state, sub.cycle), (1, 6));
    assert_eq!(pay_to_balance(&h).await, p1 + U256::from(2 * AMOUNT));
    assert!(quiet(&f.run_keeper_once().await));
}

/// A second facilitator over the same store and chain (a restart, or a replica).
fn twin(h: &Harness) -> Facilitator {
    let spec = h.facilitator.networks().remove(0);
    Facilitator::new(
        Settings::default(),
        vec![(spec, Arc::clone(&h.fixture.chain) as Arc<dyn Chain>)],
        vec![h.account(RELAYER).address],
        h.account(PROOF_KEY).private_key,
        Arc::clone(h.facilitator.store()),
    )
    .unwrap()
}

async fn a_restart_or_a_replica_double_bills_nothing(backend: Backend) {
    let h = Harness::new(backend).await;
    let id = subscribe(&h, 2).await;
    let first = &h.facilitator;
    assert!(quiet(&first.run_keeper_once().await));
    let p0 = pay_to_balance(&h).await;

    // Both keepers at once on a due cycle: exactly one charge. The twin holds no relayer
    // account (the first does), so it sends nothing: at most, it reports that it could not.
    h.fixture.chain.advance_time(INTERVAL).await.unwrap();
    let second = twin(&h);
    let (a, b) = tokio::join!(first.run_keeper_once(), second.run_keeper_once());
    assert_eq!(a.renewed + b.renewed, 1, "{a:?} {b:?}");
    assert_eq!(a.errors, 0, "{a:?}");
    assert!(b.errors <= 1 && b.renewed == 0, "{b:?}");
    assert_eq!(pay_to_balance(&h).await, p0 + U256::from(AMOUNT));
    assert_eq!(onchain(&h, id).await.cycle, 2);

    // A crash after broadcast and before recording: the cycle was collected on-chain but the
    // store still says due. A fresh facilitator over that store bills nothing more, and catches
    // its index up from the chain.
    h.fixture.chain.advance_time(INTERVAL).await.unwrap();
    let collect = Subscriptions::collectCall { id, cycle: 3 };
    send(
        &h,
        RELAYER,
        h.fixture.deployment.subscriptions,
        collect.abi_encode(),
    )
    .await;
    assert_eq!(pay_to_balance(&h).await, p0 + U256::from(2 * AMOUNT));
    let restarted = twin(&h);
    // The first process is gone: its relayer account passes to the restarted one (a process
    // that exits releases its leases; one that crashed is taken over at once by its successor
    // on the same host, or lapses).
    first.release_leases().await;
    assert_eq!(restarted.hold_relayers().await, [h.address(RELAYER)]);
    let r = restarted.run_keeper_once().await;
    assert!(quiet(&r), "{r:?}");
    assert_eq!(pay_to_balance(&h).await, p0 + U256::from(2 * AMOUNT));
    let row = h
        .facilitator
        .store()
        .indexed_subscription(NETWORK, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.cycle, row.next_due),
        (3, onchain(&h, id).await.paidThrough)
    );

    // ... and still collects the next cycle when due, once.
    h.fixture.chain.advance_time(INTERVAL).await.unwrap();
    let r = restarted.run_keeper_once().await;
    assert_eq!((r.renewed, r.errors), (1, 0), "{r:?}");
    assert!(quiet(&first.run_keeper_once().await));
    assert_eq!(pay_to_balance(&h).await, p0 + U256::from(3 * AMOUNT));
    assert_eq!(onchain(&h, id).await.cycle, 4);
}

crate::on_backends!(
    renews_three_cycles_pauses_on_failure_and_resumes,
    a_restart_or_a_replica_double_bills_nothing,
);

/// The store's keeper rows: upserts are idempotent, the cursor never moves back, a renewal is
/// recorded once, and a stale read never rolls the index back.
#[tokio::test]
async fn keeper_rows_are_idempotent_on_sqlite() {
    let s = tollgate_facilitator::store::open("sqlite::memory:")
        .await
        .unwrap();
    keeper_rows_are_idempotent(s.as_ref()).await;
}

/// The same on PostgreSQL (a schema of its own, at `TOLLGATE_TEST_DATABASE_URL`).
#[tokio::test]
async fn keeper_rows_are_idempotent_on_postgres() {
    use tollgate_facilitator::store::{PostgresStore, Store};
    let url = tollgate_testkit::peer::database_url();
    let schema = format!("tg_keeper_{}", std::process::id());
    let pg = PostgresStore::connect_with_schema(&url, &schema)
        .await
        .unwrap();
    pg.migrate().await.unwrap();
    keeper_rows_are_idempotent(&pg).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&pool)
        .await
        .unwrap();
}

async fn keeper_rows_are_idempotent(s: &dyn tollgate_facilitator::store::Store) {
    use tollgate_facilitator::store::{Renewal, SubscriptionEvent};
    let id = B256::repeat_byte(1);
    let created = SubscriptionEvent::Created {
        id,
        plan_id: B256::repeat_byte(2),
        subscriber: Address::repeat_byte(3),
        paid_through: 100,
    };
    assert_eq!(s.keeper_cursor("n").await.unwrap(), 0);
    s.index_subscription_events("n", std::slice::from_ref(&created), 10, 1)
        .await
        .unwrap();
    s.update_indexed_subscription("n", id, IndexedState::Active, 2, 200, 2)
        .await
        .unwrap();
    // Re-reading the same logs from an older cursor changes nothing.
    s.index_subscription_events("n", &[created], 5, 3)
        .await
        .unwrap();
    assert_eq!(s.keeper_cursor("n").await.unwrap(), 10);
    let row = s.indexed_subscription("n", id).await.unwrap().unwrap();
    assert_eq!((row.cycle, row.next_due), (2, 200));
    assert_eq!(s.due_subscriptions("n", 199, 10).await.unwrap(), []);
    assert_eq!(s.due_subscriptions("n", 200, 10).await.unwrap(), [row]);

    let renewal = Renewal {
        network: "n".into(),
        id,
        cycle: 3,
        outcome: RenewalOutcome::Renewed,
        tx_hash: B256::repeat_byte(4),
        block: 7,
        at: 4,
    };
    assert!(
        s.record_renewal(&renewal, IndexedState::Active, 300)
            .await
            .unwrap()
    );
    assert!(
        !s.record_renewal(&renewal, IndexedState::Active, 300)
            .await
            .unwrap()
    );
    assert_eq!(s.renewals("n", id).await.unwrap(), [renewal]);
    // A stale read (cycle 2) does not roll the row back.
    s.update_indexed_subscription("n", id, IndexedState::Active, 2, 200, 5)
        .await
        .unwrap();
    let row = s.indexed_subscription("n", id).await.unwrap().unwrap();
    assert_eq!((row.cycle, row.next_due), (3, 300));
    // A resume of an unknown id is ignored; of a paused one, makes it active again.
    s.update_indexed_subscription("n", id, IndexedState::Paused, 3, 300, 6)
        .await
        .unwrap();
    let resumed = [
        SubscriptionEvent::Resumed {
            id: B256::ZERO,
            paid_through: 1,
        },
        SubscriptionEvent::Resumed {
            id,
            paid_through: 400,
        },
    ];
    s.index_subscription_events("n", &resumed, 11, 7)
        .await
        .unwrap();
    let row = s.indexed_subscription("n", id).await.unwrap().unwrap();
    assert_eq!((row.state, row.next_due), (IndexedState::Active, 400));
    assert!(
        s.indexed_subscription("n", B256::ZERO)
            .await
            .unwrap()
            .is_none()
    );
}
