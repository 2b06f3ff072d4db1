//! `kubectl kdoctor`: the binary installed as `kubectl-kdoctor` on PATH, found and run by the
//! real kubectl, reading a stored round through `kdoctor apiserver` (the aggregated API).

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kdoctor_api::fixtures::{net_reach_details, net_reach_report};
use kdoctor_api::report::Report;

use crate::support::{free_port, kdoctor, kubectl_bin, scratch, stderr};

/// Round `number`: three nodes probing each other's agent pods; node-1's requests to node-2
/// half fail, which fails node-1's part of round 2.
fn round(number: i64) -> Vec<Report> {
    (0..3)
        .map(|i| {
            let mut report = net_reach_report(&format!("node-{i}"), number, 3, i);
            if number == 2 && i == 1 {
                report.round_result = "fail".to_string();
            }
            report.pod_name = format!("kdoctor-agent-{i}");
            for (j, detail) in net_reach_details(&mut report).iter_mut().enumerate() {
                detail.name = format!("AgentPodV4IP_kdoctor-agent-{j}_10.0.0.{j}");
                if i == 1 && j == 2 {
                    let requests = &mut detail.request_target_metrics.requests;
                    requests.success_counts = requests.request_counts / 2;
                }
            }
            report
        })
        .collect()
}

