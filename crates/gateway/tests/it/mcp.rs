//! Priced MCP tools (`[mcp]`): the Tollgate agent pays a paid tool once per call and calls a
//! free one without paying; a plain MCP client (rmcp) gets the x402 payment-required result,
//! and its replayed or tampered payment is refused with the tool not run.

use std::sync::atomic::Ordering;

use alloy::primitives::U256;
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
use tollgate_testkit::harness::{PAYEE, PAYER};

use crate::support::{config, serve_gateway, testnet, upstream};

const PRICE: u64 = 50_000;

async fn raw_call(url: &str, name: &str, meta: Option<Value>) -> CallToolResult {
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("plain-mcp-client", "1.0.0"),
    )
    .serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
    .await
    .expect("MCP session");
    let mut params = CallToolRequestParams::new(name.to_owned())
        .with_arguments(Map::from_iter([("ticker".to_owned(), json!("AAPL"))]));
    if let Some(payment) = meta {
        let mut m = RequestMetaObject::new();
        m.insert("x402/payment".into(), payment);
        params.meta = Some(m);
    }
    let result = client.call_tool(params).await.expect("tools/call");
    client.cancel().await.ok();
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paid_and_free_mcp_tools() {
    let net = testnet(false).await;
    let (up, hits, _up) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listen = listener.local_addr().unwrap().to_string();
    let memo = format!("sqlite://{}", dir.path().join("memos.db").display());
    let tools = format!(
        r#"[[routes]]
prefix = "/healthz"
free = true
[mcp]
[[mcp.tools]]
name = "quote"
description = "A price quote"
upstream_path = "/v1/quote"
method = "GET"
price = "{PRICE}"
[[mcp.tools]]
name = "echo"
description = "Free"
upstream_path = "/v1/echo"
"#
    );
    let cfg = config(&net, &listen, &up, &memo, "", &tools);
    let _gw = serve_gateway(&cfg, &Secrets::new(), listener).await;
    let url = format!("http://{listen}/mcp");
    let payee = net.address(PAYEE);
    let before = net.token_balance(payee).await;

    // A plain MCP client: the paid tool answers with the x402 V2 terms, the tool not run.
    let unpaid = raw_call(&url, "quote", None).await;
    assert_eq!(unpaid.is_error, Some(true));
    let terms = unpaid
        .structured_content
        .clone()
        .expect("structuredContent");
    assert_eq!(terms["x402Version"], 2, "{terms}");
    assert_eq!(terms["resource"]["url"], "mcp://tool/quote");
    assert_eq!(terms["accepts"][0]["amount"], PRICE.to_string());
    assert_eq!(
        terms["accepts"][0]["network"],
        format!("eip155:{}", net.chain_id())
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    // The agent: the free tool costs nothing, the paid one is paid once per call.
    let policy = SpendPolicy::new(Amount::from_units(PRICE), Amount::from_units(10 * PRICE));
    let agent = Agent::from_hex_key(&net.account(PAYER).private_key.to_string(), policy).unwrap();
    let free = agent.call_tool(&url, "echo", Map::new()).await.unwrap();
    assert!(!free.is_error && free.payment.is_none(), "{free:?}");
    assert_eq!(free.content[0]["text"], "upstream /v1/echo");
    let paid = agent.call_tool(&url, "quote", Map::new()).await.unwrap();
    assert!(!paid.is_error, "{paid:?}");
    assert_eq!(paid.content[0]["text"], "upstream /v1/quote");
    let payment = paid.payment.expect("paid");
    assert_eq!(payment.kind, PaymentKind::X402);
    assert_eq!(payment.x402_version, Some(2));
    let settlement = payment.settlement.clone().expect("x402/payment-response");
    assert!(settlement.success);
    assert_eq!(settlement.network, format!("eip155:{}", net.chain_id()));
    assert!(payment.tx_hash.is_some());
    assert_eq!(net.token_balance(payee).await, before + U256::from(PRICE));
    assert_eq!(agent.spent(), Amount::from_units(PRICE));
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // The agent sends a payment-identifier (the 402 declares it): the very same payment again
    // is answered its first outcome (the same settlement), charged once.
    let payload: Value =
        serde_json::from_slice(&STANDARD.decode(&payment.header).unwrap()).unwrap();
    assert!(
        payload["extensions"]["payment-identifier"]["info"]["id"].is_string(),
        "{payload}"
    );
    let retry = raw_call(&url, "quote", Some(payload.clone())).await;
    assert_eq!(retry.is_error, Some(false));
    let retried = &retry.meta.as_ref().unwrap()["x402/payment-response"];
    assert_eq!(retried["transaction"], settlement.transaction);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    assert_eq!(net.token_balance(payee).await, before + U256::from(PRICE));
    // Without its id, the same authorization is a replay: refused, not run.
    let mut bare = payload.clone();
    bare.as_object_mut().unwrap().remove("extensions");
    let replay = raw_call(&url, "quote", Some(bare)).await;
    assert_eq!(replay.is_error, Some(true));
    let again = replay.structured_content.expect("terms");
    assert_eq!(again["error"], "duplicate_settlement", "{again}");
    // Tampered (the value raised after signing, a fresh nonce): refused.
    let mut tampered = payload;
    tampered["payload"]["authorization"]["value"] = json!((PRICE + 1).to_string());
    tampered["payload"]["authorization"]["nonce"] = json!(format!("0x{}", "77".repeat(32)));
    let t = raw_call(&url, "quote", Some(tampered)).await;
    assert_eq!(t.is_error, Some(true));
    assert_eq!(hits.load(Ordering::SeqCst), 3, "neither ran the tool");
    assert_eq!(net.token_balance(payee).await, before + U256::from(PRICE));

    // The policy holds: a budget below the price pays nothing.
    let poor = SpendPolicy::new(Amount::from_units(PRICE - 1), Amount::from_units(PRICE));
    let stingy = Agent::from_hex_key(&net.account(PAYER).private_key.to_string(), poor).unwrap();
    let refused = stingy
        .call_tool(&url, "quote", Map::new())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::PolicyViolation { .. }),
        "{refused:?}"
    );
    assert_eq!(net.token_balance(payee).await, before + U256::from(PRICE));
}
