//! The facilitator's OpenAPI 3.1 description, served at `GET /openapi.json`.
//!
//! Derived, so that it cannot drift from what the server speaks: every request and response
//! schema is `utoipa::ToSchema` derived from the `tollgate-protocol` type the handler
//! (de)serializes (their serde attributes included), every query string from the query type's
//! `utoipa::IntoParams`; each route's operation (its path parameters, headers and statuses) is
//! declared beside its handler, in the `routes` of its area's module in `api`, the same list
//! the router is built from ([`paths`] gives its path templates). Every error, from the handlers and from the server's limits
//! alike, is `application/json` [`ApiErrorBody`] (`{"error": {"code", "message"}}`); the x402
//! V1 endpoints keep x402's own `isValid`/`success` bodies for payment failures and use the
//! error body only for malformed requests.
//!
//! Conventions that hold across the API: amounts (and EIP-3009 `validAfter`/`validBefore`) are
//! decimal strings of integers in the token's smallest unit; addresses are 0x-hex (checksummed on
//! output, any case on input); hashes, nonces and memos are 0x-hex 32-byte values.
//!
//! Built from the routes' operations, written in the `builder`'s small vocabulary (`op(…)`
//! with its parameters, bodies and statuses); `errors` holds the error responses, one component
//! per status; `integers` writes out the bounds of the unsigned integer formats. A new endpoint's
//! operation goes beside its handler, in its area's `routes` (see `crate::api`).

pub(crate) mod builder;
mod errors;
mod integers;

use std::sync::LazyLock;

use serde_json::Value;
#[cfg(doc)]
use tollgate_protocol::ApiErrorBody;
use utoipa::openapi::{
    ComponentsBuilder, InfoBuilder, LicenseBuilder, OpenApi, OpenApiBuilder, Server,
    security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme},
    tag::TagBuilder,
};

use crate::dashboard::SESSION_COOKIE;
use errors::{ERRORS, error_response};

/// Every path the document describes, in the router's order (also the route templates the
/// metrics are labelled with): those of the routes the router is built from.
pub fn paths() -> &'static [&'static str] {
    static PATHS: LazyLock<Vec<&'static str>> = LazyLock::new(|| crate::api::routes().paths());
    &PATHS
}

/// The name of the API-key security scheme.
const API_KEY: &str = "apiKey";

/// The name of the dashboard's session-cookie security scheme.
const SESSION: &str = "session";

/// The OpenAPI 3.1 document, with `public_url` as its server, as JSON.
pub fn document(public_url: &str) -> Value {
    serde_json::to_value(openapi(public_url)).expect("the OpenAPI document serializes")
}

/// The OpenAPI 3.1 document, with `public_url` as its server.
pub fn openapi(public_url: &str) -> OpenApi {
    let mut doc = crate::api::routes().doc();
    let mut components = ComponentsBuilder::new()
        .security_scheme(
            API_KEY,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A provider API key from `/providers/register` (`tg_` and 64 hex digits).",
                    ))
                    .build(),
            ),
        )
        .security_scheme(
            SESSION,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                SESSION_COOKIE,
                "The dashboard's login session, set by `POST /dashboard/login`.",
            ))),
        );
    for (status, name, description, codes) in ERRORS {
        components = components.response(*name, error_response(*status, description, codes));
    }
    doc.schemas.sort_by(|a, b| a.0.cmp(&b.0));
    doc.schemas.dedup_by(|a, b| a.0 == b.0);
    components = components.schemas_from_iter(doc.schemas);
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Tollgate facilitator")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(DESCRIPTION))
                .license(Some(
                    LicenseBuilder::new()
                        .name("MIT OR Apache-2.0")
                        .identifier(Some("MIT OR Apache-2.0"))
                        .build(),
                ))
                .build(),
        )
        .servers(Some([Server::new(public_url.trim_end_matches('/'))]))
        .tags(Some(TAGS.iter().map(|(name, description)| {
            TagBuilder::new()
                .name(*name)
                .description(Some(*description))
                .build()
        })))
        .paths(doc.paths)
        .components(Some(components.build()))
        .build()
}

const DESCRIPTION: &str = "Settles client-signed stablecoin transfers on EVM chains and issues \
    signed payment proofs; also an x402 V1 facilitator.\n\nOne-time payments: the client signs an \
    EIP-3009 `receiveWithAuthorization` to the network's PaymentRouter whose nonce commits to \
    `payTo`, `memo` and the fee (`keccak256(abi.encode(payTo, memo, fee))`), and posts it to \
    `/authorize`; the facilitator settles it and answers with a proof for the `X-PAYMENT` header. \
    x402 V1 resource servers can use `/verify`, `/settle` and `/supported` unchanged. Amounts are \
    decimal strings in the token's smallest unit; addresses 0x-hex; hashes 0x-hex 32 bytes. \
    Errors are `{\"error\": {\"code\", \"message\"}}`, also for a query string or path parameter \
    that does not parse (400 `InvalidQuery`, `InvalidPath`), an unknown path (404), a method a \
    path does not take (405 `MethodNotAllowed`, with `Allow`), a request over the rate limit or \
    a subscriber's lifecycle call over the bound on relayed transactions (429 `RateLimited`, \
    with `Retry-After`) or over the request timeout (408 `RequestTimeout`).";

