//! The decoding kube-apiserver does before anything else with a built-in object: its JSON is
//! read into the kind's Go types, so a value of the wrong type (`replicas: "many"`, an int32
//! out of range, a malformed quantity) is a 400 `BadRequest` worded as Go's decoder words it
//! (`Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string
//! into Go struct field DeploymentSpec.spec.replicas of type int32`), and the object is stored
//! as the typed value re-encodes: quantities in canonical form (`0.5` becomes `500m`). The types
//! are the Kubernetes API's own, from the OpenAPI schemas the server publishes. Unknown fields
//! are kept (kube-apiserver drops them, or refuses them under `fieldValidation=Strict`).

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::quantity::Quantity;
use crate::registry::ResourceType;
use crate::server::schemas::{Schemas, builtin_root};

const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
/// Types whose Go decoders take any JSON value (their schemas say `object` nonetheless): a CRD
/// schema's `default`, `enum` and `example` values, a ControllerRevision's `data`, managed fields.
const ANY_JSON: &[&str] = &[
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
];

/// Check a built-in object's types and canonicalize its quantities (custom resources and kinds
/// without a schema pass unchanged).
///
/// Errors: 400 naming the first value that does not fit its type, as kube-apiserver's decoder.
pub fn decode(rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    if rt.crd.is_some() {
        return Ok(());
    }
    let Some((schemas, root)) = builtin_root(rt) else {
        return Ok(());
    };
    let Some(schema) = schemas.get(&root) else {
        return Ok(());
    };
    let decoder = Decoder { schemas: &schemas };
    let mut at = At {
        path: Vec::new(),
        owner: go_name(&root),
    };
    decoder.walk(obj, schema, &mut at).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
            kind = rt.kind,
            version = rt.version
        ))
    })
}

/// Where the decoder is: the JSON field names from the root (array indices and map keys are not
/// part of Go's error path) and the Go struct that owns the current field.
struct At {
    path: Vec<String>,
    owner: String,
}

struct Decoder<'a> {
    schemas: &'a Schemas,
}

/// A named schema referred to by `$ref` (directly or as the only `allOf` member).
fn reference(schema: &Value) -> Option<&str> {
    let direct = schema.get("$ref").and_then(Value::as_str);
    let all_of = || {
        schema
            .get("allOf")
            .and_then(Value::as_array)
            .filter(|a| a.len() == 1)
            .and_then(|a| a[0].get("$ref"))
            .and_then(Value::as_str)
    };
    direct
        .or_else(all_of)
        .map(|r| r.rsplit('/').next().unwrap_or(r))
}

/// Go's spelling of a schema's type (`v1.PodSpec`, `resource.Quantity`): the package and name.
fn go_name(schema_name: &str) -> String {
    let mut parts = schema_name.rsplit('.');
    let name = parts.next().unwrap_or(schema_name);
    match parts.next() {
        Some(package) => format!("{package}.{name}"),
        None => name.to_string(),
    }
}

/// What Go's decoder calls a JSON value it cannot store (`string`, `number 1.5`, ...).
fn json_kind(v: &Value, literal_numbers: bool) -> String {
    match v {
        Value::String(_) => "string".into(),
        Value::Number(n) if literal_numbers => format!("number {n}"),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "bool".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
        Value::Null => "null".into(),
    }
}

