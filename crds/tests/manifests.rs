//! The committed CRD manifests in `crds/manifests/` must equal what the types generate, and the
//! generated schemas must be structural and carry upstream's names, columns and subresources.

use std::path::PathBuf;

use crds::generate;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value};

fn manifests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests")
}

#[test]
fn committed_manifests_are_current() {
    let mut stale = Vec::new();
    for (name, yaml) in generate::manifests() {
        let path = manifests_dir().join(name);
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == yaml => {}
            Ok(_) => stale.push(format!("{} differs from the generated CRD", path.display())),
            Err(e) => stale.push(format!("{} cannot be read: {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "CRD manifests are stale; run `cargo run -p crds --bin crdgen` and commit the result:\n  {}",
        stale.join("\n  ")
    );
}

fn schema_of(crd: &CustomResourceDefinition) -> Value {
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("CRD has an OpenAPI schema");
    serde_json::to_value(schema).expect("schema to JSON")
}

/// Checks the rules an apiextensions API server applies to a structural schema, collecting
/// violations with their paths.
fn check_structural(path: &str, schema: &Map<String, Value>, errs: &mut Vec<String>) {
    for forbidden in [
        "$ref",
        "$schema",
        "definitions",
        "$defs",
        "oneOf",
        "allOf",
        "not",
        "nullable",
        "const",
    ] {
        if schema.contains_key(forbidden) {
            errs.push(format!("{path}: `{forbidden}` is not allowed"));
        }
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if let Some(any_of) = schema.get("anyOf") {
        let expected: Value = serde_json::json!([{"type": "integer"}, {"type": "string"}]);
        if !int_or_string || any_of != &expected {
            errs.push(format!(
                "{path}: anyOf only allowed as the int-or-string pair"
            ));
        }
    }
    let ty = schema.get("type").and_then(Value::as_str);
    if ty.is_none() && !int_or_string && !preserve {
        errs.push(format!("{path}: missing type"));
    }
    if int_or_string && ty.is_some() {
        errs.push(format!("{path}: int-or-string must not set type"));
    }
    if schema.contains_key("properties") && schema.contains_key("additionalProperties") {
        errs.push(format!(
            "{path}: properties and additionalProperties are exclusive"
        ));
    }
    match ty {
        Some("array") => match schema.get("items") {
            Some(Value::Object(items)) => check_structural(&format!("{path}[]"), items, errs),
            _ => errs.push(format!("{path}: array without a single items schema")),
        },
        Some("object") if !path.ends_with(".metadata") => {
            // Such an object would be structural but prune every field set on it.
            if !schema.contains_key("properties")
                && !schema.contains_key("additionalProperties")
                && !preserve
            {
                errs.push(format!("{path}: object without properties, additionalProperties or preserve-unknown-fields"));
            }
        }
        Some("object" | "string" | "integer" | "number" | "boolean") | None => {}
        Some(other) => errs.push(format!("{path}: unknown type {other}")),
    }
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (name, prop) in props {
            match prop {
                Value::Object(p) => check_structural(&format!("{path}.{name}"), p, errs),
                _ => errs.push(format!("{path}.{name}: schema must be an object")),
            }
        }
    }
    match schema.get("additionalProperties") {
        Some(Value::Object(ap)) => check_structural(&format!("{path}[*]"), ap, errs),
        Some(Value::Bool(_)) => errs.push(format!(
            "{path}: boolean additionalProperties is not structural"
        )),
        _ => {}
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        let props = schema.get("properties").and_then(Value::as_object);
        for r in required {
            let known = r
                .as_str()
                .is_some_and(|r| props.is_some_and(|p| p.contains_key(r)));
            if !known {
                errs.push(format!("{path}: required {r} is not a property"));
            }
        }
    }
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
        let keys = schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array);
        let item_required = schema
            .get("items")
            .and_then(|i| i.get("required"))
            .and_then(Value::as_array);
        match (keys, item_required) {
            (Some(keys), Some(req)) if keys.iter().all(|k| req.contains(k)) => {}
            _ => errs.push(format!(
                "{path}: map list keys must be required item properties"
            )),
        }
    }
    if let Some(Value::Array(rules)) = schema.get("x-kubernetes-validations") {
        for rule in rules {
            let ok = rule
                .get("rule")
                .and_then(Value::as_str)
                .is_some_and(|r| !r.is_empty())
                && rule
                    .get("message")
                    .and_then(Value::as_str)
                    .is_some_and(|m| !m.is_empty());
            if !ok {
                errs.push(format!(
                    "{path}: validation rule needs a rule and a message: {rule}"
                ));
            }
        }
    }
    if let Some(default) = schema.get("default") {
        check_default(path, schema, default, errs);
    }
}

