//! The `kdoctorreports` resource: list, get, watch and delete.

pub mod cache;
pub mod matrix;
pub mod names;
pub mod object;
pub mod table;
pub mod watch;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use kdoctor_api::report::protocol::Protocol;
use kdoctor_api::report::{API_VERSION, LIST_KIND};
use kdoctor_store::{Store, TaskSummary};
use serde::{Deserialize, Serialize};
use serde_json::json;

use self::cache::{ObjectCache, ObjectKey};
use self::names::{Target, listed, resolve};
use crate::kube::negotiate::{
    ObjectView, Reading, Wanted, accepts_gzip, negotiate, negotiate_object,
};
use crate::kube::partial::{self, PartialObject};
use crate::kube::query::Query;
use crate::kube::response::json_response;
use crate::kube::selectors::{FieldSelector, LabelSelector};
use crate::kube::sink;
use crate::kube::status::ApiError;
use crate::kube::table::Include;
use crate::state::AppState;

/// The selectors of a list or watch.
pub struct Filter {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
}

impl Filter {
    /// Reads both selectors.
    pub fn from_query(query: &Query) -> Result<Filter, ApiError> {
        Ok(Filter {
            labels: LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?,
            fields: FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))?,
        })
    }

    /// Whether the object of `task` listed as `name` is selected.
    pub fn matches(
        &self,
        name: &str,
        task: &TaskSummary,
        round_result: Option<kdoctor_store::RoundResult>,
    ) -> bool {
        self.fields.matches(name)
            && (self.labels.is_empty()
                || self.labels.matches(&object::labels_of(task, round_result)))
    }
}

/// Continue token: where the previous page stopped, and the version it was listed at.
#[derive(Serialize, Deserialize)]
struct ContinueToken {
    rv: u64,
    after: String,
}

