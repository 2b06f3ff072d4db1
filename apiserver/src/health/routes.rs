//! The health endpoints over the server's state.

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::routing::get;

use super::{ENDPOINTS, answer};
use crate::state::AppState;

fn report(state: &AppState, endpoint: &str, raw: Option<&str>, only: Option<&str>) -> Response {
    let stopped = state
        .store()
        .ok()
        .is_some_and(|store| store.failure().is_some());
    answer(&state.health, stopped, endpoint, raw, only)
}

/// `/healthz`, `/livez` and `/readyz` with their query (`?verbose`, `?exclude=`), for the API
/// server and the operations listener alike.
pub fn routes() -> Router<AppState> {
    ENDPOINTS.into_iter().fold(Router::new(), |router, name| {
        router.route(
            &format!("/{name}"),
            get(
                move |State(s): State<AppState>, RawQuery(q): RawQuery| async move {
                    endpoint(&s, name, q.as_deref())
                },
            ),
        )
    })
}

/// `/healthz`, `/livez` or `/readyz`.
pub fn endpoint(state: &AppState, endpoint: &str, raw: Option<&str>) -> Response {
    report(state, endpoint, raw, None)
}

/// `/<endpoint>/<check>`.
pub fn check(state: &AppState, endpoint: &str, check: &str) -> Response {
    report(state, endpoint, None, Some(check))
}
