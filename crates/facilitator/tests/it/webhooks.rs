//! Webhooks through the real pieces: endpoints over the API (with the SSRF guard), events written
//! with the changes that cause them (a settlement, the chain's subscription events, a refused
//! deduction), deliveries signed per Standard Webhooks to a receiver on loopback, retried on
//! failure (honouring `Retry-After`), in order, dead-lettered, redelivered by hand, disabled on
//! 410, and kept across a restart.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::primitives::{Address, B256};
use axum::{
    Router,
    body::Bytes,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};
use serde_json::{Value, json};
use tollgate_facilitator::{
    Facilitator, Settings,
    store::{self, DeliveryState, Endpoint, NewEvent},
    webhooks::{SealError, SecretsError, SecretsKey, SecretsKeys},
};
use tollgate_protocol::webhook::{WebhookSecret, verify};

use crate::support::{Backend, Harness, PROOF_KEY, RELAYER};

mod delivery;
mod endpoints;
mod secrets;

const PROVIDER: usize = 5;
const OTHER: usize = 4;
const PAYER: usize = 1;

/// The receiver's next answers: a status and an optional `Retry-After`.
type Script = Arc<Mutex<Vec<(u16, Option<&'static str>)>>>;

/// A receiver on loopback: answers each request with the next scripted status (then 200), and
/// records what it got.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<(HeaderMap, Bytes, u16)>>>,
    script: Script,
}

impl Receiver {
    async fn start(script: Vec<(u16, Option<&'static str>)>) -> (Self, String) {
        let r = Self {
            got: Arc::default(),
            script: Arc::new(Mutex::new(script.into_iter().rev().collect())),
        };
        let state = r.clone();
        let app = Router::new().route(
            "/hook",
            post(move |headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                async move {
                    let (status, retry_after) =
                        state.script.lock().unwrap().pop().unwrap_or((200, None));
                    state.got.lock().unwrap().push((headers, body, status));
                    let mut res = StatusCode::from_u16(status).unwrap().into_response();
                    if let Some(v) = retry_after {
                        res.headers_mut().insert("retry-after", v.parse().unwrap());
                    }
                    res
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (r, url)
    }

    /// `(webhook-id, type, status)` of every request, in arrival order.
    fn seen(&self) -> Vec<(String, String, u16)> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(h, b, s)| {
                let v: Value = serde_json::from_slice(b).unwrap();
                (
                    h["webhook-id"].to_str().unwrap().to_owned(),
                    v["type"].as_str().unwrap().to_owned(),
                    *s,
                )
            })
            .collect()
    }
}

async fn key_for(h: &Harness, who: usize) -> String {
    h.api_key(who, "t").await
}

/// `POST /webhooks/endpoints` for `url` with the provider's `key`: the status and the body.
async fn add_endpoint(h: &Harness, key: &str, url: &str) -> (u16, Value) {
    let body = json!({ "url": url });
    call(h, "POST", "/webhooks/endpoints", Some(key), Some(body)).await
}

async fn call(
    h: &Harness,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("{}{path}", h.url);
    let mut r = match method {
        "GET" => h.http.get(url),
        "PATCH" => h.http.patch(url),
        "DELETE" => h.http.delete(url),
        _ => h.http.post(url),
    };
    if let Some(key) = key {
        r = r.bearer_auth(key);
    }
    if let Some(body) = body {
        r = r.json(&body);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The webhook-secrets key of these tests (the same across a "restart").
fn secrets_key() -> SecretsKey {
    SecretsKey::from_bytes([0x5e; 32])
}

fn with_key(s: &mut Settings) {
    s.webhook_secrets = Some(SecretsKeys::new(secrets_key()));
}

fn dev_mode(s: &mut Settings) {
    s.webhook_allow_private = true;
    s.webhook_retry_schedule = vec![Duration::ZERO; 3];
    with_key(s);
}

/// Records `n` synthetic events for `provider` (as the store's own changes do).
async fn record(h: &Harness, provider: Address, n: usize, tag: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("evt_{tag}_{i}");
        let e = NewEvent {
            id: id.clone(),
            provider,
            r#type: "plan.created".into(),
            data: json!({ "i": i }).to_string(),
            created_at: 1,
        };
        assert!(h.facilitator.store().record_event(&e).await.unwrap());
        assert!(
            !h.facilitator.store().record_event(&e).await.unwrap(),
            "one event per id"
        );
        ids.push(id);
    }
    ids
}

/// Delivers until nothing is due (bounded).
async fn drain(f: &Facilitator) {
    for _ in 0..50 {
        let r = f.deliver_webhooks_once().await;
        if r.delivered == 0 && r.retried == 0 && r.dead == 0 {
            return;
        }
    }
}
