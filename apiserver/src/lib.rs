//! kdoctor-apiserver: the aggregated API server of `system.kdoctor.io/v1beta1` `KdoctorReport`,
//! served from the report store — discovery, get/list/watch/delete with selectors and paging,
//! server-side Tables, OpenAPI, Status errors, delegated authentication and authorization,
//! health and metrics.

pub mod auth;
pub mod certs;
pub mod conn_threads;
pub mod consistency;
pub mod discovery;
pub mod health;
pub mod kube;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod parse_errors;
pub mod pipeline;
pub mod resource;
pub mod serve;
pub mod server;
pub mod state;
pub mod tasks;

use axum::Router;
use axum::extract::{Path, State};
use axum::middleware;
use axum::routing::get;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{DefaultPredicate, Predicate};

pub use state::AppState;

use kube::response::Unbuffered;

pub use kube::group::{GROUP, GROUP_RESOURCE, PLURAL, SHORT_NAME, SINGULAR, VERSION};

/// The HTTP routes, with authentication, metrics and gzip.
pub fn router(state: AppState) -> Router {
    let collection = format!("/apis/{GROUP}/{VERSION}/{PLURAL}");
    let named = format!("{collection}/{{name}}");
    // Task objects only where the embedding program shows them (`kdoctor local`).
    let tasks = if state.tasks.is_some() {
        tasks::routes()
    } else {
        Router::new()
    };
    let routes = Router::new()
        .merge(tasks)
        .route("/version", get(discovery::version))
        .route("/api", get(discovery::api))
        .route("/apis", get(discovery::apis))
        .route(&format!("/apis/{GROUP}"), get(discovery::group))
        .route(
            &format!("/apis/{GROUP}/{VERSION}"),
            get(discovery::resources),
        )
        .route(
            &collection,
            get(resource::list)
                .post(resource::unsupported)
                .put(resource::unsupported)
                .patch(resource::unsupported)
                .delete(resource::unsupported),
        )
        .route(
            &named,
            get(resource::get)
                .delete(resource::delete)
                .post(resource::unsupported)
                .put(resource::unsupported)
                .patch(resource::unsupported),
        )
        .route("/openapi/v3", get(openapi::v3_index))
        .route(
            &format!("/openapi/v3/apis/{GROUP}/{VERSION}"),
            get(openapi::v3_group_version),
        )
        .route("/openapi/v2", get(openapi::v2))
        .route(
            "/metrics",
            get(|State(s): State<AppState>| async move { metrics::render(&s.metrics) }),
        )
        .merge(health::routes::routes())
        .route(
            "/{endpoint}/{check}",
            get(
                |State(s): State<AppState>, Path((e, c)): Path<(String, String)>| async move {
                    if health::ENDPOINTS.contains(&e.as_str()) {
                        health::routes::check(&s, &e, &c)
                    } else {
                        axum::response::IntoResponse::into_response(
                            kube::status::ApiError::no_route(),
                        )
                    }
                },
            ),
        )
        .fallback(|| async { kube::status::ApiError::no_route() })
        .with_state(state.clone());
    // The middleware (compression, then crate::pipeline's steps) wraps the router once.
    // `Router::layer` would wrap every route instead, and each layer clones the boxed routes
    // beneath it per request: callgrind counted 31 boxed-service clones and 11 boxed futures per GET that way (docs/benchmarks.md).
    let layered = tower::ServiceBuilder::new()
        .layer(
            // Level 1, as kube-apiserver compresses (kubernetes#112296: a fraction of the CPU
            // of the default level for 1.1-1.3x the bytes): what is compressed here is made
            // per request (lists, Tables), where the compressor's time is the client's wait.
            // Single reports are compressed once, harder, by the object cache.
            CompressionLayer::new()
                .gzip(true)
                .quality(tower_http::CompressionLevel::Fastest)
                .compress_when(DefaultPredicate::new().and(NotAWatch)),
        )
        .layer(middleware::from_fn_with_state(state, pipeline::steps))
        .service(routes);
    Router::new().fallback_service(layered)
}

/// Compression predicate: everything but watches.
#[derive(Clone, Copy, Debug)]
struct NotAWatch;

impl Predicate for NotAWatch {
    fn should_compress<B>(&self, response: &axum::http::Response<B>) -> bool
    where
        B: axum::body::HttpBody,
    {
        response.extensions().get::<Unbuffered>().is_none()
    }
}
