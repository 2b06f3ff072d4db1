//! Request dispatch: paths to discovery, OpenAPI, reviews and resource verbs; content
//! negotiation (JSON, YAML bodies, Table, aggregated discovery with ETag); Status errors.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::cluster::{DeleteOptions, WriteOptions, parse_propagation};
use crate::error::{ApiError, ApiResult};
use crate::patch::PatchType;
use crate::rbac;
use crate::resources::ResourceInfo;
use crate::reviews::UserInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::query::Query;
use crate::server::{App, discovery, identity, openapi, table, watch};

const MAX_BODY: usize = 64 << 20;

fn json_response(code: u16, v: &Value) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn error_response(e: &ApiError) -> Response {
    let mut r = json_response(e.code, &e.to_status());
    if let Some(s) = e.details.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> &str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// The request's target after path parsing.
#[derive(Debug, PartialEq)]
enum Target {
    Version,
    Health,
    Api,
    Apis,
    Group(String),
    GroupVersion(String, String),
    OpenApiIndex,
    OpenApiDoc(String, String),
    Resource {
        group: String,
        version: String,
        namespace: Option<String>,
        plural: String,
        name: Option<String>,
        subresource: Option<String>,
    },
    Unknown,
}

fn parse_path(path: &str) -> Target {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Target::Version,
        ["healthz" | "livez" | "readyz", ..] => return Target::Health,
        ["api"] => return Target::Api,
        ["apis"] => return Target::Apis,
        ["apis", g] => return Target::Group(g.to_string()),
        ["openapi", "v3"] => return Target::OpenApiIndex,
        ["openapi", "v3", "api", v] => return Target::OpenApiDoc(String::new(), v.to_string()),
        ["openapi", "v3", "apis", g, v] => return Target::OpenApiDoc(g.to_string(), v.to_string()),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Target::Unknown,
    };
    let s = |x: &str| x.to_string();
    let (namespace, rest): (Option<String>, &[&str]) = match rest {
        [] => return Target::GroupVersion(s(group), s(version)),
        ["namespaces", ns, r, tail @ ..]
            if !(tail.is_empty() && matches!(*r, "status" | "finalize")) =>
        {
            (Some(s(ns)), &rest[2..])
        }
        _ => (None, rest),
    };
    match rest {
        [plural] => Target::Resource {
            group: s(group),
            version: s(version),
            namespace,
            plural: s(plural),
            name: None,
            subresource: None,
        },
        [plural, name] => Target::Resource {
            group: s(group),
            version: s(version),
            namespace,
            plural: s(plural),
            name: Some(s(name)),
            subresource: None,
        },
        [plural, name, sub] => Target::Resource {
            group: s(group),
            version: s(version),
            namespace,
            plural: s(plural),
            name: Some(s(name)),
            subresource: Some(s(sub)),
        },
        _ => Target::Unknown,
    }
}

