//! The hostile requests mixed into the paid load: replays of spent proofs and garbage
//! `X-PAYMENT` headers, each with the refusal the gate must answer.

use base64::{Engine as _, engine::general_purpose::STANDARD};
use tollgate_agent::header::{HeaderMap, HeaderName, HeaderValue};
use tollgate_protocol::{Amount, PaymentProof};

use crate::harness::PRICE;

/// The gate's server limit on a request's header section (`tollgate_server::Limits` default).
const HEADER_LIMIT: usize = tollgate_server::DEFAULT_MAX_HEADER_BYTES;

/// A small deterministic PRNG (xorshift64*): reproducible runs, no dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A successful payment whose `X-PAYMENT` can be replayed or tampered with.
#[derive(Clone, Debug)]
pub struct Spent {
    pub header: String,
    pub proof: PaymentProof,
}

/// The kinds of garbage, sent in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Garbage {
    /// Random visible ASCII.
    RandomAscii,
    /// Random bytes, including obs-text (0x80-0xff): not a visible-ASCII header.
    RandomBytes,
    /// base64 of random bytes.
    RandomBase64,
    /// A valid (spent) header cut short.
    Truncated,
    /// base64 of JSON that is not a proof (wrong shapes, unknown fields, other versions).
    WrongJson,
    /// A valid (spent) proof with one bit of its signature flipped.
    FlippedSignature,
    /// A valid (spent) proof with a signed field changed (amount, payer, expiry) or its memo,
    /// payee or network altered.
    Tampered,
    /// A proof padded to just under the server's header limit (over the proof limit).
    NearHeaderLimit,
    /// An `X-PAYMENT` over the server's header limit (by 64 bytes to 16 KiB).
    OverHeaderLimit,
    /// More header fields than the server allows.
    TooManyHeaders,
    /// Two `X-PAYMENT` headers (a valid one and a spent copy).
    TwoHeaders,
    /// An x402 V2 `PAYMENT-SIGNATURE` header.
    V2Signature,
}

