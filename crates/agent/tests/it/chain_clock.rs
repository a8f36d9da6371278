//! Validity windows follow the chain's clock, not the agent's: after the chain travels 30 days
//! (the README's renewal walk-through) the agent still pays.

use tollgate_agent::{Amount, PayRequest};
use tollgate_chain::U256;

use crate::support::{Harness, PAYEE, PRICE, policy};

const DAYS_30: u64 = 30 * 86_400;
/// Room for the seconds a test run takes; the clocks differ by 30 days.
const SLACK: u64 = 120;

fn secs(a: Amount) -> u64 {
    u64::try_from(a.get()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pays_after_the_chain_travels_30_days() {
    let h = Harness::new().await;
    let app = h.gated_app().await;
    h.fixture.chain.advance_time(DAYS_30).await.unwrap();
    let chain_now = h.fixture.chain.timestamp().await.unwrap();
    let payee0 = h.balance(h.address(PAYEE)).await;

    let agent = h.agent(policy(1_000_000, 1_000_000));
    let r = agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee0 + U256::from(PRICE - crate::support::FEE)
    );

    // The authorization was signed around the chain's time, not the local one.
    let p = r.payment.unwrap();
    let auth = h.signed_payment(&p).await.authorization;
    let (after, before) = (secs(auth.valid_after), secs(auth.valid_before));
    assert!(
        after < chain_now && after + 600 + SLACK > chain_now,
        "validAfter {after}, chain {chain_now}"
    );
    assert!(
        before > chain_now && before <= chain_now + 300 + SLACK,
        "validBefore {before}, chain {chain_now}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lived_agent_follows_the_chain_when_it_travels() {
    // The agent read the facilitator's parameters (and clock) before the jump: its next payment
    // must still carry a window the chain accepts.
    let h = Harness::new().await;
    let app = h.gated_app().await;
    let agent = h.agent(policy(1_000_000, 2_000_000));
    let first = agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(first.status, 200);

    h.fixture.chain.advance_time(DAYS_30).await.unwrap();
    // Some time passes, as it does for a long-lived agent (the facilitator itself reads the
    // chain's clock at most once a second, so right after a jump it would still check by the
    // old time).
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let chain_now = h.fixture.chain.timestamp().await.unwrap();
    let second = agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(second.status, 200, "{:?}", second.body);
    let auth = h
        .signed_payment(&second.payment.unwrap())
        .await
        .authorization;
    assert!(secs(auth.valid_before) > chain_now);
    assert_eq!(agent.spent(), Amount::from_units(2 * PRICE));
}
