//! Prometheus metrics without a metrics dependency: a small [`Registry`] of counters, histograms
//! and closure-backed gauges rendered in the text exposition format (version 0.0.4), and
//! [`Metrics`], the facilitator's own series on top of it.
//!
//! Every series is registered up front with a fixed label set and handed out as a handle
//! ([`Counter`], [`Histogram`]) wrapping an `Arc` of atomics, so recording is one or two relaxed
//! atomic adds with no lock and no allocation. The registry's mutex is taken only to register
//! and, briefly, to snapshot the series list when rendering; gauge closures run outside it.

use std::{
    collections::HashMap,
    fmt::{self, Write as _},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

/// The `Content-Type` of [`Registry::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Buckets (seconds) for HTTP request latency.
pub const HTTP_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Buckets (seconds) for settlement latency: from an automining devnet (milliseconds) to a public
/// chain under load (a minute).
pub const SETTLEMENT_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// A monotonically increasing count. Cloning shares the series.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A latency histogram with fixed buckets. Observations are durations; the exposition is in
/// seconds. Cloning shares the series.
#[derive(Clone, Debug)]
pub struct Histogram(Arc<HistogramInner>);

#[derive(Debug)]
struct HistogramInner {
    /// Upper bounds in seconds, strictly increasing.
    bounds: Box<[f64]>,
    /// The same bounds in nanoseconds, for the hot path.
    bounds_nanos: Box<[u64]>,
    /// Per-bucket (not cumulative) counts; the last one is `+Inf`.
    buckets: Box<[AtomicU64]>,
    /// Sum of all observations, nanoseconds (wraps after ~584 years of total latency).
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn try_new(bounds: &[f64]) -> Result<Self, MetricsError> {
        if bounds.is_empty()
            || bounds.iter().any(|b| !b.is_finite() || *b <= 0.0)
            || bounds.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(MetricsError::Buckets);
        }
        let bounds_nanos = bounds.iter().map(|b| (b * 1e9).round() as u64).collect();
        let buckets = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Ok(Self(Arc::new(HistogramInner {
            bounds: bounds.into(),
            bounds_nanos,
            buckets,
            sum_nanos: AtomicU64::new(0),
        })))
    }

    /// Records one observation.
    pub fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let inner = &*self.0;
        let i = inner
            .bounds_nanos
            .iter()
            .position(|&b| nanos <= b)
            .unwrap_or(inner.bounds_nanos.len());
        inner.buckets[i].fetch_add(1, Ordering::Relaxed);
        inner.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.0
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }

    /// Sum of the observations so far.
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.0.sum_nanos.load(Ordering::Relaxed))
    }
}

type GaugeFn = Arc<dyn Fn() -> f64 + Send + Sync>;

/// Why a metric could not be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// Not a Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
    #[error("invalid metric name {0:?}")]
    Name(String),
    /// Not a Prometheus label name, reserved (`__*`), or `le` on a histogram.
    #[error("invalid label name {0:?}")]
    LabelName(String),
    /// The name is already registered as another type.
    #[error("metric {0:?} is already registered with another type")]
    TypeMismatch(String),
    /// The same name and label set twice.
    #[error("metric {0:?} already has a series with these labels")]
    Duplicate(String),
    /// Histogram buckets that are empty, not positive and finite, or not strictly increasing.
    #[error("histogram buckets must be positive, finite and strictly increasing")]
    Buckets,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

#[derive(Clone)]
enum Value {
    Counter(Counter),
    Gauge(GaugeFn),
    Histogram(Histogram),
}

#[derive(Clone)]
struct Series {
    /// Rendered label pairs without braces: `a="x",b="y"` (empty when there are none).
    labels: String,
    value: Value,
}

#[derive(Clone)]
struct Family {
    name: String,
    help: String,
    kind: Kind,
    series: Vec<Series>,
}