impl Garbage {
    pub const ALL: [Garbage; 12] = [
        Garbage::RandomAscii,
        Garbage::RandomBytes,
        Garbage::RandomBase64,
        Garbage::Truncated,
        Garbage::WrongJson,
        Garbage::FlippedSignature,
        Garbage::Tampered,
        Garbage::NearHeaderLimit,
        Garbage::OverHeaderLimit,
        Garbage::TooManyHeaders,
        Garbage::TwoHeaders,
        Garbage::V2Signature,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Garbage::RandomAscii => "random ASCII",
            Garbage::RandomBytes => "random bytes (obs-text)",
            Garbage::RandomBase64 => "base64 of random bytes",
            Garbage::Truncated => "truncated valid header",
            Garbage::WrongJson => "wrong JSON in base64",
            Garbage::FlippedSignature => "proof, signature bit flipped",
            Garbage::Tampered => "proof, field tampered",
            Garbage::NearHeaderLimit => "header just under the limit",
            Garbage::OverHeaderLimit => "header over the limit",
            Garbage::TooManyHeaders => "too many header fields",
            Garbage::TwoHeaders => "two X-PAYMENT headers",
            Garbage::V2Signature => "x402 V2 PAYMENT-SIGNATURE",
        }
    }

    /// Whether this kind is built from a spent payment.
    pub fn needs_spent(self) -> bool {
        matches!(
            self,
            Garbage::Truncated
                | Garbage::WrongJson
                | Garbage::FlippedSignature
                | Garbage::Tampered
                | Garbage::NearHeaderLimit
                | Garbage::TwoHeaders
                | Garbage::V2Signature
        )
    }

    /// The request headers for one instance.
    pub fn headers(self, rng: &mut Rng, spent: Option<&Spent>) -> HeaderMap {
        let mut h = HeaderMap::new();
        let x_payment = HeaderName::from_static("x-payment");
        let set = |h: &mut HeaderMap, v: &[u8]| {
            h.insert(
                HeaderName::from_static("x-payment"),
                HeaderValue::from_bytes(v).expect("a valid header value"),
            );
        };
        let spent = || spent.expect("a spent payment for this kind");
        match self {
            Garbage::RandomAscii => {
                let n = 1 + rng.below(300);
                let v: Vec<u8> = (0..n).map(|_| b'!' + rng.below(94) as u8).collect();
                set(&mut h, &v);
            }
            Garbage::RandomBytes => {
                let n = 1 + rng.below(300);
                // Visible ASCII and obs-text; a first byte of obs-text so the value is never
                // plain text.
                let mut v: Vec<u8> = (0..n)
                    .map(|_| match rng.below(2) {
                        0 => b'!' + rng.below(94) as u8,
                        _ => 0x80 + rng.below(128) as u8,
                    })
                    .collect();
                v[0] = 0x80 + rng.below(128) as u8;
                set(&mut h, &v);
            }
            Garbage::RandomBase64 => {
                let n = 1 + rng.below(600);
                set(&mut h, STANDARD.encode(rng.bytes(n)).as_bytes());
            }
            Garbage::Truncated => {
                // Cut into the data (dropping only `=` padding leaves the same proof: the gate
                // decodes padding leniently).
                let data = spent().header.trim_end_matches('=');
                let cut = 1 + rng.below(data.len() - 1);
                set(&mut h, &data.as_bytes()[..cut]);
            }
            Garbage::WrongJson => {
                let p = serde_json::to_value(&spent().proof).expect("a proof serializes");
                let shapes = [
                    serde_json::json!({ "hello": 1 }),
                    serde_json::json!([1, 2, 3]),
                    serde_json::json!("a string"),
                    serde_json::json!(null),
                    serde_json::json!({ "version": 2 }),
                    serde_json::json!({ "version": 1, "network": 5 }),
                    serde_json::json!({ "version": "1" }),
                    {
                        let mut extra = p.clone();
                        extra["admin"] = true.into();
                        extra
                    },
                    {
                        let mut missing = p.clone();
                        missing.as_object_mut().unwrap().remove("signature");
                        missing
                    },
                    serde_json::json!({ "x402Version": 1, "scheme": "exact", "payload": 7 }),
                    serde_json::json!({ "x402Version": 2, "payload": {} }),
                ];
                let v = &shapes[rng.below(shapes.len())];
                set(&mut h, STANDARD.encode(v.to_string()).as_bytes());
            }
            Garbage::FlippedSignature => {
                let mut p = spent().proof.clone();
                let mut sig = p.signature.to_vec();
                let i = rng.below(sig.len());
                sig[i] ^= 1 << rng.below(8);
                p.signature = sig.into();
                set(&mut h, p.encode().as_bytes());
            }
            Garbage::Tampered => {
                let mut p = spent().proof.clone();
                match rng.below(6) {
                    0 => p.amount = Amount::from_units(PRICE + 1 + rng.below(1000) as u64),
                    1 => p.payer = tollgate_agent::Address::repeat_byte(0x42),
                    2 => p.expiry += 3600,
                    3 => {
                        let mut m = p.memo;
                        m.0[rng.below(32)] ^= 1;
                        p.memo = m;
                    }
                    4 => p.pay_to = tollgate_agent::Address::repeat_byte(0x24),
                    _ => p.network = "base".parse().unwrap(),
                }
                set(&mut h, p.encode().as_bytes());
            }
            Garbage::NearHeaderLimit => {
                // A proof whose network name pads the value to ~HEADER_LIMIT - 600 bytes: well
                // over the proof limit (8 KiB), under the server's header limit.
                let p = spent().proof.clone();
                let target = HEADER_LIMIT - 600;
                let base = p.encode().len();
                // Written as JSON: no `Network` is this long.
                let mut json = serde_json::to_value(&p).unwrap();
                json["network"] = "x".repeat((target - base) * 3 / 4).into();
                let value = STANDARD.encode(serde_json::to_vec(&json).unwrap());
                set(&mut h, value.as_bytes());
            }
            Garbage::OverHeaderLimit => {
                let n = HEADER_LIMIT + 64 + rng.below(HEADER_LIMIT);
                set(&mut h, "A".repeat(n).as_bytes());
            }
            Garbage::TooManyHeaders => {
                for i in 0..(tollgate_server::DEFAULT_MAX_HEADERS + 16) {
                    h.insert(
                        HeaderName::try_from(format!("x-junk-{i}")).unwrap(),
                        HeaderValue::from_static("1"),
                    );
                }
                set(&mut h, b"eyJoZWxsbyI6MX0=");
            }
            Garbage::TwoHeaders => {
                let header = HeaderValue::from_str(&spent().header).unwrap();
                h.append(x_payment.clone(), header.clone());
                h.append(x_payment, header);
            }
            Garbage::V2Signature => {
                h.insert(
                    HeaderName::from_static("payment-signature"),
                    HeaderValue::from_str(&spent().header).unwrap(),
                );
            }
        }
        h
    }

    /// Whether the gate's answer is the right refusal for this kind: the status, and for a 402
    /// its `error` and `reason`.
    pub fn expected(self, status: u16, error: &str, reason: &str) -> bool {
        const PROOF: &str = "InvalidPaymentProof";
        let parse = ["header_not_base64", "header_not_json"];
        let invalid =
            |reasons: &[&str]| status == 402 && error == PROOF && reasons.contains(&reason);
        match self {
            Garbage::RandomAscii => invalid(&parse),
            Garbage::RandomBytes => invalid(&["header_not_text"]),
            Garbage::RandomBase64 => invalid(&["header_not_json"]),
            Garbage::Truncated => invalid(&parse),
            Garbage::WrongJson => {
                invalid(&["unknown_proof_version", "malformed_proof"])
                    // x402 V1 payloads go to the x402 path, which answers with x402 reasons.
                    || (status == 402 && error == "invalid_payload")
                    || (status == 402 && error.contains("V2 is not supported"))
            }
            Garbage::FlippedSignature => invalid(&["bad_signature"]),
            Garbage::Tampered => invalid(&[
                "bad_signature",
                "memo_forged_or_foreign",
                "wrong_payee",
                "wrong_network",
            ]),
            Garbage::NearHeaderLimit => invalid(&["header_too_large"]),
            // The server's header cap (`max_header_size`) is exact: refused before the gate.
            Garbage::OverHeaderLimit => status == 431,
            Garbage::TooManyHeaders => status == 431,
            Garbage::TwoHeaders => invalid(&["multiple_payment_headers"]),
            Garbage::V2Signature => status == 402 && error.contains("V2 is not supported"),
        }
    }
}
