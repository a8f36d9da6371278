//! Circle's USDC (FiatToken v2.2 behind its proxy) at its own Base Sepolia address, on anvil run
//! as Base Sepolia with 2 s blocks and 2 confirmations: the money paths against the real token.

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::SolCall,
};
use serde_json::{Value, json};
use tollgate_chain::{
    Confirmation, TxRequest, WaitOptions,
    authorization::{
        CancelAuthorization, Permit, Subscribe, sign, subscriptions_domain, token_domain,
    },
    contracts::{self, Token},
};
use tollgate_protocol::{PaymentProof, x402::PaymentPayload};
use tollgate_testkit::{
    harness::{FEE, PAYEE, PAYER, PROOF_KEY, TestNet},
    usdc::{self, BASE_SEPOLIA_CHAIN_ID, USDC_BASE_SEPOLIA, Usdc},
};

const NETWORK: &str = "base-sepolia";

/// `POST path` with a JSON body: the status and the JSON answer.
pub(crate) async fn post(net: &TestNet, path: &str, body: &Value) -> (u16, Value) {
    let r = net
        .http
        .post(format!("{}{path}", net.url))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// An x402 V1 `/verify` or `/settle` body: `payload` against the requirements an x402 resource
/// server on Base Sepolia builds for `amount` USDC units to `pay_to`.
fn x402_body(payload: &PaymentPayload, pay_to: Address, amount: u64) -> Value {
    let requirements = json!({
        "scheme": "exact",
        "network": NETWORK,
        "maxAmountRequired": amount.to_string(),
        "resource": "http://127.0.0.1/v1/quote",
        "description": "a quote",
        "mimeType": "application/json",
        "payTo": pay_to,
        "maxTimeoutSeconds": 60,
        "asset": USDC_BASE_SEPOLIA,
        "extra": { "name": "USDC", "version": "2" }
    });
    json!({ "x402Version": 1, "paymentPayload": payload, "paymentRequirements": requirements })
}

/// A facilitator serving `base-sepolia` over FiatToken, blocks every 2 s, 2 confirmations.
pub(crate) async fn usdc_net() -> (TestNet, Usdc) {
    let (fixture, usdc) = usdc::fixture().await.expect("USDC on anvil");
    let net = TestNet::builder()
        .fixture(fixture)
        .networks([NETWORK])
        .confirmations(2)
        .start()
        .await
        .expect("test network");
    net.mine_every(2).await;
    (net, usdc)
}

#[tokio::test(flavor = "multi_thread")]
async fn x402_v1_exact_pays_fiat_token_once() {
    let (net, usdc) = usdc_net().await;
    assert_eq!(net.chain_id(), BASE_SEPOLIA_CHAIN_ID);
    assert_eq!(net.token(), USDC_BASE_SEPOLIA);
    // The real token, as Circle configured it.
    let meta = usdc.metadata(&*net.fixture.chain).await.unwrap();
    assert_eq!(meta.name, "USDC");
    assert_eq!(meta.symbol, "USDC");
    assert_eq!(meta.version, "2");
    assert_eq!(meta.decimals, 6);
    assert_eq!(meta.implementation, usdc.implementation);
    assert_eq!(meta.admin, usdc.roles.proxy_admin.address);
    assert_eq!(meta.master_minter, usdc.roles.master_minter.address);

    let (payer, pay_to) = (net.address(PAYER), net.address(PAYEE));
    let before = (
        net.token_balance(payer).await,
        net.token_balance(pay_to).await,
    );
    assert_eq!(before.0, usdc::MINTED_EACH);
    let amount = 10_000; // one cent
    let payload = net
        .x402_payload(NETWORK, PAYER, pay_to, amount, B256::repeat_byte(0x34))
        .await;
    let body = x402_body(&payload, pay_to, amount);

    let (s, v) = post(&net, "/verify", &body).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({ "isValid": true, "payer": payer.to_checksum(None) })
    );

    let (s, r) = post(&net, "/settle", &body).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["network"], NETWORK);
    assert_eq!(r["payer"], payer.to_checksum(None));
    let tx: B256 = r["transaction"].as_str().unwrap().parse().unwrap();
    let receipt = net.fixture.chain.receipt(tx).await.unwrap().unwrap();
    assert!(receipt.success);
    assert_eq!(receipt.to, Some(USDC_BASE_SEPOLIA));
    // Settled after 2 confirmations: the block on top of the settlement's is mined.
    assert!(net.fixture.chain.block_number().await.unwrap() > receipt.block_number);
    assert_eq!(
        net.token_balance(payer).await,
        before.0 - U256::from(amount)
    );
    assert_eq!(
        net.token_balance(pay_to).await,
        before.1 + U256::from(amount)
    );

    // Once: a replay names the first transaction and moves nothing.
    let (_, again) = post(&net, "/settle", &body).await;
    assert_eq!(again["success"], false, "{again}");
    assert_eq!(again["errorReason"], "duplicate_settlement", "{again}");
    assert_eq!(again["transaction"], r["transaction"]);
    assert_eq!(
        net.token_balance(pay_to).await,
        before.1 + U256::from(amount)
    );
    let (_, v) = post(&net, "/verify", &body).await;
    assert_eq!(v["isValid"], false, "{v}");
    assert_eq!(v["invalidReason"], "invalid_transaction_state", "{v}");
}

