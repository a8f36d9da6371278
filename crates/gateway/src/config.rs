//! The gateway's configuration: the TOML schema ([`Config`], [`GateConfig`], [`Route`]), its
//! defaults and its checks. Every error names its key.

use std::{net::SocketAddr, time::Duration};

use alloy::primitives::{Address, B256};
use serde::Deserialize;
use tollgate_protocol::Amount;

use crate::{Error, Result, path};

/// The gateway's configuration (TOML; unknown keys are errors).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the gateway listens (default `127.0.0.1:8090`).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Base URL clients reach the gateway at (default `http://` + listen); the 402's `resource`
    /// URLs are built on it.
    #[serde(default)]
    pub public_url: Option<String>,
    /// The upstream API's base URL.
    pub upstream: String,
    /// Timeout for one upstream request (default 30 s).
    #[serde(default = "default_upstream_timeout")]
    pub upstream_timeout_secs: u64,
    /// Paths under no route: refused with 404 (default) or proxied without payment (in their
    /// canonical form). A case or `;parameter` variant of a route is not "under no route": it is
    /// refused with 400 `AmbiguousPath` either way.
    #[serde(default)]
    pub pass_unmatched: bool,
    /// `[server]`: slow-client timeouts, header size, connection cap and the per-client rate
    /// limit (see [`tollgate_server::ServerConfig`]; behind a reverse proxy set
    /// `client_address = "x-forwarded-for"`).
    #[serde(default)]
    pub server: tollgate_server::ServerConfig,
    /// The payment terms.
    pub gate: GateConfig,
    /// Route prefixes and their prices.
    pub routes: Vec<Route>,
    /// `[mcp]`: priced MCP tools served over streamable HTTP (see [`crate::mcp`]).
    #[serde(default)]
    pub mcp: Option<McpConfig>,
}

/// `[mcp]`: MCP tools that call the upstream API, each free or paid per call over x402's MCP
/// transport.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// Where the MCP endpoint (streamable HTTP) is served (default `/mcp`); it takes precedence
    /// over the routes.
    #[serde(default = "default_mcp_path")]
    pub path: String,
    /// The tools.
    pub tools: Vec<ToolConfig>,
    /// Most MCP sessions open at once (default 1024). Each costs memory while it lives (about
    /// 60 KB), so this bounds what sessions can take; an `initialize` beyond it is answered 503
    /// `Unavailable` with `Retry-After` until one ends.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: usize,
    /// Most MCP sessions one client may hold open (default 32); an `initialize` beyond it is
    /// answered 429 `RateLimited`. Clients are told apart as the rate limit tells them
    /// (`server.client_address`; behind a reverse proxy set `"x-forwarded-for"`), and loopback
    /// and private-network clients, which may be a proxy speaking for many, are held to it only
    /// with `server.rate_limit_private` (the global `max_sessions` holds them either way).
    #[serde(default = "default_max_sessions_per_client")]
    pub max_sessions_per_client: usize,
    /// A session with no request in flight for this many seconds is closed and frees its slot
    /// (default 120). A call in flight keeps its session, however long it takes.
    #[serde(default = "default_session_idle_timeout")]
    pub session_idle_timeout_secs: u64,
}

impl McpConfig {
    /// The session limits, checked.
    fn check(&self) -> Result<()> {
        let positive = [
            ("max_sessions", self.max_sessions as u64),
            (
                "max_sessions_per_client",
                self.max_sessions_per_client as u64,
            ),
            ("session_idle_timeout_secs", self.session_idle_timeout_secs),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(Error::Invalid(format!("mcp.{key}: must be positive")));
        }
        if self.max_sessions_per_client > self.max_sessions {
            return Err(Error::Invalid(format!(
                "mcp.max_sessions_per_client: {} is more than mcp.max_sessions ({})",
                self.max_sessions_per_client, self.max_sessions
            )));
        }
        Ok(())
    }
}

