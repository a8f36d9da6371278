//! A paid MCP call whose settlement is pending, on a chain as real ones run (a block every 2 s,
//! 2 confirmations, a facilitator that answers "pending" after 300 ms, a gateway that holds a
//! pending call 0 s): the gateway answers a typed `SettlementPending` result with the payment's
//! retry token; the same payment with the token is served once, without it refused; the agent
//! resends the same payment with its token until the result, and pays once.

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use alloy::primitives::{B256, U256};
use base64::{Engine as _, engine::general_purpose::STANDARD};
use rmcp::{
    ServiceExt as _,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
        RequestMetaObject,
    },
    transport::StreamableHttpClientTransport,
};
use serde_json::{Map, Value, json};
use tollgate_agent::{Agent, Amount, Error, PaymentKind, SpendPolicy};
use tollgate_gateway::Secrets;
use tollgate_protocol::x402::SettlementPending;
use tollgate_testkit::{
    Backend,
    harness::{DEVNET_NETWORK, PAYEE, PAYER, TestNet},
};

use crate::support::{config, serve_gateway, upstream};

const PRICE: u64 = 50_000;

/// Anvil mining a block every 2 s, a facilitator waiting 2 confirmations and answering
/// "pending" after 300 ms.
async fn slow_chain() -> TestNet {
    let net = TestNet::builder()
        .backend(Backend::Anvil)
        .networks([DEVNET_NETWORK])
        .confirmations(2)
        .settings(|s| s.confirmation_timeout = Duration::from_millis(300))
        .start()
        .await
        .expect("test network");
    net.mine_every(2).await;
    net
}

/// A `tools/call` of `quote` by a plain MCP client (its own session), with `payment` and
/// `token` in `_meta`.
async fn call(url: &str, payment: Option<&Value>, token: Option<&str>) -> CallToolResult {
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("plain-mcp-client", "1.0.0"),
    )
    .serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
    .await
    .expect("MCP session");
    let mut params = CallToolRequestParams::new("quote".to_owned()).with_arguments(Map::new());
    let mut meta = RequestMetaObject::new();
    if let Some(p) = payment {
        meta.insert("x402/payment".into(), p.clone());
    }
    if let Some(t) = token {
        meta.insert("tollgate/payment-retry".into(), json!(t));
    }
    params.meta = Some(meta);
    let result = client.call_tool(params).await.expect("tools/call");
    client.cancel().await.ok();
    result
}

/// The pending answer of a tool result, if it is one.
fn pending(r: &CallToolResult) -> Option<SettlementPending> {
    (r.is_error == Some(true))
        .then_some(r.structured_content.as_ref())
        .flatten()
        .and_then(SettlementPending::from_value)
}