/// The single handler behind every path.
pub async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = Query::parse(parts.uri.query());
    let target = parse_path(&path);
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => return error_response(&ApiError::bad_request(format!("reading body: {e}"))),
    };
    tracing::debug!(method = %parts.method, path = %path, query = ?parts.uri.query(), "request");
    let user = identity::authenticate(
        &app.cluster.reviews,
        parts.extensions.get::<identity::PeerIdentity>(),
        &parts.headers,
    );
    if app.rbac {
        let Some(u) = &user else {
            return error_response(&ApiError::unauthorized());
        };
        if let Err(e) = authorize(&app, u, &parts.method, &target, &path, &query) {
            return error_response(&e);
        }
    }
    let user = user.unwrap_or_else(|| {
        UserInfo::new(
            "kube-sim-admin",
            &["system:masters", "system:authenticated"],
        )
    });
    let (resource, named) = match &target {
        Target::Resource {
            plural,
            name,
            subresource,
            ..
        } => (
            match subresource {
                Some(sub) => format!("{plural}/{sub}"),
                None => plural.clone(),
            },
            name.is_some(),
        ),
        _ => (path.clone(), true),
    };
    app.cluster.requests.record(crate::requests::RequestKey {
        user: user.username.clone(),
        verb: crate::requests::verb(
            parts.method.as_str(),
            named,
            matches!(query.get("watch"), Some("true" | "1")),
        )
        .to_string(),
        resource,
    });
    if let Some(remote) = remote_of(&app, &target) {
        let pq = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or(path.clone());
        let agg = &app.aggregator;
        return match crate::aggregator::proxy::forward(
            &remote.target,
            &agg.front_proxy,
            &user,
            &parts.method,
            &pq,
            &parts.headers,
            body,
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, apiservice = %remote.apiservice, "aggregated request failed");
                crate::aggregator::proxy::unavailable()
            }
        };
    }
    let result = route(
        &app,
        &parts.method,
        &parts.headers,
        target,
        &query,
        &body,
        &user,
    )
    .await;
    match result {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn discovery_response(headers: &HeaderMap, v: &Value, content_type: &str) -> Response {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    let etag = format!("\"{}\"", openapi::hash(&bytes));
    if header_str(headers, header::IF_NONE_MATCH) == etag {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        if let Ok(v) = HeaderValue::from_str(&etag) {
            r.headers_mut().insert(header::ETAG, v);
        }
        return r;
    }
    let mut r = Response::new(Body::from(bytes));
    if let Ok(ct) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    r
}

/// The aggregated API serving this request, if any.
fn remote_of(app: &App, target: &Target) -> Option<crate::aggregator::Remote> {
    match target {
        Target::Resource { group, version, .. }
        | Target::GroupVersion(group, version)
        | Target::OpenApiDoc(group, version)
            if !group.is_empty() =>
        {
            app.aggregator.lookup(group, version)
        }
        _ => None,
    }
}

/// Adds the aggregated groups to a legacy `APIGroupList`.
fn merge_remote_groups(app: &App, doc: &mut Value) {
    let Some(groups) = doc.get_mut("groups").and_then(Value::as_array_mut) else {
        return;
    };
    for ((g, v), _) in app.aggregator.all() {
        let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
        match groups.iter_mut().find(|x| x["name"] == g.as_str()) {
            Some(existing) => {
                if let Some(vs) = existing.get_mut("versions").and_then(Value::as_array_mut) {
                    vs.push(gv);
                }
            }
            None => groups.push(json!({"name": g, "versions": [gv], "preferredVersion": gv})),
        }
    }
}

/// Adds the aggregated groups to an `APIGroupDiscoveryList`.
fn merge_remote_aggregated(app: &App, doc: &mut Value) {
    let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) else {
        return;
    };
    for ((g, v), remote) in app.aggregator.all() {
        let entry = crate::aggregator::aggregated_version(&v, &remote.resources);
        match items
            .iter_mut()
            .find(|x| x.pointer("/metadata/name") == Some(&json!(g)))
        {
            Some(existing) => {
                if let Some(vs) = existing.get_mut("versions").and_then(Value::as_array_mut) {
                    vs.push(entry);
                }
            }
            None => items.push(
                json!({"metadata": {"name": g, "creationTimestamp": null}, "versions": [entry]}),
            ),
        }
    }
}

/// RBAC check of one request (`SimConfig::rbac`).
fn authorize(
    app: &App,
    user: &UserInfo,
    method: &Method,
    target: &Target,
    path: &str,
    query: &Query,
) -> ApiResult<()> {
    let attrs = match target {
        Target::Resource {
            group,
            namespace,
            plural,
            name,
            subresource,
            ..
        } => {
            let verb = match (method.as_str(), name.is_some()) {
                ("GET" | "HEAD", true) => "get",
                ("GET" | "HEAD", false) if query.flag("watch") => "watch",
                ("GET" | "HEAD", false) => "list",
                ("POST", _) => "create",
                ("PUT", _) => "update",
                ("PATCH", _) => "patch",
                ("DELETE", true) => "delete",
                ("DELETE", false) => "deletecollection",
                (other, _) => {
                    return Err(ApiError::bad_request(format!("unsupported method {other}")));
                }
            };
            // A namespace object is addressed by its name, its RBAC namespace is itself.
            let ns = match (namespace, group.is_empty() && plural == "namespaces") {
                (Some(ns), _) => ns.clone(),
                (None, true) => name.clone().unwrap_or_default(),
                (None, false) => String::new(),
            };
            rbac::Attributes {
                verb: verb.into(),
                api_group: group.clone(),
                resource: plural.clone(),
                subresource: subresource.clone().unwrap_or_default(),
                namespace: ns,
                // As kube-apiserver: a list or watch of one object by `metadata.name` field
                // selector is authorized for that name (resourceNames rules apply).
                name: name.clone().unwrap_or_else(|| {
                    query
                        .get("fieldSelector")
                        .and_then(|f| {
                            f.strip_prefix("metadata.name==")
                                .or_else(|| f.strip_prefix("metadata.name="))
                        })
                        .filter(|n| !n.contains(','))
                        .unwrap_or_default()
                        .to_string()
                }),
                path: None,
            }
        }
        _ => rbac::Attributes {
            verb: method.as_str().to_lowercase(),
            path: Some(path.to_string()),
            ..Default::default()
        },
    };
    if rbac::allowed(&app.cluster, user, &attrs) {
        Ok(())
    } else {
        let mut e = ApiError::forbidden(rbac::forbidden_message(user, &attrs));
        if attrs.path.is_none() {
            e.details.name = (!attrs.name.is_empty()).then(|| attrs.name.clone());
            e.details.group = (!attrs.api_group.is_empty()).then(|| attrs.api_group.clone());
            e.details.kind = Some(attrs.resource.clone());
        }
        Err(e)
    }
}

