//! The facilitator's TOML configuration: the example file, defaults, every validation error, and
//! secret resolution and redaction.

use std::path::PathBuf;

use alloy::primitives::{Address, address};
use tollgate_facilitator::config::{
    Config, ConfigError, KeyError, KeyWarning, RpcEndpoint, SecretSource, SecretSourceError,
};
use tollgate_protocol::Amount;

// Well-known anvil test keys (#1, #2): never secrets, but treated as such here.
const KEY_A: &str = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
const KEY_B: &str = "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
const ADDR_A: Address = address!("0x70997970C51812dc3A010C7d01b50e0d17dc79C8");
const ADDR_B: Address = address!("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC");

const DEVNET_TOKEN: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");
const DEVNET_ROUTER: Address = address!("0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512");
const DEVNET_SUBSCRIPTIONS: Address = address!("0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0");
const BASE_SEPOLIA_USDC: Address = address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
const ZERO: &str = "0x0000000000000000000000000000000000000000";

const KEYS: &str = r#"
[keys]
relayers = ["env:RELAYER"]
proof = "env:PROOF"
"#;

const DEVNET: &str = r#"
[[networks]]
name = "tollgate-devnet"
chain_id = 31337
rpc_url = "http://127.0.0.1:8545"
token = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
router = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
"#;

fn example_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/facilitator.toml")
}

fn parse(toml: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(toml)
}

