//! The facilitator's Prometheus metrics ([`Metrics`]): series kept in a [`prometheus_client`]
//! registry and served in the Prometheus text exposition format, version 0.0.4
//! ([`CONTENT_TYPE`]).
//!
//! The names, HELP texts, label sets and bucket bounds are a contract with dashboards and alerts
//! (the facilitator's `tests/it/metrics_names.txt` lists them). The crate writes OpenMetrics text;
//! three details of it are adjusted so that the text stays the 0.0.4 text this endpoint has
//! always served:
//!
//! - a counter is registered under its sample name (`…_total`) and written as plain samples,
//!   where the crate would name the family without `_total` and append it to every sample;
//! - a bucket's `le` label is written last, and a finite bound as Rust prints it (`le="4"`), where
//!   the crate writes it first and as an OpenMetrics float (`le="4.0"`): a query that pins a
//!   bucket keeps matching;
//! - no `# EOF` line.
//!
//! Every series is created up front with a fixed label set and kept as a handle, so recording is
//! an atomic add (counters) or one short lock (histograms), with no lookup by label and no
//! allocation, and label cardinality stays bounded whatever the traffic.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, text::encode_registry},
    metrics::{MetricType, counter::Counter, histogram::Histogram},
    registry::Registry,
};

/// The `Content-Type` of [`Metrics::render`]'s output.
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

/// The label value used for routes and networks that were not registered.
pub const OTHER: &str = "other";

// The families. Their HELP texts are given without the final full stop: the registry adds it.
const SETTLEMENTS: &str = "tollgate_settlements_total";
const SETTLEMENTS_HELP: &str =
    "Settlement requests by path (router: /authorize, x402: /settle) and outcome";
const SETTLEMENT_SECONDS: &str = "tollgate_settlement_seconds";
const SETTLEMENT_SECONDS_HELP: &str = "Time from receiving a settlement request to answering it";
const HTTP_SECONDS: &str = "tollgate_http_request_seconds";
const HTTP_SECONDS_HELP: &str = "HTTP request latency by route template";
const HTTP_RESPONSES: &str = "tollgate_http_responses_total";
const HTTP_RESPONSES_HELP: &str = "HTTP responses by route template and status class";
const CHAIN_ERRORS: &str = "tollgate_chain_errors_total";
const CHAIN_ERRORS_HELP: &str = "Errors from chain backends by network and kind";

/// The families above, which gauges may not reuse.
const BUILT_IN: [&str; 5] = [
    SETTLEMENTS,
    SETTLEMENT_SECONDS,
    HTTP_SECONDS,
    HTTP_RESPONSES,
    CHAIN_ERRORS,
];

/// The histogram families, whose bucket lines [`classic_buckets`] rewrites.
const HISTOGRAMS: [&str; 2] = [SETTLEMENT_SECONDS, HTTP_SECONDS];

/// The HTTP status classes, `class` label of `tollgate_http_responses_total`.
const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Why a gauge could not be added.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// Not a Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
    #[error("invalid metric name {0:?}")]
    Name(String),
    /// Not a Prometheus label name, reserved (`__*`), or given twice.
    #[error("invalid label name {0:?}")]
    LabelName(String),
    /// The name is one of the facilitator's counters or histograms.
    #[error("metric {0:?} is already registered with another type")]
    TypeMismatch(String),
    /// The same name and label set twice.
    #[error("metric {0:?} already has a series with these labels")]
    Duplicate(String),
}

// ---- label values ----

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

// ---- the facilitator's series ----

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
    gauges: Arc<Gauges>,
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
            .field("routes", &self.routes.keys())
            .field("networks", &self.chain_errors.keys())
            .field("gauges", &self.gauges)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug)]
