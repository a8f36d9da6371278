//! The layer's MPP side ([`PaymentGateLayer::mpp`]): a challenge on every 402 of the route, and
//! the settlement of an `Authorization: Payment` credential, refused with the draft's problem
//! types.

use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header, request::Parts};
use tollgate_protocol::{
    Amount, ApiErrorCode, ErrorCode,
    mpp::{self, Challenge, Credential, MppError, Problem, ProblemType},
    x402::SettlementResponseHeader,
};

use super::{PAYMENT_RECEIPT, PAYMENT_SIGNATURE, PaymentGateLayer, X_PAYMENT};
use crate::{MppFailure, X402Failure};

impl PaymentGateLayer {
    /// [`authorize`](Self::authorize) on a route that offers MPP at `price`: a request with a
    /// `Payment` credential pays by it; any other goes the x402 way, and a 402 it gets carries
    /// a fresh challenge too.
    pub(super) async fn authorize_with_mpp<B>(
        &self,
        req: Request<B>,
        price: Amount,
    ) -> Result<(Request<B>, HeaderMap), Response<String>> {
        let (mut parts, body) = req.into_parts();
        let Some(credential) = payment_credential(&parts.headers) else {
            let method = parts.method.clone();
            let url = self.resource_url(&parts);
            return match self.authorize_x402(Request::from_parts(parts, body)).await {
                Err(mut res) if res.status() == StatusCode::PAYMENT_REQUIRED => {
                    self.challenge(method.as_str(), &url, price, res.headers_mut())
                        .await;
                    Err(res)
                }
                decided => decided,
            };
        };
        let url = self.resource_url(&parts);
        if parts.headers.contains_key(X_PAYMENT) || parts.headers.contains_key(PAYMENT_SIGNATURE) {
            let mut res = self.payment_required(
                &parts,
                ErrorCode::InvalidPaymentProof.into(),
                Some("multiple_payment_headers".into()),
                Some("send one of X-PAYMENT, PAYMENT-SIGNATURE and Authorization: Payment".into()),
            );
            self.challenge(parts.method.as_str(), &url, price, res.headers_mut())
                .await;
            return Err(res);
        }
        let credential = match credential {
            Ok(credential) => credential,
            Err(e) => {
                let problem = e.problem_type();
                return Err(self
                    .problem(&parts, &url, price, problem, e.to_string())
                    .await);
            }
        };
        let offer = self.offer(&parts, &url);
        match self.gate.settle_mpp(&credential, &offer, price).await {
            Ok((settled, receipt)) => {
                let mut headers = HeaderMap::new();
                self.settlement_headers(SettlementResponseHeader::from(&settled), &mut headers)
                    .map_err(|e| *e)?;
                if let Ok(value) = HeaderValue::from_str(&receipt.encode()) {
                    headers.insert(PAYMENT_RECEIPT, value);
                }
                // The credential is spent here: the inner service sees the request's other
                // `Authorization` values (its own scheme's), not the payment.
                strip_credentials(&mut parts.headers);
                Ok((Request::from_parts(parts, body), headers))
            }
            Err(MppFailure::Refused { problem, detail }) => {
                tracing::debug!(problem = problem.uri(), %detail, "MPP credential refused");
                Err(self.problem(&parts, &url, price, problem, detail).await)
            }
            Err(MppFailure::Settlement(
                e @ X402Failure::Pending {
                    retry_token: token, ..
                },
            )) => {
                tracing::info!(error = %e, "MPP settlement pending; the payer's same credential picks it up");
                let mut res = self.unavailable(
                    ApiErrorCode::SettlementPending,
                    &format!(
                        "{e}: send the same Authorization header again to be served; do not pay \
                         again"
                    ),
                );
                let h = res.headers_mut();
                // The credential is the payer's retry token; the token it stands for is named
                // as on the x402 path, for clients that look for one (it is the payer's alone).
                if let Some(token) = token
                    && let Ok(value) = HeaderValue::from_str(&token.to_string())
                {
                    h.insert(super::X_PAYMENT_RETRY, value);
                }
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                Err(res)
            }
            Err(MppFailure::Settlement(e)) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "cannot settle an MPP credential");
                let code = match e {
                    X402Failure::StoreUnavailable(_) => ApiErrorCode::MemoStoreUnavailable,
                    _ => ApiErrorCode::FacilitatorUnavailable,
                };
                Err(self.unavailable(code, &e.to_string()))
            }
        }
    }

    /// Adds a fresh challenge for `method` and `url` at `price` to a 402's headers; the
    /// challenge, if the gate could issue one (it knows its chain id).
    async fn challenge(
        &self,
        method: &str,
        url: &str,
        price: Amount,
        headers: &mut HeaderMap,
    ) -> Option<Challenge> {
        let offer = super::Offer {
            method,
            resource_url: url,
            pricing: &self.config.pricing,
            description: &self.config.description,
            mime_type: &self.config.mime_type,
        };
        let challenge = self.gate.mpp_challenge(&offer, price).await?;
        let value = HeaderValue::from_str(&challenge.to_header_value()).ok()?;
        headers.append(header::WWW_AUTHENTICATE, value);
        Some(challenge)
    }

    /// A refused credential: the draft's problem (`application/problem+json`, its status),
    /// with a fresh challenge.
    async fn problem(
        &self,
        parts: &Parts,
        url: &str,
        price: Amount,
        problem: ProblemType,
        detail: String,
    ) -> Response<String> {
        let mut headers = HeaderMap::new();
        let challenge = self
            .challenge(parts.method.as_str(), url, price, &mut headers)
            .await;
        let body = Problem::new(problem, detail, challenge.map(|c| c.id));
        let mut res = Response::new(serde_json::to_string(&body).unwrap_or_default());
        *res.status_mut() =
            StatusCode::from_u16(problem.status()).unwrap_or(StatusCode::PAYMENT_REQUIRED);
        let h = res.headers_mut();
        h.extend(headers);
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(mpp::PROBLEM_CONTENT_TYPE),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        res
    }
}

/// Removes the `Payment` credentials from a request's `Authorization` values.
fn strip_credentials(headers: &mut HeaderMap) {
    let kept: Vec<HeaderValue> = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter(|v| {
            v.to_str()
                .map_or(true, |v| Credential::from_authorization(v).is_none())
        })
        .cloned()
        .collect();
    headers.remove(header::AUTHORIZATION);
    for value in kept {
        headers.append(header::AUTHORIZATION, value);
    }
}

/// The `Payment` credential among a request's `Authorization` headers, if it sends one
/// (`Some(Err)`: one that does not decode). Other schemes are left to the inner service.
fn payment_credential(headers: &HeaderMap) -> Option<Result<Credential, MppError>> {
    headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(Credential::from_authorization)
}
