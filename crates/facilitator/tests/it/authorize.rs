//! `POST /authorize`: settlement through the router, proofs, idempotency, and every rejection.

use alloy::primitives::{Address, B256, U256};
use serde_json::{Value, json};
use tollgate_chain::{
    TxRequest, WaitOptions, authorization::token_domain, contracts::PaymentRouter,
};
use tollgate_protocol::PaymentProof;

use crate::support::{Backend, Harness, PROOF_KEY};

const PRICE: u64 = 500_000;
const FEE: u64 = 1_000;

fn memo(n: u8) -> B256 {
    B256::repeat_byte(n)
}

fn body(sp: &tollgate_protocol::SignedPayment) -> Value {
    json!({ "signedPayment": sp })
}

async fn happy_path(backend: Backend) {
    check_happy_path(&Harness::new(backend).await).await;
}

/// The same on a PostgreSQL store (CI sets `TOLLGATE_TEST_DATABASE_URL`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_on_postgres() {
    let (h, schema) = Harness::on_postgres(Backend::Devnet).await;
    check_happy_path(&h).await;
    drop(h);
    schema.drop_schema().await;
}

async fn check_happy_path(h: &Harness) {
    let payer = h.account(1).address;
    let pay_to = h.account(7).address;
    let fee_recipient = h.account(0).address;
    let (p0, t0, f0) = (
        h.token_balance(payer).await,
        h.token_balance(pay_to).await,
        h.token_balance(fee_recipient).await,
    );

    let sp = h.signed_payment(1, pay_to, PRICE, memo(1)).await;
    let (status, reply) = h.post("/authorize", &body(&sp)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["status"], "confirmed");
    let proof = PaymentProof::decode(reply["proof"].as_str().unwrap()).unwrap();
    assert_eq!(serde_json::to_value(&proof).unwrap(), reply["payment"]);
    assert_eq!(proof.payer, payer);
    assert_eq!(proof.pay_to, pay_to);
    assert_eq!(proof.amount.get(), U256::from(PRICE));
    assert_eq!(proof.fee.get(), U256::from(FEE));
    assert_eq!(proof.memo, memo(1));
    assert!(proof.expiry > proof.issued_at);
    assert_eq!(
        tollgate_chain::proof::recover(&proof).unwrap(),
        h.account(PROOF_KEY).address
    );
    let receipt = h
        .fixture
        .chain
        .receipt(proof.tx_hash)
        .await
        .unwrap()
        .expect("settlement mined");
    assert!(receipt.success);
    assert_eq!(receipt.block_number, proof.block);

    // Exactly the signed amounts moved: payer -price, payee +price-fee, fee recipient +fee.
    assert_eq!(h.token_balance(payer).await, p0 - U256::from(PRICE));
    assert_eq!(h.token_balance(pay_to).await, t0 + U256::from(PRICE - FEE));
    assert_eq!(h.token_balance(fee_recipient).await, f0 + U256::from(FEE));

    // The same payment again: the same proof, nothing moves.
    let (status, again) = h.post("/authorize", &body(&sp)).await;
    assert_eq!(status, 200);
    assert_eq!(again["proof"], reply["proof"]);
    assert_eq!(h.token_balance(payer).await, p0 - U256::from(PRICE));

    // Gates can verify offline against the published signer, or ask.
    let (_, wk) = h.get("/.well-known/tollgate").await;
    assert_eq!(
        wk["proofSigners"][0]
            .as_str()
            .unwrap()
            .parse::<Address>()
            .unwrap(),
        h.account(PROOF_KEY).address
    );
    assert_eq!(
        wk["networks"]["tollgate-devnet"]["router"]
            .as_str()
            .unwrap()
            .parse::<Address>()
            .unwrap(),
        h.fixture.deployment.router
    );
    assert_eq!(wk["networks"]["tollgate-devnet"]["fee"], "1000");
    let (_, v) = h
        .post("/proofs/verify", &json!({ "proof": reply["proof"] }))
        .await;
    assert_eq!(v["valid"], true, "{v}");
    let mut forged = proof.clone();
    forged.amount = tollgate_protocol::Amount::from_units(PRICE * 2);
    let (_, v) = h
        .post("/proofs/verify", &json!({ "proof": forged.encode() }))
        .await;
    assert_eq!(v["valid"], false, "{v}");
}