/// A store holding the round, served by `kdoctor apiserver` with its own kubeconfig.
struct Served {
    child: Child,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path) -> Served {
    let uid = "11111111-2222-3333-4444-555555555555";
    let mut lines = vec![serde_json::json!({
        "type": "task", "kind": "NetReach", "name": "mesh", "uid": uid,
        "created": "2026-01-01T00:00:00Z", "spec": {}, "status": {},
    })];
    for number in [1, 2] {
        for report in round(number) {
            lines.push(serde_json::json!({"type": "report", "uid": uid, "report": report}));
        }
        let (result, ok, failed) = if number == 1 {
            ("succeed", 3, 0)
        } else {
            ("fail", 2, 1)
        };
        lines.push(serde_json::json!({"type": "round", "uid": uid, "summary": {
            "round": number, "result": result, "start": "2026-01-01T00:01:00Z",
            "end": "2026-01-01T00:01:11Z", "expectedNodes": 3, "succeededNodes": ok,
            "failedNodes": failed,
        }}));
    }
    let backup = dir.join("backup.jsonl");
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&backup, text.join("\n") + "\n").expect("backup");
    let data = dir.join("data");
    let imported = kdoctor(&[
        "store",
        "import",
        "--data",
        &data.display().to_string(),
        &backup.display().to_string(),
    ]);
    assert!(imported.status.success(), "{}", stderr(&imported));
    let kubeconfig = dir.join("kubeconfig");
    let child = Command::new(env!("CARGO_BIN_EXE_kdoctor"))
        .arg("apiserver")
        .arg("--data")
        .arg(&data)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kdoctor apiserver starts");
    let served = Served { child };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubeconfig.exists() || !plugin(dir, &["matrix", "netreach-mesh"]).status.success() {
        assert!(
            Instant::now() < deadline,
            "the API server did not serve the report"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    served
}

/// `kubectl kdoctor ARGS --kubeconfig …` with the binary on PATH as `kubectl-kdoctor`.
fn plugin(dir: &Path, args: &[&str]) -> Output {
    let bin = dir.join("bin");
    let link = bin.join("kubectl-kdoctor");
    if !link.exists() {
        std::fs::create_dir_all(&bin).expect("bin");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kdoctor"), &link).expect("symlink");
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(kubectl_bin())
        .arg("kdoctor")
        .args(args)
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl runs")
}

#[test]
fn kubectl_kdoctor_matrix_shows_the_round_and_names_what_is_wrong() {
    let dir = scratch("plugin");
    let _served = serve(&dir);
    let out = plugin(&dir, &["matrix", "netreach-mesh"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    // Not a terminal: no colours.
    assert!(!text.contains('\x1b'), "{text}");
    let row = |node: &str| {
        text.lines()
            .find(|l| l.starts_with(node))
            .unwrap_or_else(|| panic!("no row {node}:\n{text}"))
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("node-0"), ["100%", "100%", "100%"]);
    assert_eq!(row("node-1"), ["100%", "100%", "50.0%"]);
    assert!(
        text.starts_with("netreach-mesh: round 2 of NetReach mesh, 3 nodes"),
        "{text}"
    );
    assert!(text.contains("   3  node-2 (pod)"), "{text}");

    let loss = plugin(
        &dir,
        &[
            "matrix",
            "netreach-mesh",
            "--metric",
            "loss",
            "--round",
            "1",
        ],
    );
    assert!(loss.status.success(), "{}", stderr(&loss));
    assert!(String::from_utf8_lossy(&loss.stdout).contains("50.0%"));

    let missing = plugin(&dir, &["matrix", "netreach-nope"]);
    assert!(!missing.status.success());
    let error = stderr(&missing);
    assert!(
        error.starts_with("error: kdoctorreport \"netreach-nope\" not found"),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1, "{error}");
    // The task's own name is what people remember: the error names the report.
    let by_task = plugin(&dir, &["matrix", "mesh"]);
    assert!(!by_task.status.success());
    let error = stderr(&by_task);
    assert!(
        error.trim_end().ends_with("(did you mean netreach-mesh?)"),
        "{error}"
    );
}

#[test]
fn kubectl_kdoctor_summary_and_history_read_the_rounds() {
    let dir = scratch("plugin-rounds");
    let _served = serve(&dir);
    let summary = plugin(&dir, &["summary"]);
    // The task's last round failed: a CI pipeline sees exit code 1.
    assert_eq!(summary.status.code(), Some(1), "{}", stderr(&summary));
    let text = String::from_utf8(summary.stdout).expect("UTF-8");
    assert!(text.contains("\nnetreach-mesh  fail"), "{text}");
    assert!(
        text.ends_with("1 reports: 0 succeeding, 1 failing (netreach-mesh)\n"),
        "{text}"
    );

    let history = plugin(&dir, &["history", "netreach-mesh"]);
    assert!(history.status.success(), "{}", stderr(&history));
    let text = String::from_utf8(history.stdout).expect("UTF-8");
    assert!(
        text.starts_with("netreach-mesh: 2 retained rounds\n"),
        "{text}"
    );
    assert!(text.contains("nodes succeeded per round: █▆\n"), "{text}");
    assert!(text.contains("\n1      succeed  3/0/0\n"), "{text}");
    assert!(text.contains("\n2      fail     2/1/0\n"), "{text}");
}

/// Debian's Chromium (`hack/chromium.sh` installs it; CI runs that first).
const CHROMIUM: &str = "/usr/bin/chromium";

/// A screenshot of `page` by headless Chromium, decoded: (width, height, RGB(A) bytes, channels).
fn screenshot(dir: &Path, page: &Path) -> (u32, u32, Vec<u8>, usize) {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run hack/chromium.sh (apt-get install chromium)"
    );
    let png = dir.join(format!(
        "{}.png",
        page.file_name().unwrap_or_default().to_string_lossy()
    ));
    let profile = dir.join("chromium-profile");
    let out = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=800,600",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(png.exists(), "no screenshot: {}", stderr(&out));
    let decoder = png::Decoder::new(std::fs::File::open(&png).expect("png"));
    let mut reader = decoder.read_info().expect("png header");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).expect("png frame");
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels, info.color_type.samples())
}

#[test]
fn the_heatmaps_render_in_chromium_with_the_cells_colours() {
    let dir = scratch("plugin-heatmap");
    let _served = serve(&dir);
    for (output, file) in [("html", "matrix.html"), ("svg", "matrix.svg")] {
        let out = plugin(&dir, &["matrix", "netreach-mesh", "-o", output]);
        assert!(out.status.success(), "{}", stderr(&out));
        let page = dir.join(file);
        std::fs::write(&page, &out.stdout).expect("page");
        let (width, height, pixels, channels) = screenshot(&dir, &page);
        assert_eq!((width, height), (800, 600));
        let mut colours = std::collections::BTreeSet::new();
        for pixel in pixels.chunks(channels) {
            colours.insert((pixel[0] >> 4, pixel[1] >> 4, pixel[2] >> 4));
        }
        // Not blank: the green cells and node-1 → node-2's red one are drawn (in the SVG, which
        // has no legend, that red can only be the cell).
        let near = |r: u8, g: u8, b: u8| {
            pixels
                .chunks(channels)
                .any(|p| p[0].abs_diff(r) < 24 && p[1].abs_diff(g) < 24 && p[2].abs_diff(b) < 24)
        };
        assert!(colours.len() > 8, "{file}: {} colours", colours.len());
        assert!(near(0x56, 0xa6, 0x4b), "{file}: no green cell");
        assert!(near(0xe0, 0x2f, 0x44), "{file}: no red cell");
    }
}

const TASK: &str = "apiVersion: kdoctor.io/v1beta1
kind: AppHttpHealthy
metadata: {name: web}
spec:
  request: {durationInSecond: 1, qps: 1, perRequestTimeoutInMS: 500}
  target: {host: http://127.0.0.1:1/, method: GET}
  schedule: {roundNumber: 1, roundTimeoutMinute: 1, schedule: \"0 1\"}
";

/// What a controller writes when a round ends.
fn round_over(result: &str) -> serde_json::Value {
    let record = serde_json::json!({
        "status": result, "roundNumber": 1,
        "startTimeStamp": "2026-01-01T00:00:00Z", "deadLineTimeStamp": "2026-01-01T00:01:00Z",
        "failedAgentNodeList": [], "succeedAgentNodeList": ["node-0"], "notReportAgentNodeList": [],
        "failureReason": if result == "fail" { Some("some agents failed") } else { None },
    });
    serde_json::json!({"status": {
        "expectedRound": 1, "doneRound": 1, "finish": true, "lastRoundStatus": result,
        "history": [record],
    }})
}

#[test]
fn kubectl_kdoctor_run_applies_follows_the_round_and_exits_by_its_result() {
    let dir = scratch("plugin-run");
    std::fs::write(dir.join("web.yaml"), TASK).expect("task file");
    // A bad file: validate's errors, exit 1, before any connection (there is no server yet).
    std::fs::write(dir.join("bad.yaml"), TASK.replace("qps: 1", "qps: 0")).expect("bad file");
    let bad = plugin(
        &dir,
        &["run", "-f", &dir.join("bad.yaml").display().to_string()],
    );
    assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("spec.request.qps"),
        "{}",
        stderr(&bad)
    );

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // A real kube-apiserver judges what the plugin applies and watches.
    let cluster = kube_sim::testcluster::TestCluster::start(&Default::default())
        .expect("a test cluster (hack/test.sh builds what it needs)");
    std::fs::copy(cluster.kubeconfig(), dir.join("kubeconfig")).expect("kubeconfig");
    let client = runtime.block_on(cluster.client()).expect("client");
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(client.clone());
    for crd in kdoctor_api::crd::crds() {
        runtime
            .block_on(crds.create(&Default::default(), &crd))
            .expect("CRD");
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = kube::runtime::wait::await_condition(
            crds.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(30), established).await })
            .expect("the CRD is established within 30 s")
            .expect("CRD watch");
    }
    let tasks: kube::Api<kdoctor_api::task::AppHttpHealthy> = kube::Api::all(client);
    for (result, code) in [("succeed", 0), ("fail", 1)] {
        let _ = runtime.block_on(tasks.delete("web", &Default::default()));
        let bin = dir.join("bin");
        let child = Command::new(kubectl_bin())
            .args([
                "kdoctor",
                "run",
                "--wait",
                "--timeout-seconds",
                "60",
                "--poll-seconds",
                "1",
                "--junit",
            ])
            .arg(dir.join(format!("junit-{result}.xml")))
            .arg("-f")
            .arg(dir.join("web.yaml"))
            .arg("--kubeconfig")
            .arg(dir.join("kubeconfig"))
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl kdoctor run");
        // The controller's part: once the task is applied, its round ends.
        let deadline = Instant::now() + Duration::from_secs(30);
        while runtime
            .block_on(tasks.get_opt("web"))
            .ok()
            .flatten()
            .is_none()
        {
            assert!(Instant::now() < deadline, "the task was never applied");
            std::thread::sleep(Duration::from_millis(100));
        }
        runtime
            .block_on(tasks.patch_status(
                "web",
                &Default::default(),
                &kube::api::Patch::Merge(round_over(result)),
            ))
            .expect("status");
        let out = child.wait_with_output().expect("run ends");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(code), "{text}{}", stderr(&out));
        assert!(text.contains("AppHttpHealthy \"web\" applied"), "{text}");
        assert!(
            text.contains(&format!("AppHttpHealthy \"web\" round 1: {result}")),
            "{text}"
        );
        // The round's verdict as a test case (this cluster serves no reports: no pair cases).
        let junit = std::fs::read_to_string(dir.join(format!("junit-{result}.xml")))
            .expect("--junit wrote its file");
        let round = "<testcase classname=\"AppHttpHealthy.web\" name=\"round 1\"";
        match result {
            "succeed" => assert!(junit.contains(&format!("{round}/>")), "{junit}"),
            _ => assert!(
                junit.contains(&format!(
                    "{round}>\n      <failure message=\"some agents failed\">"
                )),
                "{junit}"
            ),
        }
    }
    // An unwritable --junit fails before anything is applied.
    let unwritable = plugin(
        &dir,
        &[
            "run",
            "--wait",
            "--junit",
            "/nonexistent-dir/junit.xml",
            "-f",
            &dir.join("web.yaml").display().to_string(),
        ],
    );
    assert_eq!(unwritable.status.code(), Some(2), "{}", stderr(&unwritable));
    assert!(
        stderr(&unwritable).contains("--junit /nonexistent-dir/junit.xml: cannot write"),
        "{}",
        stderr(&unwritable)
    );
    // --junit without --wait is a usage error.
    let no_wait = plugin(&dir, &["run", "--junit", "x.xml", "-f", "web.yaml"]);
    assert_eq!(no_wait.status.code(), Some(2), "{}", stderr(&no_wait));
    assert!(stderr(&no_wait).contains("--wait"), "{}", stderr(&no_wait));
}
