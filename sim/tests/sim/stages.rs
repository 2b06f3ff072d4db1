//! Stage engine golden tests (kwok's testdata pattern): `golden/<case>.input.yaml` holds the
//! objects, the stages (default unless given) and the steps; `<case>.output.yaml` the stages
//! played and the resulting objects, normalized. `KUBE_SIM_BLESS=1` rewrites the outputs.

use std::path::PathBuf;

use kube_sim::Cluster;
use kube_sim::cluster::{DeleteOptions, WriteOptions};
use kube_sim::stages::engine::settle;
use kube_sim::stages::{default_stages, parse_stages};
use serde_json::{Value, json};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sim/golden")
}

fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
                for k in ["uid", "resourceVersion", "managedFields"] {
                    meta.remove(k);
                }
            }
            for child in m.values_mut() {
                normalize(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        Value::String(s)
            if s.len() == 20 && s.ends_with('Z') && s.parse::<jiff::Timestamp>().is_ok() =>
        {
            *s = "<time>".into();
        }
        _ => {}
    }
}

fn parse_ref(r: &str) -> (String, String, String) {
    let mut parts = r.splitn(3, '/');
    let kind = parts.next().unwrap_or("").to_string();
    let ns = parts.next().unwrap_or("").to_string();
    let name = parts.next().unwrap_or("").to_string();
    (kind, ns, name)
}

fn info_of(c: &Cluster, kind: &str) -> std::sync::Arc<kube_sim::resources::ResourceInfo> {
    ["", "apps"]
        .iter()
        .find_map(|g| c.resource(g, kind))
        .unwrap_or_else(|| panic!("kind {kind} is served"))
}

fn run_case(input: &Value) -> Value {
    let c = Cluster::new(1000, 7);
    let ns = c.builtin("", "Namespace").expect("ns");
    c.create(
        &ns,
        "",
        json!({"metadata": {"name": "default"}}),
        &WriteOptions::default(),
    )
    .expect("default namespace");
    let stages = match input.get("stages").and_then(Value::as_str) {
        Some(yaml) => parse_stages(yaml).expect("stages"),
        None => default_stages().expect("default stages"),
    };
    for obj in input["objects"].as_array().expect("objects") {
        let kind = obj["kind"].as_str().expect("kind");
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        c.create(
            &info_of(&c, kind),
            ns,
            obj.clone(),
            &WriteOptions::manager("test"),
        )
        .expect("create");
    }
    let mut played = Vec::new();
    let mut touched = Vec::new();
    for step in input["steps"].as_array().expect("steps") {
        let (verb, arg) = step
            .as_object()
            .and_then(|m| m.iter().next())
            .expect("step");
        let arg = arg.as_str().expect("step argument");
        match verb.as_str() {
            "settle" => {
                let (kind, ns, name) = parse_ref(arg);
                let names =
                    settle(&c, &stages, &info_of(&c, &kind), &ns, &name, 10).expect("settle");
                played.push(json!({arg: names}));
                if !touched.contains(&arg.to_string()) {
                    touched.push(arg.to_string());
                }
            }
            "delete" => {
                let (kind, ns, name) = parse_ref(arg);
                c.delete(&info_of(&c, &kind), &ns, &name, &DeleteOptions::default())
                    .expect("delete");
            }
            "annotate" => {
                let (target, kv) = arg.split_once(' ').expect("annotate target and key=value");
                let (k, v) = kv.split_once('=').expect("key=value");
                let (kind, ns, name) = parse_ref(target);
                let patch = json!({"metadata": {"annotations": {k: v}}});
                c.patch(
                    &info_of(&c, &kind),
                    &ns,
                    &name,
                    kube_sim::patch::PatchType::Merge,
                    &serde_json::to_vec(&patch).expect("json"),
                    &WriteOptions::default(),
                )
                .expect("annotate");
            }
            other => panic!("unknown step {other}"),
        }
    }
    let mut objects = Vec::new();
    for r in &touched {
        let (kind, ns, name) = parse_ref(r);
        let info = info_of(&c, &kind);
        objects.push(match c.get(&info, &ns, &name) {
            Ok(mut o) => {
                normalize(&mut o);
                o
            }
            Err(e) => json!({"gone": r, "status": e.message}),
        });
    }
    json!({"played": played, "objects": objects})
}

#[test]
fn stage_engine_golden_cases() {
    let bless = std::env::var("KUBE_SIM_BLESS").is_ok_and(|v| v == "1");
    let mut cases = 0;
    let mut failures = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(golden_dir())
        .expect("golden dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".input.yaml"))
        .collect();
    entries.sort();
    for path in entries {
        cases += 1;
        let input: Value =
            serde_yaml::from_str(&std::fs::read_to_string(&path).expect("read")).expect("yaml");
        let got = run_case(&input);
        let out_path = PathBuf::from(
            path.to_string_lossy()
                .replace(".input.yaml", ".output.yaml"),
        );
        if bless {
            std::fs::write(&out_path, serde_yaml::to_string(&got).expect("yaml")).expect("write");
            continue;
        }
        let want: Value = std::fs::read_to_string(&out_path)
            .ok()
            .and_then(|t| serde_yaml::from_str(&t).ok())
            .unwrap_or(Value::Null);
        if got != want {
            failures.push(format!(
                "{}:\n--- want\n{}\n--- got\n{}",
                path.display(),
                serde_yaml::to_string(&want).unwrap_or_default(),
                serde_yaml::to_string(&got).unwrap_or_default()
            ));
        }
    }
    assert!(cases >= 8, "golden cases found: {cases}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