#[allow(clippy::too_many_arguments)]
async fn route(
    app: &Arc<App>,
    method: &Method,
    headers: &HeaderMap,
    target: Target,
    query: &Query,
    body: &[u8],
    user: &UserInfo,
) -> ApiResult<Response> {
    let cat = &app.cluster.catalogue;
    let accept = header_str(headers, header::ACCEPT);
    match target {
        Target::Version => Ok(json_response(200, &app.version)),
        Target::Health => {
            let mut r = Response::new(Body::from("ok"));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            Ok(r)
        }
        Target::Api | Target::Apis => {
            let core = target == Target::Api;
            match discovery::negotiate(accept) {
                Some(fmt) => {
                    let mut doc = discovery::aggregated(cat, core, fmt);
                    if !core {
                        merge_remote_aggregated(app, &mut doc);
                    }
                    Ok(discovery_response(headers, &doc, &fmt.content_type()))
                }
                None if core => Ok(json_response(200, &discovery::api_versions())),
                None => {
                    let mut doc = discovery::group_list(cat);
                    merge_remote_groups(app, &mut doc);
                    Ok(discovery_response(headers, &doc, "application/json"))
                }
            }
        }
        Target::Group(g) => {
            let mut list = discovery::group_list(cat);
            merge_remote_groups(app, &mut list);
            list.get("groups")
                .and_then(Value::as_array)
                .and_then(|gs| gs.iter().find(|x| x["name"] == g.as_str()))
                .map(|found| {
                    let mut v = found.clone();
                    v["kind"] = json!("APIGroup");
                    v["apiVersion"] = json!("v1");
                    json_response(200, &v)
                })
                .ok_or_else(ApiError::path_not_found)
        }
        Target::GroupVersion(g, v) => discovery::resource_list(cat, &g, &v)
            .map(|doc| json_response(200, &doc))
            .ok_or_else(ApiError::path_not_found),
        Target::OpenApiIndex => {
            let mut index = openapi::index(cat);
            for ((g, v), _) in app.aggregator.all() {
                let key = openapi::index_key(&g, &v);
                index["paths"][&key] = json!({"serverRelativeURL": format!("/openapi/v3/{key}")});
            }
            Ok(json_response(200, &index))
        }
        Target::OpenApiDoc(g, v) => {
            let doc = openapi::document(cat, &g, &v).ok_or_else(ApiError::path_not_found)?;
            let mut r = json_response(200, &doc);
            r.headers_mut()
                .insert(header::VARY, HeaderValue::from_static("Accept"));
            Ok(r)
        }
        Target::Unknown => Err(ApiError::path_not_found()),
        Target::Resource {
            group,
            version,
            namespace,
            plural,
            name,
            subresource,
        } => {
            let info = cat
                .lookup(&group, &version, &plural)
                .ok_or_else(ApiError::path_not_found)?;
            if info.namespaced && namespace.is_none() && name.is_some() {
                return Err(ApiError::path_not_found());
            }
            if !info.namespaced && namespace.is_some() {
                return Err(ApiError::path_not_found());
            }
            let ns = namespace.unwrap_or_default();
            resource(
                app,
                method,
                headers,
                &info,
                &ns,
                name,
                subresource,
                query,
                body,
                user,
            )
            .await
        }
    }
}