impl Decoder<'_> {
    fn resolve<'s>(&'s self, schema: &'s Value) -> (Option<&'s str>, &'s Value) {
        match reference(schema) {
            Some(name) => (Some(name), self.schemas.get(name).unwrap_or(&Value::Null)),
            None => (None, schema),
        }
    }

    /// Go's spelling of the type a schema describes.
    fn type_name(&self, schema: &Value) -> String {
        let (name, target) = self.resolve(schema);
        if let Some(name) = name {
            return go_name(name);
        }
        match target.get("type").and_then(Value::as_str) {
            Some("integer") => match target.get("format").and_then(Value::as_str) {
                Some("int32") => "int32".into(),
                _ => "int64".into(),
            },
            Some("number") => "float64".into(),
            Some("boolean") => "bool".into(),
            Some("string") if target.get("format").and_then(Value::as_str) == Some("byte") => {
                "[]uint8".into()
            }
            Some("string") => "string".into(),
            Some("array") => match target.get("items") {
                Some(items) => format!("[]{}", self.type_name(items)),
                None => "[]interface {}".into(),
            },
            Some("object") => match target.get("additionalProperties") {
                Some(v) if reference(v) == Some(QUANTITY) => "v1.ResourceList".into(),
                Some(v) if v.is_object() => format!("map[string]{}", self.type_name(v)),
                _ => "map[string]interface {}".into(),
            },
            _ => "interface {}".into(),
        }
    }

    fn mismatch(&self, v: &Value, schema: &Value, at: &At, literal: bool) -> String {
        format!(
            "json: cannot unmarshal {} into Go struct field {}.{} of type {}",
            json_kind(v, literal),
            at.owner.rsplit('.').next().unwrap_or(&at.owner),
            at.path.join("."),
            self.type_name(schema)
        )
    }

    fn walk(&self, v: &mut Value, schema: &Value, at: &mut At) -> Result<(), String> {
        if v.is_null() {
            return Ok(());
        }
        let (name, target) = self.resolve(schema);
        match name {
            Some(n) if ANY_JSON.contains(&n) => return Ok(()),
            Some(QUANTITY) => return quantity(v),
            Some(INT_OR_STRING) => {
                let fits = match &*v {
                    Value::String(_) => true,
                    Value::Number(n) => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
                    _ => false,
                };
                return if fits {
                    Ok(())
                } else {
                    Err(self.mismatch(v, schema, at, v.is_number()))
                };
            }
            _ => {}
        }
        let ok = match target.get("type").and_then(Value::as_str) {
            Some("string") => v.is_string(),
            Some("boolean") => v.is_boolean(),
            Some("number") => v.is_number(),
            Some("integer") => {
                let int32 = target.get("format").and_then(Value::as_str) == Some("int32");
                let fits = match v.as_i64() {
                    Some(i) => !int32 || i32::try_from(i).is_ok(),
                    None => false,
                };
                if v.is_number() && !fits {
                    return Err(self.mismatch(v, schema, at, true));
                }
                fits
            }
            Some("array") => match v.as_array_mut() {
                Some(items) => {
                    if let Some(item_schema) = target.get("items") {
                        for item in items {
                            self.walk(item, item_schema, at)?;
                        }
                    }
                    true
                }
                None => false,
            },
            Some("object") => match v.as_object_mut() {
                Some(map) => {
                    let owner = name.map(go_name);
                    self.object(map, target, owner, at)?;
                    true
                }
                None => false,
            },
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(self.mismatch(v, schema, at, false))
        }
    }

    fn object(
        &self,
        map: &mut Map<String, Value>,
        schema: &Value,
        owner: Option<String>,
        at: &mut At,
    ) -> Result<(), String> {
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            let previous = owner.map(|o| std::mem::replace(&mut at.owner, o));
            for (key, value) in map.iter_mut() {
                if let Some(field_schema) = properties.get(key) {
                    at.path.push(key.clone());
                    let result = self.walk(value, field_schema, at);
                    at.path.pop();
                    result?;
                }
            }
            if let Some(p) = previous {
                at.owner = p;
            }
        } else if let Some(values) = schema.get("additionalProperties").filter(|s| s.is_object()) {
            for value in map.values_mut() {
                self.walk(value, values, at)?;
            }
        }
        Ok(())
    }
}

