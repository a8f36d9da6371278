//! The facilitator's OpenAPI 3.1 description, served at `GET /openapi.json`.
//!
//! Conventions that hold across the API: amounts (and EIP-3009 `validAfter`/`validBefore`) are
//! decimal strings of integers in the token's smallest unit; addresses are 0x-hex (checksummed on
//! output, any case on input); hashes, nonces and memos are 0x-hex 32-byte values; every error is
//! `{"error": {"code", "message"}}` (the x402 V1 endpoints keep x402's own `isValid`/`success`
//! bodies for payment failures and use the error body only for malformed requests), query strings
//! and path parameters that do not parse (400), unknown routes (404) and methods (405) included.

use serde_json::{Value, json};

/// Every path the document describes, in the router's order (also the route templates the
/// metrics are labelled with).
pub const PATHS: &[&str] = &[
    "/authorize",
    "/settlements/{key}",
    "/subscriptions",
    "/subscriptions/quote",
    "/subscriptions/{id}",
    "/subscriptions/{id}/usage",
    "/subscriptions/{id}/allowance",
    "/webhooks/endpoints",
    "/webhooks/endpoints/{id}",
    "/webhooks/endpoints/{id}/rotate",
    "/webhooks/endpoints/{id}/deliveries",
    "/webhooks/endpoints/{id}/deliveries/{event_id}/redeliver",
    "/events",
    "/analytics",
    "/dashboard",
    "/dashboard/login",
    "/dashboard/logout",
    "/providers/challenge",
    "/providers/register",
    "/providers/keys/revoke",
    "/plans",
    "/plans/{id}",
    "/plans/{id}/deprecate",
    "/proofs/verify",
    "/verify",
    "/settle",
    "/supported",
    "/.well-known/tollgate",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
];

/// The OpenAPI 3.1 document, with `public_url` as its server.
pub fn document(public_url: &str) -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Tollgate facilitator",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Settles client-signed stablecoin transfers on EVM chains and issues signed payment proofs; also an x402 V1 facilitator.",
            "description": "One-time payments: the client signs an EIP-3009 `receiveWithAuthorization` to the network's PaymentRouter whose nonce commits to `payTo`, `memo` and the fee (`keccak256(abi.encode(payTo, memo, fee))`), and posts it to `/authorize`; the facilitator settles it and answers with a proof for the `X-PAYMENT` header. x402 V1 resource servers can use `/verify`, `/settle` and `/supported` unchanged. Amounts are decimal strings in the token's smallest unit; addresses 0x-hex; hashes 0x-hex 32 bytes. Errors are `{\"error\": {\"code\", \"message\"}}`, also for a query string or path parameter that does not parse (400 `InvalidQuery`, `InvalidPath`), an unknown path (404) and a method a path does not take (405 `MethodNotAllowed`, with `Allow`).",
            "license": { "name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0" }
        },
        "servers": [{ "url": public_url.trim_end_matches('/') }],
        "tags": [
            { "name": "tollgate", "description": "Tollgate's own API: settlement with proofs, proof verification, discovery." },
            { "name": "providers", "description": "Provider self-registration (a signed challenge, no human step), API keys, and plans published through the facilitator." },
            { "name": "x402", "description": "The x402 V1 facilitator API." },
            { "name": "webhooks", "description": "Webhook endpoints (Standard Webhooks 1.0 signatures), their deliveries, and the event log." },
            { "name": "analytics", "description": "A provider's settled volume, subscriptions, metered usage and webhook health over a time range, as JSON and as the `/dashboard` page." },
            { "name": "operations", "description": "Health, readiness, metrics, this document." }
        ],
        "paths": paths(),
        "components": {
            "schemas": schemas(),
            "responses": responses(),
            "securitySchemes": { "apiKey": { "type": "http", "scheme": "bearer", "description": "A provider API key from `/providers/register`." } }
        }
    })
}

fn schema(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn response(name: &str) -> Value {
    json!({ "$ref": format!("#/components/responses/{name}") })
}

fn json_content(schema_name: &str, description: &str) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema(schema_name) } } })
}

fn request_body(schema_name: &str) -> Value {
    json!({ "required": true, "content": { "application/json": { "schema": schema(schema_name) } } })
}

