//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! which client-go's typed clients send for built-in kinds: `kubectl create namespace`,
//! `kubectl create secret`, and Helm's release storage (a Secret per release revision, written
//! and deleted through the typed client). kube-apiserver decodes them; the sandbox decodes the
//! kinds those clients write and answers with JSON (clients read the response's content type).
//!
//! The encoding (`k8s.io/apimachinery/pkg/runtime/serializer/protobuf`): the 4-byte magic
//! `k8s\0`, then a `runtime.Unknown` message whose `raw` field holds the object's own message.
//! The messages come from the `k8s-pb` crate (kube-rs's generated Kubernetes protobuf types).
//! Another kind gets a 415 naming it.

use base64::Engine;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult, Reason};

/// The prefix of every protobuf-encoded object.
const MAGIC: &[u8] = b"k8s\0";

/// Whether a `Content-Type` is Kubernetes' protobuf encoding.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.contains("application/vnd.kubernetes.protobuf")
}

/// The object `body` encodes, as the JSON a client would have sent.
///
/// Errors: 400 for a body that is not the protobuf envelope or whose message does not decode;
/// 415 for a kind the sandbox does not decode from protobuf.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let raw = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request("protobuf body without the k8s\\0 prefix".to_string())
    })?;
    let unknown = Unknown::decode(raw)
        .map_err(|e| ApiError::bad_request(format!("invalid protobuf body: {e}")))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let bytes = unknown.raw.unwrap_or_default();
    let bad =
        |e: prost::DecodeError| ApiError::bad_request(format!("invalid protobuf {kind}: {e}"));
    let mut object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => secret(core::Secret::decode(bytes.as_slice()).map_err(bad)?),
        ("v1", "ConfigMap") => config_map(core::ConfigMap::decode(bytes.as_slice()).map_err(bad)?),
        ("v1", "Namespace") => namespace(core::Namespace::decode(bytes.as_slice()).map_err(bad)?),
        ("v1" | "meta.k8s.io/v1", "DeleteOptions") => {
            delete_options(meta::DeleteOptions::decode(bytes.as_slice()).map_err(bad)?)
        }
        _ => {
            return Err(ApiError::new(
                Reason::UnsupportedMediaType,
                format!(
                    "the sandbox decodes protobuf bodies of Secret, ConfigMap, Namespace and \
                     DeleteOptions only, not {api_version} {kind}; send application/json"
                ),
            ));
        }
    };
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(api_version));
        map.insert("kind".into(), Value::String(kind));
    }
    Ok(object)
}

fn b64(bytes: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Insert `value` under `key` unless it is `None` or an empty string: Go's generated
/// marshalling writes a plain `string` field even when empty, where JSON would omit it.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    match value {
        None => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(v) => {
            map.insert(key.into(), v);
        }
    }
}

