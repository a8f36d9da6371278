//! The agent's HTTP exchanges with the server: sending a request (with its credential), and
//! reading a 402's terms or the final response, within their size limits.

use alloy::primitives::bytes::Bytes;
use reqwest::header::HeaderValue;
use tollgate_protocol::x402::SettlementResponseHeader;

use super::{Agent, PAYMENT_REQUIRED, PAYMENT_RESPONSE, X_PAYMENT_RESPONSE};
use crate::{
    Error, PaidResponse, PayRequest, Payment, Result,
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

    /// The final response, read within the body limit, with the receipt of `payment`.
    pub(crate) async fn finish(
        &self,
        response: reqwest::Response,
        payment: Option<Payment>,
    ) -> Result<PaidResponse> {
        let status = response.status();
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

/// Reads at most `limit` bytes of body; `None` when it is longer.
async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Option<Vec<u8>>> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
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
