//! The facilitator's OpenAPI 3.1 description, served at `GET /openapi.json`.
//!
//! Derived, so that it cannot drift from what the server speaks: every request and response
//! schema is `utoipa::ToSchema` derived from the `tollgate-protocol` type the handler
//! (de)serializes (their serde attributes included), every query string from the query type's
//! `utoipa::IntoParams`; this module lists the routes (the router's, [`PATHS`]), their path
//! parameters, headers and statuses. Every error, from the handlers and from the server's limits
//! alike, is `application/json` [`ApiErrorBody`] (`{"error": {"code", "message"}}`); the x402
//! V1 endpoints keep x402's own `isValid`/`success` bodies for payment failures and use the
//! error body only for malformed requests.
//!
//! Conventions that hold across the API: amounts (and EIP-3009 `validAfter`/`validBefore`) are
//! decimal strings of integers in the token's smallest unit; addresses are 0x-hex (checksummed on
//! output, any case on input); hashes, nonces and memos are 0x-hex 32-byte values.

use serde_json::{Value, json};
use tollgate_protocol::{
    ApiErrorBody, AuthorizeRequest, AuthorizeResponse, PendingResponse,
    api::{
        analytics::{Report, ReportParams},
        authorize::{StatusQuery, VerifyProofRequest, VerifyProofResponse},
        discovery::WellKnown,
        health::{Health, Readiness},
        plans::{CreatePlanRequest, NetworkQuery, Plan},
        providers::{
            ChallengeRequest, ChallengeResponse, RegisterRequest, RegisterResponse, RevokeResponse,
        },
        subscriptions::{
            AllowanceUsage, DeductRequest, QuoteQuery, RaiseAllowanceRequest, SubscribeRequest,
            SubscriptionQuote, SubscriptionView,
        },
        webhooks::{CreateEndpoint, Delivery, Endpoint, EventRecord, Page, Rotate, UpdateEndpoint},
        x402::{SettleResponse, SupportedResponse, VerifyRequest, VerifyResponse},
    },
    headers::IDEMPOTENCY_KEY,
    openapi::Hash32,
};
use utoipa::{
    IntoParams, ToSchema,
    openapi::{
        ComponentsBuilder, ContentBuilder, HttpMethod, InfoBuilder, LicenseBuilder, OpenApi,
        OpenApiBuilder, Paths, Ref, RefOr, Required, ResponseBuilder, Server,
        header::HeaderBuilder,
        path::{OperationBuilder, Parameter, ParameterBuilder, ParameterIn},
        request_body::RequestBodyBuilder,
        response::Response,
        schema::{ArrayBuilder, ObjectBuilder, Schema, Type},
        security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme},
        tag::TagBuilder,
    },
};

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

/// The name of the API-key security scheme.
const API_KEY: &str = "apiKey";

