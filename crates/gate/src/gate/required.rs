//! What a 402 demands: the ways to pay ([`Pricing`]), the [`Offer`] of a resource, the
//! superset body ([`Gate::build_payment_required`]) and the x402 V1 requirements of a price.

use alloy::primitives::B256;
use tollgate_protocol::{
    Amount, PaymentOption, PaymentRequired, ServiceExtension, network,
    x402::{self, Eip712Extra, PaymentRequirements},
};

use http::HeaderMap;

use super::{Gate, path_of, unix_now};
use crate::memo;

/// One way to pay for a gated resource: the spec's pricing entries
/// (`{ type: "one-time", amount }`, `{ type: "subscription", plan }`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pricing {
    /// Pay per request: an x402 `exact` payment of `amount` (token's smallest unit).
    OneTime {
        /// The price per request.
        amount: Amount,
    },
    /// A subscription to a plan. Its terms (in the 402) come from [`GateBuilder::plan`](crate::GateBuilder::plan); a request
    /// with `X-Service-Sub` is served when the id is an ACTIVE, paid subscription to this plan,
    /// checked on the chain given with [`GateBuilder::subscriptions`](crate::GateBuilder::subscriptions) (required).
    Subscription {
        /// The plan's id.
        plan: B256,
    },
}

impl Pricing {
    /// A one-time price in the token's smallest unit (`500_000` is 0.50 of a 6-decimal token).
    pub fn one_time(amount: impl Into<Amount>) -> Self {
        Self::OneTime {
            amount: amount.into(),
        }
    }

    /// A subscription to `plan`.
    pub fn subscription(plan: B256) -> Self {
        Self::Subscription { plan }
    }
}

/// What a 402 offers ([`Gate::build_payment_required`]).
#[derive(Clone, Copy, Debug)]
pub struct Offer<'a> {
    /// The request method the terms are for (`GET`).
    pub method: &'a str,
    /// The absolute URL of the resource (`https://api.example.com/v1/quote`); its path is what
    /// memos bind.
    pub resource_url: &'a str,
    /// The ways to pay.
    pub pricing: &'a [Pricing],
    /// Human-readable description (may be empty).
    pub description: &'a str,
    /// MIME type of the resource (may be empty).
    pub mime_type: &'a str,
}

impl Gate {
    /// The spec's `buildPaymentRequired`: the superset 402 body for `offer`, with a fresh memo per
    /// entry and `error` as the top-level reason.
    ///
    /// ```no_run
    /// use tollgate_gate::{Gate, Offer, Pricing};
    ///
    /// # fn body(gate: &Gate) {
    /// let pricing = [Pricing::one_time(500_000u64)];
    /// let offer = Offer {
    ///     method: "GET",
    ///     resource_url: "https://api.example.com/v1/quote",
    ///     pricing: &pricing,
    ///     description: "A price quote",
    ///     mime_type: "application/json",
    /// };
    /// let required = gate.build_payment_required(&offer, "payment required");
    /// assert_eq!(required.accepts[0].requirements.scheme, "exact");
    /// # }
    /// ```
    ///
    /// - one entry per scheme: a one-time price is an `exact` entry, first (x402 clients fall
    ///   back to `accepts[0]`), with the spec's fields, the x402 V1 mirror fields and
    ///   `service: {subscriptionScheme, facilitator}` (`subscriptionScheme` is `true` when the
    ///   route also offers a plan: subscribing is preferred); each plan is a
    ///   `scheme: "subscription"` entry of its own (`service.planId`, `subscriptionScheme:
    ///   true`, the `plan` terms), which generic x402 clients cannot pay and pass over;
    /// - except on a network with an x402 V1 name (`base`, `base-sepolia`), whose 402 strict x402
    ///   V1 clients parse entry by entry as `exact` and refuse whole when any entry is not: there,
    ///   beside a one-time price, the first plan rides on the `exact` entry (`service.planId`,
    ///   `plan`) and the others are left out, unless the request names `subscription` in
    ///   `X-Service-Schemes` ([`build_payment_required_for`](Self::build_payment_required_for)),
    ///   as Tollgate's agents do.
    ///
    /// A plan without terms from [`GateBuilder::plan`](crate::GateBuilder::plan) is advertised by id only.
    pub fn build_payment_required(&self, offer: &Offer<'_>, error: &str) -> PaymentRequired {
        self.build_payment_required_for(offer, error, &HeaderMap::new())
    }

