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

use std::{collections::HashMap, fmt, sync::Arc, time::Duration};

use prometheus_client::{
    encoding::text::encode_registry,
    metrics::{counter::Counter, histogram::Histogram},
    registry::Registry,
};

use exposition::classic_buckets;
use families::{Counters, Gauges, Histograms, valid_label_name, valid_metric_name};
pub use labels::{ChainErrorKind, SettlementOutcome, SettlementPath};

mod exposition;
mod families;
mod labels;
#[cfg(test)]
mod tests;

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
    /// The facilitator's routes ([`crate::openapi::paths`]) and no networks (chain errors count
    /// under `"other"`); prefer [`Metrics::new`] with the configured networks.
    fn default() -> Self {
        Self::new(
            std::iter::empty::<&str>(),
            crate::openapi::paths().iter().copied(),
        )
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
