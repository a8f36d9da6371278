//! Paid MCP tools (feature `mcp`): [`Agent::call_tool`] calls a tool over streamable HTTP and,
//! when the result asks for payment (x402's MCP transport: `isError` with the payment-required
//! object in `structuredContent`), pays it within the policy and calls once more with the payment
//! in `_meta["x402/payment"]`. One payment per call.

use base64::{Engine as _, engine::general_purpose::STANDARD};
use rmcp::{
    RoleClient, ServiceExt as _,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
        RequestMetaObject,
    },
    service::RunningService,
    transport::StreamableHttpClientTransport,
};
use serde_json::{Map, Value};
use tollgate_protocol::x402::{
    MCP_PAYMENT_META as PAYMENT_META, MCP_PAYMENT_RESPONSE_META as PAYMENT_RESPONSE_META,
    SettlementResponseHeader,
};

use super::{Agent, pay::Route};
use crate::{Error, Payment, Result, terms};

/// The result of [`Agent::call_tool`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ToolCall {
    /// Whether the tool reported an error (a paid call whose tool failed is still paid).
    pub is_error: bool,
    /// The result's content blocks, as JSON (`{"type": "text", "text": …}`, …).
    pub content: Vec<Value>,
    /// The result's structured content, if any.
    pub structured_content: Option<Value>,
    /// The payment that bought the call (its `settlement` from `_meta["x402/payment-response"]`);
    /// `None` for a free tool.
    pub payment: Option<Payment>,
}

fn mcp_error(e: impl std::fmt::Display) -> Error {
    Error::Mcp {
        message: e.to_string(),
    }
}

/// The payment-required object of a tool result, if it is one.
fn payment_required(result: &CallToolResult) -> Option<Value> {
    if result.is_error != Some(true) {
        return None;
    }
    let is_terms = |v: &Value| v.get("x402Version").is_some() && v.get("accepts").is_some();
    if let Some(v) = result.structured_content.as_ref().filter(|v| is_terms(v)) {
        return Some(v.clone());
    }
    let text = serde_json::to_value(result.content.first()?).ok()?;
    let parsed: Value = serde_json::from_str(text.get("text")?.as_str()?).ok()?;
    is_terms(&parsed).then_some(parsed)
}

impl Agent {
    /// Calls the MCP tool `name` with `arguments` at the streamable-HTTP endpoint `url`, paying
    /// for it if the server asks (x402's MCP transport, V1 or V2): the cheapest `exact` offer
    /// the policy allows is signed as x402 clients sign it and sent once in
    /// `_meta["x402/payment"]`. A free tool's result comes back with no payment; a paid call
    /// refused again is [`Error::PaymentRejected`] naming the reason, with the payment made.
    pub async fn call_tool(
        &self,
        url: &str,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<ToolCall> {
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("tollgate-agent", env!("CARGO_PKG_VERSION")),
        )
        .serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .map_err(mcp_error)?;
        let result = self.call_paying(&client, name, arguments).await;
        if let Err(e) = client.cancel().await {
            tracing::debug!(error = %e, "closing the MCP session");
        }
        result
    }

    async fn call_paying(
        &self,
        client: &RunningService<RoleClient, ClientConfig>,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<ToolCall> {
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments.clone());
        let first = client.call_tool(params).await.map_err(mcp_error)?;
        let Some(required) = payment_required(&first) else {
            return Ok(tool_call(first, None));
        };
        let terms = terms::from_value(&required)?;
        let (offer, route, reservation) = self.choose(&terms, false)?;
        let Route::X402 { chain_id } = route else {
            return Err(Error::NoAcceptableOption {
                offered: terms.offered,
            });
        };
        let now = self.x402_now(&offer).await;
        let mut payment = self.sign_x402(&offer.requirements, chain_id, offer.v2.as_ref(), now)?;
        let payload: Value = STANDARD
            .decode(&payment.header)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(|| mcp_error("cannot encode the payment"))?;
        let mut meta = RequestMetaObject::new();
        meta.insert(PAYMENT_META.into(), payload);
        let mut params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        params.meta = Some(meta);
        let paid = client.call_tool(params).await;
        // Sent: the authorization may be settled, so it counts as spent.
        reservation.commit();
        let paid = paid.map_err(mcp_error)?;
        if let Some(again) = payment_required(&paid) {
            let reason = again
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("refused")
                .to_owned();
            tracing::warn!(tool = name, %reason, "the MCP server refused the payment");
            return Err(Error::PaymentRejected {
                reason,
                payments: vec![payment],
            });
        }
        payment.settlement = paid
            .meta
            .as_ref()
            .and_then(|m| m.get(PAYMENT_RESPONSE_META))
            .and_then(|v| serde_json::from_value::<SettlementResponseHeader>(v.clone()).ok());
        payment.tx_hash = payment
            .settlement
            .as_ref()
            .and_then(|s| s.transaction.parse().ok());
        tracing::info!(
            tool = name, amount = %payment.amount, tx = ?payment.tx_hash,
            x402_version = ?payment.x402_version, "paid an MCP tool call"
        );
        Ok(tool_call(paid, Some(payment)))
    }
}

fn tool_call(result: CallToolResult, payment: Option<Payment>) -> ToolCall {
    ToolCall {
        is_error: result.is_error == Some(true),
        content: result
            .content
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect(),
        structured_content: result.structured_content,
        payment,
    }
}