/// A set of metric families, rendered together. Cheap to share behind an `Arc`.
#[derive(Default)]
pub struct Registry {
    families: Mutex<Vec<Family>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let families = self.families.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_list()
            .entries(families.iter().map(|fam| &fam.name))
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a counter series. The name should end in `_total`.
    pub fn counter(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
    ) -> Result<Counter, MetricsError> {
        let counter = Counter::default();
        self.register(
            name,
            help,
            Kind::Counter,
            labels,
            Value::Counter(counter.clone()),
        )?;
        Ok(counter)
    }

    /// Registers a histogram series with upper bucket bounds in seconds (`+Inf` is implied).
    pub fn histogram(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        buckets: &[f64],
    ) -> Result<Histogram, MetricsError> {
        let histogram = Histogram::try_new(buckets)?;
        self.register(
            name,
            help,
            Kind::Histogram,
            labels,
            Value::Histogram(histogram.clone()),
        )?;
        Ok(histogram)
    }

    /// Registers a gauge whose value is read from `read` at each render. `read` runs outside the
    /// registry's lock, once per scrape: keep it cheap and non-blocking (read an atomic or a
    /// cached value, never a database).
    pub fn gauge(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        read: impl Fn() -> f64 + Send + Sync + 'static,
    ) -> Result<(), MetricsError> {
        self.register(
            name,
            help,
            Kind::Gauge,
            labels,
            Value::Gauge(Arc::new(read)),
        )
    }

    fn register(
        &self,
        name: &str,
        help: &str,
        kind: Kind,
        labels: &[(&str, &str)],
        value: Value,
    ) -> Result<(), MetricsError> {
        if !valid_metric_name(name) {
            return Err(MetricsError::Name(name.to_owned()));
        }
        let mut rendered = String::new();
        for (i, (label, value)) in labels.iter().enumerate() {
            let reserved = label.starts_with("__") || (kind == Kind::Histogram && *label == "le");
            if !valid_label_name(label) || reserved || labels[..i].iter().any(|(l, _)| l == label) {
                return Err(MetricsError::LabelName((*label).to_owned()));
            }
            if i > 0 {
                rendered.push(',');
            }
            rendered.push_str(label);
            rendered.push_str("=\"");
            escape_label_value(&mut rendered, value);
            rendered.push('"');
        }
        let series = Series {
            labels: rendered,
            value,
        };

        let mut families = self.families.lock().unwrap_or_else(PoisonError::into_inner);
        match families.iter_mut().find(|f| f.name == name) {
            Some(family) if family.kind != kind => Err(MetricsError::TypeMismatch(name.to_owned())),
            Some(family) if family.series.iter().any(|s| s.labels == series.labels) => {
                Err(MetricsError::Duplicate(name.to_owned()))
            }
            Some(family) => {
                family.series.push(series);
                Ok(())
            }
            None => {
                families.push(Family {
                    name: name.to_owned(),
                    help: help.to_owned(),
                    kind,
                    series: vec![series],
                });
                Ok(())
            }
        }
    }

    /// Renders every family in the Prometheus text exposition format ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        // Snapshot (cheap `Arc` clones) so gauge closures run without the lock held.
        let families = self
            .families
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut out = String::with_capacity(4096);
        for family in &families {
            render_family(&mut out, family);
        }
        out
    }
}

fn render_family(out: &mut String, family: &Family) {
    let name = &family.name;
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    escape_help(out, &family.help);
    out.push('\n');
    let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
    for series in &family.series {
        let labels = &series.labels;
        match &series.value {
            Value::Counter(c) => sample(out, name, "", labels, None, &c.get().to_string()),
            Value::Gauge(read) => sample(out, name, "", labels, None, &format_float(read())),
            Value::Histogram(h) => {
                let inner = &*h.0;
                let mut cumulative = 0u64;
                for (i, bucket) in inner.buckets.iter().enumerate() {
                    cumulative += bucket.load(Ordering::Relaxed);
                    let le = inner
                        .bounds
                        .get(i)
                        .map_or_else(|| "+Inf".to_owned(), |b| format_float(*b));
                    sample(
                        out,
                        name,
                        "_bucket",
                        labels,
                        Some(&le),
                        &cumulative.to_string(),
                    );
                }
                let sum = inner.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
                sample(out, name, "_sum", labels, None, &format_float(sum));
                // `_count` equals the `+Inf` bucket of the same snapshot, even under concurrent
                // observations.
                sample(out, name, "_count", labels, None, &cumulative.to_string());
            }
        }
    }
}

