//! Builds the CustomResourceDefinitions for NodePool, NodeClaim, EC2NodeClass and NodeOverlay
//! from the Rust types, and renders them as the YAML manifests committed under `crds/manifests/` (written by
//! the `crdgen` binary, checked by `tests/manifests.rs`).
//!
//! The derive's output is adjusted to match upstream's CRDs: no `nullable` (optional fields are
//! simply omitted), no root `title`, and `apiVersion`/`kind`/`metadata` listed at the root so
//! `kubectl explain` shows them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Map, Value, json};

use crate::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};

/// File name of the NodePool CRD manifest.
pub const NODEPOOLS_FILE: &str = "karpenter.sh_nodepools.yaml";
/// File name of the NodeClaim CRD manifest.
pub const NODECLAIMS_FILE: &str = "karpenter.sh_nodeclaims.yaml";
/// File name of the EC2NodeClass CRD manifest.
pub const EC2NODECLASSES_FILE: &str = "karpenter.k8s.aws_ec2nodeclasses.yaml";
/// File name of the NodeOverlay CRD manifest.
pub const NODEOVERLAYS_FILE: &str = "karpenter.sh_nodeoverlays.yaml";

/// Comment at the top of every generated manifest.
pub const HEADER: &str = "# Generated from the Rust types in crds/src by the crdgen binary; do not edit.\n# Regenerate with: cargo run -p crds --bin crdgen\n";

/// Errors turning a CRD into YAML.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The CRD did not survive the JSON round trip used for post-processing.
    #[error("CRD JSON conversion failed: {0}")]
    Json(#[from] serde_json::Error),
    /// YAML serialization failed.
    #[error("CRD YAML serialization failed: {0}")]
    Yaml(#[from] serde_saphyr::ser::Error),
}

/// The CRDs, in the order NodePool, NodeClaim, EC2NodeClass, NodeOverlay.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        NodePool::crd(),
        NodeClaim::crd(),
        EC2NodeClass::crd(),
        NodeOverlay::crd(),
    ]
    .into_iter()
    .map(|crd| tidy(crd.clone()).unwrap_or(crd))
    .collect()
}

/// `(file name, YAML)` for each CRD, as committed under `crds/manifests/`.
pub fn manifests() -> Vec<(&'static str, String)> {
    let names = [
        NODEPOOLS_FILE,
        NODECLAIMS_FILE,
        EC2NODECLASSES_FILE,
        NODEOVERLAYS_FILE,
    ];
    names
        .into_iter()
        .zip(crds())
        .map(|(name, crd)| {
            // Serializing these fixed types cannot fail (covered by tests).
            let yaml = to_yaml(&crd).expect("CRD serializes to YAML");
            (name, yaml)
        })
        .collect()
}

/// Renders one CRD as a YAML document with the [`HEADER`].
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, GenerateError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    // Keep long single-line strings (patterns, CEL rules) on one line instead of folding them.
    options.folded_wrap_chars = 100_000;
    // `JSONSchemaProps` keeps minimum/maximum as floats; write whole numbers as integers.
    let mut value = serde_json::to_value(crd)?;
    integerize(&mut value);
    let body = serde_saphyr::to_string_with_options(&value, options)?;
    Ok(format!("{HEADER}---\n{body}"))
}

fn integerize(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                // Exact: whole and well inside i64's range.
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integerize),
        Value::Object(map) => map.values_mut().for_each(integerize),
        _ => {}
    }
}

fn tidy(crd: CustomResourceDefinition) -> Result<CustomResourceDefinition, serde_json::Error> {
    let kind = crd.spec.names.kind.clone();
    let mut value = serde_json::to_value(crd)?;
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for version in versions {
            if let Some(Value::Object(root)) = version.pointer_mut("/schema/openAPIV3Schema") {
                strip_nullable(root);
                root.remove("title");
                add_root_properties(root);
                add_root_rules(&kind, root);
            }
        }
    }
    serde_json::from_value(value)
}

/// Removes `nullable` from a schema and all its subschemas (but not properties named so).
fn strip_nullable(schema: &mut Map<String, Value>) {
    schema.remove("nullable");
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for prop in props.values_mut() {
            if let Value::Object(p) = prop {
                strip_nullable(p);
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(Value::Object(sub)) = schema.get_mut(key) {
            strip_nullable(sub);
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(subs)) = schema.get_mut(key) {
            for sub in subs {
                if let Value::Object(s) = sub {
                    strip_nullable(s);
                }
            }
        }
    }
}

/// Rules on the whole object (`x-kubernetes-validations` at the schema root), which the derive
/// cannot attach: the NodePool name limit ([`crate::nodepool::NODEPOOL_NAME_RULE`]).
fn add_root_rules(kind: &str, root: &mut Map<String, Value>) {
    if kind == "NodePool" {
        root.insert(
            "x-kubernetes-validations".into(),
            json!([{
                "rule": crate::nodepool::NODEPOOL_NAME_RULE,
                "message": crate::nodepool::NODEPOOL_NAME_MESSAGE,
            }]),
        );
    }
}

fn add_root_properties(root: &mut Map<String, Value>) {
    let props = root
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(props) = props {
        props.insert(
            "apiVersion".into(),
            json!({"description": "The versioned schema of this object, `group/version`.", "type": "string"}),
        );
        props.insert(
            "kind".into(),
            json!({"description": "The REST resource this object represents, in CamelCase.", "type": "string"}),
        );
        props.insert("metadata".into(), json!({"type": "object"}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_have_expected_names() {
        let names: Vec<_> = crds().into_iter().filter_map(|c| c.metadata.name).collect();
        assert_eq!(
            names,
            [
                "nodepools.karpenter.sh",
                "nodeclaims.karpenter.sh",
                "ec2nodeclasses.karpenter.k8s.aws",
                "nodeoverlays.karpenter.sh"
            ]
        );
        for (name, yaml) in manifests() {
            assert!(yaml.starts_with(HEADER), "{name}");
            assert!(!yaml.contains("nullable"), "{name}");
            let back: CustomResourceDefinition =
                serde_saphyr::from_str(yaml.trim_start_matches(HEADER)).expect("parse");
            assert!(back.spec.versions[0].schema.is_some(), "{name}");
        }
    }
}
