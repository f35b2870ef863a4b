//! Upstream's example manifests (`examples/upstream/nodepools/`, vendored unchanged from
//! aws/karpenter-provider-aws `examples/v1/`) must parse into our types and come back out
//! without losing anything.
//!
//! The comparison is strict but fair: every path of the original document must exist in our
//! re-serialized object with the same value (a YAML integer quantity such as `cpu: 100` may come
//! back as the string `"100"`, which is what the API server stores), and every path we add must
//! be a documented default with its default value.

use std::path::{Path, PathBuf};

use crds::{EC2NodeClass, NodePool};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, Debug, PartialEq)]
#[serde(tag = "kind")]
enum Doc {
    NodePool(Box<NodePool>),
    EC2NodeClass(Box<EC2NodeClass>),
}

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/upstream/nodepools")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    files
}

/// Defaults our types add when a field is absent, by JSON pointer (relative to the object) and
/// kind. A path we add must be listed here with exactly this value.
fn added_default(kind: &str, pointer: &str) -> Option<Value> {
    let v = match (kind, pointer) {
        ("NodePool", "/spec/disruption") => json!({
            "consolidateAfter": "0s",
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "budgets": [{"nodes": "10%"}]
        }),
        ("NodePool", "/spec/disruption/consolidateAfter") => json!("0s"),
        ("NodePool", "/spec/disruption/consolidationPolicy") => json!("WhenEmptyOrUnderutilized"),
        ("NodePool", "/spec/disruption/budgets") => json!([{"nodes": "10%"}]),
        ("NodePool", "/spec/template/spec/expireAfter") => json!("720h"),
        ("EC2NodeClass", "/spec/metadataOptions") => json!({
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required"
        }),
        ("EC2NodeClass", "/spec/metadataOptions/httpEndpoint") => json!("enabled"),
        ("EC2NodeClass", "/spec/metadataOptions/httpProtocolIPv6") => json!("disabled"),
        ("EC2NodeClass", "/spec/metadataOptions/httpPutResponseHopLimit") => json!(1),
        ("EC2NodeClass", "/spec/metadataOptions/httpTokens") => json!("required"),
        _ => return None,
    };
    Some(v)
}

fn same_scalar(original: &Value, ours: &Value) -> bool {
    match (original, ours) {
        // Quantities written as YAML numbers are stored as strings.
        (Value::Number(n), Value::String(s)) => n.to_string() == *s,
        _ => original == ours,
    }
}

/// Compares `original` with `ours`, collecting every difference as a message.
fn compare(kind: &str, pointer: &str, original: &Value, ours: &Value, diffs: &mut Vec<String>) {
    match (original, ours) {
        (Value::Object(o), Value::Object(u)) => {
            for (k, ov) in o {
                let p = format!("{pointer}/{k}");
                match u.get(k) {
                    Some(uv) => compare(kind, &p, ov, uv, diffs),
                    None => diffs.push(format!("{p}: lost (was {ov})")),
                }
            }
            for (k, uv) in u {
                if o.contains_key(k) {
                    continue;
                }
                let p = format!("{pointer}/{k}");
                match added_default(kind, &p) {
                    Some(expected) if expected == *uv => {}
                    Some(expected) => {
                        diffs.push(format!("{p}: added {uv}, expected default {expected}"))
                    }
                    None => diffs.push(format!("{p}: added {uv}, which is not a default")),
                }
            }
        }
        (Value::Array(o), Value::Array(u)) => {
            if o.len() != u.len() {
                diffs.push(format!("{pointer}: {} items became {}", o.len(), u.len()));
            }
            for (i, (ov, uv)) in o.iter().zip(u).enumerate() {
                compare(kind, &format!("{pointer}/{i}"), ov, uv, diffs);
            }
        }
        _ if same_scalar(original, ours) => {}
        _ => diffs.push(format!("{pointer}: {original} became {ours}")),
    }
}

