//! The client side: [`NativeAgent`], the Rust agent with its spend policy: `pay` drives the
//! whole one-time sequence (Tollgate proofs, x402 V1 and V2, MPP charges), `subscribe` creates a
//! subscription.

use std::collections::HashMap;

use alloy::primitives::bytes::Bytes;
use base64::{Engine as _, engine::general_purpose::STANDARD};
use napi::bindgen_prelude::Either;
use napi_derive::napi;
use serde_json::{Value, json};
use tollgate_agent::{
    Agent, Amount, Method, PayRequest, Payment, PaymentKind, SpendPolicy, Subscribe, Subscription,
    Url,
    header::{HeaderName, HeaderValue},
};

use crate::{DECIMALS, address, amount, error::agent_error, error::named, id};

/// The agent's spending limits. Amounts in tokens (`"0.50"`) or `"units:N"`.
#[napi(object)]
#[derive(Debug)]
pub struct PolicyOptions {
    /// The most one request may cost.
    pub max_per_request: String,
    /// The most all payments together may cost.
    pub budget: String,
    /// Networks the agent pays on (x402 V1 names or CAIP-2 ids); default: any.
    pub networks: Option<Vec<String>>,
    /// Tokens it pays in; default: any.
    pub tokens: Option<Vec<String>>,
    /// Payees it pays; default: any.
    pub payees: Option<Vec<String>>,
    /// Subscriptions: bounded by `budget` and a cap per cycle, never by `maxPerRequest`. By
    /// default (absent or `true`) the agent prefers to subscribe when a 402 offers a plan of at
    /// most `budget` a cycle; `{ maxPerCycle, maxOverage }` sets the cap per cycle (default:
    /// `budget`) and the overage allowance it subscribes with (default: none); `false`: it pays
    /// one-time only (`subscribe` still works, within `budget` a cycle).
    pub subscriptions: Option<Either<bool, SubscriptionPolicy>>,
}

/// How the agent subscribes by itself.
#[napi(object)]
#[derive(Debug)]
pub struct SubscriptionPolicy {
    /// The most a plan may cost per cycle; default: the budget.
    pub max_per_cycle: Option<String>,
    /// The overage cap it subscribes with; default: none.
    pub max_overage: Option<String>,
}

/// How to build an agent: a key (`key`, hex, or `keyFile`) and a policy. `Debug` hides the key.
#[napi(object)]
pub struct AgentOptions {
    /// The private key, `0x` hex.
    pub key: Option<String>,
    /// A file holding the private key (hex, mode 0600 advised).
    pub key_file: Option<String>,
    /// The spending limits.
    pub policy: PolicyOptions,
    /// The only facilitators the agent pays through; default: whatever a 402 names.
    pub facilitators: Option<Vec<String>>,
    /// Where the agent remembers its subscriptions.
    pub state_file: Option<String>,
}

impl std::fmt::Debug for AgentOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentOptions")
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("key_file", &self.key_file)
            .field("policy", &self.policy)
            .field("facilitators", &self.facilitators)
            .field("state_file", &self.state_file)
            .finish()
    }
}

/// A request for [`NativeAgent::pay`].
#[napi(object)]
#[derive(Debug)]
pub struct PayParts {
    /// The URL.
    pub url: String,
    /// The method (default `GET`).
    pub method: Option<String>,
    /// Headers.
    pub headers: Option<HashMap<String, String>>,
    /// The body, base64.
    pub body: Option<String>,
}

/// The final answer to a paid request.
#[napi(object)]
#[derive(Debug)]
pub struct PaidParts {
    /// Its status.
    pub status: u32,
    /// Its headers (`[name, value]` pairs, in order).
    pub headers: Vec<Vec<String>>,
    /// Its body, base64.
    pub body: String,
    /// What bought it (`null` when nothing was asked).
    pub payment: Option<Value>,
    /// Payments made for the request before the one that bought it.
    pub earlier_payments: Vec<Value>,
}