/// A quantity field: a string or number that parses, stored in canonical form.
fn quantity(v: &mut Value) -> Result<(), String> {
    let text = match &*v {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    };
    let q = Quantity::parse(&text).map_err(|e| e.to_string())?;
    *v = Value::String(q.canonical());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    fn decoded(plural: &str, group: &str, mut obj: Value) -> Result<Value, String> {
        let r = Registry::default();
        let rt = r.get(group, "v1", plural).expect("served");
        decode(rt, &mut obj).map(|()| obj).map_err(|e| e.message)
    }

    #[test]
    fn replicas_of_the_wrong_type_are_refused_as_go_does() {
        let err = decoded("deployments", "apps", json!({"spec": {"replicas": "many"}}))
            .expect_err("a string is no int32");
        assert_eq!(
            err,
            "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
        );
        let err = decoded(
            "deployments",
            "apps",
            json!({"spec": {"replicas": 3_000_000_000u64}}),
        )
        .expect_err("beyond int32");
        assert!(err.ends_with("cannot unmarshal number 3000000000 into Go struct field DeploymentSpec.spec.replicas of type int32"), "{err}");
    }

    #[test]
    fn nested_fields_name_their_struct_and_full_path() {
        let err = decoded(
            "deployments",
            "apps",
            json!({"spec": {"template": {"spec": {
            "containers": [{"name": "c", "env": [{"name": "A", "value": 7}]}]}}}}),
        )
        .expect_err("env values are strings");
        assert!(
            err.ends_with("json: cannot unmarshal number into Go struct field EnvVar.spec.template.spec.containers.env.value of type string"),
            "{err}"
        );
        let err = decoded("pods", "", json!({"spec": {"containers": "c"}})).expect_err("a list");
        assert!(
            err.ends_with("Go struct field PodSpec.spec.containers of type []v1.Container"),
            "{err}"
        );
        let err = decoded("pods", "", json!({"metadata": {"labels": {"a": 1}}}))
            .expect_err("labels are strings");
        assert!(
            err.ends_with("Go struct field ObjectMeta.metadata.labels of type string"),
            "{err}"
        );
    }

    #[test]
    fn quantities_parse_and_are_stored_canonically() {
        let pod = decoded(
            "pods",
            "",
            json!({"spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": 0.5, "memory": "1024Mi"}, "limits": {"cpu": "1000m"}}}]}}),
        )
        .expect("valid");
        let resources = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(
            resources["requests"],
            json!({"cpu": "500m", "memory": "1Gi"})
        );
        assert_eq!(resources["limits"], json!({"cpu": "1"}));
        let err = decoded(
            "pods",
            "",
            json!({"spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "lots"}}}]}}),
        )
        .expect_err("not a quantity");
        assert_eq!(
            err,
            "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }

    #[test]
    fn any_json_values_pass() {
        let crd = decoded(
            "customresourcedefinitions",
            "apiextensions.k8s.io",
            json!({"spec": {"versions": [{"name": "v1",
            "schema": {"openAPIV3Schema": {"type": "object", "additionalProperties": false, "properties": {
                "mode": {"type": "string", "default": "fast", "enum": ["fast", 1, true]},
                "list": {"type": "array", "items": {"type": "string"}}}}}}]}}),
        );
        assert!(crd.is_ok(), "{crd:?}");
        let revision = decoded(
            "controllerrevisions",
            "apps",
            json!({"revision": 1, "data": [1, "two"]}),
        );
        assert!(revision.is_ok(), "{revision:?}");
    }

    #[test]
    fn int_or_string_and_unknown_fields_pass() {
        let svc = decoded(
            "services",
            "",
            json!({"spec": {"ports": [{"port": 80, "targetPort": "http"}], "surprise": true}}),
        );
        assert!(svc.is_ok(), "{svc:?}");
        let err = decoded(
            "services",
            "",
            json!({"spec": {"ports": [{"port": 80, "targetPort": true}]}}),
        )
        .expect_err("a bool is neither");
        assert!(err.contains("of type intstr.IntOrString"), "{err}");
    }
}
