//! Nothing accepted is ignored: every leaf of the `spec` of NodePool, NodeClaim, EC2NodeClass
//! and NodeOverlay, as the generated CRDs describe it, is either honoured (its entry in
//! `crds::support::FIELDS` names a test that exists) or reported (set, it is named by
//! `crds::support::unsupported`, which the controllers turn into an `UnsupportedField` Event).

use std::path::PathBuf;

use crds::generate;
use crds::support::{FieldSupport, covering, unsupported};
use serde_json::{Map, Value, json};

/// Every leaf path under `spec` of `schema`, arrays of objects as `name[]`, with its schema.
fn leaves(schema: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            leaves(v, &format!("{path}.{k}"), out);
        }
        return;
    }
    if let Some(items) = schema
        .get("items")
        .filter(|i| i.get("properties").is_some())
    {
        leaves(items, &format!("{path}[]"), out);
        return;
    }
    out.push((path.to_string(), schema.clone()));
}

/// A value of the leaf's type: its first enum value, else `true`, `1`, `"1"`, `["1"]` or
/// `{"example.com/x": "1"}`.
fn sample(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("boolean") => json!(true),
        Some("integer") | Some("number") => json!(1),
        Some("array") => json!(["1"]),
        Some("object") => json!({"example.com/x": "1"}),
        _ if schema.get("x-kubernetes-int-or-string").is_some() => json!("1"),
        _ => json!("1"),
    }
}

/// `{"spec": ...}` with `path` (from `spec`) set to `value`, arrays of one item.
fn with(path: &str, value: Value) -> Value {
    let segments: Vec<&str> = path.split('.').collect();
    fn build(segments: &[&str], value: Value) -> Value {
        let Some((first, rest)) = segments.split_first() else {
            return value;
        };
        let mut m = Map::new();
        match first.strip_suffix("[]") {
            Some(name) => m.insert(name.to_string(), json!([build(rest, value)])),
            None => m.insert(first.to_string(), build(rest, value)),
        };
        Value::Object(m)
    }
    build(&segments, value)
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn proof_exists(proof: &str) -> Result<(), String> {
    crds::support::proof_exists(&repo_root(), proof)
}

#[test]
fn every_field() {
    let mut problems = Vec::new();
    let mut counted = 0;
    for crd in generate::crds() {
        let kind = crd.spec.names.kind.clone();
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema json");
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        let mut found = Vec::new();
        leaves(spec, "spec", &mut found);
        for (leaf, leaf_schema) in found {
            counted += 1;
            let Some(entry) = covering(&kind, &leaf) else {
                problems.push(format!("{kind} {leaf}: no entry in crds::support::FIELDS"));
                continue;
            };
            check(&kind, &leaf, &leaf_schema, entry, &mut problems);
        }
    }
    assert!(
        counted > 100,
        "only {counted} leaves found: the walk is broken"
    );
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

fn check(
    kind: &str,
    leaf: &str,
    leaf_schema: &Value,
    entry: &FieldSupport,
    problems: &mut Vec<String>,
) {
    if let Some(proof) = entry.proof
        && let Err(e) = proof_exists(proof)
    {
        problems.push(format!("{kind} {leaf}: {e}"));
    }
    match entry.reported {
        None if entry.proof.is_none() => {
            problems.push(format!("{kind} {leaf}: neither proved nor reported"));
        }
        Some(r) if r.value.is_some() && entry.proof.is_none() => problems.push(format!(
            "{kind} {leaf}: only the value {:?} is reported, and no test proves the rest",
            r.value
        )),
        None => {}
        Some(r) => {
            let value = r.value.map_or_else(|| sample(leaf_schema), |v| json!(v));
            let object = with(leaf, value);
            let named = unsupported(kind, &object["spec"]);
            if !named.iter().any(|(path, _)| *path == entry.path) {
                problems.push(format!(
                    "{kind} {leaf}: reported, but setting it ({object}) is not named: {named:?}"
                ));
            }
        }
    }
}

#[test]
fn a_node_class_setting_every_launch_setting_is_not_reported() {
    // Each reaches the launch (karpenter/tests/launch_template_moto.rs), so none is named,
    // `false` and `0` included.
    let spec = json!({
        "associatePublicIPAddress": false,
        "ipPrefixCount": 0,
        "placementGroupSelector": {"name": "training"},
        "networkInterfaces": [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}],
        "connectionTracking": {"udpTimeout": 30},
        "context": "ctx-1",
        "cpuOptions": {"nestedVirtualization": "enabled"},
        "blockDeviceMappings": [{"ebs": {"snapshotID": "snap-1", "volumeInitializationRate": 100}}]
    });
    let named = unsupported("EC2NodeClass", &spec);
    assert!(named.is_empty(), "{named:?}");
}

#[test]
fn the_status_page_lists_every_field_and_gate_not_honoured() {
    let status =
        std::fs::read_to_string(repo_root().join("docs/status.md")).expect("docs/status.md");
    let section = status
        .split("## Accepted but not honoured yet")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/status.md section \"Accepted but not honoured yet\"");
    let mut missing = Vec::new();
    for f in crds::support::FIELDS {
        let Some(r) = f.reported else { continue };
        let shown = match r.value {
            Some(v) => format!("`{}: {v}`", f.path.rsplit('.').next().unwrap_or(f.path)),
            None => format!("`{}`", f.path),
        };
        let row = format!("| {} | ", f.kind);
        if !section
            .lines()
            .any(|l| l.starts_with(&row) && l.contains(&shown))
            && !section.contains(&format!("`{}: {}`", f.path, r.value.unwrap_or_default()))
        {
            missing.push(format!("{} {shown}", f.kind));
        }
    }
    for g in crds::support::GATES {
        if g.support.is_err() && !section.contains(&format!("| gate | `{}`", g.name)) {
            missing.push(format!("gate {}", g.name));
        }
    }
    assert!(missing.is_empty(), "not in docs/status.md: {missing:?}");
}
