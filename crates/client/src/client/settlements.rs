//! One-time payments (`/authorize`, settlement status, proof verification) and the x402 V1
//! facilitator API (`/verify`, `/settle`, `/supported`).

use alloy::primitives::{B256, keccak256};
use reqwest::{Response, StatusCode};
use tollgate_protocol::{
    AuthorizeRequest, AuthorizeResponse, PendingResponse,
    api::authorize::{StatusQuery, VerifyProofRequest, VerifyProofResponse},
    headers::IDEMPOTENCY_KEY,
    x402::{SettleRequest, SettleResponse, SupportedResponse, VerifyRequest, VerifyResponse},
};

use super::{
    FacilitatorClient,
    http::{retry_after, status_error, transport},
};
use crate::{Error, Result};

/// What `POST /authorize` or a settlement's status URL answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authorization {
    /// 200: the transfer is confirmed; the proof is issued.
    Confirmed(Box<AuthorizeResponse>),
    /// 202: broadcast, not confirmed yet; poll its status URL.
    Pending(PendingResponse),
}

impl FacilitatorClient {
    /// `POST /authorize`: settles the client-signed transfer and answers the proof once it is
    /// confirmed, or where to poll. The same body again (the same authorization) answers the
    /// same settlement: it is safe to resend while the outcome is unknown.
    pub async fn authorize(&self, req: &AuthorizeRequest) -> Result<Authorization> {
        let url = self.url("/authorize");
        let sent = self.inner.http.post(&url).json(req).send().await;
        self.authorization(url, sent).await
    }

    /// `GET` on a settlement's status URL (as [`PendingResponse::status_url`] or
    /// [`status_url`](Self::status_url) give it).
    pub async fn settlement_at(&self, status_url: &str) -> Result<Authorization> {
        let sent = self.inner.http.get(status_url).send().await;
        self.authorization(status_url.to_owned(), sent).await
    }

    /// `GET /settlements/{key}`: where the settlement of `key`
    /// ([`tollgate_protocol::api::authorize::settlement_key`]) stands; `token` is
    /// `keccak256(claim)` when it was authorized with a claim.
    pub async fn settlement(&self, key: B256, token: Option<B256>) -> Result<Authorization> {
        let url = self.url(&format!("/settlements/{key}"));
        let sent = self
            .inner
            .http
            .get(&url)
            .query(&StatusQuery { token })
            .send()
            .await;
        self.authorization(url, sent).await
    }

    /// The status URL of the settlement `key` for the holder of `claim`:
    /// `{base}/settlements/{key}?token=keccak256(claim)`.
    pub fn status_url(&self, key: B256, claim: B256) -> String {
        format!(
            "{}/settlements/{key}?token={}",
            self.inner.base,
            keccak256(claim)
        )
    }

    /// A settlement answer: 200 confirmed, 202 pending, anything else an error.
    async fn authorization(
        &self,
        url: String,
        sent: reqwest::Result<Response>,
    ) -> Result<Authorization> {
        let response = sent.map_err(|e| transport(&url, e))?;
        let status = response.status();
        let wait = retry_after(&response);
        let body = self.read_body(&url, response, status).await?;
        let decode = |source| Error::Decode {
            url: url.clone(),
            status: status.as_u16(),
            source,
        };
        match status {
            StatusCode::OK => serde_json::from_slice(&body)
                .map(|r| Authorization::Confirmed(Box::new(r)))
                .map_err(decode),
            StatusCode::ACCEPTED => serde_json::from_slice(&body)
                .map(Authorization::Pending)
                .map_err(decode),
            _ => Err(status_error(url.clone(), status, wait, &body)),
        }
    }

    /// `POST /proofs/verify`: whether this facilitator issued the proof (base64, as
    /// `X-PAYMENT` carries it) for a confirmed settlement, unexpired.
    pub async fn verify_proof(&self, proof: &str) -> Result<VerifyProofResponse> {
        let body = VerifyProofRequest {
            proof: proof.to_owned(),
        };
        self.post("/proofs/verify", &body).await
    }

    /// `POST /verify`: checks an x402 payment against its requirements without settling it.
    pub async fn verify(&self, req: &VerifyRequest) -> Result<VerifyResponse> {
        self.post("/verify", req).await
    }

    /// `POST /settle`: settles an x402 payment. `idempotency_key` names the settler (sent as
    /// `Idempotency-Key`): its retries of the same payload get the first outcome again.
    pub async fn settle(
        &self,
        req: &SettleRequest,
        idempotency_key: Option<&str>,
    ) -> Result<SettleResponse> {
        let url = self.url("/settle");
        let mut rb = self.inner.http.post(&url);
        if let Some(key) = idempotency_key {
            rb = rb.header(IDEMPOTENCY_KEY, key);
        }
        self.send(url, rb.json(req)).await
    }

    /// `GET /supported`: the x402 kinds the facilitator settles.
    pub async fn supported(&self) -> Result<SupportedResponse> {
        self.get("/supported").await
    }
}
