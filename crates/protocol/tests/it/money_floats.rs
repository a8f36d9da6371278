//! A float never carries an amount: the shipped code of every crate that handles money is free of
//! `f32`/`f64` (the types, casts to them, literal suffixes such as `1.0f64`, and helpers such as
//! `as_f64`), except in the files listed below, each with what its floats are for.
//!
//! Amounts are `U256`/`Amount`, or `u64`/`u128` where the store bounds them; a float there
//! silently rounds (2^53 units is only 9 billion tokens at 6 decimals) and is never exact in
//! decimal. Benchmarks and tests are not scanned: they measure and compare, and ship nothing.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

/// Crates whose `src/` and `examples/` are scanned.
const MONEY_CRATES: &[&str] = &[
    "protocol",
    "chain",
    "devnet",
    "client",
    "facilitator",
    "store",
    "gate",
    "gateway",
    "agent",
    "cli",
    "node",
];

/// Crates not scanned, and why (every directory under `crates/` is in one list or the other).
const NOT_SCANNED: &[(&str, &str)] = &[
    (
        "testkit",
        "test fixtures (anvil launcher, funded wallets); never built into a shipped binary",
    ),
    (
        "server",
        "the HTTP server under the services (limits, timeouts, rate limiting); it sees requests, \
         never amounts",
    ),
];

/// Files whose floats carry no amount, relative to the workspace root.
const ALLOWED: &[(&str, &str)] = &[
    (
        "crates/chain/src/rpc/send.rs",
        "the reward percentile `eth_feeHistory` takes (a float by the JSON-RPC API); fees are u128 wei",
    ),
    (
        "crates/facilitator/src/config/raw.rs",
        "`max_fee_gwei`: a gas price cap as TOML writes it (0.5), turned into integer wei once by \
         the validation; no token amount",
    ),
    (
        "crates/facilitator/src/funds.rs",
        "Prometheus gauge values (floats by the exposition format) of relayer gas balances; the \
         balances themselves are U256",
    ),
    (
        "crates/cli/examples/fleet.rs",
        "the scale-out load tool's report: elapsed seconds and settlements per second; no amount",
    ),
    (
        "crates/facilitator/src/openapi/errors.rs",
        "OpenAPI `minimum`/`maximum` of integer query parameters (utoipa takes f64); no amount",
    ),
    (
        "crates/facilitator/src/ops/metrics/mod.rs",
        "Prometheus exposition: latency histograms in seconds, their bucket bounds and gauges",
    ),
    (
        "crates/facilitator/src/ops/metrics/families.rs",
        "Prometheus metric families: histogram bucket bounds in seconds, gauges",
    ),
    (
        "crates/facilitator/src/ops/metrics/exposition.rs",
        "Prometheus text exposition of the families' float samples",
    ),
    (
        "crates/facilitator/src/ops/metrics/tests.rs",
        "tests of the exposition: bucket bounds and sample values in seconds",
    ),
    (
        "crates/facilitator/src/ops/dashboard/page.rs",
        "SVG geometry only (bar sizes as a fraction of the largest value, plan interval in days); \
         the amounts themselves are printed by `units()` from integers",
    ),
    (
        "crates/devnet/src/server.rs",
        "eth_feeHistory's gasUsedRatio and reward percentiles, floats by the JSON-RPC spec; gas, \
         not money",
    ),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/protocol sits two levels below the workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Is `word` (a maximal run of `[A-Za-z0-9_]`) a float: the type `f32`/`f64` or a `_`-separated
/// part of a name (`as_f64`, `1_f64`), or a decimal literal with a float suffix (`1.0f64` is
/// read as `1`, `.`, `0f64`)? Hex words (`0x…f64…`, addresses in docs) are integers.
fn is_float(word: &str) -> bool {
    const FLOATS: [&str; 2] = ["f32", "f64"];
    if word.split('_').any(|part| FLOATS.contains(&part)) {
        return true;
    }
    let lower = word.to_ascii_lowercase();
    word.starts_with(|c: char| c.is_ascii_digit())
        && !["0x", "0b", "0o"].iter().any(|p| lower.starts_with(p))
        && FLOATS.iter().any(|f| word.ends_with(f))
}

/// The floats in `text`, as `line: text`.
fn floats(text: &str) -> Vec<String> {
    let mut hits = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let found = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(is_float);
        if found {
            hits.push(format!("{}: {}", n + 1, line.trim()));
        }
    }
    hits
}

#[test]
fn the_scanner_sees_floats_and_only_floats() {
    for yes in [
        "let x: f64 = 1.0;",
        "v as f32",
        "1.0f64",
        "2f32",
        "1_f64",
        "n.as_f64()",
        "f64::from(x)",
        "Vec<f32>",
        "3.5e2f64",
    ] {
        assert!(!floats(yes).is_empty(), "{yes:?} is a float");
    }
    for no in [
        "token = \"0x5FbDB2315678afecb367f032d93F642f64180aa3\"",
        "let f640 = 1;",
        "u64::MAX",
        "0x1f64",
        "self.ff64",
        "buf64",
        "let amount: U256 = x;",
    ] {
        assert!(floats(no).is_empty(), "{no:?} is not a float");
    }
}

#[test]
fn no_float_carries_an_amount() {
    let root = workspace_root();
    let crates: BTreeSet<String> = fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let unlisted: Vec<&String> = crates
        .iter()
        .filter(|c| !MONEY_CRATES.contains(&c.as_str()) && !NOT_SCANNED.iter().any(|(n, _)| n == c))
        .collect();
    assert!(
        unlisted.is_empty(),
        "crates {unlisted:?}: add each to MONEY_CRATES, or to NOT_SCANNED with the reason"
    );
    for c in MONEY_CRATES {
        assert!(
            crates.contains(*c),
            "crates/{c} is gone: update MONEY_CRATES"
        );
    }

    let mut files = Vec::new();
    for c in MONEY_CRATES {
        rust_files(&root.join("crates").join(c).join("src"), &mut files);
        rust_files(&root.join("crates").join(c).join("examples"), &mut files);
    }
    assert!(files.len() > 50, "found only {} files", files.len());

    let mut offending = Vec::new();
    let mut allowed_seen = BTreeSet::new();
    for path in &files {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let hits = floats(&fs::read_to_string(path).unwrap());
        if hits.is_empty() {
            continue;
        }
        if ALLOWED.iter().any(|(f, _)| *f == rel) {
            allowed_seen.insert(rel);
        } else {
            offending.push(format!("{rel}:\n    {}", hits.join("\n    ")));
        }
    }
    assert!(
        offending.is_empty(),
        "f32/f64 in money code (amounts are U256/Amount or bounded integers; if these floats \
         carry no amount, add the file to ALLOWED with the reason):\n{}",
        offending.join("\n")
    );
    // A stale entry would let a float in unnoticed later: the list stays exact.
    for (f, _) in ALLOWED {
        assert!(
            allowed_seen.contains(*f),
            "{f} is allowed floats but has none (or is gone): remove it from ALLOWED"
        );
    }
}
