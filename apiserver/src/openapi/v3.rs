//! OpenAPI v3 documents as typed values of the `openapiv3` crate: every path, operation,
//! parameter and schema is checked against the specification's model when it is built (a schema
//! the model cannot hold fails the build, and the tests), then serialized once.

use indexmap::IndexMap;
use openapiv3::{
    Components, Info, MediaType, OpenAPI, Operation, Parameter, PathItem, Paths, ReferenceOr,
    Response, Responses, Schema, StatusCode,
};
use serde_json::{Value, json};

/// A JSON schema (a CRD's, or schemars') as an OpenAPI schema.
pub fn schema(value: &Value) -> Result<ReferenceOr<Schema>, serde_json::Error> {
    serde_json::from_value(value.clone())
}

/// A reference to a schema of `#/components/schemas/`.
pub fn reference(name: &str) -> ReferenceOr<Schema> {
    ReferenceOr::Reference {
        reference: format!("#/components/schemas/{name}"),
    }
}

/// A query parameter taking a string.
pub fn query(name: &str, description: &str) -> Result<ReferenceOr<Parameter>, serde_json::Error> {
    serde_json::from_value(json!({
        "name": name, "in": "query", "description": description,
        "schema": {"type": "string", "uniqueItems": true},
    }))
}

/// The `{name}` path parameter.
pub fn name_parameter(description: &str) -> Result<ReferenceOr<Parameter>, serde_json::Error> {
    serde_json::from_value(json!({
        "name": "name", "in": "path", "required": true, "description": description,
        "schema": {"type": "string"},
    }))
}

/// What an operation is, in Kubernetes' words.
pub struct Action<'a> {
    /// `operationId`.
    pub id: String,
    /// `x-kubernetes-action` (`get`, `list`, `post`, `put`, `patch`, `delete`).
    pub action: &'a str,
    /// The group, version and kind it acts on.
    pub gvk: Value,
    /// Its tag.
    pub tag: &'a str,
}

/// An operation answering 200 with the schema named `response`.
pub fn operation(
    action: Action<'_>,
    response: &str,
    parameters: Vec<ReferenceOr<Parameter>>,
) -> Operation {
    let mut content = IndexMap::new();
    content.insert(
        "application/json".to_string(),
        MediaType {
            schema: Some(reference(response)),
            ..MediaType::default()
        },
    );
    let mut responses = IndexMap::new();
    responses.insert(
        StatusCode::Code(200),
        ReferenceOr::Item(Response {
            description: "OK".to_string(),
            content,
            ..Response::default()
        }),
    );
    let kind = action.gvk["kind"].as_str().unwrap_or_default().to_string();
    let mut extensions = IndexMap::new();
    extensions.insert("x-kubernetes-action".to_string(), json!(action.action));
    extensions.insert("x-kubernetes-group-version-kind".to_string(), action.gvk);
    Operation {
        tags: vec![action.tag.to_string()],
        description: Some(format!("{} {kind}", action.action)),
        operation_id: Some(action.id),
        parameters,
        responses: Responses {
            responses,
            ..Responses::default()
        },
        extensions,
        ..Operation::default()
    }
}

/// A path's operations, by method.
#[derive(Default)]
pub struct Methods {
    /// GET.
    pub get: Option<Operation>,
    /// POST.
    pub post: Option<Operation>,
    /// PUT.
    pub put: Option<Operation>,
    /// PATCH.
    pub patch: Option<Operation>,
    /// DELETE.
    pub delete: Option<Operation>,
    /// Parameters of every method.
    pub parameters: Vec<ReferenceOr<Parameter>>,
}

impl Methods {
    /// Sets the operation of `method` (`get`, `post`, `put`, `patch`, `delete`; others are
    /// not served).
    pub fn set(&mut self, method: &str, operation: Operation) {
        let slot = match method {
            "get" => &mut self.get,
            "post" => &mut self.post,
            "put" => &mut self.put,
            "patch" => &mut self.patch,
            "delete" => &mut self.delete,
            _ => return,
        };
        *slot = Some(operation);
    }
}

/// A path item of `methods`.
pub fn path(methods: Methods) -> ReferenceOr<PathItem> {
    ReferenceOr::Item(PathItem {
        get: methods.get,
        post: methods.post,
        put: methods.put,
        patch: methods.patch,
        delete: methods.delete,
        parameters: methods.parameters,
        ..PathItem::default()
    })
}

/// A whole document.
pub fn document(
    title: &str,
    version: &str,
    paths: IndexMap<String, ReferenceOr<PathItem>>,
    schemas: IndexMap<String, ReferenceOr<Schema>>,
) -> OpenAPI {
    OpenAPI {
        openapi: "3.0.0".to_string(),
        info: Info {
            title: title.to_string(),
            version: version.to_string(),
            ..Info::default()
        },
        paths: Paths {
            paths,
            ..Paths::default()
        },
        components: Some(Components {
            schemas,
            ..Components::default()
        }),
        ..OpenAPI::default()
    }
}