fn paths() -> Value {
    let mut p = json!({
        "/authorize": { "post": authorize() },
        "/settlements/{key}": { "get": settlement_status() },
        "/providers/challenge": { "post": providers_challenge() },
        "/providers/register": { "post": providers_register() },
        "/providers/keys/revoke": { "post": providers_revoke() },
        "/subscriptions": { "post": subscriptions_create() },
        "/subscriptions/quote": { "get": subscriptions_quote() },
        "/subscriptions/{id}": { "get": subscriptions_show() },
        "/subscriptions/{id}/usage": { "get": usage_show(), "post": usage_deduct() },
        "/subscriptions/{id}/allowance": { "post": allowance_raise() },
        "/webhooks/endpoints": {
            "get": webhook_op("listWebhookEndpoints", "The provider's webhook endpoints (secrets are not shown).", None, "200"),
            "post": webhook_op("createWebhookEndpoint", "Add an endpoint: `{url, events?: [types] | \"*\", description?}`; answers 201 with its `secret` (`whsec_…`), shown this once. Loopback and private targets are refused outside dev mode.", Some(true), "201")
        },
        "/webhooks/endpoints/{id}": {
            "get": webhook_op("showWebhookEndpoint", "One endpoint.", None, "200"),
            "patch": webhook_op("updateWebhookEndpoint", "Change `url`, `events`, `description` or `enabled` (re-enabling a disabled endpoint).", Some(true), "200"),
            "delete": webhook_op("deleteWebhookEndpoint", "Delete the endpoint and its pending deliveries.", None, "204")
        },
        "/webhooks/endpoints/{id}/rotate": {
            "post": webhook_op("rotateWebhookSecret", "A new secret (shown once); the previous one keeps signing deliveries, beside it, for `overlapSecs` (default 86400, at most 7 days).", Some(false), "200")
        },
        "/webhooks/endpoints/{id}/deliveries": {
            "get": webhook_op("listWebhookDeliveries", "The endpoint's latest deliveries: event, state (pending, delivered, dead), attempts, next attempt, last status and error.", None, "200")
        },
        "/webhooks/endpoints/{id}/deliveries/{event_id}/redeliver": {
            "post": webhook_op("redeliverWebhook", "Put a delivery (dead or delivered) back to pending, due now.", None, "202")
        },
        "/events": {
            "get": webhook_op("listEvents", "The provider's events `{seq, id, type, createdAt, data}`, oldest first, after `after` (a `seq`), at most `limit` (default 100).", None, "200")
        },
        "/plans": { "post": plans_create() },
        "/plans/{id}": { "get": plans_show() },
        "/plans/{id}/deprecate": { "post": plans_deprecate() },
        "/proofs/verify": { "post": proofs_verify() },
        "/verify": { "post": x402_verify() },
        "/settle": { "post": x402_settle() },
        "/supported": { "get": {
            "tags": ["x402"],
            "operationId": "supported",
            "summary": "The (x402Version, scheme, network) kinds this facilitator settles.",
            "responses": { "200": json_content("SupportedResponse", "The supported kinds.") }
        } },
        "/.well-known/tollgate": { "get": {
            "tags": ["tollgate"],
            "operationId": "discovery",
            "summary": "Discovery: per network the chain id, token, router, subscriptions contract, fee and confirmation depth; the proof-signer addresses gates verify proofs against offline.",
            "responses": { "200": json_content("Discovery", "The facilitator's public parameters.") }
        } },
        "/healthz": { "get": {
            "tags": ["operations"],
            "operationId": "health",
            "summary": "Liveness: the process answers.",
            "responses": { "200": json_content("Health", "Alive.") }
        } },
        "/readyz": { "get": {
            "tags": ["operations"],
            "operationId": "ready",
            "summary": "Readiness: every chain answers and the store takes a write.",
            "responses": {
                "200": json_content("Readiness", "Ready."),
                "503": json_content("Readiness", "Not ready; `checks` says what failed.")
            }
        } },
        "/metrics": { "get": {
            "tags": ["operations"],
            "operationId": "metrics",
            "summary": "Prometheus metrics (text exposition format 0.0.4).",
            "responses": { "200": {
                "description": "The metrics.",
                "content": { "text/plain; version=0.0.4; charset=utf-8": { "schema": { "type": "string" } } }
            } }
        } },
        "/openapi.json": { "get": {
            "tags": ["operations"],
            "operationId": "openapi",
            "summary": "This document.",
            "responses": { "200": {
                "description": "The OpenAPI 3.1 document.",
                "content": { "application/json": { "schema": { "type": "object" } } }
            } }
        } }
    });
    // Added apart: one `json!` this large exceeds the macro recursion limit.
    p["/analytics"] = json!({ "get": analytics_op() });
    p["/dashboard"] = json!({ "get": dashboard_op("dashboard", "The analytics dashboard (HTML, inline SVG charts, no script). Bearer API key or the login session cookie; without either, 303 to `/dashboard/login`. Takes `/analytics`'s `range`, `bucket`, `from`, `to`.", true) });
    p["/dashboard/login"] = json!({
        "get": dashboard_op("dashboardLoginForm", "The login form (HTML).", false),
        "post": dashboard_login()
    });
    p["/dashboard/logout"] = json!({ "post": dashboard_logout() });
    p
}

fn authorize() -> Value {
    json!({
        "tags": ["tollgate"],
        "operationId": "authorize",
        "summary": "Settle a signed payment and get its proof.",
        "description": "Verifies the signed payment (network served, token, the authorization paying the router, the nonce committing to payTo, memo and fee, the validity window, the signature, the payer's balance), submits it, and waits up to the configured confirmation timeout. Idempotent: the same signed payment again, also concurrently, yields the same proof and a single transfer.",
        "requestBody": request_body("AuthorizeRequest"),
        "responses": {
            "200": json_content("AuthorizeResponse", "Confirmed: the proof, base64 for `X-PAYMENT`, and its fields."),
            "202": {
                "description": "Broadcast but not yet confirmed: poll `statusUrl` (also in `Location`).",
                "headers": { "Location": { "description": "The status URL.", "schema": { "type": "string", "format": "uri" } } },
                "content": { "application/json": { "schema": schema("PendingResponse") } }
            },
            "400": response("BadRequest"),
            "402": response("InsufficientFunds"),
            "403": response("Forbidden"),
            "409": response("AuthorizationUsed"),
            "413": response("PayloadTooLarge"),
            "415": response("UnsupportedMediaType"),
            "422": response("Unprocessable"),
            "500": response("Internal"),
            "503": response("Unavailable")
        }
    })
}

fn settlement_status() -> Value {
    json!({
        "tags": ["tollgate"],
        "operationId": "settlementStatus",
        "summary": "The status URL of a pending settlement.",
        "description": "Only `/authorize` settlements have a status URL: any other key (an x402 `/settle` settlement among them) is answered 404 as an unknown key is.",
        "parameters": [{
            "name": "key",
            "in": "path",
            "required": true,
            "description": "The settlement key from `statusUrl`.",
            "schema": schema("Hash32")
        }, {
            "name": "token",
            "in": "query",
            "required": false,
            "description": "`keccak256(claim)`, as `statusUrl` carries it: required for a settlement made with a claim.",
            "schema": schema("Hash32")
        }],
        "responses": {
            "200": json_content("AuthorizeResponse", "Confirmed: the proof."),
            "202": json_content("PendingResponse", "Still pending."),
            "400": response("BadRequest"),
            "403": response("Forbidden"),
            "404": error_response("404: no `/authorize` settlement with this key.", &["NotFound"]),
            "422": response("Unprocessable"),
            "503": response("Unavailable")
        }
    })
}

