//! The facilitator as the agent sees it: `GET /.well-known/tollgate` and `POST /authorize`.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, U256, keccak256},
    sol_types::SolValue,
};
use reqwest::StatusCode;
use serde::Deserialize;
use tollgate_protocol::{Amount, AuthorizeResponse, PendingResponse, network};

use crate::{Error, Result};

/// The parts of `GET /.well-known/tollgate` an agent needs.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WellKnown {
    /// Addresses whose proofs this facilitator issues.
    #[serde(default)]
    pub(crate) proof_signers: Vec<Address>,
    /// Per network name.
    pub(crate) networks: HashMap<String, NetworkInfo>,
    /// The agent's clock (unix seconds) when the document was read: with each network's
    /// `chainTime`, the offset between the chain's clock and the agent's.
    #[serde(skip)]
    pub(crate) read_at: u64,
}

/// One network of the facilitator.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NetworkInfo {
    /// EIP-155 chain id.
    pub(crate) chain_id: u64,
    /// The token settled.
    pub(crate) token: Address,
    /// Its EIP-712 domain name.
    pub(crate) token_name: String,
    /// Its EIP-712 domain version.
    pub(crate) token_version: String,
    /// The payment router the authorization pays.
    pub(crate) router: Address,
    /// The fee the router nonce commits to.
    pub(crate) fee: Amount,
    /// The subscriptions contract, if the network has one.
    #[serde(default)]
    pub(crate) subscriptions: Option<Address>,
    /// The chain's clock (unix seconds) when the document was served; absent from facilitators
    /// that do not publish it.
    #[serde(default)]
    pub(crate) chain_time: Option<u64>,
}

impl WellKnown {
    /// The entry for `name` (exact, or the same network under an alias).
    pub(crate) fn network(&self, name: &str) -> Option<&NetworkInfo> {
        self.networks.get(name).or_else(|| {
            self.networks
                .iter()
                .find(|(n, _)| network::same_network(n, name))
                .map(|(_, info)| info)
        })
    }

    /// "Now" on `net`'s chain, given the agent's clock `local_now`: the chain's time as
    /// published, moved on by what the agent's clock moved since (the offset between the two
    /// clocks holds however long the document is cached, until the chain jumps). Without a
    /// published time, the agent's clock.
    pub(crate) fn chain_now(&self, net: &NetworkInfo, local_now: u64) -> u64 {
        match net.chain_time {
            Some(chain) => {
                let now = i128::from(chain) + i128::from(local_now) - i128::from(self.read_at);
                u64::try_from(now.max(0)).unwrap_or(u64::MAX)
            }
            None => local_now,
        }
    }
}

/// The status URL of the settlement of an authorization from `from` with `nonce`, on the
/// chain `chain_id`, of `token`, through the facilitator at `base`, for the holder of `claim`:
/// `{base}/settlements/{key}?token=keccak256(claim)`, where the key is the facilitator's
/// idempotency key `keccak256(abi.encode(chainId, token, from, nonce))`.
pub(crate) fn status_url(
    base: &str,
    chain_id: u64,
    token: Address,
    from: Address,
    nonce: B256,
    claim: B256,
) -> String {
    let key = keccak256((U256::from(chain_id), token, from, nonce).abi_encode());
    format!("{base}/settlements/{key}?token={}", keccak256(claim))
}

/// The facilitator's error body.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Debug, Deserialize)]
struct ErrorDetail {
    code: String,
    #[serde(default)]
    message: String,
}

/// The typed error for a non-success facilitator answer: `InsufficientFunds` by name, anything
/// else as [`Error::Facilitator`].
pub(crate) fn error_from(status: StatusCode, body: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody { error }) if error.code == "InsufficientFunds" => Error::InsufficientFunds {
            message: error.message,
        },
        Ok(ErrorBody { error }) => Error::Facilitator {
            status: status.as_u16(),
            code: error.code,
            message: error.message,
        },
        Err(_) => Error::Facilitator {
            status: status.as_u16(),
            code: "Unreadable".into(),
            message: String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
        },
    }
}