/// The x402 `error` of a payment-required result.
fn refusal(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let terms = r.structured_content.as_ref().expect("terms");
    assert!(terms.get("accepts").is_some(), "{terms}");
    terms["error"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_mcp_call_is_served_once_to_its_retry_token_and_the_agent_pays_once() {
    let net = slow_chain().await;
    let (up, hits, _up) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listen = listener.local_addr().unwrap().to_string();
    let memo = format!("sqlite://{}", dir.path().join("memos.db").display());
    let tools = format!(
        "[[routes]]\nprefix = \"/healthz\"\nfree = true\n[mcp]\n[[mcp.tools]]\nname = \"quote\"\n\
         upstream_path = \"/v1/quote\"\nmethod = \"GET\"\nprice = \"{PRICE}\"\n"
    );
    let cfg = config(&net, &listen, &up, &memo, "pending_hold_secs = 0", &tools);
    let _gw = serve_gateway(&cfg, &Secrets::new(), listener).await;
    let url = format!("http://{listen}/mcp");
    let (payer, payee) = (net.address(PAYER), net.address(PAYEE));
    let balances = || async {
        (
            net.token_balance(payer).await,
            net.token_balance(payee).await,
        )
    };
    let start = balances().await;

    // A plain client pays (x402 V1): the answer is a typed pending result with a retry token,
    // the tool not run.
    let payload = serde_json::to_value(
        net.x402_payload(DEVNET_NETWORK, PAYER, payee, PRICE, B256::random())
            .await,
    )
    .unwrap();
    let first = call(&url, Some(&payload), None).await;
    let p = pending(&first).unwrap_or_else(|| panic!("a pending result, got {first:?}"));
    let token = p
        .retry_token
        .expect("the payer's answer carries the token")
        .to_string();
    assert!(p.retry_after > 0);
    assert!(
        first.content[0].as_text().is_some(),
        "a text block for people too"
    );
    // The same payment without the token (anyone who copied it) is refused, also with another
    // token; the payer's retries with its token are served once the settlement confirms.
    assert_eq!(
        refusal(&call(&url, Some(&payload), None).await),
        "duplicate_settlement"
    );
    let other = format!("0x{}", "42".repeat(32));
    assert_eq!(
        refusal(&call(&url, Some(&payload), Some(&other)).await),
        "duplicate_settlement"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let served = loop {
        let r = call(&url, Some(&payload), Some(&token)).await;
        match pending(&r) {
            Some(p) => {
                assert_eq!(p.retry_token.map(|t| t.to_string()), Some(token.clone()));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            None => break r,
        }
    };
    assert_eq!(served.is_error, Some(false), "{served:?}");
    let settlement = &served.meta.as_ref().expect("meta")["x402/payment-response"];
    assert_eq!(settlement["success"], true, "{settlement}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // Served once: the token again is refused.
    assert_eq!(
        refusal(&call(&url, Some(&payload), Some(&token)).await),
        "duplicate_settlement"
    );
    let paid = balances().await;
    assert_eq!(
        paid,
        (start.0 - U256::from(PRICE), start.1 + U256::from(PRICE))
    );

    // The agent: its first paid call comes back pending; it resends the same payment with its
    // token until the result. One payment, one result, the tool run once.
    let policy = SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(10 * PRICE));
    let agent = Agent::from_hex_key(&net.account(PAYER).private_key.to_string(), policy).unwrap();
    let started = Instant::now();
    let done = agent.call_tool(&url, "quote", Map::new()).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "two confirmations of 2 s blocks: the agent came back for the outcome"
    );
    assert!(!done.is_error, "{done:?}");
    assert_eq!(done.content[0]["text"], "upstream /v1/quote");
    let payment = done.payment.expect("paid");
    assert_eq!(payment.kind, PaymentKind::X402);
    assert!(payment.retry_token.is_some());
    assert!(payment.settlement.as_ref().is_some_and(|s| s.success));
    assert!(payment.tx_hash.is_some());
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
    // Settled on chain once (2 confirmations came before the answer): nothing more moves.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        balances().await,
        (paid.0 - U256::from(PRICE), paid.1 + U256::from(PRICE))
    );

    // A second client replays the agent's payment as the chain shows it (no payment
    // identifier) and without the token: refused, the tool not run.
    let mut replay: Value =
        serde_json::from_slice(&STANDARD.decode(&payment.header).unwrap()).unwrap();
    replay.as_object_mut().unwrap().remove("extensions");
    assert_eq!(
        refusal(&call(&url, Some(&replay), None).await),
        "duplicate_settlement"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // An agent whose settle timeout is shorter than two blocks: a typed error naming the one
    // payment it made, never a result, never a second payment; the payment settles on its own.
    let policy = SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(10 * PRICE));
    let key = net.account(PAYER).private_key.to_string();
    let signer: tollgate_agent::Secp256k1Signer = key.trim_start_matches("0x").parse().unwrap();
    let hasty = Agent::builder(signer, policy)
        .settle_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let before = balances().await;
    let e = hasty
        .call_tool(&url, "quote", Map::new())
        .await
        .unwrap_err();
    let Error::SettlementPending {
        payments,
        transaction,
    } = &e
    else {
        panic!("expected SettlementPending, got {e:?}");
    };
    assert_eq!(payments.len(), 1, "one payment, sent once");
    assert!(payments[0].retry_token.is_some());
    assert!(transaction.is_some(), "the gateway named the transaction");
    assert_eq!(hasty.spent(), Amount::from_units(PRICE));
    assert_eq!(hits.load(Ordering::SeqCst), 2, "not served");
    for _ in 0..40 {
        if balances().await != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        balances().await,
        (before.0 - U256::from(PRICE), before.1 + U256::from(PRICE))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_the_gateway_cannot_settle_is_a_typed_result_and_never_paid() {
    let mut net = crate::support::testnet(false).await;
    let (up, hits, _up) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listen = listener.local_addr().unwrap().to_string();
    let memo = format!("sqlite://{}", dir.path().join("memos.db").display());
    let tools = format!(
        "[[routes]]\nprefix = \"/healthz\"\nfree = true\n[mcp]\n[[mcp.tools]]\nname = \"quote\"\n\
         upstream_path = \"/v1/quote\"\nprice = \"{PRICE}\"\n"
    );
    let cfg = config(&net, &listen, &up, &memo, "", &tools);
    let _gw = serve_gateway(&cfg, &Secrets::new(), listener).await;
    let url = format!("http://{listen}/mcp");
    let payer = net.address(PAYER);
    let before = net.token_balance(payer).await;
    let payload = serde_json::to_value(
        net.x402_payload(
            DEVNET_NETWORK,
            PAYER,
            net.address(PAYEE),
            PRICE,
            B256::random(),
        )
        .await,
    )
    .unwrap();
    // The gateway's facilitator is gone (its 402s need none).
    net.stop().await;

    // A plain client: an error result whose structuredContent names why, for programs.
    let r = call(&url, Some(&payload), None).await;
    assert_eq!(r.is_error, Some(true));
    let v = r.structured_content.expect("structuredContent");
    assert_eq!(v["error"], "FacilitatorUnavailable", "{v}");
    assert!(v["retryAfter"].as_u64().is_some(), "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("do not pay again"),
        "{v}"
    );
    // The agent: not served, with the payment it made; never a "paid" result.
    let policy = SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(10 * PRICE));
    let agent = Agent::from_hex_key(&net.account(PAYER).private_key.to_string(), policy).unwrap();
    let e = agent
        .call_tool(&url, "quote", Map::new())
        .await
        .unwrap_err();
    let Error::NotServed {
        status,
        code,
        payments,
    } = &e
    else {
        panic!("expected NotServed, got {e:?}");
    };
    assert_eq!(*status, 503);
    assert_eq!(code.as_deref(), Some("FacilitatorUnavailable"));
    assert_eq!(payments.len(), 1);
    assert!(payments[0].tx_hash.is_none() && payments[0].settlement.is_none());
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    assert_eq!(net.token_balance(payer).await, before, "nothing moved");
}