    /// [`build_payment_required`](Self::build_payment_required) for a request with these
    /// headers: its `X-Service-Schemes` says whether the client reads a `subscription` entry
    /// beside an `exact` one on a network with an x402 V1 name.
    pub fn build_payment_required_for(
        &self,
        offer: &Offer<'_>,
        error: &str,
        request: &HeaderMap,
    ) -> PaymentRequired {
        let i = &self.inner;
        let every_scheme =
            !network::is_x402_v1_name(&i.network) || reads_subscription_entries(request);
        let path = path_of(offer.resource_url);
        let expiry = unix_now().saturating_add(i.memo_ttl.as_secs());
        let one_time = offer.pricing.iter().find_map(|p| match p {
            Pricing::OneTime { amount } => Some(*amount),
            Pricing::Subscription { .. } => None,
        });
        let plans: Vec<B256> = offer
            .pricing
            .iter()
            .filter_map(|p| match p {
                Pricing::Subscription { plan } => Some(*plan),
                Pricing::OneTime { .. } => None,
            })
            .collect();
        let terms_of = |plan: B256| i.plans.iter().find(|t| t.plan_id == plan).cloned();
        let option = |scheme: &str, amount: Amount, service: ServiceExtension, plan| {
            let memo = memo::issue(&i.secret, &self.terms(offer.method, path, amount), expiry);
            PaymentOption {
                requirements: self.requirements(scheme, amount, offer),
                token: i.token,
                amount,
                memo,
                service: Some(service),
                plan,
            }
        };
        let service = |plan_id: Option<B256>| ServiceExtension {
            plan_id,
            subscription_scheme: plan_id.is_some(),
            facilitator: i.facilitator_url.clone(),
        };
        let mut accepts = Vec::new();
        let rest = match one_time {
            Some(amount) if every_scheme => {
                let preferred = ServiceExtension {
                    subscription_scheme: !plans.is_empty(),
                    ..service(None)
                };
                accepts.push(option(x402::SCHEME_EXACT, amount, preferred, None));
                &plans[..]
            }
            Some(amount) => {
                let first = plans.first().copied();
                accepts.push(option(
                    x402::SCHEME_EXACT,
                    amount,
                    service(first),
                    first.and_then(terms_of),
                ));
                &[][..]
            }
            None => &plans[..],
        };
        for plan in rest {
            let terms = terms_of(*plan);
            let amount = terms.as_ref().map_or(Amount::ZERO, |t| t.amount);
            accepts.push(option("subscription", amount, service(Some(*plan)), terms));
        }
        PaymentRequired::new(accepts, error)
    }

    /// This gate's x402 V1 requirements for a resource.
    pub(super) fn requirements(
        &self,
        scheme: &str,
        amount: Amount,
        offer: &Offer<'_>,
    ) -> PaymentRequirements {
        let i = &self.inner;
        PaymentRequirements {
            scheme: scheme.to_owned(),
            network: self.wire_network().to_owned(),
            max_amount_required: amount,
            resource: offer.resource_url.to_owned(),
            description: offer.description.to_owned(),
            mime_type: offer.mime_type.to_owned(),
            pay_to: i.pay_to,
            max_timeout_seconds: i.memo_ttl.as_secs(),
            asset: i.token,
            output_schema: None,
            extra: Some(
                Eip712Extra {
                    name: i.token_name.clone(),
                    version: i.token_version.clone(),
                }
                .to_value(),
            ),
        }
    }
}

/// Whether a request's `X-Service-Schemes` names `subscription`.
fn reads_subscription_entries(request: &HeaderMap) -> bool {
    request
        .get_all(tollgate_protocol::headers::X_SERVICE_SCHEMES)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|scheme| scheme.trim().eq_ignore_ascii_case("subscription"))
}

#[cfg(test)]
mod tests {
    use alloy::primitives::Address;
    use tollgate_protocol::PlanTerms;

    use super::*;

