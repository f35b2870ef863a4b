//! Structural-schema handling of custom resources as kube-apiserver does it on every write:
//! apply `default`s, prune (or, with `fieldValidation=Strict`, reject) unknown fields, and
//! validate types, enums, required fields, lengths, counts, bounds and patterns against the CRD's
//! `openAPIV3Schema`. CEL rules (`x-kubernetes-validations`) are evaluated by [`crate::cel`].

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

/// One validation failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path like `spec.template.spec.requirements[0].operator`.
    pub field: String,
    /// kube-apiserver's wording, e.g. `Unsupported value: "Near": supported values: "In", "NotIn"`.
    pub message: String,
}

/// What a write's schema pass found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Validation failures (the write is refused with 422).
    pub errors: Vec<FieldError>,
    /// Unknown fields that were pruned (refused under `fieldValidation=Strict`).
    pub unknown: Vec<String>,
}

fn regex(pattern: &str) -> Option<Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    cache
        .entry(pattern.to_string())
        .or_insert_with(|| Regex::new(pattern).ok())
        .clone()
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Default, prune and validate a whole object (its `apiVersion`, `kind` and `metadata` are the
/// API server's business and skipped).
pub fn process(object: &mut Value, schema: &Value) -> Outcome {
    let mut out = Outcome::default();
    let Some(obj) = object.as_object_mut() else {
        out.errors.push(FieldError {
            field: String::new(),
            message: "must be an object".into(),
        });
        return out;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    apply_defaults(obj, schema);
    let keys: Vec<String> = obj.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&key)) {
            Some(sub) => {
                if let Some(v) = obj.get_mut(&key) {
                    walk(v, sub, &key, &mut out);
                }
            }
            None if preserves_unknown(schema) => {}
            None => {
                obj.remove(&key);
                out.unknown.push(key);
            }
        }
    }
    check_required(obj, schema, "", &mut out);
    out
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn apply_defaults(obj: &mut Map<String, Value>, schema: &Value) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (k, sub) in props {
        if !obj.contains_key(k)
            && let Some(d) = sub.get("default")
        {
            obj.insert(k.clone(), d.clone());
        }
    }
}

fn check_required(obj: &Map<String, Value>, schema: &Value, path: &str, out: &mut Outcome) {
    for r in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(key) = r.as_str()
            && !obj.contains_key(key)
        {
            out.errors.push(FieldError {
                field: join(path, key),
                message: "Required value".into(),
            });
        }
    }
}