/// `[[mcp.tools]]`: one tool.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// The tool's name (what `tools/call` names).
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// The price per call, smallest units (as a route's `price`); absent: free.
    #[serde(default)]
    pub price: Option<Amount>,
    /// The upstream path the call goes to.
    pub upstream_path: String,
    /// `POST` (the arguments as a JSON body; default) or `GET` (as query parameters).
    #[serde(default = "default_tool_method")]
    pub method: String,
    /// The arguments' JSON Schema (default `{"type": "object"}`).
    #[serde(default)]
    pub input_schema: Option<serde_json::Map<String, serde_json::Value>>,
}

fn default_true() -> bool {
    true
}

fn default_mcp_path() -> String {
    "/mcp".into()
}

fn default_max_sessions() -> usize {
    1024
}

fn default_max_sessions_per_client() -> usize {
    32
}

fn default_session_idle_timeout() -> u64 {
    120
}

fn default_tool_method() -> String {
    "POST".into()
}

/// `[gate]`: what payments must pay and where they settle.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// Network name (an x402 V1 name, or one the facilitator serves).
    pub network: String,
    /// Token contract.
    pub token: Address,
    /// The token's EIP-712 domain name (default "USD Coin").
    #[serde(default = "default_token_name")]
    pub token_name: String,
    /// The token's EIP-712 domain version (default "2").
    #[serde(default = "default_token_version")]
    pub token_version: String,
    /// Who gets paid.
    pub pay_to: Address,
    /// The facilitator's base URL.
    pub facilitator: String,
    /// The once-only memo set: `sqlite://PATH` (default `.tollgate/gateway-memos.db`) or
    /// `postgres://…` (shared by several gateway replicas).
    #[serde(default = "default_memo_store")]
    pub memo_store: String,
    /// Name of the environment variable holding the 32-byte memo secret as hex; replicas must
    /// share it. Unset: a random secret (one replica only; 402 terms die with the process).
    #[serde(default)]
    pub memo_secret_env: Option<String>,
    /// How long 402 terms can be paid, seconds (default 300).
    #[serde(default = "default_memo_ttl")]
    pub memo_ttl_secs: u64,
    /// How long a paying request (an HTTP route's or an MCP tool call's) whose x402 settlement
    /// was sent but not confirmed is held open for the outcome, seconds (default 15; 0 answers
    /// at once). Still pending then, it is answered 503 `SettlementPending` (HTTP) or a
    /// `SettlementPending` tool result (MCP) with the payment's retry token: the same payment
    /// sent again with it is served once the settlement confirms, never charged again.
    #[serde(default = "default_pending_hold")]
    pub pending_hold_secs: u64,
    /// Name of the environment variable holding the provider's facilitator API key (from
    /// `tollgate provider register`). Required by `metered` routes, which deduct each request
    /// from the subscriber's allowance through the facilitator.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Name of the environment variable holding a JSON-RPC URL of the chain to check
    /// subscriptions on, overriding the `rpcUrl` the facilitator publishes in its discovery (a
    /// facilitator operator sets it with `networks.<n>.public_rpc_url`). Only `plan` routes need
    /// a chain; an environment variable because node URLs often carry credentials.
    #[serde(default)]
    pub rpc_url_env: Option<String>,
    /// The token's decimals, for amounts in token notation (`metered = "0.10"`). Default 6
    /// (USDC).
    #[serde(default = "default_token_decimals")]
    pub token_decimals: u8,
}