/// A default must survive pruning: every key it sets is a known property.
fn check_default(path: &str, schema: &Map<String, Value>, default: &Value, errs: &mut Vec<String>) {
    match default {
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema
                .get("additionalProperties")
                .and_then(Value::as_object);
            for (k, v) in obj {
                match (
                    props.and_then(|p| p.get(k)).and_then(Value::as_object),
                    additional,
                ) {
                    (Some(sub), _) | (None, Some(sub)) => {
                        check_default(&format!("{path}.{k}"), sub, v, errs)
                    }
                    (None, None) => errs.push(format!("{path}: default sets unknown field {k}")),
                }
            }
        }
        Value::Array(items) => match schema.get("items").and_then(Value::as_object) {
            Some(sub) => items
                .iter()
                .for_each(|i| check_default(&format!("{path}[]"), sub, i, errs)),
            None => errs.push(format!("{path}: array default without items schema")),
        },
        Value::String(_) if schema.get("type").and_then(Value::as_str) != Some("string") => {
            errs.push(format!("{path}: string default on a non-string field"));
        }
        Value::Number(_)
            if !matches!(
                schema.get("type").and_then(Value::as_str),
                Some("integer" | "number")
            ) =>
        {
            errs.push(format!("{path}: numeric default on a non-numeric field"));
        }
        _ => {}
    }
}

#[test]
fn schemas_are_structural() {
    for crd in generate::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let schema = schema_of(&crd);
        let mut errs = Vec::new();
        match schema.as_object() {
            Some(root) => check_structural(&name, root, &mut errs),
            None => errs.push(format!("{name}: schema is not an object")),
        }
        assert!(
            errs.is_empty(),
            "non-structural schema:\n  {}",
            errs.join("\n  ")
        );
    }
}

fn find(name: &str) -> CustomResourceDefinition {
    generate::crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name}"))
}

fn columns(crd: &CustomResourceDefinition) -> Vec<(String, String, String, i32)> {
    crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| {
            (
                c.name.clone(),
                c.type_.clone(),
                c.json_path.clone(),
                c.priority.unwrap_or(0),
            )
        })
        .collect()
}

fn cols(spec: &[(&str, &str, &str, i32)]) -> Vec<(String, String, String, i32)> {
    spec.iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), *d))
        .collect()
}

#[test]
fn names_columns_and_subresources_match_upstream() {
    let ready = r#".status.conditions[?(@.type=="Ready")].status"#;

    let np = find("nodepools.karpenter.sh");
    assert_eq!(np.spec.scope, "Cluster");
    assert_eq!(
        np.spec.names.categories,
        Some(vec!["karpenter".to_string()])
    );
    assert_eq!(np.spec.names.short_names, None);
    assert_eq!(
        columns(&np),
        cols(&[
            (
                "NodeClass",
                "string",
                ".spec.template.spec.nodeClassRef.name",
                0
            ),
            ("Nodes", "string", ".status.nodes", 0),
            ("Ready", "string", ready, 0),
            ("Age", "date", ".metadata.creationTimestamp", 0),
            ("Weight", "integer", ".spec.weight", 1),
            ("CPU", "string", ".status.resources.cpu", 1),
            ("Memory", "string", ".status.resources.memory", 1),
        ])
    );
    let sub = np.spec.versions[0]
        .subresources
        .as_ref()
        .expect("subresources");
    assert!(sub.status.is_some());
    let scale = sub.scale.as_ref().expect("scale subresource");
    assert_eq!(
        (
            scale.spec_replicas_path.as_str(),
            scale.status_replicas_path.as_str()
        ),
        (".spec.replicas", ".status.nodes")
    );

    let nc = find("nodeclaims.karpenter.sh");
    assert_eq!(nc.spec.scope, "Cluster");
    assert_eq!(
        nc.spec.names.categories,
        Some(vec!["karpenter".to_string()])
    );
    assert_eq!(
        columns(&nc),
        cols(&[
            (
                "Type",
                "string",
                r".metadata.labels.node\.kubernetes\.io/instance-type",
                0
            ),
            (
                "Capacity",
                "string",
                r".metadata.labels.karpenter\.sh/capacity-type",
                0
            ),
            (
                "Zone",
                "string",
                r".metadata.labels.topology\.kubernetes\.io/zone",
                0
            ),
            ("Node", "string", ".status.nodeName", 0),
            ("Ready", "string", ready, 0),
            ("Age", "date", ".metadata.creationTimestamp", 0),
            ("ImageID", "string", ".status.imageID", 1),
            ("ID", "string", ".status.providerID", 1),
            (
                "NodePool",
                "string",
                r".metadata.labels.karpenter\.sh/nodepool",
                1
            ),
            ("NodeClass", "string", ".spec.nodeClassRef.name", 1),
            (
                "Drifted",
                "string",
                r#".status.conditions[?(@.type=="Drifted")].status"#,
                1
            ),
        ])
    );
    let sub = nc.spec.versions[0]
        .subresources
        .as_ref()
        .expect("subresources");
    assert!(sub.status.is_some() && sub.scale.is_none());

    let ec2 = find("ec2nodeclasses.karpenter.k8s.aws");
    assert_eq!(ec2.spec.scope, "Cluster");
    assert_eq!(
        ec2.spec.names.categories,
        Some(vec!["karpenter".to_string()])
    );
    assert_eq!(
        ec2.spec.names.short_names,
        Some(vec!["ec2nc".to_string(), "ec2ncs".to_string()])
    );
    assert_eq!(ec2.spec.names.plural, "ec2nodeclasses");
    assert_eq!(ec2.spec.names.singular.as_deref(), Some("ec2nodeclass"));
    assert_eq!(
        columns(&ec2),
        cols(&[
            ("Ready", "string", ready, 0),
            ("Age", "date", ".metadata.creationTimestamp", 0),
            ("Role", "string", ".spec.role", 1),
        ])
    );

    let no = find("nodeoverlays.karpenter.sh");
    assert_eq!(no.spec.scope, "Cluster");
    assert_eq!(no.spec.group, "karpenter.sh");
    assert_eq!(no.spec.versions[0].name, "v1alpha1");
    assert_eq!(
        no.spec.names.categories,
        Some(vec!["karpenter".to_string()])
    );
    assert_eq!(
        no.spec.names.short_names,
        Some(vec!["overlays".to_string()])
    );
    assert_eq!(no.spec.names.singular.as_deref(), Some("nodeoverlay"));
    assert_eq!(
        columns(&no),
        cols(&[
            ("Ready", "string", ready, 0),
            ("Age", "date", ".metadata.creationTimestamp", 0),
            ("Weight", "integer", ".spec.weight", 1),
        ])
    );
    let sub = no.spec.versions[0]
        .subresources
        .as_ref()
        .expect("subresources");
    assert!(sub.status.is_some() && sub.scale.is_none());
    let schema = schema_of(&no);
    assert_eq!(
        schema.pointer("/properties/spec/required"),
        Some(&serde_json::json!(["requirements"]))
    );
    assert_eq!(
        schema.pointer("/properties/spec/properties/weight/maximum"),
        Some(&serde_json::json!(10000.0))
    );
}

