//! `kdoctor kubectl …`, also run as the kubectl plugin `kubectl-kdoctor` (`kubectl kdoctor …`):
//! views of reports read through the aggregated API, with kubectl's connection flags.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Node;
use kdoctor_api::report::protocol::Protocol;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;

use crate::plugin::matrix::{Matrix, Metric, SourceReport, build};
use crate::plugin::rounds::{Round, nodes, table_rows};
use crate::plugin::terminal::{Layout, render};

/// Connection flags as kubectl's, and the view.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: View,
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    context: Option<String>,
}

#[derive(clap::Subcommand)]
enum View {
    /// The source × target matrix of a NetReach round.
    Matrix(MatrixArgs),
    /// Every report, failing ones first; exits 1 when a task's last round failed.
    Summary,
    /// The retained rounds of one report, with a sparkline of nodes that succeeded.
    History(HistoryArgs),
    /// Apply task files (checked first, as `kdoctor validate`) and, with --wait, follow their
    /// rounds: exit 0 when every task's last round succeeded, 1 when one failed, 2 on timeout.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Task files (YAML; several documents or a List allowed; directories: their task files).
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
    /// Follow the rounds until every task has finished.
    #[arg(long)]
    wait: bool,
    /// Give up waiting after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    timeout_seconds: u64,
    /// How often the tasks' status is read, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 2, hide = true)]
    poll_seconds: u64,
    /// When the wait ends, write JUnit XML here: a test suite per task, a case per round, per
    /// source node and target, and per node that did not report.
    #[arg(long, value_name = "FILE", requires = "wait")]
    junit: Option<PathBuf>,
}

#[derive(clap::Args)]
struct HistoryArgs {
    /// The report: `<kind>-<task>` (as `kubectl get kdoctorreport` lists it).
    name: String,
}

#[derive(clap::Args)]
struct MatrixArgs {
    /// The report: `netreach-<task>` (as `kubectl get kdoctorreport` lists it).
    name: String,
    /// A retained round instead of the latest.
    #[arg(long)]
    round: Option<u64>,
    /// What the cells show (`mtu`: the path MTU, of UDP echoes with `spec.target.pathMTU`).
    #[arg(long, value_enum, default_value = "success")]
    metric: Metric,
    /// Which probes the cells count: `http` (the task's requests), `tcp` (its TCP connects,
    /// with `spec.target.tcp`), `udp` (its UDP echoes, with `spec.target.udp`) or `icmp` (its
    /// ICMP echoes, with `spec.target.icmp`). Default: `http`, `udp` for `--metric mtu`.
    #[arg(long, value_parser = ["http", "tcp", "udp", "icmp"])]
    protocol: Option<String>,
    /// The page of columns to print (wide clusters).
    #[arg(long, default_value_t = 1)]
    page: usize,
    /// Columns per page (default: what fits $COLUMNS, or 16).
    #[arg(long, value_name = "N")]
    columns_per_page: Option<usize>,
    /// No colours (also when stdout is not a terminal or NO_COLOR is set).
    #[arg(long)]
    no_color: bool,
    /// `text` for the terminal, or a heatmap: `svg`, `html` (a page with the SVG and a legend).
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    output: Output,
}

/// What `matrix` writes to stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Text,
    Svg,
    Html,
}

/// The `kubectl kdoctor` command line, when the binary runs as `kubectl-kdoctor`.
#[derive(clap::Parser)]
#[command(
    name = "kubectl kdoctor",
    bin_name = "kubectl kdoctor",
    version,
    about = "kdoctor views of kdoctorreports"
)]
pub struct Plugin {
    #[command(flatten)]
    args: Args,
}

impl Plugin {
    /// The parsed arguments.
    pub fn args(&self) -> &Args {
        &self.args
    }
}

