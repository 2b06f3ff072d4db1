//! Fixed names that scripts, docs and tests rely on: label keys, field managers.

/// Label on reports, carriers and everything the controller creates: the task kind.
pub const TASK_KIND: &str = "kdoctor.io/task-kind";
/// Label: the task name.
pub const TASK_NAME: &str = "kdoctor.io/task-name";
/// Label on reports: `succeed`, `fail` or `none`.
pub const LAST_RESULT: &str = "kdoctor.io/last-result";
/// Standard label: the application name.
pub const APP_NAME: &str = "app.kubernetes.io/name";
/// Standard label: the component (e.g. `agent`, `controller`).
pub const APP_COMPONENT: &str = "app.kubernetes.io/component";
/// Standard label: who manages the object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY`].
pub const MANAGED_BY_KDOCTOR: &str = "kdoctor";
/// Field manager of the controller's server-side applies.
pub const FIELD_MANAGER: &str = "kdoctor-controller";
/// Field manager of node and pod markers.
pub const MARKER_FIELD_MANAGER: &str = "kdoctor-marker";
