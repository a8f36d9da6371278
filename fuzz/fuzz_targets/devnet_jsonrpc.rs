//! The embedded devnet's JSON-RPC server: raw request bodies (single requests and batches)
//! through the real axum `router`, on a current-thread tokio runtime and an in-memory devnet
//! (`DevnetConfig::default()`: no state directory, no journal), both built once per process.
//!
//! Invariants: no panic; every answer is HTTP 200 with a JSON body; a batch of n requests gets an
//! array of n answers; every answer is a JSON-RPC 2.0 object with exactly one of `result` and
//! `error`, echoing the request's id.
//!
//! The devnet is stateful: `evm_mine`/`anvil_mine` add blocks, `evm_increaseTime` moves its clock
//! and `eth_sendRawTransaction` may queue transactions. So that memory stays bounded over millions
//! of inputs, the devnet is replaced by a fresh one every `RESET_EVERY` inputs or once it has
//! `MAX_BLOCKS` blocks. A crash may therefore depend on the inputs before it; libFuzzer's
//! reproducer replays only the last one, which is usually enough (each input starts from a
//! devnet that at most `RESET_EVERY` earlier inputs have touched).
#![no_main]

use std::{cell::RefCell, sync::Arc};

use axum::body::Body;
use http::{Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tollgate_devnet::{Devnet, DevnetConfig, server::router};
use tower::ServiceExt as _;

/// Inputs run against one devnet before it is replaced.
const RESET_EVERY: u64 = 5_000;
/// Blocks after which the devnet is replaced.
const MAX_BLOCKS: u64 = 256;

struct Harness {
    rt: tokio::runtime::Runtime,
    devnet: Arc<Devnet>,
    runs: u64,
}

impl Harness {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime");
        Self {
            rt,
            devnet: fresh_devnet(),
            runs: 0,
        }
    }

    fn devnet(&mut self) -> Arc<Devnet> {
        self.runs += 1;
        if self.runs.is_multiple_of(RESET_EVERY) || self.devnet.latest_block() >= MAX_BLOCKS {
            self.devnet = fresh_devnet();
        }
        Arc::clone(&self.devnet)
    }
}

fn fresh_devnet() -> Arc<Devnet> {
    let config = DevnetConfig::default();
    assert!(
        config.state_dir.is_none(),
        "the fuzz devnet must stay in memory"
    );
    Devnet::start(config).expect("devnet starts")
}

thread_local! {
    static HARNESS: RefCell<Harness> = RefCell::new(Harness::new());
}

fuzz_target!(|data: &[u8]| {
    HARNESS.with_borrow_mut(|h| {
        let devnet = h.devnet();
        let request = Request::post("/")
            .header("content-type", "application/json")
            .body(Body::from(data.to_vec()))
            .expect("request builds");
        let (status, body) = h.rt.block_on(async {
            let response = router(devnet).oneshot(request).await.expect("infallible");
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .expect("body reads");
            (status, body)
        });
        assert_eq!(status, StatusCode::OK);
        let reply: Value = serde_json::from_slice(&body).expect("the answer is JSON");
        check(data, &reply);
    });
});

fn check(request: &[u8], reply: &Value) {
    match serde_json::from_slice::<Value>(request) {
        Ok(Value::Array(batch)) if (1..=1000).contains(&batch.len()) => {
            let answers = reply.as_array().expect("a batch gets an array");
            assert_eq!(answers.len(), batch.len());
            for (req, answer) in batch.iter().zip(answers) {
                check_one(Some(req), answer);
            }
        }
        Ok(Value::Array(_)) | Err(_) => check_one(None, reply),
        Ok(single) => check_one(Some(&single), reply),
    }
}

fn check_one(request: Option<&Value>, answer: &Value) {
    let answer = answer.as_object().expect("an answer is an object");
    assert_eq!(answer.get("jsonrpc"), Some(&Value::String("2.0".into())));
    assert!(
        answer.contains_key("result") != answer.contains_key("error"),
        "exactly one of result and error: {answer:?}"
    );
    if let Some(error) = answer.get("error") {
        assert!(error["code"].is_i64(), "{error}");
        assert!(error["message"].is_string(), "{error}");
    }
    // A well-formed request's id is echoed.
    if let Some(Value::Object(req)) = request
        && let Some(id @ (Value::Number(_) | Value::String(_))) = req.get("id")
        && req.get("method").is_some_and(Value::is_string)
    {
        let echoed = answer.get("id").expect("an id is echoed");
        match (id, echoed) {
            // A non-integer or huge id is an f64 to serde_json: printed and read back, it may
            // come back one ulp off (serde_json parses without `float_roundtrip`).
            (Value::Number(a), Value::Number(b)) if a.is_f64() => {
                let (a, b) = (a.as_f64().unwrap(), b.as_f64().expect("a float id"));
                assert!((a - b).abs() <= a.abs() * 1e-12, "{a} echoed as {b}");
            }
            _ => assert_eq!(echoed, id),
        }
    }
}
