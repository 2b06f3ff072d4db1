//! The round as a user reads it: the real kubectl, inside the cluster's network namespace with
//! the admin's client certificate, asks kube-apiserver, whose aggregation layer sends the
//! request with its front-proxy certificate to a replica behind the APIService (registered
//! from manifests/apiservice.yaml as shipped). Wall time and kubectl's peak RSS of each read
//! (median of five), and the peak RSS of kube-apiserver and of the replicas meanwhile; and the
//! report's bytes as sent (`get --raw`) against the same bytes from nginx ([`crate::nginx`]).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::nginx::Nginx;
use crate::{Cluster, Controllers};

/// The APIService manifests/apiservice.yaml registers.
const APISERVICE: &str = "v1beta1.system.kdoctor.io";
/// Every report, listed or watched.
pub const REPORTS: &str = "/apis/system.kdoctor.io/v1beta1/kdoctorreports";
/// A Table, as kubectl asks for one.
pub const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
/// Runs of each read; the median's figures are kept.
const RUNS: usize = 5;
/// Runs of each of the reads compared with nginx, in turns: their differences are a few
/// milliseconds of a kubectl process's fifty.
const TURNS: usize = 21;
/// GETs of each, in turns, by the bench's own client.
const CLIENT_TURNS: usize = 51;

/// One read: wall seconds, kubectl's peak RSS, bytes it printed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Timed {
    pub secs: f64,
    pub mib: f64,
    pub bytes: u64,
}

/// The reads of one round through the aggregation layer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Reads {
    pub json: Timed,
    /// `get --raw` of the report: its bytes as the API server sends them.
    pub raw: Timed,
    /// The same bytes from nginx, the same kubectl, directly.
    pub raw_nginx: Timed,
    /// The same bytes from nginx through the aggregation layer, as an APIService of its own.
    pub raw_nginx_aggregated: Timed,
    /// One GET of the report's gzip bytes through the aggregation layer by the bench's own
    /// client (kept connections to kube-apiserver, the admin's certificate), median ms
    /// of [`CLIENT_TURNS`]: the server's part without kubectl's start-up.
    pub client_ms: f64,
    /// The same of nginx's behind the same layer.
    pub client_nginx_ms: f64,
    pub yaml: Timed,
    pub table: Timed,
    pub list_table: Timed,
    pub matrix: Timed,
    pub reports_listed: usize,
    /// LIST of every report as a Table, gzip as kubectl asks, by the bench's own client on a
    /// kept connection: median ms of [`CLIENT_TURNS`] (time to the last byte).
    #[serde(default)]
    pub list_table_client_ms: f64,
    pub apiserver_peak_mib: f64,
    pub replicas_peak_mib: f64,
}

impl Reads {
    pub fn print(&self) {
        println!(
            "\n`kubectl` (v1.34, inside the cluster's namespace, the admin's client certificate) \
             through kube-apiserver's aggregation layer to the replicas; median of {RUNS} runs ({TURNS}, in turns, for `get --raw` and nginx):\n"
        );
        println!("| read | wall (s) | kubectl peak RSS (MiB) | bytes printed |");
        println!("|---|---|---|---|");
        for (what, t) in [
            ("`get kdoctorreport netreach-scale -o json`", &self.json),
            ("`get kdoctorreport netreach-scale -o yaml`", &self.yaml),
            ("`get kdoctorreport netreach-scale` (Table)", &self.table),
            (
                "`get kdoctorreport` (Table of every report)",
                &self.list_table,
            ),
            ("`kdoctor matrix netreach-scale` (the plugin)", &self.matrix),
            (
                "`get --raw /apis/system.kdoctor.io/v1beta1/kdoctorreports/netreach-scale`",
                &self.raw,
            ),
            (
                "the same bytes from nginx behind the aggregation layer (`get --raw`, TLS, \
                 gzip_static, from disk)",
                &self.raw_nginx_aggregated,
            ),
            (
                "the same bytes from nginx, directly (`get --raw`)",
                &self.raw_nginx,
            ),
        ] {
            println!("| {what} | {:.3} | {:.0} | {} |", t.secs, t.mib, t.bytes);
        }
        println!(
            "\n- The report's bytes through the aggregation layer at {:.2}× the rate nginx \
             serves them from disk behind the same aggregation layer to the same kubectl (one \
             nginx process, the API server's own gzip bytes; kubectl asks for gzip); {:.2}× \
             nginx's rate without the hop.",
            self.raw_nginx_aggregated.secs / self.raw.secs.max(1e-9),
            self.raw_nginx.secs / self.raw.secs.max(1e-9)
        );
        println!(
            "\n- The report's gzip bytes through the aggregation layer by the bench's own client \
             (kept connections to kube-apiserver, the admin's certificate; median of \
             {CLIENT_TURNS} GETs of each, in turns): {:.1} ms, nginx's behind the same layer \
             {:.1} ms ({:.2}×).",
            self.client_ms,
            self.client_nginx_ms,
            self.client_nginx_ms / self.client_ms.max(1e-9)
        );
        println!(
            "\n- Every report listed as a Table ({} rows; gzip, as kubectl asks) by the bench's \
             own client on a kept connection, median of {CLIENT_TURNS}: {:.1} ms to the last \
             byte (goal < 50 ms).",
            self.reports_listed, self.list_table_client_ms
        );
        println!(
            "\n- During these reads: kube-apiserver peak RSS {:.0} MiB, largest replica {:.0} MiB; \
             {} reports listed.",
            self.apiserver_peak_mib, self.replicas_peak_mib, self.reports_listed
        );
    }
}