/// The error responses, one component each, by status: its component name, what it means and
/// the codes it carries (as examples).
const ERRORS: &[(u16, &str, &str, &[&str])] = &[
    (
        400,
        "BadRequest",
        "Malformed JSON, a missing, unknown or mistyped field, a query string or path parameter \
         that does not parse (the message names it).",
        &[
            "MalformedJson",
            "InvalidField",
            "InvalidQuery",
            "InvalidPath",
        ],
    ),
    (
        401,
        "Unauthorized",
        "A missing, unknown or revoked API key (`Authorization: Bearer <key>`), or a \
         registration whose signature or challenge does not check out.",
        &["Unauthorized"],
    ),
    (
        402,
        "PaymentRefused",
        "The payer's balance is below the amount, or a deduction would cross the cycle's \
         overage cap (nothing was deducted).",
        &["InsufficientFunds", "AllowanceExhausted"],
    ),
    (
        403,
        "Forbidden",
        "The API key's provider does not own this resource, or the settlement belongs to \
         another client (send its claim or the status URL's token).",
        &["Forbidden", "ClaimMismatch"],
    ),
    (
        404,
        "NotFound",
        "No such settlement, plan, subscription, endpoint or delivery.",
        &["NotFound"],
    ),
    (
        408,
        "RequestTimeout",
        "The request was not answered within the server's request timeout.",
        &["RequestTimeout"],
    ),
    (
        409,
        "Conflict",
        "The authorization's nonce was used otherwise, the idempotency key was used with other \
         terms, or the subscription is not active.",
        &[
            "AuthorizationUsed",
            "IdempotencyConflict",
            "SubscriptionNotActive",
        ],
    ),
    (
        413,
        "PayloadTooLarge",
        "The body exceeds the configured limit.",
        &["PayloadTooLarge"],
    ),
    (
        415,
        "UnsupportedMediaType",
        "The body is not `application/json`.",
        &["UnsupportedMediaType"],
    ),
    (
        422,
        "Unprocessable",
        "Well-formed but invalid: an unknown network or token, a bad signature, a nonce that \
         does not commit to payTo/memo/fee, a validity window that is not open or too long, a \
         deprecated plan, a revert.",
        &[
            "UnknownNetwork",
            "InvalidSignature",
            "InvalidNonce",
            "InvalidValidity",
            "PlanDeprecated",
        ],
    ),
    (
        429,
        "RateLimited",
        "Over the per-client rate limit; retry after `Retry-After` seconds.",
        &["RateLimited"],
    ),
    (
        500,
        "Internal",
        "A bug; the cause is logged, never sent.",
        &["Internal"],
    ),
    (
        502,
        "ChainError",
        "The chain refused the transaction (the cause is logged, never sent).",
        &["ChainError"],
    ),
    (
        503,
        "Unavailable",
        "The chain or the store is unavailable, a relayed transaction is not confirmed yet, or \
         webhooks are not configured; retry later.",
        &["Unavailable", "Pending", "WebhooksNotConfigured"],
    ),
    (
        504,
        "ConfirmationTimeout",
        "The relayed transaction was not confirmed in time; send the same request again.",
        &["Pending"],
    ),
];

/// The component name of the error response for `status`.
fn error_name(status: u16) -> &'static str {
    ERRORS
        .iter()
        .find(|(s, ..)| *s == status)
        .map(|(_, name, ..)| *name)
        .unwrap_or_else(|| panic!("no error response for {status}"))
}

/// The OpenAPI 3.1 document, with `public_url` as its server, as JSON.
pub fn document(public_url: &str) -> Value {
    serde_json::to_value(openapi(public_url)).expect("the OpenAPI document serializes")
}

/// The OpenAPI 3.1 document, with `public_url` as its server.
pub fn openapi(public_url: &str) -> OpenApi {
    let mut doc = Doc::default();
    operations(&mut doc);
    let mut components = ComponentsBuilder::new().security_scheme(
        API_KEY,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "A provider API key from `/providers/register` (`tg_` and 64 hex digits).",
                ))
                .build(),
        ),
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
    path does not take (405 `MethodNotAllowed`, with `Allow`), a request over the rate limit \
    (429 `RateLimited`, with `Retry-After`) or over the request timeout (408 `RequestTimeout`).";

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
        "Gasless subscriptions (subscribeWithSig), their metered usage and overage allowance.",
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

/// An error response: [`ApiErrorBody`] as JSON, one example per code.
fn error_response(status: u16, description: &str, codes: &[&str]) -> Response {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(ApiErrorBody::name())))
        .examples_from_iter(codes.iter().map(|code| {
            (
                *code,
                utoipa::openapi::example::ExampleBuilder::new()
                    .value(Some(json!({ "error": { "code": code, "message": "…" } })))
                    .build(),
            )
        }))
        .build();
    let mut response = ResponseBuilder::new()
        .description(format!("{status}: {description}"))
        .content("application/json", content);
    if status == 429 {
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(integer(0)))
                .description(Some("Seconds until a request will be taken again."))
                .build(),
        );
    }
    response.build()
}

/// `{"type": "integer", "minimum": min}`.
fn integer(min: u64) -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(min as f64))
        .into()
}

/// `{"type": "string"}` with a description.
fn string(description: &str) -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .into()
}

/// The paths and the schemas they refer to, as they are collected.
#[derive(Default)]
struct Doc {
    paths: Paths,
    schemas: Vec<(String, RefOr<Schema>)>,
}

