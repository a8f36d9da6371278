//! The HTTP transport to a node, which keeps the node's URL (and any credentials in it) out of
//! logs, spans and errors.

use std::{fmt, sync::Arc, time::Duration};

use alloy::{
    rpc::json_rpc::{RequestPacket, ResponsePacket},
    transports::{TransportError, TransportErrorKind, TransportFut, TransportResult},
};
use reqwest::Url;
use tracing::Instrument as _;

/// The HTTP transport to a node: JSON-RPC packets POSTed to the full URL (reqwest turns its user
/// info into `Authorization: Basic`), as alloy's `Http<reqwest::Client>` does, except that the
/// URL is never logged nor put in an error: the span names the [`redacted`] endpoint and
/// reqwest's errors lose their URL.
#[derive(Clone)]
pub(super) struct NodeTransport {
    pub(super) client: reqwest::Client,
    /// The full URL, credentials included: only ever handed to reqwest.
    pub(super) url: Arc<Url>,
    /// [`redacted`] URL.
    pub(super) endpoint: Arc<str>,
    /// HTTP requests sent (a batch of calls is one).
    pub(super) posts: Arc<std::sync::atomic::AtomicU64>,
}

impl fmt::Debug for NodeTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTransport")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Attempts of one request that a node answers `429 Too Many Requests` (hosted nodes' rate
/// limit): the first and up to four more, each after a pause ([`backoff`]).
const RATE_LIMITED_ATTEMPTS: u32 = 5;
/// The longest pause before another attempt, whatever the node's `Retry-After` asks.
const MAX_BACKOFF: Duration = Duration::from_secs(4);

/// The pause before attempt `attempt + 1` after a 429: the node's `Retry-After` when it gives one
/// (at most [`MAX_BACKOFF`]), else 250 ms doubling, with up to a quarter more at random so that
/// the requests a limit refused together do not come back together.
fn backoff(attempt: u32, retry_after: Option<Duration>) -> Duration {
    let base = retry_after.unwrap_or_else(|| Duration::from_millis(250) * 2u32.pow(attempt.min(4)));
    let base = base.min(MAX_BACKOFF);
    let jitter = base.as_millis() as u64 / 4;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    base + Duration::from_millis(if jitter == 0 { 0 } else { nanos % jitter })
}

impl NodeTransport {
    /// POSTs `packet`; a node answering `429 Too Many Requests` is asked again after a pause
    /// ([`backoff`]), at most [`RATE_LIMITED_ATTEMPTS`] times in all, within the caller's request
    /// timeout. Sending the same bytes again is safe for every call, `eth_sendRawTransaction`
    /// included: a signed transaction has one hash, and a node that took it the first time
    /// answers "already known", which counts as sent.
    async fn post(self, packet: RequestPacket) -> TransportResult<ResponsePacket> {
        let mut attempt = 0;
        loop {
            match self.post_once(&packet).await {
                Err(TransportError::Transport(kind))
                    if kind.as_http_error().is_some_and(|e| e.status == 429)
                        && attempt + 1 < RATE_LIMITED_ATTEMPTS =>
                {
                    let pause = backoff(attempt, kind.retry_after());
                    tracing::debug!(attempt, ?pause, "the node is rate limiting; asking again");
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                }
                other => return other,
            }
        }
    }

    async fn post_once(&self, packet: &RequestPacket) -> TransportResult<ResponsePacket> {
        // reqwest's errors carry the request URL (and print it): drop it.
        let transport = |e: reqwest::Error| TransportErrorKind::custom(e.without_url());
        let body = serde_json::to_vec(packet).map_err(TransportError::ser_err)?;
        let response = self
            .client
            .post(Url::clone(&self.url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .headers(packet.headers())
            .body(body)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .map(Duration::from_secs);
        tracing::debug!(%status, "node answered");
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(e) if !status.is_success() => {
                return Err(TransportErrorKind::http_error_with_retry_after(
                    status.as_u16(),
                    format!("<failed to read the body: {}>", e.without_url()),
                    retry_after,
                ));
            }
            Err(e) => return Err(transport(e)),
        };
        tracing::trace!(body = %String::from_utf8_lossy(&body), "node's answer");
        if !status.is_success() {
            // A JSON-RPC error in a non-2xx answer is still the node's answer, except a 429:
            // hosted nodes put their rate limit in a JSON-RPC error too (Alchemy's code 429,
            // Infura's -32005), and it is a pause to wait out, never the call's answer.
            if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
                return Err(TransportErrorKind::http_error_with_retry_after(
                    status.as_u16(),
                    String::from_utf8_lossy(&body).into_owned(),
                    retry_after,
                ));
            }
            return match serde_json::from_slice::<ResponsePacket>(&body) {
                Ok(packet) if packet.is_error() => Ok(packet),
                _ => Err(TransportErrorKind::http_error_with_retry_after(
                    status.as_u16(),
                    String::from_utf8_lossy(&body).into_owned(),
                    retry_after,
                )),
            };
        }
        serde_json::from_slice(&body)
            .map_err(|e| TransportError::deser_err(e, String::from_utf8_lossy(&body)))
    }
}

impl tower_service::Service<RequestPacket> for NodeTransport {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), TransportError>> {
        // reqwest's client is always ready.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, packet: RequestPacket) -> Self::Future {
        self.posts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let span = tracing::debug_span!("node", endpoint = %self.endpoint);
        Box::pin(self.clone().post(packet).instrument(span))
    }
}

/// `scheme://host:port` of a node URL: its path, query and user info may hold credentials.
pub(super) fn redacted(url: &Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!(
        "{}://{}{port}",
        url.scheme(),
        url.host_str().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_hides_path() {
        let url: Url = "https://user:pw@base.example:8443/v2/SECRET?key=1"
            .parse()
            .unwrap();
        assert_eq!(redacted(&url), "https://base.example:8443");
    }
}