fn proofs_verify() -> Value {
    json!({
        "tags": ["tollgate"],
        "operationId": "verifyProof",
        "summary": "Check a payment proof online.",
        "description": "Checks the proof's signature against this facilitator's proof signer, its expiry, and that a confirmed settlement matches it. Gates may instead verify offline against `proofSigners` from `/.well-known/tollgate`. An invalid proof is a 200 with `valid: false`.",
        "requestBody": request_body("ProofVerifyRequest"),
        "responses": {
            "200": json_content("ProofVerifyResponse", "The verdict."),
            "400": response("BadRequest"),
            "413": response("PayloadTooLarge"),
            "415": response("UnsupportedMediaType"),
            "503": response("Unavailable")
        }
    })
}

fn x402_verify() -> Value {
    json!({
        "tags": ["x402"],
        "operationId": "x402Verify",
        "summary": "x402 V1: check a payment against its requirements without settling it.",
        "requestBody": request_body("X402Request"),
        "responses": {
            "200": json_content("X402VerifyResponse", "The verdict; a failed check is `isValid: false` with `invalidReason`."),
            "400": response("BadRequest"),
            "413": response("PayloadTooLarge"),
            "415": response("UnsupportedMediaType"),
            "503": response("Unavailable")
        }
    })
}

fn x402_settle() -> Value {
    json!({
        "tags": ["x402"],
        "operationId": "x402Settle",
        "summary": "x402 V1: settle a payment (`transferWithAuthorization` to `payTo`).",
        "description": "Idempotent per (chain, token, payer, nonce): the same payment again answers with the same transaction.",
        "requestBody": request_body("X402Request"),
        "responses": {
            "200": json_content("X402SettleResponse", "The result; a failure is `success: false` with `errorReason`."),
            "400": response("BadRequest"),
            "413": response("PayloadTooLarge"),
            "415": response("UnsupportedMediaType"),
            "503": response("Unavailable")
        }
    })
}

fn bearer() -> Value {
    json!([{ "apiKey": [] }])
}

fn plan_id_param() -> Value {
    json!({ "name": "id", "in": "path", "required": true, "description": "The plan id.", "schema": schema("Hash32") })
}

fn network_param() -> Value {
    json!({ "name": "network", "in": "query", "required": false, "description": "The network; optional when the facilitator serves one.", "schema": schema("NetworkName") })
}

fn providers_challenge() -> Value {
    json!({
        "tags": ["providers"],
        "operationId": "providerChallenge",
        "summary": "Get a registration challenge to sign with the provider's wallet.",
        "description": "An EIP-191 `personal_sign` text naming this facilitator, the address, a random nonce and the expiry (5 minutes). Sign it and post it to `/providers/register`.",
        "requestBody": request_body("ChallengeRequest"),
        "responses": {
            "200": json_content("ChallengeResponse", "The challenge."),
            "400": response("BadRequest"),
            "422": response("Unprocessable"),
            "503": response("Unavailable")
        }
    })
}

fn providers_register() -> Value {
    json!({
        "tags": ["providers"],
        "operationId": "providerRegister",
        "summary": "Register with a signed challenge and get an API key (returned once).",
        "description": "The signature must recover `address`; the challenge must be one this facilitator issued to that address, unexpired and unused (it is consumed). The key (`tg_` + 64 hex digits) is shown once; only its hash is stored.",
        "requestBody": request_body("RegisterRequest"),
        "responses": {
            "201": json_content("RegisterResponse", "Registered: the API key."),
            "400": response("BadRequest"),
            "401": response("Unauthorized"),
            "503": response("Unavailable")
        }
    })
}

fn providers_revoke() -> Value {
    json!({
        "tags": ["providers"],
        "operationId": "providerRevokeKey",
        "summary": "Revoke the presented API key.",
        "security": bearer(),
        "responses": {
            "200": json_content("RevokeResponse", "Revoked."),
            "401": response("Unauthorized"),
            "503": response("Unavailable")
        }
    })
}

fn plans_create() -> Value {
    json!({
        "tags": ["providers"],
        "operationId": "createPlan",
        "summary": "Publish a plan on-chain (the facilitator's relayer sends `createPlan`).",
        "description": "The plan id is `planIdFor(relayer, keccak256(abi.encode(provider, idempotencyKey)))`: the same idempotency key again returns the same plan (200) instead of creating another. Waits for confirmation.",
        "security": bearer(),
        "requestBody": request_body("CreatePlanRequest"),
        "responses": {
            "200": json_content("Plan", "The plan this idempotency key already created."),
            "201": json_content("Plan", "Created."),
            "400": response("BadRequest"),
            "401": response("Unauthorized"),
            "422": response("Unprocessable"),
            "503": response("Unavailable")
        }
    })
}

fn subscription_view() -> Value {
    json!({
        "type": "object",
        "required": ["id", "status", "planId", "subscriber", "cycle", "paidThrough", "allowance"],
        "properties": {
            "id": { "type": "string", "description": "0x 32-byte subscription id." },
            "status": { "type": "string", "enum": ["ACTIVE", "PAUSED", "CANCELLED"] },
            "planId": { "type": "string" },
            "subscriber": { "type": "string" },
            "cycle": { "type": "integer" },
            "paidThrough": { "type": "integer", "description": "Unix seconds." },
            "allowance": {
                "type": "object",
                "properties": { "cap": { "type": "string" }, "remaining": { "type": "string" } }
            },
            "txHash": { "type": "string" }
        }
    })
}

fn subscriptions_create() -> Value {
    json!({
        "tags": ["subscriptions"],
        "operationId": "subscribe",
        "summary": "Relay a gasless subscription (subscribeWithSig): the first cycle is billed in the same transaction; answers after confirmation.",
        "description": "Body: `{network, planId, subscriber, maxOverage, deadline, signature, permit: {value, deadline, signature}}` — the subscriber's EIP-712 `Subscribe` intent and its EIP-2612 permit (the standing authorization). Idempotent: the same signed request returns the subscription it created.",
        "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object" } } } },
        "responses": {
            "200": { "description": "The subscription.", "content": { "application/json": { "schema": subscription_view() } } },
            "400": response("BadRequest"),
            "402": response("InsufficientFunds"),
            "422": response("Unprocessable"),
            "503": response("Unavailable")
        }
    })
}