/// One `[[routes]]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Path prefix (`/v1/quote` matches `/v1/quote` and `/v1/quote/...`, not `/v1/quotes`; the
    /// longest matching prefix wins). Written canonically: no `//`, dot segments, `;`, escapes of
    /// unreserved characters or lower-case hex escapes. Prefixes that differ only in case are
    /// the same route to a case-folding upstream and are refused; a request spelling a route in
    /// another case (`/V1/QUOTE`) is refused with 400 (see the crate docs).
    pub prefix: String,
    /// One-time price per request, smallest units. With `plan`, the alternative offered to
    /// non-subscribers.
    #[serde(default)]
    pub price: Option<Amount>,
    /// A subscription plan (`0x` and 64 hex digits) whose subscribers pass with
    /// `X-Service-Sub`; its terms and the chain are found through the facilitator. Others get a
    /// 402 offering the plan and, with `price`, the one-time price.
    #[serde(default)]
    pub plan: Option<B256>,
    /// With `plan`: each subscriber request admitted deducts this amount from the
    /// subscription's overage allowance (402 `AllowanceExhausted` at the cap). The CLI's
    /// notation: tokens with a decimal point (`"0.10"`, `"1.00"`) or smallest units with a
    /// prefix (`"units:100000"`); a bare integer is refused as ambiguous (`price` beside it is in
    /// smallest units). Needs `gate.api_key_env`.
    #[serde(default)]
    pub metered: Option<String>,
    /// No payment needed.
    #[serde(default)]
    pub free: bool,
    /// Whether browsers (`Accept` preferring `text/html`) get the 402 as a page that pays with
    /// their wallet (default `true`; programs always get JSON).
    #[serde(default = "default_true")]
    pub paywall: bool,
    /// Whether x402 V2's `payment-identifier` is honoured (default `true`: the same payload again
    /// under its id is served again, charged once); `false` serves each payment at most once.
    #[serde(default = "default_true")]
    pub payment_identifier: bool,
    /// Whether the route also offers MPP (default `false`): every 402 carries a
    /// `WWW-Authenticate: Payment` challenge of the EVM `charge` method on `price`, and a
    /// request with `Authorization: Payment <credential>` is settled once and answered with
    /// `Payment-Receipt`. Needs `price`.
    #[serde(default)]
    pub mpp: bool,
    /// The 402's `description`.
    #[serde(default)]
    pub description: String,
    /// The 402's `mimeType` (default `application/json`).
    #[serde(default = "default_mime")]
    pub mime_type: String,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8090))
}
fn default_upstream_timeout() -> u64 {
    30
}
fn default_token_name() -> String {
    "USD Coin".into()
}
fn default_token_version() -> String {
    "2".into()
}
fn default_memo_store() -> String {
    "sqlite://.tollgate/gateway-memos.db".into()
}
fn default_memo_ttl() -> u64 {
    300
}
fn default_pending_hold() -> u64 {
    tollgate_gate::DEFAULT_PENDING_HOLD.as_secs()
}
fn default_token_decimals() -> u8 {
    6
}
fn default_mime() -> String {
    "application/json".into()
}

impl Route {
    /// The metered amount in the token's smallest unit, from its notation (see
    /// [`Route::metered`]).
    pub fn metered_amount(&self, decimals: u8) -> Result<Option<Amount>, String> {
        let Some(s) = self.metered.as_deref() else {
            return Ok(None);
        };
        let amount = parse_token_amount(s, decimals)?;
        if amount == Amount::ZERO {
            return Err("must be positive".into());
        }
        Ok(Some(amount))
    }
}

/// An amount in token notation with a decimal point (`"0.10"`, `"1.00"`: at most `decimals`
/// decimals) or in smallest units (`"units:100000"`), in smallest units
/// ([`Amount::parse_notation`]). A bare integer is refused: `"1"` would read as a token here and
/// as a unit in `price`.
pub(crate) fn parse_token_amount(s: &str, decimals: u8) -> Result<Amount, String> {
    Amount::parse_notation(s, decimals).map_err(|e| e.to_string())
}

