//! MPP (`tollgate_protocol::mpp`) against golden vectors captured from `mppx@0.11.0` (see
//! `tests/vectors/mpp/README.md`), and its header syntax, timestamps and JCS.

use std::{fs, path::PathBuf};

use alloy::primitives::{Address, U256, address, b256};
use base64::{
    Engine as _,
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
};
use serde_json::{Value, json};
use tollgate_protocol::{
    Amount, Network, headers,
    mpp::{
        AuthorizationPayload, Challenge, ChallengeKey, ChargeRequest, Credential, MppError, Opaque,
        PROBLEM_BASE, Problem, ProblemType, Receipt, parse_rfc3339, rfc3339_millis,
    },
};

fn read(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors/mpp")
        .join(name);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim_end_matches('\n').to_owned()
}

/// The capture's server key: `secretKey: 'x'.repeat(32)`.
fn capture_key() -> ChallengeKey {
    ChallengeKey::from_slice(&[b'x'; 32]).unwrap()
}

const REALM: &str = "api.example.test";
const CURRENCY: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");
const RECIPIENT: Address = address!("0x70997970c51812dC3a010C7d01B50E44D17b79c8");
const PAYER: Address = address!("0xb6e614f99d581C02C59D282e0724e8aA91951619");

fn capture_request() -> ChargeRequest {
    ChargeRequest::new(Amount::from_units(10_000), CURRENCY, RECIPIENT, 31337, 6)
}

fn captured_challenge() -> Challenge {
    let mut all = Challenge::parse_all([read("challenge_header.txt").as_str()]);
    assert_eq!(all.len(), 1);
    all.remove(0).unwrap()
}

#[test]
fn the_captured_challenge_parses_and_is_authentic() {
    let header = read("challenge_header.txt");
    let c = captured_challenge();
    assert_eq!(c.id, "sCpqly3HfZzW5tfD0Y952wi7Nb9AUtzqrMoeWrWO0sI");
    assert_eq!((c.realm.as_str(), c.method.as_str()), (REALM, "evm"));
    assert_eq!(c.intent, "charge");
    assert_eq!(c.description.as_deref(), Some("demo"));
    assert_eq!(c.expires.as_deref(), Some("2026-11-29T09:25:32.075Z"));
    assert_eq!((c.digest.as_deref(), c.opaque.as_deref()), (None, None));
    assert_eq!(c.expires_unix().unwrap(), Some(1_795_944_332));
    assert_eq!(c.opaque().unwrap(), None);

    let request = c.charge_request().unwrap();
    assert_eq!(request, capture_request());
    assert!(request.accepts_authorization());
    assert_eq!(
        request.encode(),
        c.request,
        "the request re-encodes byte for byte"
    );

    let key = capture_key();
    assert_eq!(c.expected_id(&key), c.id);
    assert!(c.is_authentic(&key));
    assert!(!c.is_authentic(&ChallengeKey::new([b'y'; 32])));
    assert_eq!(c.to_header_value(), header, "written back byte for byte");

    // The server's own issue gives the same challenge.
    let issued = Challenge::issue(
        &key,
        REALM,
        &capture_request(),
        1_795_944_332_075,
        None,
        Some("demo"),
    );
    assert_eq!(issued, c);
}