fn subscriptions_quote() -> Value {
    json!({
        "tags": ["subscriptions"],
        "operationId": "subscriptionQuote",
        "summary": "What a subscriber signs: the plan's terms, its subscription and permit nonces, its allowance and the chain's clock.",
        "parameters": [
            { "name": "network", "in": "query", "required": false, "schema": { "type": "string" } },
            { "name": "planId", "in": "query", "required": true, "schema": { "type": "string" } },
            { "name": "subscriber", "in": "query", "required": true, "schema": { "type": "string" } }
        ],
        "responses": {
            "200": { "description": "The quote.", "content": { "application/json": { "schema": { "type": "object" } } } },
            "400": response("BadRequest"),
            "422": response("Unprocessable"),
            "503": response("Unavailable")
        }
    })
}

fn subscriptions_show() -> Value {
    json!({
        "tags": ["subscriptions"],
        "operationId": "showSubscription",
        "summary": "A subscription's state from the chain.",
        "parameters": [
            { "name": "id", "in": "path", "required": true, "schema": { "type": "string" } },
            { "name": "network", "in": "query", "required": false, "schema": { "type": "string" } }
        ],
        "responses": {
            "200": { "description": "The subscription.", "content": { "application/json": { "schema": subscription_view() } } },
            "400": response("BadRequest"),
            "404": response("NotFound"),
            "503": response("Unavailable")
        }
    })
}

fn allowance_usage() -> Value {
    json!({
        "type": "object",
        "required": ["subscriptionId", "cycle", "cap", "used", "remaining", "charged", "unsettled", "unpaid"],
        "properties": {
            "subscriptionId": { "type": "string" },
            "cycle": { "type": "integer", "description": "The billing cycle the usage counts against." },
            "cap": schema("Amount"),
            "used": schema("Amount"),
            "remaining": schema("Amount"),
            "charged": { "$ref": "#/components/schemas/Amount", "description": "Confirmed on-chain (chargeOverage)." },
            "unsettled": { "$ref": "#/components/schemas/Amount", "description": "Deducted, not yet charged on-chain." },
            "unpaid": { "$ref": "#/components/schemas/Amount", "description": "Charges that failed on-chain." }
        }
    })
}

fn usage_deduct() -> Value {
    json!({
        "tags": ["subscriptions"],
        "operationId": "deductAllowance",
        "summary": "The spec's deductAllowance: deduct metered usage from the subscription's overage allowance (plan owner only).",
        "description": "Body: `{amount, network?, idempotencyKey?}`. Exact under concurrency: a deduction that would cross the cycle's cap is refused with 402 `AllowanceExhausted` and nothing is deducted. Usage is charged on-chain in batches and at the end of each cycle.",
        "security": bearer(),
        "parameters": [
            { "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }
        ],
        "requestBody": { "required": true, "content": { "application/json": { "schema": {
            "type": "object", "required": ["amount"], "additionalProperties": false,
            "properties": {
                "amount": schema("Amount"),
                "network": { "type": "string" },
                "idempotencyKey": { "type": "string", "minLength": 1, "maxLength": 200 }
            }
        } } } },
        "responses": {
            "200": { "description": "The allowance after the deduction.", "content": { "application/json": { "schema": allowance_usage() } } },
            "400": response("BadRequest"),
            "401": response("Unauthorized"),
            "402": response("AllowanceExhausted"),
            "403": response("Forbidden"),
            "404": response("NotFound"),
            "409": response("SubscriptionNotActive"),
            "422": response("Unprocessable"),
            "503": response("Unavailable")
        }
    })
}

fn usage_show() -> Value {
    json!({
        "tags": ["subscriptions"],
        "operationId": "showAllowanceUsage",
        "summary": "The usage ledger of the subscription's current cycle (plan owner only).",
        "security": bearer(),
        "parameters": [
            { "name": "id", "in": "path", "required": true, "schema": { "type": "string" } },
            { "name": "network", "in": "query", "required": false, "schema": { "type": "string" } }
        ],
        "responses": {
            "200": { "description": "The ledger.", "content": { "application/json": { "schema": allowance_usage() } } },
            "400": response("BadRequest"),
            "401": response("Unauthorized"),
            "403": response("Forbidden"),
            "404": response("NotFound"),
            "503": response("Unavailable")
        }
    })
}

fn allowance_raise() -> Value {
    json!({
        "tags": ["subscriptions"],
        "operationId": "raiseAllowance",
        "summary": "Relay the subscriber's signed raiseAllowanceWithSig (EIP-712 `Action`, action 4, value = the new cap); answers after confirmation.",
        "description": "Body: `{network, maxOverage, deadline, signature}`. Idempotent: a cap already at `maxOverage` is answered without a transaction.",
        "parameters": [
            { "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }
        ],
        "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object" } } } },
        "responses": {
            "200": { "description": "The subscription with its new cap.", "content": { "application/json": { "schema": subscription_view() } } },
            "400": response("BadRequest"),
            "404": response("NotFound"),
            "422": response("Unprocessable"),
            "503": response("Unavailable")
        }
    })
}

/// A webhook operation (provider API key); `body`: whether it takes a JSON body (required?).
fn webhook_op(id: &str, summary: &str, body: Option<bool>, ok: &str) -> Value {
    let mut op = json!({
        "tags": ["webhooks"],
        "operationId": id,
        "summary": summary,
        "security": bearer(),
        "responses": {
            ok: { "description": "Done." },
            "400": response("BadRequest"),
            "401": response("Unauthorized"),
            "404": response("NotFound"),
            "503": response("Unavailable")
        }
    });
    if let Some(required) = body {
        op["requestBody"] = json!({ "required": required, "content": { "application/json": { "schema": { "type": "object" } } } });
    }
    op
}