struct RouteSeries {
    seconds: Histogram,
    responses: [Counter; 5],
}

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
        let mut settlement_family = Counters::default();
        let settlements = SettlementPath::ALL.map(|path| {
            SettlementOutcome::ALL.map(|outcome| {
                settlement_family.add(vec![
                    ("path", path.as_str().to_owned()),
                    ("outcome", outcome.as_str().to_owned()),
                ])
            })
        });
        let mut settlement_seconds_family = Histograms::default();
        let settlement_seconds = SettlementPath::ALL.map(|path| {
            settlement_seconds_family
                .add(vec![("path", path.as_str().to_owned())], SETTLEMENT_BUCKETS)
        });

        let mut http_seconds = Histograms::default();
        let mut http_responses = Counters::default();
        let mut route_series = |route: &str| RouteSeries {
            seconds: http_seconds.add(vec![("route", route.to_owned())], HTTP_BUCKETS),
            responses: STATUS_CLASSES.map(|class| {
                http_responses.add(vec![
                    ("route", route.to_owned()),
                    ("class", class.to_owned()),
                ])
            }),
        };
        let mut routes_map = HashMap::new();
        for route in routes {
            let route = route.as_ref();
            if route != OTHER && !routes_map.contains_key(route) {
                routes_map.insert(route.to_owned(), route_series(route));
            }
        }
        let other_route = route_series(OTHER);

        let mut chain_family = Counters::default();
        let mut chain_series = |network: &str| {
            ChainErrorKind::ALL.map(|kind| {
                chain_family.add(vec![
                    ("network", network.to_owned()),
                    ("kind", kind.as_str().to_owned()),
                ])
            })
        };
        let mut chain_errors = HashMap::new();
        for network in networks {
            let network = network.as_ref();
            if network != OTHER && !chain_errors.contains_key(network) {
                chain_errors.insert(network.to_owned(), chain_series(network));
            }
        }
        let other_network = chain_series(OTHER);

        let mut registry = Registry::default();
        registry.register(SETTLEMENTS, SETTLEMENTS_HELP, settlement_family);
        registry.register(
            SETTLEMENT_SECONDS,
            SETTLEMENT_SECONDS_HELP,
            settlement_seconds_family,
        );
        registry.register(HTTP_SECONDS, HTTP_SECONDS_HELP, http_seconds);
        registry.register(HTTP_RESPONSES, HTTP_RESPONSES_HELP, http_responses);
        registry.register(CHAIN_ERRORS, CHAIN_ERRORS_HELP, chain_family);
        let gauges = Arc::new(Gauges::default());
        registry.register_collector(Box::new(Arc::clone(&gauges)));

        Self {
            registry,
            gauges,
            settlements,
            settlement_seconds,
            routes: routes_map,
            other_route,
            chain_errors,
            other_network,
        }
    }

    /// Counts a settlement request's outcome and records its latency.
    pub fn settlement(&self, path: SettlementPath, outcome: SettlementOutcome, elapsed: Duration) {
        self.settlements[path as usize][outcome as usize].inc();
        self.settlement_seconds[path as usize].observe(elapsed.as_secs_f64());
    }

    /// Records an HTTP request by its route template (axum's `MatchedPath`, or anything for
    /// unmatched requests: unknown routes count as `"other"`).
    pub fn http_request(&self, route: &str, status: u16, elapsed: Duration) {
        let series = self.routes.get(route).unwrap_or(&self.other_route);
        series.seconds.observe(elapsed.as_secs_f64());
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

    /// Adds a gauge whose value is read from `read` at each render (e.g. relayer balances, the
    /// webhook outbox depth). `read` runs once per scrape with no lock held: keep it cheap and
    /// non-blocking (read an atomic or a cached value, never a database). Gauges of one name
    /// share its first HELP text. Values are written as the crate writes floats (`3.0`,
    /// `1.5e18`, `NaN`, and `inf`/`-inf`, which Prometheus also reads).
    pub fn gauge(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        read: impl Fn() -> f64 + Send + Sync + 'static,
    ) -> Result<(), MetricsError> {
        if !valid_metric_name(name) {
            return Err(MetricsError::Name(name.to_owned()));
        }
        if BUILT_IN.contains(&name) {
            return Err(MetricsError::TypeMismatch(name.to_owned()));
        }
        for (i, (label, _)) in labels.iter().enumerate() {
            if !valid_label_name(label)
                || label.starts_with("__")
                || labels[..i].iter().any(|(l, _)| l == label)
            {
                return Err(MetricsError::LabelName((*label).to_owned()));
            }
        }
        let labels: Vec<(String, String)> = labels
            .iter()
            .map(|(l, v)| ((*l).to_owned(), (*v).to_owned()))
            .collect();
        self.gauges.add(name, help, labels, Arc::new(read))
    }

    /// The exposition text for `GET /metrics` ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut text = String::with_capacity(16 * 1024);
        // Only the writer can fail, and a `String` does not.
        encode_registry(&mut text, &self.registry).expect("writing to a String cannot fail");
        classic_buckets(&text)
    }
}

