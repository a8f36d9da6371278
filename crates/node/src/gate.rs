//! The provider side: [`NativeGate`], one gate with its pricing, built on first use from the
//! facilitator's discovery, whose [`NativeGate::admit`] is the whole decision of the Rust
//! `paymentGate` layer about a request.

use std::{collections::HashMap, time::Duration};

use napi_derive::napi;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::OnceCell;
use tollgate_client::FacilitatorClient;
use tollgate_gate::{
    Admission, DeductError, Expected, Gate, Offer, PaymentGateLayer, Pricing, parse_payment_proof,
};
use tollgate_protocol::ApiErrorCode;

use crate::{address, amount, error::named, id};

/// The settings of a gate: the spec's `{ pricing }` and the gate's own, in one object. `Debug`
/// hides the API key and the memo secret.
#[napi(object)]
pub struct GateOptions {
    /// The ways to pay: `{ type: "one-time", amount: "0.50" }` and
    /// `{ type: "subscription", plan: "0x…" }` (amounts in tokens, or `"units:N"`).
    pub pricing: Value,
    /// The facilitator's base URL.
    pub facilitator: String,
    /// Who gets paid (`0x…`).
    pub pay_to: String,
    /// The network; default: the facilitator's only one.
    pub network: Option<String>,
    /// The token; default: the one the facilitator publishes for the network.
    pub token: Option<String>,
    /// The token's EIP-712 domain name; default: the published one.
    pub token_name: Option<String>,
    /// The token's EIP-712 domain version; default: the published one.
    pub token_version: Option<String>,
    /// The provider's API key (`tg_…`): needed to meter subscriptions.
    pub api_key: Option<String>,
    /// Deducted from a subscriber's overage allowance per request admitted on a subscription.
    pub metered: Option<String>,
    /// The 402's `description`.
    pub description: Option<String>,
    /// The 402's `mimeType`.
    pub mime_type: Option<String>,
    /// The public base URL the 402's `resource` is built on; default: the request's `Host`.
    pub public_url: Option<String>,
    /// The 32-byte memo secret (`0x…`); replicas must share one. Default: random per process.
    pub memo_secret: Option<String>,
    /// The once-only memo store: `memory:` (default: this process's memory), `sqlite::memory:`,
    /// `sqlite://path`.
    pub memo_store: Option<String>,
    /// How long a 402's terms stay payable, in seconds (default 300).
    pub memo_ttl_secs: Option<u32>,
    /// A JSON-RPC URL to read subscriptions from; default: the one the facilitator publishes.
    pub rpc_url: Option<String>,
    /// Whether browsers get the 402 as a page that pays with their wallet (default `true`).
    pub paywall: Option<bool>,
    /// Whether x402 V2's `payment-identifier` is honoured (default `true`); `false` serves each
    /// payment at most once.
    pub payment_identifier: Option<bool>,
    /// Whether the route also offers MPP (default `false`): a `WWW-Authenticate: Payment`
    /// challenge of the EVM `charge` method on every 402, and `Authorization: Payment`
    /// credentials settled once and answered with `Payment-Receipt`.
    pub mpp: Option<bool>,
}

impl std::fmt::Debug for GateOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateOptions")
            .field("pricing", &self.pricing)
            .field("facilitator", &self.facilitator)
            .field("pay_to", &self.pay_to)
            .field("network", &self.network)
            .field("token", &self.token)
            .field("token_name", &self.token_name)
            .field("token_version", &self.token_version)
            .field("api_key", &redacted(self.api_key.as_ref()))
            .field("metered", &self.metered)
            .field("description", &self.description)
            .field("mime_type", &self.mime_type)
            .field("public_url", &self.public_url)
            .field("memo_secret", &redacted(self.memo_secret.as_ref()))
            .field("memo_store", &self.memo_store)
            .field("memo_ttl_secs", &self.memo_ttl_secs)
            .field("rpc_url", &self.rpc_url)
            .field("paywall", &self.paywall)
            .field("payment_identifier", &self.payment_identifier)
            .field("mpp", &self.mpp)
            .finish()
    }
}