fn analytics_op() -> Value {
    let q = |name: &str, description: &str| json!({ "name": name, "in": "query", "required": false, "schema": { "type": "string" }, "description": description });
    json!({
        "tags": ["analytics"],
        "operationId": "analytics",
        "summary": "The provider's report over `[from, to)`: settled volume (total, per bucket, top resources, networks and payers), subscriptions (by state, lifecycle counts, recurring revenue per 30 days, per plan), metered usage, webhook delivery health and the latest payments. Volume comes from hourly rollups (payers: daily). Amounts are decimal strings in the token's smallest unit.",
        "security": bearer(),
        "parameters": [
            q("from", "Start, unix seconds, before `to` (default: `to` minus `range`)."),
            q("to", "End, unix seconds, exclusive, at most 253402300800 (10000-01-01) (default: now)."),
            q("range", "`24h`, `7d`, `30d` (default) or `90d`, when `from` is absent."),
            q("bucket", "`hour`, `day` or `week` (Monday 00:00 UTC); default `hour` up to 2 days, else `day`; at most 2000 buckets."),
            q("top", "Entries per top list, 1–100 (default 10)."),
            q("recent", "Latest payments listed, 0–100 (default 20).")
        ],
        "responses": {
            "200": { "description": "The report.", "content": { "application/json": { "schema": { "type": "object", "required": ["provider", "from", "to", "bucket", "volume", "subscriptions", "metered", "webhooks", "recentPayments"] } } } },
            "400": response("InvalidQuery"),
            "401": response("Unauthorized"),
            "503": response("Unavailable")
        }
    })
}

fn dashboard_login() -> Value {
    json!({
        "tags": ["analytics"],
        "operationId": "dashboardLogin",
        "summary": "Logs in with an API key (form field `apiKey`): sets the `tollgate_session` cookie (Secure, HttpOnly, SameSite=Strict, 12 h) and answers 303 to `/dashboard`; 401 with the form again for an unknown or revoked key.",
        "requestBody": { "required": true, "content": { "application/x-www-form-urlencoded": { "schema": { "type": "object", "required": ["apiKey"], "properties": { "apiKey": { "type": "string" } } } } } },
        "responses": { "303": { "description": "Logged in." }, "401": { "description": "Unknown or revoked key: the form again (HTML)." } }
    })
}

fn dashboard_logout() -> Value {
    json!({
        "tags": ["analytics"],
        "operationId": "dashboardLogout",
        "summary": "Ends the session and clears its cookie; 303 to `/dashboard/login`.",
        "responses": { "303": { "description": "Logged out." } }
    })
}

fn dashboard_op(id: &str, summary: &str, secured: bool) -> Value {
    let mut op = json!({
        "tags": ["analytics"],
        "operationId": id,
        "summary": summary,
        "responses": { "200": { "description": "HTML.", "content": { "text/html": { "schema": { "type": "string" } } } } }
    });
    if secured {
        op["responses"]["303"] = json!({ "description": "Not logged in: to `/dashboard/login`." });
        op["responses"]["400"] = response("InvalidQuery");
        op["responses"]["401"] = response("Unauthorized");
    }
    op
}

fn plans_show() -> Value {
    json!({
        "tags": ["providers"],
        "operationId": "showPlan",
        "summary": "A plan's on-chain terms and its provider.",
        "parameters": [plan_id_param(), network_param()],
        "responses": {
            "200": json_content("Plan", "The plan."),
            "400": response("BadRequest"),
            "404": response("NotFound"),
            "422": response("Unprocessable"),
            "503": response("Unavailable")
        }
    })
}

fn plans_deprecate() -> Value {
    json!({
        "tags": ["providers"],
        "operationId": "deprecatePlan",
        "summary": "Deprecate a plan (owner only; idempotent).",
        "description": "A deprecated plan takes no new subscriptions (`PlanDeprecated`); existing subscriptions keep running until cancelled.",
        "security": bearer(),
        "parameters": [plan_id_param(), network_param()],
        "responses": {
            "200": json_content("Plan", "The plan, deprecated."),
            "400": response("BadRequest"),
            "401": response("Unauthorized"),
            "403": response("Forbidden"),
            "404": response("NotFound"),
            "503": response("Unavailable")
        }
    })
}

fn provider_schemas() -> Value {
    json!({
        "ChallengeRequest": {
            "type": "object", "required": ["address"], "additionalProperties": false,
            "properties": { "address": schema("Address") }
        },
        "ChallengeResponse": {
            "type": "object", "required": ["challenge", "expiresAt"],
            "properties": {
                "challenge": { "type": "string", "description": "The text to sign with `personal_sign`." },
                "expiresAt": schema("UnixSeconds")
            }
        },
        "RegisterRequest": {
            "type": "object", "required": ["address", "challenge", "signature"], "additionalProperties": false,
            "properties": {
                "address": schema("Address"),
                "challenge": { "type": "string", "description": "The challenge text, exactly as received." },
                "signature": { "$ref": "#/components/schemas/HexBytes", "description": "The 65-byte `personal_sign` signature." }
            }
        },
        "RegisterResponse": {
            "type": "object", "required": ["apiKey", "provider"],
            "properties": {
                "apiKey": { "type": "string", "pattern": "^tg_[0-9a-f]{64}$", "description": "Shown once; send as `Authorization: Bearer <apiKey>`." },
                "provider": schema("Address")
            }
        },
        "RevokeResponse": {
            "type": "object", "required": ["revoked", "provider"],
            "properties": { "revoked": { "type": "boolean" }, "provider": schema("Address") }
        },
        "CreatePlanRequest": {
            "type": "object", "required": ["network", "amount", "idempotencyKey"], "additionalProperties": false,
            "properties": {
                "network": schema("NetworkName"),
                "amount": { "$ref": "#/components/schemas/Amount", "description": "Per cycle." },
                "interval": { "type": "integer", "minimum": 1, "default": 2_592_000u64, "description": "Cycle length, seconds (default 30 days)." },
                "payTo": { "$ref": "#/components/schemas/Address", "description": "Default: the provider's address." },
                "idempotencyKey": { "type": "string", "minLength": 1, "maxLength": 200 }
            }
        },
        "Plan": {
            "type": "object",
            "required": ["planId", "network", "token", "payTo", "amount", "interval", "deprecated", "provider"],
            "properties": {
                "planId": schema("Hash32"),
                "network": schema("NetworkName"),
                "token": schema("Address"),
                "payTo": schema("Address"),
                "amount": schema("Amount"),
                "interval": { "type": "integer", "description": "Cycle length, seconds." },
                "deprecated": { "type": "boolean" },
                "provider": { "$ref": "#/components/schemas/Address", "description": "The provider that created it through this facilitator." }
            }
        }
    })
}