fn parse_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    let ct = header_str(headers, header::CONTENT_TYPE);
    if ct.contains("protobuf") {
        return crate::server::protobuf::decode_object(body)
            .ok_or_else(|| ApiError::unsupported_media_type(ct));
    }
    if ct.contains("yaml") {
        return serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

fn write_options(headers: &HeaderMap, query: &Query, sub: Option<String>) -> WriteOptions {
    let ua = header_str(headers, header::USER_AGENT);
    // As the real server: without fieldManager the manager is the user agent up to the first '/'.
    let default_manager = ua
        .split('/')
        .next()
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().take(128).collect::<String>());
    WriteOptions {
        field_manager: query
            .get("fieldManager")
            .map(String::from)
            .or(default_manager),
        dry_run: query.get("dryRun") == Some("All"),
        force: query.flag("force"),
        subresource: sub,
    }
}

fn selectors(info: &ResourceInfo, query: &Query) -> ApiResult<(LabelSelector, FieldSelector)> {
    Ok((
        LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?,
        FieldSelector::parse(query.get("fieldSelector").unwrap_or(""), info)?,
    ))
}

fn object_response(
    headers: &HeaderMap,
    query: &Query,
    info: &ResourceInfo,
    obj: Value,
    code: u16,
) -> Response {
    let accept = header_str(headers, header::ACCEPT);
    if table::wants_table(accept) {
        let include = query.get("includeObject").unwrap_or("Metadata");
        return json_response(code, &table::table(info, &[obj], None, true, include));
    }
    json_response(code, &obj)
}

fn scale_of(info: &ResourceInfo, obj: &Value) -> Value {
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let meta = obj.get("metadata").cloned().unwrap_or(json!({}));
    let _ = info;
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {
            "replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector,
        },
    })
}