/// Runs the view.
pub fn run(args: &Args) -> Result<ExitCode> {
    // One worker: the matrix parses a streamed body on a blocking thread while the worker reads it.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    // Bad task files fail before anything is applied (and before any connection).
    if let View::Run(r) = &args.command {
        let checked =
            super::validate::check_files(&r.files, &kdoctor_api::config::Config::default())?;
        if !checked.all_valid {
            eprint!("{}", checked.report);
            return Ok(super::exit_failed());
        }
    }
    runtime.block_on(async {
        let client = client(args).await?;
        let done = match &args.command {
            View::Matrix(m) => matrix(client.clone(), m).await,
            View::Summary => summary(client.clone()).await,
            View::History(h) => history(client.clone(), &h.name).await,
            View::Run(r) => run_tasks(client.clone(), r).await,
        };
        match done {
            Ok(code) => Ok(code),
            Err(error) => Err(with_hint(&client, error).await),
        }
    })
}

async fn client(args: &Args) -> Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None => kube::Config::from_kubeconfig(&options)
            .await
            .context("no usable kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config)")?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// What `matrix` reads of a KdoctorReport: every other field is skipped while parsing.
#[derive(serde::Deserialize)]
struct MatrixObject {
    task: MatrixTask,
    status: MatrixStatus,
    #[serde(default)]
    report: MatrixReports,
}

#[derive(serde::Deserialize)]
struct MatrixTask {
    kind: String,
    name: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct MatrixStatus {
    #[serde(default)]
    round_number: i64,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MatrixReports {
    #[serde(default)]
    latest_round_report: Option<Vec<SourceReport>>,
}

/// A report that does not exist, so that the caller can say which ones do.
#[derive(Debug)]
struct NotFound(String);

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kdoctorreport {:?} not found", self.0)
    }
}

impl std::error::Error for NotFound {}

/// `error`, with the reports a missing one may have meant.
async fn with_hint(client: &kube::Client, error: anyhow::Error) -> anyhow::Error {
    let Some(NotFound(asked)) = error.downcast_ref::<NotFound>() else {
        return error;
    };
    let names: Vec<String> = match table(client, None, "").await {
        Ok(list) => table_rows(&list)
            .into_iter()
            .filter_map(|(row, _)| row.get("Name").cloned())
            .collect(),
        Err(_) => Vec::new(),
    };
    anyhow::anyhow!("{error} ({})", crate::plugin::names::hint(asked, &names))
}

/// Says why the report API refused, in kubectl's words.
fn refusal(name: &str, code: u16, message: &str) -> anyhow::Error {
    match code {
        404 => NotFound(name.to_string()).into(),
        400 if !message.is_empty() => anyhow::anyhow!("{message}"),
        503 => anyhow::anyhow!(
            "the kdoctorreport API is unavailable: {message} (is the APIService v1beta1.system.kdoctor.io Available?)"
        ),
        _ => anyhow::anyhow!("cannot get kdoctorreport {name:?}: {code} {message}"),
    }
}

/// A GET of one KdoctorReport as `accept`: the response, or the refusal's code and message.
async fn get_report(
    client: &kube::Client,
    name: &str,
    query: &str,
    accept: &str,
) -> Result<Result<http::Response<kube::client::Body>, (u16, String)>> {
    use http_body_util::BodyExt;
    let path = format!(
        "/apis/{}/{}/{name}{query}",
        kdoctor_api::report::API_VERSION,
        kdoctor_api::report::PLURAL
    );
    let request = http::Request::get(&path)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty())?;
    let response = client
        .send(request)
        .await
        .with_context(|| format!("cannot get kdoctorreport {name:?}"))?;
    let code = response.status().as_u16();
    if response.status().is_success() {
        return Ok(Ok(response));
    }
    let body = response.into_body().collect().await?.to_bytes();
    let message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_default();
    Ok(Err((code, message)))
}

/// One KdoctorReport object parsed as it streams in (a large round is hundreds of megabytes of
/// JSON; only what `T` names is kept).
async fn read_object<T: serde::de::DeserializeOwned + Send + 'static>(
    client: &kube::Client,
    name: &str,
) -> Result<T> {
    let response = get_report(client, name, "", "application/json")
        .await?
        .map_err(|(code, message)| refusal(name, code, &message))?;
    let chunks =
        http_body_util::BodyDataStream::new(response.into_body()).map_err(std::io::Error::other);
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(chunks));
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        serde_json::from_reader(std::io::BufReader::with_capacity(256 * 1024, reader))
            .with_context(|| format!("kdoctorreport {name:?} is not a report this kdoctor reads"))
    })
    .await?
}