fn error_response(description: &str, codes: &[&str]) -> Value {
    json!({
        "description": description,
        "content": { "application/json": {
            "schema": schema("Error"),
            "examples": codes.iter().map(|code| ((*code).to_owned(), json!({
                "value": { "error": { "code": code, "message": "…" } }
            }))).collect::<serde_json::Map<_, _>>()
        } }
    })
}

fn responses() -> Value {
    json!({
        "BadRequest": error_response("400: malformed JSON, a missing or mistyped field, a query string or path parameter that does not parse (the message names it).", &["MalformedJson", "InvalidField", "InvalidQuery", "InvalidPath"]),
        "InvalidQuery": error_response("400: a query parameter that does not parse, is out of range or contradicts another (`from` not before `to`); the message names it.", &["InvalidQuery"]),
        "MethodNotAllowed": error_response("405: the path does not take this method; `Allow` lists those it takes.", &["MethodNotAllowed"]),
        "InsufficientFunds": error_response("402: the payer's token balance is below the amount.", &["InsufficientFunds"]),
        "NotFound": error_response("404: no such settlement, resource or route.", &["NotFound"]),
        "AuthorizationUsed": error_response("409: the authorization's nonce was already used, with no settlement of this payment to return.", &["AuthorizationUsed"]),
        "PayloadTooLarge": error_response("413: the body exceeds the configured limit.", &["PayloadTooLarge"]),
        "UnsupportedMediaType": error_response("415: the body is not `application/json`.", &["UnsupportedMediaType"]),
        "Unprocessable": error_response(
            "422: well-formed but invalid: unknown network or token, bad signature, a nonce that does not commit to payTo/memo/fee, a validity window that is not open or too long, a revert.",
            &["UnknownNetwork", "InvalidSignature", "InvalidNonce", "InvalidValidity"],
        ),
        "Unauthorized": error_response("401: a missing, unknown or revoked API key (`Authorization: Bearer <key>`), or a registration whose signature or challenge does not check out.", &["Unauthorized"]),
        "Forbidden": error_response("403: the API key's provider does not own this plan.", &["Forbidden"]),
        "AllowanceExhausted": error_response("402: the deduction would cross the cycle's overage cap; nothing was deducted.", &["AllowanceExhausted"]),
        "SubscriptionNotActive": error_response("409: the subscription is paused, cancelled, overdue or between cycles; or the idempotency key was used for another amount.", &["SubscriptionNotActive", "IdempotencyConflict"]),
        "Internal": error_response("500: a bug; the cause is logged, never sent.", &["Internal"]),
        "Unavailable": error_response("503: the chain or the store is unavailable; retry later.", &["Unavailable"])
    })
}

fn schemas() -> Value {
    let mut schemas = serde_json::Map::new();
    for part in [
        scalar_schemas(),
        tollgate_schemas(),
        provider_schemas(),
        x402_schemas(),
        operation_schemas(),
    ] {
        if let Value::Object(part) = part {
            schemas.extend(part);
        }
    }
    Value::Object(schemas)
}

fn scalar_schemas() -> Value {
    json!({
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": { "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": { "type": "string", "description": "Machine-readable: a spec name (`InsufficientFunds`, `InvalidPaymentProof`, …) or a reason." },
                    "message": { "type": "string", "description": "Human-readable; names the offending field where there is one." }
                }
            } }
        },
        "Amount": {
            "type": "string",
            "pattern": "^[0-9]{1,78}$",
            "description": "A non-negative integer (uint256) in the token's smallest unit, as a decimal string.",
            "examples": ["500000"]
        },
        "Address": {
            "type": "string",
            "pattern": "^0x[0-9a-fA-F]{40}$",
            "description": "An EVM address, 0x-hex (EIP-55 checksummed on output; any case accepted)."
        },
        "Hash32": {
            "type": "string",
            "pattern": "^0x[0-9a-fA-F]{64}$",
            "description": "A 32-byte value, 0x-hex: transaction hashes, nonces, memos, settlement keys."
        },
        "HexBytes": {
            "type": "string",
            "pattern": "^0x([0-9a-fA-F]{2})*$",
            "description": "Bytes, 0x-hex (signatures: 65 bytes `r ‖ s ‖ v` for an EOA)."
        },
        "UnixSeconds": { "type": "integer", "minimum": 0, "description": "Unix time, seconds." },
        "NetworkName": {
            "type": "string",
            "description": "An x402 V1 network name (`base`, `base-sepolia`, …) or a configured custom one (`tollgate-devnet`).",
            "examples": ["base-sepolia"]
        }
    })
}

