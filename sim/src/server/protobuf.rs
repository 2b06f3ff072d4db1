//! Just enough of Kubernetes' protobuf encoding for the bodies kubectl's typed clients POST
//! (`kubectl auth can-i`, `kubectl create namespace|configmap|secret|serviceaccount|service|
//! deployment|role|clusterrole|rolebinding|clusterrolebinding`): the `k8s\0` envelope,
//! TypeMeta, the common ObjectMeta fields, and the fields those commands set (others are
//! skipped). Other kinds' protobuf bodies still get 415.

use base64::Engine;
use serde_json::{Map, Value, json};

/// How a field decodes.
enum F {
    Str(&'static str),
    Bool(&'static str),
    Int(&'static str),
    Msg(&'static str, &'static [(u64, F)]),
    RepStr(&'static str),
    RepMsg(&'static str, &'static [(u64, F)]),
    MapStr(&'static str),
    MapBytes(&'static str),
    IntOrString(&'static str),
}

const OBJECT_META: &[(u64, F)] = &[
    (1, F::Str("name")),
    (2, F::Str("generateName")),
    (3, F::Str("namespace")),
    (11, F::MapStr("labels")),
    (12, F::MapStr("annotations")),
];
const RESOURCE_ATTRIBUTES: &[(u64, F)] = &[
    (1, F::Str("namespace")),
    (2, F::Str("verb")),
    (3, F::Str("group")),
    (4, F::Str("version")),
    (5, F::Str("resource")),
    (6, F::Str("subresource")),
    (7, F::Str("name")),
];
const NON_RESOURCE_ATTRIBUTES: &[(u64, F)] = &[(1, F::Str("path")), (2, F::Str("verb"))];
const SSAR_SPEC: &[(u64, F)] = &[
    (1, F::Msg("resourceAttributes", RESOURCE_ATTRIBUTES)),
    (2, F::Msg("nonResourceAttributes", NON_RESOURCE_ATTRIBUTES)),
];
const SSAR: &[(u64, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", SSAR_SPEC)),
];
const CONFIG_MAP: &[(u64, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::MapStr("data")),
    (3, F::MapBytes("binaryData")),
    (4, F::Bool("immutable")),
];
const SECRET: &[(u64, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::MapBytes("data")),
    (3, F::Str("type")),
    (4, F::MapStr("stringData")),
    (5, F::Bool("immutable")),
];
const NAMESPACE: &[(u64, F)] = &[(1, F::Msg("metadata", OBJECT_META))];
const TYPE_META: &[(u64, F)] = &[(1, F::Str("apiVersion")), (2, F::Str("kind"))];
const METADATA_ONLY: &[(u64, F)] = &[(1, F::Msg("metadata", OBJECT_META))];
const POLICY_RULE: &[(u64, F)] = &[
    (1, F::RepStr("verbs")),
    (2, F::RepStr("apiGroups")),
    (3, F::RepStr("resources")),
    (4, F::RepStr("resourceNames")),
    (5, F::RepStr("nonResourceURLs")),
];
const ROLE: &[(u64, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::RepMsg("rules", POLICY_RULE)),
];
const SUBJECT: &[(u64, F)] = &[
    (1, F::Str("kind")),
    (2, F::Str("apiGroup")),
    (3, F::Str("name")),
    (4, F::Str("namespace")),
];
const ROLE_REF: &[(u64, F)] = &[
    (1, F::Str("apiGroup")),
    (2, F::Str("kind")),
    (3, F::Str("name")),
];
const ROLE_BINDING: &[(u64, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::RepMsg("subjects", SUBJECT)),
    (3, F::Msg("roleRef", ROLE_REF)),
];
const SERVICE_PORT: &[(u64, F)] = &[
    (1, F::Str("name")),
    (2, F::Str("protocol")),
    (3, F::Int("port")),
    (4, F::IntOrString("targetPort")),
    (5, F::Int("nodePort")),
];
const SERVICE_SPEC: &[(u64, F)] = &[
    (1, F::RepMsg("ports", SERVICE_PORT)),
    (2, F::MapStr("selector")),
    (3, F::Str("clusterIP")),
    (4, F::Str("type")),
    (10, F::Str("externalName")),
];
const SERVICE: &[(u64, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", SERVICE_SPEC)),
];
const CONTAINER_PORT: &[(u64, F)] = &[
    (1, F::Str("name")),
    (2, F::Int("hostPort")),
    (3, F::Int("containerPort")),
    (4, F::Str("protocol")),
];
const ENV_VAR: &[(u64, F)] = &[(1, F::Str("name")), (2, F::Str("value"))];
const CONTAINER: &[(u64, F)] = &[
    (1, F::Str("name")),
    (2, F::Str("image")),
    (3, F::RepStr("command")),
    (4, F::RepStr("args")),
    (5, F::Str("workingDir")),
    (6, F::RepMsg("ports", CONTAINER_PORT)),
    (7, F::RepMsg("env", ENV_VAR)),
];
const POD_SPEC: &[(u64, F)] = &[(2, F::RepMsg("containers", CONTAINER))];
const POD_TEMPLATE: &[(u64, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", POD_SPEC)),
];
const LABEL_SELECTOR: &[(u64, F)] = &[(1, F::MapStr("matchLabels"))];
const DEPLOYMENT_SPEC: &[(u64, F)] = &[
    (1, F::Int("replicas")),
    (2, F::Msg("selector", LABEL_SELECTOR)),
    (3, F::Msg("template", POD_TEMPLATE)),
];
const DEPLOYMENT: &[(u64, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", DEPLOYMENT_SPEC)),
];

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint()?).ok()?;
        let end = self.pos.checked_add(len)?;
        let out = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    /// Next (field, wire type value or bytes).
    fn field(&mut self) -> Option<(u64, Result<u64, &'a [u8]>)> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let key = self.varint()?;
        let (field, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => Ok(self.varint()?),
            1 => {
                self.pos = self.pos.checked_add(8)?;
                Ok(0)
            }
            2 => Err(self.bytes()?),
            5 => {
                self.pos = self.pos.checked_add(4)?;
                Ok(0)
            }
            _ => return None,
        };
        Some((field, value))
    }
}

fn map_entry(b: &[u8]) -> Option<(String, Vec<u8>)> {
    let mut r = Reader { buf: b, pos: 0 };
    let (mut k, mut v) = (String::new(), Vec::new());
    while let Some((f, val)) = r.field() {
        match (f, val) {
            (1, Err(x)) => k = String::from_utf8_lossy(x).into_owned(),
            (2, Err(x)) => v = x.to_vec(),
            _ => {}
        }
    }
    Some((k, v))
}

fn decode(buf: &[u8], schema: &[(u64, F)]) -> Option<Value> {
    let mut out = Map::new();
    let mut r = Reader { buf, pos: 0 };
    while r.pos < buf.len() {
        let (field, value) = r.field()?;
        let Some((_, f)) = schema.iter().find(|(n, _)| *n == field) else {
            continue;
        };
        match (f, value) {
            // gogo-protobuf writes zero values too; Go's JSON omits them (omitempty), so do we.
            (F::Str(_), Err([])) | (F::Bool(_), Ok(0)) | (F::Int(_), Ok(0)) => {}
            (F::Str(name), Err(b)) => {
                out.insert((*name).into(), json!(String::from_utf8_lossy(b)));
            }
            (F::Bool(name), Ok(_)) => {
                out.insert((*name).into(), json!(true));
            }
            (F::Int(name), Ok(v)) => {
                // int32 on the wire: negative values are sign-extended to 64 bits.
                out.insert((*name).into(), json!(v as i64 as i32));
            }
            (F::RepStr(name), Err(b)) => {
                let list = out.entry(*name).or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(String::from_utf8_lossy(b)));
                }
            }
            (F::RepMsg(name, sub), Err(b)) => {
                let item = decode(b, sub)?;
                let list = out.entry(*name).or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(item);
                }
            }
            (F::IntOrString(name), Err(b)) => {
                const INT_OR_STRING: &[(u64, F)] = &[
                    (1, F::Int("type")),
                    (2, F::Int("intVal")),
                    (3, F::Str("strVal")),
                ];
                let v = decode(b, INT_OR_STRING)?;
                let value = if v.get("type").and_then(Value::as_i64) == Some(1) {
                    v.get("strVal").cloned().unwrap_or(json!(""))
                } else {
                    v.get("intVal").cloned().unwrap_or(json!(0))
                };
                out.insert((*name).into(), value);
            }
            (F::Msg(name, sub), Err(b)) => {
                out.insert((*name).into(), decode(b, sub)?);
            }
            (F::MapStr(name), Err(b)) => {
                let (k, v) = map_entry(b)?;
                let m = out.entry(*name).or_insert_with(|| json!({}));
                m[k] = json!(String::from_utf8_lossy(&v));
            }
            (F::MapBytes(name), Err(b)) => {
                let (k, v) = map_entry(b)?;
                let m = out.entry(*name).or_insert_with(|| json!({}));
                m[k] = json!(base64::engine::general_purpose::STANDARD.encode(v));
            }
            _ => return None,
        }
    }
    Some(Value::Object(out))
}

/// Decodes a `k8s\0`-enveloped protobuf object of a supported kind into its JSON form.
pub fn decode_object(body: &[u8]) -> Option<Value> {
    let rest = body.strip_prefix(b"k8s\0")?;
    let mut r = Reader { buf: rest, pos: 0 };
    let (mut type_meta, mut raw) = (None, None);
    while let Some((f, v)) = r.field() {
        match (f, v) {
            (1, Err(b)) => type_meta = decode(b, TYPE_META),
            (2, Err(b)) => raw = Some(b),
            _ => {}
        }
    }
    let tm = type_meta?;
    let kind = tm.get("kind")?.as_str()?;
    let schema = match kind {
        "SelfSubjectAccessReview" => SSAR,
        "ConfigMap" => CONFIG_MAP,
        "Secret" => SECRET,
        "Namespace" => NAMESPACE,
        "ServiceAccount" => METADATA_ONLY,
        "Role" | "ClusterRole" => ROLE,
        "RoleBinding" | "ClusterRoleBinding" => ROLE_BINDING,
        "Service" => SERVICE,
        "Deployment" => DEPLOYMENT,
        _ => return None,
    };
    let mut obj = decode(raw?, schema)?;
    obj["apiVersion"] = tm.get("apiVersion").cloned().unwrap_or(Value::Null);
    obj["kind"] = json!(kind);
    Some(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(field: u64, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![((field << 3) | 2) as u8, bytes.len() as u8];
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn decodes_a_configmap_and_refuses_garbage() {
        let meta = [
            len_field(1, b"cm1"),
            len_field(11, &[len_field(1, b"a"), len_field(2, b"b")].concat()),
        ]
        .concat();
        let obj = [
            len_field(1, &meta),
            len_field(2, &[len_field(1, b"k"), len_field(2, b"v")].concat()),
        ]
        .concat();
        let tm = [len_field(1, b"v1"), len_field(2, b"ConfigMap")].concat();
        let body = [b"k8s\0".to_vec(), len_field(1, &tm), len_field(2, &obj)].concat();
        assert_eq!(
            decode_object(&body),
            Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm1", "labels": {"a": "b"}}, "data": {"k": "v"}}))
        );
        assert_eq!(decode_object(b"k8s\0\x0a\xff"), None);
        for cut in 0..body.len() {
            let _ = decode_object(&body[..cut]);
        }
    }
}
