//! What grows with the node count and what does not: each scale run appends its figures to a
//! file (a JSON line), and the whole benchmark prints them side by side with the slope between
//! the smallest and the largest cluster.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::aggregated::Reads;
use crate::watchers::Watched;

/// The environment variable that names the file the scale runs append to.
pub const FILE_ENV: &str = "KDOCTOR_BENCH_SUMMARY";

/// One scale run's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub nodes: usize,
    pub replicas: usize,
    pub ready_s: f64,
    pub reviews: u64,
    pub requests_per_round: f64,
    pub status_writes_per_round: f64,
    pub lag_s: f64,
    pub floor_s: f64,
    pub cpu_per_round_s: f64,
    pub controller_peak_mib: f64,
    pub apiserver_peak_mib: f64,
    pub store_mb_per_round: f64,
    pub reads: Option<Reads>,
    #[serde(default)]
    pub watched: Option<Watched>,
    #[serde(default)]
    pub real_agents: usize,
    /// The real agents' API requests over the whole run, per agent.
    #[serde(default)]
    pub agent_requests_per_agent: Option<f64>,
    /// Theirs per round after the first, all together.
    #[serde(default)]
    pub agent_requests_later_rounds: Option<f64>,
}

/// Appends `row` to the file [`FILE_ENV`] names, when it names one.
pub fn append(row: &Row) {
    let Some(file) = std::env::var_os(FILE_ENV) else {
        return;
    };
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(file)
        .expect("the summary file");
    writeln!(f, "{}", serde_json::to_string(row).expect("json")).expect("summary line");
}

/// Prints the runs in `file` as one table: a column per node count, and the change per 1,000
/// nodes between the first and the last.
pub fn print(file: &Path) {
    let text = std::fs::read_to_string(file).expect("the summary file");
    let rows: Vec<Row> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a summary line"))
        .collect();
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return;
    };
    type Figure = (&'static str, fn(&Row) -> Option<f64>);
    let figures: [Figure; 33] = [
        ("agent pods Ready after (s)", |r| Some(r.ready_s)),
        ("TokenReviews (once per agent)", |r| Some(r.reviews as f64)),
        ("real agents among them", |r| Some(r.real_agents as f64)),
        ("real agents' API requests in all, per agent", |r| {
            r.agent_requests_per_agent
        }),
        (
            "real agents' API requests per round after the first, all of them",
            |r| r.agent_requests_later_rounds,
        ),
        ("controller API requests per round (besides reviews)", |r| {
            Some(r.requests_per_round)
        }),
        ("status writes per round", |r| {
            Some(r.status_writes_per_round)
        }),
        ("last report → round finalised, median (s)", |r| {
            Some(r.lag_s)
        }),
        ("bare harvest loop, same agents (s)", |r| Some(r.floor_s)),
        ("finalise lag ÷ bare loop", |r| {
            Some(r.lag_s / r.floor_s.max(1e-9))
        }),
        ("controllers' CPU per round, median (s)", |r| {
            Some(r.cpu_per_round_s)
        }),
        ("largest replica's peak RSS (MiB)", |r| {
            Some(r.controller_peak_mib)
        }),
        (
            "kube-apiserver peak RSS in the rounds and reads (MiB)",
            |r| Some(r.apiserver_peak_mib),
        ),
        ("store on disk per round per replica (MB)", |r| {
            Some(r.store_mb_per_round)
        }),
        ("report JSON (MB)", |r| {
            Some(r.reads.as_ref()?.json.bytes as f64 / 1e6)
        }),
        ("`kubectl get kdoctorreport NAME -o json` (s)", |r| {
            Some(r.reads.as_ref()?.json.secs)
        }),
        ("`kubectl get kdoctorreport NAME -o yaml` (s)", |r| {
            Some(r.reads.as_ref()?.yaml.secs)
        }),
        ("`kubectl get kdoctorreport NAME` Table (s)", |r| {
            Some(r.reads.as_ref()?.table.secs)
        }),
        ("`kubectl kdoctor matrix` (s)", |r| {
            Some(r.reads.as_ref()?.matrix.secs)
        }),
        ("reports listed as a Table", |r| {
            Some(r.reads.as_ref()?.reports_listed as f64)
        }),
        (
            "LIST of them as a Table by the bench's client, gzip (ms)",
            |r| measured(r.reads.as_ref()?.list_table_client_ms),
        ),
        ("watchers, each saw every event", |r| {
            Some(r.watched.as_ref()?.watchers as f64)
        }),
        ("events each saw", |r| {
            Some(r.watched.as_ref()?.events as f64)
        }),
        ("all delivered after the first change (s)", |r| {
            Some(r.watched.as_ref()?.delivered_s)
        }),
        ("kube-apiserver's peak RSS with them (MiB)", |r| {
            Some(r.watched.as_ref()?.apiserver_peak_mib)
        }),
        ("largest replica's peak RSS with them (MiB)", |r| {
            Some(r.watched.as_ref()?.replicas_peak_mib)
        }),
        // Rows of runs before the nginx peer have no such reads.
        ("`kubectl get --raw` of the report (s)", |r| {
            measured(r.reads.as_ref()?.raw.secs)
        }),
        (
            "the same bytes from nginx behind the aggregation layer (s)",
            |r| measured(r.reads.as_ref()?.raw_nginx_aggregated.secs),
        ),
        (
            "report's rate ÷ nginx's, both behind the aggregation layer",
            |r| {
                let reads = r.reads.as_ref()?;
                Some(measured(reads.raw_nginx_aggregated.secs)? / measured(reads.raw.secs)?)
            },
        ),
        (
            "one GET of its gzip bytes by the bench's client, kept connection (ms)",
            |r| measured(r.reads.as_ref()?.client_ms),
        ),
        (
            "the same of nginx's behind the aggregation layer (ms)",
            |r| measured(r.reads.as_ref()?.client_nginx_ms),
        ),
        (
            "the same bytes from nginx directly, same kubectl (s)",
            |r| measured(r.reads.as_ref()?.raw_nginx.secs),
        ),
        ("report's rate ÷ nginx's directly", |r| {
            let reads = r.reads.as_ref()?;
            Some(measured(reads.raw_nginx.secs)? / measured(reads.raw.secs)?)
        }),
    ];
    println!("### By node count\n");
    let counts: Vec<String> = rows.iter().map(|r| format!("{} nodes", r.nodes)).collect();
    println!(
        "| {} replica(s) | {} | change per 1,000 nodes |",
        first.replicas,
        counts.join(" | ")
    );
    println!("|---|{}---|", "---|".repeat(rows.len()));
    for (name, get) in figures {
        let cells: Vec<String> = rows
            .iter()
            .map(|r| get(r).map_or("–".into(), fmt))
            .collect();
        let slope = match (get(first), get(last)) {
            (Some(a), Some(b)) if last.nodes > first.nodes => {
                fmt((b - a) / (last.nodes - first.nodes) as f64 * 1000.0)
            }
            _ => "–".into(),
        };
        println!("| {name} | {} | {slope} |", cells.join(" | "));
    }
}

/// A time, unless it was not measured (0).
fn measured(secs: f64) -> Option<f64> {
    (secs > 0.0).then_some(secs)
}

fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}