/// What `Debug` shows of a secret: whether there is one.
fn redacted(secret: Option<&String>) -> Option<&'static str> {
    secret.map(|_| "<redacted>")
}

/// One entry of `pricing`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
enum PricingEntry {
    OneTime { amount: String },
    Subscription { plan: String },
}

/// A request as the middleware sees it.
#[napi(object)]
#[derive(Debug)]
pub struct RequestParts {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path and query as the client sent them (Express: `req.originalUrl`), or an absolute
    /// URL.
    pub url: String,
    /// The request's headers; a header sent several times as an array.
    pub headers: HashMap<String, Value>,
}

/// What the gate decided.
#[napi(object)]
#[derive(Debug)]
pub struct Decision {
    /// Serve the request (`true`), or answer with `status`, `headers` and `body` instead.
    pub admitted: bool,
    /// The refusal's status (402, 503, 500); 200 when admitted.
    pub status: u32,
    /// For an admitted request, headers to add to its response (`X-PAYMENT-RESPONSE`,
    /// `PAYMENT-RESPONSE`); for a refusal, the refusal's headers.
    pub headers: HashMap<String, String>,
    /// The refusal's body (JSON).
    pub body: Option<String>,
    /// The subscription an admitted request is served on (`0x…`).
    pub subscription: Option<String>,
}

/// What `buildPaymentRequired` is asked for.
#[napi(object)]
#[derive(Debug)]
pub struct Terms {
    /// A plan offered (`0x…`); its terms must be among the gate's pricing to be spelled out.
    pub plan: Option<String>,
    /// A one-time price (tokens, or `"units:N"`); default: the gate's one-time price, if any.
    pub amount: Option<String>,
    /// The absolute URL of the resource; default: the public URL's root.
    pub resource: Option<String>,
    /// The request method the terms are for (default `GET`).
    pub method: Option<String>,
    /// The top-level `error` (default `PaymentRequired`).
    pub error: Option<String>,
}

/// What a proof must pay for at this gate.
#[napi(object)]
#[derive(Debug)]
pub struct ExpectedPayment {
    /// The request's method (default `GET`).
    pub method: Option<String>,
    /// The path the 402 was issued for (`/v1/quote`).
    pub resource: String,
    /// The price (tokens, or `"units:N"`); default: the gate's one-time price.
    pub price: Option<String>,
}

/// A gate, built from its settings on first use ([`NativeGate::ready`]).
#[napi]
#[derive(Debug)]
pub struct NativeGate {
    options: GateOptions,
    pricing: Vec<Pricing>,
    built: OnceCell<Built>,
}

#[derive(Debug)]
struct Built {
    gate: Gate,
    layer: PaymentGateLayer,
    public_url: Option<String>,
}

#[napi]
impl NativeGate {
    /// Checks the settings (nothing is contacted until the first request).
    #[napi(constructor)]
    pub fn new(options: GateOptions) -> napi::Result<Self> {
        let entries: Vec<PricingEntry> =
            serde_json::from_value(options.pricing.clone()).map_err(|e| {
                named(
                    "InvalidArgument",
                    format!(
                        "pricing: {e} (expected [{{ type: \"one-time\", amount: \"0.50\" }}, \
                         {{ type: \"subscription\", plan: \"0x…\" }}])"
                    ),
                )
            })?;
        let pricing = entries
            .iter()
            .map(|e| match e {
                PricingEntry::OneTime { amount: a } => {
                    amount("pricing one-time amount", a).map(Pricing::one_time)
                }
                PricingEntry::Subscription { plan } => {
                    id("pricing subscription plan", plan).map(Pricing::subscription)
                }
            })
            .collect::<napi::Result<Vec<_>>>()?;
        address("payTo", &options.pay_to)?;
        if let Some(m) = &options.metered {
            amount("metered", m)?;
        }
        Ok(Self {
            options,
            pricing,
            built: OnceCell::new(),
        })
    }

