//! Machine-readable output of `status`, as `kubectl get nodeclaims` prints it: `-o json|yaml`
//! write a `kind: List` (apiVersion v1) of the NodeClaims with keys sorted and managedFields
//! left out; `-o name` writes `nodeclaim.karpenter.sh/<name>` lines. Never coloured.

use std::io::{self, Write};

use crds::NodeClaim;
use serde::Serialize;
use serde_json::{Value, json};

/// Why the list could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A NodeClaim or orphan could not be turned into JSON.
    #[error("encoding the output as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The list could not be turned into YAML.
    #[error("encoding the output as YAML: {0}")]
    Yaml(#[from] serde_saphyr::ser_error::Error),
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Io(#[from] io::Error),
}

/// The `kind: List` holding `claims`, in their given order, keys sorted like kubectl's.
///
/// Errors: a NodeClaim cannot be serialized.
pub fn list_value(claims: &[NodeClaim]) -> Result<Value, serde_json::Error> {
    let mut items = Vec::with_capacity(claims.len());
    for claim in claims {
        let mut item = serde_json::to_value(claim)?;
        if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        items.push(item);
    }
    let mut list = json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": items,
        "metadata": {"resourceVersion": ""},
    });
    list.sort_all_objects();
    Ok(list)
}

/// Writes the list as JSON indented by 4 spaces, as kubectl does.
///
/// Errors: serializing or writing failed.
pub fn write_json(out: &mut impl Write, claims: &[NodeClaim]) -> Result<(), OutputError> {
    let list = list_value(claims)?;
    let mut ser = serde_json::Serializer::with_formatter(
        &mut *out,
        serde_json::ser::PrettyFormatter::with_indent(b"    "),
    );
    list.serialize(&mut ser)?;
    writeln!(out)?;
    Ok(())
}

/// Writes any serializable value (a list of reports) as JSON indented by 4 spaces, the way
/// [`write_json`] does, fields in their declared order.
///
/// Errors: serializing or writing failed.
pub fn write_json_value<T: Serialize>(out: &mut impl Write, value: &T) -> Result<(), OutputError> {
    let mut ser = serde_json::Serializer::with_formatter(
        &mut *out,
        serde_json::ser::PrettyFormatter::with_indent(b"    "),
    );
    value.serialize(&mut ser)?;
    writeln!(out)?;
    Ok(())
}

/// Writes the list as block YAML (2-space indent, list items flush with their key).
///
/// Errors: serializing or writing failed.
pub fn write_yaml(out: &mut impl Write, claims: &[NodeClaim]) -> Result<(), OutputError> {
    write_yaml_value(out, &list_value(claims)?)
}

/// Writes any serializable value (a JSON value, a list of reports) as block YAML the way
/// [`write_yaml`] does.
///
/// Errors: serializing or writing failed.
pub fn write_yaml_value<T: Serialize>(out: &mut impl Write, list: &T) -> Result<(), OutputError> {
    let options = serde_saphyr::ser_options! {
        indent_step: 2,
        compact_list_indent: true,
        // Multi-line strings as `|` blocks, as kubectl prints them; long lines stay unfolded.
        prefer_block_scalars: true,
        folded_wrap_chars: usize::MAX,
    };
    let text = serde_saphyr::to_string_with_options(list, options)?;
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        writeln!(out)?;
    }
    Ok(())
}

