//! The `/metrics` surface is a contract with dashboards and alerts: every family's name, HELP,
//! TYPE and label set, and every histogram's bucket bounds, are compared to the committed list in
//! `metrics_names.txt`, so that a rename (or a library that renders a name differently) fails
//! here instead of silently emptying a dashboard. Values are not compared.
//!
//! The list holds the exposition with the sample values removed and each route label value
//! written `*`; the routes themselves are checked against the OpenAPI path list, and the networks
//! against the configured one, so adding a route does not touch the list.

use std::collections::BTreeSet;

use tollgate_facilitator::openapi::paths;

use crate::support::{Backend, Harness, NETWORK};

/// The committed list (sorted, one line each).
const EXPECTED: &str = include_str!("metrics_names.txt");

/// The exposition without values: HELP and TYPE lines as they are, samples as `name{labels}`
/// with `route="*"`; also the route and network label values seen.
struct Shape {
    lines: BTreeSet<String>,
    routes: BTreeSet<String>,
    networks: BTreeSet<String>,
}

fn shape(text: &str) -> Shape {
    let mut shape = Shape {
        lines: BTreeSet::new(),
        routes: BTreeSet::new(),
        networks: BTreeSet::new(),
    };
    for line in text.lines() {
        if line.starts_with('#') {
            shape.lines.insert(line.to_owned());
            continue;
        }
        let (series, _value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("sample without a value: {line:?}"));
        let mut out = String::with_capacity(series.len());
        let mut rest = series;
        // Label values never contain `="` unescaped, and the tested ones contain no quotes at all.
        while let Some((head, tail)) = rest.split_once("=\"") {
            let (value, after) = tail
                .split_once('"')
                .unwrap_or_else(|| panic!("unterminated label value: {line:?}"));
            let label = head.rsplit([',', '{']).next().unwrap();
            out.push_str(head);
            out.push_str("=\"");
            match label {
                "route" => {
                    shape.routes.insert(value.to_owned());
                    out.push('*');
                }
                "network" => {
                    shape.networks.insert(value.to_owned());
                    out.push_str(value);
                }
                _ => out.push_str(value),
            }
            out.push('"');
            rest = after;
        }
        out.push_str(rest);
        shape.lines.insert(out);
    }
    shape
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_expose_the_committed_names_help_types_labels_and_buckets() {
    let h = Harness::new(Backend::Devnet).await;
    // Something in each HTTP family, a known and an unknown route.
    assert_eq!(h.get("/healthz").await.0, 200);
    assert_eq!(h.get("/no/such/route").await.0, 404);

    let r = h
        .http
        .get(format!("{}/metrics", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/plain; version=0.0.4");
    let text = r.text().await.unwrap();
    assert!(text.ends_with('\n'), "{text}");
    assert!(
        !text.contains("# EOF") && !text.contains("# UNIT"),
        "OpenMetrics-only lines in 0.0.4 text: {text}"
    );

    let shape = shape(&text);
    let actual: Vec<&str> = shape.lines.iter().map(String::as_str).collect();
    let expected: Vec<&str> = EXPECTED.lines().collect();
    assert!(
        actual == expected,
        "the /metrics surface changed; if on purpose, replace tests/it/metrics_names.txt with:\n{}\n",
        actual.join("\n")
    );

    let routes: BTreeSet<String> = paths()
        .iter()
        .copied()
        .chain(["other"])
        .map(str::to_owned)
        .collect();
    assert_eq!(shape.routes, routes);
    let networks: BTreeSet<String> = [NETWORK, "other"].map(str::to_owned).into();
    assert_eq!(shape.networks, networks);
}