    /// Builds the gate now (reads the facilitator's discovery for the network and token, and
    /// the plans' terms); otherwise the first request does.
    #[napi]
    pub async fn ready(&self) -> napi::Result<()> {
        self.built().await.map(|_| ())
    }

    /// The network the gate settles on (after [`NativeGate::ready`]).
    #[napi]
    pub async fn network(&self) -> napi::Result<String> {
        Ok(self.built().await?.gate.network().to_string())
    }

    /// The whole decision about a request: admitted (settled or deducted what it pays, with
    /// the headers for its response) or refused (the answer to send instead, nothing spent).
    #[napi]
    pub async fn admit(&self, request: RequestParts) -> napi::Result<Decision> {
        let built = self.built().await?;
        let mut req = http::Request::builder()
            .method(request.method.as_str())
            .uri(request.url.as_str());
        for (name, value) in &request.headers {
            match value {
                Value::String(v) => req = req.header(name.as_str(), v.as_str()),
                Value::Array(values) => {
                    for v in values.iter().filter_map(Value::as_str) {
                        req = req.header(name.as_str(), v);
                    }
                }
                _ => {}
            }
        }
        let (parts, ()) = req
            .body(())
            .map_err(|e| named("InvalidRequest", e))?
            .into_parts();
        Ok(match built.layer.admit(parts).await {
            Admission::Admitted {
                response_headers,
                subscription,
            } => Decision {
                admitted: true,
                status: 200,
                headers: header_map(&response_headers),
                body: None,
                subscription: subscription.map(|s| s.id.to_string()),
            },
            Admission::Refused(response) => Decision {
                admitted: false,
                status: u32::from(response.status().as_u16()),
                headers: header_map(response.headers()),
                body: Some(response.into_body()),
                subscription: None,
            },
            _ => return Err(named("InternalError", "unknown admission")),
        })
    }

    /// The spec's `buildPaymentRequired`: the 402 body for `terms`.
    #[napi]
    pub async fn build_payment_required(&self, terms: Terms) -> napi::Result<Value> {
        let built = self.built().await?;
        let mut pricing = Vec::new();
        if let Some(a) = &terms.amount {
            pricing.push(Pricing::one_time(amount("amount", a)?));
        } else {
            pricing.extend(
                self.pricing
                    .iter()
                    .filter(|p| matches!(p, Pricing::OneTime { .. }))
                    .cloned(),
            );
        }
        match &terms.plan {
            Some(p) => pricing.push(Pricing::subscription(id("plan", p)?)),
            None => pricing.extend(
                self.pricing
                    .iter()
                    .filter(|p| matches!(p, Pricing::Subscription { .. }))
                    .cloned(),
            ),
        }
        let resource = terms.resource.clone().unwrap_or_else(|| {
            format!(
                "{}/",
                built.public_url.as_deref().unwrap_or("http://localhost")
            )
        });
        let offer = Offer {
            method: terms.method.as_deref().unwrap_or("GET"),
            resource_url: &resource,
            pricing: &pricing,
            description: self.options.description.as_deref().unwrap_or_default(),
            mime_type: self.options.mime_type.as_deref().unwrap_or_default(),
        };
        let body = built
            .gate
            .build_payment_required(&offer, terms.error.as_deref().unwrap_or("PaymentRequired"));
        serde_json::to_value(body).map_err(|e| named("InternalError", e))
    }