fn sample(out: &mut String, name: &str, suffix: &str, labels: &str, le: Option<&str>, value: &str) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        out.push_str(labels);
        if let Some(le) = le {
            if !labels.is_empty() {
                out.push(',');
            }
            out.push_str("le=\"");
            out.push_str(le);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

fn format_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        v.to_string()
    }
}

fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn valid_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

fn valid_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

// ---- the facilitator's series ----

/// How a payment was settled: `path` label of the settlement metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettlementPath {
    /// `POST /authorize`, through the `PaymentRouter`.
    Router,
    /// x402 V1 `POST /settle`, `transferWithAuthorization` straight to `payTo`.
    X402,
}

impl SettlementPath {
    const ALL: [Self; 2] = [Self::Router, Self::X402];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Router => "router",
            Self::X402 => "x402",
        }
    }
}

/// How a settlement request ended: `outcome` label of `tollgate_settlements_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettlementOutcome {
    /// Confirmed; a proof (or x402 success) was returned.
    Confirmed,
    /// Broadcast, answered `202 pending` before confirmation.
    Pending,
    /// Broadcast and failed (reverted, dropped).
    Failed,
    /// Refused before broadcast (invalid signature, terms, funds, replay).
    Rejected,
}

impl SettlementOutcome {
    const ALL: [Self; 4] = [Self::Confirmed, Self::Pending, Self::Failed, Self::Rejected];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Confirmed => "confirmed",
            Self::Pending => "pending",
            Self::Failed => "failed",
            Self::Rejected => "rejected",
        }
    }
}

/// The `kind` label of `tollgate_chain_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChainErrorKind {
    /// The node was unreachable or timed out.
    Unavailable,
    /// The node answered with a JSON-RPC error.
    Rpc,
    /// The node refused a transaction (nonce, gas, fee).
    Rejected,
    /// A call or transaction reverted.
    Reverted,
    /// Anything else.
    Other,
}

impl ChainErrorKind {
    const ALL: [Self; 5] = [
        Self::Unavailable,
        Self::Rpc,
        Self::Rejected,
        Self::Reverted,
        Self::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unavailable => "unavailable",
            Self::Rpc => "rpc",
            Self::Rejected => "rejected",
            Self::Reverted => "reverted",
            Self::Other => "other",
        }
    }

    /// The kind of a chain-layer error.
    pub fn of(error: &tollgate_chain::Error) -> Self {
        use tollgate_chain::Error as E;
        match error {
            E::Unavailable(_) | E::Stopped => Self::Unavailable,
            E::Rpc { .. } => Self::Rpc,
            E::Rejected(_) => Self::Rejected,
            E::Revert(_) | E::Reverted { .. } => Self::Reverted,
            _ => Self::Other,
        }
    }
}

/// The label value used for routes and networks that were not registered.
pub const OTHER: &str = "other";

/// The facilitator's metrics:
///
/// - `tollgate_settlements_total{path, outcome}` (counter)
/// - `tollgate_settlement_seconds{path}` (histogram: request received → answered, confirmed or not)
/// - `tollgate_http_request_seconds{route}` (histogram)
/// - `tollgate_http_responses_total{route, class}` (counter; class `1xx`…`5xx`)
/// - `tollgate_chain_errors_total{network, kind}` (counter)
/// - any gauges added with [`Metrics::gauge`].
///
/// Routes and networks are fixed at construction; recording for an unknown one counts under
/// `"other"`, so label cardinality stays bounded whatever the traffic.
pub struct Metrics {
    registry: Registry,
    settlements: [[Counter; 4]; 2],
    settlement_seconds: [Histogram; 2],
    routes: HashMap<String, RouteSeries>,
    other_route: RouteSeries,
    chain_errors: HashMap<String, [Counter; 5]>,
    other_network: [Counter; 5],
}