fn tollgate_schemas() -> Value {
    json!({
        "AuthorizeRequest": {
            "type": "object",
            "required": ["signedPayment"],
            "additionalProperties": false,
            "properties": {
                "signedPayment": schema("SignedPayment"),
                "resource": { "type": "string", "maxLength": 4096, "description": "The URL of the resource paid for, as offered in the 402 (x402 `resource`). Optional and unsigned: it labels the settlement in the provider's analytics (query and fragment dropped) and is not part of the idempotency check." },
                "claim": { "$ref": "#/components/schemas/Hash32", "description": "A random 32-byte secret of the client's. The first request binds the settlement to it: a repeat gets the proof only with the same claim (403 `ClaimMismatch` otherwise), and the status URL carries `?token=keccak256(claim)`, so no one who copies the authorization from the chain can collect the proof. Optional, unsigned." }
            }
        },
        "SignedPayment": {
            "type": "object",
            "description": "The payment terms from the 402 and the payer's authorization paying them.",
            "required": ["network", "token", "payTo", "amount", "memo", "authorization"],
            "additionalProperties": false,
            "properties": {
                "network": schema("NetworkName"),
                "token": schema("Address"),
                "payTo": schema("Address"),
                "amount": { "$ref": "#/components/schemas/Amount", "description": "The price; the fee is taken from it." },
                "memo": { "$ref": "#/components/schemas/Hash32", "description": "The request reference from the 402 terms." },
                "authorization": schema("Eip3009Authorization")
            }
        },
        "Eip3009Authorization": {
            "type": "object",
            "description": "An EIP-3009 `ReceiveWithAuthorization` to the network's router, signed by the payer.",
            "required": ["from", "to", "value", "validAfter", "validBefore", "nonce", "signature"],
            "additionalProperties": false,
            "properties": {
                "from": { "$ref": "#/components/schemas/Address", "description": "The payer." },
                "to": { "$ref": "#/components/schemas/Address", "description": "The router (see `/.well-known/tollgate`)." },
                "value": { "$ref": "#/components/schemas/Amount", "description": "Equal to `amount`." },
                "validAfter": { "$ref": "#/components/schemas/Amount", "description": "Unix seconds, decimal string; valid strictly after." },
                "validBefore": { "$ref": "#/components/schemas/Amount", "description": "Unix seconds, decimal string; valid strictly before; at most the configured maximum validity ahead." },
                "nonce": { "$ref": "#/components/schemas/Hash32", "description": "`keccak256(abi.encode(payTo, memo, fee))`." },
                "signature": schema("HexBytes")
            }
        },
        "PaymentProof": {
            "type": "object",
            "description": "The facilitator's EIP-712 attestation that the payment settled.",
            "required": ["version", "network", "chainId", "token", "payer", "payTo", "amount", "fee", "memo", "txHash", "block", "issuedAt", "expiry", "signer", "signature"],
            "additionalProperties": false,
            "properties": {
                "version": { "type": "integer", "const": 1 },
                "network": schema("NetworkName"),
                "chainId": { "type": "integer", "minimum": 1 },
                "token": schema("Address"),
                "payer": schema("Address"),
                "payTo": schema("Address"),
                "amount": { "$ref": "#/components/schemas/Amount", "description": "Gross; the payee received `amount - fee`." },
                "fee": schema("Amount"),
                "memo": schema("Hash32"),
                "txHash": schema("Hash32"),
                "block": { "type": "integer", "minimum": 0 },
                "issuedAt": schema("UnixSeconds"),
                "expiry": schema("UnixSeconds"),
                "signer": { "$ref": "#/components/schemas/Address", "description": "One of `proofSigners`." },
                "signature": { "$ref": "#/components/schemas/HexBytes", "description": "EIP-712 signature over the fields above." }
            }
        },
        "AuthorizeResponse": {
            "type": "object",
            "required": ["status", "proof", "payment"],
            "properties": {
                "status": { "const": "confirmed" },
                "proof": { "type": "string", "contentEncoding": "base64", "description": "The proof JSON, base64: the `X-PAYMENT` value." },
                "payment": schema("PaymentProof")
            }
        },
        "PendingResponse": {
            "type": "object",
            "required": ["status", "txHash", "statusUrl"],
            "properties": {
                "status": { "const": "pending" },
                "txHash": { "oneOf": [schema("Hash32"), { "type": "null" }], "description": "The broadcast transaction, once known." },
                "statusUrl": { "type": "string", "format": "uri", "description": "`GET` it until it answers 200 with the proof." }
            }
        },
        "ProofVerifyRequest": {
            "type": "object",
            "required": ["proof"],
            "additionalProperties": false,
            "properties": { "proof": { "type": "string", "contentEncoding": "base64", "description": "An `X-PAYMENT` proof value." } }
        },
        "ProofVerifyResponse": {
            "type": "object",
            "required": ["valid"],
            "properties": {
                "valid": { "type": "boolean" },
                "reason": { "type": "string", "description": "Why not, when `valid` is false." },
                "payment": { "$ref": "#/components/schemas/PaymentProof", "description": "The decoded proof, when it decodes." }
            }
        },
        "Discovery": {
            "type": "object",
            "required": ["x402Version", "facilitator", "proofSigners", "networks"],
            "properties": {
                "x402Version": { "const": 1 },
                "facilitator": { "type": "string", "format": "uri", "description": "This facilitator's public URL." },
                "proofSigners": { "type": "array", "items": schema("Address"), "description": "Addresses whose proof signatures gates accept." },
                "nonce": { "type": "string", "description": "How the authorization nonce commits to the terms." },
                "networks": {
                    "type": "object",
                    "description": "Keyed by network name.",
                    "additionalProperties": schema("DiscoveryNetwork")
                }
            }
        },
        "DiscoveryNetwork": {
            "type": "object",
            "required": ["chainId", "token", "tokenName", "tokenVersion", "router", "fee", "confirmations"],
            "properties": {
                "chainId": { "type": "integer", "minimum": 1 },
                "token": schema("Address"),
                "tokenName": { "type": "string", "description": "The token's EIP-712 domain name." },
                "tokenVersion": { "type": "string", "description": "The token's EIP-712 domain version." },
                "decimals": { "type": "integer" },
                "router": { "$ref": "#/components/schemas/Address", "description": "The PaymentRouter: the `to` of `/authorize` authorizations." },
                "subscriptions": { "oneOf": [schema("Address"), { "type": "null" }] },
                "fee": { "$ref": "#/components/schemas/Amount", "description": "Per settlement; committed to by the nonce." },
                "confirmations": { "type": "integer", "minimum": 1 },
                "chainTime": { "type": "integer", "minimum": 0, "description": "The chain's clock (unix seconds, the later of the latest block's timestamp and the facilitator's wall clock), read for this answer. Clients sign authorization validity windows by it rather than by their own clock (a devnet may have travelled in time); a client that caches this document keeps the offset to its own clock." }
            }
        }
    })
}

