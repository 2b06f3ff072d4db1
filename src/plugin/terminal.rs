//! The matrix in a terminal: rows are source nodes, columns are numbered (their names are
//! listed under the grid), cells coloured by how good they are, wide matrices in pages.

use std::fmt::Write as _;

use super::matrix::{Cell, CellValue, Matrix, Metric};

/// How to print.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// ANSI colours (off when stdout is not a terminal or NO_COLOR is set).
    pub colour: bool,
    /// Columns per page.
    pub columns_per_page: usize,
    /// Page to print, from 1.
    pub page: usize,
}

const CELL: usize = 7;

/// A cell's value as printed: `100%`, `50.0%`, `1.5ms`, `120ms`, `2s`, `1400` (bytes; `-` where
/// the path MTU was not searched).
pub fn cell_text(cell: &Cell, metric: Metric) -> String {
    match metric {
        Metric::Success | Metric::Loss => {
            let percent = cell.value(metric) * 100.0;
            if percent == 100.0 || percent == 0.0 {
                format!("{percent:.0}%")
            } else {
                format!("{percent:.1}%")
            }
        }
        Metric::P99 => {
            let ms = cell.p99_ms;
            if ms < 10.0 {
                format!("{ms:.1}ms")
            } else if ms < 10_000.0 {
                format!("{ms:.0}ms")
            } else {
                format!("{:.0}s", ms / 1000.0)
            }
        }
        Metric::Mtu => cell
            .path_mtu
            .map_or_else(|| "-".to_string(), |bytes| bytes.to_string()),
    }
}

/// Good (0), degraded (1) or bad (2). A path MTU is bad below `widest_mtu`, the widest between
/// two nodes ([`Matrix::widest_path_mtu`]): larger packets are cut or lost on that path alone.
pub fn grade(cell: &Cell, metric: Metric, widest_mtu: Option<u32>) -> usize {
    let success = cell.success();
    let by_success = if success >= 0.999 {
        0
    } else if success >= 0.95 {
        1
    } else {
        2
    };
    match metric {
        Metric::Success | Metric::Loss => by_success,
        Metric::P99 => {
            let by_latency = if cell.p99_ms < 10.0 {
                0
            } else if cell.p99_ms < 100.0 {
                1
            } else {
                2
            };
            by_latency.max(by_success)
        }
        Metric::Mtu => {
            let narrower = cell
                .path_mtu
                .zip(widest_mtu)
                .is_some_and(|(mtu, widest)| mtu < widest);
            if narrower { 2 } else { by_success }
        }
    }
}

/// The matrix as text.
pub fn render(m: &Matrix, metric: Metric, layout: Layout) -> String {
    let per_page = layout.columns_per_page.max(1);
    let pages = m.columns.len().div_ceil(per_page).max(1);
    let page = layout.page.clamp(1, pages);
    let first = (page - 1) * per_page;
    let shown = first..(first + per_page).min(m.columns.len());
    let label = |node: &String| m.node_label(node);
    let width = m
        .rows
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(0)
        .max("source \\ target".len());
    let widest_mtu = m.widest_path_mtu();
    let mut out = String::new();
    let _ = write!(out, "{:<width$}", "source \\ target");
    for i in shown.clone() {
        let _ = write!(out, "{:>CELL$}", i + 1);
    }
    out.push('\n');
    for (row, node) in m.rows.iter().enumerate() {
        let _ = write!(out, "{:<width$}", label(node));
        for column in shown.clone() {
            match m.cell(row, column) {
                None => {
                    let _ = write!(out, "{:>CELL$}", "·");
                }
                Some(cell) => {
                    let value = format!("{:>CELL$}", cell_text(cell, metric));
                    if layout.colour {
                        // Black on green, yellow or red.
                        let background = [42, 43, 41][grade(cell, metric, widest_mtu)];
                        let _ = write!(out, "\x1b[30;{background}m{value}\x1b[0m");
                    } else {
                        out.push_str(&value);
                    }
                }
            }
        }
        out.push('\n');
    }
    out.push_str("\ncolumns:\n");
    for i in shown.clone() {
        let _ = writeln!(out, "{:>4}  {}", i + 1, m.column_name(&m.columns[i]));
    }
    if let (Metric::Mtu, Some(widest)) = (metric, widest_mtu) {
        let _ = writeln!(
            out,
            "\ncells: path MTU in bytes, the narrowest of the column's paths (-: not searched); \
             bad below {widest}, the widest between two nodes"
        );
    }
    if pages > 1 {
        let _ = writeln!(
            out,
            "\npage {page} of {pages} (columns {}–{} of {}); --page N for another",
            shown.start + 1,
            shown.end,
            m.columns.len()
        );
    }
    out
}

