//! `kdoctor local`: the whole system in one process, read with the real kubectl through the
//! kubeconfig it writes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{free_port, kdoctor_with_stdin, kubectl_bin, scratch, stderr, write};

/// The node name reports carry.
const NODE: &str = "local-test-node";

struct Ports {
    api: u16,
    http: u16,
    https: u16,
    dns: u16,
    udp_echo: u16,
}

impl Ports {
    fn new() -> Ports {
        Ports {
            api: free_port(),
            http: free_port(),
            https: free_port(),
            dns: free_port(),
            udp_echo: free_port(),
        }
    }
}

/// One task of each kind, one short round each, against the local targets.
fn tasks(ports: &Ports) -> String {
    format!(
        "apiVersion: kdoctor.io/v1beta1
kind: NetReach
metadata: {{name: reach}}
spec:
  target: {{endpoint: true, clusterIP: true, nodePort: true, ipv4: true}}
  request: {{qps: 5, durationInSecond: 1, perRequestTimeoutInMS: 1000}}
  schedule: {{schedule: \"0 1\", roundNumber: 1, roundTimeoutMinute: 1}}
---
apiVersion: kdoctor.io/v1beta1
kind: AppHttpHealthy
metadata: {{name: web}}
spec:
  target: {{host: 'http://127.0.0.1:{http}/kdoctoragent?task=web', method: GET}}
  request: {{qps: 5, durationInSecond: 1, perRequestTimeoutInMS: 1000}}
  schedule: {{schedule: \"0 1\", roundNumber: 1, roundTimeoutMinute: 1}}
  expect: {{successRate: 1, statusCode: 200}}
---
apiVersion: kdoctor.io/v1beta1
kind: Netdns
metadata: {{name: dns}}
spec:
  target: {{targetUser: {{server: 127.0.0.1, port: {dns}}}}}
  request: {{qps: 5, durationInSecond: 1, perRequestTimeoutInMS: 500, domain: netdns-e2e.test, protocol: udp}}
  schedule: {{schedule: \"0 1\", roundNumber: 1, roundTimeoutMinute: 1}}
",
        http = ports.http,
        dns = ports.dns
    )
}

/// A running `kdoctor local`, its standard error in a file.
struct Local {
    child: Child,
    log: PathBuf,
}

impl Local {
    fn start(dir: &Path, task_dir: &Path, ports: &Ports) -> Local {
        Local::start_with(dir, Some(task_dir), ports)
    }

    /// Without task files when `task_dir` is `None`.
    fn start_with(dir: &Path, task_dir: Option<&Path>, ports: &Ports) -> Local {
        let log = dir.join(format!("local-{}.log", ports.api));
        let file = std::fs::File::create(&log).expect("log file");
        let data = dir.join("data");
        let kubeconfig = dir.join("kubeconfig");
        let mut command = Command::new(env!("CARGO_BIN_EXE_kdoctor"));
        command.arg("local");
        if let Some(task_dir) = task_dir {
            command.arg("-f").arg(task_dir);
        }
        let child = command
            .arg("--data")
            .arg(&data)
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .args(["--listen", &format!("127.0.0.1:{}", ports.api)])
            .args(["--app-http-port", &ports.http.to_string()])
            .args(["--app-https-port", &ports.https.to_string()])
            .args(["--dns-port", &ports.dns.to_string()])
            .args(["--udp-echo-port", &ports.udp_echo.to_string()])
            .args(["--node-name", NODE])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .expect("kdoctor local starts");
        Local { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log has `count` lines containing `text`.
    fn wait_for(&mut self, text: &str, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let log = self.log();
            if log.matches(text).count() >= count {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("kdoctor local exited ({status}) before {count} × {text:?}:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "no {count} × {text:?} in time:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then the exit code.
    fn stop(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return (status.code(), self.log());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("kdoctor local did not stop on SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pinned kubectl with the generated kubeconfig and a fresh cache.
fn kubectl_command(dir: &Path, args: &[&str]) -> Command {
    let cache = dir.join(format!("kubectl-cache-{}", free_port()));
    let mut command = Command::new(kubectl_bin());
    command
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .arg("--cache-dir")
        .arg(&cache)
        .args(args);
    command
}

/// Runs kubectl that must fail; its standard error.
fn kubectl_fails(dir: &Path, args: &[&str]) -> String {
    let output = kubectl_command(dir, args).output().expect("kubectl runs");
    assert!(!output.status.success(), "kubectl {args:?} succeeded");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs the pinned kubectl with the generated kubeconfig and a fresh cache.
fn kubectl(dir: &Path, args: &[&str]) -> String {
    let output = kubectl_command(dir, args).output().expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("JSON")
}

/// The request counts of every target detail of a report, whatever the kind.
fn request_counts(report: &Value) -> Vec<i64> {
    ["taskNetReach", "taskAppHealthy", "taskNetDns"]
        .iter()
        .filter_map(|key| report.get(*key))
        .flat_map(|task| {
            task["roundTaskDetail"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|detail| {
            detail["requestTargetMetrics"]["requestCounts"]
                .as_i64()
                .unwrap_or(-1)
        })
        .collect()
}

#[test]
fn local_runs_tasks_and_kubectl_reads_reports_and_tasks_across_restarts() {
    let dir = scratch("local-run");
    let ports = Ports::new();
    let task_dir = dir.join("tasks");
    std::fs::create_dir_all(&task_dir).expect("task dir");
    write(&task_dir, "tasks.yaml", tasks(&ports).as_bytes());

    let mut local = Local::start(&dir, &task_dir, &ports);
    local.wait_for("finished, 1 round done", 3);
    let log = local.log();
    assert!(log.contains("get kdoctorreport"), "{log}");
    for kind in [
        "NetReach \"reach\"",
        "AppHttpHealthy \"web\"",
        "Netdns \"dns\"",
    ] {
        assert!(
            log.contains(&format!("{kind}: round 1/1 started")),
            "{kind}:\n{log}"
        );
        assert!(
            log.contains(&format!("{kind}: round 1/1 succeed")),
            "{kind}:\n{log}"
        );
    }

    let list = json(&kubectl(&dir, &["get", "kdoctorreport", "-o", "json"]));
    let items = list["items"].as_array().expect("items");
    let names: Vec<&str> = items
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["apphttphealthy-web", "netdns-dns", "netreach-reach"],
        "{list}"
    );
    for item in items {
        assert_eq!(item["status"]["status"], "Finished", "{item}");
        assert_eq!(item["status"]["lastResult"], "succeed", "{item}");
        assert_eq!(item["status"]["taskState"], "Present", "{item}");
        let reports = item["report"]["latestRoundReport"]
            .as_array()
            .expect("reports");
        assert_eq!(reports.len(), 1, "{item}");
        let report = &reports[0];
        assert_eq!(report["roundResult"], "succeed", "{report}");
        assert_eq!(report["nodeName"], NODE);
        assert_eq!(report["podName"], "kdoctor-local");
        let counts = request_counts(report);
        assert!(!counts.is_empty(), "{report}");
        assert!(counts.iter().all(|c| *c >= 5), "{counts:?} {report}");
    }
    // NetReach: the pod, ClusterIP and NodePort targets are all the local echo server.
    let reach = &items[2]["report"]["latestRoundReport"][0]["taskNetReach"];
    let targets: Vec<&str> = reach["roundTaskDetail"]
        .as_array()
        .expect("details")
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert_eq!(
        targets,
        [
            "AgentPodV4IP_kdoctor-local_127.0.0.1".to_string(),
            format!("AgentClusterV4IP_127.0.0.1:{}", ports.http),
            format!("AgentNodePortV4IP_127.0.0.1_{}", ports.http),
        ],
        "{reach}"
    );

    // The tasks themselves, with the status the controller would write.
    let netreach = json(&kubectl(&dir, &["get", "netreach", "-o", "json"]));
    let task = &netreach["items"][0];
    assert_eq!(task["metadata"]["name"], "reach");
    assert_eq!(task["status"]["finish"], true, "{task}");
    assert_eq!(task["status"]["expectedRound"], 1);
    assert_eq!(task["status"]["doneRound"], 1);
    assert_eq!(task["status"]["lastRoundStatus"], "succeed");
    assert_eq!(
        task["status"]["history"][0]["succeedAgentNodeList"][0],
        NODE
    );
    let table = kubectl(&dir, &["get", "netreach"]);
    let mut lines = table.lines();
    let head: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        head,
        [
            "NAME",
            "FINISH",
            "EXPECTEDROUND",
            "DONEROUND",
            "LASTROUNDSTATUS",
            "SCHEDULE",
            "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row[..5], ["reach", "true", "1", "1", "succeed"], "{table}");
    let web = json(&kubectl(&dir, &["get", "ahh", "web", "-o", "json"]));
    assert_eq!(web["status"]["lastRoundStatus"], "succeed", "{web}");
    let dns = json(&kubectl(&dir, &["get", "netdnses", "-o", "json"]));
    assert_eq!(dns["items"][0]["status"]["doneRound"], 1, "{dns}");

    let (code, log) = local.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("kdoctor local: stopping"), "{log}");

    // A second run: a new incarnation of each task; the first run's reports stay listed.
    let ports2 = Ports {
        api: free_port(),
        ..ports
    };
    let mut again = Local::start(&dir, &task_dir, &ports2);
    again.wait_for("finished, 1 round done", 3);
    let list = json(&kubectl(&dir, &["get", "kdoctorreport", "-o", "json"]));
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 6, "{list}");
    let ended: Vec<&Value> = items
        .iter()
        .filter(|i| i["status"]["taskState"] == "Deleted")
        .collect();
    assert_eq!(ended.len(), 3, "{list}");
    for item in ended {
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        assert!(name.contains('.'), "an older incarnation has a tag: {name}");
        assert_eq!(
            item["report"]["latestRoundReport"][0]["roundResult"], "succeed",
            "{item}"
        );
    }
    let (code, log) = again.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn local_refuses_bad_task_files_before_starting_anything() {
    let dir = scratch("local-bad");
    let data = dir.join("data");
    let kubeconfig = dir.join("kubeconfig");
    let api = free_port();
    let output = kdoctor_with_stdin(
        &[
            "local",
            "-f",
            "-",
            "--data",
            &data.display().to_string(),
            "--kubeconfig-out",
            &kubeconfig.display().to_string(),
            "--listen",
            &format!("127.0.0.1:{api}"),
            "--app-http-port",
            "0",
            "--app-https-port",
            "0",
            "--dns-port",
            "0",
            "--udp-echo-port",
            "0",
        ],
        "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: bad}\n\
         spec:\n  request: {qps: 5, durationInSecond: 0}\n",
    );
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("<stdin>: The NetReach \"bad\" is invalid:"),
        "{text}"
    );
    assert!(text.contains("spec.request.durationInSecond"), "{text}");
    assert!(text.contains("not started"), "{text}");
    assert!(!data.exists(), "the store was created");
    assert!(!kubeconfig.exists(), "a kubeconfig was written");
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", api)).is_ok(),
        "the API port was taken"
    );
}

#[test]
fn local_refuses_tasks_it_cannot_run_here_before_starting_anything() {
    let dir = scratch("local-cannot");
    let data = dir.join("data");
    let run = |yaml: &str| {
        kdoctor_with_stdin(
            &[
                "local",
                "-f",
                "-",
                "--data",
                &data.display().to_string(),
                "--kubeconfig-out",
                &dir.join("kubeconfig").display().to_string(),
                "--listen",
                &format!("127.0.0.1:{}", free_port()),
                "--app-http-port",
                "0",
                "--app-https-port",
                "0",
                "--dns-port",
                "0",
                "--udp-echo-port",
                "0",
            ],
            yaml,
        )
    };
    let twice = "apiVersion: kdoctor.io/v1beta1\nkind: Netdns\nmetadata: {name: d}\n\
                 spec: {target: {targetUser: {server: 127.0.0.1, port: 53}}}\n---\n";
    let output = run(&twice.repeat(2));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("Netdns \"d\" is given twice"),
        "{}",
        stderr(&output)
    );
    let output = run(
        "apiVersion: kdoctor.io/v1beta1\nkind: AppHttpHealthy\nmetadata: {name: a}\n\
         spec: {target: {host: 'https://127.0.0.1/', method: GET, tlsSecretName: web-tls, tlsSecretNamespace: default}}\n",
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("tlsSecretName need the cluster"),
        "{}",
        stderr(&output)
    );
    assert!(!data.exists(), "the store was created");
}

/// examples/local/ is usable as it is, whatever ports local picked: every task's first round
/// succeeds against local's own targets, which the files name `kdoctor.localhost`. The default
/// HTTP echo port is held by the test, so local picks another and says which.
#[test]
fn the_local_examples_run_as_they_are() {
    let dir = scratch("local-examples");
    // Held (by this test, or already by someone else): either way taken.
    let _held = std::net::TcpListener::bind("127.0.0.1:18080");
    let log = dir.join("log");
    let child = Command::new(env!("CARGO_BIN_EXE_kdoctor"))
        .current_dir(crate::support::repo())
        .args(["local", "-f", "examples/local/"])
        .arg("--data")
        .arg(dir.join("data"))
        .arg("--kubeconfig-out")
        .arg(dir.join("kubeconfig"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")))
        .spawn()
        .expect("kdoctor local starts");
    let mut local = Local { child, log };
    for task in [
        "NetReach \"local-reach\"",
        "AppHttpHealthy \"local-http\"",
        "Netdns \"local-dns\"",
    ] {
        local.wait_for(&format!("{task}: round 1/3 succeed"), 1);
    }
    let list = json(&kubectl(&dir, &["get", "kdr", "-o", "json"]));
    assert_eq!(list["items"].as_array().map(Vec::len), Some(3), "{list}");
    // The NetReach example asks for TCP connects too: each target has its TCP_ entry; and
    // UDP echoes: the pod has its UDP_ entry, with the datagram measurements.
    let reach = json(&kubectl(
        &dir,
        &["get", "kdr", "netreach-local-reach", "-o", "json"],
    ));
    let details = &reach["report"]["latestRoundReport"][0]["taskNetReach"]["roundTaskDetail"];
    let names: Vec<&str> = details
        .as_array()
        .expect("details")
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    let tcp = names.iter().filter(|n| n.starts_with("TCP_")).count();
    let entries = |prefix: &str| -> Vec<&serde_json::Value> {
        details
            .as_array()
            .expect("details")
            .iter()
            .filter(|d| d["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .collect()
    };
    let udp = entries("UDP_");
    // And pings the pod: its ICMP_ entry, answered on a ping socket or (as root) a raw one.
    let icmp = entries("ICMP_");
    assert!(
        tcp > 0 && tcp * 2 + udp.len() + icmp.len() == names.len(),
        "{names:?}"
    );
    assert_eq!(icmp.len(), 1, "{names:?}");
    assert_eq!(
        icmp[0]["name"], "ICMP_AgentPodV4IP_kdoctor-local_127.0.0.1",
        "{names:?}"
    );
    assert_eq!(icmp[0]["requestSucceed"], true, "{}", icmp[0]);
    // The pod, then the Service stand-ins' UDP echo port (the same local server).
    let udp_names: Vec<&str> = udp.iter().filter_map(|d| d["name"].as_str()).collect();
    assert_eq!(udp_names.len(), 4, "{udp_names:?}");
    assert_eq!(udp_names[0], "UDP_AgentPodV4IP_kdoctor-local_127.0.0.1");
    for (name, kind) in udp_names[1..].iter().zip([
        "UDP_AgentClusterV4IP_127.0.0.1:",
        "UDP_AgentNodePortV4IP_127.0.0.1_",
        "UDP_AgentLoadbalancerV4IP_127.0.0.1:",
    ]) {
        assert!(name.starts_with(kind), "{udp_names:?}");
    }
    assert!(
        udp.iter().all(|d| d["requestSucceed"] == true),
        "every UDP entry echoed: {udp:?}"
    );
    let datagrams = &udp[0]["requestTargetMetrics"]["datagrams"];
    assert_eq!(udp[0]["requestSucceed"], true, "{}", udp[0]);
    assert_eq!(datagrams["lossPercent"], 0.0, "{datagrams}");
    assert_eq!(datagrams["forwardHops"], 0, "{datagrams}");
    // The path MTU searched after the run: loopback takes the largest datagram.
    assert_eq!(datagrams["pathMTU"], 65_535, "{datagrams}");
    assert_eq!(datagrams["pathMTULimit"], "interface", "{datagrams}");
    assert!(
        names.contains(&"TCP_AgentPodV4IP_kdoctor-local_127.0.0.1"),
        "{names:?}"
    );
    assert!(
        local
            .log()
            .contains("port 18080 is taken: the HTTP echo target uses"),
        "{}",
        local.log()
    );
    let (code, log) = local.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn kubectl_applies_explains_watches_and_deletes_tasks_on_local_as_on_a_cluster() {
    let dir = scratch("local-apply");
    let ports = Ports::new();
    // Started with no task files: the tasks come by kubectl apply.
    let mut local = Local::start_with(&dir, None, &ports);
    local.wait_for("Ctrl-C stops", 1);
    let file = write(&dir, "tasks.yaml", tasks(&ports).as_bytes());
    let applied = kubectl(&dir, &["apply", "-f", &file]);
    for created in [
        "netreach.kdoctor.io/reach created",
        "apphttphealthy.kdoctor.io/web created",
        "netdns.kdoctor.io/dns created",
    ] {
        assert!(applied.contains(created), "{applied}");
    }
    local.wait_for("finished, 1 round done", 3);
    let again = kubectl(&dir, &["apply", "-f", &file]);
    assert_eq!(again.matches("unchanged").count(), 3, "{again}");
    let server_side = kubectl(&dir, &["apply", "--server-side", "-f", &file]);
    assert_eq!(
        server_side.matches("serverside-applied").count(),
        3,
        "{server_side}"
    );
    let task = json(&kubectl(&dir, &["get", "nr", "reach", "-o", "json"]));
    assert_eq!(task["status"]["finish"], true);
    assert_eq!(task["status"]["lastRoundStatus"], "succeed");

    // What the real apiserver refuses, refused in its words.
    let changed = tasks(&ports).replace("qps: 5, durationInSecond: 1, perRequestTimeoutInMS: 1000}\n  schedule: {schedule: \"0 1\", roundNumber: 1, roundTimeoutMinute: 1}\n---\napiVersion: kdoctor.io/v1beta1\nkind: AppHttpHealthy", "qps: 6, durationInSecond: 1, perRequestTimeoutInMS: 1000}\n  schedule: {schedule: \"0 1\", roundNumber: 1, roundTimeoutMinute: 1}\n---\napiVersion: kdoctor.io/v1beta1\nkind: AppHttpHealthy");
    assert_ne!(changed, tasks(&ports));
    let changed = write(&dir, "changed.yaml", changed.as_bytes());
    let refused = kubectl_fails(&dir, &["apply", "-f", &changed]);
    assert!(
        refused.contains("The NetReach \"reach\" is invalid: spec: Forbidden: spec is immutable"),
        "{refused}"
    );
    let invalid = write(
        &dir,
        "invalid.yaml",
        b"apiVersion: kdoctor.io/v1beta1\nkind: Netdns\nmetadata: {name: bad}\nspec:\n  request: {qps: 0}\n  nonsense: 1\n",
    );
    let refused = kubectl_fails(&dir, &["apply", "-f", &invalid]);
    assert!(refused.contains("spec.request.qps"), "{refused}");
    assert!(refused.contains("spec.nonsense"), "{refused}");

    // explain reads the served OpenAPI.
    let explained = kubectl(&dir, &["explain", "netreach.spec.request"]);
    assert!(explained.contains("qps"), "{explained}");
    assert!(explained.contains("KIND:       NetReach"), "{explained}");

    // A watch sees the deletion; the deleted task's runner stops and its report stays.
    let watcher = kubectl_command(
        &dir,
        &["get", "nr", "-w", "--output-watch-events", "-o", "json"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .expect("kubectl watch starts");
    std::thread::sleep(Duration::from_secs(1));
    let deleted = kubectl(&dir, &["delete", "netreach", "reach"]);
    assert!(
        deleted.contains("netreach.kdoctor.io \"reach\" deleted"),
        "{deleted}"
    );
    local.wait_for("deleted; its reports stay", 1);
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill").arg(watcher.id().to_string()).status();
    let watched = watcher.wait_with_output().expect("watch output");
    let watched = String::from_utf8_lossy(&watched.stdout);
    assert!(watched.contains("{\"type\":\"ADDED\""), "{watched}");
    assert!(watched.contains("{\"type\":\"DELETED\""), "{watched}");
    let gone = kubectl_fails(&dir, &["get", "nr", "reach"]);
    assert!(
        gone.contains("netreaches.kdoctor.io \"reach\" not found"),
        "{gone}"
    );
    let report = json(&kubectl(
        &dir,
        &["get", "kdr", "netreach-reach", "-o", "json"],
    ));
    assert_eq!(
        (
            &report["status"]["taskState"],
            &report["status"]["roundFinishedNumber"]
        ),
        (&Value::from("Deleted"), &Value::from(1)),
        "{report}"
    );

    // The plugin runs a task against local and exits by its result.
    let quick = write(
        &dir,
        "quick.yaml",
        b"apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: quick}\nspec:\n  target: {endpoint: true, ipv4: true}\n  request: {qps: 5, durationInSecond: 1}\n  schedule: {schedule: \"0 1\", roundNumber: 1, roundTimeoutMinute: 1}\n",
    );
    let run = Command::new(env!("CARGO_BIN_EXE_kdoctor"))
        .args(["kubectl", "run", "-f", &quick, "--wait", "--kubeconfig"])
        .arg(dir.join("kubeconfig"))
        .output()
        .expect("kdoctor kubectl run");
    let out = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{out}{}", stderr(&run));
    assert!(
        out.contains("every task finished and its last round succeeded"),
        "{out}"
    );

    let (code, log) = local.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// Every v3 document the local server serves parses as OpenAPI 3 (the `openapiv3` crate), and
/// `kubectl explain` answers for every top-level field of every kind it describes.
#[test]
fn every_served_openapi_document_parses_and_explains_every_top_level_field() {
    let dir = scratch("local-openapi");
    let ports = Ports::new();
    let mut local = Local::start_with(&dir, None, &ports);
    local.wait_for("Ctrl-C stops", 1);
    let index = json(&kubectl(&dir, &["get", "--raw", "/openapi/v3"]));
    let paths = index["paths"].as_object().expect("an index of paths");
    assert_eq!(paths.len(), 2, "{index}");
    let mut explained = 0;
    for entry in paths.values() {
        let url = entry["serverRelativeURL"].as_str().expect("a URL");
        let text = kubectl(&dir, &["get", "--raw", url]);
        let document: openapiv3::OpenAPI =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not OpenAPI 3: {e}"));
        let schemas = document.components.expect("components").schemas;
        for schema in schemas.values() {
            let openapiv3::ReferenceOr::Item(schema) = schema else {
                continue;
            };
            let Some(kind) = schema
                .schema_data
                .extensions
                .get("x-kubernetes-group-version-kind")
                .and_then(|gvk| gvk[0]["kind"].as_str())
                .filter(|k| !k.ends_with("List"))
            else {
                continue;
            };
            let openapiv3::SchemaKind::Type(openapiv3::Type::Object(object)) = &schema.schema_kind
            else {
                panic!("{kind}: not an object schema");
            };
            for field in object.properties.keys() {
                let out = kubectl(&dir, &["explain", &format!("{kind}.{field}")]);
                assert!(
                    out.contains(&format!("FIELD: {field}")),
                    "{kind}.{field}: {out}"
                );
                explained += 1;
            }
        }
    }
    // NetReach, AppHttpHealthy, Netdns (apiVersion, kind, metadata, spec, status) and the report.
    assert!(explained >= 18, "{explained} fields explained");
    let (code, log) = local.stop();
    assert_eq!(code, Some(0), "{log}");
}