/// FiatToken's refusals (its `Error(string)` reverts, its nonce state) reach x402 clients as x402's
/// reasons, and a second operator settling a used payment names the first transaction.
#[tokio::test(flavor = "multi_thread")]
async fn x402_v1_refusals_on_fiat_token() {
    let (net, _usdc) = usdc_net().await;
    let pay_to = net.address(PAYEE);
    let before = net.token_balance(pay_to).await;

    let too_much = 2 * 1_000_000_000_000;
    let poor = net
        .x402_payload(NETWORK, PAYER, pay_to, too_much, B256::repeat_byte(0x37))
        .await;
    let (_, v) = post(&net, "/verify", &x402_body(&poor, pay_to, too_much)).await;
    assert_eq!(
        (&v["isValid"], &v["invalidReason"]),
        (&json!(false), &json!("insufficient_funds")),
        "{v}"
    );
    let mut forged = serde_json::to_value(
        net.x402_payload(NETWORK, PAYER, pay_to, 10_000, B256::repeat_byte(0x38))
            .await,
    )
    .unwrap();
    forged["payload"]["authorization"]["from"] = json!(net.address(3));
    let forged: PaymentPayload = serde_json::from_value(forged).unwrap();
    let (_, r) = post(&net, "/settle", &x402_body(&forged, pay_to, 10_000)).await;
    assert_eq!(
        (&r["success"], &r["errorReason"], &r["transaction"]),
        (
            &json!(false),
            &json!("invalid_exact_evm_payload_signature"),
            &json!("")
        ),
        "{r}"
    );

    // Settled here, then sent to another operator with a store of its own: the chain says the
    // authorization is used, and the answer names the first transaction.
    let payload = net
        .x402_payload(NETWORK, PAYER, pay_to, 10_000, B256::repeat_byte(0x36))
        .await;
    let body = x402_body(&payload, pay_to, 10_000);
    let (_, first) = post(&net, "/settle", &body).await;
    assert_eq!(first["success"], true, "{first}");
    let (other, _dir) = net.other_facilitator(&[NETWORK]).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(tollgate_facilitator::serve(
        other,
        listener,
        std::future::pending(),
    ));
    let r: Value = net
        .http
        .post(format!("{url}/settle"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["success"], false, "{r}");
    assert_eq!(r["errorReason"], "duplicate_settlement", "{r}");
    assert_eq!(r["transaction"], first["transaction"]);
    assert_eq!(net.token_balance(pay_to).await, before + U256::from(10_000));
}

#[tokio::test(flavor = "multi_thread")]
async fn authorize_settles_through_the_router_on_fiat_token_once() {
    let (net, usdc) = usdc_net().await;
    let router = usdc.deployment.router;
    assert_eq!(net.fixture.deployment.router, router);
    let (payer, pay_to, fee_recipient) = (net.address(PAYER), net.address(PAYEE), net.address(0));
    let balances = || async {
        (
            net.token_balance(payer).await,
            net.token_balance(pay_to).await,
            net.token_balance(fee_recipient).await,
        )
    };
    let (p0, t0, f0) = balances().await;
    let price = 500_000;
    let sp = net
        .signed_payment(NETWORK, PAYER, pay_to, price, B256::repeat_byte(0x35))
        .await;
    let body = json!({ "signedPayment": sp });

    let (s, reply) = post(&net, "/authorize", &body).await;
    assert_eq!(s, 200, "{reply}");
    assert_eq!(reply["status"], "confirmed", "{reply}");
    let proof = PaymentProof::decode(reply["proof"].as_str().unwrap()).unwrap();
    assert_eq!(
        (
            proof.payer,
            proof.pay_to,
            proof.amount.get(),
            proof.fee.get()
        ),
        (payer, pay_to, U256::from(price), U256::from(FEE))
    );
    assert_eq!(
        tollgate_chain::proof::recover(&proof).unwrap(),
        net.address(PROOF_KEY)
    );
    let receipt = net
        .fixture
        .chain
        .receipt(proof.tx_hash)
        .await
        .unwrap()
        .unwrap();
    assert!(receipt.success);
    assert_eq!(receipt.to, Some(router));
    assert_eq!(receipt.block_number, proof.block);
    // The router pulled the price from the payer on FiatToken and split it exactly.
    assert_eq!(
        balances().await,
        (
            p0 - U256::from(price),
            t0 + U256::from(price - FEE),
            f0 + U256::from(FEE)
        )
    );

    // Once: the same payment again is the same proof, nothing moves.
    let (s, again) = post(&net, "/authorize", &body).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["proof"], reply["proof"]);
    assert_eq!(balances().await.0, p0 - U256::from(price));
}

