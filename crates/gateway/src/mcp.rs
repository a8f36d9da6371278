//! Priced MCP tools over streamable HTTP, on x402's MCP transport (`specs/transports-v1/mcp.md`,
//! `specs/transports-v2/mcp.md`): each configured tool is a call to the upstream API; a priced
//! one is paid per call.
//!
//! - A call without payment gets a tool result with `isError: true` whose `structuredContent`
//!   (and `content[0].text`) is the payment-required object: x402 V2 when the gate knows the
//!   network's chain id, V1 otherwise; its resource is `mcp://tool/<name>`.
//! - The client calls again with the payment (an x402 V1 or V2 `exact` payload) in
//!   `params._meta["x402/payment"]`. The gate settles it through the facilitator first, under
//!   the same once-only lock as HTTP payments ([`Gate::settle_x402_value`]); only then does the
//!   tool run, so no result is ever returned unpaid. The result carries the settlement in
//!   `_meta["x402/payment-response"]`.
//! - A refused payment (a replay, a tampered payload, too little) is the payment-required result
//!   again with the reason in `error`; the tool does not run.
//! - A payment whose settlement was sent but is not confirmed within `gate.pending_hold_secs` is
//!   a result with `isError` whose `structuredContent` is a [`SettlementPending`] (`error:
//!   "SettlementPending"`, `retryToken`, `retryAfter`, `transaction`): the payment is held for
//!   its payer. The same payment sent again with the token in
//!   `params._meta["tollgate/payment-retry"]` is served once the settlement confirms; anyone
//!   else presenting it is refused (`duplicate_settlement`). A client may choose its token and
//!   send it with the payment in the first place (the Tollgate agent does), so that a lost
//!   answer cannot lose it.
//! - When the payment cannot be settled now (the facilitator or the memo store unreachable) the
//!   result has `isError` and `structuredContent` `{"error": "FacilitatorUnavailable" |
//!   "MemoStoreUnavailable", "message", "retryAfter"}`: no tool result, nothing known to be
//!   paid; send the same payment again later, do not pay again.
//!
//! Sessions are bounded (`mcp::sessions`): at most `mcp.max_sessions` open (503 beyond), at
//! most `mcp.max_sessions_per_client` per client (429 beyond), each closed after
//! `mcp.session_idle_timeout_secs` with no request in flight.

mod sessions;

use std::sync::Arc;

use axum::{Router, middleware};
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
        ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig,
        Tool,
    },
    service::RequestContext,
    transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService},
};
use serde_json::{Map, Value, json};
use tollgate_gate::{Gate, Offer, Pricing, X402Failure};
use tollgate_protocol::{
    ApiErrorCode,
    x402::{
        MCP_PAYMENT_META as PAYMENT_META, MCP_PAYMENT_RESPONSE_META as PAYMENT_RESPONSE_META,
        MCP_PAYMENT_RETRY_META as PAYMENT_RETRY_META, RetryToken, SettlementPending,
        SettlementResponseHeader,
    },
};

pub(crate) use self::sessions::SessionLimits;
use self::sessions::Sessions;
use crate::{config::ToolConfig, proxy::Upstream};

/// The `retryAfter` of a pending or unavailable answer, seconds (as the HTTP gate's
/// `Retry-After`).
const RETRY_AFTER_SECS: u64 = 5;

/// The MCP server: the tools, the gate that prices them and the upstream that runs them.
#[derive(Clone, Debug)]
pub(crate) struct McpTools {
    gate: Gate,
    tools: Arc<Vec<ToolConfig>>,
    upstream: Upstream,
}

/// The MCP endpoint: the streamable HTTP service serving `tools`, accepting the `Host`s
/// `allowed_hosts` (and loopback), its sessions bounded by `limits`.
pub(crate) fn service(
    gate: Gate,
    tools: Vec<ToolConfig>,
    upstream: Upstream,
    allowed_hosts: Vec<String>,
    limits: SessionLimits,
) -> Router {
    let server = McpTools {
        gate,
        tools: Arc::new(tools),
        upstream,
    };
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    hosts.extend(allowed_hosts);
    let sessions = Sessions::new(limits);
    let mcp = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(sessions.clone()),
        StreamableHttpServerConfig::default().with_allowed_hosts(hosts),
    );
    Router::new()
        .fallback_service(mcp)
        .layer(middleware::from_fn_with_state(sessions, sessions::admit))
}