/// Answers a (Self)SubjectAccessReview with RBAC.
fn rbac_review(app: &App, mut review: Value, me: Option<&UserInfo>) -> Value {
    let mut spec = review.get("spec").cloned().unwrap_or(json!({}));
    if let Some(u) = me {
        spec["user"] = json!(u.username);
        spec["groups"] = json!(u.groups);
    }
    let user = UserInfo {
        username: spec
            .get("user")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        groups: spec
            .get("groups")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        ..Default::default()
    };
    let attrs = rbac::attributes_of_review(&spec);
    let ok = rbac::allowed(&app.cluster, &user, &attrs);
    app.cluster.reviews.record_sar(spec);
    review["status"] = if ok {
        json!({"allowed": true, "reason": "allowed by RBAC"})
    } else {
        json!({"allowed": false})
    };
    review
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    app: &Arc<App>,
    method: &Method,
    headers: &HeaderMap,
    info: &Arc<ResourceInfo>,
    ns: &str,
    name: Option<String>,
    sub: Option<String>,
    query: &Query,
    body: &[u8],
    user: &UserInfo,
) -> ApiResult<Response> {
    let c = &app.cluster;
    if info.virtual_kind {
        if *method != Method::POST || name.is_some() {
            return Err(ApiError::method_not_allowed(
                &method.as_str().to_lowercase(),
                info,
            ));
        }
        let review = parse_body(headers, body)?;
        let answer = match info.kind.as_str() {
            "TokenReview" => c.reviews.token_review(review)?,
            "SelfSubjectAccessReview" if app.rbac => rbac_review(app, review, Some(user)),
            "SelfSubjectAccessReview" => {
                // Without RBAC nothing is enforced, so the honest answer is yes.
                let mut r = review;
                r["status"] = json!({"allowed": true, "reason": "kube-sim without RBAC allows every request"});
                r
            }
            _ if app.rbac
                && c.reviews
                    .table_decision(review.get("spec").unwrap_or(&Value::Null))
                    .is_none() =>
            {
                rbac_review(app, review, None)
            }
            _ => c.reviews.subject_access_review(review, None)?,
        };
        let mut answer = answer;
        answer["apiVersion"] = json!(info.api_version());
        answer["kind"] = json!(info.kind);
        return Ok(json_response(201, &answer));
    }
    if let Some(s) = &sub
        && !info.has_subresource(s)
    {
        return Err(ApiError::path_not_found());
    }
    match (method.clone(), name, sub) {
        (Method::GET, None, None) => {
            let (labels, fields) = selectors(info, query)?;
            if query.flag("watch") {
                let timeout = query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse::<u64>().ok())
                    .map(Duration::from_secs)
                    .unwrap_or(Duration::from_secs(1800));
                let accept = header_str(headers, header::ACCEPT);
                let req = watch::WatchRequest {
                    info: info.clone(),
                    namespace: (!ns.is_empty()).then(|| ns.to_string()),
                    labels,
                    fields,
                    resource_version: query.get("resourceVersion").map(String::from),
                    bookmarks: query.flag("allowWatchBookmarks"),
                    send_initial: query.flag("sendInitialEvents"),
                    timeout,
                    table: table::wants_table(accept)
                        .then(|| query.get("includeObject").unwrap_or("Metadata").to_string()),
                    bookmark_interval: app.bookmark_interval,
                };
                let rx = watch::start(c.clone(), req, app.shutdown.clone());
                let mut r = Response::new(Body::from_stream(rx));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                r.headers_mut().insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("no-cache, private"),
                );
                return Ok(r);
            }
            list(app, headers, info, ns, query, labels, fields)
        }
        (Method::GET, Some(name), None) => {
            let obj = c.get(info, ns, &name)?;
            Ok(object_response(headers, query, info, obj, 200))
        }
        (Method::GET, Some(name), Some(s)) if s == "status" => {
            let obj = c.get(info, ns, &name)?;
            Ok(json_response(200, &obj))
        }
        (Method::GET, Some(name), Some(s)) if s == "log" => {
            c.get(info, ns, &name)?;
            let text = app
                .logs_dir
                .as_ref()
                .and_then(|d| {
                    std::fs::read_to_string(crate::runner::process::log_path(d, ns, &name)).ok()
                })
                .unwrap_or_default();
            let mut r = Response::new(Body::from(text));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            Ok(r)
        }
        (_, Some(_), Some(s)) if s == "log" => Err(ApiError::method_not_allowed(
            &method.as_str().to_lowercase(),
            info,
        )),
        (Method::GET, Some(name), Some(s)) if s == "scale" => {
            let obj = c.get(info, ns, &name)?;
            Ok(json_response(200, &scale_of(info, &obj)))
        }
        (Method::POST, None, None) => {
            let obj = parse_body(headers, body)?;
            let opts = write_options(headers, query, None);
            let created = c.create(info, ns, obj, &opts)?;
            Ok(json_response(201, &created))
        }
        (Method::PUT, Some(name), sub) => {
            let obj = parse_body(headers, body)?;
            match sub.as_deref() {
                Some("scale") => {
                    let replicas = obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
                    let patch = serde_json::to_vec(&json!({"spec": {"replicas": replicas}}))
                        .unwrap_or_default();
                    let opts = write_options(headers, query, None);
                    let updated = c.patch(info, ns, &name, PatchType::Merge, &patch, &opts)?;
                    Ok(json_response(200, &scale_of(info, &updated)))
                }
                Some("finalize") => {
                    let fins = obj
                        .pointer("/spec/finalizers")
                        .cloned()
                        .unwrap_or(json!([]));
                    let patch = serde_json::to_vec(&json!({"spec": {"finalizers": fins}}))
                        .unwrap_or_default();
                    let opts = write_options(headers, query, None);
                    let updated = c.patch(info, ns, &name, PatchType::Merge, &patch, &opts)?;
                    Ok(json_response(200, &updated))
                }
                _ => {
                    let opts = write_options(headers, query, sub);
                    let updated = c.update(info, ns, &name, obj, &opts)?;
                    Ok(json_response(200, &updated))
                }
            }
        }
        (Method::PATCH, Some(name), sub) => {
            let kind = PatchType::from_content_type(header_str(headers, header::CONTENT_TYPE))?;
            if sub.as_deref() == Some("scale") {
                let current = scale_of(info, &c.get(info, ns, &name)?);
                let patched = crate::patch::apply_patch(
                    if kind == PatchType::Apply {
                        PatchType::Merge
                    } else {
                        kind
                    },
                    &current,
                    body,
                )?;
                let replicas = patched
                    .pointer("/spec/replicas")
                    .cloned()
                    .unwrap_or(json!(0));
                let patch = serde_json::to_vec(&json!({"spec": {"replicas": replicas}}))
                    .unwrap_or_default();
                let opts = write_options(headers, query, None);
                let updated = c.patch(info, ns, &name, PatchType::Merge, &patch, &opts)?;
                return Ok(json_response(200, &scale_of(info, &updated)));
            }
            let mut opts = write_options(headers, query, sub);
            if kind == PatchType::Apply {
                opts.field_manager = query.get("fieldManager").map(String::from);
            }
            let was_absent = kind == PatchType::Apply && c.get(info, ns, &name).is_err();
            let patched = c.patch(info, ns, &name, kind, body, &opts)?;
            Ok(json_response(if was_absent { 201 } else { 200 }, &patched))
        }
        (Method::DELETE, Some(name), None) => {
            let opts = delete_options(query, body)?;
            let deleted = c.delete(info, ns, &name, &opts)?;
            Ok(json_response(200, &deleted))
        }
        (Method::DELETE, None, None) => {
            let (labels, fields) = selectors(info, query)?;
            let opts = delete_options(query, body)?;
            let (items, _) = c.list(info, (!ns.is_empty()).then_some(ns), &labels, &fields);
            let mut deleted = Vec::new();
            for item in items {
                let n = item
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let ins = item
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match c.delete(info, ins, n, &opts) {
                    Ok(v) => deleted.push(v),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(json_response(
                200,
                &json!({
                    "kind": info.list_kind(),
                    "apiVersion": info.api_version(),
                    "metadata": {"resourceVersion": c.store.rv().to_string()},
                    "items": deleted,
                }),
            ))
        }
        (m, _, _) => Err(ApiError::method_not_allowed(
            &m.as_str().to_lowercase(),
            info,
        )),
    }
}