/// What `subscribe` is asked for.
#[napi(object)]
#[derive(Debug)]
pub struct SubscribeOptions {
    /// The plan (`0x…`).
    pub plan_id: String,
    /// The overage cap per cycle (tokens or `"units:N"`).
    pub max_overage: String,
    /// The facilitator to subscribe through; default: the agent's only one.
    pub facilitator: Option<String>,
    /// The network; default: the facilitator's only subscriptions network.
    pub network: Option<String>,
}

/// An agent with its key and spend policy.
#[napi]
#[derive(Debug)]
pub struct NativeAgent {
    agent: Agent,
}

#[napi]
impl NativeAgent {
    /// Builds the agent (reads the key file, if any).
    #[napi(constructor)]
    pub fn new(options: AgentOptions) -> napi::Result<Self> {
        let p = &options.policy;
        let mut policy = SpendPolicy::new(
            amount("policy.maxPerRequest", &p.max_per_request)?,
            amount("policy.budget", &p.budget)?,
        );
        if let Some(n) = &p.networks {
            policy = policy.networks(n.clone());
        }
        if let Some(t) = &p.tokens {
            let tokens = t
                .iter()
                .map(|t| address("policy.tokens", t))
                .collect::<napi::Result<Vec<_>>>()?;
            policy = policy.tokens(tokens);
        }
        if let Some(t) = &p.payees {
            let payees = t
                .iter()
                .map(|t| address("policy.payees", t))
                .collect::<napi::Result<Vec<_>>>()?;
            policy = policy.payees(payees);
        }
        match &p.subscriptions {
            None | Some(Either::A(true)) => {}
            Some(Either::A(false)) => policy = policy.no_subscriptions(),
            Some(Either::B(s)) => {
                let per_cycle = match &s.max_per_cycle {
                    Some(a) => amount("policy.subscriptions.maxPerCycle", a)?,
                    None => policy.total_budget,
                };
                let overage = match &s.max_overage {
                    Some(a) => amount("policy.subscriptions.maxOverage", a)?,
                    None => Amount::ZERO,
                };
                policy = policy.subscriptions(per_cycle, overage);
            }
        }
        let signer = match (&options.key, &options.key_file) {
            (Some(key), None) => tollgate_agent::signer_from_hex(key),
            (None, Some(file)) => tollgate_agent::signer_from_file(file),
            _ => {
                return Err(named(
                    "InvalidArgument",
                    "give exactly one of key and keyFile",
                ));
            }
        }
        .map_err(agent_error)?;
        let mut builder = Agent::builder(signer, policy);
        if let Some(f) = &options.facilitators {
            builder = builder.facilitators(f.clone());
        }
        if let Some(path) = &options.state_file {
            builder = builder.state_file(path.clone());
        }
        Ok(Self {
            agent: builder.build().map_err(agent_error)?,
        })
    }

    /// The agent's address.
    #[napi(getter)]
    pub fn address(&self) -> String {
        self.agent.address().to_checksum(None)
    }

    /// What the agent has spent, in tokens.
    #[napi(getter)]
    pub fn spent(&self) -> String {
        self.agent.spent().to_tokens(DECIMALS)
    }