const TAGS: &[(&str, &str)] = &[
    (
        "tollgate",
        "Tollgate's own API: settlement with proofs, proof verification, discovery.",
    ),
    (
        "providers",
        "Provider self-registration (a signed challenge, no human step), API keys, and plans \
         published through the facilitator.",
    ),
    (
        "subscriptions",
        "Gasless subscriptions (subscribeWithSig), the subscriber's gasless pause, resume, cancel \
         and listing, metered usage and the overage allowance.",
    ),
    ("x402", "The x402 V1 facilitator API."),
    (
        "webhooks",
        "Webhook endpoints (Standard Webhooks 1.0 signatures), their deliveries, and the event \
         log.",
    ),
    (
        "analytics",
        "A provider's settled volume, subscriptions, metered usage and webhook health over a \
         time range, as JSON and as the `/dashboard` page.",
    ),
    ("operations", "Health, readiness, metrics, this document."),
];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Every `$ref` points at a defined component.
    fn check_refs(v: &Value, doc: &Value) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    let pointer = r.strip_prefix('#').expect("local ref");
                    assert!(doc.pointer(pointer).is_some(), "dangling {r}");
                }
                map.values().for_each(|v| check_refs(v, doc));
            }
            Value::Array(items) => items.iter().for_each(|v| check_refs(v, doc)),
            _ => {}
        }
    }

    /// The error body a `$ref`'d or inline response carries.
    fn error_schema<'a>(doc: &'a Value, response: &'a Value) -> &'a Value {
        let response = match response["$ref"].as_str() {
            Some(r) => doc.pointer(r.strip_prefix('#').unwrap()).unwrap(),
            None => response,
        };
        &response["content"]["application/json"]["schema"]["$ref"]
    }

    #[test]
    fn document_lists_every_path_with_resolvable_refs() {
        let doc = document("http://127.0.0.1:8402/");
        let text = serde_json::to_string(&doc).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["servers"][0]["url"], "http://127.0.0.1:8402");
        let paths = doc["paths"].as_object().unwrap();
        assert_eq!(paths.len(), super::paths().len());
        for path in super::paths() {
            let item = paths.get(*path).unwrap_or_else(|| panic!("{path} missing"));
            for (method, op) in item.as_object().unwrap() {
                assert!(["get", "post", "patch", "delete"].contains(&method.as_str()));
                assert!(op["operationId"].is_string(), "{path}");
                assert!(
                    op["responses"].as_object().is_some_and(|r| !r.is_empty()),
                    "{path}"
                );
            }
        }
        check_refs(&doc, &doc);
        // Every operation that takes a path or query parameter documents the 400 its parsing
        // answers (in the error shape, like every 4xx).
        for path in super::paths() {
            for (method, op) in paths[*path].as_object().unwrap() {
                let takes_params = path.contains('{')
                    || op["parameters"]
                        .as_array()
                        .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
                if takes_params {
                    assert!(
                        op["responses"]["400"].is_object(),
                        "{method} {path}: no 400"
                    );
                }
            }
        }
        let error = "#/components/schemas/ApiErrorBody";
        assert_eq!(
            error_schema(&doc, &doc["paths"]["/analytics"]["get"]["responses"]["400"]),
            error
        );
        let status = &doc["paths"]["/settlements/{key}"]["get"]["responses"];
        assert_eq!(error_schema(&doc, &status["404"]), error);
        assert!(status.get("500").is_none());
        for status in ["400", "402", "409", "413", "415", "422", "503"] {
            assert_eq!(
                error_schema(
                    &doc,
                    &doc["paths"]["/authorize"]["post"]["responses"][status]
                ),
                error,
                "/authorize {status}"
            );
        }
        // The wire types' serde shape: camelCase, optional fields not required, unknown
        // fields refused where the server refuses them.
        let request = &doc["components"]["schemas"]["AuthorizeRequest"];
        assert_eq!(request["additionalProperties"], false);
        assert!(request["properties"]["signedPayment"].is_object());
        let required = request["required"].as_array().unwrap();
        assert!(required.contains(&json!("signedPayment")));
        assert!(!required.contains(&json!("claim")));
        assert_eq!(
            doc["components"]["schemas"]["Amount"]["pattern"],
            "^[0-9]{1,78}$"
        );
        // Unsigned integers carry their type's bounds (utoipa's `non_strict_integers`).
        let interval = &doc["components"]["schemas"]["Plan"]["properties"]["interval"];
        assert_eq!(interval["format"], "uint64");
        assert_eq!(interval["maximum"], u64::MAX);
        let settle = &doc["paths"]["/settle"]["post"];
        assert!(
            settle["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["in"] == "header" && p["name"] == "idempotency-key")
        );
    }

    /// The webhook events' schemas: `WebhookEvent` (through `GET /events`), its `type` listing
    /// every [`EventType`], and its `data` one schema per event, each a component.
    #[test]
    fn document_has_every_webhook_event_schema() {
        use tollgate_protocol::webhook::EventType;
        let doc = document("http://localhost");
        let schemas = &doc["components"]["schemas"];
        let event = &schemas["WebhookEvent"];
        assert!(event.is_object(), "{:#}", schemas["EventRecord"]);
        let names: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(schemas["EventType"]["enum"], json!(names));
        let refs: Vec<&str> = event["properties"]["data"]["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["$ref"].as_str().unwrap())
            .collect();
        // `payment.settled` and `payment.failed` share `PaymentEvent`.
        assert_eq!(refs.len(), EventType::ALL.len() - 1, "{refs:?}");
        for r in refs {
            let schema = doc.pointer(r.strip_prefix('#').unwrap()).expect(r);
            assert!(
                schema["properties"].is_object() || schema["allOf"].is_array(),
                "{r}: {schema:#}"
            );
        }
        let created = &schemas["SubscriptionCreated"];
        assert!(created.to_string().contains("maxOverage"), "{created:#}");
        check_refs(&doc, &doc);
    }
}