/// What Circle's compliance controls do to payments: a blacklisted payer or payee and a paused
/// token refuse x402 and router payments before anything is sent, with typed answers decided from
/// FiatToken's `Error(string)` reverts at simulation (x402: `invalid_payment`, x402 having no code
/// of its own for them; `/authorize`: 403 `AccountBlacklisted` naming the account, 422
/// `TokenPaused`), and once lifted the same payment settles.
#[tokio::test(flavor = "multi_thread")]
async fn blacklist_and_pause_refuse_payments_and_nothing_moves() {
    let (net, usdc) = usdc_net().await;
    let chain = &*net.fixture.chain;
    let (payer, pay_to) = (net.address(PAYER), net.address(PAYEE));
    let before = (
        net.token_balance(payer).await,
        net.token_balance(pay_to).await,
    );
    let mut nonce = 0x40;
    let mut refused = async |what: &str, code: &str, status: u16, message: &str| {
        nonce += 1;
        let p = net
            .x402_payload(NETWORK, PAYER, pay_to, 10_000, B256::repeat_byte(nonce))
            .await;
        let body = x402_body(&p, pay_to, 10_000);
        let (s, v) = post(&net, "/verify", &body).await;
        assert_eq!(
            (s, &v["isValid"], &v["invalidReason"]),
            (200, &json!(false), &json!("invalid_payment")),
            "{what}: {v}"
        );
        let (s, r) = post(&net, "/settle", &body).await;
        assert_eq!(
            (s, &r["success"], &r["errorReason"], &r["transaction"]),
            (200, &json!(false), &json!("invalid_payment"), &json!("")),
            "{what}: {r}"
        );
        let sp = net
            .signed_payment(NETWORK, PAYER, pay_to, 500_000, B256::repeat_byte(nonce))
            .await;
        let (s, a) = post(&net, "/authorize", &json!({ "signedPayment": sp })).await;
        assert_eq!(
            (s, &a["error"]["code"]),
            (status, &json!(code)),
            "{what}: {a}"
        );
        let said = a["error"]["message"].as_str().unwrap().to_lowercase();
        assert!(said.contains(&message.to_lowercase()), "{what}: {a}");
        assert!(a.get("proof").is_none(), "{what}: {a}");
        body
    };

    usdc.blacklist(chain, payer).await.unwrap();
    assert!(usdc.is_blacklisted(chain, payer).await.unwrap());
    refused(
        "blacklisted payer",
        "AccountBlacklisted",
        403,
        &format!("payer {payer} is blacklisted"),
    )
    .await;
    usdc.un_blacklist(chain, payer).await.unwrap();
    usdc.blacklist(chain, pay_to).await.unwrap();
    refused(
        "blacklisted payee",
        "AccountBlacklisted",
        403,
        &format!("payee {pay_to} is blacklisted"),
    )
    .await;
    usdc.un_blacklist(chain, pay_to).await.unwrap();
    usdc.pause(chain).await.unwrap();
    assert!(usdc.paused(chain).await.unwrap());
    let body = refused("paused", "TokenPaused", 422, "is paused").await;
    assert_eq!(
        (
            net.token_balance(payer).await,
            net.token_balance(pay_to).await
        ),
        before
    );

    // Lifted: the payment refused while paused settles.
    usdc.unpause(chain).await.unwrap();
    let (_, r) = post(&net, "/settle", &body).await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(
        net.token_balance(pay_to).await,
        before.1 + U256::from(10_000)
    );
}