/// A config with the standard keys, `extra` top-level keys and tables, and `networks`.
fn with(extra: &str, networks: &str) -> Result<Config, ConfigError> {
    parse(&format!("{extra}\n{KEYS}\n{networks}"))
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn key_of(e: &ConfigError) -> &str {
    match e {
        ConfigError::Missing { key, .. }
        | ConfigError::InvalidValue { key, .. }
        | ConfigError::ZeroAddress { key }
        | ConfigError::DuplicateNetwork { key, .. }
        | ConfigError::ChainIdMismatch { key, .. }
        | ConfigError::NotEvm { key, .. }
        | ConfigError::InvalidSecretSource { key, .. }
        | ConfigError::InvalidKey { key, .. }
        | ConfigError::SecretNotSet { key, .. }
        | ConfigError::SecretFile { key, .. }
        | ConfigError::InsecureKeyFile { key, .. }
        | ConfigError::SameKey { key, .. } => key,
        other => panic!("no key in {other:?}"),
    }
}

#[track_caller]
fn assert_parse_error(result: Result<Config, ConfigError>, needles: &[&str]) {
    match result {
        Err(e @ ConfigError::Parse { .. }) => {
            let text = e.to_string();
            for needle in needles {
                assert!(text.contains(needle), "{needle:?} not in:\n{text}");
            }
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[track_caller]
fn assert_invalid(result: Result<Config, ConfigError>, key: &str) -> ConfigError {
    let e = result.expect_err("expected an error");
    assert_eq!(key_of(&e), key, "{e}");
    assert!(e.to_string().contains(key), "{e}");
    e
}

#[test]
fn the_example_file_parses() {
    let config = Config::load(example_path()).unwrap();
    assert_eq!(config.listen, "127.0.0.1:8402".parse().unwrap());
    assert_eq!(config.public_url, "http://127.0.0.1:8402");
    assert_eq!(config.store.as_str(), "sqlite://.tollgate/facilitator.db");
    assert!(!config.store.is_postgres());
    assert!(
        matches!(&config.keys.relayers[..], [SecretSource::Env(v)] if v == "TOLLGATE_RELAYER_KEY")
    );
    assert!(matches!(&config.keys.proof, SecretSource::Env(v) if v == "TOLLGATE_PROOF_KEY"));
    assert_eq!(config.fees.settlement_fee, Amount::from_units(1000));
    assert_eq!(config.fees.fee_recipient, None);
    assert_eq!(config.settlement.confirmation_timeout_ms, 10_000);
    assert_eq!(config.settlement.max_validity_secs, 3600);
    assert_eq!(config.settlement.proof_ttl_secs, 600);
    assert_eq!(config.limits.max_body_bytes, 65_536);

    let [devnet] = &config.networks[..] else {
        panic!("one network")
    };
    assert_eq!(devnet.name, "tollgate-devnet");
    assert_eq!(devnet.chain_id, 31337);
    assert_eq!(devnet.rpc, RpcEndpoint::Url("http://127.0.0.1:8545".into()));
    assert_eq!(devnet.token, DEVNET_TOKEN);
    assert_eq!(devnet.router, DEVNET_ROUTER);
    assert_eq!(devnet.subscriptions, Some(DEVNET_SUBSCRIPTIONS));
    assert_eq!(
        (devnet.token_name.as_str(), devnet.token_version.as_str()),
        ("USD Coin", "2")
    );
    assert_eq!(devnet.confirmations, 1);
    assert!(!devnet.builtin);
}

#[test]
fn the_example_base_sepolia_section_parses_when_uncommented() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let (_, section) = text
        .split_once("# [[networks]]")
        .expect("a commented-out section");
    let section: String = section
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .map(|l| l.replace("\"0x…\"", "\"0x1111111111111111111111111111111111111111\""))
        .collect::<Vec<_>>()
        .join("\n");
    let config = parse(&format!("{text}\n[[networks]]{section}")).unwrap();
    let base = config.network("base-sepolia").unwrap();
    assert_eq!(
        (base.chain_id, base.token, base.token_name.as_str()),
        (84532, BASE_SEPOLIA_USDC, "USDC")
    );
    assert_eq!(base.confirmations, 2);
}

#[test]
fn defaults_fill_what_is_left_out() {
    let config = with("", "[[networks]]\nname = \"base-sepolia\"\nrpc_url = \"embedded\"\nrouter = \"0x1111111111111111111111111111111111111111\"").unwrap();
    assert_eq!(config.listen, tollgate_facilitator::config::DEFAULT_LISTEN);
    assert_eq!(
        config.store.as_str(),
        tollgate_facilitator::config::DEFAULT_STORE
    );
    assert_eq!(config.fees.settlement_fee, Amount::from_units(1000));
    let net = &config.networks[0];
    assert_eq!(net.chain_id, 84532);
    assert_eq!(net.token, BASE_SEPOLIA_USDC);
    assert_eq!(
        net.token_name, "USDC",
        "the registry's EIP-712 name for its USDC"
    );
    assert_eq!(net.token_version, "2");
    assert_eq!(net.rpc, RpcEndpoint::Embedded);
    assert_eq!(net.subscriptions, None);
    assert_eq!(net.start_block, 0);
    assert!(net.builtin);
    assert_eq!(config.subscriptions.keeper_interval_secs, 5);
    assert_eq!(config.subscriptions.overage_batch_secs, 60);
    assert_eq!(
        config.subscriptions.overage_batch_amount,
        Amount::from_units(1_000_000)
    );
    assert_eq!(config.webhooks.timeout_secs, 10);
    assert!(!config.webhooks.allow_private_targets);
    assert_eq!(config.server, tollgate_server::Limits::default());
    assert!(
        config.server.rate_limit.is_some(),
        "rate limited by default"
    );

    let config = with(
        "[subscriptions]\noverage_batch_amount = 250000\n[webhooks]\nallow_private_targets = true",
        &format!("{DEVNET}\nstart_block = 123"),
    )
    .unwrap();
    assert_eq!(config.networks[0].start_block, 123);
    assert_eq!(
        config.subscriptions.overage_batch_amount,
        Amount::from_units(250_000)
    );
    assert!(config.webhooks.allow_private_targets);

    // Another token on a built-in network falls back to the generic default name.
    let config = with("", "[[networks]]\nname = \"base-sepolia\"\nchain_id = 84532\nrpc_url = \"embedded\"\ntoken = \"0x5FbDB2315678afecb367f032d93F642f64180aa3\"\nrouter = \"0x1111111111111111111111111111111111111111\"").unwrap();
    assert_eq!(config.networks[0].token_name, "USD Coin");

    // public_url follows listen, with an unspecified address made reachable.
    let config = with("listen = \"0.0.0.0:9000\"", DEVNET).unwrap();
    assert_eq!(config.public_url, "http://127.0.0.1:9000");
    let config = with("public_url = \"https://pay.example.com/\"", DEVNET).unwrap();
    assert_eq!(config.public_url, "https://pay.example.com");
}

#[test]
fn aliases_are_canonicalized_and_duplicates_refused() {
    let base = "[[networks]]\nname = \"base-mainnet\"\nrpc_url = \"https://mainnet.base.org\"\nrouter = \"0x1111111111111111111111111111111111111111\"\n";
    let config = with("", base).unwrap();
    assert_eq!(config.networks[0].name, "base");
    assert_eq!(config.networks[0].chain_id, 8453);
    assert!(config.network("base-mainnet").is_some());
    assert!(config.network("base").is_some());

    let twice = format!("{base}{}", base.replace("base-mainnet", "base"));
    let e = assert_invalid(with("", &twice), "networks[1].name");
    assert!(
        matches!(&e, ConfigError::DuplicateNetwork { name, first, .. } if name == "base" && first == "networks[0].name")
    );

    let devnet_twice = format!("{DEVNET}{DEVNET}");
    assert_invalid(with("", &devnet_twice), "networks[1].name");
}

#[test]
fn network_validation_errors_name_the_key() {
    // A custom name needs a chain id…
    let e = assert_invalid(
        with("", &DEVNET.replace("chain_id = 31337\n", "")),
        "networks[0].chain_id",
    );
    assert!(matches!(e, ConfigError::Missing { .. }));
    // …and a token.
    let no_token = DEVNET.replace(
        "token = \"0x5FbDB2315678afecb367f032d93F642f64180aa3\"\n",
        "",
    );
    assert!(matches!(
        assert_invalid(with("", &no_token), "networks[0].token"),
        ConfigError::Missing { .. }
    ));
    // A built-in name with another chain id.
    let e = assert_invalid(
        with("", &DEVNET.replace("tollgate-devnet", "base-sepolia")),
        "networks[0].chain_id",
    );
    assert!(matches!(
        e,
        ConfigError::ChainIdMismatch {
            expected: 84532,
            found: 31337,
            ..
        }
    ));
    // A known network that is not EVM.
    let solana = DEVNET
        .replace("tollgate-devnet", "solana")
        .replace("chain_id = 31337\n", "");
    assert!(matches!(
        assert_invalid(with("", &solana), "networks[0].name"),
        ConfigError::NotEvm { .. }
    ));
    // A custom name that is not a plain lowercase slug.
    assert_invalid(
        with("", &DEVNET.replace("tollgate-devnet", "Tollgate Devnet")),
        "networks[0].name",
    );
    // Zero addresses.
    for field in ["token", "router"] {
        let line = DEVNET
            .lines()
            .find(|l| l.starts_with(&format!("{field} =")))
            .unwrap();
        let toml = DEVNET.replace(line, &format!("{field} = \"{ZERO}\""));
        assert!(matches!(
            assert_invalid(with("", &toml), &format!("networks[0].{field}")),
            ConfigError::ZeroAddress { .. }
        ));
    }
    let toml = format!("{DEVNET}subscriptions = \"{ZERO}\"\n");
    assert_invalid(with("", &toml), "networks[0].subscriptions");
    // Range checks.
    assert_invalid(
        with("", &format!("{DEVNET}confirmations = 0\n")),
        "networks[0].confirmations",
    );
    assert_invalid(
        with("", &DEVNET.replace("chain_id = 31337", "chain_id = 0")),
        "networks[0].chain_id",
    );
    assert_invalid(
        with(
            "",
            &DEVNET.replace("http://127.0.0.1:8545", "127.0.0.1:8545"),
        ),
        "networks[0].rpc_url",
    );
    assert_invalid(
        with("", &format!("{DEVNET}token_name = \"\"\n")),
        "networks[0].token_name",
    );
    assert_invalid(
        with(
            "",
            &format!("{DEVNET}rpc_fallback_urls = [\"http://127.0.0.1:8546\", \"node-b:8545\"]\n"),
        ),
        "networks[0].rpc_fallback_urls[1]",
    );
    assert_invalid(
        with(
            "",
            &format!(
                "{}rpc_fallback_urls = [\"http://127.0.0.1:8546\"]\n",
                DEVNET.replace("http://127.0.0.1:8545", "embedded")
            ),
        ),
        "networks[0].rpc_fallback_urls",
    );
    let fallbacks = with(
        "[replicas]\nlease_ttl_secs = 5\nid = \"facilitator-1\"\n",
        &format!("{DEVNET}rpc_fallback_urls = [\"https://node-b.example/key\"]\n"),
    )
    .unwrap();
    assert_eq!(fallbacks.networks[0].rpc_fallbacks.len(), 1);
    assert_eq!(fallbacks.replicas.lease_ttl_secs, 5);
    assert_eq!(fallbacks.replicas.id.as_deref(), Some("facilitator-1"));
    // The second entry is named by its index.
    let second = DEVNET.replace("tollgate-devnet", "other-devnet").replace(
        "router = \"0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512\"",
        &format!("router = \"{ZERO}\""),
    );
    assert_invalid(with("", &format!("{DEVNET}{second}")), "networks[1].router");
}

#[test]
fn top_level_validation_errors_name_the_key() {
    assert!(matches!(
        assert_invalid(with("", ""), "networks"),
        ConfigError::Missing { .. }
    ));
    let no_relayers = format!("[keys]\nrelayers = []\nproof = \"env:PROOF\"\n{DEVNET}");
    assert!(matches!(
        assert_invalid(parse(&no_relayers), "keys.relayers"),
        ConfigError::Missing { .. }
    ));
    assert_invalid(with("store = \"mysql://db\"", DEVNET), "store");
    assert_invalid(
        with("public_url = \"ftp://example.com\"", DEVNET),
        "public_url",
    );
    assert_invalid(
        with("public_url = \"https://example.com/?q=1\"", DEVNET),
        "public_url",
    );
    assert_invalid(
        with("[settlement]\nproof_ttl_secs = 0", DEVNET),
        "settlement.proof_ttl_secs",
    );
    assert_invalid(
        with("[settlement]\nmax_validity_secs = 0", DEVNET),
        "settlement.max_validity_secs",
    );
    assert_invalid(
        with("[limits]\nmax_body_bytes = 0", DEVNET),
        "limits.max_body_bytes",
    );
    assert_invalid(
        with("[server]\nmax_header_bytes = 1024", DEVNET),
        "server.max_header_bytes",
    );
    assert_invalid(
        with("[server]\nrequest_timeout_secs = 10", DEVNET),
        "server.request_timeout_secs",
    );
    let server = with(
        "[server]\nrate_per_second = 0\nrequest_timeout_secs = 11\nmax_connections = 10",
        DEVNET,
    )
    .unwrap()
    .server;
    assert_eq!(server.rate_limit, None);
    assert_eq!(server.max_connections, 10);
    assert_eq!(server.request_timeout, std::time::Duration::from_secs(11));
    let e = assert_invalid(
        with(&format!("[fees]\nfee_recipient = \"{ZERO}\""), DEVNET),
        "fees.fee_recipient",
    );
    assert!(matches!(e, ConfigError::ZeroAddress { .. }));
    // confirmation_timeout_ms = 0 is allowed: answer 202 as soon as broadcast.
    assert_eq!(
        with("[settlement]\nconfirmation_timeout_ms = 0", DEVNET)
            .unwrap()
            .settlement
            .confirmation_timeout_ms,
        0
    );
}

#[test]
fn fees_accept_strings_and_integers() {
    for fee in ["\"2500\"", "2500"] {
        let config = with(&format!("[fees]\nsettlement_fee = {fee}"), DEVNET).unwrap();
        assert_eq!(config.fees.settlement_fee, Amount::from_units(2500));
    }
    let huge = with(
        "[fees]\nsettlement_fee = \"1000000000000000000000000000000\"",
        DEVNET,
    )
    .unwrap();
    assert_eq!(
        huge.fees.settlement_fee.to_string(),
        "1000000000000000000000000000000"
    );
    for bad in ["\"1.5\"", "-1", "\"0x10\"", "1.5"] {
        assert_parse_error(
            with(&format!("[fees]\nsettlement_fee = {bad}"), DEVNET),
            &["settlement_fee", "line 2"],
        );
    }
}

#[test]
fn toml_errors_point_at_the_key() {
    // Unknown keys, at every level.
    assert_parse_error(
        with("colour = \"blue\"", DEVNET),
        &["unknown field `colour`", "line 1"],
    );
    assert_parse_error(
        with("[fees]\nsetlement_fee = 1", DEVNET),
        &["unknown field `setlement_fee`", "setlement_fee = 1"],
    );
    assert_parse_error(
        with("", &format!("{DEVNET}rpc = \"x\"\n")),
        &["unknown field `rpc`", "rpc = \"x\""],
    );
    assert_parse_error(
        with("[limits]\nmax_body = 1", DEVNET),
        &["unknown field `max_body`"],
    );
    assert_parse_error(
        with("[settlement]\nproof_ttl = 1", DEVNET),
        &["unknown field `proof_ttl`"],
    );
    // Wrong types and missing required keys.
    assert_parse_error(with("listen = 8402", DEVNET), &["listen = 8402", "line 1"]);
    assert_parse_error(
        with("listen = \"localhost\"", DEVNET),
        &["listen = \"localhost\""],
    );
    assert_parse_error(
        with(
            "",
            &DEVNET.replace(
                "router = \"0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512\"\n",
                "",
            ),
        ),
        &["missing field `router`"],
    );
    assert_parse_error(
        with("", &DEVNET.replace("31337", "\"31337\"")),
        &["chain_id = \"31337\""],
    );
    assert_parse_error(parse(DEVNET), &["missing field `keys`"]);
    // Not TOML at all.
    assert_parse_error(parse("listen = "), &["line 1"]);

    // The span is available to callers that render their own diagnostics.
    let Err(ConfigError::Parse { error, path: None }) = with("colour = 1", DEVNET) else {
        panic!()
    };
    assert_eq!(error.span(), Some(0..6));

    // From a file, the error names the file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "colour = 1\n").unwrap();
    let e = Config::load(&path).unwrap_err();
    assert!(
        matches!(&e, ConfigError::Parse { path: Some(p), .. } if *p == path),
        "{e:?}"
    );
    assert!(e.to_string().contains("bad.toml"), "{e}");
    let e = Config::load(dir.path().join("missing.toml")).unwrap_err();
    assert!(matches!(&e, ConfigError::Read { .. }), "{e:?}");
}

#[test]
fn key_sources_are_validated_at_parse_time() {
    let keys = |relayers: &str, proof: &str| {
        parse(&format!(
            "[keys]\nrelayers = {relayers}\nproof = {proof}\n{DEVNET}"
        ))
    };
    // The proof key may not be a relayer key, nor relayers repeat.
    let e = assert_invalid(keys("[\"env:A\"]", "\"env:A\""), "keys.proof");
    assert!(matches!(&e, ConfigError::SameKey { other, .. } if other == "keys.relayers[0]"));
    assert_invalid(
        keys("[\"file:/k\", \"env:B\", \"file:/k\"]", "\"env:P\""),
        "keys.relayers[2]",
    );
    assert_invalid(
        keys(&format!("[\"0x{KEY_A}\"]"), &format!("\"{KEY_A}\"")),
        "keys.proof",
    );
    // Malformed sources, reported without echoing the value.
    let e = assert_invalid(keys("[\"env:\"]", "\"env:P\""), "keys.relayers[0]");
    assert!(matches!(
        e,
        ConfigError::InvalidSecretSource {
            error: SecretSourceError::EnvName,
            ..
        }
    ));
    assert_invalid(keys("[\"env:R\"]", "\"file:\""), "keys.proof");
    let almost = &KEY_A[..62];
    let e = assert_invalid(
        keys(&format!("[\"0x{almost}\"]"), "\"env:P\""),
        "keys.relayers[0]",
    );
    assert!(matches!(
        e,
        ConfigError::InvalidSecretSource {
            error: SecretSourceError::Literal(KeyError::Length(62)),
            ..
        }
    ));
    assert!(!e.to_string().contains(almost), "{e}");
    let typo = format!("{}x", &KEY_A[..63]);
    let e = assert_invalid(keys("[\"env:R\"]", &format!("\"{typo}\"")), "keys.proof");
    assert!(
        !e.to_string().contains(&typo[..20]) && !format!("{e:?}").contains(&typo[..20]),
        "{e:?}"
    );
}

#[test]
fn resolve_reads_env_vars_through_the_closure() {
    let config = with("", DEVNET).unwrap();
    let keys = config
        .resolve(env(&[
            ("RELAYER", KEY_A),
            ("PROOF", &format!("  0x{KEY_B}\n")),
        ]))
        .unwrap();
    assert_eq!(
        keys.relayers
            .iter()
            .map(|s| s.address())
            .collect::<Vec<_>>(),
        [ADDR_A]
    );
    assert_eq!(keys.proof.address(), ADDR_B);
    assert!(keys.warnings.is_empty());

    let e = config.resolve(env(&[("RELAYER", KEY_A)])).unwrap_err();
    assert!(
        matches!(&e, ConfigError::SecretNotSet { key, var } if key == "keys.proof" && var == "PROOF"),
        "{e}"
    );

    // Distinct sources holding the same key.
    let e = config
        .resolve(env(&[("RELAYER", KEY_A), ("PROOF", KEY_A)]))
        .unwrap_err();
    assert!(
        matches!(&e, ConfigError::SameKey { key, other } if key == "keys.proof" && other == "keys.relayers[0]"),
        "{e}"
    );
    let two = parse(&format!(
        "[keys]\nrelayers = [\"env:R1\", \"env:R2\"]\nproof = \"env:P\"\n{DEVNET}"
    ))
    .unwrap();
    let e = two
        .resolve(env(&[("R1", KEY_A), ("R2", KEY_A), ("P", KEY_B)]))
        .unwrap_err();
    assert!(
        matches!(&e, ConfigError::SameKey { key, .. } if key == "keys.relayers[1]"),
        "{e}"
    );

    // Bad values: typed, keyed, and never echoed.
    for (value, reason) in [
        ("", KeyError::Empty),
        ("0x1234", KeyError::Length(4)),
        (
            &format!("0x{}", &KEY_A[..63].replace('5', "g")) as &str,
            KeyError::NotHex,
        ),
        (&"0".repeat(64) as &str, KeyError::OutOfRange),
    ] {
        let e = config
            .resolve(env(&[("RELAYER", value), ("PROOF", KEY_B)]))
            .unwrap_err();
        assert!(
            matches!(&e, ConfigError::InvalidKey { key, error, .. } if key == "keys.relayers[0]" && *error == reason),
            "{e}"
        );
        if value.len() > 8 {
            assert!(!e.to_string().contains(&value[2..20]), "{e}");
        }
    }
}

#[test]
fn inline_keys_resolve_with_a_warning() {
    let config = parse(&format!(
        "[keys]\nrelayers = [\"0x{KEY_A}\"]\nproof = \"env:PROOF\"\n{DEVNET}"
    ))
    .unwrap();
    let keys = config.resolve(env(&[("PROOF", KEY_B)])).unwrap();
    assert_eq!(keys.relayers[0].address(), ADDR_A);
    assert_eq!(
        keys.warnings,
        [KeyWarning::Inline {
            key: "keys.relayers[0]".into()
        }]
    );
    assert!(keys.warnings[0].to_string().contains("keys.relayers[0]"));
}

#[cfg(unix)]
#[test]
fn key_files_are_read_and_their_permissions_checked() {
    use std::os::unix::fs::PermissionsExt as _;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relayer.key");
    std::fs::write(&path, format!("0x{KEY_A}\n")).unwrap();
    let config = parse(&format!(
        "[keys]\nrelayers = [\"file:{}\"]\nproof = \"env:PROOF\"\n{DEVNET}",
        path.display()
    ))
    .unwrap();
    let proof = env(&[("PROOF", KEY_B)]);

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let keys = config.resolve(&proof).unwrap();
    assert_eq!(keys.relayers[0].address(), ADDR_A);
    assert!(keys.warnings.is_empty());

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let keys = config.resolve(&proof).unwrap();
    assert!(
        matches!(
            &keys.warnings[..],
            [KeyWarning::FileReadableByOthers { mode: 0o644, .. }]
        ),
        "{:?}",
        keys.warnings
    );

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = config.resolve(&proof).unwrap_err();
    assert!(
        matches!(&e, ConfigError::InsecureKeyFile { key, mode: 0o666, .. } if key == "keys.relayers[0]"),
        "{e}"
    );

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, "not a key").unwrap();
    let e = config.resolve(&proof).unwrap_err();
    assert!(
        matches!(
            &e,
            ConfigError::InvalidKey {
                error: KeyError::NotHex,
                ..
            }
        ),
        "{e}"
    );
    assert!(!e.to_string().contains("not a key"), "{e}");

    std::fs::remove_file(&path).unwrap();
    let e = config.resolve(&proof).unwrap_err();
    assert!(
        matches!(&e, ConfigError::SecretFile { key, .. } if key == "keys.relayers[0]"),
        "{e}"
    );
}

#[test]
fn secrets_never_print() {
    let config = parse(&format!(
        "store = \"postgres://app:hunter2@db/tollgate\"\n[keys]\nrelayers = [\"0x{KEY_A}\"]\nproof = \"env:PROOF\"\n{}",
        DEVNET.replace("http://127.0.0.1:8545", "https://base-sepolia.g.alchemy.com/v2/sk_live_abc")
    ))
    .unwrap();
    let keys = config.resolve(env(&[("PROOF", KEY_B)])).unwrap();

    let printed = format!(
        "{config:?}\n{config:#?}\n{keys:?}\n{keys:#?}\n{}\n{}\n{}",
        keys.proof, keys.relayers[0], config.keys.relayers[0]
    );
    for secret in [
        KEY_A,
        KEY_B,
        &KEY_A[..16],
        &KEY_B[..16],
        "hunter2",
        "sk_live_abc",
    ] {
        assert!(!printed.contains(secret), "{secret} printed in:\n{printed}");
    }
    assert!(printed.contains("[redacted]"));
    assert!(printed.contains("app:***@db"), "{printed}");
    // The full values stay available to the code that needs them.
    assert_eq!(config.store.as_str(), "postgres://app:hunter2@db/tollgate");
    assert!(config.store.is_postgres());
    assert_eq!(
        config.networks[0].rpc.url(),
        Some("https://base-sepolia.g.alchemy.com/v2/sk_live_abc")
    );
    assert_eq!(
        keys.relayers[0].signer().to_bytes().to_string(),
        format!("0x{KEY_A}")
    );
}
