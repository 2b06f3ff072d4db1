//! The matrix as a heatmap file: SVG (one image, to attach to a ticket) and a self-contained
//! HTML page around it (the SVG, a legend and the column names).

use std::fmt::Write as _;

use super::matrix::{Matrix, Metric};
use super::terminal::{cell_text, grade};

const CELL: usize = 44;
const LABEL: usize = 180;
const HEADER: usize = 120;
/// Green, yellow, red (good, degraded, bad) and grey (not probed).
const COLOURS: [&str; 3] = ["#56a64b", "#e0b400", "#e02f44"];
const UNPROBED: &str = "#d8d9da";

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The heatmap as an SVG document.
pub fn svg(m: &Matrix, metric: Metric) -> String {
    let width = LABEL + CELL * m.columns.len() + 10;
    let height = HEADER + CELL * m.rows.len() + 10;
    let widest_mtu = m.widest_path_mtu();
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (i, column) in m.columns.iter().enumerate() {
        let x = LABEL + CELL * i + CELL / 2;
        let _ = writeln!(
            out,
            "<text transform=\"translate({x},{}) rotate(-60)\">{}</text>",
            HEADER - 6,
            escape(&m.column_name(column))
        );
    }
    for (r, row) in m.rows.iter().enumerate() {
        let y = HEADER + CELL * r;
        let label = m.node_label(row);
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            LABEL - 6,
            y + CELL / 2 + 4,
            escape(&label)
        );
        for c in 0..m.columns.len() {
            let cell = m.cell(r, c);
            let x = LABEL + CELL * c;
            let (fill, text) = match cell {
                Some(cell) => (
                    COLOURS[grade(cell, metric, widest_mtu)],
                    cell_text(cell, metric),
                ),
                None => (UNPROBED, String::new()),
            };
            let _ = writeln!(
                out,
                "<rect x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{fill}\"><title>{} → {}: {}</title></rect>",
                CELL - 2,
                CELL - 2,
                escape(row),
                escape(&m.column_name(&m.columns[c])),
                escape(&text)
            );
            if !text.is_empty() {
                let _ = writeln!(
                    out,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\">{}</text>",
                    x + CELL / 2 - 1,
                    y + CELL / 2 + 3,
                    escape(&text)
                );
            }
        }
    }
    out.push_str("</svg>\n");
    out
}

/// A self-contained HTML page: title, legend and the SVG heatmap.
pub fn html(m: &Matrix, metric: Metric, title: &str) -> String {
    let what = match (metric, m.widest_path_mtu()) {
        (Metric::Success, _) => "share of requests that succeeded".to_string(),
        (Metric::P99, _) => "worst p99 latency".to_string(),
        (Metric::Loss, _) => "share of requests that failed or were not sent".to_string(),
        (Metric::Mtu, Some(widest)) => format!(
            "path MTU in bytes, the narrowest of the column's paths (bad below {widest}, the \
             widest between two nodes)"
        ),
        (Metric::Mtu, None) => "path MTU in bytes (none searched)".to_string(),
    };
    let legend: String = ["good", "degraded", "bad"]
        .iter()
        .zip(COLOURS)
        .map(|(name, colour)| {
            format!(
                "<span style=\"background:{colour};padding:2px 8px;margin-right:6px\">{name}</span>"
            )
        })
        .collect();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n<style>body{{font-family:sans-serif;margin:24px}}</style>\n</head>\n<body>\n<h1>{title}</h1>\n<p>Each cell: {what}, from the row's node to the column's target ({} sources, {} targets, {} pairs probed).</p>\n<p>{legend}<span style=\"background:{UNPROBED};padding:2px 8px\">not probed</span></p>\n{}</body>\n</html>\n",
        m.rows.len(),
        m.columns.len(),
        m.probed().count(),
        svg(m, metric),
        title = escape(title),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::plugin::matrix::tests::{matrix, mesh};
    use crate::plugin::terminal::tests::golden;

    #[test]
    fn svg_and_html_are_stable() {
        let zones: BTreeMap<String, String> = (0..4)
            .map(|i| (format!("node-{i}"), ["zone-a", "zone-b"][i % 2].to_string()))
            .collect();
        let m = matrix(&mesh(4), &zones);
        golden("matrix-success.svg", &svg(&m, Metric::Success));
        golden(
            "matrix-p99.html",
            &html(&m, Metric::P99, "netreach-mesh round 3"),
        );
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}