#[test]
fn upstream_examples_round_trip() {
    let dir = examples_dir();
    let files = yaml_files(&dir);
    assert!(
        !files.is_empty(),
        "no example manifests in {}",
        dir.display()
    );
    let (mut nodepools, mut nodeclasses) = (0, 0);
    let mut failures = Vec::new();
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{name}: {e}"));
        let values: Vec<Value> =
            serde_saphyr::from_str_multiple(&text).unwrap_or_else(|e| panic!("{name}: YAML: {e}"));
        let values: Vec<Value> = values.into_iter().filter(|v| !v.is_null()).collect();
        let typed: Vec<Doc> = serde_saphyr::from_str_multiple(&text)
            .unwrap_or_else(|e| panic!("{name}: typed parse: {e}"));
        assert_eq!(values.len(), typed.len(), "{name}: document count");
        assert!(!values.is_empty(), "{name}: no documents");
        for (i, (original, doc)) in values.iter().zip(&typed).enumerate() {
            let kind = original.get("kind").and_then(Value::as_str).unwrap_or("");
            let (ours, reparsed) = match doc {
                Doc::NodePool(np) => {
                    nodepools += 1;
                    let ours = serde_json::to_value(np.as_ref()).expect("serialize NodePool");
                    let back: NodePool =
                        serde_json::from_value(ours.clone()).expect("re-parse NodePool");
                    let via_value: NodePool =
                        serde_json::from_value(original.clone()).expect("NodePool from JSON");
                    assert_eq!(
                        &via_value,
                        np.as_ref(),
                        "{name}#{i}: YAML and JSON parses differ"
                    );
                    (ours, Doc::NodePool(Box::new(back)))
                }
                Doc::EC2NodeClass(nc) => {
                    nodeclasses += 1;
                    let ours = serde_json::to_value(nc.as_ref()).expect("serialize EC2NodeClass");
                    let back: EC2NodeClass =
                        serde_json::from_value(ours.clone()).expect("re-parse EC2NodeClass");
                    let via_value: EC2NodeClass =
                        serde_json::from_value(original.clone()).expect("EC2NodeClass from JSON");
                    assert_eq!(
                        &via_value,
                        nc.as_ref(),
                        "{name}#{i}: YAML and JSON parses differ"
                    );
                    (ours, Doc::EC2NodeClass(Box::new(back)))
                }
            };
            assert_eq!(
                &reparsed, doc,
                "{name}#{i} ({kind}): typed round trip differs"
            );
            // Through YAML as well, as the sandbox and kubectl plugin write it.
            let yaml = serde_saphyr::to_string(&ours).expect("to YAML");
            let again: Value = serde_saphyr::from_str(&yaml).expect("YAML re-parse");
            assert_eq!(again, ours, "{name}#{i}: YAML round trip differs");

            let mut diffs = Vec::new();
            compare(kind, "", original, &ours, &mut diffs);
            if !diffs.is_empty() {
                failures.push(format!(
                    "{name}#{i} ({kind}):\n    {}",
                    diffs.join("\n    ")
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "upstream examples changed on round trip:\n  {}",
        failures.join("\n  ")
    );
    assert!(
        nodepools > 0 && nodeclasses > 0,
        "expected NodePools and EC2NodeClasses, got {nodepools} and {nodeclasses}"
    );
}

#[test]
fn comparison_catches_losses() {
    let original = json!({"spec": {"template": {"spec": {"foo": 1}}}, "limits": {"cpu": 100}});
    let ours = json!({"spec": {"template": {"spec": {"expireAfter": "720h"}}, "bar": true}, "limits": {"cpu": "100"}});
    let mut diffs = Vec::new();
    compare("NodePool", "", &original, &ours, &mut diffs);
    assert_eq!(
        diffs,
        vec![
            "/spec/template/spec/foo: lost (was 1)".to_string(),
            "/spec/bar: added true, which is not a default".to_string()
        ]
    );
}