async fn rejections_change_nothing(backend: Backend) {
    let h = Harness::new(backend).await;
    let pay_to = h.account(7).address;
    let payer = h.account(2).address;
    let before = (h.token_balance(payer).await, h.token_balance(pay_to).await);
    let block = h.fixture.chain.block_number().await.unwrap();
    let now = h.now().await;
    let good = h.signed_payment(2, pay_to, PRICE, memo(2)).await;

    let mut cases: Vec<(&str, Value, u16, &str)> = Vec::new();
    let mut unknown_net = good.clone();
    unknown_net.network = "solana".parse().unwrap();
    cases.push(("unknown network", body(&unknown_net), 422, "UnknownNetwork"));
    let mut wrong_token = good.clone();
    wrong_token.token = Address::repeat_byte(0x11);
    cases.push(("wrong token", body(&wrong_token), 422, "UnsupportedToken"));
    let mut not_router = good.clone();
    not_router.authorization.to = pay_to;
    cases.push((
        "authorization to the payee, not the router",
        body(&not_router),
        422,
        "InvalidAuthorization",
    ));
    let mut value_mismatch = good.clone();
    value_mismatch.amount = tollgate_protocol::Amount::from_units(PRICE - 1);
    cases.push((
        "value differs from amount",
        body(&value_mismatch),
        422,
        "InvalidAuthorization",
    ));
    let wrong_fee = h.signed_payment_with(2, pay_to, PRICE, memo(3), 0, now - 60, now + 300);
    cases.push((
        "nonce commits to another fee",
        body(&wrong_fee),
        422,
        "NonceMismatch",
    ));
    let mut redirected = good.clone();
    redirected.pay_to = h.account(6).address;
    cases.push((
        "payTo changed after signing",
        body(&redirected),
        422,
        "NonceMismatch",
    ));
    let too_long = h.signed_payment_with(2, pay_to, PRICE, memo(4), FEE, now - 60, now + 7200);
    cases.push((
        "validity window too long",
        body(&too_long),
        422,
        "ValidityTooLong",
    ));
    let expired = h.signed_payment_with(2, pay_to, PRICE, memo(5), FEE, now - 600, now - 1);
    cases.push(("expired", body(&expired), 422, "AuthorizationExpired"));
    let early = h.signed_payment_with(2, pay_to, PRICE, memo(6), FEE, now + 100, now + 300);
    cases.push((
        "not yet valid",
        body(&early),
        422,
        "AuthorizationNotYetValid",
    ));
    let mut forged = good.clone();
    forged.authorization.from = h.account(3).address;
    cases.push((
        "signed by someone else",
        body(&forged),
        422,
        "InvalidSignature",
    ));
    let mut garbage_sig = good.clone();
    garbage_sig.authorization.signature = vec![1, 2, 3].into();
    cases.push((
        "garbage signature",
        body(&garbage_sig),
        422,
        "InvalidSignature",
    ));
    let rich = 2_000_000_000_000u64; // 2M tokens: more than the payer holds
    let poor = h.signed_payment(2, pay_to, rich, memo(7)).await;
    cases.push(("insufficient funds", body(&poor), 402, "InsufficientFunds"));
    let below_fee = h.signed_payment(2, pay_to, FEE, memo(8)).await;
    cases.push((
        "amount not above the fee",
        body(&below_fee),
        422,
        "AmountBelowFee",
    ));

    for (name, b, status, code) in cases {
        let (s, reply) = h.post("/authorize", &b).await;
        assert_eq!(s, status, "{name}: {reply}");
        assert_eq!(reply["error"]["code"], code, "{name}: {reply}");
        assert!(
            !reply["error"]["message"].as_str().unwrap().is_empty(),
            "{name}"
        );
    }

    // Malformed input names the field.
    let mut wrong_type = body(&good);
    wrong_type["signedPayment"]["amount"] = json!(500000);
    let mut bad_hex = body(&good);
    bad_hex["signedPayment"]["memo"] = json!("0xzz");
    let mut too_big = body(&good);
    too_big["signedPayment"]["amount"] = json!("1".repeat(80));
    let mut unknown_field = body(&good);
    unknown_field["signedPayment"]["tip"] = json!("1");
    let mut missing = body(&good);
    missing["signedPayment"]
        .as_object_mut()
        .unwrap()
        .remove("payTo");
    for (name, b, field) in [
        (
            "number for a string amount",
            wrong_type,
            "signedPayment.amount",
        ),
        ("bad hex", bad_hex, "signedPayment.memo"),
        ("amount beyond uint256", too_big, "signedPayment.amount"),
        ("unknown field", unknown_field, "tip"),
        ("missing field", missing, "payTo"),
    ] {
        let (s, reply) = h.post("/authorize", &b).await;
        assert_eq!(s, 400, "{name}: {reply}");
        let msg = reply["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(field),
            "{name}: message {msg:?} should name {field}"
        );
    }
    let (s, reply) = h
        .post_raw(
            "/authorize",
            b"{\"signedPayment\": ".to_vec(),
            "application/json",
        )
        .await;
    assert_eq!(
        (s, reply["error"]["code"].as_str()),
        (400, Some("MalformedJson")),
        "{reply}"
    );
    // serde reads a struct from an array by position; the API takes objects only.
    let as_array = json!([body(&good)["signedPayment"].clone()]);
    let (s, reply) = h.post("/authorize", &as_array).await;
    assert_eq!(
        (s, reply["error"]["code"].as_str()),
        (400, Some("InvalidField")),
        "{reply}"
    );
    let (s, _) = h
        // Just over the 64 KiB limit: small enough that the client finishes writing before the
        // server answers 413 and closes (a much larger body races into a broken pipe).
        .post_raw("/authorize", vec![b' '; 70_000], "application/json")
        .await;
    assert_eq!(s, 413);
    let (s, _) = h
        .post_raw(
            "/authorize",
            serde_json::to_vec(&body(&good)).unwrap(),
            "text/plain",
        )
        .await;
    assert_eq!(s, 415);

    // Nothing moved, nothing was mined, nothing was recorded.
    assert_eq!(
        (h.token_balance(payer).await, h.token_balance(pay_to).await),
        before
    );
    assert_eq!(h.fixture.chain.block_number().await.unwrap(), block);
    let counts = h.facilitator.store().count_by_status().await.unwrap();
    assert!(counts.iter().all(|(_, n)| *n == 0), "{counts:?}");

    // And the good payment still goes through afterwards.
    let (s, reply) = h.post("/authorize", &body(&good)).await;
    assert_eq!(s, 200, "{reply}");
}