fn x402_schemas() -> Value {
    json!({
        "X402Request": {
            "type": "object",
            "description": "The body x402's `useFacilitator` sends to `/verify` and `/settle`.",
            "required": ["paymentPayload", "paymentRequirements"],
            "properties": {
                "x402Version": { "const": 1 },
                "paymentPayload": schema("X402PaymentPayload"),
                "paymentRequirements": schema("X402PaymentRequirements")
            }
        },
        "X402PaymentPayload": {
            "type": "object",
            "required": ["x402Version", "scheme", "network", "payload"],
            "properties": {
                "x402Version": { "const": 1 },
                "scheme": { "const": "exact" },
                "network": schema("NetworkName"),
                "payload": {
                    "type": "object",
                    "required": ["signature", "authorization"],
                    "properties": {
                        "signature": schema("HexBytes"),
                        "authorization": {
                            "type": "object",
                            "description": "EIP-3009 `TransferWithAuthorization` to `payTo`.",
                            "required": ["from", "to", "value", "validAfter", "validBefore", "nonce"],
                            "properties": {
                                "from": schema("Address"),
                                "to": schema("Address"),
                                "value": schema("Amount"),
                                "validAfter": schema("Amount"),
                                "validBefore": schema("Amount"),
                                "nonce": schema("Hash32")
                            }
                        }
                    }
                }
            }
        },
        "X402PaymentRequirements": {
            "type": "object",
            "required": ["scheme", "network", "maxAmountRequired", "resource", "description", "mimeType", "payTo", "maxTimeoutSeconds", "asset"],
            "properties": {
                "scheme": { "const": "exact" },
                "network": schema("NetworkName"),
                "maxAmountRequired": schema("Amount"),
                "resource": { "type": "string", "format": "uri" },
                "description": { "type": "string" },
                "mimeType": { "type": "string" },
                "payTo": schema("Address"),
                "maxTimeoutSeconds": { "type": "integer", "minimum": 0 },
                "asset": schema("Address"),
                "outputSchema": { "type": "object" },
                "extra": {
                    "type": "object",
                    "description": "The token's EIP-712 domain.",
                    "properties": { "name": { "type": "string" }, "version": { "type": "string" } }
                }
            }
        },
        "X402VerifyResponse": {
            "type": "object",
            "required": ["isValid"],
            "properties": {
                "isValid": { "type": "boolean" },
                "invalidReason": schema("X402Reason"),
                "payer": schema("Address")
            }
        },
        "X402SettleResponse": {
            "type": "object",
            "required": ["success", "transaction", "network"],
            "properties": {
                "success": { "type": "boolean" },
                "errorReason": schema("X402Reason"),
                "transaction": { "type": "string", "description": "The transaction hash (0x-hex), or empty when nothing was submitted." },
                "network": schema("NetworkName"),
                "payer": schema("Address")
            }
        },
        "X402Reason": {
            "type": "string",
            "description": "An x402 V1 reason code (`ErrorReasons` of `x402@1.2.0`).",
            "examples": [
                "insufficient_funds",
                "invalid_exact_evm_payload_signature",
                "invalid_exact_evm_payload_authorization_valid_before",
                "invalid_exact_evm_payload_recipient_mismatch",
                "invalid_network",
                "invalid_transaction_state"
            ]
        },
        "SupportedResponse": {
            "type": "object",
            "required": ["kinds"],
            "properties": { "kinds": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["x402Version", "scheme", "network"],
                    "properties": {
                        "x402Version": { "const": 1 },
                        "scheme": { "const": "exact" },
                        "network": schema("NetworkName"),
                        "extra": { "type": "object" }
                    }
                }
            } }
        }
    })
}

fn operation_schemas() -> Value {
    json!({
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": { "status": { "const": "ok" } }
        },
        "Readiness": {
            "type": "object",
            "required": ["ready", "checks"],
            "properties": {
                "ready": { "type": "boolean" },
                "checks": {
                    "type": "object",
                    "description": "Per dependency (`chain:<network>`, `store`): its state.",
                    "additionalProperties": { "type": "string" }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn document_lists_every_path_with_resolvable_refs() {
        let doc = document("http://127.0.0.1:8402/");
        let text = serde_json::to_string(&doc).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["servers"][0]["url"], "http://127.0.0.1:8402");
        let paths = doc["paths"].as_object().unwrap();
        assert_eq!(paths.len(), PATHS.len());
        for path in PATHS {
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
        for path in PATHS {
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
        assert_eq!(
            doc["paths"]["/analytics"]["get"]["responses"]["400"]["$ref"],
            "#/components/responses/InvalidQuery"
        );
        let status = &doc["paths"]["/settlements/{key}"]["get"]["responses"];
        assert_eq!(
            status["404"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/Error"
        );
        assert!(status.get("500").is_none());
        for (status, code) in [
            ("400", "BadRequest"),
            ("402", "InsufficientFunds"),
            ("409", "AuthorizationUsed"),
            ("413", "PayloadTooLarge"),
            ("422", "Unprocessable"),
            ("503", "Unavailable"),
        ] {
            assert_eq!(
                doc["paths"]["/authorize"]["post"]["responses"][status]["$ref"],
                format!("#/components/responses/{code}")
            );
        }
    }
}
