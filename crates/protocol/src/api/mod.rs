//! The facilitator's HTTP API: every request and response body (and query) its endpoints take and
//! give, as the facilitator serializes them and clients read them. JSON field names are the
//! spec's camelCase. Errors travel as [`crate::ApiErrorBody`].
//!
//! | endpoint | request | answer |
//! |---|---|---|
//! | `GET /.well-known/tollgate` | | [`discovery::WellKnown`] |
//! | `POST /authorize` | [`authorize::AuthorizeRequest`] | 200 [`authorize::AuthorizeResponse`], 202 [`authorize::PendingResponse`] |
//! | `GET /settlements/{key}` | [`authorize::StatusQuery`] | as `/authorize` |
//! | `POST /proofs/verify` | [`authorize::VerifyProofRequest`] | [`authorize::VerifyProofResponse`] |
//! | `POST /verify`, `POST /settle`, `GET /supported` | [`x402::VerifyRequest`], [`x402::SettleRequest`] | [`x402::VerifyResponse`], [`x402::SettleResponse`], [`x402::SupportedResponse`] |
//! | `POST /plans` | [`plans::CreatePlanRequest`] | 201/200 [`plans::Plan`] |
//! | `GET /plans/{id}`, `POST /plans/{id}/deprecate` | [`plans::NetworkQuery`] | [`plans::Plan`] |
//! | `GET /subscriptions/quote` | [`subscriptions::QuoteQuery`] | [`subscriptions::SubscriptionQuote`] |
//! | `POST /subscriptions` | [`subscriptions::SubscribeRequest`] | [`subscriptions::SubscriptionView`] |
//! | `GET /subscriptions/{id}` | [`plans::NetworkQuery`] | [`subscriptions::SubscriptionView`] |
//! | `POST /subscriptions/{id}/usage` | [`subscriptions::DeductRequest`] | [`subscriptions::AllowanceUsage`] |
//! | `GET /subscriptions/{id}/usage` | [`plans::NetworkQuery`] | [`subscriptions::AllowanceUsage`] |
//! | `POST /subscriptions/{id}/allowance` | [`subscriptions::RaiseAllowanceRequest`] | [`subscriptions::SubscriptionView`] |
//! | `POST /subscriptions/{id}/pause`, `/resume`, `/cancel` | [`subscriptions::ActionRequest`] | [`subscriptions::SubscriptionView`] |
//! | `GET /subscriptions` | [`subscriptions::ListSubscriptionsQuery`] | `[`[`subscriptions::SubscriptionView`]`]` |
//! | `POST /providers/challenge` | [`providers::ChallengeRequest`] | [`providers::ChallengeResponse`] |
//! | `POST /providers/register` | [`providers::RegisterRequest`] | 201 [`providers::RegisterResponse`] |
//! | `POST /providers/keys/revoke` | | [`providers::RevokeResponse`] |
//! | `POST /webhooks/endpoints` | [`webhooks::CreateEndpoint`] | 201 [`webhooks::Endpoint`] (with its secret) |
//! | `GET /webhooks/endpoints` | | `[`[`webhooks::Endpoint`]`]` |
//! | `GET`/`PATCH`/`DELETE /webhooks/endpoints/{id}` | [`webhooks::UpdateEndpoint`] (`PATCH`) | [`webhooks::Endpoint`]; 204 for `DELETE` |
//! | `POST /webhooks/endpoints/{id}/rotate` | [`webhooks::Rotate`] | [`webhooks::Endpoint`] (with the new secret) |
//! | `GET /webhooks/endpoints/{id}/deliveries` | [`webhooks::Page`] | `[`[`webhooks::Delivery`]`]` |
//! | `POST /webhooks/endpoints/{id}/deliveries/{event}/redeliver` | | 202 |
//! | `GET /events` | [`webhooks::Page`] | `[`[`webhooks::EventRecord`]`]` |
//! | `GET /analytics` | [`analytics::ReportParams`] | [`analytics::Report`] |
//! | `GET /healthz`, `GET /readyz` | | [`health::Health`], [`health::Readiness`] |

pub mod analytics;
pub mod authorize;
pub mod discovery;
pub mod health;
pub mod plans;
pub mod providers;
pub mod subscriptions;
pub mod webhooks;

/// The x402 V1 facilitator API (`/verify`, `/settle`, `/supported`).
pub mod x402 {
    pub use crate::x402::{
        SettleRequest, SettleResponse, SupportedKind, SupportedResponse, VerifyRequest,
        VerifyResponse,
    };
}