#[cfg(test)]
pub mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::plugin::matrix::tests::{matrix, mesh};
    use kdoctor_api::fixtures::net_reach_details;
    use kdoctor_api::matrix::{ProbeRow, build};
    use kdoctor_api::report::protocol::Protocol;

    /// Compares with `src/plugin/testdata/<name>`; `UPDATE_GOLDEN=1` rewrites it.
    pub fn golden(name: &str, actual: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/plugin/testdata")
            .join(name);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, actual).expect("write golden");
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
        assert_eq!(
            actual, expected,
            "{name} changed (UPDATE_GOLDEN=1 if intended)"
        );
    }

    fn zones() -> BTreeMap<String, String> {
        (0..4)
            .map(|i| (format!("node-{i}"), ["zone-a", "zone-b"][i % 2].to_string()))
            .collect()
    }

    #[test]
    fn success_without_colour() {
        let m = matrix(&mesh(4), &zones());
        let layout = Layout {
            colour: false,
            columns_per_page: 40,
            page: 1,
        };
        golden("matrix-success.txt", &render(&m, Metric::Success, layout));
    }

    #[test]
    fn path_mtu_in_colour_is_red_on_exactly_the_pairs_narrower_than_most() {
        // Three nodes whose pods take 1,500 bytes between them, over loopback to themselves,
        // and 1,400 on both ways between node-0 and node-2; no search to the Service.
        let mut reports = mesh(3);
        for (i, report) in reports.iter_mut().enumerate() {
            for (j, d) in net_reach_details(report).iter_mut().enumerate() {
                d.name = format!("UDP_{}", d.name);
                let mtu = match (i, j) {
                    (_, 3) => None,
                    (i, j) if i == j => Some(65_535),
                    (0, 2) | (2, 0) => Some(1_400),
                    _ => Some(1_500),
                };
                let datagrams = d.request_target_metrics.datagrams.get_or_insert_default();
                datagrams.path_mtu = mtu;
            }
        }
        let rows: Vec<ProbeRow> = reports.iter().filter_map(ProbeRow::of).collect();
        let m = build(&rows, Protocol::Udp);
        assert_eq!(m.widest_path_mtu(), Some(1_500));
        let layout = Layout {
            colour: true,
            columns_per_page: 40,
            page: 1,
        };
        let text = render(&m, Metric::Mtu, layout);
        let red = |value: &str| format!("\x1b[30;41m{value:>CELL$}\x1b[0m");
        let green = |value: &str| format!("\x1b[30;42m{value:>CELL$}\x1b[0m");
        let expected_rows = [
            (
                "node-0",
                [green("65535"), green("1500"), red("1400"), green("-")],
            ),
            (
                "node-1",
                [green("1500"), green("65535"), red("1500"), green("-")],
            ),
            (
                "node-2",
                [red("1400"), green("1500"), green("65535"), green("-")],
            ),
        ];
        for (node, cells) in expected_rows {
            let line = text
                .lines()
                .find(|l| l.starts_with(node))
                .unwrap_or_else(|| panic!("{node}: {text}"));
            assert!(line.ends_with(&cells.concat()), "{node}: {line:?}");
        }
        golden(
            "matrix-mtu.txt",
            &render(
                &m,
                Metric::Mtu,
                Layout {
                    colour: false,
                    ..layout
                },
            ),
        );
    }

    #[test]
    fn p99_in_colour_first_of_two_pages() {
        let m = matrix(&mesh(4), &BTreeMap::new());
        let layout = Layout {
            colour: true,
            columns_per_page: 3,
            page: 1,
        };
        golden(
            "matrix-p99-colour-page1.txt",
            &render(&m, Metric::P99, layout),
        );
    }
}
