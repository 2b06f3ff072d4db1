//! The CRDs are valid structural CRDs with upstream's names, columns and subresources, and
//! every CEL rule compiles within the API server's cost budget.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kdoctor_api::crd::{crd, crds};
use kdoctor_api::document::schema;
use kdoctor_api::task::TaskKind;
use kube::core::cel::{ScopeContext, WarningKind, analyze_rule, compile_schema};
use serde_json::Value;

#[test]
fn names_scope_and_subresources_match_upstream() {
    let expected = [
        ("netreaches.kdoctor.io", "NetReach", "netreach", Some("nr")),
        (
            "apphttphealthies.kdoctor.io",
            "AppHttpHealthy",
            "apphttphealthy",
            Some("ahh"),
        ),
        ("netdnses.kdoctor.io", "Netdns", "netdns", None),
    ];
    let all = crds();
    assert_eq!(all.len(), 3);
    for (crd, (name, kind, singular, short)) in all.iter().zip(expected) {
        assert_eq!(crd.metadata.name.as_deref(), Some(name));
        assert_eq!(crd.spec.group, "kdoctor.io");
        assert_eq!(crd.spec.scope, "Cluster");
        let names = &crd.spec.names;
        assert_eq!(names.kind, kind);
        assert_eq!(names.singular.as_deref(), Some(singular));
        assert_eq!(
            names.categories.as_deref(),
            Some(&["kdoctor".to_string()][..])
        );
        assert_eq!(
            names
                .short_names
                .as_ref()
                .and_then(|s| s.first())
                .map(String::as_str),
            short
        );
        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1beta1");
        assert!(version.served && version.storage);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }
}

#[test]
fn printer_columns_are_upstream_s_plus_age() {
    for crd in crds() {
        let columns: Vec<(String, String, String)> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
            .collect();
        let want = [
            ("finish", "boolean", ".status.finish"),
            ("expectedRound", "integer", ".status.expectedRound"),
            ("doneRound", "integer", ".status.doneRound"),
            ("lastRoundStatus", "string", ".status.lastRoundStatus"),
            ("schedule", "string", ".spec.schedule.schedule"),
            ("age", "date", ".metadata.creationTimestamp"),
        ];
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(columns, want, "{:?}", crd.metadata.name);
    }
}

/// The rules of a structural schema (Kubernetes' apiextensions validation): every node has a
/// type unless it is int-or-string or preserves unknown fields; logical junctors carry no
/// types, defaults or descriptions; no references; defaults fit their own schema.
fn structural_problems(node: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(map) = node.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    if map.contains_key("$ref") {
        problems.push(format!("{path}: $ref is not allowed"));
    }
    let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !map.contains_key("type") && !int_or_string && !preserve {
        problems.push(format!("{path}: no type"));
    }
    if map.contains_key("properties")
        && map
            .get("additionalProperties")
            .is_some_and(|a| a != &Value::Bool(false))
    {
        problems.push(format!(
            "{path}: properties and additionalProperties together"
        ));
    }
    for junctor in ["allOf", "anyOf", "oneOf", "not"] {
        let branches: Vec<&Value> = match map.get(junctor) {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(other) => vec![other],
            None => vec![],
        };
        for branch in branches {
            for forbidden in [
                "type",
                "default",
                "description",
                "nullable",
                "additionalProperties",
            ] {
                if branch.get(forbidden).is_some() {
                    problems.push(format!("{path}.{junctor}: {forbidden} inside a junctor"));
                }
            }
        }
    }
    if let Some(default) = map.get("default")
        && let Some(ty) = map.get("type").and_then(Value::as_str)
    {
        let fits = match ty {
            "boolean" => default.is_boolean(),
            "integer" => default.is_i64(),
            "number" => default.is_number(),
            "string" => default.is_string(),
            "array" => default.is_array(),
            "object" => default.is_object(),
            _ => false,
        };
        let within = |k: &str, cmp: fn(f64, f64) -> bool| {
            map.get(k)
                .and_then(Value::as_f64)
                .is_none_or(|b| default.as_f64().is_none_or(|d| cmp(d, b)))
        };
        if !fits || !within("minimum", |d, b| d >= b) || !within("maximum", |d, b| d <= b) {
            problems.push(format!("{path}: default {default} does not fit the schema"));
        }
        if let Some(allowed) = map.get("enum").and_then(Value::as_array)
            && !allowed.contains(default)
        {
            problems.push(format!("{path}: default {default} is not one of the enum"));
        }
    }
    if let Some(Value::Object(properties)) = map.get("properties") {
        for (name, child) in properties {
            structural_problems(child, &format!("{path}.{name}"), problems);
        }
    }
    if let Some(items) = map.get("items") {
        structural_problems(items, &format!("{path}[]"), problems);
    }
    if let Some(additional @ Value::Object(_)) = map.get("additionalProperties") {
        structural_problems(additional, &format!("{path}{{}}"), problems);
    }
}