/// An authorization its signer cancels with FiatToken's `cancelAuthorization` before it is
/// settled: x402 `/settle` answers `invalid_transaction_state` (FiatToken's "authorization is used
/// or canceled", the Tollgate token's `AuthorizationAlreadyUsed`), `/authorize` 409
/// `AuthorizationUsed`, and nothing moves.
#[tokio::test(flavor = "multi_thread")]
async fn an_authorization_cancelled_on_fiat_token_is_refused_and_nothing_moves() {
    let (net, _usdc) = usdc_net().await;
    let chain = &*net.fixture.chain;
    let (payer, pay_to) = (net.address(PAYER), net.address(PAYEE));
    let before = (
        net.token_balance(payer).await,
        net.token_balance(pay_to).await,
    );
    let cancel = async |nonce: B256| {
        let signature = sign(
            &net.account(PAYER).signer(),
            &CancelAuthorization {
                authorizer: payer,
                nonce,
            },
            &net.fixture.token_domain(),
        )
        .unwrap();
        let call = Token::cancelAuthorization_1Call {
            authorizer: payer,
            nonce,
            signature,
        };
        let sent = chain
            .send_and_wait(
                TxRequest::call(payer, net.token(), call.abi_encode()),
                WaitOptions::default(),
            )
            .await
            .unwrap();
        assert!(matches!(sent, Confirmation::Confirmed(r) if r.success));
    };

    // x402: signed, cancelled, then settled.
    let nonce = B256::repeat_byte(0x51);
    let p = net
        .x402_payload(NETWORK, PAYER, pay_to, 10_000, nonce)
        .await;
    cancel(nonce).await;
    let body = x402_body(&p, pay_to, 10_000);
    let (s, r) = post(&net, "/settle", &body).await;
    assert_eq!(
        (s, &r["success"], &r["errorReason"], &r["transaction"]),
        (
            200,
            &json!(false),
            &json!("invalid_transaction_state"),
            &json!("")
        ),
        "{r}"
    );

    // A router payment: its nonce (committing to payTo, memo and fee) cancelled.
    let sp = net
        .signed_payment(NETWORK, PAYER, pay_to, 500_000, B256::repeat_byte(0x52))
        .await;
    cancel(sp.authorization.nonce).await;
    let (s, a) = post(&net, "/authorize", &json!({ "signedPayment": sp })).await;
    assert_eq!(
        (s, &a["error"]["code"]),
        (409, &json!("AuthorizationUsed")),
        "{a}"
    );

    assert_eq!(
        (
            net.token_balance(payer).await,
            net.token_balance(pay_to).await
        ),
        before
    );
}

