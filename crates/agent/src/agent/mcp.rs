//! Paid MCP tools (feature `mcp`): [`Agent::call_tool`] calls a tool over streamable HTTP and,
//! when the result asks for payment (x402's MCP transport: `isError` with the payment-required
//! object in `structuredContent`), pays it within the policy and calls once more with the payment
//! in `_meta["x402/payment"]` and its retry token in `_meta["tollgate/payment-retry"]`. A
//! pending settlement (a `SettlementPending` result) is followed by the same payment with its
//! token until the outcome. One payment per call.

use std::time::Duration;

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
use tokio::time::Instant;
use tollgate_protocol::x402::{
    MCP_PAYMENT_META as PAYMENT_META, MCP_PAYMENT_RESPONSE_META as PAYMENT_RESPONSE_META,
    MCP_PAYMENT_RETRY_META as PAYMENT_RETRY_META, RetryToken, SettlementPending,
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

/// The longest wait between two resends of a pending payment, whatever `retryAfter` says (as
/// over HTTP).
const PENDING_POLL_MAX: Duration = Duration::from_secs(5);
/// The shortest.
const PENDING_POLL_MIN: Duration = Duration::from_millis(250);

fn mcp_error(e: impl std::fmt::Display) -> Error {
    Error::Mcp {
        message: e.to_string(),
    }
}

/// The pending settlement a tool result reports, if it is one.
fn settlement_pending(result: &CallToolResult) -> Option<SettlementPending> {
    if result.is_error != Some(true) {
        return None;
    }
    SettlementPending::from_value(result.structured_content.as_ref()?)
}

/// The `tools/call` of `name` with `arguments`, paid by `payload` with its retry `token`.
fn paid_call(
    name: &str,
    arguments: &Map<String, Value>,
    payload: &Value,
    token: RetryToken,
) -> CallToolRequestParams {
    let mut meta = RequestMetaObject::new();
    meta.insert(PAYMENT_META.into(), payload.clone());
    meta.insert(PAYMENT_RETRY_META.into(), Value::String(token.to_string()));
    let mut params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments.clone());
    params.meta = Some(meta);
    params
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
    /// the policy allows is signed as x402 clients sign it and sent in `_meta["x402/payment"]`,
    /// with a retry token of the agent's own in `_meta["tollgate/payment-retry"]`. A free tool's
    /// result comes back with no payment.
    ///
    /// A paid call is never paid twice. When the server reports the settlement pending (a
    /// `SettlementPending` result, `tollgate gateway`'s answer while the transaction confirms),
    /// the agent sends the same payment again with the token after `retryAfter` (at most 5 s),
    /// until the result or [`AgentBuilder::settle_timeout`](crate::AgentBuilder::settle_timeout),
    /// then [`Error::SettlementPending`]. A paid call refused again is
    /// [`Error::PaymentRejected`] naming the reason; a call the server could not settle (an
    /// error result with an `error` code and no settlement, such as `FacilitatorUnavailable`) is
    /// [`Error::NotServed`] (status 503, its twin over HTTP); each with the payment made.
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
        let token = *payment.retry_token.get_or_insert_with(RetryToken::random);
        let paid = client
            .call_tool(paid_call(name, &arguments, &payload, token))
            .await;
        // Sent: the authorization may be settled, so it counts as spent.
        reservation.commit();
        let mut paid = match paid {
            Ok(paid) => paid,
            Err(e) => {
                // Sent, answer lost: the outcome is unknown, the payment is the caller's to
                // resend with its token (the server holds it under that token), never to make
                // again.
                tracing::warn!(tool = name, error = %e, "the paid MCP call got no answer");
                return Err(Error::SettlementPending {
                    transaction: None,
                    payments: vec![payment],
                });
            }
        };
        let deadline = Instant::now() + self.inner.settle_timeout;
        let mut resends = 0u32;
        while let Some(pending) = settlement_pending(&paid) {
            // The same payment again, with the token the server holds it under (its own, the
            // agent's, when it answered none): never another payment.
            let token = *payment
                .retry_token
                .insert(pending.retry_token.unwrap_or(token));
            if pending.transaction.is_some() {
                payment.tx_hash = pending.transaction;
            }
            let wait =
                Duration::from_secs(pending.retry_after).clamp(PENDING_POLL_MIN, PENDING_POLL_MAX);
            if Instant::now() + wait > deadline {
                tracing::warn!(tool = name, resends, amount = %payment.amount, pay_to = %payment.pay_to, "the MCP payment's settlement is still pending at the settle timeout");
                return Err(Error::SettlementPending {
                    transaction: payment.tx_hash,
                    payments: vec![payment],
                });
            }
            tracing::info!(
                tool = name,
                resends,
                wait_ms = wait.as_millis() as u64,
                "the MCP payment's settlement is pending; resending the same payment with its retry token"
            );
            tokio::time::sleep(wait).await;
            resends += 1;
            paid = match client
                .call_tool(paid_call(name, &arguments, &payload, token))
                .await
            {
                Ok(paid) => paid,
                Err(e) => {
                    // Pending when last heard of: the payment is the caller's to resend with
                    // its token, never to make again.
                    tracing::warn!(tool = name, resends, error = %e, "resending a pending MCP payment failed");
                    return Err(Error::SettlementPending {
                        transaction: payment.tx_hash,
                        payments: vec![payment],
                    });
                }
            };
        }
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
        if let Some(tx) = payment
            .settlement
            .as_ref()
            .and_then(|s| s.transaction.parse().ok())
        {
            payment.tx_hash = Some(tx);
        }
        if payment.settlement.is_none()
            && let Some(code) = unsettled(&paid)
        {
            // The server says it could not settle (FacilitatorUnavailable, …): no result, and
            // nothing shows the payment moved; never reported paid.
            tracing::warn!(tool = name, %code, "the MCP server could not settle the payment");
            return Err(Error::NotServed {
                status: 503,
                code: Some(code),
                payments: vec![payment],
            });
        }
        tracing::info!(
            tool = name, amount = %payment.amount, tx = ?payment.tx_hash,
            x402_version = ?payment.x402_version, "paid an MCP tool call"
        );
        Ok(tool_call(paid, Some(payment)))
    }
}

/// The `error` code of an error result that carries one in `structuredContent` (a server's
/// refusal to settle, such as `FacilitatorUnavailable`), if it is one.
fn unsettled(result: &CallToolResult) -> Option<String> {
    if result.is_error != Some(true) {
        return None;
    }
    let code = result.structured_content.as_ref()?.get("error")?.as_str()?;
    Some(code.to_owned())
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