fn strings<'a>(m: impl IntoIterator<Item = (&'a String, &'a String)>) -> Value {
    Value::Object(
        m.into_iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn object_meta(m: Option<meta::ObjectMeta>) -> Value {
    let m = m.unwrap_or_default();
    let mut out = Map::new();
    put(&mut out, "name", m.name.map(Value::String));
    put(&mut out, "generateName", m.generate_name.map(Value::String));
    put(&mut out, "namespace", m.namespace.map(Value::String));
    put(&mut out, "uid", m.uid.map(Value::String));
    put(
        &mut out,
        "resourceVersion",
        m.resource_version.map(Value::String),
    );
    if !m.labels.is_empty() {
        out.insert("labels".into(), strings(&m.labels));
    }
    if !m.annotations.is_empty() {
        out.insert("annotations".into(), strings(&m.annotations));
    }
    if !m.owner_references.is_empty() {
        let owners = m
            .owner_references
            .into_iter()
            .map(|o| {
                let mut r = Map::new();
                put(&mut r, "apiVersion", o.api_version.map(Value::String));
                put(&mut r, "kind", o.kind.map(Value::String));
                put(&mut r, "name", o.name.map(Value::String));
                put(&mut r, "uid", o.uid.map(Value::String));
                put(&mut r, "controller", o.controller.map(Value::Bool));
                put(
                    &mut r,
                    "blockOwnerDeletion",
                    o.block_owner_deletion.map(Value::Bool),
                );
                Value::Object(r)
            })
            .collect();
        out.insert("ownerReferences".into(), Value::Array(owners));
    }
    if !m.finalizers.is_empty() {
        out.insert("finalizers".into(), json!(m.finalizers));
    }
    Value::Object(out)
}

fn secret(s: core::Secret) -> Value {
    let mut out = Map::new();
    out.insert("metadata".into(), object_meta(s.metadata));
    if !s.data.is_empty() {
        let data = s.data.iter().map(|(k, v)| (k.clone(), b64(v))).collect();
        out.insert("data".into(), Value::Object(data));
    }
    if !s.string_data.is_empty() {
        out.insert("stringData".into(), strings(&s.string_data));
    }
    put(&mut out, "type", s.r#type.map(Value::String));
    put(&mut out, "immutable", s.immutable.map(Value::Bool));
    Value::Object(out)
}

fn config_map(c: core::ConfigMap) -> Value {
    let mut out = Map::new();
    out.insert("metadata".into(), object_meta(c.metadata));
    if !c.data.is_empty() {
        out.insert("data".into(), strings(&c.data));
    }
    if !c.binary_data.is_empty() {
        let data = c
            .binary_data
            .iter()
            .map(|(k, v)| (k.clone(), b64(v)))
            .collect();
        out.insert("binaryData".into(), Value::Object(data));
    }
    put(&mut out, "immutable", c.immutable.map(Value::Bool));
    Value::Object(out)
}

fn namespace(n: core::Namespace) -> Value {
    let mut out = Map::new();
    out.insert("metadata".into(), object_meta(n.metadata));
    if let Some(spec) = n.spec.filter(|s| !s.finalizers.is_empty()) {
        out.insert("spec".into(), json!({"finalizers": spec.finalizers}));
    }
    Value::Object(out)
}

fn delete_options(d: meta::DeleteOptions) -> Value {
    let mut out = Map::new();
    put(
        &mut out,
        "gracePeriodSeconds",
        d.grace_period_seconds.map(Value::from),
    );
    if let Some(p) = d.preconditions {
        let mut pre = Map::new();
        put(&mut pre, "uid", p.uid.map(Value::String));
        put(
            &mut pre,
            "resourceVersion",
            p.resource_version.map(Value::String),
        );
        out.insert("preconditions".into(), Value::Object(pre));
    }
    put(
        &mut out,
        "orphanDependents",
        d.orphan_dependents.map(Value::Bool),
    );
    put(
        &mut out,
        "propagationPolicy",
        d.propagation_policy.map(Value::String),
    );
    if !d.dry_run.is_empty() {
        out.insert("dryRun".into(), json!(d.dry_run));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [MAGIC, unknown.encode_to_vec().as_slice()].concat()
    }

    #[test]
    fn a_helm_release_secret_decodes_to_its_json() {
        let secret = core::Secret {
            metadata: Some(meta::ObjectMeta {
                name: Some("sh.helm.release.v1.karpenter.v1".into()),
                namespace: Some("kube-system".into()),
                labels: [("owner".to_string(), "helm".to_string())].into(),
                ..Default::default()
            }),
            data: [("release".to_string(), b"H4sI".to_vec())].into(),
            r#type: Some("helm.sh/release.v1".into()),
            ..Default::default()
        };
        let body = envelope("v1", "Secret", secret.encode_to_vec());
        assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
        assert_eq!(
            decode(&body).expect("decodes"),
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "sh.helm.release.v1.karpenter.v1", "namespace": "kube-system",
                    "labels": {"owner": "helm"}},
                "data": {"release": "SDRzSQ=="},
                "type": "helm.sh/release.v1",
            })
        );
    }

    #[test]
    fn a_namespace_and_delete_options_decode_and_other_kinds_are_415() {
        let ns = core::Namespace {
            metadata: Some(meta::ObjectMeta {
                name: Some("team-a".into()),
                // Go writes its plain string fields even when empty: read as absent.
                namespace: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            decode(&envelope("v1", "Namespace", ns.encode_to_vec())).expect("decodes"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
        );
        let options = meta::DeleteOptions {
            propagation_policy: Some("Background".into()),
            ..Default::default()
        };
        assert_eq!(
            decode(&envelope(
                "meta.k8s.io/v1",
                "DeleteOptions",
                options.encode_to_vec()
            ))
            .expect("decodes")["propagationPolicy"],
            "Background"
        );
        let pod = decode(&envelope("v1", "Pod", Vec::new())).expect_err("not decoded");
        assert_eq!(pod.reason, Reason::UnsupportedMediaType);
        assert!(decode(b"{}").is_err(), "no magic");
        assert!(decode(&[MAGIC, &[0xff, 0xff]].concat()).is_err(), "garbage");
    }
}