async fn concurrent_duplicates_settle_once(backend: Backend) {
    let h = std::sync::Arc::new(Harness::new(backend).await);
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    let sp = h.signed_payment(3, pay_to, PRICE, memo(9)).await;
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let h = h.clone();
        let b = body(&sp);
        tasks.push(tokio::spawn(async move { h.post("/authorize", &b).await }));
    }
    let mut proofs = std::collections::HashSet::new();
    for t in tasks {
        let (s, reply) = t.await.unwrap();
        assert_eq!(s, 200, "{reply}");
        proofs.insert(reply["proof"].as_str().unwrap().to_owned());
    }
    assert_eq!(proofs.len(), 1, "every caller gets the same proof");
    assert_eq!(
        h.token_balance(pay_to).await,
        before + U256::from(PRICE - FEE),
        "exactly one transfer"
    );
}

/// Two payloads under one nonce (the payer signed the same nonce for two amounts): the first
/// settles, the second is a 409 `IdempotencyConflict` and moves nothing, whether it comes after
/// the first settled or at the same time; the first again still gets its proof.
async fn two_payloads_under_one_nonce_settle_one(backend: Backend) {
    let h = std::sync::Arc::new(Harness::new(backend).await);
    let pay_to = h.account(7).address;
    let payer = h.account(2).address;
    let (before, payer_before) = (h.token_balance(pay_to).await, h.token_balance(payer).await);

    let first = h.signed_payment(2, pay_to, PRICE, memo(20)).await;
    let second = h.signed_payment(2, pay_to, 2 * PRICE, memo(20)).await;
    assert_eq!(first.authorization.nonce, second.authorization.nonce);
    let (s, reply) = h.post("/authorize", &body(&first)).await;
    assert_eq!(s, 200, "{reply}");
    let (s, refused) = h.post("/authorize", &body(&second)).await;
    assert_eq!(
        (s, refused["error"]["code"].as_str()),
        (409, Some("IdempotencyConflict")),
        "{refused}"
    );
    let (s, again) = h.post("/authorize", &body(&first)).await;
    assert_eq!((s, &again["proof"]), (200, &reply["proof"]), "{again}");

    // At the same time, on a fresh nonce: one settles, the other is refused.
    let a = h.signed_payment(2, pay_to, PRICE, memo(21)).await;
    let b = h.signed_payment(2, pay_to, 2 * PRICE, memo(21)).await;
    let posts = [a, b].map(|sp| {
        let h = h.clone();
        tokio::spawn(async move { h.post("/authorize", &body(&sp)).await })
    });
    let mut statuses = Vec::new();
    for post in posts {
        let (s, reply) = post.await.unwrap();
        statuses.push((s, reply["error"]["code"].as_str().map(str::to_owned)));
    }
    statuses.sort();
    assert_eq!(
        statuses,
        [(200, None), (409, Some("IdempotencyConflict".to_owned()))]
    );
    let moved = h.token_balance(pay_to).await - before;
    let paid = payer_before - h.token_balance(payer).await;
    assert!(
        moved == U256::from(2 * (PRICE - FEE))
            || moved == U256::from(PRICE - FEE + 2 * PRICE - FEE),
        "one transfer per nonce: {moved}"
    );
    assert!(
        paid == U256::from(2 * PRICE) || paid == U256::from(3 * PRICE),
        "{paid}"
    );
}