impl Default for Metrics {
    /// The facilitator's routes ([`crate::openapi::PATHS`]) and no networks (chain errors count
    /// under `"other"`); prefer [`Metrics::new`] with the configured networks.
    fn default() -> Self {
        Self::new(std::iter::empty::<&str>(), crate::openapi::PATHS)
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug)]
struct RouteSeries {
    seconds: Histogram,
    responses: [Counter; 5],
}

// The names and label sets below are constants (and network/route names only appear as label
// values, which are escaped), so registration cannot fail; the unit tests exercise it.
const STATIC_OK: &str = "static metric definitions are valid";

impl Metrics {
    /// Registers the series for these networks (their canonical names) and route templates
    /// (`/authorize`, `/settlements/{key}`, …). Duplicates are ignored.
    pub fn new<N, R>(networks: N, routes: R) -> Self
    where
        N: IntoIterator,
        N::Item: AsRef<str>,
        R: IntoIterator,
        R::Item: AsRef<str>,
    {
        let registry = Registry::new();
        let settlements = SettlementPath::ALL.map(|path| {
            SettlementOutcome::ALL.map(|outcome| {
                registry
                    .counter(
                        "tollgate_settlements_total",
                        "Settlement requests by path (router: /authorize, x402: /settle) and outcome.",
                        &[("path", path.as_str()), ("outcome", outcome.as_str())],
                    )
                    .expect(STATIC_OK)
            })
        });
        let settlement_seconds = SettlementPath::ALL.map(|path| {
            registry
                .histogram(
                    "tollgate_settlement_seconds",
                    "Time from receiving a settlement request to answering it.",
                    &[("path", path.as_str())],
                    SETTLEMENT_BUCKETS,
                )
                .expect(STATIC_OK)
        });

        let mut routes_map = HashMap::new();
        for route in routes {
            let route = route.as_ref();
            if route != OTHER && !routes_map.contains_key(route) {
                routes_map.insert(route.to_owned(), Self::route_series(&registry, route));
            }
        }
        let other_route = Self::route_series(&registry, OTHER);

        let mut chain_errors = HashMap::new();
        for network in networks {
            let network = network.as_ref();
            if network != OTHER && !chain_errors.contains_key(network) {
                chain_errors.insert(network.to_owned(), Self::chain_series(&registry, network));
            }
        }
        let other_network = Self::chain_series(&registry, OTHER);

        Self {
            registry,
            settlements,
            settlement_seconds,
            routes: routes_map,
            other_route,
            chain_errors,
            other_network,
        }
    }