impl Config {
    /// Parses and checks a config.
    pub fn from_toml_str(s: &str) -> Result<Self> {
        let config: Self = toml::from_str(s)?;
        if !(config.upstream.starts_with("http://") || config.upstream.starts_with("https://")) {
            return Err(Error::Invalid(format!(
                "upstream: {:?} is not an http(s) URL",
                config.upstream
            )));
        }
        config.limits()?;
        if config.routes.is_empty() {
            return Err(Error::Invalid(
                "routes: at least one [[routes]] entry is required".into(),
            ));
        }
        for (i, r) in config.routes.iter().enumerate() {
            if !r.prefix.starts_with('/') || r.prefix.contains('{') || r.prefix.contains('*') {
                return Err(Error::Invalid(format!(
                    "routes[{i}].prefix: {:?} must be a literal path starting with /",
                    r.prefix
                )));
            }
            let priced = r.price.is_some() || r.plan.is_some();
            match (priced, r.free) {
                (true, true) => {
                    return Err(Error::Invalid(format!(
                        "routes[{i}]: set price or plan, or free, not both"
                    )));
                }
                (false, false) => {
                    return Err(Error::Invalid(format!(
                        "routes[{i}]: set price (smallest units), plan, or free = true"
                    )));
                }
                _ => {}
            }
            if r.metered.is_some() {
                if r.plan.is_none() {
                    return Err(Error::Invalid(format!(
                        "routes[{i}].metered: meters subscribers, so it needs plan"
                    )));
                }
                if config.gate.api_key_env.is_none() {
                    return Err(Error::Invalid(format!(
                        "gate.api_key_env: required by routes[{i}].metered (the provider's API \
                         key deducts metered usage through the facilitator)"
                    )));
                }
            }
            if r.mpp && r.price.is_none() {
                return Err(Error::Invalid(format!(
                    "routes[{i}].mpp: MPP's charge pays a one-time price, so it needs price"
                )));
            }
            r.metered_amount(config.gate.token_decimals)
                .map_err(|e| Error::Invalid(format!("routes[{i}].metered: {e}")))?;
        }
        config.prefixes()?;
        if let Some(m) = &config.mcp {
            m.check()?;
        }
        Ok(config)
    }

    /// The routes' prefixes, checked: written canonically, and no two covering the same paths.
    fn prefixes(&self) -> Result<Vec<path::Prefix>> {
        let mut prefixes: Vec<path::Prefix> = Vec::with_capacity(self.routes.len());
        for (i, r) in self.routes.iter().enumerate() {
            let prefix = path::Prefix::parse(&r.prefix)
                .map_err(|e| Error::Invalid(format!("routes[{i}].prefix: {e}")))?;
            if let Some(j) = prefixes.iter().position(|p| p.overlaps(&prefix)) {
                return Err(Error::Invalid(format!(
                    "routes[{i}].prefix: {:?} covers the same paths as routes[{j}] (route \
                     prefixes match regardless of case)",
                    r.prefix
                )));
            }
            prefixes.push(prefix);
        }
        Ok(prefixes)
    }

    /// The HTTP server's limits from `[server]`, with the request timeout raised to at least
    /// what a paid request may take before its answer: the facilitator's timeout and
    /// `gate.pending_hold_secs` (settling), then `upstream_timeout_secs`, and 5 s, so that a
    /// paid request is answered (504 for a slow upstream, 503 `SettlementPending`), never cut
    /// at 408 after its payment.
    pub fn limits(&self) -> Result<tollgate_server::Limits> {
        let mut limits = self
            .server
            .limits()
            .map_err(|e| Error::Invalid(format!("server.{e}")))?;
        let paid = tollgate_gate::DEFAULT_FACILITATOR_TIMEOUT
            .as_secs()
            .saturating_add(self.gate.pending_hold_secs)
            .saturating_add(self.upstream_timeout_secs)
            .saturating_add(5);
        limits.request_timeout = limits.request_timeout.max(Duration::from_secs(paid));
        Ok(limits)
    }

    /// Each route's prefix with its route, checked.
    pub(crate) fn routes(&self) -> Result<Vec<(path::Prefix, &Route)>> {
        Ok(self.prefixes()?.into_iter().zip(&self.routes).collect())
    }