    /// The spec's `agent.pay()`: requests `request`, paying for it within the policy if the
    /// server answers 402.
    #[napi]
    pub async fn pay(&self, request: PayParts) -> napi::Result<PaidParts> {
        let method = request.method.as_deref().unwrap_or("GET");
        let method = Method::from_bytes(method.as_bytes())
            .map_err(|e| named("InvalidArgument", format!("method: {e}")))?;
        let url = Url::parse(&request.url).map_err(|e| named("InvalidUrl", e))?;
        let mut req = PayRequest::new(method, url);
        for (k, v) in request.headers.iter().flatten() {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| named("InvalidArgument", format!("header {k:?}: {e}")))?;
            let value = HeaderValue::from_str(v)
                .map_err(|e| named("InvalidArgument", format!("header {k:?}: {e}")))?;
            req = req.header(name, value);
        }
        if let Some(body) = &request.body {
            let bytes = STANDARD
                .decode(body)
                .map_err(|e| named("InvalidArgument", format!("body: {e}")))?;
            req = req.body(Bytes::from(bytes));
        }
        let paid = self.agent.pay(req).await.map_err(agent_error)?;
        Ok(PaidParts {
            status: u32::from(paid.status.as_u16()),
            headers: paid
                .headers
                .iter()
                .filter_map(|(k, v)| Some(vec![k.as_str().to_owned(), v.to_str().ok()?.to_owned()]))
                .collect(),
            body: STANDARD.encode(&paid.body),
            payment: paid.payment.as_ref().map(payment_json),
            earlier_payments: paid.earlier_payments.iter().map(payment_json).collect(),
        })
    }

    /// Calls the MCP tool `name` at the streamable-HTTP endpoint `url` with `arguments`, paying
    /// once (x402's MCP transport) if the tool is priced, within the policy.
    #[napi]
    pub async fn call_tool(
        &self,
        url: String,
        name: String,
        arguments: Option<Value>,
    ) -> napi::Result<Value> {
        let arguments = match arguments {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(named("InvalidArgument", "arguments must be an object")),
        };
        let call = self
            .agent
            .call_tool(&url, &name, arguments)
            .await
            .map_err(agent_error)?;
        Ok(json!({
            "isError": call.is_error,
            "content": call.content,
            "structuredContent": call.structured_content,
            "payment": call.payment.as_ref().map(payment_json),
        }))
    }

    /// The spec's `agent.subscribe({ planId, maxOverage })`: creates a subscription (first
    /// cycle billed) and returns it with its `id`.
    #[napi]
    pub async fn subscribe(&self, options: SubscribeOptions) -> napi::Result<Value> {
        let mut s = Subscribe::new(
            id("planId", &options.plan_id)?,
            amount("maxOverage", &options.max_overage)?,
        );
        if let Some(f) = &options.facilitator {
            s = s.facilitator(f.clone());
        }
        if let Some(n) = &options.network {
            s = s.network(n.clone());
        }
        let sub = self.agent.subscribe(s).await.map_err(agent_error)?;
        Ok(subscription_json(&sub))
    }
}

fn units(a: Amount) -> String {
    a.to_string()
}

/// A payment receipt for JavaScript: amounts in units (strings), addresses checksummed.
fn payment_json(p: &Payment) -> Value {
    let (kind, subscription) = match p.kind {
        PaymentKind::Tollgate => ("tollgate", None),
        PaymentKind::X402 => ("x402", None),
        PaymentKind::Subscription { id } => ("subscription", Some(id.to_string())),
        PaymentKind::Mpp => ("mpp", None),
        _ => ("other", None),
    };
    json!({
        "kind": kind,
        "subscriptionId": subscription,
        "amount": units(p.amount),
        "fee": p.fee.map(units),
        "network": p.network,
        "token": p.token.to_checksum(None),
        "payer": p.payer.to_checksum(None),
        "payTo": p.pay_to.to_checksum(None),
        "memo": p.memo.map(|m| m.to_string()),
        "txHash": p.tx_hash.map(|t| t.to_string()),
        "x402Version": p.x402_version,
        "header": p.header,
        "headerName": p.header_name(),
        "settlement": p.settlement,
        "metered": p.metered.map(units),
        "mppReceipt": p.mpp_receipt.as_ref().map(|r| json!({
            "method": r.method,
            "reference": r.reference,
            "status": r.status,
            "timestamp": r.timestamp,
            "challengeId": r.challenge_id,
            "chainId": r.chain_id,
            "externalId": r.external_id,
        })),
    })
}

fn subscription_json(s: &Subscription) -> Value {
    json!({
        "id": s.id.to_string(),
        "status": s.status,
        "planId": s.plan_id.to_string(),
        "paidThrough": s.paid_through,
        "allowanceCap": units(s.allowance_cap),
        "allowanceRemaining": units(s.allowance_remaining),
        "txHash": s.tx_hash.map(|t| t.to_string()),
    })
}
