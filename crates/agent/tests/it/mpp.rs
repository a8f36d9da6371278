//! MPP: the agent pays an MPP-only server's EVM `charge` challenge (`WWW-Authenticate: Payment`)
//! under its spending policy, once, and hands back the server's receipt. The server is
//! `tollgate_testkit::mpp::MppServer`, settling each credential through the real facilitator's
//! x402 `/settle` on the devnet: balances tell what moved.

use std::sync::{Arc, Mutex};

use axum::{
    Router,
    http::{HeaderValue, StatusCode},
    routing::get,
};
use tollgate_agent::{Address, Agent, Amount, Error, PayRequest, PaymentKind, Refusal};
use tollgate_chain::U256;
use tollgate_gate::Pricing;
use tollgate_protocol::mpp::{ChallengeKey, ChargeRequest, Credential, ProblemType};
use tollgate_testkit::mpp::{Challenge, MppServer, MppTerms, REALM};

use crate::support::{App, Harness, NETWORK, PAYEE, PAYER, PRICE, policy};

/// An MPP-only server charging [`PRICE`] to [`PAYEE`] in the devnet's token.
fn terms(h: &Harness) -> MppTerms {
    MppTerms::new(
        &h.url,
        NETWORK,
        h.chain_id(),
        h.token(),
        h.address(PAYEE),
        PRICE,
    )
}

/// An agent reading the harness's facilitator (the token's EIP-712 domain, the chain's clock).
fn agent(h: &Harness, p: tollgate_agent::SpendPolicy) -> Agent {
    h.agent_builder(PAYER, p)
        .facilitators([h.url.clone()])
        .build()
        .unwrap()
}