    /// The distinct plans the routes sell.
    pub(crate) fn plans(&self) -> Vec<B256> {
        let mut plans: Vec<B256> = Vec::new();
        for plan in self.routes.iter().filter_map(|r| r.plan) {
            if !plans.contains(&plan) {
                plans.push(plan);
            }
        }
        plans
    }

    /// Reads and parses a config file.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let s = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
upstream = "http://127.0.0.1:9000"
[gate]
network = "base-sepolia"
token = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
pay_to = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
facilitator = "http://127.0.0.1:8402"
[[routes]]
prefix = "/v1/quote"
price = "500000"
[[routes]]
prefix = "/healthz"
free = true
"#;

    #[test]
    fn parses_and_validates() {
        let c = Config::from_toml_str(GOOD).unwrap();
        assert_eq!(c.routes[0].price, Some(Amount::from_units(500_000)));
        assert!(c.routes[1].free);
        assert_eq!(c.listen, default_listen());
        for (bad, needle) in [
            (GOOD.replace("price = \"500000\"", ""), "routes[0]"),
            (
                GOOD.replace("free = true", "free = true\nprice = \"1\""),
                "not both",
            ),
            (GOOD.replace("upstream = ", "nope = 1\nupstream = "), "nope"),
            (GOOD.replace("http://127.0.0.1:9000", "ftp://x"), "upstream"),
            (GOOD.replace("\"/v1/quote\"", "\"v1\""), "prefix"),
            (
                GOOD.replace("\"/v1/quote\"", "\"/v1//quote\""),
                "write \"/v1/quote\"",
            ),
            (
                GOOD.replace("\"/healthz\"", "\"/V1/Quote/\""),
                "routes[1].prefix: \"/V1/Quote/\" covers the same paths as routes[0]",
            ),
        ] {
            let err = Config::from_toml_str(&bad).unwrap_err().to_string();
            assert!(err.contains(needle), "{err} should mention {needle}");
        }
    }

    #[test]
    fn the_example_config_parses() {
        Config::from_toml_str(include_str!("../../../examples/gateway.toml")).unwrap();
    }

    #[test]
    fn plan_and_metered_routes() {
        let plan = format!("0x{}", "ab".repeat(32));
        let with = |route: &str, gate: &str| {
            GOOD.replace(
                "facilitator = \"http://127.0.0.1:8402\"",
                &format!("facilitator = \"http://127.0.0.1:8402\"\n{gate}"),
            ) + &format!("[[routes]]\nprefix = \"/v1/chat\"\n{route}\n")
        };
        let c = Config::from_toml_str(&with(
            &format!("plan = \"{plan}\"\nprice = \"1000\"\nmetered = \"0.10\""),
            "api_key_env = \"KEY\"",
        ))
        .unwrap();
        let r = &c.routes[2];
        assert_eq!(r.plan, Some(B256::repeat_byte(0xab)));
        assert_eq!(
            r.metered_amount(6).unwrap(),
            Some(Amount::from_units(100_000))
        );
        assert_eq!(c.plans(), vec![B256::repeat_byte(0xab)]);
        for (route, gate, needle) in [
            (
                format!("plan = \"{plan}\"\nmetered = \"0.1\""),
                "",
                "gate.api_key_env: required by routes[2].metered",
            ),
            (
                "metered = \"0.1\"\nprice = \"1\"".to_owned(),
                "api_key_env = \"K\"",
                "routes[2].metered: meters subscribers",
            ),
            (
                format!("plan = \"{plan}\"\nmetered = \"0.1234567\""),
                "api_key_env = \"K\"",
                "more than 6 decimals",
            ),
            (
                format!("plan = \"{plan}\"\nmetered = \"units:0\""),
                "api_key_env = \"K\"",
                "must be positive",
            ),
            (format!("plan = \"{plan}\"\nfree = true"), "", "not both"),
            ("plan = \"0x12\"".to_owned(), "", "plan"),
            (
                format!("plan = \"{plan}\"\nmpp = true"),
                "",
                "routes[2].mpp: MPP's charge pays a one-time price",
            ),
        ] {
            let err = Config::from_toml_str(&with(&route, gate))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{err} should mention {needle}");
        }
    }