#[test]
fn defaults_appear_in_schema() {
    let np = schema_of(&find("nodepools.karpenter.sh"));
    let spec = "/properties/spec/properties";
    assert_eq!(
        np.pointer(&format!(
            "{spec}/template/properties/spec/properties/expireAfter/default"
        )),
        Some(&"720h".into())
    );
    assert_eq!(
        np.pointer(&format!(
            "{spec}/disruption/properties/consolidationPolicy/default"
        )),
        Some(&"WhenEmptyOrUnderutilized".into())
    );
    assert_eq!(
        np.pointer(&format!(
            "{spec}/disruption/properties/consolidateAfter/default"
        )),
        Some(&"0s".into())
    );
    assert_eq!(
        np.pointer(&format!("{spec}/disruption/properties/budgets/default")),
        Some(&serde_json::json!([{"nodes": "10%"}]))
    );
    assert_eq!(
        np.pointer("/properties/status/properties/nodes/default"),
        Some(&0.into())
    );

    let nc = schema_of(&find("nodeclaims.karpenter.sh"));
    assert_eq!(
        nc.pointer(&format!("{spec}/expireAfter/default")),
        Some(&"720h".into())
    );

    let ec2 = schema_of(&find("ec2nodeclasses.karpenter.k8s.aws"));
    assert_eq!(
        ec2.pointer(&format!("{spec}/metadataOptions/default")),
        Some(
            &serde_json::json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"})
        )
    );
    assert_eq!(
        ec2.pointer(&format!(
            "{spec}/kubelet/x-kubernetes-preserve-unknown-fields"
        )),
        Some(&Value::Bool(true))
    );
}

#[test]
fn every_field_is_documented() {
    fn walk(path: &str, schema: &Value, missing: &mut Vec<String>) {
        if let Some(Value::Object(props)) = schema.get("properties") {
            for (name, prop) in props {
                let p = format!("{path}.{name}");
                let documented = prop
                    .get("description")
                    .and_then(Value::as_str)
                    .is_some_and(|d| !d.is_empty());
                if !documented && name != "metadata" {
                    missing.push(p.clone());
                }
                walk(&p, prop, missing);
            }
        }
        if let Some(items) = schema.get("items") {
            walk(&format!("{path}[]"), items, missing);
        }
    }
    for crd in generate::crds() {
        let mut missing = Vec::new();
        walk(
            crd.metadata.name.as_deref().unwrap_or(""),
            &schema_of(&crd),
            &mut missing,
        );
        assert!(
            missing.is_empty(),
            "fields without a description (kubectl explain text):\n  {}",
            missing.join("\n  ")
        );
    }
}
