//! `Agent::pay` against a gate: the Tollgate path, the generic x402 path, the policy, the budget.

use tollgate_agent::{Amount, Error, PayRequest, PaymentKind, Refusal, SpendPolicy};
use tollgate_chain::{Address, U256};

use crate::support::{FEE, Harness, NETWORK, PAYEE, PAYER, PRICE, policy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pays_a_tollgate_gate_through_the_facilitator_once() {
    let h = Harness::new().await;
    let app = h.gated_app().await;
    let agent = h.agent(policy(1_000_000, 5_000_000));
    let (payee0, payer0) = (
        h.balance(h.address(PAYEE)).await,
        h.balance(h.address(PAYER)).await,
    );

    let r = agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json::<serde_json::Value>().unwrap()["quote"], 42);
    let p = r.payment.expect("a receipt");
    assert_eq!(p.kind, PaymentKind::Tollgate);
    assert_eq!(p.amount, Amount::from_units(PRICE));
    assert_eq!(p.fee, Some(Amount::from_units(FEE)));
    assert_eq!(p.network, NETWORK);
    assert_eq!((p.payer, p.pay_to), (h.address(PAYER), h.address(PAYEE)));
    assert_eq!(p.token, h.token());
    let proof = p.proof.as_ref().expect("a proof");
    assert_eq!(Some(proof.tx_hash), p.tx_hash);
    assert_eq!(Some(proof.memo), p.memo);
    let receipt = h
        .fixture
        .chain
        .receipt(proof.tx_hash)
        .await
        .unwrap()
        .expect("mined");
    assert!(receipt.success);
    assert!(p.settlement.is_some(), "the gate sends X-PAYMENT-RESPONSE");

    // Exactly one payment moved: the payee got price - fee, the payer paid the price.
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee0 + U256::from(PRICE - FEE)
    );
    assert_eq!(
        h.balance(h.address(PAYER)).await,
        payer0 - U256::from(PRICE)
    );
    assert_eq!(app.hits(), 1);
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
    assert_eq!(agent.remaining(), Amount::from_units(5_000_000 - PRICE));

    // A resource that asks for nothing is fetched without paying.
    let free = agent
        .pay(PayRequest::get(&app.url("/free")).unwrap())
        .await
        .unwrap();
    assert_eq!((free.status.as_u16(), &free.body[..]), (200, &b"free"[..]));
    assert!(free.payment.is_none());
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pays_the_gates_x402_acceptance_as_a_generic_client() {
    // The gate's 402 names its facilitator; an agent that trusts no facilitator pays the same
    // entry as a plain x402 V1 client would: a TransferWithAuthorization straight to payTo, which
    // the gate settles through the facilitator's /verify and /settle.
    let h = Harness::new().await;
    let app = h.gated_app().await;
    let agent = h
        .agent_builder(PAYER, policy(1_000_000, 1_000_000))
        .facilitators(Vec::<String>::new())
        .network(NETWORK, h.chain_id())
        .build()
        .unwrap();
    let payee0 = h.balance(h.address(PAYEE)).await;

    let r = agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let p = r.payment.unwrap();
    assert_eq!(p.kind, PaymentKind::X402);
    assert!(p.proof.is_none());
    let settlement = p.settlement.as_ref().expect("X-PAYMENT-RESPONSE");
    assert!(settlement.success);
    let tx = p.tx_hash.expect("the settlement's transaction");
    assert!(h.fixture.chain.receipt(tx).await.unwrap().unwrap().success);
    // No router, no fee: payTo received the whole price, once.
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee0 + U256::from(PRICE)
    );
    assert_eq!(app.hits(), 1);
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_refusals_are_typed_and_pay_nothing() {
    let h = Harness::new().await;
    let app = h.gated_app().await;
    let payee0 = h.balance(h.address(PAYEE)).await;
    let other = Address::repeat_byte(0x42);
    type Expect = fn(&Refusal) -> bool;
    let cases: Vec<(SpendPolicy, Expect)> = vec![
        (policy(PRICE - 1, 10_000_000), |r| {
            matches!(r, Refusal::OverCap { .. })
        }),
        (policy(1_000_000, PRICE - 1), |r| {
            matches!(r, Refusal::OverBudget { .. })
        }),
        (policy(1_000_000, 10_000_000).payees([other]), |r| {
            matches!(r, Refusal::Payee(_))
        }),
        (
            policy(1_000_000, 10_000_000).networks(["base"]),
            |r| matches!(r, Refusal::Network(n) if n == NETWORK),
        ),
        (policy(1_000_000, 10_000_000).tokens([other]), |r| {
            matches!(r, Refusal::Token(_))
        }),
    ];
    for (policy, expected) in cases {
        let agent = h.agent(policy.clone());
        match agent
            .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
            .await
        {
            Err(Error::PolicyViolation { what }) => assert!(expected(&what), "{policy:?}: {what}"),
            other => panic!("{policy:?}: expected a policy violation, got {other:?}"),
        }
        assert_eq!(agent.spent(), Amount::ZERO);
    }
    assert_eq!(h.balance(h.address(PAYEE)).await, payee0);
    assert_eq!(app.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_runs_out_and_holds_under_concurrency() {
    let h = Harness::new().await;
    let app = h.gated_app().await;
    let payee0 = h.balance(h.address(PAYEE)).await;

    // Room for two payments; six race for it.
    let agent = h.agent(policy(PRICE, 2 * PRICE + PRICE / 2));
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let agent = agent.clone();
            let url = app.url("/v1/quote");
            tokio::spawn(async move { agent.pay(PayRequest::get(&url).unwrap()).await })
        })
        .collect();
    let mut paid = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) => {
                assert_eq!(r.status, 200);
                paid += 1;
            }
            Err(Error::PolicyViolation {
                what: Refusal::OverBudget { .. },
            }) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(paid, 2);
    assert_eq!(app.hits(), 2);
    assert_eq!(agent.spent(), Amount::from_units(2 * PRICE));
    assert_eq!(
        h.balance(h.address(PAYEE)).await,
        payee0 + U256::from(2 * (PRICE - FEE))
    );

    // Spent is spent: the next request is refused too.
    assert!(matches!(
        agent
            .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
            .await,
        Err(Error::PolicyViolation {
            what: Refusal::OverBudget { .. }
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfunded_wallet_gets_insufficient_funds() {
    let h = Harness::new().await;
    let app = h.gated_app().await;
    let broke =
        tollgate_agent::signer_from_hex(&format!("{}", tollgate_chain::B256::repeat_byte(0x77)))
            .unwrap();
    let agent = tollgate_agent::Agent::builder(broke, policy(1_000_000, 1_000_000))
        .build()
        .unwrap();
    assert_eq!(h.balance(agent.address()).await, U256::ZERO);
    match agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
    {
        Err(Error::InsufficientFunds { .. }) => {}
        other => panic!("expected InsufficientFunds, got {other:?}"),
    }
    assert_eq!(app.hits(), 0);
}

#[test]
fn the_key_stays_out_of_debug_output() {
    let hex = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    let agent = tollgate_agent::Agent::from_hex_key(hex, policy(1, 1)).unwrap();
    let shown = format!("{agent:?}");
    assert!(!shown.contains(&hex[2..]), "{shown}");
    assert!(shown.contains(&format!("{:?}", agent.address())), "{shown}");
    assert!(matches!(
        tollgate_agent::Agent::from_hex_key("0x1234", policy(1, 1)),
        Err(Error::InvalidKey)
    ));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.key");
    std::fs::write(&file, format!("{hex}\n")).unwrap();
    let from_file = tollgate_agent::Agent::from_key_file(&file, policy(1, 1)).unwrap();
    assert_eq!(from_file.address(), agent.address());
    assert!(matches!(
        tollgate_agent::Agent::from_key_file(dir.path().join("missing"), policy(1, 1)),
        Err(Error::KeyFile { .. })
    ));
}