    #[test]
    fn a_paid_request_is_answered_before_the_request_timeout() {
        let c = Config::from_toml_str(GOOD).unwrap();
        assert_eq!(c.gate.pending_hold_secs, 15);
        // The facilitator's 10 s, the hold, the upstream's 30 s, and 5 s.
        assert_eq!(c.limits().unwrap().request_timeout, Duration::from_secs(60));
        let c = Config::from_toml_str(&GOOD.replace(
            "facilitator = \"http://127.0.0.1:8402\"",
            "facilitator = \"http://127.0.0.1:8402\"\npending_hold_secs = 0",
        ))
        .unwrap();
        assert_eq!(c.limits().unwrap().request_timeout, Duration::from_secs(45));
        let c =
            Config::from_toml_str(&format!("{GOOD}[server]\nrequest_timeout_secs = 90\n")).unwrap();
        assert_eq!(c.limits().unwrap().request_timeout, Duration::from_secs(90));
    }

    #[test]
    fn mcp_session_limits() {
        let tools = "[mcp]\n[[mcp.tools]]\nname = \"t\"\nupstream_path = \"/t\"\n";
        let m = Config::from_toml_str(&format!("{GOOD}{tools}"))
            .unwrap()
            .mcp
            .unwrap();
        assert_eq!(
            (
                m.max_sessions,
                m.max_sessions_per_client,
                m.session_idle_timeout_secs
            ),
            (1024, 32, 120)
        );
        let with = |keys: &str| {
            format!(
                "{GOOD}{}",
                tools.replace("[mcp]\n", &format!("[mcp]\n{keys}\n"))
            )
        };
        let m = Config::from_toml_str(&with(
            "max_sessions = 10\nmax_sessions_per_client = 10\nsession_idle_timeout_secs = 1",
        ))
        .unwrap()
        .mcp
        .unwrap();
        assert_eq!(m.max_sessions_per_client, 10);
        for (keys, needle) in [
            ("max_sessions = 0", "mcp.max_sessions: must be positive"),
            (
                "max_sessions_per_client = 0",
                "mcp.max_sessions_per_client: must be positive",
            ),
            (
                "session_idle_timeout_secs = 0",
                "mcp.session_idle_timeout_secs: must be positive",
            ),
            (
                "max_sessions = 4\nmax_sessions_per_client = 5",
                "mcp.max_sessions_per_client: 5 is more than mcp.max_sessions (4)",
            ),
            ("max_session = 4", "max_session"),
            ("max_sessions = -1", "max_sessions"),
        ] {
            let err = Config::from_toml_str(&with(keys)).unwrap_err().to_string();
            assert!(err.contains(needle), "{err} should mention {needle}");
        }
    }

    #[test]
    fn token_notation() {
        let p = |s| parse_token_amount(s, 6);
        assert_eq!(p("0.10"), Ok(Amount::from_units(100_000)));
        assert_eq!(p("1.00"), Ok(Amount::from_units(1_000_000)));
        assert!(p("1").unwrap_err().contains("ambiguous"));
        assert_eq!(p("1.000001"), Ok(Amount::from_units(1_000_001)));
        assert_eq!(p("units:42"), Ok(Amount::from_units(42)));
        assert_eq!(p(".5"), Ok(Amount::from_units(500_000)));
        assert_eq!(p("1."), Ok(Amount::from_units(1_000_000)));
        for bad in ["", ".", "-1", "1e3", "0x10", "1.0000001", "units:1.5", " 1"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }
}