fn delete_options(query: &Query, body: &[u8]) -> ApiResult<DeleteOptions> {
    let mut opts = if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
        DeleteOptions::from_body(&v)?
    };
    if let Some(p) = query.get("propagationPolicy") {
        opts.propagation = Some(parse_propagation(p)?);
    }
    if let Some(g) = query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()) {
        opts.grace_period = Some(g);
    }
    if query.get("dryRun") == Some("All") {
        opts.dry_run = true;
    }
    Ok(opts)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    start: String,
}

fn list(
    app: &App,
    headers: &HeaderMap,
    info: &ResourceInfo,
    ns: &str,
    query: &Query,
    labels: LabelSelector,
    fields: FieldSelector,
) -> ApiResult<Response> {
    let c = &app.cluster;
    let (mut items, mut rv) = c.list(info, (!ns.is_empty()).then_some(ns), &labels, &fields);
    let key = |o: &Value| {
        format!(
            "{}/{}",
            o.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or(""),
            o.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
        )
    };
    if let Some(token) = query.get("continue").filter(|t| !t.is_empty()) {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(token)
            .ok()
            .and_then(|b| serde_json::from_slice::<ContinueToken>(&b).ok())
            .ok_or_else(|| {
                ApiError::bad_request("continue key is not valid: invalid continue token")
            })?;
        if decoded.rv < c.store.compacted() {
            return Err(ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
            ));
        }
        items.retain(|o| key(o) > decoded.start);
        rv = decoded.rv;
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(limit) = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        && items.len() > limit
    {
        let remaining = items.len() - limit;
        items.truncate(limit);
        use base64::Engine;
        let last = items.last().map(&key).unwrap_or_default();
        let token = serde_json::to_vec(&ContinueToken { rv, start: last }).unwrap_or_default();
        meta["continue"] = json!(base64::engine::general_purpose::STANDARD.encode(token));
        if labels.is_empty() && fields.0.is_empty() {
            meta["remainingItemCount"] = json!(remaining);
        }
    }
    let accept = header_str(headers, header::ACCEPT);
    if table::wants_table(accept) {
        let include = query.get("includeObject").unwrap_or("Metadata");
        let mut t = table::table(info, &items, None, true, include);
        t["metadata"] = meta;
        return Ok(json_response(200, &t));
    }
    Ok(json_response(
        200,
        &json!({
            "kind": info.list_kind(),
            "apiVersion": info.api_version(),
            "metadata": meta,
            "items": items,
        }),
    ))
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_response(&self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_like_the_real_server() {
        assert_eq!(parse_path("/version"), Target::Version);
        assert_eq!(
            parse_path("/api/v1/namespaces/default"),
            Target::Resource {
                group: String::new(),
                version: "v1".into(),
                namespace: None,
                plural: "namespaces".into(),
                name: Some("default".into()),
                subresource: None
            }
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/x/finalize"),
            Target::Resource {
                group: String::new(),
                version: "v1".into(),
                namespace: None,
                plural: "namespaces".into(),
                name: Some("x".into()),
                subresource: Some("finalize".into())
            }
        );
        assert_eq!(
            parse_path("/apis/apps/v1/namespaces/d/deployments/x/scale"),
            Target::Resource {
                group: "apps".into(),
                version: "v1".into(),
                namespace: Some("d".into()),
                plural: "deployments".into(),
                name: Some("x".into()),
                subresource: Some("scale".into())
            }
        );
        assert_eq!(
            parse_path("/apis/apps/v1"),
            Target::GroupVersion("apps".into(), "v1".into())
        );
    }
}
