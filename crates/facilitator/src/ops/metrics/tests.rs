//! The exposition as a scraper reads it: syntax, families, values, and concurrency.

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
    assert!(text.contains("# HELP tollgate_relayer_balance_wei Relayer \\\\ balance\\nin wei.\n"));
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