/// `GET …/kdoctorreports`: list, or watch with `watch=true`.
pub async fn list(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let query = Query::parse(raw.as_deref());
    let watching = query.flag("watch")?;
    let wanted = negotiate(&headers, Reading::collection(watching))?;
    let filter = Filter::from_query(&query)?;
    let include = Include::parse(query.get("includeObject"))?;
    if watching {
        return watch::watch(state, query, filter, wanted, include).await;
    }
    let store = state.store()?;
    crate::consistency::await_version(&state, &store, &query).await?;
    let limit = query
        .number("limit")?
        .filter(|l| *l > 0)
        .map(|l| l as usize);
    let token = match query.get("continue").filter(|t| !t.is_empty()) {
        Some(text) => Some(decode_token(&store, text)?),
        None => None,
    };
    tokio::task::spawn_blocking(move || -> Result<Response, ApiError> {
        let (tasks, rv) = store.tasks_at();
        let mut objects: Vec<(String, TaskSummary)> = listed(tasks)
            .into_iter()
            .filter(|(name, _)| {
                token
                    .as_ref()
                    .is_none_or(|t| name.as_str() > t.after.as_str())
            })
            .filter(|(name, task)| filter.matches(name, task, task.latest_result))
            .collect();
        let remaining = limit
            .and_then(|l| objects.len().checked_sub(l))
            .filter(|r| *r > 0);
        if let Some(l) = limit {
            objects.truncate(l);
        }
        let next = remaining.and_then(|_| objects.last()).map(|(name, _)| {
            let list_rv = token.as_ref().map_or(rv, |t| t.rv);
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
                serde_json::to_vec(&ContinueToken {
                    rv: list_rv,
                    after: name.clone(),
                })
                .unwrap_or_default(),
            )
        });
        let targets: Vec<Target> = objects
            .into_iter()
            .map(|(name, task)| Target {
                task,
                name,
                round: None,
            })
            .collect();
        match wanted {
            Wanted::Table => {
                let now = jiff::Timestamp::now();
                let head = table::table_head(rv, next.as_deref(), remaining);
                let body = sink::stream(move |sink| {
                    sink.write(&head)?;
                    let (mut text, mut row) = (object::MetadataText::default(), Vec::new());
                    for (i, target) in targets.iter().enumerate() {
                        row.clear();
                        if i > 0 {
                            row.push(b',');
                        }
                        table::write_row(&store, target, include, now, &mut text, &mut row)?;
                        sink.write(&row)?;
                    }
                    sink.write(b"]}")
                });
                Ok(json_response(body))
            }
            Wanted::Metadata(version) => {
                let mut texts: Vec<object::MetadataText> =
                    targets.iter().map(|_| Default::default()).collect();
                let items = targets
                    .iter()
                    .zip(texts.iter_mut())
                    .map(|(t, text)| {
                        Ok(PartialObject::new(
                            version,
                            object::metadata_of(&store, t, text)?,
                        ))
                    })
                    .collect::<Result<Vec<_>, ApiError>>()?;
                let list = json!({
                    "apiVersion": version.api_version(),
                    "kind": partial::LIST_KIND,
                    "metadata": list_metadata(rv, next, remaining),
                    "items": items,
                });
                Ok(json_response(Body::from(
                    serde_json::to_vec(&list).map_err(|e| ApiError::internal(e.to_string()))?,
                )))
            }
            Wanted::Json => {
                let metadata = list_metadata(rv, next, remaining);
                let head =
                    json!({"apiVersion": API_VERSION, "kind": LIST_KIND, "metadata": metadata});
                let body = sink::stream(move |sink| {
                    let mut text =
                        serde_json::to_vec(&head).map_err(|e| ApiError::internal(e.to_string()))?;
                    text.pop();
                    sink.write(&text)?;
                    sink.write(b",\"items\":[")?;
                    for (i, target) in targets.iter().enumerate() {
                        if i > 0 {
                            sink.write(b",")?;
                        }
                        object::write_object(&store, target, sink)?;
                    }
                    sink.write(b"]}")
                });
                Ok(json_response(body))
            }
        }
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
}

/// A list's metadata: its version, and where the next page starts.
fn list_metadata(rv: u64, next: Option<String>, remaining: Option<usize>) -> serde_json::Value {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(token) = next {
        metadata["continue"] = json!(token);
    }
    if let Some(r) = remaining {
        metadata["remainingItemCount"] = json!(r);
    }
    metadata
}

fn decode_token(store: &Store, text: &str) -> Result<ContinueToken, ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {text:?}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| bad())?;
    let token: ContinueToken = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    // As the Go server after compaction: a token from before the oldest kept change is expired.
    if store.subscribe(Some(token.rv)).is_err() {
        return Err(ApiError::expired(
            "The provided continue parameter is too old to display a consistent list result. You can start a new \
             list without the continue parameter, or use the continue token in this response to retrieve the \
             remainder of the results. Continuing with the provided token results in an inconsistent list - objects \
             that were created, modified, or deleted between the time the first chunk was returned and now may show \
             up in the list.",
        ));
    }
    Ok(token)
}