#[test]
fn a_challenge_with_any_bound_field_changed_is_not_authentic() {
    let key = capture_key();
    let c = captured_challenge();
    let other_request = {
        let mut r = capture_request();
        r.amount = Amount::from_units(1);
        r.encode()
    };
    let padded = format!(
        "{}==",
        STANDARD.encode(URL_SAFE_NO_PAD.decode(&c.request).unwrap())
    );
    type Tamper = Box<dyn Fn(&mut Challenge)>;
    let tampered: Vec<(&str, Tamper)> = vec![
        ("id", Box::new(|c| c.id.replace_range(0..1, "t"))),
        ("id empty", Box::new(|c| c.id.clear())),
        ("realm", Box::new(|c| c.realm.push('x'))),
        ("method", Box::new(|c| c.method = "tempo".into())),
        ("intent", Box::new(|c| c.intent = "session".into())),
        (
            "request",
            Box::new(move |c| c.request = other_request.clone()),
        ),
        (
            "request padded",
            Box::new(move |c| c.request = padded.clone()),
        ),
        (
            "expires",
            Box::new(|c| c.expires = Some("2036-11-29T09:25:32.075Z".into())),
        ),
        ("expires removed", Box::new(|c| c.expires = None)),
        (
            "digest",
            Box::new(|c| c.digest = Some("sha-256=AAAA".into())),
        ),
        (
            "opaque",
            Box::new(|c| c.opaque = Some(Opaque::default().with("a", "b").encode())),
        ),
    ];
    for (what, change) in tampered {
        let mut t = c.clone();
        change(&mut t);
        assert!(!t.is_authentic(&key), "{what}");
    }
    // `description` is not bound (as in mppx).
    let mut d = c.clone();
    d.description = Some("free".into());
    assert!(d.is_authentic(&key));
}

#[test]
fn issued_challenges_bind_their_opaque_and_verify() {
    let key = ChallengeKey::new([7; 32]);
    let opaque = Opaque::default()
        .with("method", "GET")
        .with("resource", "/weather")
        .with("salt", "0011");
    let c = Challenge::issue(
        &key,
        "gate.test",
        &capture_request(),
        1_000,
        Some(&opaque),
        None,
    );
    assert_eq!(c.expires.as_deref(), Some("1970-01-01T00:00:01.000Z"));
    assert!(c.is_authentic(&key));
    assert_eq!(c.opaque().unwrap(), Some(opaque));
    let mut other = c.clone();
    other.opaque = Some(Opaque::default().with("method", "POST").encode());
    assert!(!other.is_authentic(&key));
    assert_eq!(format!("{key:?}"), "ChallengeKey([REDACTED])");
    assert!(matches!(
        ChallengeKey::from_slice(&[0; 31]),
        Err(MppError::KeyTooShort(31))
    ));
}

#[test]
fn the_captured_credential_decodes_and_re_encodes_byte_for_byte() {
    let header = read("credential_header.txt");
    let cred = Credential::from_authorization(&header).unwrap().unwrap();
    let c = &cred.challenge;
    assert_eq!(c.id, "-sCz3ul2p183K3g7_Om1X7HST73ERCf1TporUUGAOIA");
    assert_eq!(c.expires.as_deref(), Some("2026-11-29T09:25:32.129Z"));
    assert!(c.is_authentic(&capture_key()));
    assert_eq!(c.charge_request().unwrap(), capture_request());

    let p = &cred.payload;
    let nonce = b256!("0x40cbb633acdbc7b74f2145755a39293808e07be85b9e65825242cc6e89279117");
    assert_eq!(c.authorization_nonce(), nonce);
    assert_eq!(p.nonce, nonce);
    assert_eq!((p.from, p.to), (PAYER, RECIPIENT));
    assert_eq!(p.value, U256::from(10_000));
    assert_eq!(p.valid_after, U256::ZERO);
    assert_eq!(p.valid_before, U256::from(1_795_944_332u64));
    assert_eq!(
        Some(p.valid_before.to::<u64>()),
        c.expires_unix().unwrap(),
        "validBefore is floor(expires)"
    );
    assert_eq!(p.signature.len(), 65);
    assert_eq!(
        cred.source.as_deref(),
        Some(Credential::source_for(31337, PAYER).as_str())
    );
    assert_eq!(
        Credential::source_for(31337, PAYER),
        "did:pkh:eip155:31337:0xb6e614f99d581C02C59D282e0724e8aA91951619"
    );

    assert_eq!(cred.to_header_value(), header, "re-encoded byte for byte");
    assert_eq!(Credential::decode(&cred.encode()).unwrap(), cred);
    // Standard alphabet with padding reads the same (ox's decoder takes both).
    let token = header.strip_prefix("Payment ").unwrap();
    let std = STANDARD.encode(URL_SAFE_NO_PAD.decode(token).unwrap());
    assert_eq!(Credential::decode(&std).unwrap(), cred);
    // Among other schemes, in any case.
    let mixed = format!("Bearer abc, payment {token}");
    assert_eq!(
        Credential::from_authorization(&mixed).unwrap().unwrap(),
        cred
    );
    assert!(Credential::from_authorization("Bearer abc").is_none());
}