#[test]
fn schemas_are_structural() {
    for kind in TaskKind::ALL {
        let mut problems = Vec::new();
        structural_problems(schema(kind), kind.as_str(), &mut problems);
        assert!(problems.is_empty(), "{kind}: {problems:#?}");
        // metadata is left to the API server, spec is required.
        let root = schema(kind);
        assert_eq!(root["type"], "object");
        assert!(
            root["required"]
                .as_array()
                .is_some_and(|r| r.contains(&Value::from("spec")))
        );
    }
}

/// Every `x-kubernetes-validations` rule with the schema node it sits on.
fn rules(node: &Value, out: &mut Vec<(String, Value)>) {
    if let Some(list) = node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in list {
            out.push((
                rule["rule"].as_str().unwrap_or_default().to_string(),
                node.clone(),
            ));
        }
    }
    for key in ["properties"] {
        if let Some(Value::Object(children)) = node.get(key) {
            children.values().for_each(|c| rules(c, out));
        }
    }
    if let Some(items) = node.get("items") {
        rules(items, out);
    }
}

/// Whether the variable a scope warning names is bound by a macro of the rule.
fn binds_macro_variable(rule: &str, message: &str) -> bool {
    let Some(var) = message.split('\'').nth(1) else {
        return false;
    };
    ["all", "exists", "exists_one", "map", "filter"]
        .iter()
        .any(|m| rule.contains(&format!("{m}({var},")))
}

#[test]
fn every_cel_rule_compiles_within_the_cost_budget() {
    let mut total = 0;
    for kind in TaskKind::ALL {
        let compiled = compile_schema(schema(kind));
        let errors: Vec<String> = compiled
            .compilation_errors()
            .iter()
            .map(|e| format!("{e:?}"))
            .collect();
        assert!(errors.is_empty(), "{kind}: {errors:#?}");
        let mut found = Vec::new();
        rules(schema(kind), &mut found);
        for (rule, node) in &found {
            let node_compiled = compile_schema(node);
            let warnings: Vec<_> = analyze_rule(rule, &node_compiled, ScopeContext::CrdValidation)
                .into_iter()
                .filter(|w| match w.kind {
                    WarningKind::CostExceeded => true,
                    // kube-cel's scope check does not know macro-bound variables (`h` in
                    // `self.all(h, ...)`): only report variables that no macro binds.
                    WarningKind::WrongScope => !binds_macro_variable(rule, &w.message),
                    _ => false,
                })
                .collect();
            assert!(warnings.is_empty(), "{kind}: {rule}: {warnings:?}");
        }
        total += found.len();
    }
    // Cross-field rules exist for every kind (immutability, round window, name, blocks).
    assert!(total >= 30, "only {total} CEL rules found");
}

#[test]
fn crds_survive_a_round_trip_through_yaml() {
    for kind in TaskKind::ALL {
        let original = crd(kind);
        let text = serde_yaml_ng::to_string(&original).expect("serializes");
        let back: CustomResourceDefinition = serde_yaml_ng::from_str(&text).expect("deserializes");
        assert_eq!(back, original);
    }
}