/// The subscription path on FiatToken: a plan published through the facilitator, a subscriber
/// subscribing gaslessly (FiatToken's EIP-2612 `permit` under the token's own EIP-712 domain, as
/// `/.well-known/tollgate` publishes it, and a `Subscribe` intent, relayed by `POST
/// /subscriptions`), the first cycle billed exactly, and the keeper renewing one cycle once the
/// paid period ends.
#[tokio::test(flavor = "multi_thread")]
async fn subscription_relayed_with_permit_and_renewed_on_fiat_token() {
    const PROVIDER: usize = 5;
    const SUBSCRIBER: usize = 2;
    const AMOUNT: u64 = 1_000_000; // one USDC
    const MAX_OVERAGE: u64 = 250_000;
    const INTERVAL: u64 = 7 * 24 * 3600;
    let (net, _usdc) = usdc_net().await;
    let (who, pay_to) = (net.address(SUBSCRIBER), net.address(PAYEE));

    let key = net.api_key(PROVIDER, "provider").await;
    let r = net
        .http
        .post(format!("{}/plans", net.url))
        .bearer_auth(&key)
        .json(&json!({
            "network": NETWORK, "amount": AMOUNT.to_string(), "interval": INTERVAL,
            "payTo": pay_to, "idempotencyKey": "usdc-plan"
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let plan: Value = r.json().await.unwrap();
    let plan_id: B256 = plan["planId"].as_str().unwrap().parse().unwrap();

    // What an agent reads: the token's domain from discovery, the nonces from the quote.
    let wk: Value = net
        .http
        .get(format!("{}/.well-known/tollgate", net.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let info = &wk["networks"][NETWORK];
    assert_eq!(info["tokenName"], "USDC", "{info}");
    assert_eq!(info["tokenVersion"], "2", "{info}");
    let subs: Address = info["subscriptions"].as_str().unwrap().parse().unwrap();
    let quote: Value = net
        .http
        .get(format!(
            "{}/subscriptions/quote?network={NETWORK}&planId={plan_id}&subscriber={who}",
            net.url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(quote["plan"]["amount"], AMOUNT.to_string(), "{quote}");
    let nonce: U256 = quote["nonce"].as_str().unwrap().parse().unwrap();
    let permit_nonce: U256 = quote["permitNonce"].as_str().unwrap().parse().unwrap();
    let now = quote["now"].as_u64().unwrap();
    assert_eq!(
        permit_nonce,
        contracts::read(
            net.fixture.chain.as_ref(),
            USDC_BASE_SEPOLIA,
            &Token::noncesCall { owner: who }
        )
        .await
        .unwrap()
    );

    let signer = net.account(SUBSCRIBER).signer();
    let value = U256::from((AMOUNT + MAX_OVERAGE) * 12);
    let permit = Permit {
        owner: who,
        spender: subs,
        value,
        nonce: permit_nonce,
        deadline: U256::from(now + 3600),
    };
    let token = token_domain(
        info["tokenName"].as_str().unwrap().to_owned(),
        info["tokenVersion"].as_str().unwrap().to_owned(),
        BASE_SEPOLIA_CHAIN_ID,
        USDC_BASE_SEPOLIA,
    );
    let permit_sig = sign(&signer, &permit, &token).unwrap();
    let intent = Subscribe {
        planId: plan_id,
        subscriber: who,
        maxOverage: U256::from(MAX_OVERAGE),
        nonce,
        deadline: U256::from(now + 600),
    };
    let signature = sign(
        &signer,
        &intent,
        &subscriptions_domain(BASE_SEPOLIA_CHAIN_ID, subs),
    )
    .unwrap();
    let body = json!({
        "network": NETWORK,
        "planId": plan_id,
        "subscriber": who,
        "maxOverage": MAX_OVERAGE.to_string(),
        "deadline": now + 600,
        "signature": signature,
        "permit": { "value": value.to_string(), "deadline": now + 3600, "signature": permit_sig },
    });

    let (s0, p0) = (
        net.token_balance(who).await,
        net.token_balance(pay_to).await,
    );
    let gas0 = net.fixture.chain.balance(who).await.unwrap();
    let (status, sub) = post(&net, "/subscriptions", &body).await;
    assert_eq!(status, 200, "{sub}");
    assert_eq!(sub["status"], "ACTIVE", "{sub}");
    assert_eq!(sub["planId"], json!(plan_id));
    assert_eq!(sub["cycle"], 1);
    // The first cycle, exactly; the subscriber spent no gas; FiatToken's allowance is the permit's
    // less what the first cycle drew.
    assert_eq!(net.token_balance(who).await, s0 - U256::from(AMOUNT));
    assert_eq!(net.token_balance(pay_to).await, p0 + U256::from(AMOUNT));
    assert_eq!(net.fixture.chain.balance(who).await.unwrap(), gas0);
    let allowance: U256 = contracts::read(
        net.fixture.chain.as_ref(),
        USDC_BASE_SEPOLIA,
        &Token::allowanceCall {
            owner: who,
            spender: subs,
        },
    )
    .await
    .unwrap();
    assert_eq!(allowance, value - U256::from(AMOUNT));
    let paid_through = sub["paidThrough"].as_u64().unwrap();
    let id: B256 = sub["id"].as_str().unwrap().parse().unwrap();

    // Nothing is due before the paid period ends.
    let r = net.facilitator.run_keeper_once().await;
    assert_eq!((r.renewed, r.errors), (0, 0), "{r:?}");

    // Past `paidThrough`: one cycle renewed, exactly.
    let chain_now = net.now().await;
    net.fixture
        .chain
        .advance_time(paid_through.saturating_sub(chain_now) + 10)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let r = net.facilitator.run_keeper_once().await;
    assert_eq!((r.renewed, r.failed, r.errors), (1, 0, 0), "{r:?}");
    let r = net.facilitator.run_keeper_once().await;
    assert_eq!((r.renewed, r.errors), (0, 0), "{r:?}");
    assert_eq!(net.token_balance(who).await, s0 - U256::from(2 * AMOUNT));
    assert_eq!(net.token_balance(pay_to).await, p0 + U256::from(2 * AMOUNT));
    let shown: Value = net
        .http
        .get(format!("{}/subscriptions/{id}?network={NETWORK}", net.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["status"], "ACTIVE", "{shown}");
    assert_eq!(shown["cycle"], 2, "{shown}");
    // The renewed cycle starts at the renewal (Subscriptions' rule), a few 2 s blocks after the
    // clock was moved past the paid period.
    let renewed_through = shown["paidThrough"].as_u64().unwrap();
    assert!(
        (paid_through + 10 + INTERVAL..=paid_through + 70 + INTERVAL).contains(&renewed_through),
        "{renewed_through} vs {paid_through} + {INTERVAL}"
    );
}
