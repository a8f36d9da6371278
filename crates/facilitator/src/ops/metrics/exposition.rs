//! The exposition text's adjustments: the registry writes OpenMetrics text, and the bucket lines
//! of the facilitator's histograms are rewritten to the 0.0.4 form this endpoint always served.

use super::HISTOGRAMS;

/// Writes the bucket lines of the facilitator's histograms as this endpoint always has: `le` as
/// the last label, and a finite bound as Rust's `Display` writes it (`le="4"`, `le="0.25"`), where
/// the crate writes `le` first and as an OpenMetrics float (`le="4.0"`). Every other line is kept
/// as it is.
pub(super) fn classic_buckets(text: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
