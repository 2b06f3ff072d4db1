//! `kdoctor crd` and `kdoctor validate`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Deserialize;

use crate::support::{kdoctor, kdoctor_with_stdin, repo, scratch, stderr, stdout, write};

#[test]
fn crd_output_is_three_crds_equal_to_manifests() {
    let output = kdoctor(&["crd"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let crds: Vec<CustomResourceDefinition> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| CustomResourceDefinition::deserialize(doc).expect("a CustomResourceDefinition"))
        .collect();
    let names: Vec<&str> = crds
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    assert_eq!(
        names,
        [
            "netreaches.kdoctor.io",
            "apphttphealthies.kdoctor.io",
            "netdnses.kdoctor.io"
        ]
    );

    let mut committed = String::new();
    for plural in ["netreaches", "apphttphealthies", "netdnses"] {
        let path = repo().join(format!("manifests/crds/kdoctor.io_{plural}.yaml"));
        committed.push_str(&std::fs::read_to_string(&path).expect("manifest exists"));
    }
    assert!(
        committed == text,
        "manifests/crds/ differ from `kdoctor crd`: run hack/gen-crds.sh and commit the result"
    );
}

#[test]
fn crd_can_print_one_kind_as_json() {
    let output = kdoctor(&["crd", "--kind", "Netdns", "-o", "json"]);
    assert!(output.status.success());
    let crd: CustomResourceDefinition = serde_json::from_slice(&output.stdout).expect("JSON CRD");
    assert_eq!(crd.spec.names.kind, "Netdns");
    let output = kdoctor(&["crd", "--kind", "Pod"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("unknown task kind \"Pod\""),
        "{}",
        stderr(&output)
    );
}

#[test]
fn validate_accepts_the_examples() {
    let output = kdoctor(&["validate", "-f", "examples/"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert_eq!(
        stdout(&output),
        "examples/apphttphealthy.yaml: AppHttpHealthy \"example-http\": valid\n\
         examples/netdns.yaml: Netdns \"cluster-dns\": valid\n\
         examples/netreach.yaml: NetReach \"task\": valid\n"
    );
}

#[test]
fn validate_prints_every_error_with_its_field_path_and_exits_1() {
    let dir = scratch("invalid");
    let file = write(
        &dir,
        "bad.yaml",
        b"apiVersion: kdoctor.io/v1beta1
kind: NetReach
metadata:
  name: bad
spec:
  schedule: {schedule: '0 5', roundTimeoutMinute: 10}
  request: {qps: 25}
---
apiVersion: kdoctor.io/v1beta1
kind: Netdns
metadata:
  name: good
spec:
  target: {targetUser: {server: 10.96.0.10}}
",
    );
    let output = kdoctor(&["validate", "-f", &file]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stdout(&output),
        format!(
            "{file}: The NetReach \"bad\" is invalid:\n  \
             * spec.schedule.roundTimeoutMinute: Invalid value: 10: must not be greater than the interval of the schedule (5 minutes)\n  \
             * spec.request.qps: Invalid value: 25: must be less than 20\n\
             {file}: Netdns \"good\": valid\n"
        )
    );
}

/// An unknown field does not hide the task's other errors (issue 19): all are reported at once.
#[test]
fn validate_reports_unknown_fields_with_the_other_errors() {
    let dir = scratch("unknown-and-invalid");
    let file = write(
        &dir,
        "typo.yaml",
        b"apiVersion: kdoctor.io/v1beta1
kind: NetReach
metadata:
  name: typo
spec:
  request: {qps: 25, qsp: 5}
",
    );
    let output = kdoctor(&["validate", "-f", &file]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stdout(&output),
        format!(
            "{file}: The NetReach \"typo\" is invalid:\n  \
             * spec.request.qsp: Unknown field: field not declared in schema\n  \
             * spec.request.qps: Invalid value: 25: must be less than 20\n"
        )
    );
}

#[test]
fn files_that_are_not_tasks_get_one_clear_line() {
    let dir = scratch("not-tasks");
    let cases: [(&str, &[u8], &str); 5] = [
        (
            "broken.yaml",
            b"spec: [unclosed\n",
            "document 1: not valid YAML: ",
        ),
        (
            "binary.yaml",
            &[0xff, 0xfe, 0x00, 0x9c],
            "not a task file: not UTF-8 text",
        ),
        (
            "configmap.yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            "ConfigMap \"x\": not a kdoctor task: apiVersion \"v1\", kind \"ConfigMap\"",
        ),
        (
            "scalar.yaml",
            b"just some words\n",
            "document 1: not a Kubernetes object",
        ),
        ("empty.yaml", b"# nothing here\n", "no kdoctor task found"),
    ];
    for (name, content, expected) in cases {
        let file = write(&dir, name, content);
        let output = kdoctor(&["validate", "-f", &file]);
        assert_eq!(output.status.code(), Some(1), "{name}");
        let out = stdout(&output);
        assert_eq!(out.lines().count(), 1, "{name}: {out}");
        assert!(
            out.starts_with(&format!("{file}: {expected}")),
            "{name}: {out}"
        );
        assert!(stderr(&output).is_empty(), "{name}: {}", stderr(&output));
    }
}

/// Issue 20 L5: a file nested 200,000 deep (parsing it took over a minute) or larger than the
/// API server would take is refused with one line saying so, from a file or standard input,
/// even when the size limit falls inside a character.
#[test]
fn hostile_files_are_refused_by_their_depth_or_size() {
    let dir = scratch("hostile-files");
    let deep = format!("spec: {}\n", "[".repeat(200_000));
    let mut large = b"# ".to_vec();
    large.resize(3 << 20, b'x');
    large.push(b'\n');
    // A two-byte character across the limit.
    let mut cut = b"# ".to_vec();
    cut.resize(3 << 20, b'x');
    cut.extend_from_slice("é and more\n".as_bytes());
    let cases: [(&str, &[u8], &str); 3] = [
        (
            "deep.yaml",
            deep.as_bytes(),
            "flow collections ([ or {) nested 101 deep at line 1",
        ),
        (
            "large.yaml",
            &large,
            "the manifest is larger than 3145728 bytes",
        ),
        (
            "cut.yaml",
            &cut,
            "the manifest is larger than 3145728 bytes",
        ),
    ];
    for (name, content, expected) in cases {
        let file = write(&dir, name, content);
        let output = kdoctor(&["validate", "-f", &file]);
        assert_eq!(output.status.code(), Some(1), "{name}: {}", stderr(&output));
        let out = stdout(&output);
        assert_eq!(out.lines().count(), 1, "{name}: {out}");
        assert!(out.starts_with(&format!("{file}: ")), "{name}: {out}");
        assert!(out.contains(expected), "{name}: {out}");
    }
    let output = kdoctor_with_stdin(&["validate", "-f", "-"], &deep);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with("<stdin>: ") && stdout(&output).contains("nested 101 deep"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn an_unreadable_file_is_an_environment_error() {
    let output = kdoctor(&["validate", "-f", "does/not/exist.yaml"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output).lines().next(),
        Some("error: cannot read does/not/exist.yaml: No such file or directory (os error 2)")
    );
}

#[test]
fn validate_reads_stdin_and_prints_the_effective_task() {
    let task =
        "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: minimal}\nspec: {}\n";
    let output = kdoctor_with_stdin(&["validate", "-f", "-", "-o", "yaml"], task);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stderr(&output), "<stdin>: NetReach \"minimal\": valid\n");
    let effective: serde_json::Value = serde_yaml_ng::from_str(&stdout(&output)).expect("YAML");
    assert_eq!(effective["spec"]["request"]["perRequestTimeoutInMS"], 500);
    assert_eq!(effective["spec"]["schedule"]["schedule"], "0 1");
    assert_eq!(effective["spec"]["target"]["endpoint"], true);
    // The effective task is itself valid.
    let again = kdoctor_with_stdin(&["validate", "-f", "-"], &stdout(&output));
    assert_eq!(again.status.code(), Some(0), "{}", stdout(&again));
}

#[test]
fn the_configuration_sets_the_limits() {
    let dir = scratch("config");
    let task = write(
        &dir,
        "task.yaml",
        b"apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: fast}\nspec: {request: {qps: 25}}\n",
    );
    assert_eq!(kdoctor(&["validate", "-f", &task]).status.code(), Some(1));
    let config = write(&dir, "conf.yml", b"netReachRequestMaxQPS: 50\n");
    let output = kdoctor(&["validate", "-f", &task, "--config", &config]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));

    let bad = write(&dir, "bad.yml", b"crdMaxHistory: 0\n");
    let output = kdoctor(&["validate", "-f", &task, "--config", &bad]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("crdMaxHistory: Invalid value: 0: must be at least 1"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(kdoctor(&[]).status.code(), Some(2));
    assert_eq!(kdoctor(&["validate"]).status.code(), Some(2));
    assert_eq!(kdoctor(&["crd", "-o", "xml"]).status.code(), Some(2));
}