async fn balances(h: &Harness) -> (U256, U256) {
    (
        h.balance(h.address(PAYER)).await,
        h.balance(h.address(PAYEE)).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pays_an_mpp_only_server_once_and_returns_its_receipt() {
    let h = Harness::new().await;
    let server = MppServer::start(terms(&h)).await;
    let agent = agent(&h, policy(1_000_000, 2_000_000));
    let before = balances(&h).await;

    let r = agent
        .pay(PayRequest::get(&server.paid_url()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.json::<serde_json::Value>().unwrap()["quote"], 42);
    let p = r.payment.as_ref().expect("a payment");
    assert_eq!(p.kind, PaymentKind::Mpp);
    assert_eq!(p.header_name(), "authorization");
    assert_eq!(p.amount, Amount::from_units(PRICE));
    assert_eq!(p.network, NETWORK);
    assert_eq!((p.token, p.pay_to), (h.token(), h.address(PAYEE)));
    assert!(r.earlier_payments.is_empty());

    // The receipt, decoded; its reference is the settlement transaction.
    let receipt = p.mpp_receipt.as_ref().expect("the Payment-Receipt");
    assert_eq!(receipt.method, "evm");
    assert_eq!(receipt.status, "success");
    let tx = p.tx_hash.expect("the transaction");
    assert_eq!(receipt.reference, tx.to_string());
    assert!(!receipt.timestamp.is_empty());

    // One credential, as mppx signs it: for this challenge, valid from 0 to its expiry.
    let sent = server.credentials();
    assert_eq!(sent, vec![p.header.clone()], "sent once");
    let credential = Credential::from_authorization(&sent[0]).unwrap().unwrap();
    let c = &credential.challenge;
    assert_eq!(receipt.challenge_id.as_deref(), Some(c.id.as_str()));
    assert_eq!(credential.payload.nonce, c.authorization_nonce());
    assert_eq!(credential.payload.valid_after, U256::ZERO);
    assert_eq!(
        credential.payload.valid_before,
        U256::from(c.expires_unix().unwrap().unwrap())
    );
    assert_eq!(credential.payload.from, h.address(PAYER));
    assert_eq!(
        credential.source.as_deref(),
        Some(Credential::source_for(h.chain_id(), h.address(PAYER)).as_str())
    );

    assert_eq!(server.served(), 1);
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
    let after = balances(&h).await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_refusals_and_unknown_tokens_send_nothing() {
    let h = Harness::new().await;
    let server = MppServer::start(terms(&h)).await;
    let before = balances(&h).await;
    let request = || PayRequest::get(&server.paid_url()).unwrap();

    // Over the per-request cap.
    let e = agent(&h, policy(PRICE - 1, 2_000_000))
        .pay(request())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::PolicyViolation {
                what: Refusal::OverCap { .. }
            }
        ),
        "{e:?}"
    );
    // A payee the policy does not allow.
    let e = agent(
        &h,
        policy(1_000_000, 2_000_000).payees([Address::repeat_byte(9)]),
    )
    .pay(request())
    .await
    .unwrap_err();
    assert!(
        matches!(e, Error::PolicyViolation { what: Refusal::Payee(a) } if a == h.address(PAYEE)),
        "{e:?}"
    );
    // A chain the policy does not allow, by any of its names.
    let e = agent(
        &h,
        policy(1_000_000, 2_000_000).networks(["base", "eip155:1"]),
    )
    .pay(request())
    .await
    .unwrap_err();
    assert!(
        matches!(e, Error::PolicyViolation { what: Refusal::Network(ref n) } if n == NETWORK),
        "{e:?}"
    );
    // Over the budget.
    let e = agent(&h, policy(1_000_000, PRICE - 1))
        .pay(request())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::PolicyViolation {
                what: Refusal::OverBudget { .. }
            }
        ),
        "{e:?}"
    );
    // A token whose EIP-712 domain the agent cannot learn: it reads no facilitator.
    let blind = h
        .agent_builder(PAYER, policy(1_000_000, 2_000_000))
        .facilitators(Vec::<String>::new())
        .build()
        .unwrap();
    let e = blind.pay(request()).await.unwrap_err();
    assert!(
        matches!(e, Error::UnknownTokenDomain { chain_id, token } if chain_id == h.chain_id() && token == h.token()),
        "{e:?}"
    );
    // ... and allowed by network name only through what it was taught of the chain.
    let e = h
        .agent_builder(PAYER, policy(1_000_000, 2_000_000).networks([NETWORK]))
        .facilitators(Vec::<String>::new())
        .build()
        .unwrap()
        .pay(request())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::PolicyViolation {
                what: Refusal::Network(_)
            }
        ),
        "{e:?}"
    );

    assert!(server.credentials().is_empty(), "nothing was sent");
    assert_eq!(balances(&h).await, before, "nothing moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_domain_pays_without_a_facilitator() {
    let h = Harness::new().await;
    let server = MppServer::start(terms(&h)).await;
    let before = balances(&h).await;
    let agent = h
        .agent_builder(PAYER, policy(1_000_000, 2_000_000).networks([NETWORK]))
        .facilitators(Vec::<String>::new())
        .network(NETWORK, h.chain_id())
        .token_domain(h.chain_id(), h.token(), "USD Coin", "2")
        .build()
        .unwrap();
    let r = agent
        .pay(PayRequest::get(&server.paid_url()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.payment.unwrap().network, NETWORK);
    assert_eq!(server.credentials().len(), 1);
    assert_eq!(balances(&h).await.0, before.0 - U256::from(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_challenge_expired_or_too_long_is_refused_without_signing() {
    let h = Harness::new().await;
    let before = balances(&h).await;
    for (expires_in, why) in [(-5, "expired"), (7_200, "longer")] {
        let mut t = terms(&h);
        t.expires_in = expires_in;
        let server = MppServer::start(t).await;
        let agent = agent(&h, policy(1_000_000, 2_000_000));
        let e = agent
            .pay(PayRequest::get(&server.paid_url()).unwrap())
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::ChallengeRefused { why: w, .. } if w.contains(why)),
            "{e:?}"
        );
        assert!(server.credentials().is_empty(), "nothing was sent");
        assert_eq!(agent.spent(), Amount::ZERO);
    }
    assert_eq!(balances(&h).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_problem_answer_to_the_credential_is_a_typed_error() {
    let h = Harness::new().await;
    let mut t = terms(&h);
    t.refuse_with = Some(ProblemType::VerificationFailed);
    let server = MppServer::start(t).await;
    let before = balances(&h).await;
    let agent = agent(&h, policy(1_000_000, 2_000_000));

    let e = agent
        .pay(PayRequest::get(&server.paid_url()).unwrap())
        .await
        .unwrap_err();
    let Error::PaymentProblem { problem, payments } = &e else {
        panic!("expected PaymentProblem, got {e:?}");
    };
    assert_eq!(problem.kind, ProblemType::VerificationFailed.uri());
    assert_eq!(
        problem.problem_type(),
        Some(ProblemType::VerificationFailed)
    );
    assert!(
        problem.detail.contains("refused by the test"),
        "{problem:?}"
    );
    assert_eq!(payments.len(), 1);
    assert_eq!(payments[0].kind, PaymentKind::Mpp);
    assert_eq!(server.credentials().len(), 1, "sent once, never again");
    assert_eq!(balances(&h).await, before, "nothing moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_answer_gets_the_same_credential_again_and_one_payment() {
    let h = Harness::new().await;
    let mut t = terms(&h);
    t.pending_once = true;
    let server = MppServer::start(t).await;
    let before = balances(&h).await;
    let agent = agent(&h, policy(1_000_000, 2_000_000));

    let r = agent
        .pay(PayRequest::get(&server.paid_url()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let sent = server.credentials();
    assert_eq!(sent.len(), 2, "the credential, then the same one again");
    assert_eq!(sent[0], sent[1], "never a new signature");
    assert_eq!(server.served(), 1);
    assert!(r.payment.unwrap().mpp_receipt.is_some());
    assert_eq!(balances(&h).await.0, before.0 - U256::from(PRICE));
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_offering_x402_and_mpp_is_paid_with_x402() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    // Every 402 of the gate also carries an MPP challenge for the same price.
    let challenge = Challenge::issue(
        &ChallengeKey::new([7; 32]),
        REALM,
        &ChargeRequest::new(
            Amount::from_units(PRICE),
            h.token(),
            h.address(PAYEE),
            h.chain_id(),
            6,
        ),
        (tollgate_protocol::unix_now() + 300) * 1000,
        None,
        None,
    );
    let www = HeaderValue::from_str(&challenge.to_header_value()).unwrap();
    let authorizations = Arc::new(Mutex::new(0usize));
    let counted = Arc::clone(&authorizations);
    let app = Router::new()
        .route("/v1/quote", get(|| async { r#"{"quote":42}"# }))
        .route_layer(gate.payment_gate([Pricing::one_time(PRICE)]))
        .layer(axum::middleware::map_request(
            move |r: axum::extract::Request| {
                let counted = Arc::clone(&counted);
                async move {
                    if r.headers().contains_key("authorization") {
                        *counted.lock().unwrap() += 1;
                    }
                    r
                }
            },
        ))
        .layer(axum::middleware::map_response(
            move |mut r: axum::response::Response| {
                let www = www.clone();
                async move {
                    if r.status() == StatusCode::PAYMENT_REQUIRED {
                        r.headers_mut().append("www-authenticate", www);
                    }
                    r
                }
            },
        ));
    let app = App::serve(app, Arc::default()).await;
    let agent = h.agent(policy(1_000_000, 2_000_000));

    let r = agent
        .pay(PayRequest::get(&app.url("/v1/quote")).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let p = r.payment.unwrap();
    assert_eq!(p.kind, PaymentKind::Tollgate, "x402 terms win");
    assert!(p.mpp_receipt.is_none());
    assert_eq!(*authorizations.lock().unwrap(), 0, "no MPP credential sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_challenge_is_timed_by_the_chains_clock() {
    let h = Harness::new().await;
    // The server issues its challenge by the local clock (five minutes ahead); the chain runs a
    // day ahead of it, so by the chain's clock, which the token checks, it has expired.
    h.fixture.chain.advance_time(86_400).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let server = MppServer::start(terms(&h)).await;
    let e = agent(&h, policy(1_000_000, 2_000_000))
        .pay(PayRequest::get(&server.paid_url()).unwrap())
        .await
        .unwrap_err();
    let Error::ChallengeRefused { now, why, .. } = &e else {
        panic!("expected ChallengeRefused, got {e:?}");
    };
    assert!(why.contains("expired"), "{why}");
    let chain_now = h.fixture.chain.timestamp().await.unwrap();
    assert!(
        now.abs_diff(chain_now) < 60,
        "the chain's clock ({chain_now}), not the local one: {now}"
    );
    assert!(server.credentials().is_empty(), "nothing was sent");
}