#[test]
fn the_captured_credential_is_its_x402_v1_twin() {
    let cred = Credential::from_authorization(&read("credential_header.txt"))
        .unwrap()
        .unwrap();
    let x402 = cred.payload.to_x402_payload(Network::eip155(31337));
    let v = serde_json::to_value(&x402).unwrap();
    // The authorization as mppx posted it to the facilitator (`e2e.out`).
    assert_eq!(
        v,
        json!({
            "x402Version": 1,
            "scheme": "exact",
            "network": "eip155:31337",
            "payload": {
                "signature": "0x9e2def88cbfb35732e6dbe1d7c585861c6bede3ca7c9528185185b6e63c3402b0bef48c6eb6aafe7930a00e232aaf5ce5446431101857ed4bea09986799442871b",
                "authorization": {
                    "from": "0xb6e614f99d581C02C59D282e0724e8aA91951619",
                    "nonce": "0x40cbb633acdbc7b74f2145755a39293808e07be85b9e65825242cc6e89279117",
                    "to": "0x70997970c51812dC3a010C7d01B50E44D17b79c8",
                    "validAfter": "0",
                    "validBefore": "1795944332",
                    "value": "10000"
                }
            }
        })
    );
    assert_eq!(
        AuthorizationPayload::from_exact_evm(&x402.payload),
        cred.payload
    );
}

/// The credential JSON of the capture, to tamper with.
fn credential_json() -> Value {
    let header = read("credential_header.txt");
    let token = header.strip_prefix("Payment ").unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(token).unwrap()).unwrap()
}

fn token(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
}

