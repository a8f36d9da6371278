//! The proxy to the upstream API: requests and responses streamed both ways, hop-by-hop headers
//! dropped, upstream failures answered 502 or 504.

use std::time::Duration;

use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, HeaderName, StatusCode, header},
    response::Response,
};

use tollgate_protocol::ApiErrorCode;
use tollgate_server::refusal;

use crate::{Error, Result};

/// The upstream API and the HTTP client that reaches it.
#[derive(Clone, Debug)]
pub(crate) struct Upstream {
    base: String,
    http: reqwest::Client,
}

impl Upstream {
    /// The upstream at `base`, each request bounded by `timeout`.
    pub(crate) fn new(base: &str, timeout: Duration) -> Result<Self> {
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .map_err(|e| Error::Invalid(format!("upstream client: {e}")))?,
        })
    }
}

impl Upstream {
    /// An MCP tool's call: `GET path?args` (each argument a query parameter, strings as they
    /// are, other values as JSON) or `POST path` with the arguments as a JSON body. The status
    /// and the body as text.
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        args: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> reqwest::Result<(u16, String)> {
        let url = format!("{}{path}", self.base);
        let args = args.unwrap_or_default();
        let req = if method.eq_ignore_ascii_case("GET") {
            let query: Vec<(String, String)> = args
                .into_iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => (k, s),
                    other => (k, other.to_string()),
                })
                .collect();
            self.http.get(url).query(&query)
        } else {
            self.http
                .post(url)
                .header(header::CONTENT_TYPE, "application/json")
                .body(serde_json::Value::Object(args).to_string())
        };
        let response = req.send().await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }
}

/// Headers that belong to one hop (RFC 9110 §7.6.1) and never pass through a proxy.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

fn copy_headers(from: &HeaderMap, skip_host: bool) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(from.len());
    for (name, value) in from {
        if HOP_BY_HOP.contains(name)
            || name == header::TRANSFER_ENCODING
            || (skip_host && name == header::HOST)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

pub(crate) async fn proxy(State(up): State<Upstream>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path_and_query}", up.base);
    let request = up
        .http
        .request(parts.method.clone(), &url)
        .headers(copy_headers(&parts.headers, true))
        .body(reqwest::Body::wrap_stream(body.into_data_stream()));
    match request.send().await {
        Ok(resp) => {
            let status = resp.status();
            let headers = copy_headers(resp.headers(), false);
            let mut out = Response::new(Body::from_stream(resp.bytes_stream()));
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            out
        }
        Err(e) => {
            tracing::error!(%url, error = %e, "upstream request failed");
            let status = if e.is_timeout() {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            let code = if status == StatusCode::GATEWAY_TIMEOUT {
                ApiErrorCode::UpstreamTimeout
            } else {
                ApiErrorCode::UpstreamUnavailable
            };
            refusal(status, code, "the upstream API is unavailable")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "close".parse().unwrap());
        h.insert(header::HOST, "x".parse().unwrap());
        h.insert("x-custom", "1".parse().unwrap());
        let out = copy_headers(&h, true);
        assert!(out.get(header::CONNECTION).is_none() && out.get(header::HOST).is_none());
        assert_eq!(out.get("x-custom").unwrap(), "1");
    }
}