impl Doc {
    fn add(&mut self, method: HttpMethod, path: &'static str, op: Op) {
        debug_assert!(PATHS.contains(&path), "{path} is not in PATHS");
        self.schemas.extend(op.schemas);
        self.paths
            .add_path_operation(path, vec![method], op.operation.build());
    }
}

/// One operation under construction: its statuses are added in order, and the schemas it
/// refers to are collected for the components.
struct Op {
    operation: OperationBuilder,
    schemas: Vec<(String, RefOr<Schema>)>,
}

/// An operation with an id, a tag and a summary; every operation can be refused by the server's
/// limits (408, 429).
fn op(id: &str, tag: &str, summary: &str) -> Op {
    Op {
        operation: OperationBuilder::new()
            .operation_id(Some(id))
            .tag(tag)
            .summary(Some(summary)),
        schemas: Vec::new(),
    }
}

impl Op {
    fn description(mut self, description: &str) -> Self {
        self.operation = self.operation.description(Some(description));
        self
    }

    /// A `$ref` to `T`, collecting `T` and what it refers to.
    fn schema<T: ToSchema>(&mut self) -> RefOr<Schema> {
        self.schemas.push((T::name().into_owned(), T::schema()));
        T::schemas(&mut self.schemas);
        Ref::from_schema_name(T::name()).into()
    }

    /// A required JSON body of type `T` (400 for malformed JSON or a bad field, 413, 415).
    fn body<T: ToSchema>(mut self) -> Self {
        let schema = self.schema::<T>();
        self.operation = self.operation.request_body(Some(
            RequestBodyBuilder::new()
                .required(Some(Required::True))
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(schema)).build(),
                )
                .build(),
        ));
        self.errors(&[400, 413, 415])
    }

    /// The query parameters of `T` (400 when they do not parse).
    fn query<T: IntoParams>(mut self) -> Self {
        self.operation = self
            .operation
            .parameters(Some(T::into_params(|| Some(ParameterIn::Query))));
        self.errors(&[400])
    }

    /// A path parameter (400 when it does not decode, 404 when nothing has it).
    fn path(mut self, name: &str, description: &str, schema: impl Into<RefOr<Schema>>) -> Self {
        self.operation = self.operation.parameter(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .description(Some(description))
                .schema(Some(schema)),
        );
        self.errors(&[400, 404])
    }

    /// A 32-byte path parameter.
    fn hash_path(self, name: &str, description: &str) -> Self {
        self.path(name, description, Ref::from_schema_name(Hash32::name()))
            .with_schema::<Hash32>()
    }

    fn with_schema<T: ToSchema>(mut self) -> Self {
        self.schema::<T>();
        self
    }

    /// A header parameter.
    fn header(mut self, parameter: Parameter) -> Self {
        self.operation = self.operation.parameter(parameter);
        self
    }

    /// Needs a provider API key (401 without a valid one).
    fn secured(mut self) -> Self {
        self.operation = self
            .operation
            .security(SecurityRequirement::new::<_, _, String>(API_KEY, []));
        self.errors(&[401])
    }

    /// A JSON answer of type `T` with this status.
    fn ok<T: ToSchema>(mut self, status: u16, description: &str) -> Self {
        let schema = self.schema::<T>();
        self.respond(status, json_response(description, schema))
    }

    /// A JSON answer that is an array of `T`.
    fn ok_list<T: ToSchema>(mut self, status: u16, description: &str) -> Self {
        let item = self.schema::<T>();
        let schema: Schema = ArrayBuilder::new().items(item).into();
        self.respond(status, json_response(description, schema))
    }

    /// An answer without a body.
    fn empty(self, status: u16, description: &str) -> Self {
        self.respond(
            status,
            ResponseBuilder::new().description(description).build(),
        )
    }

    fn respond(mut self, status: u16, response: Response) -> Self {
        self.operation = self.operation.response(status.to_string(), response);
        self
    }

    /// The error responses with these statuses, in the [`ApiErrorBody`] shape; the server's
    /// limits (408, 429) always apply.
    fn errors(mut self, statuses: &[u16]) -> Self {
        self.schema::<ApiErrorBody>();
        for status in statuses.iter().chain(&[408, 429]) {
            self.operation = self.operation.response(
                status.to_string(),
                Ref::from_response_name(error_name(*status)),
            );
        }
        self
    }
}