/// The server's matrix view of a report (see `kdoctor_api::matrix`).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct MatrixView {
    task: MatrixTask,
    round_number: i64,
    matrix: Matrix,
}

/// The `Accept` of the matrix view.
const MATRIX_VIEW: &str = "application/json;as=KdoctorReportMatrix;g=system.kdoctor.io;v=v1beta1";

/// The matrix of a report's round: the server's view, or built here from the whole object when
/// the server has no view (zones not yet applied) or one of HTTP only (asked for another
/// protocol, a server from before TCP probes ignores the parameter and says none).
async fn load_matrix(client: &kube::Client, name: &str, protocol: Protocol) -> Result<MatrixView> {
    if let Some(view) = read_matrix_view(client, name, protocol).await?
        && view.matrix.protocol == protocol
    {
        return Ok(view);
    }
    let object: MatrixObject = read_object(client, name).await?;
    if object.task.kind != "NetReach" {
        bail!(
            "kdoctorreport {name:?} is a {} report: the matrix shows NetReach rounds",
            object.task.kind
        );
    }
    let reports = object.report.latest_round_report.unwrap_or_default();
    Ok(MatrixView {
        task: object.task,
        round_number: object.status.round_number,
        matrix: build(reports, protocol),
    })
}

/// The matrix view of a report, computed by the server from its probe rows; None from a server
/// that has no such view (406), whose whole object is read instead.
async fn read_matrix_view(
    client: &kube::Client,
    name: &str,
    protocol: Protocol,
) -> Result<Option<MatrixView>> {
    use http_body_util::BodyExt;
    // Sparse: the probed cells only (a round of 5,000 nodes sampling 5 peers is 25,000 cells,
    // its dense grid 25 million); a server from before it answers dense, read the same way.
    let mut query = format!("?{}=sparse", kdoctor_api::matrix::CELLS_QUERY);
    if protocol != Protocol::Http {
        query.push_str(&format!("&protocol={}", protocol.as_str()));
    }
    let response = match get_report(client, name, &query, MATRIX_VIEW).await? {
        Ok(response) => response,
        Err((406, _)) => return Ok(None),
        Err((code, message)) => return Err(refusal(name, code, &message)),
    };
    let body = response.into_body().collect().await?.to_bytes();
    let view = tokio::task::spawn_blocking(move || serde_json::from_slice::<MatrixView>(&body))
        .await?
        .with_context(|| {
            format!("the matrix of kdoctorreport {name:?} is not one this kdoctor reads")
        })?;
    Ok(Some(view))
}

/// Node zones, when the caller may list Nodes (the matrix groups by zone); none otherwise. Their
/// metadata only: a zone is a label, and 5,000 whole Nodes are tens of megabytes.
async fn zones(client: kube::Client) -> BTreeMap<String, String> {
    let nodes: Api<Node> = Api::all(client);
    match nodes.list_metadata(&ListParams::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|n| {
                let zone = n
                    .metadata
                    .labels?
                    .get(kdoctor_agent::probe_metrics::ZONE_LABEL)?
                    .clone();
                Some((n.metadata.name?, zone))
            })
            .collect(),
        Err(error) => {
            tracing::debug!(%error, "no node zones");
            BTreeMap::new()
        }
    }
}

/// The protocol a matrix counts: as asked, else UDP for the path MTU (only UDP echoes search
/// it) and HTTP otherwise.
fn matrix_protocol(asked: Option<&str>, metric: Metric) -> Result<Protocol> {
    let protocol: Protocol = match (asked, metric) {
        (Some(asked), _) => asked.parse().map_err(anyhow::Error::msg)?,
        (None, Metric::Mtu) => Protocol::Udp,
        (None, _) => Protocol::Http,
    };
    if metric == Metric::Mtu && protocol != Protocol::Udp {
        bail!("--metric mtu: the path MTU is searched on UDP echo paths only; use --protocol udp");
    }
    Ok(protocol)
}

