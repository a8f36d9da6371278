//! The plumbing every call shares: URLs, the API key, sending, reading a bounded answer and
//! turning an error answer into [`Error::Status`].

use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use secrecy::ExposeSecret as _;
use serde::{Serialize, de::DeserializeOwned};
use tollgate_protocol::ApiErrorBody;

use super::FacilitatorClient;
use crate::{Error, Result};

impl FacilitatorClient {
    /// `{base}{path}`.
    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.inner.base)
    }

    /// `{base}/seg/seg/…`, each segment percent-escaped.
    pub(super) fn segments(&self, segments: &[&str]) -> Result<String> {
        let mut url = reqwest::Url::parse(&self.inner.base).map_err(|e| Error::InvalidUrl {
            url: self.inner.base.clone(),
            problem: e.to_string(),
        })?;
        url.path_segments_mut()
            .map_err(|()| Error::InvalidUrl {
                url: self.inner.base.clone(),
                problem: "cannot take a path".into(),
            })?
            .pop_if_empty()
            .extend(segments);
        Ok(url.into())
    }

    /// `rb` with the API key as `Authorization: Bearer`; [`Error::MissingApiKey`] without one.
    pub(super) fn authorized(&self, rb: RequestBuilder) -> Result<RequestBuilder> {
        let key = self.inner.api_key.as_ref().ok_or(Error::MissingApiKey)?;
        Ok(rb.bearer_auth(key.expose_secret()))
    }

    /// `GET {base}{path}`, its JSON answer.
    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = self.url(path);
        let rb = self.inner.http.request(Method::GET, &url);
        self.send(url, rb).await
    }

    /// `POST {base}{path}` with a JSON `body`, its JSON answer.
    pub(super) async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T> {
        let url = self.url(path);
        let rb = self.inner.http.post(&url).json(body);
        self.send(url, rb).await
    }

    /// Sends `rb` and reads a 2xx JSON answer.
    pub(super) async fn send<T: DeserializeOwned>(
        &self,
        url: String,
        rb: RequestBuilder,
    ) -> Result<T> {
        let response = rb.send().await.map_err(|e| transport(&url, e))?;
        let status = response.status();
        let wait = retry_after(&response);
        let body = self.read_body(&url, response, status).await?;
        if !status.is_success() {
            return Err(status_error(url, status, wait, &body));
        }
        serde_json::from_slice(&body).map_err(|source| Error::Decode {
            url,
            status: status.as_u16(),
            source,
        })
    }

    /// Sends `rb` and expects a 2xx answer whose body is ignored.
    pub(super) async fn send_empty(&self, url: String, rb: RequestBuilder) -> Result<()> {
        let response = rb.send().await.map_err(|e| transport(&url, e))?;
        let status = response.status();
        let wait = retry_after(&response);
        let body = self.read_body(&url, response, status).await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(status_error(url, status, wait, &body))
        }
    }

    /// The answer's body, at most `max_answer` bytes. An error answer's body that cannot be read
    /// whole is empty (the status says enough).
    pub(super) async fn read_body(
        &self,
        url: &str,
        response: Response,
        status: StatusCode,
    ) -> Result<Vec<u8>> {
        let limit = self.inner.max_answer;
        match read_limited(response, limit).await {
            Ok(Some(body)) => Ok(body),
            _ if !status.is_success() => Ok(Vec::new()),
            Ok(None) => Err(Error::TooLarge {
                url: url.to_owned(),
                limit,
            }),
            Err(e) => Err(transport(url, e)),
        }
    }
}

/// The `?network=` query (absent: the facilitator's only network of its kind), as the caller
/// spelled it: the facilitator refuses a value of no network's form with 400.
pub(super) fn network_query(network: Option<&str>) -> Vec<(&'static str, &str)> {
    network.map(|n| ("network", n)).into_iter().collect()
}

/// Reads at most `limit` bytes of a response's body; `None` when it is longer (a declared
/// `Content-Length` over the limit is refused before anything is read).
///
/// What the client reads every answer with, for callers that bound other bodies the same way
/// (the agent's 402 terms).
pub async fn read_limited(
    mut response: Response,
    limit: usize,
) -> reqwest::Result<Option<Vec<u8>>> {
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

/// A transport failure of one attempt: a connection refused never reached the facilitator.
pub(super) fn transport(url: &str, source: reqwest::Error) -> Error {
    let url = url.to_owned();
    if source.is_connect() {
        Error::Transport {
            url,
            source,
            never_sent: true,
        }
    } else if source.is_timeout() {
        Error::Timeout { url, source }
    } else {
        Error::Transport {
            url,
            never_sent: source.is_builder(),
            source,
        }
    }
}

/// An answer's `Retry-After`, when it gives a number of seconds.
pub(super) fn retry_after(response: &Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    value
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
        .map(Duration::from_secs)
}

/// [`Error::Status`] for a non-2xx answer, with the error body when it is one and the
/// answer's `Retry-After`.
pub(super) fn status_error(
    url: String,
    status: StatusCode,
    retry_after: Option<Duration>,
    body: &[u8],
) -> Error {
    let parsed = serde_json::from_slice::<ApiErrorBody>(body).ok();
    let raw = match parsed {
        Some(_) => String::new(),
        None => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    Error::Status {
        url,
        status: status.as_u16(),
        body: parsed,
        raw,
        retry_after,
    }
}

/// The local clock, in unix seconds.
pub(crate) use tollgate_protocol::unix_now;