/// Registers the APIService and reads task `task`'s report of every way above.
pub async fn measure(
    cluster: &Cluster,
    kdoctor: &Path,
    task: &str,
    controllers: &Controllers,
) -> Reads {
    let kubectl = cluster.kube.kubectl();
    let kubeconfig = cluster.kube.inner_kubeconfig();
    let k = |args: &[&str]| crate::kubectl(&cluster.kube, args);
    crate::apply_manifests(&cluster.kube, &["apiservice.yaml"]);
    crate::await_available(&cluster.kube, APISERVICE, Duration::from_secs(180));
    // Available comes before kube-apiserver's discovery lists the group's resources.
    let started = Instant::now();
    loop {
        let out = k(&[
            "api-resources",
            "--api-group=system.kdoctor.io",
            "--no-headers",
        ])
        .output()
        .expect("kubectl");
        if String::from_utf8_lossy(&out.stdout).contains("kdoctorreports") {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let raw = k(&["get", "--raw", "/apis/system.kdoctor.io/v1beta1"])
                .output()
                .expect("kubectl");
            let service = k(&["get", "apiservice", APISERVICE, "-o", "yaml"])
                .output()
                .expect("kubectl");
            panic!(
                "discovery has no kdoctorreports 120 s after {APISERVICE} was Available: {}\n\
                 the group version's document: {}{}\nthe APIService: {}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&raw.stdout),
                String::from_utf8_lossy(&raw.stderr),
                String::from_utf8_lossy(&service.stdout)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let plugins = cluster.dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    let _ = std::fs::remove_file(plugins.join("kubectl-kdoctor"));
    std::os::unix::fs::symlink(
        std::fs::canonicalize(kdoctor).expect("kdoctor binary"),
        plugins.join("kubectl-kdoctor"),
    )
    .expect("plugin link");

    // Peak RSS of kube-apiserver and of the replicas while the reads run.
    let peaks = crate::peaks::Peaks::start(cluster, controllers);
    let name = format!("netreach-{task}");
    let kubeconfig_arg = kubeconfig.display().to_string();
    let path = format!(
        "{}:{}",
        plugins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let read = |args: Vec<String>| {
        let (kubectl, dir, path) = (kubectl.clone(), cluster.dir.clone(), path.clone());
        tokio::task::spawn_blocking(move || timed(&kubectl, &args, &dir, &path))
    };
    let with = |rest: &[&str]| -> Vec<String> {
        let mut args = vec![
            "--kubeconfig".to_string(),
            kubeconfig_arg.clone(),
            "--cache-dir".to_string(),
            cluster.dir.join("kube-cache").display().to_string(),
        ];
        args.extend(rest.iter().map(|s| s.to_string()));
        args
    };
    let json = read(with(&["get", "kdoctorreport", &name, "-o", "json"]))
        .await
        .expect("json read");
    let yaml = read(with(&["get", "kdoctorreport", &name, "-o", "yaml"]))
        .await
        .expect("yaml read");
    let table = read(with(&["get", "kdoctorreport", &name]))
        .await
        .expect("table read");
    let list_table = read(with(&["get", "kdoctorreport", "--no-headers"]))
        .await
        .expect("list read");
    // --no-headers: a line a report.
    let reports_listed = std::fs::read_to_string(cluster.dir.join("read.out"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    // A plugin takes its flags after its name.
    let matrix = read(vec![
        "kdoctor".into(),
        "matrix".into(),
        name.clone(),
        "--no-color".into(),
        "--kubeconfig".into(),
        kubeconfig_arg.clone(),
    ])
    .await
    .expect("matrix read");
    // The bytes as sent, through the aggregation layer and from nginx (behind the same layer,
    // and directly); only when each is the whole report is it a figure.
    let raw_path = format!("{REPORTS}/{name}");
    // Warm: the first GET of a round reads it from the store and encodes it once.
    read(with(&["get", "--raw", &raw_path]))
        .await
        .expect("raw read");
    let nginx = Nginx::serving(&cluster.dir, &cluster.kube, &cluster.admin, &raw_path).await;
    let direct = vec![
        "--kubeconfig".into(),
        nginx.kubeconfig.display().to_string(),
        "get".into(),
        "--raw".into(),
        nginx.path.clone(),
    ];
    let [raw, raw_nginx_aggregated, raw_nginx] = {
        let (kubectl, dir, path) = (kubectl.clone(), cluster.dir.clone(), path.clone());
        let reads = [
            with(&["get", "--raw", &raw_path]),
            with(&["get", "--raw", &nginx.path]),
            direct,
        ];
        tokio::task::spawn_blocking(move || timed_in_turns(&kubectl, &reads, &dir, &path))
            .await
            .expect("raw reads")
    };
    assert_eq!(
        [raw.bytes, raw_nginx_aggregated.bytes, raw_nginx.bytes],
        [nginx.plain_bytes; 3],
        "kubectl printed other bytes than the report's"
    );
    let mut client = [Vec::new(), Vec::new()];
    for _ in 0..CLIENT_TURNS {
        for (path, times) in [&raw_path, &nginx.path].into_iter().zip(client.iter_mut()) {
            let started = Instant::now();
            let bytes = crate::nginx::get(&cluster.admin, path, Some("gzip")).await;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(
                bytes.len() as u64,
                nginx.gzip_bytes,
                "{path}: other gzip bytes than the report's"
            );
        }
    }
    let [client_ms, client_nginx_ms] = client.map(crate::median);
    let list_table_client_ms = list_as_table(cluster, reports_listed).await;
    drop(nginx);
    let (apiserver_peak_mib, replicas_peak_mib) = peaks.stop().await;
    Reads {
        json,
        yaml,
        table,
        reports_listed,
        list_table_client_ms,
        list_table,
        matrix,
        raw,
        raw_nginx,
        raw_nginx_aggregated,
        client_ms,
        client_nginx_ms,
        apiserver_peak_mib,
        replicas_peak_mib,
    }
}

/// Runs kubectl `args` [`RUNS`] times; the run of median wall time. Panics when a run fails: a
/// read that errs is no figure.
fn timed(kubectl: &Path, args: &[String], dir: &Path, path: &str) -> Timed {
    median((0..RUNS).map(|_| run(kubectl, args, dir, path)).collect())
}

/// Runs each of `reads` [`TURNS`] times, one after the other in turns (so that whatever else
/// the machine does falls on each alike); the run of median wall time of each.
fn timed_in_turns<const N: usize>(
    kubectl: &Path,
    reads: &[Vec<String>; N],
    dir: &Path,
    path: &str,
) -> [Timed; N] {
    let mut runs: [Vec<Timed>; N] = std::array::from_fn(|_| Vec::with_capacity(TURNS));
    for _ in 0..TURNS {
        for (args, runs) in reads.iter().zip(runs.iter_mut()) {
            runs.push(run(kubectl, args, dir, path));
        }
    }
    runs.map(median)
}

fn median(mut runs: Vec<Timed>) -> Timed {
    runs.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    runs.swap_remove(runs.len() / 2)
}

/// One kubectl run under /usr/bin/time (for the peak RSS; its wall time has 10 ms steps, so the
/// wall time is this process's clock around it).
fn run(kubectl: &Path, args: &[String], dir: &Path, path: &str) -> Timed {
    let out = std::fs::File::create(dir.join("read.out")).expect("output file");
    let started = Instant::now();
    let status = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(dir.join("read.time"))
        .arg(kubectl)
        .args(args)
        .env("PATH", path)
        .stdout(out)
        .stderr(std::fs::File::create(dir.join("read.err")).expect("error file"))
        .status()
        .expect("/usr/bin/time (apt-get install -y time)");
    let secs = started.elapsed().as_secs_f64();
    assert!(
        status.success(),
        "kubectl {}: {}",
        args.join(" "),
        std::fs::read_to_string(dir.join("read.err")).unwrap_or_default()
    );
    let time = std::fs::read_to_string(dir.join("read.time")).unwrap_or_default();
    let kib: f64 = time
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Timed {
        secs,
        mib: kib / 1024.0,
        bytes: std::fs::metadata(dir.join("read.out"))
            .map(|m| m.len())
            .unwrap_or(0),
    }
}

/// Every report listed as a Table through the aggregation layer, as kubectl asks for it
/// (gzip), by the bench's own client: median ms to the last byte; each answer must hold a row
/// per report (`reports` as kubectl listed them).
async fn list_as_table(cluster: &Cluster, reports: usize) -> f64 {
    let mut times = Vec::new();
    for _ in 0..CLIENT_TURNS {
        let started = Instant::now();
        let gzip = crate::nginx::get_as(&cluster.admin, REPORTS, Some(TABLE), Some("gzip")).await;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        let mut plain = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gzip[..]), &mut plain)
            .expect("a gzip answer");
        let table: serde_json::Value = serde_json::from_slice(&plain).expect("a Table");
        let rows = table["rows"].as_array().map_or(0, Vec::len);
        assert_eq!(rows, reports, "the Table's rows against kubectl's lines");
    }
    crate::median(times)
}