// ---- families of fixed series ----

type Labels = Vec<(&'static str, String)>;

/// A counter family with fixed label sets, in the 0.0.4 form: registered under its sample name
/// (`…_total`) and written as plain samples in the order they were added. (The crate's own
/// counter encoding is OpenMetrics': the family named without `_total`, appended to each
/// sample.)
#[derive(Debug, Default)]
struct Counters(Vec<(Labels, Counter)>);

impl Counters {
    /// A new series; the handle shares it.
    fn add(&mut self, labels: Labels) -> Counter {
        let counter = Counter::default();
        self.0.push((labels, counter.clone()));
        counter
    }
}

impl EncodeMetric for Counters {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> fmt::Result {
        for (labels, counter) in &self.0 {
            encoder
                .encode_family(labels)?
                .encode_gauge(&counter.get())?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// A histogram family with fixed label sets, written in the order they were added.
#[derive(Debug, Default)]
struct Histograms(Vec<(Labels, Histogram)>);

impl Histograms {
    /// A new series with these upper bucket bounds (`+Inf` is implied); the handle shares it.
    fn add(&mut self, labels: Labels, buckets: &[f64]) -> Histogram {
        let histogram = Histogram::new(buckets.iter().copied());
        self.0.push((labels, histogram.clone()));
        histogram
    }
}

impl EncodeMetric for Histograms {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> fmt::Result {
        for (labels, histogram) in &self.0 {
            histogram.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Writes the bucket lines of the facilitator's histograms as this endpoint always has: `le` as
/// the last label, and a finite bound as Rust's `Display` writes it (`le="4"`, `le="0.25"`), where
/// the crate writes `le` first and as an OpenMetrics float (`le="4.0"`). Every other line is kept
/// as it is.
fn classic_buckets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if !rewrite_bucket(&mut out, line) {
            out.push_str(line);
        }
    }
    out
}

/// Writes `line` rewritten to `out`; false (and nothing written) when it is not a bucket line of
/// [`HISTOGRAMS`] in the crate's form: `name_bucket{le="4.0",path="x402"} 7`.
fn rewrite_bucket(out: &mut String, line: &str) -> bool {
    let Some((name, rest)) = line.split_once('{') else {
        return false;
    };
    if !HISTOGRAMS
        .iter()
        .any(|h| name.strip_suffix("_bucket") == Some(*h))
    {
        return false;
    }
    let Some((bound, rest)) = rest
        .strip_prefix("le=\"")
        .and_then(|rest| rest.split_once('"'))
    else {
        return false;
    };
    // The other labels (escaped values may hold `} `, the count does not) and the count.
    let Some((labels, count)) = rest.rsplit_once("} ") else {
        return false;
    };
    let labels = labels.strip_prefix(',').unwrap_or(labels);
    let bound = match bound.parse::<f64>() {
        Ok(b) if b.is_finite() => b.to_string(),
        _ => bound.to_owned(), // `+Inf`
    };
    out.push_str(name);
    out.push('{');
    out.push_str(labels);
    if !labels.is_empty() {
        out.push(',');
    }
    out.push_str("le=\"");
    out.push_str(&bound);
    out.push_str("\"} ");
    out.push_str(count);
    true
}

// ---- gauges read at scrape time ----

type GaugeFn = Arc<dyn Fn() -> f64 + Send + Sync>;

#[derive(Clone)]
struct GaugeFamily {
    name: String,
    /// Escaped for the HELP line.
    help: String,
    series: Vec<(Vec<(String, String)>, GaugeFn)>,
}

/// The gauges added with [`Metrics::gauge`], written after the fixed families. Its lock is held
/// to add a gauge and to copy the list at a scrape, never while a gauge is read.
#[derive(Default)]
struct Gauges(Mutex<Vec<GaugeFamily>>);

impl fmt::Debug for Gauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let families = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_list()
            .entries(families.iter().map(|family| &family.name))
            .finish()
    }
}

impl Gauges {
    fn add(
        &self,
        name: &str,
        help: &str,
        labels: Vec<(String, String)>,
        read: GaugeFn,
    ) -> Result<(), MetricsError> {
        let mut families = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match families.iter_mut().find(|f| f.name == name) {
            Some(family) if family.series.iter().any(|(l, _)| *l == labels) => {
                Err(MetricsError::Duplicate(name.to_owned()))
            }
            Some(family) => {
                family.series.push((labels, read));
                Ok(())
            }
            None => {
                families.push(GaugeFamily {
                    name: name.to_owned(),
                    help: escape_help(help),
                    series: vec![(labels, read)],
                });
                Ok(())
            }
        }
    }
}

impl Collector for Gauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        // A copy (cheap `Arc` clones), so that the gauges are read without the lock held.
        let families = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for family in &families {
            let mut metric =
                encoder.encode_descriptor(&family.name, &family.help, None, MetricType::Gauge)?;
            for (labels, read) in &family.series {
                // An empty label set would still be written, as `{}`.
                if labels.is_empty() {
                    metric.encode_gauge(&read())?;
                } else {
                    metric.encode_family(labels)?.encode_gauge(&read())?;
                }
            }
        }
        Ok(())
    }
}

/// The HELP text as the exposition format wants it: backslashes and line feeds escaped. (The
/// crate writes HELP texts as given; the fixed families' have nothing to escape.)
fn escape_help(help: &str) -> String {
    let mut out = String::with_capacity(help.len() + 1);
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
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
    fn gauge_registration_errors() {
        let m = Metrics::new(["n"], ["/r"]);
        let gauge = |name: &str, labels: &[(&str, &str)]| m.gauge(name, "", labels, || 0.0);
        assert_eq!(
            gauge("1bad", &[]).unwrap_err(),
            MetricsError::Name("1bad".into())
        );
        assert_eq!(
            gauge("a", &[("bad-label", "x")]).unwrap_err(),
            MetricsError::LabelName("bad-label".into())
        );
        assert_eq!(
            gauge("a", &[("__x", "x")]).unwrap_err(),
            MetricsError::LabelName("__x".into())
        );
        assert_eq!(
            gauge("a", &[("x", "1"), ("x", "2")]).unwrap_err(),
            MetricsError::LabelName("x".into())
        );
        assert_eq!(
            gauge("tollgate_settlements_total", &[]).unwrap_err(),
            MetricsError::TypeMismatch("tollgate_settlements_total".into())
        );
        gauge("a", &[("x", "1")]).unwrap();
        assert_eq!(
            gauge("a", &[("x", "1")]).unwrap_err(),
            MetricsError::Duplicate("a".into())
        );
        gauge("a", &[("x", "2")]).unwrap();
        // One family, after the fixed ones; a label-less gauge renders bare.
        m.gauge("b", "B.", &[], || 3.0).unwrap();
        let text = m.render();
        assert!(
            text.ends_with(
                "# HELP a \n# TYPE a gauge\na{x=\"1\"} 0.0\na{x=\"2\"} 0.0\n\
                 # HELP b B.\n# TYPE b gauge\nb 3.0\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn renders_the_0_0_4_text_of_the_fixed_families() {
        let metrics = Metrics::new(["n"], ["/r"]);
        metrics.settlement(
            SettlementPath::Router,
            SettlementOutcome::Pending,
            Duration::from_secs(3),
        );
        metrics.http_request("/r", 204, Duration::from_millis(20));
        let text = metrics.render();
        // Counters: the family is named as its samples (0.0.4), not without `_total`
        // (OpenMetrics); bucket bounds as before (`le="4"`, not `le="4.0"`); no `# EOF`.
        for expected in [
            "# HELP tollgate_settlements_total Settlement requests by path (router: /authorize, \
             x402: /settle) and outcome.\n\
             # TYPE tollgate_settlements_total counter\n\
             tollgate_settlements_total{path=\"router\",outcome=\"confirmed\"} 0\n\
             tollgate_settlements_total{path=\"router\",outcome=\"pending\"} 1\n",
            "tollgate_settlement_seconds_bucket{path=\"router\",le=\"2\"} 0\n\
             tollgate_settlement_seconds_bucket{path=\"router\",le=\"4\"} 1\n",
            "tollgate_settlement_seconds_bucket{path=\"router\",le=\"60\"} 1\n\
             tollgate_settlement_seconds_bucket{path=\"router\",le=\"+Inf\"} 1\n",
            "tollgate_http_request_seconds_bucket{route=\"/r\",le=\"0.025\"} 1\n",
            "# TYPE tollgate_http_responses_total counter\n\
             tollgate_http_responses_total{route=\"/r\",class=\"1xx\"} 0\n\
             tollgate_http_responses_total{route=\"/r\",class=\"2xx\"} 1\n",
            "tollgate_chain_errors_total{network=\"n\",kind=\"unavailable\"} 0\n",
        ] {
            assert!(text.contains(expected), "{expected}\nnot in\n{text}");
        }
        assert!(!text.contains("# EOF") && !text.contains(".0\"}"), "{text}");
    }

    #[test]
    fn only_histogram_bucket_lines_are_rewritten() {
        let text = "# HELP tollgate_http_request_seconds le=\"1.0\"} x\n\
                    tollgate_http_request_seconds_sum{route=\"/r\"} 1.0\n\
                    tollgate_http_request_seconds_bucket{le=\"10.0\",route=\"a\\\"} b\"} 3\n\
                    tollgate_http_request_seconds_bucket{le=\"0.25\",route=\"/r\"} 3\n\
                    tollgate_http_request_seconds_bucket{le=\"+Inf\",route=\"/r\"} 3\n\
                    tollgate_settlement_seconds_bucket{le=\"1.0\"} 0\n\
                    gauge_bucket{le=\"1.0\",x=\"y\"} 2.0\n";
        assert_eq!(
            classic_buckets(text),
            "# HELP tollgate_http_request_seconds le=\"1.0\"} x\n\
             tollgate_http_request_seconds_sum{route=\"/r\"} 1.0\n\
             tollgate_http_request_seconds_bucket{route=\"a\\\"} b\",le=\"10\"} 3\n\
             tollgate_http_request_seconds_bucket{route=\"/r\",le=\"0.25\"} 3\n\
             tollgate_http_request_seconds_bucket{route=\"/r\",le=\"+Inf\"} 3\n\
             tollgate_settlement_seconds_bucket{le=\"1\"} 0\n\
             gauge_bucket{le=\"1.0\",x=\"y\"} 2.0\n"
        );
    }

    #[test]
    fn gauges_may_use_the_metrics_while_rendering() {
        let metrics = Arc::new(Metrics::new(["n"], ["/r"]));
        let weak = Arc::downgrade(&metrics);
        // Takes the gauges' lock (through `Debug`) from inside a render: must not deadlock.
        metrics
            .gauge("families", "Families.", &[], move || {
                weak.upgrade()
                    .map_or(0.0, |m| format!("{m:?}").matches("families").count() as f64)
            })
            .unwrap();
        let samples = parse(&metrics.render());
        assert_eq!(value(&samples, "families"), 1.0);
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