    #[tokio::test]
    async fn payment_required_shapes() {
        let plan = PlanTerms {
            plan_id: B256::repeat_byte(7),
            amount: Amount::from_units(5_000_000),
            interval: 2_592_000,
            token: Address::repeat_byte(1),
        };
        let gate_on = |network: &'static str| {
            Gate::builder()
                .network(network)
                .token(Address::repeat_byte(1), "USDC", "2")
                .pay_to(Address::repeat_byte(2))
                .facilitator("http://f.example")
                .plan_terms(plan.clone())
                .build()
        };
        let g = gate_on("base-sepolia").await.unwrap();
        let offer = |pricing| Offer {
            method: "GET",
            resource_url: "https://api.example/v1/quote",
            pricing,
            description: "a quote",
            mime_type: "application/json",
        };
        // One-time only.
        let one = [Pricing::one_time(500_000u64)];
        let b = g.build_payment_required(&offer(&one), "X-PAYMENT header is required");
        let v = serde_json::to_value(&b).unwrap();
        assert!(!v.to_string().contains("null"), "{v}");
        assert_eq!(v["accepts"][0]["scheme"], "exact");
        assert_eq!(v["accepts"][0]["service"]["subscriptionScheme"], false);
        assert!(v["accepts"][0]["service"].get("planId").is_none());
        assert_eq!(v["accepts"][0]["maxTimeoutSeconds"], 300);
        assert_eq!(v["accepts"][0]["extra"]["name"], "USDC");
        b.accepts[0]
            .requirements
            .check_x402_v1_compatible()
            .unwrap();
        serde_json::from_value::<x402::PaymentRequiredResponse>(v).unwrap();
        // One-time and a plan: the plan rides on the exact entry.
        let both = [
            Pricing::one_time(500_000u64),
            Pricing::subscription(plan.plan_id),
        ];
        let b = g.build_payment_required(&offer(&both), "x");
        assert_eq!(b.accepts.len(), 1);
        let e = &b.accepts[0];
        assert_eq!(e.service.as_ref().unwrap().plan_id, Some(plan.plan_id));
        assert!(e.service.as_ref().unwrap().subscription_scheme);
        assert_eq!(e.plan.as_ref(), Some(&plan));
        e.requirements.check_x402_v1_compatible().unwrap();
        // In V2, the exact entry on the CAIP-2 id and the plan in Tollgate's extension.
        let v2 = g.payment_required_v2(&b, &offer(&both)).unwrap();
        assert_eq!(v2.accepts.len(), 1);
        assert_eq!(v2.accepts[0].network, "eip155:84532");
        assert_eq!(v2.error.as_deref(), Some("x"));
        let ext = v2.extensions.as_ref().unwrap();
        let sub_offer = &ext[x402::v2::SUBSCRIPTION_EXTENSION]["info"]["offer"];
        assert_eq!(sub_offer["planId"], plan.plan_id.to_string());
        assert_eq!(sub_offer["subscriptionScheme"], true);
        assert_eq!(sub_offer["facilitator"], "http://f.example");
        assert_eq!(sub_offer["plan"]["amount"], "5000000");
        assert!(ext.contains_key(x402::v2::PAYMENT_IDENTIFIER));
        // A Tollgate client names the schemes it reads: one entry per scheme, on a V1 name too.
        let mut asks = HeaderMap::new();
        asks.insert(
            tollgate_protocol::headers::X_SERVICE_SCHEMES,
            http::HeaderValue::from_static("exact, Subscription"),
        );
        let listed = |g: &Gate, headers: &HeaderMap| {
            let b = g.build_payment_required_for(&offer(&both), "x", headers);
            let exact = &b.accepts[0];
            assert_eq!(exact.requirements.scheme, "exact");
            let service = exact.service.as_ref().unwrap();
            assert_eq!((service.plan_id, service.subscription_scheme), (None, true));
            assert!(exact.plan.is_none());
            let sub = &b.accepts[1];
            assert_eq!(b.accepts.len(), 2);
            assert_eq!(sub.requirements.scheme, "subscription");
            assert_eq!(sub.service.as_ref().unwrap().plan_id, Some(plan.plan_id));
            assert_eq!(sub.plan.as_ref(), Some(&plan));
            b
        };
        let b = listed(&g, &asks);
        let v2 = g.payment_required_v2(&b, &offer(&both)).unwrap();
        assert_eq!(v2.accepts.len(), 1, "V2 clients see the exact entry only");
        let ext = v2.extensions.unwrap();
        assert_eq!(
            ext[x402::v2::SUBSCRIPTION_EXTENSION]["info"]["offer"]["planId"],
            plan.plan_id.to_string()
        );
        // On any other network, whatever the request says.
        let caip2 = gate_on("eip155:84532").await.unwrap();
        listed(&caip2, &HeaderMap::new());
        // Subscription only: a V1 `subscription` entry; no V2 entry a generic client could pay.
        let sub = [Pricing::subscription(plan.plan_id)];
        let b = g.build_payment_required(&offer(&sub), "x");
        assert_eq!(b.accepts[0].requirements.scheme, "subscription");
        assert_eq!(b.accepts[0].amount, plan.amount);
        let v2 = g.payment_required_v2(&b, &offer(&sub)).unwrap();
        assert!(v2.accepts.is_empty());
        assert!(
            v2.extensions
                .unwrap()
                .contains_key(x402::v2::SUBSCRIPTION_EXTENSION)
        );
        // Memos verify for the method/path/price they were issued for.
        let b = g.build_payment_required(&offer(&one), "x");
        let t = g.terms("GET", "/v1/quote", Amount::from_units(500_000));
        memo::check(&g.inner.secret, &t, &b.accepts[0].memo, unix_now()).unwrap();
    }
}
