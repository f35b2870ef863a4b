//! Objects of a list decoded one at a time, so one object the server stored with a malformed field
//! (a pod with `priority: "high"`, which kube-apiserver would refuse but a store behind a lax
//! admission may hold) costs only itself: [`decode_each`] keeps every object that decodes and
//! names each one that does not, with the field at fault, for the command to warn about. A
//! typed list would fail as a whole on that one object.

use kube::api::DynamicObject;
use serde::de::DeserializeOwned;

/// An object that was skipped because it does not decode as its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecodable {
    /// `metadata.namespace`; `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// `metadata.name` (empty when the object has none).
    pub name: String,
    /// The field at fault and what is wrong with it, e.g. `spec.priority: invalid type: string
    /// "high", expected i32`.
    pub reason: String,
}

impl Undecodable {
    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// The objects of a list: those that decode, and those skipped.
#[derive(Clone, Debug)]
pub struct Decoded<K> {
    /// The objects that decode, in list order.
    pub items: Vec<K>,
    /// The objects that do not, in list order.
    pub skipped: Vec<Undecodable>,
}

/// Decodes each of `objects` (as listed, untyped) as `K`.
pub fn decode_each<K: DeserializeOwned>(objects: Vec<DynamicObject>) -> Decoded<K> {
    let mut decoded = Decoded {
        items: Vec::with_capacity(objects.len()),
        skipped: Vec::new(),
    };
    for object in objects {
        match decode_one(&object) {
            Ok(item) => decoded.items.push(item),
            Err(reason) => decoded.skipped.push(Undecodable {
                namespace: object.metadata.namespace.clone(),
                name: object.metadata.name.clone().unwrap_or_default(),
                reason,
            }),
        }
    }
    decoded
}

/// Decodes one untyped object as `K`.
///
/// Errors: the path of the field that does not decode and why (`spec.priority: invalid type:
/// …`).
pub fn decode_one<K: DeserializeOwned>(object: &DynamicObject) -> Result<K, String> {
    let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        match path.as_str() {
            "" | "." => e.into_inner().to_string(),
            _ => format!("{path}: {}", e.into_inner()),
        }
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).expect("an object")
    }

    #[test]
    fn a_malformed_object_is_named_with_its_field_and_the_others_kept() {
        let objects = vec![
            object(json!({"metadata": {"name": "web", "namespace": "shop"},
                "spec": {"containers": [{"name": "c"}], "priority": 10}})),
            object(json!({"metadata": {"name": "bad", "namespace": "shop"},
                "spec": {"containers": [{"name": "c"}], "priority": "high"}})),
            object(json!({"metadata": {"name": "api", "namespace": "shop"},
                "spec": {"containers": [{"name": "c"}]}})),
        ];
        let decoded = decode_each::<Pod>(objects);
        let names: Vec<_> = decoded
            .items
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(names, ["web", "api"]);
        assert_eq!(
            decoded.items[0].spec.as_ref().and_then(|s| s.priority),
            Some(10)
        );
        assert_eq!(
            decoded.skipped,
            [Undecodable {
                namespace: Some("shop".into()),
                name: "bad".into(),
                reason: "spec.priority: invalid type: string \"high\", expected i32".into(),
            }]
        );
        assert_eq!(decoded.skipped[0].key(), "shop/bad");
    }

    #[test]
    fn cluster_scoped_keys_have_no_namespace() {
        let gone = Undecodable {
            namespace: None,
            name: "n1".into(),
            reason: String::new(),
        };
        assert_eq!(gone.key(), "n1");
    }
}