    fn route_series(registry: &Registry, route: &str) -> RouteSeries {
        let seconds = registry
            .histogram(
                "tollgate_http_request_seconds",
                "HTTP request latency by route template.",
                &[("route", route)],
                HTTP_BUCKETS,
            )
            .expect(STATIC_OK);
        let responses = ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|class| {
            registry
                .counter(
                    "tollgate_http_responses_total",
                    "HTTP responses by route template and status class.",
                    &[("route", route), ("class", class)],
                )
                .expect(STATIC_OK)
        });
        RouteSeries { seconds, responses }
    }

    fn chain_series(registry: &Registry, network: &str) -> [Counter; 5] {
        ChainErrorKind::ALL.map(|kind| {
            registry
                .counter(
                    "tollgate_chain_errors_total",
                    "Errors from chain backends by network and kind.",
                    &[("network", network), ("kind", kind.as_str())],
                )
                .expect(STATIC_OK)
        })
    }

    /// Counts a settlement request's outcome and records its latency.
    pub fn settlement(&self, path: SettlementPath, outcome: SettlementOutcome, elapsed: Duration) {
        self.settlements[path as usize][outcome as usize].inc();
        self.settlement_seconds[path as usize].observe(elapsed);
    }

    /// Records an HTTP request by its route template (axum's `MatchedPath`, or anything for
    /// unmatched requests: unknown routes count as `"other"`).
    pub fn http_request(&self, route: &str, status: u16, elapsed: Duration) {
        let series = self.routes.get(route).unwrap_or(&self.other_route);
        series.seconds.observe(elapsed);
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        series.responses[class].inc();
    }

    /// Counts a chain error on a network (unknown networks count as `"other"`).
    pub fn chain_error(&self, network: &str, kind: ChainErrorKind) {
        let series = self
            .chain_errors
            .get(network)
            .unwrap_or(&self.other_network);
        series[kind as usize].inc();
    }

    /// Adds a gauge read at each render (e.g. relayer balances, the webhook outbox depth); see
    /// [`Registry::gauge`].
    pub fn gauge(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        read: impl Fn() -> f64 + Send + Sync + 'static,
    ) -> Result<(), MetricsError> {
        self.registry.gauge(name, help, labels, read)
    }

    /// The registry, for components that keep their own series.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The exposition text for `GET /metrics` ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        self.registry.render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A strict-enough parser of the text format: checks every line's syntax, that each family
    /// has HELP and TYPE before its samples and appears once, and that histograms are cumulative
    /// with `+Inf` equal to `_count`. Returns `(name with labels, value)` samples.
    fn parse(text: &str) -> Vec<(String, f64)> {
        assert!(text.ends_with('\n'));
        let mut samples = Vec::new();
        let mut typed: HashMap<String, String> = HashMap::new();
        let mut helped = HashSet::new();
        let mut finished: HashSet<String> = HashSet::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(valid_metric_name(name), "{line}");
                assert!(helped.insert(name.to_owned()), "HELP twice: {line}");
                if let Some(prev) = current.replace(name.to_owned()) {
                    finished.insert(prev);
                }
                assert!(!finished.contains(name), "family split: {name}");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(
                    Some(name),
                    current.as_deref(),
                    "TYPE after its HELP: {line}"
                );
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                assert!(
                    typed.insert(name.to_owned(), kind.to_owned()).is_none(),
                    "{line}"
                );
                continue;
            }
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("value in {line}")),
            };
            let name = series.split('{').next().unwrap();
            let family = current.as_deref().expect("sample before HELP");
            let suffix = name
                .strip_prefix(family)
                .unwrap_or_else(|| panic!("{name} outside {family}"));
            match typed[family].as_str() {
                "histogram" => assert!(["_bucket", "_sum", "_count"].contains(&suffix), "{line}"),
                _ => assert_eq!(suffix, "", "{line}"),
            }
            let labels = &series[name.len()..];
            if !labels.is_empty() {
                check_labels(
                    labels
                        .strip_prefix('{')
                        .and_then(|l| l.strip_suffix('}'))
                        .expect(line),
                );
            }
            samples.push((series.to_owned(), value));
        }
        check_histograms(&samples, &typed);
        samples
    }

    fn check_labels(mut s: &str) {
        loop {
            let (name, rest) = s.split_once("=\"").expect("label=\"value\"");
            assert!(valid_label_name(name), "{name}");
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next().expect("closing quote") {
                    (_, '\\') => assert!(matches!(chars.next(), Some((_, '\\' | '"' | 'n')))),
                    (i, '"') => break i,
                    _ => {}
                }
            };
            s = &rest[end + 1..];
            if s.is_empty() {
                return;
            }
            s = s.strip_prefix(',').expect("comma between labels");
        }
    }

    fn check_histograms(samples: &[(String, f64)], typed: &HashMap<String, String>) {
        for (family, _) in typed.iter().filter(|(_, k)| *k == "histogram") {
            let buckets: Vec<_> = samples
                .iter()
                .filter(|(s, _)| s.starts_with(&format!("{family}_bucket{{")))
                .collect();
            assert!(!buckets.is_empty());
            // Group by the labels other than `le` (it is always last).
            let mut by_series: HashMap<String, Vec<f64>> = HashMap::new();
            for (s, v) in &buckets {
                let key = s.rsplit_once("le=").unwrap().0.to_owned();
                by_series.entry(key).or_default().push(*v);
            }
            for (key, counts) in by_series {
                assert!(
                    counts.windows(2).all(|w| w[0] <= w[1]),
                    "not cumulative: {key}"
                );
                assert!(key.ends_with(',') || key.ends_with('{'));
                let labels = key
                    .trim_start_matches(&format!("{family}_bucket"))
                    .trim_end_matches(',');
                let labels = if labels == "{" {
                    String::new()
                } else {
                    format!("{labels}}}")
                };
                let count = samples
                    .iter()
                    .find(|(s, _)| *s == format!("{family}_count{labels}"))
                    .unwrap()
                    .1;
                assert_eq!(*counts.last().unwrap(), count, "+Inf = _count for {key}");
            }
        }
    }

    fn value(samples: &[(String, f64)], series: &str) -> f64 {
        samples
            .iter()
            .find(|(s, _)| s == series)
            .unwrap_or_else(|| panic!("no {series}"))
            .1
    }

    #[test]
    fn renders_valid_exposition_with_recorded_values() {
        let metrics = Metrics::new(
            ["base-sepolia", "tollgate-devnet"],
            ["/authorize", "/settlements/{key}"],
        );
        metrics.settlement(
            SettlementPath::Router,
            SettlementOutcome::Confirmed,
            Duration::from_millis(30),
        );
        metrics.settlement(
            SettlementPath::Router,
            SettlementOutcome::Confirmed,
            Duration::from_secs(3),
        );
        metrics.settlement(
            SettlementPath::X402,
            SettlementOutcome::Rejected,
            Duration::from_secs(500),
        );
        metrics.http_request("/authorize", 200, Duration::from_micros(1500));
        metrics.http_request("/nope", 404, Duration::from_micros(10));
        metrics.http_request("/authorize", 999, Duration::from_micros(10));
        metrics.chain_error("base-sepolia", ChainErrorKind::Unavailable);
        metrics.chain_error("mystery", ChainErrorKind::Rpc);
        metrics
            .gauge(
                "tollgate_relayer_balance_wei",
                "Relayer \\ balance\nin wei.",
                &[("relayer", "0xab\"c")],
                || 1.5e18,
            )
            .unwrap();
        metrics
            .gauge("tollgate_nan", "NaN gauge.", &[], || f64::NAN)
            .unwrap();

        let text = metrics.render();
        let samples = parse(&text);
        let v = |s: &str| value(&samples, s);
        assert_eq!(
            v(r#"tollgate_settlements_total{path="router",outcome="confirmed"}"#),
            2.0
        );
        assert_eq!(
            v(r#"tollgate_settlements_total{path="x402",outcome="pending"}"#),
            0.0
        );
        assert_eq!(
            v(r#"tollgate_settlement_seconds_bucket{path="router",le="0.05"}"#),
            1.0
        );
        assert_eq!(
            v(r#"tollgate_settlement_seconds_bucket{path="router",le="4"}"#),
            2.0
        );
        assert_eq!(
            v(r#"tollgate_settlement_seconds_bucket{path="x402",le="60"}"#),
            0.0
        );
        assert_eq!(
            v(r#"tollgate_settlement_seconds_bucket{path="x402",le="+Inf"}"#),
            1.0
        );
        assert_eq!(
            v(r#"tollgate_settlement_seconds_count{path="router"}"#),
            2.0
        );
        assert!((v(r#"tollgate_settlement_seconds_sum{path="router"}"#) - 3.03).abs() < 1e-9);
        assert_eq!(
            v(r#"tollgate_http_request_seconds_bucket{route="/authorize",le="0.001"}"#),
            1.0
        );
        assert_eq!(
            v(r#"tollgate_http_request_seconds_count{route="/authorize"}"#),
            2.0
        );
        assert_eq!(
            v(r#"tollgate_http_responses_total{route="/authorize",class="2xx"}"#),
            1.0
        );
        assert_eq!(
            v(r#"tollgate_http_responses_total{route="/authorize",class="5xx"}"#),
            1.0
        );
        assert_eq!(
            v(r#"tollgate_http_responses_total{route="other",class="4xx"}"#),
            1.0
        );
        assert_eq!(
            v(r#"tollgate_chain_errors_total{network="base-sepolia",kind="unavailable"}"#),
            1.0
        );
        assert_eq!(
            v(r#"tollgate_chain_errors_total{network="other",kind="rpc"}"#),
            1.0
        );
        assert_eq!(
            v(r#"tollgate_relayer_balance_wei{relayer="0xab\"c"}"#),
            1.5e18
        );
        assert!(v("tollgate_nan").is_nan());
        assert!(
            text.contains("# HELP tollgate_relayer_balance_wei Relayer \\\\ balance\\nin wei.\n")
        );
        assert!(text.contains("# TYPE tollgate_settlement_seconds histogram\n"));
        assert!(text.contains("# TYPE tollgate_settlements_total counter\n"));
        assert!(text.contains("# TYPE tollgate_relayer_balance_wei gauge\n"));
    }

    #[test]
    fn registration_errors() {
        let r = Registry::new();
        assert_eq!(
            r.counter("1bad", "", &[]).unwrap_err(),
            MetricsError::Name("1bad".into())
        );
        assert_eq!(
            r.counter("a_total", "", &[("bad-label", "x")]).unwrap_err(),
            MetricsError::LabelName("bad-label".into())
        );
        assert_eq!(
            r.counter("a_total", "", &[("__x", "x")]).unwrap_err(),
            MetricsError::LabelName("__x".into())
        );
        assert_eq!(
            r.counter("a_total", "", &[("x", "1"), ("x", "2")])
                .unwrap_err(),
            MetricsError::LabelName("x".into())
        );
        assert_eq!(
            r.histogram("h", "", &[("le", "1")], &[1.0]).unwrap_err(),
            MetricsError::LabelName("le".into())
        );
        assert_eq!(
            r.histogram("h", "", &[], &[2.0, 1.0]).unwrap_err(),
            MetricsError::Buckets
        );
        assert_eq!(
            r.histogram("h", "", &[], &[]).unwrap_err(),
            MetricsError::Buckets
        );
        r.counter("a_total", "", &[("x", "1")]).unwrap();
        assert_eq!(
            r.counter("a_total", "", &[("x", "1")]).unwrap_err(),
            MetricsError::Duplicate("a_total".into())
        );
        assert_eq!(
            r.gauge("a_total", "", &[], || 0.0).unwrap_err(),
            MetricsError::TypeMismatch("a_total".into())
        );
        // An empty registry renders nothing; a label-less counter renders bare.
        assert_eq!(Registry::new().render(), "");
        let r = Registry::new();
        r.counter("b_total", "B.", &[]).unwrap().add(3);
        assert_eq!(
            r.render(),
            "# HELP b_total B.\n# TYPE b_total counter\nb_total 3\n"
        );
    }

    #[test]
    fn gauges_may_use_the_registry_while_rendering() {
        let r = Arc::new(Registry::new());
        let inner = Arc::downgrade(&r);
        // Takes the registry's lock from inside a render: must not deadlock.
        r.gauge("families", "Families.", &[], move || {
            inner
                .upgrade()
                .map_or(0.0, |r| format!("{r:?}").len() as f64)
        })
        .unwrap();
        let samples = parse(&r.render());
        assert_eq!(value(&samples, "families"), "[\"families\"]".len() as f64);
    }

    #[test]
    fn recording_is_shared_across_threads() {
        let metrics = Arc::new(Metrics::new(["n"], ["/r"]));
        std::thread::scope(|s| {
            for _ in 0..4 {
                let m = Arc::clone(&metrics);
                s.spawn(move || {
                    for _ in 0..1000 {
                        m.http_request("/r", 200, Duration::from_millis(2));
                    }
                });
            }
        });
        let samples = parse(&metrics.render());
        assert_eq!(
            value(
                &samples,
                r#"tollgate_http_request_seconds_count{route="/r"}"#
            ),
            4000.0
        );
        assert_eq!(
            value(
                &samples,
                r#"tollgate_http_request_seconds_bucket{route="/r",le="0.001"}"#
            ),
            0.0
        );
        assert_eq!(
            value(
                &samples,
                r#"tollgate_http_request_seconds_bucket{route="/r",le="0.005"}"#
            ),
            4000.0
        );
    }
}