/// Someone else submits the payer's authorization to the router first: the facilitator answers
/// with a proof of that settlement instead of an error.
async fn front_run_is_recovered(backend: Backend) {
    let h = Harness::new(backend).await;
    let pay_to = h.account(7).address;
    let before = h.token_balance(pay_to).await;
    let sp = h.signed_payment(4, pay_to, PRICE, memo(10)).await;
    let a = &sp.authorization;
    let call = PaymentRouter::settleCall {
        from: a.from,
        payTo: sp.pay_to,
        amount: sp.amount.get(),
        fee: U256::from(FEE),
        memo: sp.memo,
        validAfter: a.valid_after.get(),
        validBefore: a.valid_before.get(),
        signature: a.signature.clone(),
    };
    use alloy::sol_types::SolCall;
    let front = h
        .fixture
        .chain
        .send_and_wait(
            TxRequest::call(
                h.account(5).address,
                h.fixture.deployment.router,
                call.abi_encode(),
            ),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    let front_tx = front.receipt().unwrap().tx_hash;
    let (s, reply) = h.post("/authorize", &body(&sp)).await;
    assert_eq!(s, 200, "{reply}");
    assert_eq!(
        reply["payment"]["txHash"]
            .as_str()
            .unwrap()
            .parse::<B256>()
            .unwrap(),
        front_tx
    );
    assert_eq!(
        h.token_balance(pay_to).await,
        before + U256::from(PRICE - FEE)
    );

    // A nonce used with no matching settlement (cancelled by the payer) is a conflict, not a proof.
    let cancelled = h.signed_payment(4, pay_to, PRICE, memo(11)).await;
    let payer = h.account(4);
    let cancel = tollgate_chain::authorization::CancelAuthorization {
        authorizer: payer.address,
        nonce: cancelled.authorization.nonce,
    };
    let domain = token_domain(
        "USD Coin",
        "2",
        h.fixture.chain.chain_id(),
        h.fixture.deployment.token,
    );
    let sig = tollgate_chain::authorization::sign(&payer.signer(), &cancel, &domain).unwrap();
    let call = tollgate_chain::contracts::Token::cancelAuthorization_1Call {
        authorizer: payer.address,
        nonce: cancel.nonce,
        signature: sig,
    };
    h.fixture
        .chain
        .send_and_wait(
            TxRequest::call(
                h.account(5).address,
                h.fixture.deployment.token,
                call.abi_encode(),
            ),
            WaitOptions::default(),
        )
        .await
        .unwrap();
    let (s, reply) = h.post("/authorize", &body(&cancelled)).await;
    assert_eq!(
        (s, reply["error"]["code"].as_str()),
        (409, Some("AuthorizationUsed")),
        "{reply}"
    );
}

crate::on_backends!(
    happy_path,
    rejections_change_nothing,
    concurrent_duplicates_settle_once,
    two_payloads_under_one_nonce_settle_one,
    front_run_is_recovered
);

/// Confirmation not seen in time: 202 with the tx hash and a status URL that answers with the
/// proof once the transaction is deep enough (anvil, confirmation depth 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_then_confirmed_via_status_url() {
    let h = Harness::with_confirmations(Backend::Anvil, 2, |s| {
        s.confirmation_timeout = std::time::Duration::from_millis(300)
    })
    .await;
    let pay_to = h.account(7).address;
    let sp = h.signed_payment(1, pay_to, PRICE, memo(12)).await;
    let (s, reply) = h.post("/authorize", &body(&sp)).await;
    assert_eq!(s, 202, "{reply}");
    assert_eq!(reply["status"], "pending");
    let tx: B256 = reply["txHash"].as_str().unwrap().parse().unwrap();
    let status_url = reply["statusUrl"].as_str().unwrap().to_owned();
    assert!(status_url.starts_with(&h.url));
    let path = status_url.trim_start_matches(&h.url).to_owned();
    let (s, again) = h.get(&path).await;
    assert_eq!(s, 202, "{again}");
    // The same request again is still pending, and broadcasts nothing new.
    let (s, _) = h.post("/authorize", &body(&sp)).await;
    assert_eq!(s, 202);
    h.fixture.chain.advance_time(1).await.unwrap(); // mines a block: depth 2 reached
    let (s, done) = h.get(&path).await;
    assert_eq!(s, 200, "{done}");
    assert_eq!(
        done["payment"]["txHash"]
            .as_str()
            .unwrap()
            .parse::<B256>()
            .unwrap(),
        tx
    );
    let (s, last) = h.post("/authorize", &body(&sp)).await;
    assert_eq!((s, &last["proof"]), (200, &done["proof"]));
    let (s, _) = h
        .get(&format!("/settlements/{}", B256::repeat_byte(1)))
        .await;
    assert_eq!(s, 404);
}