    /// The spec's `verifyPaymentProof` at this gate: whether the proof (an `X-PAYMENT` value)
    /// pays for `expected`, spending its memo if so (a second call with the same proof is
    /// `false`). Throws only when the facilitator or memo store cannot be reached.
    #[napi]
    pub async fn verify_payment_proof(
        &self,
        proof: String,
        expected: ExpectedPayment,
    ) -> napi::Result<bool> {
        let built = self.built().await?;
        let Ok(proof) = parse_payment_proof(&proof) else {
            return Ok(false);
        };
        let price = match &expected.price {
            Some(p) => amount("price", p)?,
            None => self
                .pricing
                .iter()
                .find_map(|p| match p {
                    Pricing::OneTime { amount } => Some(*amount),
                    _ => None,
                })
                .ok_or_else(|| {
                    named(
                        "InvalidArgument",
                        "expected.price: the gate sells nothing one-time",
                    )
                })?,
        };
        let expected = Expected {
            method: expected.method.as_deref().unwrap_or("GET"),
            resource: &expected.resource,
            price,
        };
        match built.gate.verify_payment_proof(&proof, &expected).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_unavailable() => Err(named("Unavailable", e)),
            Err(_) => Ok(false),
        }
    }

    /// The spec's `deductAllowance`: deducts `amount` (tokens, or `"units:N"`) from the
    /// subscription's overage allowance for its current cycle; `AllowanceExhausted` past the
    /// cap (nothing deducted). Needs `apiKey`.
    #[napi]
    pub async fn deduct_allowance(
        &self,
        subscription_id: String,
        amount_text: String,
    ) -> napi::Result<Value> {
        let built = self.built().await?;
        let sub = id("subscriptionId", &subscription_id)?;
        let a = amount("amount", &amount_text)?;
        match built.gate.deduct_allowance(sub, a).await {
            Ok(usage) => serde_json::to_value(usage).map_err(|e| named("InternalError", e)),
            Err(e @ DeductError::AllowanceExhausted { .. }) => Err(named("AllowanceExhausted", e)),
            Err(e @ DeductError::SubscriptionNotActive { .. }) => {
                Err(named("SubscriptionNotActive", e))
            }
            Err(e) => {
                let name = e.code().to_owned();
                Err(named(&name, e))
            }
        }
    }
}

/// Where [`deduct_allowance`] deducts. `Debug` hides the API key.
#[napi(object)]
pub struct DeductOptions {
    /// The facilitator's base URL.
    pub facilitator: String,
    /// The provider's API key (`tg_…`), the owner of the subscription's plan.
    pub api_key: String,
    /// The network; default: the facilitator's only subscriptions network.
    pub network: Option<String>,
    /// Counts once per key (a retry after a timeout cannot deduct twice).
    pub idempotency_key: Option<String>,
}

impl std::fmt::Debug for DeductOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeductOptions")
            .field("facilitator", &self.facilitator)
            .field("api_key", &redacted(Some(&self.api_key)))
            .field("network", &self.network)
            .field("idempotency_key", &self.idempotency_key)
            .finish()
    }
}

/// The spec's `deductAllowance(subscriptionId, amount)` without a gate: through the facilitator
/// with the provider's API key. `AllowanceExhausted` past the cap (nothing deducted).
#[napi]
pub async fn deduct_allowance(
    subscription_id: String,
    amount_text: String,
    options: DeductOptions,
) -> napi::Result<Value> {
    let sub = id("subscriptionId", &subscription_id)?;
    let client = FacilitatorClient::builder(options.facilitator.clone())
        .api_key(options.api_key.clone())
        .build()
        .map_err(|e| named("InvalidArgument", format!("facilitator: {e}")))?;
    let req = tollgate_protocol::DeductRequest {
        network: options
            .network
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e| named("InvalidArgument", format!("network: {e}")))?,
        amount: amount("amount", &amount_text)?,
        idempotency_key: options.idempotency_key.clone(),
    };
    match client.deduct(sub, &req).await {
        Ok(usage) => serde_json::to_value(usage).map_err(|e| named("InternalError", e)),
        Err(e) if !e.is_refusal() => Err(named("FacilitatorUnavailable", e)),
        Err(e) => {
            let name = match e.code() {
                Some(ApiErrorCode::AllowanceExhausted) => "AllowanceExhausted",
                Some(ApiErrorCode::SubscriptionNotActive) => "SubscriptionNotActive",
                Some(code) => code.as_str(),
                None => "DeductFailed",
            };
            let message = e
                .body()
                .map_or_else(|| e.to_string(), |b| b.message().to_owned());
            Err(named(name, message))
        }
    }
}

