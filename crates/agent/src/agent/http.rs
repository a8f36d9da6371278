//! The agent's HTTP exchanges with the server: sending a request (with its credential), and
//! reading a 402's terms or the final response, within their size limits.

use std::time::Duration;

use alloy::primitives::{B256, bytes::Bytes};
use reqwest::{StatusCode, header::HeaderValue};
use tokio::time::Instant;
use tollgate_client::read_limited;
use tollgate_protocol::{
    SubscriptionReceipt,
    headers::{X_PAYMENT_RETRY, X_SERVICE_RECEIPT, X_SERVICE_SCHEMES, X_SERVICE_SUB},
    x402::{RetryToken, SettlementResponseHeader},
};

use super::{Agent, PAYMENT_REQUIRED, PAYMENT_RESPONSE, X_PAYMENT_RESPONSE};

/// The longest wait between two resends of a pending payment, whatever `Retry-After` says.
const PENDING_POLL_MAX: Duration = Duration::from_secs(5);
/// The shortest.
const PENDING_POLL_MIN: Duration = Duration::from_millis(250);

/// What became of a paid request whose settlement may be pending ([`Agent::until_settled`]).
#[derive(Debug)]
pub(super) enum Settled {
    /// The server's answer, not a pending one.
    Answered(reqwest::Response),
    /// Still pending when the agent's settle timeout ran out.
    StillPending {
        /// The settlement transaction, when known.
        transaction: Option<B256>,
    },
}
use crate::{
    Error, PaidResponse, PayRequest, Payment, PaymentKind, Result,
    error::Malformed,
    terms::{self, Terms},
};

impl Agent {
    /// [`Agent::finish`], reporting `earlier` payments made for the request too.
    pub(super) async fn finish_after(
        &self,
        response: reqwest::Response,
        payment: Option<Payment>,
        earlier: Vec<Payment>,
    ) -> Result<PaidResponse> {
        let mut paid = self.finish(response, payment).await?;
        paid.earlier_payments = earlier;
        Ok(paid)
    }

    /// Sends `request`, with `credential` (`X-PAYMENT` or `X-Service-Sub` and its value) if any.
    pub(crate) async fn send(
        &self,
        request: &PayRequest,
        credential: Option<(&'static str, &str)>,
    ) -> Result<reqwest::Response> {
        let mut headers = request.headers.clone();
        // This agent reads a plan's own `subscription` entry beside the `exact` one, which a gate
        // on a network with an x402 V1 name lists only when asked.
        headers
            .entry(X_SERVICE_SCHEMES)
            .or_insert(HeaderValue::from_static("exact, subscription"));
        if let Some((name, value)) = credential {
            let value = HeaderValue::from_str(value).map_err(|_| Error::Facilitator {
                status: 0,
                code: "InvalidProof".into(),
                message: format!("the {name} value is not a valid header value"),
            })?;
            headers.insert(name, value);
        }
        let mut builder = self
            .inner
            .http
            .request(request.method.clone(), request.url.clone())
            .headers(headers);
        if let Some(body) = &request.body {
            builder = builder.body(body.clone());
        }
        Ok(builder.send().await?)
    }

    /// Sends `request` with `payment` (its header, and its retry token if it has one).
    pub(super) async fn send_payment(
        &self,
        request: &PayRequest,
        payment: &Payment,
    ) -> Result<reqwest::Response> {
        match payment.retry_token {
            Some(token) => {
                let mut request = request.clone();
                request.headers.insert(
                    X_PAYMENT_RETRY,
                    HeaderValue::from_str(&token.to_string()).map_err(|_| Error::Facilitator {
                        status: 0,
                        code: "InvalidRetryToken".into(),
                        message: "the retry token is not a valid header value".into(),
                    })?,
                );
                self.send(&request, Some((payment.header_name(), &payment.header)))
                    .await
            }
            None => {
                self.send(request, Some((payment.header_name(), &payment.header)))
                    .await
            }
        }
    }

    /// Follows a paid request whose settlement the server holds pending (503 with
    /// `X-PAYMENT-RETRY`): resends the same payment with the token the server named, after its
    /// `Retry-After` (at most [`PENDING_POLL_MAX`]), until another answer or the agent's settle
    /// timeout ([`AgentBuilder::settle_timeout`](crate::AgentBuilder::settle_timeout)). Never
    /// signs anything: the payment made is the only one.
    pub(super) async fn until_settled(
        &self,
        request: &PayRequest,
        payment: &mut Payment,
        response: reqwest::Response,
    ) -> Result<Settled> {
        let deadline = Instant::now() + self.inner.settle_timeout;
        let mut response = response;
        let mut resends = 0u32;
        loop {
            let held = (response.status() == StatusCode::SERVICE_UNAVAILABLE)
                .then(|| response.headers().get(X_PAYMENT_RETRY))
                .flatten()
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<RetryToken>().ok());
            let Some(token) = held else {
                return Ok(Settled::Answered(response));
            };
            payment.retry_token = Some(token);
            let wait = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(PENDING_POLL_MAX, Duration::from_secs)
                .clamp(PENDING_POLL_MIN, PENDING_POLL_MAX);
            if Instant::now() + wait > deadline {
                tracing::warn!(resends, amount = %payment.amount, pay_to = %payment.pay_to, "the payment's settlement is still pending at the settle timeout");
                return Ok(Settled::StillPending {
                    transaction: payment.tx_hash,
                });
            }
            tracing::info!(
                resends,
                wait_ms = wait.as_millis() as u64,
                "the payment's settlement is pending; resending the same payment with its retry token"
            );
            tokio::time::sleep(wait).await;
            resends += 1;
            response = self.send_payment(request, payment).await?;
        }
    }

