//! The HTTP surface: routes, handlers and the server.

use std::{future::Future, time::Instant};

use alloy::primitives::{B256, keccak256};
use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, MatchedPath, Request, State},
    http::{StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use tollgate_protocol::{
    Amount, AuthorizeRequest, AuthorizeResponse, PaymentProof, PendingResponse, SettlementStatus,
    api::{
        authorize::{StatusQuery, VerifyProofRequest, VerifyProofResponse},
        discovery::{NONCE_DERIVATION, NetworkInfo, WellKnown},
        health::{Health, Readiness},
    },
};

use crate::{
    error::{ApiError, ApiJson, ApiPath, ApiQuery, Error, Result},
    facilitator::{Facilitator, unix_now},
    settle::Outcome,
};

/// Default request body limit (64 KiB).
pub const DEFAULT_MAX_BODY: usize = 64 * 1024;

/// The facilitator's router.
pub fn router(f: Facilitator) -> Router {
    let app = Router::new()
        .route("/authorize", post(authorize))
        .route("/settlements/{key}", get(settlement_status))
        .route("/subscriptions", post(crate::subscriptions::create))
        .route("/subscriptions/quote", get(crate::subscriptions::quote))
        .route("/subscriptions/{id}", get(crate::subscriptions::show))
        .route(
            "/subscriptions/{id}/usage",
            get(crate::metering::show).post(crate::metering::deduct),
        )
        .route(
            "/subscriptions/{id}/allowance",
            post(crate::metering::raise),
        )
        .route(
            "/webhooks/endpoints",
            get(crate::webhooks::list).post(crate::webhooks::create),
        )
        .route(
            "/webhooks/endpoints/{id}",
            get(crate::webhooks::show)
                .patch(crate::webhooks::update)
                .delete(crate::webhooks::delete),
        )
        .route(
            "/webhooks/endpoints/{id}/rotate",
            post(crate::webhooks::rotate),
        )
        .route(
            "/webhooks/endpoints/{id}/deliveries",
            get(crate::webhooks::deliveries),
        )
        .route(
            "/webhooks/endpoints/{id}/deliveries/{event_id}/redeliver",
            post(crate::webhooks::redeliver),
        )
        .route("/events", get(crate::webhooks::events))
        .route("/analytics", get(crate::analytics::show))
        .route("/dashboard", get(crate::dashboard::show))
        .route(
            "/dashboard/login",
            get(crate::dashboard::login_form).post(crate::dashboard::login),
        )
        .route("/dashboard/logout", post(crate::dashboard::logout))
        .route("/providers/challenge", post(crate::providers::challenge))
        .route("/providers/register", post(crate::providers::register))
        .route("/providers/keys/revoke", post(crate::providers::revoke))
        .route("/plans", post(crate::plans::create))
        .route("/plans/{id}", get(crate::plans::show))
        .route("/plans/{id}/deprecate", post(crate::plans::deprecate))
        .route("/proofs/verify", post(verify_proof))
        .route("/verify", post(crate::x402::verify))
        .route("/settle", post(crate::x402::settle))
        .route("/supported", get(crate::x402::supported))
        .route("/.well-known/tollgate", get(well_known))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .fallback(|| async { Error::NotFound("no such endpoint; see /openapi.json".into()) });
    // Inside the metrics layer, so that rate-limited and timed-out requests are counted too.
    f.settings()
        .server
        .layer(app)
        .layer(middleware::from_fn_with_state(f.clone(), observe))
        .layer(DefaultBodyLimit::max(f.settings().max_body_bytes))
        .with_state(f)
}

/// Serves `f` on `listener` under its [`Settings::server`](crate::Settings::server) limits until
/// `shutdown` resolves; in-flight requests (settlements included) finish first.
pub async fn serve(
    f: Facilitator,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Unfinished `/authorize` settlements (a crash, a slow chain) are driven to their end in the
    // background; the task stops with the server.
    let sweeper = tokio::spawn({
        let f = f.clone();
        async move {
            loop {
                tokio::time::sleep(RECONCILE_EVERY).await;
                f.reconcile().await;
            }
        }
    });
    let _stop_sweeper = AbortOnDrop(sweeper);
    let limits = f.settings().server.clone();
    tollgate_server::serve_prepared(listener, router(f), &limits, shutdown).await
}

/// How often unfinished settlements are driven forward in the background.
const RECONCILE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Stops a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn observe(State(f): State<Facilitator>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let started = Instant::now();
    let response = next.run(req).await;
    f.metrics()
        .http_request(&route, response.status().as_u16(), started.elapsed());
    response
}

/// The answer to `/authorize` or the status URL; a pending one names the status URL, with the
/// claim's `token` when there is one.
fn outcome_response(f: &Facilitator, outcome: Outcome, token: Option<B256>) -> Response {
    match outcome {
        Outcome::Confirmed { proof, payment } => (
            StatusCode::OK,
            Json(AuthorizeResponse {
                status: SettlementStatus::Confirmed,
                proof,
                payment: *payment,
            }),
        )
            .into_response(),
        Outcome::Pending { key, tx_hash } => {
            let status_url = format!(
                "{}/settlements/{key}{}",
                f.settings().public_url.trim_end_matches('/'),
                token.map(|t| format!("?token={t}")).unwrap_or_default()
            );
            (
                StatusCode::ACCEPTED,
                [(header::LOCATION, status_url.clone())],
                Json(PendingResponse {
                    status: SettlementStatus::Pending,
                    tx_hash,
                    status_url,
                }),
            )
                .into_response()
        }
    }
}

async fn authorize(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<AuthorizeRequest>,
) -> Result<Response> {
    let outcome = f.authorize(&req).await?;
    Ok(outcome_response(&f, outcome, req.claim.map(keccak256)))
}

async fn settlement_status(
    State(f): State<Facilitator>,
    ApiPath(key): ApiPath<String>,
    ApiQuery(query): ApiQuery<StatusQuery>,
) -> Result<Response> {
    let key: B256 = key
        .parse()
        .map_err(|_| Error::InvalidField("key: expected a 0x-prefixed 32-byte hex value".into()))?;
    let outcome = f.settlement_status(key, query.token).await?;
    Ok(outcome_response(&f, outcome, query.token))
}

/// `POST /proofs/verify`: for gates that prefer to ask. Checks the proof's signature against this
/// facilitator's proof signer, its expiry, and that this facilitator issued it for a confirmed
/// settlement.
async fn verify_proof(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<VerifyProofRequest>,
) -> Result<Json<VerifyProofResponse>> {
    let invalid = |reason: String, payment: Option<PaymentProof>| {
        Json(VerifyProofResponse {
            valid: false,
            reason: Some(reason),
            payment,
        })
    };
    let proof = match PaymentProof::decode(&req.proof) {
        Ok(p) => p,
        Err(e) => return Ok(invalid(e.to_string(), None)),
    };
    match tollgate_chain::proof::recover(&proof) {
        Ok(signer) if signer == f.proof_signer() && proof.signer == signer => {}
        Ok(_) => {
            return Ok(invalid(
                "not signed by this facilitator's proof key".into(),
                Some(proof),
            ));
        }
        Err(e) => return Ok(invalid(format!("signature: {e}"), Some(proof))),
    }
    if proof.expiry <= unix_now() {
        return Ok(invalid("the proof has expired".into(), Some(proof)));
    }
    let key = crate::settle::settlement_key(
        proof.chain_id,
        proof.token,
        proof.payer,
        tollgate_chain::authorization::router_nonce(proof.pay_to, proof.memo, proof.fee.get()),
    );
    match f.store().settlement(key).await? {
        Some(row)
            if row.status == SettlementStatus::Confirmed && row.tx_hash == Some(proof.tx_hash) =>
        {
            Ok(Json(VerifyProofResponse {
                valid: true,
                reason: None,
                payment: Some(proof),
            }))
        }
        _ => Ok(invalid(
            "no confirmed settlement matches this proof".into(),
            Some(proof),
        )),
    }
}

async fn well_known(State(f): State<Facilitator>) -> Json<WellKnown> {
    let mut networks = std::collections::BTreeMap::new();
    for n in f.networks() {
        // The chain's clock, read now (devnets travel in time): clients sign validity windows
        // by it, since this facilitator and the token check them by it.
        let chain_time = match f.network(&n.name) {
            Some(net) => match net.chain.timestamp().await {
                Ok(t) => t.max(unix_now()),
                Err(_) => net.now().await,
            },
            None => unix_now(),
        };
        networks.insert(
            n.name.clone(),
            NetworkInfo {
                chain_id: n.chain_id,
                chain_time: Some(chain_time),
                confirmations: n.confirmations,
                decimals: 6,
                fee: Amount(f.settings().fee),
                router: n.router,
                subscriptions: n.subscriptions,
                token: n.token,
                token_name: n.token_name.clone(),
                token_version: n.token_version.clone(),
            },
        );
    }
    Json(WellKnown {
        facilitator: f.settings().public_url.clone(),
        networks,
        nonce: NONCE_DERIVATION.to_owned(),
        proof_signers: vec![f.proof_signer()],
        x402_version: 1,
    })
}

async fn healthz() -> Json<Health> {
    Json(Health::ok())
}

/// Ready when every chain answers and the store takes a write.
async fn readyz(State(f): State<Facilitator>) -> Response {
    let mut checks = std::collections::BTreeMap::new();
    let mut ready = true;
    for n in f.inner.networks.values() {
        let ok = n.chain.block_number().await;
        ready &= ok.is_ok();
        checks.insert(
            format!("chain:{}", n.spec.name),
            ok.map(|b| format!("block {b}"))
                .unwrap_or_else(|e| e.to_string()),
        );
    }
    let store = f.store().ping().await;
    ready &= store.is_ok();
    checks.insert(
        "store".into(),
        store.map(|()| "writable".to_owned()).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "store not ready");
            "unavailable".to_owned()
        }),
    );
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(Readiness { checks, ready })).into_response()
}

async fn metrics(State(f): State<Facilitator>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        f.metrics().render(),
    )
        .into_response()
}

async fn openapi(State(f): State<Facilitator>) -> Json<serde_json::Value> {
    Json(crate::openapi::document(&f.settings().public_url))
}
