//! Every request's way through the server, outermost first: metrics and the access log,
//! authentication and authorization, errors as `Status` objects, the request body read before
//! routing — then the routes. One middleware calls the four steps in turn: as four `from_fn`
//! layers, each cloned the layers beneath it and boxed its future again for every request
//! (callgrind: a fifth of a small GET's instructions, docs/benchmarks.md).

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

mod as_status;
mod read_body;

use crate::state::AppState;
use crate::{auth, metrics};

/// The middleware around the routes (see the module's documentation for the order).
pub async fn steps(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let state = &state;
    metrics::track(&state.metrics, request, move |request| {
        auth::guard(&state.auth, &state.metrics, request, move |request| {
            as_status::as_status(request, move |request| {
                read_body::read_body(request, move |request| next.run(request))
            })
        })
    })
    .await
}
