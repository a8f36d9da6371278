//! MPP beside x402 ([`tollgate_gate::PaymentGateLayer::mpp`]): every 402 of the route carries a
//! `WWW-Authenticate: Payment` challenge of the EVM `charge` method; a credential of that
//! challenge is settled once, under the x402 lock of its authorization, and served with a
//! `Payment-Receipt`; a credential bound to anything else, expired, malformed or used is refused
//! with the draft's problem type, and nothing moves. Credentials are signed here as mppx's
//! client signs them (the unmodified mppx client is in the cli's conformance rows).

use std::{sync::Arc, time::Duration};

use alloy::primitives::{B256, U256};
use tollgate_gate::{PAYMENT_RECEIPT, X_PAYMENT_RESPONSE};
use tollgate_protocol::{
    mpp::{AuthorizationPayload, Challenge, Credential, ProblemType, Receipt},
    x402::SettlementResponseHeader,
};
use tollgate_testkit::signing::ExactTerms;

use crate::support::{App, Harness, NETWORK, PAYEE, PAYER, PREMIUM_PRICE, QUOTE_PRICE, Reply};

const PATH: &str = "/v1/quote";
const CHAIN_ID: u64 = 84532;

/// The gated app with MPP on every route.
async fn serve(gate: &tollgate_gate::Gate) -> Arc<App> {
    Arc::new(App::serve_with(gate, |layer| layer.mpp(true)).await)
}

/// The one `Payment` challenge of a 402.
fn challenge_of(r: &Reply) -> Challenge {
    assert_eq!(r.status, 402, "{}", r.body);
    let values: Vec<&str> = r
        .headers
        .get_all("www-authenticate")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    let mut challenges = Challenge::parse_all(values);
    assert_eq!(challenges.len(), 1, "one challenge");
    challenges.remove(0).expect("a well-formed challenge")
}

/// A fresh challenge of `path`.
async fn challenge(app: &App, path: &str) -> Challenge {
    challenge_of(&app.get(path, &[]).await)
}

/// A credential for `challenge` from dev account `payer`, signed as mppx's client signs it:
/// the challenge's amount to its recipient, nonce the challenge's hash, valid from 0 to the
/// challenge's expiry.
async fn credential(h: &Harness, challenge: &Challenge, payer: usize) -> Credential {
    let request = challenge.charge_request().unwrap();
    let valid_before = challenge.expires_unix().unwrap().unwrap();
    let terms = ExactTerms {
        pay_to: request.recipient,
        amount: u64::try_from(request.amount.get()).unwrap(),
        nonce: challenge.authorization_nonce(),
        valid_after: 0,
        valid_before,
    };
    let signed = h.fixture.sign_exact(NETWORK, payer, &terms).unwrap();
    let a = signed.payload.authorization;
    Credential {
        challenge: challenge.clone(),
        payload: AuthorizationPayload {
            from: a.from,
            to: a.to,
            value: a.value.get(),
            valid_after: a.valid_after.get(),
            valid_before: a.valid_before.get(),
            nonce: a.nonce,
            signature: signed.payload.signature,
        },
        source: Some(Credential::source_for(CHAIN_ID, a.from)),
    }
}

async fn send(app: &App, path: &str, credential: &Credential) -> Reply {
    app.get(path, &[("authorization", &credential.to_header_value())])
        .await
}

/// The payer's and the payee's token balances.
async fn balances(h: &Harness) -> (U256, U256) {
    (
        h.token_balance(h.address(PAYER)).await,
        h.token_balance(h.address(PAYEE)).await,
    )
}

/// Asserts that the quote's price moved exactly once since `before` ([`balances`]), payer to
/// payee.
async fn assert_paid_once(h: &Harness, before: (U256, U256)) {
    let price = U256::from(QUOTE_PRICE);
    let (payer, payee) = balances(h).await;
    assert_eq!(payer, before.0 - price, "the payer paid once");
    assert_eq!(payee, before.1 + price, "the payee was paid once");
}