impl NativeGate {
    async fn built(&self) -> napi::Result<&Built> {
        self.built.get_or_try_init(|| self.build()).await
    }

    async fn build(&self) -> napi::Result<Built> {
        let o = &self.options;
        let unavailable = |e: tollgate_client::Error| named("FacilitatorUnavailable", e);
        let client = FacilitatorClient::builder(o.facilitator.clone())
            .build()
            .map_err(|e| named("InvalidArgument", format!("facilitator: {e}")))?;
        let discovery = client.fetch_discovery().await.map_err(unavailable)?;
        let (network, info) = match &o.network {
            Some(n) => (
                n.clone(),
                discovery.network(n).ok_or_else(|| {
                    named(
                        "InvalidArgument",
                        format!(
                            "network {n:?}: the facilitator serves {:?}",
                            discovery.networks.keys().collect::<Vec<_>>()
                        ),
                    )
                })?,
            ),
            None => match discovery.networks.iter().next() {
                Some((n, info)) if discovery.networks.len() == 1 => (n.clone(), info),
                _ => {
                    return Err(named(
                        "InvalidArgument",
                        format!(
                            "network: the facilitator serves {:?}; name one",
                            discovery.networks.keys().collect::<Vec<_>>()
                        ),
                    ));
                }
            },
        };
        let token = match &o.token {
            Some(t) => address("token", t)?,
            None => info.token,
        };
        let mut builder = Gate::builder()
            .network(network)
            .token(
                token,
                o.token_name
                    .clone()
                    .unwrap_or_else(|| info.token_name.clone()),
                o.token_version
                    .clone()
                    .unwrap_or_else(|| info.token_version.clone()),
            )
            .pay_to(address("payTo", &o.pay_to)?)
            .facilitator(o.facilitator.clone())
            .chain_id(info.chain_id);
        if let Some(url) = &o.public_url {
            builder = builder.public_url(url.clone());
        }
        if let Some(secret) = &o.memo_secret {
            builder = builder.memo_secret(id("memoSecret", secret)?.0);
        }
        if let Some(store) = &o.memo_store {
            builder = builder.memo_store_url(store.clone());
        }
        if let Some(ttl) = o.memo_ttl_secs {
            builder = builder.memo_ttl(Duration::from_secs(ttl.into()));
        }
        if let Some(key) = &o.api_key {
            builder = builder.api_key(key.clone());
        }
        if let Some(url) = &o.rpc_url {
            builder = builder.rpc_url(url.clone());
        }
        for p in &self.pricing {
            if let Pricing::Subscription { plan } = p {
                builder = builder.plan(*plan);
            }
        }
        let gate = builder
            .build()
            .await
            .map_err(|e| named("GateConfiguration", e))?;
        let mut layer = gate
            .payment_gate(self.pricing.iter().cloned())
            .description(o.description.clone().unwrap_or_default())
            .mime_type(o.mime_type.clone().unwrap_or_default())
            .paywall(o.paywall.unwrap_or(true))
            .payment_identifier(o.payment_identifier.unwrap_or(true))
            .mpp(o.mpp.unwrap_or(false));
        if let Some(m) = &o.metered {
            layer = layer.metered(amount("metered", m)?);
        }
        Ok(Built {
            gate,
            layer,
            public_url: o.public_url.clone(),
        })
    }
}

fn header_map(headers: &http::HeaderMap) -> HashMap<String, String> {
    headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect()
}