fn json_response(description: &str, schema: impl Into<RefOr<Schema>>) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(schema)).build(),
        )
        .build()
}

/// Every operation, in the router's order.
fn operations(d: &mut Doc) {
    use HttpMethod::{Delete, Get, Patch, Post};

    d.add(Post, "/authorize", op("authorize", "tollgate", "Settle a signed payment and get its proof.")
        .description("Verifies the signed payment (network served, token, the authorization paying the router, the nonce committing to payTo, memo and fee, the validity window, the signature, the payer's balance), submits it, and waits up to the configured confirmation timeout. Idempotent: the same signed payment again, also concurrently, yields the same proof and a single transfer.")
        .body::<AuthorizeRequest>()
        .ok::<AuthorizeResponse>(200, "Confirmed: the proof, base64 for `X-PAYMENT`, and its fields.")
        .pending(true)
        .errors(&[402, 403, 409, 422, 500, 502, 503]));
    d.add(Get, "/settlements/{key}", op("settlementStatus", "tollgate", "The status URL of a pending settlement.")
        .description("Only `/authorize` settlements have a status URL: any other key (an x402 `/settle` settlement among them) is answered 404 as an unknown key is.")
        .hash_path("key", "The settlement key from `statusUrl`.")
        .query::<StatusQuery>()
        .ok::<AuthorizeResponse>(200, "Confirmed: the proof.")
        .pending(false)
        .errors(&[403, 422, 503]));

    d.add(Post, "/subscriptions", op("subscribe", "subscriptions", "Relay a gasless subscription (subscribeWithSig): the first cycle is billed in the same transaction; answers after confirmation.")
        .description("The subscriber's EIP-712 `Subscribe` intent and its EIP-2612 permit (the standing authorization). Idempotent: the same signed request returns the subscription it created.")
        .body::<SubscribeRequest>()
        .ok::<SubscriptionView>(200, "The subscription.")
        .errors(&[402, 409, 422, 502, 503, 504]));
    d.add(Get, "/subscriptions/quote", op("subscriptionQuote", "subscriptions", "What a subscriber signs: the plan's terms, its subscription and permit nonces, its allowance and the chain's clock.")
        .query::<QuoteQuery>()
        .ok::<SubscriptionQuote>(200, "The quote.")
        .errors(&[404, 422, 502, 503]));
    d.add(
        Get,
        "/subscriptions/{id}",
        op(
            "showSubscription",
            "subscriptions",
            "A subscription's state from the chain.",
        )
        .hash_path("id", "The subscription id.")
        .query::<NetworkQuery>()
        .ok::<SubscriptionView>(200, "The subscription.")
        .errors(&[422, 502, 503]),
    );
    d.add(
        Get,
        "/subscriptions/{id}/usage",
        op(
            "showAllowanceUsage",
            "subscriptions",
            "The usage ledger of the subscription's current cycle (plan owner only).",
        )
        .secured()
        .hash_path("id", "The subscription id.")
        .query::<NetworkQuery>()
        .ok::<AllowanceUsage>(200, "The ledger.")
        .errors(&[403, 422, 502, 503]),
    );
    d.add(Post, "/subscriptions/{id}/usage", op("deductAllowance", "subscriptions", "The spec's deductAllowance: deduct metered usage from the subscription's overage allowance (plan owner only).")
        .description("Exact under concurrency: a deduction that would cross the cycle's cap is refused with 402 `AllowanceExhausted` and nothing is deducted. Usage is charged on-chain in batches and at the end of each cycle.")
        .secured()
        .hash_path("id", "The subscription id.")
        .body::<DeductRequest>()
        .ok::<AllowanceUsage>(200, "The allowance after the deduction.")
        .errors(&[402, 403, 409, 422, 502, 503]));
    d.add(Post, "/subscriptions/{id}/allowance", op("raiseAllowance", "subscriptions", "Relay the subscriber's signed raiseAllowanceWithSig (EIP-712 `Action`, action 4, value = the new cap); answers after confirmation.")
        .description("Idempotent: a cap already at `maxOverage` is answered without a transaction.")
        .hash_path("id", "The subscription id.")
        .body::<RaiseAllowanceRequest>()
        .ok::<SubscriptionView>(200, "The subscription with its new cap.")
        .errors(&[409, 422, 502, 503, 504]));

    let endpoint_id = || string("The endpoint id (`we_…`).");
    d.add(
        Get,
        "/webhooks/endpoints",
        op(
            "listWebhookEndpoints",
            "webhooks",
            "The provider's webhook endpoints (secrets are not shown).",
        )
        .secured()
        .ok_list::<Endpoint>(200, "The endpoints.")
        .errors(&[503]),
    );
    d.add(
        Post,
        "/webhooks/endpoints",
        op(
            "createWebhookEndpoint",
            "webhooks",
            "Add an endpoint; answers 201 with its `secret` (`whsec_…`), shown this once.",
        )
        .description("Loopback and private targets are refused outside dev mode.")
        .secured()
        .body::<CreateEndpoint>()
        .ok::<Endpoint>(201, "Created, with its secret.")
        .errors(&[422, 503]),
    );
    d.add(
        Get,
        "/webhooks/endpoints/{id}",
        op("showWebhookEndpoint", "webhooks", "One endpoint.")
            .secured()
            .path("id", "The endpoint id.", endpoint_id())
            .ok::<Endpoint>(200, "The endpoint.")
            .errors(&[503]),
    );
    d.add(
        Patch,
        "/webhooks/endpoints/{id}",
        op(
            "updateWebhookEndpoint",
            "webhooks",
            "Change `url`, `events`, `description` or `enabled` (re-enabling a disabled endpoint).",
        )
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .body::<UpdateEndpoint>()
        .ok::<Endpoint>(200, "The endpoint.")
        .errors(&[422, 503]),
    );
    d.add(
        Delete,
        "/webhooks/endpoints/{id}",
        op(
            "deleteWebhookEndpoint",
            "webhooks",
            "Delete the endpoint and its pending deliveries.",
        )
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .empty(204, "Deleted.")
        .errors(&[503]),
    );
    d.add(Post, "/webhooks/endpoints/{id}/rotate", op("rotateWebhookSecret", "webhooks", "A new secret (shown once); the previous one keeps signing deliveries, beside it, for `overlapSecs` (default 86400, at most 7 days).")
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .body::<Rotate>()
        .ok::<Endpoint>(200, "The endpoint with its new secret.")
        .errors(&[422, 503]));
    d.add(Get, "/webhooks/endpoints/{id}/deliveries", op("listWebhookDeliveries", "webhooks", "The endpoint's latest deliveries: event, state (pending, delivered, dead), attempts, next attempt, last status and error.")
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .query::<Page>()
        .ok_list::<Delivery>(200, "The deliveries.")
        .errors(&[503]));
    d.add(
        Post,
        "/webhooks/endpoints/{id}/deliveries/{event_id}/redeliver",
        op(
            "redeliverWebhook",
            "webhooks",
            "Put a delivery (dead or delivered) back to pending, due now.",
        )
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .path(
            "event_id",
            "The event id (`evt_…`).",
            string("The event id (`evt_…`)."),
        )
        .empty(202, "Due now.")
        .errors(&[503]),
    );
    d.add(Get, "/events", op("listEvents", "webhooks", "The provider's events, oldest first, after `after` (a `seq`), at most `limit` (default 100).")
        .secured()
        .query::<Page>()
        .ok_list::<EventRecord>(200, "The events.")
        .errors(&[503]));

    d.add(Get, "/analytics", op("analytics", "analytics", "The provider's report over `[from, to)`.")
        .description("Settled volume (total, per bucket, top resources, networks and payers), subscriptions (by state, lifecycle counts, recurring revenue per 30 days, per plan), metered usage, webhook delivery health and the latest payments. Volume comes from hourly rollups (payers: daily). Amounts are decimal strings in the token's smallest unit.")
        .secured()
        .query::<ReportParams>()
        .ok::<Report>(200, "The report.")
        .errors(&[503]));
    d.add(Get, "/dashboard", op("dashboard", "analytics", "The analytics dashboard (HTML, inline SVG charts, no script).")
        .description("Bearer API key or the login session cookie; without either, 303 to `/dashboard/login`. Takes `/analytics`'s `range`, `bucket`, `from`, `to`.")
        .secured()
        .query::<ReportParams>()
        .respond(200, html("The dashboard."))
        .empty(303, "Not logged in: to `/dashboard/login`.")
        .errors(&[503]));
    d.add(
        Get,
        "/dashboard/login",
        op("dashboardLoginForm", "analytics", "The login form (HTML).")
            .respond(200, html("The form.")),
    );
    d.add(Post, "/dashboard/login", op("dashboardLogin", "analytics", "Logs in with an API key (form field `apiKey`).")
        .description("Sets the `tollgate_session` cookie (Secure, HttpOnly, SameSite=Strict, 12 h) and answers 303 to `/dashboard`; 401 with the form again for an unknown or revoked key.")
        .form_body()
        .empty(303, "Logged in.")
        .respond(401, html("Unknown or revoked key: the form again."))
        .errors(&[413, 503]));
    d.add(
        Post,
        "/dashboard/logout",
        op(
            "dashboardLogout",
            "analytics",
            "Ends the session and clears its cookie; 303 to `/dashboard/login`.",
        )
        .empty(303, "Logged out."),
    );

    d.add(Post, "/providers/challenge", op("providerChallenge", "providers", "Get a registration challenge to sign with the provider's wallet.")
        .description("An EIP-191 `personal_sign` text naming this facilitator, the address, a random nonce and the expiry (5 minutes). Sign it and post it to `/providers/register`.")
        .body::<ChallengeRequest>()
        .ok::<ChallengeResponse>(200, "The challenge.")
        .errors(&[422, 503]));
    d.add(Post, "/providers/register", op("providerRegister", "providers", "Register with a signed challenge and get an API key (returned once).")
        .description("The signature must recover `address`; the challenge must be one this facilitator issued to that address, unexpired and unused (it is consumed). The key (`tg_` + 64 hex digits) is shown once; only its hash is stored.")
        .body::<RegisterRequest>()
        .ok::<RegisterResponse>(201, "Registered: the API key.")
        .errors(&[401, 503]));
    d.add(
        Post,
        "/providers/keys/revoke",
        op(
            "providerRevokeKey",
            "providers",
            "Revoke the presented API key.",
        )
        .secured()
        .ok::<RevokeResponse>(200, "Revoked.")
        .errors(&[503]),
    );

    d.add(Post, "/plans", op("createPlan", "providers", "Publish a plan on-chain (the facilitator's relayer sends `createPlan`).")
        .description("The plan id is `planIdFor(relayer, keccak256(abi.encode(provider, idempotencyKey)))`: the same idempotency key again returns the same plan (200) instead of creating another. Waits for confirmation.")
        .secured()
        .body::<CreatePlanRequest>()
        .ok::<Plan>(200, "The plan this idempotency key already created.")
        .ok::<Plan>(201, "Created.")
        .errors(&[409, 422, 502, 503, 504]));
    d.add(
        Get,
        "/plans/{id}",
        op(
            "showPlan",
            "providers",
            "A plan's on-chain terms and its provider.",
        )
        .hash_path("id", "The plan id.")
        .query::<NetworkQuery>()
        .ok::<Plan>(200, "The plan.")
        .errors(&[422, 502, 503]),
    );
    d.add(Post, "/plans/{id}/deprecate", op("deprecatePlan", "providers", "Deprecate a plan (owner only; idempotent).")
        .description("A deprecated plan takes no new subscriptions (`PlanDeprecated`); existing subscriptions keep running until cancelled.")
        .secured()
        .hash_path("id", "The plan id.")
        .query::<NetworkQuery>()
        .ok::<Plan>(200, "The plan, deprecated.")
        .errors(&[403, 422, 502, 503, 504]));

    d.add(Post, "/proofs/verify", op("verifyProof", "tollgate", "Check a payment proof online.")
        .description("Checks the proof's signature against this facilitator's proof signer, its expiry, and that a confirmed settlement matches it. Gates may instead verify offline against `proofSigners` from `/.well-known/tollgate`. An invalid proof is a 200 with `valid: false`.")
        .body::<VerifyProofRequest>()
        .ok::<VerifyProofResponse>(200, "The verdict.")
        .errors(&[503]));
    d.add(
        Post,
        "/verify",
        op(
            "x402Verify",
            "x402",
            "x402 V1: check a payment against its requirements without settling it.",
        )
        .body::<VerifyRequest>()
        .ok::<VerifyResponse>(
            200,
            "The verdict; a failed check is `isValid: false` with `invalidReason`.",
        ),
    );
    d.add(Post, "/settle", op("x402Settle", "x402", "x402 V1: settle a payment (`transferWithAuthorization` to `payTo`).")
        .description("One authorization (chain, token, payer, nonce) moves money once and is answered `success` once: a repeat is `duplicate_settlement` naming the original transaction, unless it comes from the first settler, named by its `Idempotency-Key`, whose retries of the same payload get the first outcome again.")
        .header(ParameterBuilder::new()
            .name(IDEMPOTENCY_KEY)
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some("Names the settler: its retries of the same payload get the first outcome again (another settler's repeat is `duplicate_settlement`)."))
            .schema(Some(string("Any value; only its hash is kept.")))
            .build())
        .body::<VerifyRequest>()
        .ok::<SettleResponse>(200, "The result; a failure is `success: false` with `errorReason`."));
    d.add(
        Get,
        "/supported",
        op(
            "supported",
            "x402",
            "The (x402Version, scheme, network) kinds this facilitator settles.",
        )
        .ok::<SupportedResponse>(200, "The supported kinds.")
        .errors(&[]),
    );
    d.add(Get, "/.well-known/tollgate", op("discovery", "tollgate", "Discovery: per network the chain id, token, router, subscriptions contract, fee and confirmation depth; the proof-signer addresses gates verify proofs against offline.")
        .ok::<WellKnown>(200, "The facilitator's public parameters.")
        .errors(&[]));
    d.add(
        Get,
        "/healthz",
        op("health", "operations", "Liveness: the process answers.")
            .ok::<Health>(200, "Alive.")
            .errors(&[]),
    );
    d.add(
        Get,
        "/readyz",
        op(
            "ready",
            "operations",
            "Readiness: every chain answers and the store takes a write.",
        )
        .ok::<Readiness>(200, "Ready.")
        .ok::<Readiness>(503, "Not ready; `checks` says what failed.")
        .errors(&[]),
    );
    d.add(
        Get,
        "/metrics",
        op(
            "metrics",
            "operations",
            "Prometheus metrics (text exposition format 0.0.4).",
        )
        .respond(200, text("text/plain", "The metrics."))
        .errors(&[]),
    );
    d.add(
        Get,
        "/openapi.json",
        op("openapi", "operations", "This document.")
            .respond(
                200,
                json_response(
                    "The OpenAPI 3.1 document.",
                    ObjectBuilder::new().schema_type(Type::Object).build(),
                ),
            )
            .errors(&[]),
    );
}