#[test]
fn malformed_credentials_and_invalid_payloads_are_told_apart() {
    for bad in [
        "%%%",
        "",
        &URL_SAFE_NO_PAD.encode("not json"),
        &token(&json!([1])),
    ] {
        let err = Credential::decode(bad).unwrap_err();
        assert_eq!(
            err.problem_type(),
            ProblemType::MalformedCredential,
            "{bad:?}"
        );
    }
    let mut no_challenge = credential_json();
    no_challenge.as_object_mut().unwrap().remove("challenge");
    let mut bad_challenge = credential_json();
    bad_challenge["challenge"]["request"] = json!("!!");
    let mut no_id = credential_json();
    no_id["challenge"].as_object_mut().unwrap().remove("id");
    let mut bad_expires = credential_json();
    bad_expires["challenge"]["expires"] = json!("tomorrow");
    let mut other_header = credential_json();
    other_header["challenge"]["header"] = json!("Payment-Authorization");
    for v in [
        no_challenge,
        bad_challenge,
        no_id,
        bad_expires,
        other_header,
    ] {
        let err = Credential::decode(&token(&v)).unwrap_err();
        assert!(
            matches!(err, MppError::MalformedCredential(_)),
            "{v}: {err:?}"
        );
    }

    let id = credential_json()["challenge"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let payloads = [
        json!(null),
        json!({"type": "permit2"}),
        {
            let mut p = credential_json()["payload"].clone();
            p["type"] = json!("transaction");
            p
        },
        {
            let mut p = credential_json()["payload"].clone();
            p["value"] = json!("1.5");
            p
        },
        {
            let mut p = credential_json()["payload"].clone();
            p["nonce"] = json!("0x1234");
            p
        },
        {
            let mut p = credential_json()["payload"].clone();
            p["from"] = json!("b6e614f99d581C02C59D282e0724e8aA91951619");
            p
        },
        {
            let mut p = credential_json()["payload"].clone();
            p["signature"] = json!("9e2d");
            p
        },
    ];
    for payload in payloads {
        let mut v = credential_json();
        v["payload"] = payload.clone();
        let err = Credential::decode(&token(&v)).unwrap_err();
        assert_eq!(err.problem_type(), ProblemType::InvalidPayload, "{payload}");
        assert_eq!(err.challenge().map(|c| c.id.as_str()), Some(id.as_str()));
    }

    // The legacy object-shaped `opaque` reads as its encoded form.
    let mut legacy = credential_json();
    legacy["challenge"]["opaque"] = json!({"_mppx_scope": "GET /x"});
    let cred = Credential::decode(&token(&legacy)).unwrap();
    assert_eq!(
        cred.challenge.opaque.as_deref(),
        Some(
            Opaque::default()
                .with("_mppx_scope", "GET /x")
                .encode()
                .as_str()
        )
    );
}

#[test]
fn the_captured_receipt_decodes() {
    let header = read("receipt_header.txt");
    let r = Receipt::decode(&header).unwrap();
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        serde_json::from_str::<Value>(&read("receipt.json")).unwrap()
    );
    assert_eq!(r.method, "evm");
    assert_eq!(r.reference, format!("0x{}", "ab".repeat(32)));
    assert_eq!(r.timestamp, "2026-11-29T09:20:32.223Z");
    assert_eq!((r.challenge_id.as_deref(), r.chain_id), (None, None));
    assert_eq!(r.encode(), header, "re-encoded byte for byte");

    let mut ours = Receipt::evm(format!("0x{}", "cd".repeat(32)), 1_795_944_032_223);
    ours.challenge_id = Some("abc".into());
    ours.chain_id = Some(8453);
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(ours.encode()).unwrap()).unwrap();
    assert!(
        text.contains(r#""challengeId":"abc","chainId":8453"#),
        "{text}"
    );
    assert_eq!(Receipt::decode(&ours.encode()).unwrap(), ours);

    let with_unknown = URL_SAFE_NO_PAD.encode(
        r#"{"method":"evm","reference":"0x1","status":"success","timestamp":"2026-11-29T09:20:32Z","subscriptionId":"s"}"#,
    );
    assert!(Receipt::decode(&with_unknown).is_ok());
    for bad in [
        r#"{"method":"evm","reference":"0x1","status":"failed","timestamp":"2026-11-29T09:20:32Z"}"#,
        r#"{"method":"evm","reference":"0x1","status":"success","timestamp":"yesterday"}"#,
        r#"{"method":"evm","status":"success","timestamp":"2026-11-29T09:20:32Z"}"#,
    ] {
        assert!(
            Receipt::decode(&URL_SAFE_NO_PAD.encode(bad)).is_err(),
            "{bad}"
        );
    }
    assert_eq!(headers::PAYMENT_RECEIPT, "payment-receipt");
    assert_eq!(headers::WWW_AUTHENTICATE, "www-authenticate");
}

