//! The metric families the registry writes: counters and histograms with fixed label sets in
//! the 0.0.4 form, and the gauges read at scrape time.

use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder},
    metrics::{MetricType, counter::Counter, histogram::Histogram},
};

use super::MetricsError;

pub(super) type Labels = Vec<(&'static str, String)>;

/// A counter family with fixed label sets, in the 0.0.4 form: registered under its sample name
/// (`…_total`) and written as plain samples in the order they were added. (The crate's own
/// counter encoding is OpenMetrics': the family named without `_total`, appended to each
/// sample.)
#[derive(Debug, Default)]
pub(super) struct Counters(Vec<(Labels, Counter)>);

impl Counters {
    /// A new series; the handle shares it.
    pub(super) fn add(&mut self, labels: Labels) -> Counter {
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
pub(super) struct Histograms(Vec<(Labels, Histogram)>);

impl Histograms {
    /// A new series with these upper bucket bounds (`+Inf` is implied); the handle shares it.
    pub(super) fn add(&mut self, labels: Labels, buckets: &[f64]) -> Histogram {
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
pub(super) struct Gauges(Mutex<Vec<GaugeFamily>>);

impl fmt::Debug for Gauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let families = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_list()
            .entries(families.iter().map(|family| &family.name))
            .finish()
    }
}

impl Gauges {
    pub(super) fn add(
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

pub(super) fn valid_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

pub(super) fn valid_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