/// What `POST /authorize` or the status URL said.
#[derive(Debug)]
pub(crate) enum Answer {
    /// 200: confirmed, with the proof.
    Confirmed(Box<AuthorizeResponse>),
    /// 202: broadcast, poll here.
    Pending(PendingResponse),
}

/// Reads an `/authorize` or status answer.
pub(crate) fn answer(status: StatusCode, body: &[u8]) -> Result<Answer> {
    let unreadable = |e: serde_json::Error| Error::Facilitator {
        status: status.as_u16(),
        code: "Unreadable".into(),
        message: format!("unexpected answer: {e}"),
    };
    match status {
        StatusCode::OK => serde_json::from_slice(body)
            .map(|r| Answer::Confirmed(Box::new(r)))
            .map_err(unreadable),
        StatusCode::ACCEPTED => serde_json::from_slice(body)
            .map(Answer::Pending)
            .map_err(unreadable),
        _ => Err(error_from(status, body)),
    }
}

/// The next poll delay: doubling from 100 ms up to 2 s.
pub(crate) fn backoff(previous: Duration) -> Duration {
    (previous * 2).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

/// What [`post_until_answered`] got.
pub(crate) struct Posted {
    /// The last answer, or the last transport error.
    pub(crate) sent: reqwest::Result<reqwest::Response>,
    /// Whether the request certainly never reached the facilitator (the first and only attempt
    /// could not connect): then nothing can have happened.
    pub(crate) never_sent: bool,
}

/// POSTs `body` to `url`, sending **the same body** again while its outcome is unknown — the
/// connection broke after the request left, a timeout, or a 502/503/504 (a facilitator
/// restarting, or behind a proxy) — with backoff until `deadline`. Every facilitator operation
/// the agent posts is idempotent per signed body (`/authorize` per authorization nonce,
/// `/subscriptions` per intent nonce), so a repeat returns the first outcome and never acts
/// twice; signing anew instead could pay twice for one request.
pub(crate) async fn post_until_answered<T: serde::Serialize + ?Sized>(
    http: &reqwest::Client,
    url: &str,
    body: &T,
    deadline: Instant,
) -> Posted {
    let mut delay = Duration::ZERO;
    let mut attempts = 0u32;
    loop {
        let sent = http.post(url).json(body).send().await;
        attempts += 1;
        let unknown = match &sent {
            Err(e) if attempts == 1 && e.is_connect() => false,
            Err(e) => !e.is_builder(),
            Ok(r) => matches!(
                r.status(),
                StatusCode::BAD_GATEWAY
                    | StatusCode::SERVICE_UNAVAILABLE
                    | StatusCode::GATEWAY_TIMEOUT
            ),
        };
        delay = backoff(delay);
        if !unknown || Instant::now() + delay > deadline {
            let never_sent = attempts == 1 && sent.as_ref().is_err_and(reqwest::Error::is_connect);
            return Posted { sent, never_sent };
        }
        tracing::debug!(%url, attempts, "outcome unknown; sending the same request again");
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(chain_time: Option<u64>, read_at: u64) -> (WellKnown, NetworkInfo) {
        let net = NetworkInfo {
            chain_id: 1,
            token: Address::ZERO,
            token_name: "USD Coin".into(),
            token_version: "2".into(),
            router: Address::ZERO,
            fee: Amount::ZERO,
            subscriptions: None,
            chain_time,
        };
        let wk = WellKnown {
            proof_signers: Vec::new(),
            networks: HashMap::from([("n".to_owned(), net.clone())]),
            read_at,
        };
        (wk, net)
    }

    #[test]
    fn the_chain_clock_keeps_its_offset_to_the_local_one() {
        // Read at local 1000 when the chain said 1000 + 30 days; 50 s later locally.
        let (wk, net) = doc(Some(1_000 + 2_592_000), 1_000);
        assert_eq!(wk.chain_now(&net, 1_050), 1_050 + 2_592_000);
        // A chain behind the local clock.
        let (wk, net) = doc(Some(900), 1_000);
        assert_eq!(wk.chain_now(&net, 1_010), 910);
        // No published time: the local clock.
        let (wk, net) = doc(None, 1_000);
        assert_eq!(wk.chain_now(&net, 1_234), 1_234);
    }
}