    /// The final response, read within the body limit, with the receipt of `payment`.
    pub(crate) async fn finish(
        &self,
        response: reqwest::Response,
        payment: Option<Payment>,
    ) -> Result<PaidResponse> {
        let status = response.status();
        let mut payment = payment;
        if let Some(p) = &mut payment
            && let PaymentKind::Subscription { id } = p.kind
            && let Some(receipt) = receipt_of(&response).filter(|r| r.subscription_id == id)
        {
            p.metered = Some(receipt.metered);
        }
        let headers = response.headers().clone();
        let limit = self.inner.max_body;
        let body = read_limited(response, limit)
            .await?
            .ok_or(Error::ResponseTooLarge { limit })?;
        Ok(PaidResponse {
            status,
            headers,
            body: Bytes::from(body),
            payment,
            earlier_payments: Vec::new(),
        })
    }

    /// How a response to `request` was paid when the request named a subscription
    /// (`X-Service-Sub`) and the server says, in its `X-Service-Receipt`, that it served it on
    /// that subscription: a [`PaymentKind::Subscription`] receipt of nothing paid now, with what
    /// a metered route took from the overage allowance.
    pub(crate) fn served_on_named(
        &self,
        request: &PayRequest,
        response: &reqwest::Response,
    ) -> Option<Payment> {
        let named: B256 = request
            .headers
            .get(X_SERVICE_SUB)?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let receipt = receipt_of(response).filter(|r| r.subscription_id == named)?;
        Some(Payment {
            kind: PaymentKind::Subscription { id: named },
            amount: tollgate_protocol::Amount::ZERO,
            fee: None,
            network: receipt.network.into_string(),
            token: receipt.token,
            payer: self.inner.address,
            pay_to: receipt.pay_to,
            memo: None,
            tx_hash: None,
            proof: None,
            header: named.to_string(),
            settlement: None,
            x402_version: None,
            retry_token: None,
            metered: Some(receipt.metered),
            mpp_receipt: None,
        })
    }

    /// The terms of a 402, read within the 402 body limit.
    pub(crate) async fn read_terms(&self, response: reqwest::Response) -> Result<Terms> {
        let v2 = response
            .headers()
            .get(PAYMENT_REQUIRED)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let limit = self.inner.max_402_body;
        let body = read_limited(response, limit)
            .await?
            .ok_or(Error::MalformedPaymentRequired(Malformed::TooLarge {
                limit,
            }))?;
        terms::parse(&body, v2.as_deref())
    }
}

/// The settlement of a paid response, when it has a readable one: x402 V2's `PAYMENT-RESPONSE`
/// (its network a CAIP-2 id) or `X-PAYMENT-RESPONSE`, the one of the version paid in first.
pub(super) fn settlement_header(
    response: &reqwest::Response,
    x402_version: Option<u8>,
) -> Option<SettlementResponseHeader> {
    let names = if x402_version == Some(2) {
        [PAYMENT_RESPONSE, X_PAYMENT_RESPONSE]
    } else {
        [X_PAYMENT_RESPONSE, PAYMENT_RESPONSE]
    };
    names.into_iter().find_map(|name| {
        let value = response.headers().get(name)?.to_str().ok()?;
        SettlementResponseHeader::decode(value).ok()
    })
}

/// A response's `X-Service-Receipt`, when it has a readable one.
fn receipt_of(response: &reqwest::Response) -> Option<SubscriptionReceipt> {
    SubscriptionReceipt::decode(response.headers().get(X_SERVICE_RECEIPT)?.to_str().ok()?)
}
