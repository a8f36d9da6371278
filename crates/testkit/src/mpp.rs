//! An MPP-only resource server on loopback (feature `facilitator`), for testing MPP clients
//! against the real settlement path: `GET /paid` answers 402 with one EVM `charge` challenge
//! (`WWW-Authenticate: Payment …`, issued with [`Challenge::issue`] under a random key) and no
//! x402 terms, checks a credential as mppx's server does (HMAC, expiry, recipient, amount,
//! challenge-bound nonce, source), and settles it through a facilitator's x402 V1 `POST /settle`
//! ([`tollgate_protocol::mpp::AuthorizationPayload::to_x402_payload`]): a real transfer on the
//! chain. A settled request is answered 200 with a `Payment-Receipt`.

use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher as _, Hasher as _},
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse as _, Response},
    routing::get,
};
use tokio::{net::TcpListener, task::JoinHandle};
use tollgate_chain::{Address, U256};
use tollgate_protocol::{
    Amount, Network,
    headers::{PAYMENT_RECEIPT, WWW_AUTHENTICATE, X_PAYMENT_RETRY},
    mpp::{
        ChallengeKey, ChargeRequest, Credential, PROBLEM_CONTENT_TYPE, Problem, ProblemType,
        Receipt,
    },
    x402::{PaymentRequirements, SCHEME_EXACT, SettleRequest, SettleResponse},
};

use crate::signing::{TOKEN_NAME, TOKEN_VERSION};

pub use tollgate_protocol::mpp::Challenge;

/// The realm of [`MppServer`]'s challenges.
pub const REALM: &str = "mpp.test";

/// How an [`MppServer`] charges and settles.
#[derive(Clone, Debug)]
pub struct MppTerms {
    /// The facilitator settling credentials (`POST {facilitator}/settle`, x402 V1).
    pub facilitator: String,
    /// The network's x402 V1 name at that facilitator.
    pub network: String,
    /// The challenge's chain.
    pub chain_id: u64,
    /// The challenge's `currency` (an EIP-3009 token named [`TOKEN_NAME`] version
    /// [`TOKEN_VERSION`]).
    pub token: Address,
    /// The challenge's `recipient`.
    pub pay_to: Address,
    /// The price, in the token's smallest unit.
    pub amount: u64,
    /// Seconds from now to the challenge's `expires` (negative: already expired).
    pub expires_in: i64,
    /// Answer the first credential 503 pending (with its `X-PAYMENT-RETRY` and `Retry-After: 0`)
    /// before settling anything, and settle it when it comes again.
    pub pending_once: bool,
    /// Refuse every credential with this problem, settling nothing.
    pub refuse_with: Option<ProblemType>,
}

impl MppTerms {
    /// Terms of `amount` to `pay_to` in `token` on `network` (`chain_id`), settled through
    /// `facilitator`, expiring in five minutes as mppx's do.
    pub fn new(
        facilitator: &str,
        network: &str,
        chain_id: u64,
        token: Address,
        pay_to: Address,
        amount: u64,
    ) -> Self {
        Self {
            facilitator: facilitator.trim_end_matches('/').to_owned(),
            network: network.to_owned(),
            chain_id,
            token,
            pay_to,
            amount,
            expires_in: 300,
            pending_once: false,
            refuse_with: None,
        }
    }
}

#[derive(Clone)]
struct ServerState {
    terms: MppTerms,
    key: ChallengeKey,
    http: reqwest::Client,
    seen: Arc<Mutex<Vec<String>>>,
    served: Arc<Mutex<usize>>,
}

/// The server: see the module docs. Dropping it stops it.
#[derive(Debug)]
pub struct MppServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    seen: Arc<Mutex<Vec<String>>>,
    served: Arc<Mutex<usize>>,
    task: JoinHandle<()>,
}