/// A refusal: the draft's problem, with a fresh challenge.
#[track_caller]
fn refused(r: &Reply, problem: ProblemType) {
    assert_eq!(r.status, problem.status(), "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body["type"], problem.uri(), "{}", r.body);
    assert_eq!(r.body["status"], problem.status());
    let fresh = challenge_of(&Reply {
        status: 402,
        headers: r.headers.clone(),
        body: r.body.clone(),
    });
    assert_eq!(
        r.body["challengeId"],
        fresh.id.as_str(),
        "the problem names it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_offers_mpp_beside_x402_only_when_it_asks() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let plain = App::serve(&gate).await;
    let r = plain.get(PATH, &[]).await;
    assert_eq!(r.status, 402);
    assert!(
        !r.headers.contains_key("www-authenticate"),
        "off by default"
    );

    let app = serve(&gate).await;
    let r = app.get(PATH, &[]).await;
    let c = challenge_of(&r);
    // The x402 terms are as they were: the V1 body and the V2 header.
    assert_eq!(r.body["x402Version"], 1);
    assert_eq!(r.body["accepts"][0]["amount"], QUOTE_PRICE.to_string());
    assert!(r.headers.contains_key("payment-required"));
    assert_eq!((c.method.as_str(), c.intent.as_str()), ("evm", "charge"));
    assert_eq!(c.realm, app.url.trim_start_matches("http://"));
    let request = c.charge_request().unwrap();
    assert_eq!(request.amount.get(), U256::from(QUOTE_PRICE));
    assert_eq!(request.currency, h.token());
    assert_eq!(request.recipient, h.address(PAYEE));
    assert_eq!(request.method_details.chain_id, CHAIN_ID);
    assert_eq!(request.method_details.decimals, 6);
    assert!(request.accepts_authorization());
    let opaque = c.opaque().unwrap().expect("bound to the route");
    assert_eq!(opaque.get("method"), Some("GET"));
    assert_eq!(
        opaque.get("resource"),
        Some(format!("{}{PATH}", app.url).as_str())
    );
    let expires = c.expires_unix().unwrap().expect("an expiry");
    let now = h.now().await;
    assert!(expires > now && expires <= now + 600, "{expires} vs {now}");
    // Each challenge is unique: its id is known to the client it was given to alone.
    assert_ne!(challenge(&app, PATH).await.id, c.id);
    // Every 402 of the route carries one: a refused x402 payment's too.
    let bad = app.get(PATH, &[("x-payment", "garbage")]).await;
    challenge_of(&bad);
    // x402 clients pay the route as before.
    let payload = h
        .x402_payload(
            PAYER,
            h.address(PAYEE),
            QUOTE_PRICE,
            B256::repeat_byte(0x61),
        )
        .await;
    let ok = app.pay(PATH, &payload.encode_header()).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.headers.contains_key(X_PAYMENT_RESPONSE));
    assert!(
        !ok.headers.contains_key(PAYMENT_RECEIPT),
        "no MPP receipt for x402"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_credential_is_settled_once_and_served_with_its_receipt() {
    let h = Harness::new().await;
    let app = serve(&h.gate().await).await;
    let payer = h.address(PAYER);
    let before = balances(&h).await;

    let c = challenge(&app, PATH).await;
    let paid = credential(&h, &c, PAYER).await;
    let ok = send(&app, PATH, &paid).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.body["quote"], 42);
    assert_eq!(app.hits(), 1);
    let receipt = Receipt::decode(ok.headers[PAYMENT_RECEIPT].to_str().unwrap()).unwrap();
    assert_eq!(
        (receipt.method.as_str(), receipt.status.as_str()),
        ("evm", "success")
    );
    assert_eq!(receipt.challenge_id.as_deref(), Some(c.id.as_str()));
    assert_eq!(receipt.chain_id, Some(CHAIN_ID));
    let tx: B256 = receipt.reference.parse().unwrap();
    assert!(h.fixture.chain.receipt(tx).await.unwrap().unwrap().success);
    let s =
        SettlementResponseHeader::decode(ok.headers[X_PAYMENT_RESPONSE].to_str().unwrap()).unwrap();
    assert_eq!(s.transaction, receipt.reference);
    assert_eq!(s.payer, Some(payer));

    // The credential again: used. Nothing served, nothing moved.
    refused(
        &send(&app, PATH, &paid).await,
        ProblemType::InvalidChallenge,
    );
    // Its authorization as a plain x402 payment: the same once-only lock.
    let twin = paid
        .payload
        .to_x402_payload(NETWORK.parse().unwrap())
        .encode_header();
    let r = app.pay(PATH, &twin).await;
    assert_eq!(r.status, 402);
    assert_eq!(r.body["reason"], "duplicate_settlement", "{}", r.body);
    assert_eq!(app.hits(), 1);
    assert_paid_once(&h, before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_credential_at_once_is_served_once() {
    let h = Harness::new().await;
    let app = serve(&h.gate().await).await;
    let before = balances(&h).await;
    let paid = credential(&h, &challenge(&app, PATH).await, PAYER).await;
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (app, paid) = (Arc::clone(&app), paid.clone());
            tokio::spawn(async move { send(&app, PATH, &paid).await })
        })
        .collect();
    let mut served = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            200 => served += 1,
            402 => refused(&r, ProblemType::InvalidChallenge),
            // The one that took the payment's hold while another settled it.
            503 => assert_eq!(r.body["error"]["code"], "SettlementPending", "{}", r.body),
            s => panic!("{s}: {}", r.body),
        }
    }
    assert_eq!(served, 1);
    assert_eq!(app.hits(), 1);
    assert_paid_once(&h, before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_bound_to_anything_else_are_refused_and_move_nothing() {
    let h = Harness::new().await;
    let gate = h.gate_builder().memo_secret([7; 32]).build().await.unwrap();
    let app = serve(&gate).await;
    let before = balances(&h).await;
    let c = challenge(&app, PATH).await;
    let paid = credential(&h, &c, PAYER).await;

    // Another resource, at another price.
    refused(
        &send(&app, "/premium", &paid).await,
        ProblemType::InvalidChallenge,
    );
    // Another server's challenge (another secret), for the same route and terms.
    let other = h.gate_builder().memo_secret([8; 32]).build().await.unwrap();
    let other_app = serve(&other).await;
    let foreign = credential(&h, &challenge(&other_app, PATH).await, PAYER).await;
    let mut moved = foreign.clone();
    moved.challenge.opaque.clone_from(&c.opaque);
    refused(
        &send(&app, PATH, &foreign).await,
        ProblemType::InvalidChallenge,
    );
    refused(
        &send(&app, PATH, &moved).await,
        ProblemType::InvalidChallenge,
    );
    // The challenge's amount lowered: its id no longer matches.
    let premium = challenge(&app, "/premium").await;
    let mut cheaper = credential(&h, &premium, PAYER).await;
    cheaper.challenge.request = c.request.clone();
    refused(
        &send(&app, "/premium", &cheaper).await,
        ProblemType::InvalidChallenge,
    );
    // The signed value raised after signing, another payee, another nonce, another source.
    let mut raised = paid.clone();
    raised.payload.value += U256::from(1);
    refused(
        &send(&app, PATH, &raised).await,
        ProblemType::VerificationFailed,
    );
    let mut nonce = credential(&h, &challenge(&app, PATH).await, PAYER).await;
    nonce.payload.nonce = B256::repeat_byte(0x77);
    refused(
        &send(&app, PATH, &nonce).await,
        ProblemType::VerificationFailed,
    );
    let mut source = paid.clone();
    source.source = Some(Credential::source_for(CHAIN_ID, h.address(PAYEE)));
    refused(
        &send(&app, PATH, &source).await,
        ProblemType::VerificationFailed,
    );
    // A signature by someone else than `from`: the facilitator's verification refuses it.
    let mut forged = paid.clone();
    let mut sig = forged.payload.signature.to_vec();
    sig[10] ^= 0xff;
    forged.payload.signature = sig.into();
    refused(
        &send(&app, PATH, &forged).await,
        ProblemType::VerificationFailed,
    );
    // Malformed (a bare `Payment` carries no credential: the request is unpaid, as for mppx).
    for value in [
        "Payment !!!",
        "Payment e30",
        "Payment eyJjaGFsbGVuZ2UiOnt9fQ",
    ] {
        let r = app.get(PATH, &[("authorization", value)]).await;
        refused(&r, ProblemType::MalformedCredential);
    }
    // With an x402 payment beside it.
    let r = app
        .get(
            PATH,
            &[
                ("authorization", &paid.to_header_value()),
                ("x-payment", "x"),
            ],
        )
        .await;
    assert_eq!(r.status, 402);
    assert_eq!(r.body["reason"], "multiple_payment_headers", "{}", r.body);
    // Another scheme's Authorization is not a payment: the 402 of an unpaid request.
    let r = app.get(PATH, &[("authorization", "Bearer abc")]).await;
    assert_eq!(r.body["error"], "PaymentRequired", "{}", r.body);

    assert_eq!(app.hits(), 0);
    assert_eq!(balances(&h).await, before, "nothing moved");
    // And the untouched credential still pays, once.
    let ok = send(&app, PATH, &paid).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_paid_once(&h, before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_challenge_is_refused() {
    let h = Harness::new().await;
    let gate = h
        .gate_builder()
        .memo_ttl(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let app = serve(&gate).await;
    let paid = credential(&h, &challenge(&app, PATH).await, PAYER).await;
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    refused(&send(&app, PATH, &paid).await, ProblemType::PaymentExpired);
    assert_eq!(app.hits(), 0);
}

/// On anvil with a block every 2 s and 2 confirmations, a gate that holds a pending settlement
/// 300 ms: the credential's first request gets 503 `SettlementPending`; the very credential
/// again picks up the outcome and is served once; whoever rebuilds the authorization from the
/// chain cannot use it (as a credential it lacks the challenge id the nonce hashes; as an x402
/// payment it finds the lock taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pending_settlement_is_served_to_its_credential_once() {
    let h = Harness::on_slow_anvil(2, 2, |s| {
        s.confirmation_timeout = Duration::from_millis(300);
    })
    .await;
    let gate = h
        .gate_builder()
        .pending_hold(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let app = serve(&gate).await;
    let before = balances(&h).await;
    let paid = credential(&h, &challenge(&app, PATH).await, PAYER).await;
    let first = send(&app, PATH, &paid).await;
    assert_eq!(first.status, 503, "{}", first.body);
    assert_eq!(first.body["error"]["code"], "SettlementPending");
    assert_eq!(first.headers["cache-control"], "no-store");
    assert!(
        first.headers.contains_key("x-payment-retry"),
        "named for clients that look"
    );
    // The authorization, public now, as an x402 payment: refused, the payer's hold untouched.
    let twin = paid
        .payload
        .to_x402_payload(NETWORK.parse().unwrap())
        .encode_header();
    let r = app.pay(PATH, &twin).await;
    assert_eq!(r.body["reason"], "duplicate_settlement", "{}", r.body);
    // As a credential of a fresh challenge: its nonce is not that challenge's hash.
    let mut rebuilt = credential(&h, &challenge(&app, PATH).await, PAYER).await;
    rebuilt.payload = paid.payload.clone();
    refused(
        &send(&app, PATH, &rebuilt).await,
        ProblemType::VerificationFailed,
    );
    assert_eq!(app.hits(), 0);

    let mut served = None;
    for _ in 0..60 {
        let r = send(&app, PATH, &paid).await;
        if r.status != 503 {
            served = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let served = served.expect("settled within 30 s");
    assert_eq!(served.status, 200, "{}", served.body);
    assert!(served.headers.contains_key(PAYMENT_RECEIPT));
    assert_eq!(app.hits(), 1);
    refused(
        &send(&app, PATH, &paid).await,
        ProblemType::InvalidChallenge,
    );
    assert_eq!(app.hits(), 1);
    assert_paid_once(&h, before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn premium_and_quote_challenges_carry_their_own_prices() {
    let h = Harness::new().await;
    let app = serve(&h.gate().await).await;
    let premium = challenge(&app, "/premium").await.charge_request().unwrap();
    assert_eq!(premium.amount.get(), U256::from(PREMIUM_PRICE));
}

/// On Circle's FiatToken v2.2 (deployed on anvil at USDC's Base Sepolia address, blocks every
/// 2 s, 2 confirmations): an mppx-shaped credential pays the token's own
/// `transferWithAuthorization` once (the request held open until the settlement confirms), and
/// its replay is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_credential_pays_circles_usdc_once() {
    let h = Harness::usdc().await;
    let gate = h
        .gate_builder()
        .token(h.token(), "USDC", "2")
        .build()
        .await
        .unwrap();
    let app = serve(&gate).await;
    let before = balances(&h).await;
    let paid = credential(&h, &challenge(&app, PATH).await, PAYER).await;
    let ok = send(&app, PATH, &paid).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let receipt = Receipt::decode(ok.headers[PAYMENT_RECEIPT].to_str().unwrap()).unwrap();
    let tx: B256 = receipt.reference.parse().unwrap();
    let mined = h.fixture.chain.receipt(tx).await.unwrap().unwrap();
    assert!(mined.success);
    assert_eq!(
        mined.to,
        Some(h.token()),
        "the token's own transferWithAuthorization"
    );
    refused(
        &send(&app, PATH, &paid).await,
        ProblemType::InvalidChallenge,
    );
    assert_eq!(app.hits(), 1);
    assert_paid_once(&h, before).await;
}