/// Every rule's fieldPath with the schema node the rule sits on.
fn field_paths(node: &Value, out: &mut Vec<(String, Value)>) {
    if let Some(list) = node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in list {
            if let Some(path) = rule.get("fieldPath").and_then(Value::as_str) {
                out.push((path.to_string(), node.clone()));
            }
        }
    }
    if let Some(Value::Object(children)) = node.get("properties") {
        children.values().for_each(|c| field_paths(c, out));
    }
    if let Some(items) = node.get("items") {
        field_paths(items, out);
    }
}

/// The API server refuses a CRD whose rule names a fieldPath its schema does not declare.
#[test]
fn every_field_path_names_a_declared_property() {
    for kind in TaskKind::ALL {
        let mut found = Vec::new();
        field_paths(schema(kind), &mut found);
        assert!(!found.is_empty());
        for (path, node) in found {
            let mut at = &node;
            for segment in path.trim_start_matches('.').split('.') {
                at = at
                    .get("properties")
                    .and_then(|p| p.get(segment))
                    .unwrap_or_else(|| panic!("{kind}: fieldPath {path} does not resolve"));
            }
        }
    }
}

/// Every value under `key` anywhere in the schema, with where it was found.
fn keyed(node: &Value, key: &str, path: &str, out: &mut Vec<(String, Value)>) {
    match node {
        Value::Object(map) => {
            for (k, value) in map {
                if k == key && !value.is_object() {
                    out.push((path.to_string(), value.clone()));
                } else {
                    keyed(value, key, &format!("{path}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                keyed(item, key, &format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// kube-apiserver warns on every apply of a CRD whose schema names a format it does not know
/// (v1.37: `unrecognized format "uint32"`, which schemars gives Rust's u32): the formats of
/// k8s.io/kube-openapi's registry and the OpenAPI number formats, and nothing else.
#[test]
fn every_format_is_one_kube_apiserver_recognizes() {
    const KNOWN: [&str; 29] = [
        "int32",
        "int64",
        "float",
        "double",
        "byte",
        "password",
        "date",
        "date-time",
        "datetime",
        "duration",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "bsonobjectid",
    ];
    for crd in crds() {
        let json = serde_json::to_value(&crd).expect("json");
        let mut found = Vec::new();
        keyed(&json, "format", "", &mut found);
        assert!(
            !found.is_empty(),
            "no format at all: the walk found nothing"
        );
        let unknown: Vec<_> = found
            .iter()
            .filter(|(_, f)| !f.as_str().is_some_and(|f| KNOWN.contains(&f)))
            .collect();
        assert!(
            unknown.is_empty(),
            "{}: formats kube-apiserver does not recognize: {unknown:?}",
            crd.metadata.name.unwrap_or_default()
        );
    }
}

/// kube-apiserver checks an integer value against a bound truncated to an integer
/// (kube-openapi's `MinimumNativeType`), so `maxJitterInMs: 0` passed a minimum of 0.001:
/// every bound is a whole number, and a field that must be above zero says so with
/// `exclusiveMinimum`.
#[test]
fn every_numeric_bound_is_whole_because_the_apiserver_truncates_it() {
    for crd in crds() {
        let json = serde_json::to_value(&crd).expect("json");
        let mut bounds = Vec::new();
        keyed(&json, "minimum", "", &mut bounds);
        keyed(&json, "maximum", "", &mut bounds);
        assert!(
            !bounds.is_empty(),
            "no bound at all: the walk found nothing"
        );
        let fractional: Vec<_> = bounds
            .iter()
            .filter(|(_, b)| b.as_f64().is_none_or(|b| b.fract() != 0.0))
            .collect();
        assert!(
            fractional.is_empty(),
            "{}: bounds the apiserver would truncate: {fractional:?}",
            crd.metadata.name.unwrap_or_default()
        );
    }
}
