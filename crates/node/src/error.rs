//! How errors cross into JavaScript: an `Error` whose message is `"<Name>: <message>"`, which
//! the package's JavaScript half turns into `error.name = "<Name>"` (the spec's error names:
//! `InsufficientFunds`, `SubscriptionNotActive`, `AllowanceExhausted`, `InvalidPaymentProof`,
//! `PlanDeprecated`, …) and `error.message = "<message>"`.

use std::fmt::Display;

use napi::Status;
use tollgate_agent::Error as AgentError;

/// An error named `name` for JavaScript.
pub(crate) fn named(name: &str, message: impl Display) -> napi::Error {
    napi::Error::new(Status::GenericFailure, format!("{name}: {message}"))
}

/// The name an agent error has in JavaScript: the spec's name where one fits, else the
/// variant's.
pub(crate) fn agent_error(e: AgentError) -> napi::Error {
    let name = match &e {
        AgentError::InsufficientFunds { .. } => "InsufficientFunds",
        AgentError::InvalidPaymentProof { .. } => "InvalidPaymentProof",
        AgentError::SubscriptionNotActive => "SubscriptionNotActive",
        AgentError::AllowanceExhausted => "AllowanceExhausted",
        AgentError::PlanDeprecated => "PlanDeprecated",
        AgentError::PolicyViolation { .. } => "PolicyViolation",
        AgentError::NoAcceptableOption { .. } => "NoAcceptableOption",
        AgentError::UnsupportedVersion { .. } => "UnsupportedVersion",
        AgentError::MalformedPaymentRequired(_) => "MalformedPaymentRequired",
        AgentError::PaymentRejected { .. } => "PaymentRejected",
        AgentError::SubscriptionRefused { .. } => "SubscriptionRefused",
        AgentError::InvalidKey | AgentError::KeyFile { .. } => "InvalidKey",
        AgentError::InvalidUrl(_) => "InvalidUrl",
        AgentError::Facilitator { .. } => "FacilitatorError",
        AgentError::Http(_) => "NetworkError",
        AgentError::Timeout { .. } => "Timeout",
        AgentError::Mcp { .. } => "McpError",
        // Paid, the outcome not known yet: its message ends with "(transaction 0x…)" when the
        // server named it (errors.js reads it into `error.transaction`).
        AgentError::SettlementPending { .. } => "SettlementPending",
        // Paid, not served, nothing shows the payment moved: "the server answered <status>…"
        // (errors.js reads it into `error.status`).
        AgentError::NotServed { .. } => "NotServed",
        // Its message ends with "(retry after N s)" when the facilitator said: errors.js reads
        // it into `error.retryAfter`.
        AgentError::RateLimited { .. } => "RateLimited",
        // The server refused the MPP credential with a problem: "the server refused the MPP
        // credential (<type URI>): <detail>" (errors.js reads the URI into `error.problemType`).
        AgentError::PaymentProblem { .. } => "PaymentProblem",
        // Refused before signing: an MPP challenge's token domain is unknown, or its time is not
        // one the agent signs for.
        AgentError::UnknownTokenDomain { .. } => "UnknownTokenDomain",
        AgentError::ChallengeRefused { .. } => "ChallengeRefused",
        _ => "TollgateError",
    };
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    named(name, message)
}