fn walk(value: &mut Value, schema: &Value, path: &str, out: &mut Outcome) {
    let mut err = |message: String| {
        out.errors.push(FieldError {
            field: path.to_string(),
            message,
        })
    };
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true)
            && schema.get("type").is_some()
        {
            err(format!(
                "Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                schema["type"].as_str().unwrap_or("object")
            ));
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    if int_or_string {
        if !matches!(type_name(value), "integer" | "string") {
            err(format!(
                "Invalid value: \"{}\": {path} in body must be of type integer,string: \"{}\"",
                type_name(value),
                type_name(value)
            ));
            return;
        }
    } else if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let got = type_name(value);
        let ok = got == want || (want == "number" && got == "integer");
        if !ok {
            err(format!(
                "Invalid value: \"{got}\": {path} in body must be of type {want}: \"{got}\""
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(ToString::to_string).collect();
        err(format!(
            "Unsupported value: {value}: supported values: {}",
            list.join(", ")
        ));
    }
    match value {
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .filter(|m| len > *m)
            {
                err(format!("Too long: may not be more than {max} bytes"));
            }
            if let Some(min) = schema
                .get("minLength")
                .and_then(Value::as_u64)
                .filter(|m| len < *m)
            {
                err(format!(
                    "Invalid value: \"{s}\": {path} in body should be at least {min} chars long"
                ));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str)
                && regex(p).is_some_and(|re| !re.is_match(s))
            {
                err(format!(
                    "Invalid value: \"{s}\": {path} in body should match '{p}'"
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = schema
                .get("minimum")
                .and_then(Value::as_f64)
                .filter(|m| x < *m)
            {
                err(format!(
                    "Invalid value: {n}: {path} in body should be greater than or equal to {min}"
                ));
            }
            if let Some(max) = schema
                .get("maximum")
                .and_then(Value::as_f64)
                .filter(|m| x > *m)
            {
                err(format!(
                    "Invalid value: {n}: {path} in body should be less than or equal to {max}"
                ));
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(max) = schema
                .get("maxItems")
                .and_then(Value::as_u64)
                .filter(|m| len > *m)
            {
                err(format!("Too many: {len}: must have at most {max} items"));
            }
            if let Some(min) = schema
                .get("minItems")
                .and_then(Value::as_u64)
                .filter(|m| len < *m)
            {
                err(format!(
                    "Invalid value: {len}: {path} in body should have at least {min} items"
                ));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(item, item_schema, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(obj) => {
            let len = obj.len() as u64;
            if let Some(max) = schema
                .get("maxProperties")
                .and_then(Value::as_u64)
                .filter(|m| len > *m)
            {
                err(format!("Too many: {len}: must have at most {max} items"));
            }
            apply_defaults(obj, schema);
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let keys: Vec<String> = obj.keys().cloned().collect();
            for key in keys {
                let sub = props.and_then(|p| p.get(&key)).or(additional);
                match sub {
                    Some(sub) => {
                        if let Some(v) = obj.get_mut(&key) {
                            walk(v, sub, &join(path, &key), out);
                        }
                    }
                    None if props.is_none()
                        && schema.get("additionalProperties").is_none()
                        && schema.get("type").is_none() => {}
                    None if preserves_unknown(schema)
                        || schema.get("additionalProperties") == Some(&Value::Bool(true)) => {}
                    None => {
                        obj.remove(&key);
                        out.unknown.push(join(path, &key));
                    }
                }
            }
            check_required(obj, schema, path, out);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["nodeClassRef"], "properties": {
                "weight": {"type": "integer", "minimum": 1, "maximum": 100},
                "expireAfter": {"type": "string", "default": "720h", "pattern": "^(([0-9]+(s|m|h))+|Never)$"},
                "nodeClassRef": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1}}},
                "limits": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}},
                "requirements": {"type": "array", "maxItems": 2, "items": {"type": "object", "required": ["key", "operator"], "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string", "enum": ["In", "NotIn"]}}}}}},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
    }

    #[test]
    fn defaults_and_valid_objects_pass() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
            "spec": {"nodeClassRef": {"name": "d"}, "limits": {"cpu": 10, "memory": "10Gi"}}, "status": {"anything": 1}});
        let out = process(&mut obj, &schema());
        assert_eq!(out, Outcome::default());
        assert_eq!(obj["spec"]["expireAfter"], "720h");
    }

    #[test]
    fn errors_name_the_field_like_kube_apiserver() {
        let mut obj = json!({"spec": {"weight": 0, "expireAfter": "soon", "limits": {"cpu": true},
            "requirements": [{"key": "k", "operator": "Near"}, {"operator": "In"}, {"key": "x", "operator": "In"}]}});
        let out = process(&mut obj, &schema());
        let fields: Vec<&str> = out.errors.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"spec.weight"));
        assert!(fields.contains(&"spec.expireAfter"));
        assert!(fields.contains(&"spec.limits.cpu"));
        assert!(fields.contains(&"spec.requirements"), "maxItems");
        assert!(fields.contains(&"spec.requirements[0].operator"));
        assert!(fields.contains(&"spec.requirements[1].key"));
        assert!(fields.contains(&"spec.nodeClassRef"));
        let op = out
            .errors
            .iter()
            .find(|e| e.field == "spec.requirements[0].operator")
            .expect("enum error");
        assert_eq!(
            op.message,
            r#"Unsupported value: "Near": supported values: "In", "NotIn""#
        );
    }

    #[test]
    fn unknown_fields_are_pruned_and_reported() {
        let mut obj =
            json!({"spec": {"nodeClassRef": {"name": "d"}, "expireAftr": "1h"}, "extra": 1});
        let out = process(&mut obj, &schema());
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let mut unknown = out.unknown.clone();
        unknown.sort();
        assert_eq!(
            unknown,
            vec!["extra".to_string(), "spec.expireAftr".to_string()]
        );
        assert!(obj["spec"].get("expireAftr").is_none() && obj.get("extra").is_none());
    }
}
