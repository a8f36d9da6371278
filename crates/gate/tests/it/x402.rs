//! Plain x402 V1 `exact` payments, settled through the facilitator before the handler runs.

use alloy::primitives::{B256, U256};
use tollgate_gate::X_PAYMENT_RESPONSE;
use tollgate_protocol::x402::SettlementResponseHeader;

use crate::support::{App, Harness, NETWORK, PAYEE, PAYER, QUOTE_PRICE};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn x402_payment_settles_once() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = std::sync::Arc::new(App::serve(&gate).await);
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));
    let before = (h.token_balance(payer).await, h.token_balance(payee).await);

    let payload = h
        .x402_payload(PAYER, payee, QUOTE_PRICE, B256::repeat_byte(0x41))
        .await;
    let header = payload.encode_header();
    let ok = app.pay("/v1/quote", &header).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(app.hits(), 1);
    let s =
        SettlementResponseHeader::decode(ok.headers[X_PAYMENT_RESPONSE].to_str().unwrap()).unwrap();
    assert!(s.success);
    assert_eq!(s.network, NETWORK);
    assert_eq!(s.payer, Some(payer));
    let tx: B256 = s.transaction.parse().unwrap();
    assert!(h.fixture.chain.receipt(tx).await.unwrap().unwrap().success);
    // Exactly one transfer, the whole price to the payee (no fee on the x402 path).
    assert_eq!(
        h.token_balance(payer).await,
        before.0 - U256::from(QUOTE_PRICE)
    );
    assert_eq!(
        h.token_balance(payee).await,
        before.1 + U256::from(QUOTE_PRICE)
    );

    // Replayed: refused, sequentially and concurrently.
    let again = app.pay("/v1/quote", &header).await;
    assert_eq!(again.status, 402);
    assert_eq!(again.body["error"], "InvalidPaymentProof");
    assert_eq!(again.body["reason"], "duplicate_settlement");
    assert!(again.body["message"].is_string());
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (app, header) = (std::sync::Arc::clone(&app), header.clone());
            tokio::spawn(async move { app.pay("/v1/quote", &header).await.status })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 402);
    }
    // At another resource of the same price: the lock is per authorization, not per path.
    assert_eq!(app.pay("/premium", &header).await.status, 402);
    assert_eq!(app.hits(), 1);
    assert_eq!(
        h.token_balance(payee).await,
        before.1 + U256::from(QUOTE_PRICE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_copies_of_a_fresh_x402_payment_pass_once() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = std::sync::Arc::new(App::serve(&gate).await);
    let payee = h.address(PAYEE);
    let before = h.token_balance(payee).await;
    let header = h
        .x402_payload(PAYER, payee, QUOTE_PRICE, B256::repeat_byte(0x42))
        .await
        .encode_header();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (app, header) = (std::sync::Arc::clone(&app), header.clone());
            tokio::spawn(async move { app.pay("/v1/quote", &header).await.status })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += usize::from(t.await.unwrap() == 200);
    }
    assert_eq!(ok, 1);
    assert_eq!(app.hits(), 1);
    assert_eq!(
        h.token_balance(payee).await,
        before + U256::from(QUOTE_PRICE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_payments_that_do_not_fit_get_the_x402_reason() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    let payee = h.address(PAYEE);
    let before = h.token_balance(payee).await;
    let cases = [
        // Too little for this resource.
        (
            h.x402_payload(PAYER, payee, QUOTE_PRICE - 1, B256::repeat_byte(0x51))
                .await,
            "/v1/quote",
            "invalid_exact_evm_payload_authorization_value",
        ),
        // Paid to someone else.
        (
            h.x402_payload(PAYER, h.address(6), QUOTE_PRICE, B256::repeat_byte(0x52))
                .await,
            "/v1/quote",
            "invalid_exact_evm_payload_recipient_mismatch",
        ),
        // Enough for the quote, not for /premium.
        (
            h.x402_payload(PAYER, payee, QUOTE_PRICE, B256::repeat_byte(0x53))
                .await,
            "/premium",
            "invalid_exact_evm_payload_authorization_value",
        ),
    ];
    for (payload, path, reason) in cases {
        let r = app.pay(path, &payload.encode_header()).await;
        assert_eq!(r.status, 402, "{}", r.body);
        assert_eq!(r.body["error"], "InvalidPaymentProof", "{path}");
        assert_eq!(r.body["reason"], reason, "{path}");
        assert!(r.body["message"].is_string(), "{path}");
        assert_eq!(r.body["x402Version"], 1);
    }
    // A forged signature: the facilitator's /verify refuses it.
    let mut forged = h
        .x402_payload(PAYER, payee, QUOTE_PRICE, B256::repeat_byte(0x54))
        .await;
    forged.payload.authorization.from = h.address(3);
    let r = app.pay("/v1/quote", &forged.encode_header()).await;
    assert_eq!(r.status, 402);
    assert_eq!(r.body["reason"], "invalid_exact_evm_payload_signature");
    // Another network.
    let mut other = h
        .x402_payload(PAYER, payee, QUOTE_PRICE, B256::repeat_byte(0x55))
        .await;
    other.network = "base".parse().unwrap();
    let r = app.pay("/v1/quote", &other.encode_header()).await;
    assert_eq!(r.body["error"], "InvalidPaymentProof");
    assert_eq!(r.body["reason"], "invalid_network");
    assert_eq!(app.hits(), 0);
    assert_eq!(h.token_balance(payee).await, before);
}

/// A slow chain: the facilitator answers the settlement "pending". The gate keeps the payment for
/// its payer and answers 503 with a retry token; the client's retry with the same `X-PAYMENT` and
/// the token picks up the outcome and is served once (before, the retry failed `/verify` with the nonce used: charged, never
/// served).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pending_x402_settlement_is_served_on_retry_and_charged_once() {
    let h = Harness::on_with(crate::support::Backend::Anvil, |s| {
        s.confirmation_timeout = std::time::Duration::from_millis(300);
    })
    .await;
    let gate = h
        .gate_builder()
        .pending_hold(std::time::Duration::from_millis(300))
        .build()
        .await
        .expect("gate");
    let app = std::sync::Arc::new(App::serve(&gate).await);
    let (payer, payee) = (h.address(PAYER), h.address(PAYEE));
    let before = (h.token_balance(payer).await, h.token_balance(payee).await);
    let header = h
        .x402_payload(PAYER, payee, QUOTE_PRICE, B256::repeat_byte(0x44))
        .await
        .encode_header();
    let rpc = h.fixture.rpc_url().expect("anvil").to_owned();
    let call = |method: &'static str, params: serde_json::Value| {
        let (http, rpc) = (h.http.clone(), rpc.clone());
        async move {
            let r: serde_json::Value = http
                .post(&rpc)
                .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert!(r.get("error").is_none(), "{method}: {r}");
        }
    };
    call("evm_setAutomine", serde_json::json!([false])).await;

    let pending = app.pay("/v1/quote", &header).await;
    assert_eq!(pending.status, 503, "{}", pending.body);
    assert_eq!(pending.body["error"]["code"], "SettlementPending");
    assert!(pending.headers.contains_key("retry-after"));
    let token = pending.headers["x-payment-retry"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(app.hits(), 0);

    call("evm_mine", serde_json::json!([])).await;
    call("evm_setAutomine", serde_json::json!([true])).await;
    // The same payment without its token is refused, and leaves the payer's hold.
    let blind = app.pay("/v1/quote", &header).await;
    assert_eq!(blind.status, 402, "{}", blind.body);
    assert_eq!(blind.body["reason"], "duplicate_settlement");
    // The client retries the same payment with its token, several times at once: served
    // exactly once.
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let (app, header, token) = (std::sync::Arc::clone(&app), header.clone(), token.clone());
            tokio::spawn(async move { app.pay_retrying("/v1/quote", &header, &token).await })
        })
        .collect();
    let mut served = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            200 => served += 1,
            402 => assert_eq!(r.body["reason"], "duplicate_settlement", "{}", r.body),
            // One of them holds the payment while the others race it.
            503 => assert_eq!(r.body["error"]["code"], "SettlementPending", "{}", r.body),
            other => panic!("{other}: {}", r.body),
        }
    }
    assert_eq!(served, 1, "served once");
    assert_eq!(app.hits(), 1);
    assert_eq!(app.pay("/v1/quote", &header).await.status, 402);
    assert_eq!(
        h.token_balance(payer).await,
        before.0 - U256::from(QUOTE_PRICE)
    );
    assert_eq!(
        h.token_balance(payee).await,
        before.1 + U256::from(QUOTE_PRICE)
    );
}