#[test]
fn problem_types_are_mppx_s() {
    let table = [
        (
            ProblemType::PaymentRequired,
            "payment-required",
            "Payment Required",
            402,
        ),
        (
            ProblemType::MalformedCredential,
            "malformed-credential",
            "Malformed Credential",
            402,
        ),
        (
            ProblemType::InvalidChallenge,
            "invalid-challenge",
            "Invalid Challenge",
            402,
        ),
        (
            ProblemType::PaymentExpired,
            "payment-expired",
            "Payment Expired",
            402,
        ),
        (
            ProblemType::InvalidPayload,
            "invalid-payload",
            "Invalid Payload",
            402,
        ),
        (
            ProblemType::VerificationFailed,
            "verification-failed",
            "Verification Failed",
            402,
        ),
        (
            ProblemType::PaymentInsufficient,
            "payment-insufficient",
            "Payment Insufficient",
            402,
        ),
        (
            ProblemType::MethodUnsupported,
            "method-unsupported",
            "Method Unsupported",
            400,
        ),
        (ProblemType::BadRequest, "bad-request", "Bad Request", 400),
        (
            ProblemType::InternalPaymentError,
            "internal-payment-error",
            "Internal Payment Error",
            500,
        ),
    ];
    assert_eq!(table.len(), ProblemType::ALL.len());
    for (t, suffix, title, status) in table {
        assert_eq!(
            t.uri(),
            format!("https://paymentauth.org/problems/{suffix}")
        );
        assert_eq!((t.title(), t.status()), (title, status));
        assert_eq!(ProblemType::from_uri(&t.uri()), Some(t));
        assert!(ProblemType::ALL.contains(&t));
    }
    assert_eq!(
        ProblemType::from_uri(&format!("{PROBLEM_BASE}session/channel-not-found")),
        None
    );
    assert_eq!(ProblemType::from_uri("about:blank"), None);
}

#[test]
fn the_captured_problem_bodies_are_written_back_byte_for_byte() {
    let lines = read("problems.jsonl");
    let payment_required = read("problem_payment_required.json");
    for line in lines.lines().chain([payment_required.as_str()]) {
        let p: Problem = serde_json::from_str(line).unwrap();
        let t = p.problem_type().unwrap_or_else(|| panic!("{line}"));
        let ours = Problem::new(t, p.detail.clone(), p.challenge_id.clone());
        assert_eq!(serde_json::to_string(&ours).unwrap(), line);
    }
}

#[test]
fn several_challenges_and_other_schemes_round_trip_through_one_header() {
    let key = ChallengeKey::new([1; 32]);
    let tricky = r#"say "hi", then \ pay; a=b, Payment x="y""#;
    let a = Challenge::issue(
        &key,
        "a.test",
        &capture_request(),
        2_000_000_000_000,
        None,
        Some(tricky),
    );
    let mut request = capture_request();
    request.description = Some("é 😀".into());
    let b = Challenge::issue(
        &key,
        "realm, \"quoted\"",
        &request,
        2_000_000_000_123,
        Some(&Opaque::default().with("salt", "1")),
        None,
    );
    let joined = format!(
        "{}, Bearer realm=\"x\", {}, Basic realm=\"y\"",
        a.to_header_value(),
        b.to_header_value()
    );
    let parsed: Vec<_> = Challenge::parse_all([joined.as_str()])
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(parsed, vec![a.clone(), b.clone()]);
    assert!(parsed.iter().all(|c| c.is_authentic(&key)));

    // One challenge per header value, the other scheme first.
    let values = [
        "Bearer realm=\"x\", error=\"invalid_token\"".to_owned(),
        b.to_header_value(),
        a.to_header_value(),
    ];
    let parsed: Vec<_> = Challenge::parse_all(values.iter().map(String::as_str))
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(parsed, vec![b, a.clone()]);

    // Tokens, any order, any case of the scheme, unknown params ignored.
    let loose = format!(
        "payment  request={}, intent=charge,method=evm , realm=\"a.test\", future=1, expires=\"{}\", id={}, description=\"{}\"",
        a.request,
        a.expires.as_deref().unwrap(),
        a.id,
        tricky.replace('\\', "\\\\").replace('"', "\\\"")
    );
    assert_eq!(Challenge::parse_all([loose.as_str()]).remove(0).unwrap(), a);

    assert!(Challenge::parse_all(["Bearer realm=\"Payment id=1\""]).is_empty());
}