/// Writes `nodeclaim.karpenter.sh/<name>`, one per line.
///
/// Errors: writing failed.
pub fn write_names(out: &mut impl Write, claims: &[NodeClaim]) -> io::Result<()> {
    for claim in claims {
        if let Some(name) = claim.metadata.name.as_deref() {
            writeln!(out, "nodeclaim.karpenter.sh/{name}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn one_claim() -> Vec<NodeClaim> {
        let mut claim = fixtures::claim("default-abcde", "default", "2025-06-01T06:47:30Z");
        fixtures::set_offering(&mut claim, "m5.large", "on-demand", "us-east-1a");
        fixtures::set_true(&mut claim, &["Launched"]);
        claim.metadata.managed_fields = Some(vec![Default::default()]);
        vec![claim]
    }

    #[test]
    fn json_snapshot() {
        let mut out = Vec::new();
        write_json(&mut out, &one_claim()).expect("json");
        let want = r#"{
    "apiVersion": "v1",
    "items": [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "creationTimestamp": "2025-06-01T06:47:30Z",
                "labels": {
                    "karpenter.sh/capacity-type": "on-demand",
                    "karpenter.sh/nodepool": "default",
                    "node.kubernetes.io/instance-type": "m5.large",
                    "topology.kubernetes.io/zone": "us-east-1a"
                },
                "name": "default-abcde",
                "uid": "uid-default-abcde"
            },
            "spec": {
                "expireAfter": "720h",
                "nodeClassRef": {
                    "group": "karpenter.k8s.aws",
                    "kind": "EC2NodeClass",
                    "name": "default"
                },
                "requirements": []
            },
            "status": {
                "conditions": [
                    {
                        "lastTransitionTime": "2025-06-01T11:00:00Z",
                        "message": "",
                        "reason": "Launched",
                        "status": "True",
                        "type": "Launched"
                    }
                ]
            }
        }
    ],
    "kind": "List",
    "metadata": {
        "resourceVersion": ""
    }
}
"#;
        let got = String::from_utf8(out).expect("utf-8");
        assert_eq!(got, want, "\n{got}");
    }

    #[test]
    fn yaml_snapshot() {
        let mut out = Vec::new();
        write_yaml(&mut out, &one_claim()).expect("yaml");
        let want = r#"apiVersion: v1
items:
- apiVersion: karpenter.sh/v1
  kind: NodeClaim
  metadata:
    creationTimestamp: "2025-06-01T06:47:30Z"
    labels:
      karpenter.sh/capacity-type: on-demand
      karpenter.sh/nodepool: default
      node.kubernetes.io/instance-type: m5.large
      topology.kubernetes.io/zone: us-east-1a
    name: default-abcde
    uid: uid-default-abcde
  spec:
    expireAfter: 720h
    nodeClassRef:
      group: karpenter.k8s.aws
      kind: EC2NodeClass
      name: default
    requirements: []
  status:
    conditions:
    - lastTransitionTime: "2025-06-01T11:00:00Z"
      message: ""
      reason: Launched
      status: "True"
      type: Launched
kind: List
metadata:
  resourceVersion: ""
"#;
        let got = String::from_utf8(out).expect("utf-8");
        assert_eq!(got, want, "\n{got}");
        let back: Value = serde_saphyr::from_str(&got).expect("yaml parses back");
        assert_eq!(back, list_value(&one_claim()).expect("list"));
    }

    #[test]
    fn yaml_multiline_strings_are_literal_blocks() {
        let mut claims = one_claim();
        let long = "x".repeat(120);
        claims[0].metadata.annotations = Some(
            [
                (
                    "example.com/script".to_owned(),
                    "line one\nline two\n".to_owned(),
                ),
                ("example.com/long".to_owned(), long.clone()),
            ]
            .into(),
        );
        let mut out = Vec::new();
        write_yaml(&mut out, &claims).expect("yaml");
        let got = String::from_utf8(out).expect("utf-8");
        assert!(
            got.contains("      example.com/script: |\n        line one\n        line two\n"),
            "{got}"
        );
        assert!(
            got.contains(&format!("      example.com/long: {long}\n")),
            "{got}"
        );
    }

    #[test]
    fn empty_list_and_names() {
        let list = list_value(&[]).expect("list");
        assert_eq!(list["items"], json!([]));
        assert_eq!(list["kind"], "List");
        let mut out = Vec::new();
        write_names(&mut out, &fixtures::sample()).expect("names");
        let got = String::from_utf8(out).expect("utf-8");
        assert_eq!(got.lines().next(), Some("nodeclaim.karpenter.sh/gpu-uvwxy"));
        assert_eq!(got.lines().count(), 6);
    }
}