/// A claimed settlement's proof goes only to the claim's holder: a repeat of the request
/// without the claim (what someone who copied the authorization from the chain can send) or
/// with another one is refused, and so is the status URL without its token; the pending answer's
/// status URL carries the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_proof_goes_only_to_its_claimant() {
    let h = Harness::with_confirmations(Backend::Anvil, 2, |s| {
        s.confirmation_timeout = std::time::Duration::from_millis(300)
    })
    .await;
    let sp = h
        .signed_payment(1, h.account(7).address, PRICE, memo(21))
        .await;
    let claim = B256::repeat_byte(0xc1);
    let claimed = |claim: Option<B256>| {
        let mut b = body(&sp);
        if let Some(c) = claim {
            b["claim"] = json!(c);
        }
        b
    };
    let (s, pending) = h.post("/authorize", &claimed(Some(claim))).await;
    assert_eq!(s, 202, "{pending}");
    let token = alloy::primitives::keccak256(claim);
    let status_url = pending["statusUrl"].as_str().unwrap().to_owned();
    assert!(
        status_url.ends_with(&format!("?token={token}")),
        "{status_url}"
    );
    let path = status_url.trim_start_matches(&h.url).to_owned();
    let bare = path.split('?').next().unwrap().to_owned();
    h.fixture.chain.advance_time(1).await.unwrap(); // depth 2

    for (what, request) in [
        ("no claim", claimed(None)),
        ("another claim", claimed(Some(B256::repeat_byte(0xc2)))),
    ] {
        let (s, v) = h.post("/authorize", &request).await;
        assert_eq!(s, 403, "{what}: {v}");
        assert_eq!(v["error"]["code"], "ClaimMismatch");
        assert!(v.get("proof").is_none());
    }
    for url in [
        bare.clone(),
        format!("{bare}?token={}", B256::repeat_byte(9)),
    ] {
        let (s, v) = h.get(&url).await;
        assert_eq!(s, 403, "{url}: {v}");
    }
    let (s, bad) = h.get(&format!("{bare}?token=nope")).await;
    assert_eq!(s, 400, "{bad}");

    let (s, done) = h.get(&path).await;
    assert_eq!(s, 200, "{done}");
    let (s, again) = h.post("/authorize", &claimed(Some(claim))).await;
    assert_eq!((s, &again["proof"]), (200, &done["proof"]));
}

/// A payment to the router itself is refused before anything is written or sent: the router
/// would keep it, and nothing could take it out (its `settle` does not refuse it; halmos found it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_to_the_router_itself_is_refused_and_nothing_moves() {
    let h = Harness::new(Backend::Devnet).await;
    let router = h.fixture.deployment.router;
    let payer = h.account(1).address;
    let before = (h.token_balance(payer).await, h.token_balance(router).await);
    let sp = h.signed_payment(1, router, PRICE, memo(0x7e)).await;
    let (status, v) = h.post("/authorize", &body(&sp)).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["error"]["code"], "InvalidAuthorization", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("router"),
        "{v}"
    );
    let key = tollgate_facilitator::settlement_key(
        h.chain_id(),
        h.token(),
        payer,
        sp.authorization.nonce,
    );
    assert!(
        h.facilitator
            .store()
            .settlement(key)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        (h.token_balance(payer).await, h.token_balance(router).await),
        before
    );
}