impl Op {
    /// The 202 of a settlement broadcast but not yet confirmed (with `Location` on `/authorize`).
    fn pending(mut self, location: bool) -> Self {
        let schema = self.schema::<PendingResponse>();
        let mut response = ResponseBuilder::new()
            .description("Broadcast but not yet confirmed: poll `statusUrl`.")
            .content(
                "application/json",
                ContentBuilder::new().schema(Some(schema)).build(),
            );
        if location {
            response = response.header(
                "Location",
                HeaderBuilder::new()
                    .schema(Some(string("The status URL.")))
                    .build(),
            );
        }
        self.respond(202, response.build())
    }

    /// The dashboard login form's body.
    fn form_body(mut self) -> Self {
        let schema: Schema = ObjectBuilder::new()
            .property("apiKey", string("The provider API key."))
            .required("apiKey")
            .into();
        self.operation = self.operation.request_body(Some(
            RequestBodyBuilder::new()
                .required(Some(Required::True))
                .content(
                    "application/x-www-form-urlencoded",
                    ContentBuilder::new().schema(Some(schema)).build(),
                )
                .build(),
        ));
        self
    }
}

fn html(description: &str) -> Response {
    text("text/html", description)
}

fn text(content_type: &str, description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            content_type,
            ContentBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::String).build()))
                .build(),
        )
        .build()
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
        let settle = &doc["paths"]["/settle"]["post"];
        assert!(
            settle["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["in"] == "header" && p["name"] == "idempotency-key")
        );
    }
}
