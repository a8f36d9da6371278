//! The facilitator as a gate sees it: a [`FacilitatorClient`] (its published signers and
//! networks, cached; the x402 V1 `/verify` and `/settle`; metered usage), and the mapping of
//! a refused deduction to [`DeductError`].

use std::time::Duration;

use tollgate_client::FacilitatorClient;
use tollgate_protocol::ApiErrorCode;

use crate::{BuildError, DeductError};

/// The client of one [`crate::Gate`]: each request bounded by `timeout` (connecting by at most
/// 3 s of it), the published signers trusted for `signers_ttl` and fetched at most once per
/// `signers_min_refresh` (see [`tollgate_client::discovery`]), the API key presented on the
/// provider calls only.
pub(crate) fn client(
    base: &str,
    api_key: Option<&str>,
    timeout: Duration,
    signers_ttl: Duration,
    signers_min_refresh: Duration,
) -> Result<FacilitatorClient, BuildError> {
    let mut builder = FacilitatorClient::builder(base)
        .timeouts(timeout, timeout.min(Duration::from_secs(3)))
        .discovery_cache(Some(signers_ttl), signers_min_refresh);
    if let Some(key) = api_key {
        builder = builder.api_key(key);
    }
    builder.build().map_err(|e| match e {
        tollgate_client::Error::Build(e) => BuildError::Http(e),
        other => BuildError::Invalid {
            setting: "facilitator",
            problem: other.to_string(),
        },
    })
}

/// Why a deduction failed, from the facilitator's answer: the spec's `AllowanceExhausted` and
/// `SubscriptionNotActive` by name, another refusal (4xx) as [`DeductError::Refused`], anything
/// else (no answer, a 5xx, an unreadable success) as [`DeductError::Unavailable`].
pub(crate) fn deduct_error(e: tollgate_client::Error) -> DeductError {
    if !e.is_refusal() {
        return DeductError::Unavailable(e);
    }
    let status = e.status().unwrap_or_default();
    let (code, message) = e
        .body()
        .map(|b| (b.code().clone(), b.message().to_owned()))
        .unwrap_or_else(|| (ApiErrorCode::Other(String::new()), String::new()));
    match code {
        ApiErrorCode::AllowanceExhausted => DeductError::AllowanceExhausted { message },
        ApiErrorCode::SubscriptionNotActive => DeductError::SubscriptionNotActive { message },
        code => DeductError::Refused {
            status,
            code,
            message,
        },
    }
}