impl MppServer {
    /// Serves `GET /paid` on `terms` on a loopback port.
    ///
    /// # Panics
    /// If no loopback port can be bound.
    pub async fn start(terms: MppTerms) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::new(Mutex::new(0));
        let state = ServerState {
            terms,
            key: ChallengeKey::new(random_key()),
            http: reqwest::Client::new(),
            seen: Arc::clone(&seen),
            served: Arc::clone(&served),
        };
        let app = Router::new().route("/paid", get(paid)).with_state(state);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            seen,
            served,
            task,
        }
    }

    /// The URL of the paid resource.
    pub fn paid_url(&self) -> String {
        format!("{}/paid", self.url)
    }

    /// Every `Authorization` value received, in order.
    pub fn credentials(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many requests were served after a settlement.
    pub fn served(&self) -> usize {
        *self.served.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for MppServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// 32 random bytes from the standard library's randomly seeded hasher.
fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    for chunk in key.chunks_mut(8) {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(0);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    key
}

fn now_ms() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A problem answer, with a fresh challenge as mppx sends with every refusal.
fn problem(state: &ServerState, t: ProblemType, detail: &str) -> Response {
    let challenge = issue(state);
    let body = Problem::new(t, detail, Some(challenge.id.clone()));
    let mut response = (
        StatusCode::from_u16(t.status()).unwrap_or(StatusCode::PAYMENT_REQUIRED),
        serde_json::to_string(&body).unwrap_or_default(),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(&challenge.to_header_value()) {
        headers.insert(WWW_AUTHENTICATE, v);
    }
    response
}

fn issue(state: &ServerState) -> Challenge {
    let t = &state.terms;
    let request = ChargeRequest::new(
        Amount::from_units(t.amount),
        t.token,
        t.pay_to,
        t.chain_id,
        6,
    );
    let expires = i128::from(now_ms()) + i128::from(t.expires_in) * 1000;
    let expires = u64::try_from(expires.max(0)).unwrap_or(0);
    Challenge::issue(&state.key, REALM, &request, expires, None, Some("a quote"))
}

async fn paid(State(state): State<ServerState>, headers: HeaderMap) -> Response {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return problem(&state, ProblemType::PaymentRequired, "Payment is required.");
    };
    let first = {
        let mut seen = state.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.push(value.to_owned());
        seen.len() == 1
    };
    let credential = match Credential::from_authorization(value) {
        Some(Ok(c)) => c,
        _ => {
            return problem(
                &state,
                ProblemType::MalformedCredential,
                "Credential is malformed.",
            );
        }
    };
    let t = &state.terms;
    if let Some(refusal) = t.refuse_with {
        return problem(
            &state,
            refusal,
            "Payment verification failed: refused by the test.",
        );
    }
    let c = &credential.challenge;
    if !c.is_authentic(&state.key) {
        return problem(
            &state,
            ProblemType::InvalidChallenge,
            "challenge was not issued by this server",
        );
    }
    let now = now_ms() / 1000;
    if c.expires_unix().ok().flatten().is_none_or(|e| e <= now) {
        return problem(&state, ProblemType::PaymentExpired, "Payment expired.");
    }
    let p = &credential.payload;
    let checks = [
        (p.to == t.pay_to, "recipient mismatch"),
        (p.value == U256::from(t.amount), "amount mismatch"),
        (
            p.nonce == c.authorization_nonce(),
            "challenge hash mismatch",
        ),
        (
            credential.source.as_deref() == Some(&Credential::source_for(t.chain_id, p.from)),
            "source mismatch",
        ),
    ];
    if let Some((_, why)) = checks.iter().find(|(ok, _)| !ok) {
        return problem(
            &state,
            ProblemType::VerificationFailed,
            &format!("Payment verification failed: EVM authorization {why}."),
        );
    }
    if t.pending_once && first {
        let token = headers
            .get(X_PAYMENT_RETRY)
            .cloned()
            .unwrap_or(HeaderValue::from_static(
                "0x0000000000000000000000000000000000000000000000000000000000000001",
            ));
        let mut response = (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"error":"SettlementPending","message":"settling","retryAfter":0}"#,
        )
            .into_response();
        response.headers_mut().insert(X_PAYMENT_RETRY, token);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("0"));
        return response;
    }
    let Ok(network) = Network::parse(t.network.clone()) else {
        return problem(&state, ProblemType::InternalPaymentError, "bad network");
    };
    let requirements = PaymentRequirements {
        scheme: SCHEME_EXACT.to_owned(),
        network: network.clone(),
        max_amount_required: Amount::from_units(t.amount),
        resource: "http://mpp.test/paid".to_owned(),
        description: "a quote".to_owned(),
        mime_type: "application/json".to_owned(),
        pay_to: t.pay_to,
        max_timeout_seconds: 300,
        asset: t.token,
        output_schema: None,
        extra: Some(serde_json::json!({ "name": TOKEN_NAME, "version": TOKEN_VERSION })),
    };
    let body = SettleRequest::new(p.to_x402_payload(network), requirements);
    let answer = state
        .http
        .post(format!("{}/settle", t.facilitator))
        .header(header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).unwrap_or_default())
        .send()
        .await;
    let settled = match answer {
        Ok(a) => a.bytes().await.ok(),
        Err(_) => None,
    };
    let settled: Option<SettleResponse> = settled.and_then(|b| serde_json::from_slice(&b).ok());
    match settled {
        Some(s) if s.success => {
            *state.served.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            let receipt = Receipt::evm(s.transaction, now_ms());
            let mut response = (StatusCode::OK, r#"{"quote":42}"#).into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
            if let Ok(v) = HeaderValue::from_str(&receipt.encode()) {
                headers.insert(PAYMENT_RECEIPT, v);
            }
            response
        }
        other => problem(
            &state,
            ProblemType::VerificationFailed,
            &format!(
                "Payment verification failed: {}.",
                other
                    .and_then(|s| s.error_reason.map(|r| format!("{r:?}")))
                    .unwrap_or_else(|| "EVM facilitator settlement failed".into())
            ),
        ),
    }
}