impl McpTools {
    fn offer<'a>(&self, tool: &'a ToolConfig, url: &'a str, pricing: &'a [Pricing]) -> Offer<'a> {
        Offer {
            method: "POST",
            resource_url: url,
            pricing,
            description: &tool.description,
            mime_type: "application/json",
        }
    }

    /// The payment-required result: `isError`, the terms in `structuredContent` (V2 when the
    /// gate can, else V1) with `error`.
    fn payment_required(&self, offer: &Offer<'_>, error: &str) -> CallToolResult {
        let body = self.gate.build_payment_required(offer, error);
        let terms = match self.gate.payment_required_v2(&body, offer) {
            Some(v2) => serde_json::to_value(v2),
            None => serde_json::to_value(&body),
        }
        .unwrap_or(Value::Null);
        CallToolResult::structured_error(terms)
    }

    async fn run(&self, tool: &ToolConfig, args: Option<Map<String, Value>>) -> CallToolResult {
        match self
            .upstream
            .call(&tool.method, &tool.upstream_path, args)
            .await
        {
            Ok((status, text)) if (200..300).contains(&status) => {
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            Ok((status, text)) => CallToolResult::error(vec![ContentBlock::text(format!(
                "upstream answered {status}: {text}"
            ))]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                "upstream unreachable: {e}"
            ))]),
        }
    }
}

impl ServerHandler for McpTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("tollgate-gateway", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self
            .tools
            .iter()
            .map(|t| {
                let schema = t.input_schema.clone().unwrap_or_else(|| {
                    json!({"type": "object"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default()
                });
                let description = match t.price {
                    Some(p) => format!("{} (paid: {p} units per call, x402)", t.description),
                    None => t.description.clone(),
                };
                Tool::new(t.name.clone(), description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = self.tools.iter().find(|t| t.name == req.name) else {
            return Err(McpError::invalid_params(
                format!("unknown tool {}", req.name),
                None,
            ));
        };
        let Some(price) = tool.price else {
            return Ok(self.run(tool, req.arguments).await.into());
        };
        let url = format!("mcp://tool/{}", tool.name);
        let pricing = [Pricing::one_time(price)];
        let offer = self.offer(tool, &url, &pricing);
        let Some(payment) = ctx.meta.get(PAYMENT_META) else {
            return Ok(self
                .payment_required(&offer, ApiErrorCode::PaymentRequired.as_str())
                .into());
        };
        // The payer's retry token; one that does not parse is no token.
        let retry = ctx
            .meta
            .get(PAYMENT_RETRY_META)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<RetryToken>().ok());
        let settled = match self
            .gate
            .settle_x402_value(payment, &offer, price, retry)
            .await
        {
            Ok(settled) => settled,
            Err(X402Failure::Refused(reason)) => {
                tracing::debug!(tool = %tool.name, %reason, "MCP payment refused");
                return Ok(self.payment_required(&offer, reason.as_str()).into());
            }
            Err(X402Failure::Pending {
                transaction,
                retry_token,
            }) => {
                tracing::info!(tool = %tool.name, tx = ?transaction, "MCP payment pending; its payer's retry with its token picks it up");
                let message = format!(
                    "the payment is being settled (transaction {}): send the same payment again \
                     with retryToken in _meta[\"{PAYMENT_RETRY_META}\"] after retryAfter seconds \
                     to be served; do not pay again",
                    transaction.map_or_else(|| "unknown".to_owned(), |t| t.to_string())
                );
                let pending =
                    SettlementPending::new(message, transaction, retry_token, RETRY_AFTER_SECS);
                return Ok(CallToolResult::structured_error(
                    serde_json::to_value(pending).unwrap_or(Value::Null),
                )
                .into());
            }
            Err(e) => {
                // Not known to be settled, nor refused: no result, and the client should send
                // the same payment again later, never another.
                tracing::error!(tool = %tool.name, error = %e, source = ?std::error::Error::source(&e), "cannot settle an MCP payment");
                let code = match e {
                    X402Failure::StoreUnavailable(_) => ApiErrorCode::MemoStoreUnavailable,
                    _ => ApiErrorCode::FacilitatorUnavailable,
                };
                return Ok(CallToolResult::structured_error(json!({
                    "error": code,
                    "message": format!("{e}: send the same payment again later; do not pay again"),
                    "retryAfter": RETRY_AFTER_SECS,
                }))
                .into());
            }
        };
        let mut header = SettlementResponseHeader::from(&settled);
        if payment.get("x402Version").and_then(Value::as_u64) == Some(2)
            && let Some(caip2) = self.gate.caip2()
        {
            caip2.as_str().clone_into(&mut header.network);
        }
        let mut meta = MetaObject::new();
        meta.insert(
            PAYMENT_RESPONSE_META.into(),
            serde_json::to_value(&header).unwrap_or(Value::Null),
        );
        tracing::info!(tool = %tool.name, tx = %settled.transaction, "MCP tool paid");
        Ok(self
            .run(tool, req.arguments)
            .await
            .with_meta(Some(meta))
            .into())
    }
}
