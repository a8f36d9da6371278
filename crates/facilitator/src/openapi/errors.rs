//! The error responses: one component per status, each an [`ApiErrorBody`] with an example per
//! code it carries.

use serde_json::json;
use tollgate_protocol::ApiErrorBody;
use utoipa::{
    ToSchema,
    openapi::{
        ContentBuilder, Ref, ResponseBuilder,
        example::ExampleBuilder,
        header::HeaderBuilder,
        response::Response,
        schema::{ObjectBuilder, Schema, Type},
    },
};

/// The error responses, one component each, by status: its component name, what it means and
/// the codes it carries (as examples).
pub(super) const ERRORS: &[(u16, &str, &str, &[&str])] = &[
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
         registration whose signature or challenge does not check out, or a subscriptions \
         listing not signed by its subscriber.",
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
        "The API key's provider does not own this resource, the settlement belongs to \
         another client (send its claim or the status URL's token), or the token (Circle's \
         USDC) refuses an account of the payment as blacklisted (the message names it; nothing \
         was sent).",
        &["Forbidden", "ClaimMismatch", "AccountBlacklisted"],
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
         deprecated plan, a paused token (Circle's USDC: nothing was sent, send the payment \
         again once it is unpaused), a revert.",
        &[
            "UnknownNetwork",
            "UnsupportedNetwork",
            "UnsupportedToken",
            "InvalidSignature",
            "InvalidAuthorization",
            "NonceMismatch",
            "AuthorizationExpired",
            "AuthorizationNotYetValid",
            "ValidityTooLong",
            "AmountBelowFee",
            "InvalidAmount",
            "SettlementReverted",
            "InvalidPlan",
            "UnknownPlan",
            "PlanDeprecated",
            "SubscriptionsUnavailable",
            "SubscriptionReverted",
            "RaiseReverted",
            "SignatureExpired",
            "DeadlineTooFar",
            "TooManyEndpoints",
            "TokenPaused",
        ],
    ),
    (
        429,
        "RateLimited",
        "Over the per-client rate limit, or (a subscriber's pause, resume or cancel) over the \
         bound on relayed transactions per subscription per hour or per subscriber per day, \
         with nothing sent; retry after `Retry-After` seconds.",
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
pub(super) fn error_name(status: u16) -> &'static str {
    ERRORS
        .iter()
        .find(|(s, ..)| *s == status)
        .map(|(_, name, ..)| *name)
        .unwrap_or_else(|| panic!("no error response for {status}"))
}

/// An error response: [`ApiErrorBody`] as JSON, one example per code.
pub(super) fn error_response(status: u16, description: &str, codes: &[&str]) -> Response {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(ApiErrorBody::name())))
        .examples_from_iter(codes.iter().map(|code| {
            (
                *code,
                ExampleBuilder::new()
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

#[cfg(test)]
mod tests {
    use tollgate_protocol::ApiErrorCode;

    use super::ERRORS;

    /// Every code the document lists is one the facilitator answers (none invented).
    #[test]
    fn every_listed_code_is_in_the_contract() {
        for (status, _, _, codes) in ERRORS {
            for code in *codes {
                let parsed: ApiErrorCode = serde_json::from_value(serde_json::json!(code)).unwrap();
                assert!(
                    !matches!(parsed, ApiErrorCode::Other(_)),
                    "{status} lists {code}, which is no ApiErrorCode"
                );
            }
        }
    }
}