async fn matrix(client: kube::Client, args: &MatrixArgs) -> Result<ExitCode> {
    let name = match args.round {
        Some(round) => format!("{}.round-{round}", args.name),
        None => args.name.clone(),
    };
    let protocol = matrix_protocol(args.protocol.as_deref(), args.metric)?;
    // The zones are read beside the matrix: at 5,000 nodes each is a few hundred milliseconds.
    let (view, zones) = tokio::join!(load_matrix(&client, &name, protocol), zones(client.clone()));
    let view = view?;
    if view.matrix.rows.is_empty() {
        bail!("kdoctorreport {name:?} has no node reports yet");
    }
    if args.metric == Metric::Mtu && view.matrix.widest_path_mtu().is_none() {
        bail!(
            "kdoctorreport {name:?}, round {}: no path MTU was searched (the task needs \
             spec.target.udp and spec.target.pathMTU)",
            view.round_number
        );
    }
    let matrix = view.matrix.grouped(&zones);
    let columns_per_page = args.columns_per_page.unwrap_or_else(|| {
        std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .map_or(16, |width| width.saturating_sub(24) / 7)
    });
    match args.output {
        Output::Svg => {
            super::output::print(&crate::plugin::heatmap::svg(&matrix, args.metric))?;
            return Ok(ExitCode::SUCCESS);
        }
        Output::Html => {
            let title = format!("{name}: round {}", view.round_number);
            super::output::print(&crate::plugin::heatmap::html(&matrix, args.metric, &title))?;
            return Ok(ExitCode::SUCCESS);
        }
        Output::Text => {}
    }
    let colour =
        !args.no_color && std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal();
    super::output::print(&format!(
        "{name}: round {} of {} {}, {}{}\n",
        view.round_number,
        view.task.kind,
        view.task.name,
        crate::plural::count(matrix.rows.len(), "node"),
        match protocol {
            Protocol::Http => "",
            Protocol::Tcp => ", TCP connects",
            Protocol::Udp => ", UDP echoes",
            Protocol::Icmp => ", ICMP echoes",
        }
    ))?;
    super::output::print(&render(
        &matrix,
        args.metric,
        Layout {
            colour,
            columns_per_page,
            page: args.page,
        },
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// A Table from the report API (what kubectl shows): cheap, no report bodies.
async fn table(
    client: &kube::Client,
    name: Option<&str>,
    query: &str,
) -> Result<serde_json::Value> {
    let base = format!(
        "/apis/{}/{}",
        kdoctor_api::report::API_VERSION,
        kdoctor_api::report::PLURAL
    );
    let path = match name {
        Some(name) => format!("{base}/{name}{query}"),
        None => format!("{base}{query}"),
    };
    let request = http::Request::get(&path)
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())?;
    match client.request::<serde_json::Value>(request).await {
        Ok(table) => Ok(table),
        Err(kube::Error::Api(status)) => {
            Err(refusal(name.unwrap_or(""), status.code, &status.message))
        }
        Err(e) => Err(e).context(format!("cannot read {path}")),
    }
}

async fn summary(client: kube::Client) -> Result<ExitCode> {
    let rows: Vec<_> = table_rows(&table(&client, None, "").await?)
        .into_iter()
        .map(|(row, _)| row)
        .collect();
    if rows.is_empty() {
        super::output::print("no kdoctorreports yet\n")?;
        return Ok(ExitCode::SUCCESS);
    }
    let (text, failing) = crate::plugin::rounds::summary(&rows);
    super::output::print(&text)?;
    Ok(if failing {
        super::exit_failed()
    } else {
        ExitCode::SUCCESS
    })
}

async fn history(client: kube::Client, name: &str) -> Result<ExitCode> {
    let head = table_rows(&table(&client, Some(name), "?includeObject=Object").await?);
    let Some((_, object)) = head.first() else {
        return Err(NotFound(name.to_string()).into());
    };
    let retained: Vec<u64> = object["status"]["retainedRounds"]
        .as_array()
        .map(|r| r.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default();
    let mut rounds = Vec::with_capacity(retained.len());
    for number in retained {
        let rows = table_rows(&table(&client, Some(&format!("{name}.round-{number}")), "").await?);
        if let Some((row, _)) = rows.first() {
            rounds.push(Round {
                number,
                result: row.get("Last Result").cloned().unwrap_or_default(),
                nodes: row.get("Nodes").and_then(|n| nodes(n)),
            });
        }
    }
    super::output::print(&crate::plugin::rounds::history(name, &rounds))?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the JUnit XML of the tasks' finished rounds (see `crate::plugin::junit`), reading
/// each round's report; a task not finished gets a failed case saying `still`.
async fn write_junit(
    client: &kube::Client,
    path: &std::path::Path,
    tasks: &[(
        kdoctor_api::task::TaskKind,
        String,
        kdoctor_api::task::TaskStatus,
    )],
    still: &str,
) -> Result<()> {
    use crate::plugin::junit::{Pair, RoundCase, Suite, render};
    let mut suites = Vec::new();
    for (kind, task, status) in tasks {
        let mut history = status.history.clone().unwrap_or_default();
        history.reverse();
        let mut rounds = Vec::new();
        for round in history.iter().filter(|r| r.status.is_finished()) {
            let name = format!(
                "{}.round-{}",
                kdoctor_api::report::report_name(*kind, task),
                round.round_number
            );
            // A round the store no longer keeps still has its verdict from the status.
            let reports = match read_object::<ReportsObject>(client, &name).await {
                Ok(object) => object.report.latest_round_report.unwrap_or_default(),
                Err(error) => {
                    tracing::debug!(%error, report = %name, "no reports for the JUnit cases");
                    Vec::new()
                }
            };
            let pairs = reports
                .iter()
                .flat_map(|r| {
                    r.target_outcomes()
                        .into_iter()
                        .map(|(target, succeed, why)| Pair {
                            source: r.node_name.clone(),
                            target: target.to_string(),
                            failure: (!succeed).then(|| {
                                why.unwrap_or("the target did not meet expect").to_string()
                            }),
                        })
                })
                .collect();
            rounds.push(RoundCase {
                number: round.round_number,
                failure: (round.status != kdoctor_api::task::RoundStatus::Succeed).then(|| {
                    round
                        .failure_reason
                        .clone()
                        .unwrap_or_else(|| "the round failed".to_string())
                }),
                seconds: round
                    .duration
                    .as_deref()
                    // Go's form (`1m2.5s`) is jiff's friendly form too.
                    .and_then(|d| d.parse::<jiff::SignedDuration>().ok())
                    .map(|d| d.as_secs_f64()),
                pairs,
                not_reported: round.not_report_agent_node_list.clone(),
            });
        }
        suites.push(Suite {
            kind: kind.as_str().to_string(),
            task: task.clone(),
            rounds,
            unfinished: (!status.finish).then(|| still.to_string()),
        });
    }
    std::fs::write(path, render(&suites))
        .with_context(|| format!("--junit {}: cannot write", path.display()))?;
    Ok(())
}

/// What `--junit` reads of a round's KdoctorReport: its agent reports.
#[derive(serde::Deserialize)]
struct ReportsObject {
    #[serde(default)]
    report: RoundReports,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RoundReports {
    #[serde(default)]
    latest_round_report: Option<Vec<kdoctor_api::report::Report>>,
}

/// The API of one task kind.
fn tasks_api(client: &kube::Client, kind: kdoctor_api::task::TaskKind) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: kdoctor_api::task::GROUP.to_string(),
        version: kdoctor_api::task::VERSION.to_string(),
        api_version: kdoctor_api::task::API_VERSION.to_string(),
        kind: kind.as_str().to_string(),
        plural: kind.plural().to_string(),
    };
    Api::all_with(client.clone(), &resource)
}

async fn run_tasks(client: kube::Client, args: &RunArgs) -> Result<ExitCode> {
    let checked =
        super::validate::check_files(&args.files, &kdoctor_api::config::Config::default())?;
    // An unwritable --junit fails now, not after an hour of waiting.
    if let Some(path) = &args.junit {
        std::fs::File::create(path)
            .with_context(|| format!("--junit {}: cannot write", path.display()))?;
    }
    let params = kube::api::PatchParams::apply("kubectl-kdoctor").force();
    for task in &checked.valid {
        let api = tasks_api(&client, task.kind());
        api.patch(task.name(), &params, &kube::api::Patch::Apply(task))
            .await
            .with_context(|| format!("cannot apply {} {:?}", task.kind(), task.name()))?;
        super::output::print(&format!("{} {:?} applied\n", task.kind(), task.name()))?;
    }
    if !args.wait {
        return Ok(ExitCode::SUCCESS);
    }
    let deadline =
        tokio::time::Instant::now() + std::time::Duration::from_secs(args.timeout_seconds);
    // Rounds already printed, per task (the history is capped: track numbers, not positions).
    let mut shown: BTreeMap<String, std::collections::BTreeSet<i64>> = BTreeMap::new();
    loop {
        let mut finished = 0;
        let mut failed = Vec::new();
        let mut statuses = Vec::new();
        for task in &checked.valid {
            let object = tasks_api(&client, task.kind()).get(task.name()).await?;
            let status: kdoctor_api::task::TaskStatus =
                serde_json::from_value(object.data["status"].clone()).unwrap_or_default();
            statuses.push((task.kind(), task.name().to_string(), status.clone()));
            let key = format!("{} {:?}", task.kind(), task.name());
            let mut history = status.history.clone().unwrap_or_default();
            // Newest first in the status: print oldest first, each finished round once.
            history.reverse();
            let done: Vec<_> = history.iter().filter(|r| r.status.is_finished()).collect();
            let seen = shown.entry(key.clone()).or_default();
            for round in done.iter().filter(|r| !seen.contains(&r.round_number)) {
                let why = round
                    .failure_reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                let result = serde_json::to_value(round.status).unwrap_or_default();
                super::output::print(&format!(
                    "{key} round {}: {}{why}\n",
                    round.round_number,
                    result.as_str().unwrap_or("?")
                ))?;
            }
            seen.extend(done.iter().map(|r| r.round_number));
            if status.finish {
                finished += 1;
                if status.last_round_status != Some(kdoctor_api::task::LastRoundStatus::Succeed) {
                    failed.push(key);
                }
            }
        }
        let timed_out = tokio::time::Instant::now() >= deadline;
        if let Some(path) = &args.junit
            && (finished == checked.valid.len() || timed_out)
        {
            let still = format!("still running after {} s", args.timeout_seconds);
            write_junit(&client, path, &statuses, &still).await?;
        }
        if finished == checked.valid.len() {
            if failed.is_empty() {
                super::output::print("every task finished and its last round succeeded\n")?;
                return Ok(ExitCode::SUCCESS);
            }
            super::output::print(&format!("failed: {}\n", failed.join(", ")))?;
            return Ok(super::exit_failed());
        }
        if timed_out {
            eprintln!(
                "error: {} of {} tasks still running after {} s",
                checked.valid.len() - finished,
                checked.valid.len(),
                args.timeout_seconds
            );
            return Ok(super::exit_usage());
        }
        tokio::time::sleep(std::time::Duration::from_secs(args.poll_seconds.max(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::plugin::matrix::Cell;
    use crate::plugin::matrix::tests::mesh;

    #[test]
    fn the_path_mtu_matrix_counts_udp_echoes_and_refuses_another_protocol() {
        assert_eq!(matrix_protocol(None, Metric::Mtu).unwrap(), Protocol::Udp);
        assert_eq!(
            matrix_protocol(Some("udp"), Metric::Mtu).unwrap(),
            Protocol::Udp
        );
        assert_eq!(matrix_protocol(None, Metric::P99).unwrap(), Protocol::Http);
        assert_eq!(
            matrix_protocol(Some("icmp"), Metric::Loss).unwrap(),
            Protocol::Icmp
        );
        let err = matrix_protocol(Some("tcp"), Metric::Mtu).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--metric mtu: the path MTU is searched on UDP echo paths only; use --protocol udp"
        );
    }

    /// Which matrix views a test server has.
    #[derive(Clone, Copy, PartialEq)]
    enum Views {
        /// None (406): a server from before the view.
        No,
        /// Dense only, whatever the query: a server from before `cells=sparse`.
        Dense,
        /// Sparse when asked.
        Sparse,
    }

    /// A Kubernetes API answering GETs of one report and its matrix `views`; `asked_sparse`
    /// counts the view's requests with `cells=sparse`.
    fn server_with(views: Views, asked_sparse: Arc<AtomicUsize>) -> kube::Client {
        let mut reports = mesh(3);
        // Each target also timed as a TCP connect, every connect failed: a TCP matrix counted
        // from these differs from the HTTP one in every cell.
        for report in &mut reports {
            let details = kdoctor_api::fixtures::net_reach_details(report);
            let tcp: Vec<_> = details
                .iter()
                .map(|d| {
                    let mut d = d.clone();
                    d.name = Protocol::Tcp.entry_name(&d.name);
                    d.request_target_metrics.requests.success_counts = 0;
                    d.request_succeed = false;
                    d.failure_reason = Some("Success Rate 0 is lower than request 1".into());
                    d
                })
                .collect();
            details.extend(tcp);
        }
        let object = serde_json::json!({
            "apiVersion": "system.kdoctor.io/v1beta1", "kind": "KdoctorReport",
            "metadata": {"name": "netreach-mesh"},
            "task": {"kind": "NetReach", "name": "mesh"},
            "status": {"roundNumber": 4},
            "report": {"latestRoundReport": reports},
        });
        let rows: Vec<_> = reports
            .iter()
            .filter_map(kdoctor_api::matrix::ProbeRow::of)
            .collect();
        let matrix = kdoctor_api::matrix::build(&rows, Protocol::Http);
        let view = |matrix: serde_json::Value| {
            serde_json::json!({
                "apiVersion": "system.kdoctor.io/v1beta1", "kind": "KdoctorReportMatrix",
                "task": {"kind": "NetReach", "name": "mesh"}, "roundNumber": 4,
                "matrix": matrix,
            })
        };
        let dense = view(serde_json::to_value(&matrix).unwrap_or_default());
        let sparse =
            view(serde_json::to_value(kdoctor_api::matrix::Sparse(&matrix)).unwrap_or_default());
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let asks_view = request
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.contains("KdoctorReportMatrix"));
            let asks_sparse = request
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "cells=sparse"));
            if asks_view && asks_sparse {
                asked_sparse.fetch_add(1, Ordering::SeqCst);
            }
            let (code, body) = match (asks_view, views) {
                (true, Views::No) => (406, serde_json::json!({"kind": "Status", "code": 406})),
                (true, Views::Sparse) if asks_sparse => (200, sparse.clone()),
                (true, _) => (200, dense.clone()),
                (false, _) => (200, object.clone()),
            };
            let response = http::Response::builder()
                .status(code)
                .body(kube::client::Body::from(
                    serde_json::to_vec(&body).unwrap_or_default(),
                ))
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
            async move { response }
        });
        kube::Client::new(service, "default")
    }

    /// A server with every view.
    fn server(with_view: bool) -> kube::Client {
        let views = if with_view { Views::Sparse } else { Views::No };
        server_with(views, Arc::default())
    }

    #[tokio::test]
    async fn the_matrix_is_the_servers_sparse_view_or_dense_one_or_built_from_the_object() {
        let asked_sparse = Arc::new(AtomicUsize::new(0));
        let load = |views| {
            let client = server_with(views, asked_sparse.clone());
            async move {
                load_matrix(&client, "netreach-mesh", Protocol::Http)
                    .await
                    .expect("a matrix")
            }
        };
        let sparse = load(Views::Sparse).await;
        assert_eq!(
            asked_sparse.load(Ordering::SeqCst),
            1,
            "the view asked sparse"
        );
        let dense = load(Views::Dense).await;
        let without = load(Views::No).await;
        for view in [&sparse, &dense, &without] {
            assert_eq!(view.round_number, 4);
            assert_eq!(view.task.name, "mesh");
            assert_eq!(view.matrix.rows.len(), 3);
        }
        assert_eq!(sparse.matrix, without.matrix);
        assert_eq!(dense.matrix, without.matrix);
    }

    #[tokio::test]
    async fn junit_has_a_case_per_round_source_and_target_and_for_a_task_still_running() {
        let dir = std::env::temp_dir().join(format!("kdoctor-junit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("junit.xml");
        let status: kdoctor_api::task::TaskStatus = serde_json::from_value(serde_json::json!({
            "finish": true, "lastRoundStatus": "fail",
            "history": [{
                "status": "fail", "roundNumber": 4, "failureReason": "some agents failed",
                "duration": "1m2.5s",
                "startTimeStamp": "2026-01-01T00:00:00Z", "deadLineTimeStamp": "2026-01-01T00:01:00Z",
                "notReportAgentNodeList": ["node-9"],
            }],
        }))
        .expect("status");
        let running = kdoctor_api::task::TaskStatus::default();
        let tasks = [
            (
                kdoctor_api::task::TaskKind::NetReach,
                "mesh".to_string(),
                status,
            ),
            (
                kdoctor_api::task::TaskKind::Netdns,
                "dns".to_string(),
                running,
            ),
        ];
        write_junit(&server(true), &path, &tasks, "still running after 60 s")
            .await
            .expect("written");
        let xml = std::fs::read_to_string(&path).expect("read");
        let _ = std::fs::remove_dir_all(&dir);
        // 3 sources × (4 HTTP + 4 TCP targets), the round, node-9's missing report, the
        // unfinished task; every TCP entry failed.
        assert!(
            xml.contains("<testsuites name=\"kdoctor\" tests=\"27\" failures=\"15\">"),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<testcase classname=\"NetReach.mesh\" name=\"round 4\" time=\"62.500\">\n      <failure message=\"some agents failed\">"
            ),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<testcase classname=\"NetReach.mesh.round-4\" name=\"node-1 -&gt; TCP_AgentPodV4IP_kdoctor-agent-2_10.0.0.2\">\n      <failure message=\"Success Rate 0 is lower than request 1\">"
            ),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<testcase classname=\"NetReach.mesh.round-4\" name=\"node-0 -&gt; AgentClusterV4IP_10.96.0.10:80\"/>"
            ),
            "{xml}"
        );
        assert!(xml.contains("name=\"node-9: report\""), "{xml}");
        assert!(
            xml.contains("<testcase classname=\"Netdns.dns\" name=\"finished\">"),
            "{xml}"
        );
    }

    #[tokio::test]
    async fn a_tcp_matrix_is_never_a_servers_http_view() {
        // This server's view is HTTP's whatever the query, as a server from before TCP probes
        // answers: the TCP matrix is built from the object instead.
        let http = load_matrix(&server(true), "netreach-mesh", Protocol::Http)
            .await
            .expect("view");
        let tcp = load_matrix(&server(true), "netreach-mesh", Protocol::Tcp)
            .await
            .expect("object");
        assert_eq!(tcp.matrix.protocol, Protocol::Tcp);
        assert_eq!(tcp.matrix.rows.len(), 3);
        assert_eq!(tcp.matrix.columns, http.matrix.columns);
        let cells = |m: &Matrix| -> Vec<Cell> { m.probed().copied().collect() };
        assert!(cells(&http.matrix).iter().any(|c| c.successes > 0));
        assert!(!cells(&tcp.matrix).is_empty());
        assert!(
            cells(&tcp.matrix)
                .iter()
                .all(|c| c.successes == 0 && c.requests > 0)
        );
    }
}
