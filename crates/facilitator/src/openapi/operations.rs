//! Every operation of the facilitator's API, in the router's order.

use tollgate_protocol::{
    AuthorizeRequest, AuthorizeResponse,
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
            ActionRequest, AllowanceUsage, DeductRequest, ListSubscriptionsQuery, QuoteQuery,
            RaiseAllowanceRequest, SubscribeRequest, SubscriberAction, SubscriptionQuote,
            SubscriptionView,
        },
        webhooks::{CreateEndpoint, Delivery, Endpoint, EventRecord, Page, Rotate, UpdateEndpoint},
        x402::{SettleResponse, SupportedResponse, VerifyResponse},
    },
    headers::IDEMPOTENCY_KEY,
    x402::v2::AnyVerifyRequest,
};
use utoipa::openapi::{
    HttpMethod, Required,
    path::{ParameterBuilder, ParameterIn},
    schema::{ObjectBuilder, Type},
};

use super::builder::{Doc, html, json_response, op, string, text};

/// Every operation, in the router's order.
pub(super) fn operations(d: &mut Doc) {
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
    d.add(Get, "/subscriptions", op("listSubscriptions", "subscriptions", "Every subscription of one subscriber (any state), read from the chain, by id; for that subscriber only.")
        .description("Authenticated by the subscriber's EIP-191 `personal_sign` signature of the text `Tollgate: list the subscriptions of <subscriber>\\nchain id: <chainId>\\nsubscriptions contract: <contract>\\nvalid until: <deadline>` (addresses checksummed; chain id and contract as `/.well-known/tollgate` publishes them), with `deadline` at most 600 seconds ahead of the chain's clock. Complete also when the facilitator's keeper is off: the ids come from the contract's `SubscriptionCreated` logs.")
        .query::<ListSubscriptionsQuery>()
        .ok_list::<SubscriptionView>(200, "The subscriptions.")
        .errors(&[401, 422, 502, 503]));
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
    for action in SubscriberAction::ALL {
        let (path, name, what, more) = match action {
            SubscriberAction::Pause => (
                "/subscriptions/{id}/pause",
                "pauseSubscription",
                "pauseWithSig (action 1)",
                "Gates refuse a paused subscription (`SubscriptionNotActive`) and it is not renewed.",
            ),
            SubscriberAction::Resume => (
                "/subscriptions/{id}/resume",
                "resumeSubscription",
                "resumeWithSig (action 2)",
                "When the paid period has ended, a new cycle is billed in the same transaction (402 `InsufficientFunds` when the subscriber cannot pay; nothing is sent).",
            ),
            SubscriberAction::Cancel => (
                "/subscriptions/{id}/cancel",
                "cancelSubscription",
                "cancelWithSig (action 3)",
                "Cancelled is final: a second, differently signed cancel is 409 `SubscriptionNotActive`; subscribe again.",
            ),
        };
        d.add(Post, path, op(name, "subscriptions", &format!("Relay the subscriber's signed {what}: EIP-712 `Action` with value 0 and the subscriber's current nonce; answers after confirmation, gasless for the subscriber."))
            .description(&format!("Idempotent: the same signed request again, or an action whose target state already holds, answers the subscription as it is without a transaction. Refused without sending: a signature that does not recover to the subscriber (422 `InvalidSignature`), a passed deadline (422 `SignatureExpired`), an action on a cancelled subscription (409 `SubscriptionNotActive`), and an action beyond the facilitator's bound on relayed transactions, by default 4 per subscription per hour and 24 per subscriber per day (429 `RateLimited`, with `Retry-After`; what is answered without a transaction is never counted, and a subscription's first cancel is never refused). {more}"))
            .hash_path("id", "The subscription id.")
            .body::<ActionRequest>()
            .ok::<SubscriptionView>(200, "The subscription after the action.")
            .errors(&[402, 404, 409, 422, 502, 503]));
    }

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
        .optional_body::<Rotate>()
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
        .description("Revenue by kind (gross = one-time + subscription first cycles + renewals + overage, per bucket and in total, failures apart), settled one-time volume (total, per bucket, top resources, networks and payers), subscriptions (by state, lifecycle counts, recurring revenue per 30 days, per plan), metered usage, webhook delivery health and the latest payments. Volume comes from hourly rollups (payers: daily). Amounts are decimal strings in the token's smallest unit.")
        .secured()
        .query::<ReportParams>()
        .ok::<Report>(200, "The report.")
        .errors(&[503]));
    d.add(Get, "/dashboard", op("dashboard", "analytics", "The analytics dashboard (HTML, inline SVG charts, no script).")
        .description("Bearer API key or the login session cookie; without either, 303 to `/dashboard/login`. Takes `/analytics`'s `range`, `bucket`, `from`, `to`.")
        .secured_or_session()
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
            "x402 V1 and V2: check a payment against its requirements without settling it.",
        )
        .description("The body's `x402Version` (absent: 1) says which shape it has; a V2 body's `paymentPayload.accepted` must be its `paymentRequirements` (`extra` may be a subset).")
        .body::<AnyVerifyRequest>()
        .ok::<VerifyResponse>(
            200,
            "The verdict; a failed check is `isValid: false` with `invalidReason`.",
        ),
    );
    d.add(Post, "/settle", op("x402Settle", "x402", "x402 V1 and V2: settle a payment (`transferWithAuthorization` to `payTo`).")
        .description("One authorization (chain, token, payer, nonce) moves money once and is answered `success` once: a repeat is `duplicate_settlement` naming the original transaction, unless it comes from the first settler, named by its `Idempotency-Key` (or, in V2, by the payload's `payment-identifier`), whose retries of the same payload get the first outcome again. Another V2 payload under a `payment-identifier` already bound is `payment_identifier_conflict`. V2 answers name the network by its CAIP-2 id.")
        .header(ParameterBuilder::new()
            .name(IDEMPOTENCY_KEY)
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some("Names the settler: its retries of the same payload get the first outcome again (another settler's repeat is `duplicate_settlement`)."))
            .schema(Some(string("Any value; only its hash is kept.")))
            .build())
        .body::<AnyVerifyRequest>()
        .ok::<SettleResponse>(200, "The result; a failure is `success: false` with `errorReason`.")
        .errors(&[503]));
    d.add(
        Get,
        "/supported",
        op(
            "supported",
            "x402",
            "The (x402Version, scheme, network) kinds this facilitator settles (V1 by name, V2 by CAIP-2 id), the V2 extensions it implements and its settlement signers.",
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