/// One clock: the gate checks an x402 window by the chain's clock (the facilitator's published
/// `chainTime`), so a window the facilitator accepts the gate accepts, also after the chain
/// travels 30 days ahead of this machine and of the clock the gate read before (before, the gate
/// refused it by the local clock: `valid_after` in the future).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_x402_window_by_the_chain_clock_is_accepted_after_the_chain_travels() {
    let h = Harness::new().await;
    let gate = h.gate().await;
    let app = App::serve(&gate).await;
    let payee = h.address(PAYEE);
    let first = h
        .x402_payload(PAYER, payee, QUOTE_PRICE, B256::repeat_byte(0x61))
        .await
        .encode_header();
    assert_eq!(app.pay("/v1/quote", &first).await.status, 200);

    h.fixture.chain.advance_time(30 * 86_400).await.unwrap();
    // The facilitator reads the chain's clock at most once a second.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let payer = h.address(PAYER);
    let before = h.token_balance(payer).await;
    // Signed by the chain's clock: validAfter is 30 days past this machine's.
    let second = h
        .x402_payload(PAYER, payee, QUOTE_PRICE, B256::repeat_byte(0x62))
        .await;
    let local = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(second.payload.authorization.valid_after.get() > U256::from(local + 86_400));
    let r = app.pay("/v1/quote", &second.encode_header()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        h.token_balance(payer).await,
        before - U256::from(QUOTE_PRICE)
    );
    assert_eq!(app.hits(), 2);
}