/// `GET …/kdoctorreports/{name}`.
pub async fn get(
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    // The headers moved out of the request: the `HeaderMap` extractor would clone them.
    let headers = request.into_parts().0.headers;
    let query = Query::parse(raw.as_deref());
    let wanted = match negotiate_object(&headers)? {
        ObjectView::Plain(wanted) => wanted,
        ObjectView::Matrix => {
            let protocol = match query.get("protocol") {
                None => Protocol::Http,
                Some(text) => text
                    .parse()
                    .map_err(|e: String| ApiError::bad_request(format!("protocol: {e}")))?,
            };
            let cells = matrix::Cells::parse(query.get(kdoctor_api::matrix::CELLS_QUERY))?;
            let store = state.store()?;
            return tokio::task::spawn_blocking(move || -> Result<Response, ApiError> {
                let target = resolve(&store, &name).ok_or_else(|| ApiError::not_found(&name))?;
                Ok(json_response(Body::from(matrix::matrix_json(
                    &store, &target, protocol, cells,
                )?)))
            })
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        }
    };
    let include = Include::parse(query.get("includeObject"))?;
    let store = state.store()?;
    crate::consistency::await_version(&state, &store, &query).await?;
    let objects = state.objects.clone();
    let gzip = accepts_gzip(&headers);
    // A cached object is served without leaving the async thread: resolving a name that selects
    // no round reads only the store's in-memory index.
    if wanted == Wanted::Json
        && !name.contains(names::ROUND_SUFFIX)
        && let Some(target) = resolve(&store, &name)
    {
        let key = ObjectKey::of(&target, store.generation());
        let hit = if gzip {
            objects.get(&key.gzipped()).map(gzip_response)
        } else {
            objects.get(&key).map(|b| json_response(Body::from(b)))
        };
        if let Some(response) = hit {
            return Ok(response);
        }
    }
    tokio::task::spawn_blocking(move || -> Result<Response, ApiError> {
        let target = resolve(&store, &name).ok_or_else(|| ApiError::not_found(&name))?;
        match wanted {
            Wanted::Table => {
                let row = table::row(&store, &target, include, jiff::Timestamp::now())?;
                let body = table::table(vec![row], target.task.resource_version, None, true);
                Ok(json_response(Body::from(
                    serde_json::to_vec(&body).unwrap_or_default(),
                )))
            }
            Wanted::Metadata(version) => {
                let mut text = object::MetadataText::default();
                let partial =
                    PartialObject::new(version, object::metadata_of(&store, &target, &mut text)?);
                Ok(json_response(Body::from(
                    serde_json::to_vec(&partial).map_err(|e| ApiError::internal(e.to_string()))?,
                )))
            }
            Wanted::Json => Ok(json_get(&objects, store, target, gzip)),
        }
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
}

/// Bodies smaller than this are not worth a gzip variant (the compression layer still decides
/// for the stream).
const GZIP_MIN: usize = 1024;

/// The JSON of one object: from the cache when it has it (gzip-encoded for a client that takes
/// it, compressed once per version), else streamed from the store and kept.
fn json_get(objects: &Arc<ObjectCache>, store: Arc<Store>, target: Target, gzip: bool) -> Response {
    let key = ObjectKey::of(&target, store.generation());
    if gzip && let Some(bytes) = objects.get(&key.gzipped()) {
        return gzip_response(bytes);
    }
    if let Some(bytes) = objects.get(&key) {
        if gzip && bytes.len() >= GZIP_MIN {
            match cache::gzip(&bytes) {
                Ok(encoded) => {
                    objects.count_encoding();
                    objects.insert(key.gzipped(), encoded.clone());
                    return gzip_response(encoded);
                }
                Err(e) => tracing::warn!(error = %e, "gzip of a cached object failed"),
            }
        }
        return json_response(Body::from(bytes));
    }
    objects.count_miss();
    let limit = objects.max_object();
    let objects = objects.clone();
    let produce = move |sink: &mut sink::Sink| object::write_object(&store, &target, sink);
    if !gzip {
        return json_response(sink::stream_keeping(
            produce,
            sink::Encoding::Identity,
            limit,
            move |bytes| objects.insert(key, bytes),
        ));
    }
    // Encoded once as it streams, and kept encoded: a report too large to keep as JSON (a round
    // of thousands of nodes) is a few MiB gzip-encoded, so later GETs are hits.
    objects.count_encoding();
    with_gzip_headers(json_response(sink::stream_keeping(
        produce,
        sink::Encoding::Gzip,
        limit,
        move |bytes| objects.insert(key.gzipped(), bytes),
    )))
}

fn gzip_response(bytes: bytes::Bytes) -> Response {
    with_gzip_headers(json_response(Body::from(bytes)))
}

/// Marks a response as gzip-encoded, which also keeps the compression layer off it.
fn with_gzip_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    response
}

/// `DELETE …/kdoctorreports/{name}`: purges the task incarnation, or one round of it — made
/// by the writer (the leader, when the store is replicated) and answered once this replica has
/// it too.
pub async fn delete(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let store = state.store()?;
    let writes = state.writes()?;
    let resolved = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || -> Result<_, ApiError> {
            let target = resolve(&store, &name).ok_or_else(|| ApiError::not_found(&name))?;
            let mut head = object::head(&store, &target)?;
            head.insert("report".into(), json!({}));
            Ok((target, head))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??
    };
    let (target, head) = resolved;
    match target.round {
        Some(round) => writes.purge_round(target.task.id, round).await.map(drop),
        None => writes.purge_task(target.task.id).await.map(drop),
    }?;
    tracing::info!(name = %target.name, task = %target.task.name, round = ?target.round, "report purged");
    Ok((StatusCode::OK, axum::Json(serde_json::Value::Object(head))).into_response())
}

/// Verbs the resource does not serve.
pub async fn unsupported(method: axum::http::Method, name: Option<Path<String>>) -> ApiError {
    let verb = match (method.as_str(), name.is_some()) {
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", false) => "deletecollection",
        _ => "method",
    };
    ApiError::method_not_allowed(verb)
}