#[test]
fn malformed_payment_challenges_are_errors_in_place() {
    let ok = captured_challenge().to_header_value();
    let bad = [
        r#"Payment id="a", id="b", realm="r", method="evm", intent="charge", request="e30""#,
        r#"Payment id="a", realm="r", method="evm", intent="charge""#,
        r#"Payment id="a", realm="r", method="EVM", intent="charge", request="e30""#,
        r#"Payment id="a", realm="r", method="evm", intent="charge", request="bm90IGpzb24""#,
        r#"Payment id="a", realm="r", method="evm", intent="charge", request="e30", expires="soon""#,
        r#"Payment id="a", realm="r", method="evm", intent="charge", request="e30", digest="md5=x""#,
        r#"Payment id="a", realm="r", method="evm", intent="charge", request="e30", header="Payment-Authorization""#,
        r#"Payment id="a", realm="r", method="evm", intent="charge", request="e30", description="open"#,
        r#"Payment id="", realm="r", method="evm", intent="charge", request="e30""#,
    ];
    for b in bad {
        let joined = format!("{ok}, {b}");
        let all = Challenge::parse_all([joined.as_str()]);
        assert_eq!(all.len(), 2, "{b}");
        assert!(all[0].is_ok(), "{b}");
        let err = all[1].as_ref().unwrap_err();
        assert_eq!(err.problem_type(), ProblemType::InvalidChallenge, "{b}");
    }
    let huge = format!(
        r#"Payment id="a", realm="r", method="evm", intent="charge", request="{}""#,
        "e".repeat(16 * 1024 + 1)
    );
    assert!(Challenge::parse_all([huge.as_str()])[0].is_err());
    // A request of another method parses (the client picks by method); only the EVM reader
    // refuses it.
    let tempo = r#"Payment id="a", realm="r", method="tempo", intent="charge", request="e30", header="Authorization""#;
    let c = Challenge::parse_all([tempo]).remove(0).unwrap();
    assert!(c.charge_request().is_err());
}

