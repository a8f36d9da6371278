//! The facilitator's TOML config: `Config::from_toml_str`, the parser behind
//! `tollgate facilitator --config FILE` (`Config::load` reads the file and calls it). Parsing
//! reads neither the environment nor files; key resolution is a separate step, run here only
//! with a lookup closure over fixed test keys and only when no `file:` source would touch the
//! disk.
//!
//! Invariants: no panic; a valid config has at least one network and one relayer; `Debug` of the
//! parsed `[keys]` and of the resolved keys never shows an inline or resolved key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_facilitator::config::{Config, SecretSource};

/// Well-known test keys (anvil's accounts 1 to 3), handed out by the fake environment.
const TEST_KEYS: [&str; 3] = [
    "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match Config::from_toml_str(text) {
        Ok(config) => config,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(!config.networks.is_empty());
    assert!(!config.keys.relayers.is_empty());
    let _ = format!("{config:?}");

    let sources: Vec<&SecretSource> = config
        .keys
        .relayers
        .iter()
        .chain([&config.keys.proof])
        .collect();
    let keys_debug = format!("{:?}", config.keys).to_ascii_lowercase();
    for source in &sources {
        if let SecretSource::Literal(secret) = source {
            let hex = format!("{:x}", secret.signer().to_bytes());
            assert!(
                !keys_debug.contains(&hex),
                "an inline key is printed by Debug"
            );
        }
    }
    if sources.iter().any(|s| matches!(s, SecretSource::File(_))) {
        return;
    }
    // A fake environment: variables starting with `UNSET` are unset, the others hold a test key
    // chosen by the name's length.
    let lookup = |var: &str| {
        (!var.starts_with("UNSET")).then(|| format!("0x{}", TEST_KEYS[var.len() % TEST_KEYS.len()]))
    };
    match config.resolve(lookup) {
        Ok(resolved) => {
            let debug = format!("{resolved:?}").to_ascii_lowercase();
            for key in resolved.relayers.iter().chain([&resolved.proof]) {
                let hex = format!("{:x}", key.signer().to_bytes());
                assert!(!debug.contains(&hex), "a resolved key is printed by Debug");
            }
        }
        Err(e) => {
            let message = e.to_string().to_ascii_lowercase();
            for key in TEST_KEYS {
                assert!(!message.contains(key), "an error shows a key: {message}");
            }
        }
    }
});
