//! The CEL rules of custom resources (`x-kubernetes-validations`), evaluated on writes as
//! kube-apiserver evaluates them: on create, and on updates of the main resource with
//! transition rules (`oldSelf`) and ratcheting (an update that leaves every field holding rules
//! as it was is not evaluated, and a rule the stored object already breaks at the same field
//! does not refuse the update). A broken rule is a 422 cause worded as kube-apiserver words it:
//! `spec: Invalid value: "object": must specify exactly one of ['role', 'instanceProfile']`.
//! Rules are compiled once per CRD schema (kube-cel); only rules that evaluate to false refuse
//! a write: one this evaluator cannot run (an unsupported function) is skipped rather than
//! refusing what kube-apiserver would accept. A NodeClaim create costs about 4 ms in a debug
//! build, under the store's lock.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use kube_cel::{CompiledSchema, ErrorKind, ValidationError, Validator, compile_schema};
use serde_json::Value;

/// A CRD version's rules, compiled, and where they sit.
struct Rules {
    /// The compiled schema.
    compiled: CompiledSchema,
    /// Whether the root of the object has rules of its own (then every update is checked).
    at_root: bool,
    /// Top-level fields (e.g. `spec`) whose schema holds rules.
    fields: Vec<String>,
}

/// Compiled rules by schema (`None` for a schema without rules). The key is the address of the
/// schema the registry shares between writes; the entry keeps that schema alive, so the address
/// is never reused for another.
type Cache = HashMap<usize, (Arc<Value>, Option<Arc<Rules>>)>;

fn rules(schema: &Arc<Value>) -> Option<Arc<Rules>> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let entry = cache
        .entry(Arc::as_ptr(schema) as usize)
        .or_insert_with(|| {
            let fields: Vec<String> = schema
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter(|(_, s)| has_rules(s))
                .map(|(k, _)| k.clone())
                .collect();
            let at_root = schema.get("x-kubernetes-validations").is_some();
            let rules = (at_root || !fields.is_empty()).then(|| {
                Arc::new(Rules {
                    compiled: compile_schema(schema),
                    at_root,
                    fields,
                })
            });
            (Arc::clone(schema), rules)
        });
    entry.1.clone()
}

thread_local! {
    /// The evaluator with Kubernetes' CEL libraries registered, one per thread (building one
    /// registers every function).
    static VALIDATOR: Validator = Validator::new();
}

/// Whether the schema has any CEL rule (objects of types without rules skip evaluation).
fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.contains_key("x-kubernetes-validations") || map.values().any(has_rules)
        }
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

/// Broken rules of `obj` against the CRD version's `schema`, each as `(field, message)` for a
/// 422's causes; `old` is the stored object on an update of the main resource (transition
/// rules see it as `oldSelf`; a cause it shares is ratcheted away). Empty when every rule
/// holds.
pub fn violations(schema: &Arc<Value>, obj: &Value, old: Option<&Value>) -> Vec<(String, String)> {
    let Some(rules) = rules(schema) else {
        return Vec::new();
    };
    if let Some(old) = old
        && !rules.at_root
        && rules.fields.iter().all(|f| obj.get(f) == old.get(f))
    {
        // Ratcheting: no field a rule reads changed (a metadata or finalizer update), so no
        // rule can newly break; this spares every such write the evaluation.
        return Vec::new();
    }
    let broken = |obj: &Value, old: Option<&Value>| -> Vec<ValidationError> {
        VALIDATOR.with(|v| match v.validate_compiled(&rules.compiled, obj, old) {
            Ok(()) => Vec::new(),
            Err(errors) => errors
                .into_vec()
                .into_iter()
                .filter(|e| matches!(e.kind, ErrorKind::ValidationFailure))
                .collect(),
        })
    };
    let mut errors = broken(obj, old);
    if let (Some(old), false) = (old, errors.is_empty()) {
        // Ratcheting: what the stored object already breaks, at the same field, stays allowed.
        let before = broken(old, None);
        errors.retain(|e| {
            !before
                .iter()
                .any(|b| b.field_path == e.field_path && b.message == e.message)
        });
    }
    errors
        .into_iter()
        .map(|e| {
            let field = if e.field_path.is_empty() {
                "<root>".to_string()
            } else {
                e.field_path.clone()
            };
            let shown = type_at(schema, &e.field_path);
            (field, format!("Invalid value: \"{shown}\": {}", e.message))
        })
        .collect()
}

/// The schema type at a field path such as `spec.requirements[0].values` (`object` when the
/// path leaves the schema), which kube-apiserver shows as the invalid value of a broken rule.
fn type_at(schema: &Value, path: &str) -> String {
    let mut node = schema;
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let (key, indexes) = match segment.find('[') {
            Some(at) => (&segment[..at], segment[at..].matches('[').count()),
            None => (segment, 0),
        };
        let next = node
            .pointer(&format!(
                "/properties/{}",
                key.replace('~', "~0").replace('/', "~1")
            ))
            .or_else(|| node.get("additionalProperties"));
        let Some(mut next) = next else {
            return "object".into();
        };
        for _ in 0..indexes {
            match next
                .get("items")
                .or_else(|| next.get("additionalProperties"))
            {
                Some(inner) => next = inner,
                None => return "object".into(),
            }
        }
        node = next;
    }
    node.get("type")
        .and_then(Value::as_str)
        .unwrap_or("object")
        .to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Arc<Value> {
        Arc::new(json!({
            "type": "object",
            "properties": {"spec": {
                "type": "object",
                "x-kubernetes-validations": [{
                    "rule": "has(self.role) != has(self.profile)",
                    "message": "must specify exactly one of ['role', 'profile']",
                }],
                "properties": {
                    "role": {"type": "string", "x-kubernetes-validations": [
                        {"rule": "self != ''", "message": "role cannot be empty"}]},
                    "profile": {"type": "string"},
                    "size": {"type": "integer", "x-kubernetes-validations": [
                        {"rule": "self >= oldSelf", "message": "size may not shrink"}]},
                },
            }},
        }))
    }

    #[test]
    fn broken_rules_are_worded_as_kube_apiserver_words_them() {
        let s = schema();
        assert!(violations(&s, &json!({"spec": {"role": "r"}}), None).is_empty());
        assert_eq!(
            violations(&s, &json!({"spec": {"role": "r", "profile": "p"}}), None),
            [(
                "spec".to_string(),
                "Invalid value: \"object\": must specify exactly one of ['role', 'profile']"
                    .to_string()
            )]
        );
        assert_eq!(
            violations(&s, &json!({"spec": {"role": ""}}), None),
            [(
                "spec.role".to_string(),
                "Invalid value: \"string\": role cannot be empty".to_string()
            )]
        );
    }

    #[test]
    fn transition_rules_see_the_stored_object_and_old_breakage_is_ratcheted() {
        let s = schema();
        let old = json!({"spec": {"role": "r", "size": 3}});
        let shrunk = json!({"spec": {"role": "r", "size": 2}});
        assert_eq!(
            violations(&s, &shrunk, Some(&old))
                .into_iter()
                .map(|(_, m)| m)
                .collect::<Vec<_>>(),
            ["Invalid value: \"integer\": size may not shrink"]
        );
        assert!(
            violations(&s, &shrunk, None).is_empty(),
            "no oldSelf on create"
        );
        // A stored object that already breaks a rule can still be updated elsewhere.
        let legacy = json!({"spec": {"role": "r", "profile": "p", "size": 1}});
        let touched = json!({"spec": {"role": "r", "profile": "p", "size": 2}});
        assert!(violations(&s, &touched, Some(&legacy)).is_empty());
    }
}