#[test]
fn rfc3339_formats_and_parses() {
    assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(
        rfc3339_millis(1_795_944_332_075),
        "2026-11-29T09:25:32.075Z"
    );
    assert_eq!(rfc3339_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
    assert_eq!(
        rfc3339_millis(4_107_542_399_999),
        "2100-02-28T23:59:59.999Z"
    );
    assert_eq!(
        rfc3339_millis(4_107_542_400_000),
        "2100-03-01T00:00:00.000Z"
    );
    assert_eq!(
        rfc3339_millis(253_402_300_799_999),
        "9999-12-31T23:59:59.999Z"
    );
    let mut ms = 0u64;
    while ms < 253_402_300_799_999 {
        assert_eq!(
            parse_rfc3339(&rfc3339_millis(ms)).unwrap(),
            ms / 1000,
            "{ms}"
        );
        ms = ms * 3 + 7_777_777;
    }
    for (text, secs) in [
        ("2026-11-29T09:25:32Z", 1_795_944_332),
        ("2026-11-29T09:25:32.999999999Z", 1_795_944_332),
        ("2026-11-29T11:25:32.5+02:00", 1_795_944_332),
        ("2026-11-29T04:55:32-04:30", 1_795_944_332),
        ("2024-02-29T00:00:00Z", 1_709_164_800),
        ("2000-02-29T00:00:00Z", 951_782_400),
        ("2100-02-28T23:59:59Z", 4_107_542_399),
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T01:00:00+01:00", 0),
    ] {
        assert_eq!(parse_rfc3339(text).unwrap(), secs, "{text}");
    }
    for bad in [
        "",
        "garbage",
        "2026-11-29",
        "2026-11-29 09:25:32Z",
        "2026-11-29t09:25:32Z",
        "2026-11-29T09:25:32",
        "2026-11-29T09:25:32z",
        "2026-11-29T09:25:32.Z",
        "2026-11-29T09:25:32+0200",
        "2026-11-29T09:25:32+02",
        "2026-11-29T09:25:32Z ",
        "+2026-11-29T09:25:32Z",
        "2023-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-11-29T24:00:00Z",
        "2026-11-29T09:60:00Z",
        "2026-11-29T09:25:60Z",
        "2026-11-29T09:25:32+24:00",
        "1969-12-31T23:59:59Z",
        "1970-01-01T00:00:00+00:01",
        "２026-11-29T09:25:32Z",
    ] {
        assert!(parse_rfc3339(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn foreign_requests_re_encode_byte_for_byte() {
    let text = r#"{"amount":"1","currency":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","description":"d","externalId":"order-7","methodDetails":{"chainId":8453,"credentialTypes":["authorization","permit2"],"decimals":6,"memo":{"z":1,"a":[true,null,1.5]},"permit2Address":"0x000000000022D473030F116dDEE9F6B43aC78BA3","splits":[{"amount":"1","recipient":"0x70997970c51812dC3a010C7d01B50E44D17b79c8"}]},"recipient":"0x70997970c51812dC3a010C7d01B50E44D17b79c8"}"#;
    // Sorted all the way down.
    let encoded = URL_SAFE_NO_PAD.encode(text);
    let r = ChargeRequest::decode(&encoded).unwrap();
    assert_eq!(
        r.to_jcs(),
        text.replace(
            r#"{"z":1,"a":[true,null,1.5]}"#,
            r#"{"a":[true,null,1.5],"z":1}"#
        )
    );
    assert!(r.has_splits() && r.accepts_authorization());
    assert_eq!(r.external_id.as_deref(), Some("order-7"));
    let canonical = r.encode();
    assert_eq!(
        ChargeRequest::decode(&canonical).unwrap().encode(),
        canonical
    );

    // Unsorted, spaced, lowercase addresses: canonicalised.
    let messy = r#"{ "recipient": "0x70997970c51812dc3a010c7d01b50e44d17b79c8", "methodDetails": {"decimals": 6, "credentialTypes": ["authorization"], "chainId": 31337}, "currency": "0x5fbdb2315678afecb367f032d93f642f64180aa3", "amount": "10000" }"#;
    let r = ChargeRequest::decode(&URL_SAFE_NO_PAD.encode(messy)).unwrap();
    assert_eq!(r, capture_request());
    assert_eq!(r.encode(), captured_challenge().request);

    // A challenge carrying a non-canonical request is not authentic even with the right id.
    let key = capture_key();
    let mut c = captured_challenge();
    c.request = URL_SAFE_NO_PAD.encode(messy);
    c.id = c.expected_id(&key);
    assert!(!c.is_authentic(&key));

    for bad in [
        r#"{"amount":"1.5","currency":"0x5FbDB2315678afecb367f032d93F642f64180aa3","methodDetails":{"chainId":1,"decimals":6},"recipient":"0x70997970c51812dC3a010C7d01B50E44D17b79c8"}"#,
        r#"{"amount":"1","currency":"5FbDB2315678afecb367f032d93F642f64180aa3","methodDetails":{"chainId":1,"decimals":6},"recipient":"0x70997970c51812dC3a010C7d01B50E44D17b79c8"}"#,
        r#"{"amount":"1","currency":"0x5FbDB2315678afecb367f032d93F642f64180aa3","methodDetails":{"chainId":"1","decimals":6},"recipient":"0x70997970c51812dC3a010C7d01B50E44D17b79c8"}"#,
        r#"{"amount":"1","currency":"0x5FbDB2315678afecb367f032d93F642f64180aa3","recipient":"0x70997970c51812dC3a010C7d01B50E44D17b79c8"}"#,
    ] {
        assert!(
            ChargeRequest::decode(&URL_SAFE_NO_PAD.encode(bad)).is_err(),
            "{bad}"
        );
    }
}
