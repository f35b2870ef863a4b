//! Static drift hashes of NodePools and EC2NodeClasses, and the field snapshots that explain them.
//!
//! Static drift compares a hash of the fields a NodeClaim was launched from with the same hash
//! of its NodePool (or node class) now. Upstream Karpenter stamps the hash and the version of
//! its hashing scheme on the NodePool and on every NodeClaim (`karpenter.sh/nodepool-hash`,
//! `karpenter.sh/nodepool-hash-version`; `karpenter.k8s.aws/ec2nodeclass-hash`, `-version`);
//! a NodeClaim whose stamped version differs from the controller's is re-stamped, never
//! drifted, because a different version means the hashing changed, not the object.
//!
//! This project's hash is not byte-identical to upstream's, so its versions ([`NODEPOOL_HASH_VERSION`],
//! [`EC2NODECLASS_HASH_VERSION`]) differ from upstream's (`v3`, `v6`): NodeClaims stamped by
//! upstream Karpenter go through the version-mismatch path.
//!
//! Next to the hash, each NodeClaim carries a compact snapshot of the hashed fields
//! ([`NODEPOOL_HASH_FIELDS_ANNOTATION`], [`EC2NODECLASS_HASH_FIELDS_ANNOTATION`]), at most
//! [`SNAPSHOT_BUDGET`] bytes each: with it a later difference can be explained field by field
//! ([`diff`]). Groups too large for the budget are kept as a digest only, so a change to them is
//! detected but their old value is not shown.
//!
//! Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::Taint;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::{EC2NodeClass, NodePool};

/// This project's NodePool hash version. Differs from upstream's `v3` on purpose (see the
/// module docs); bump it whenever [`nodepool_fields`] or the hashing changes.
pub const NODEPOOL_HASH_VERSION: &str = "rs-v1";
/// This project's EC2NodeClass hash version. Differs from upstream's `v6` on purpose; bump it
/// whenever [`nodeclass_fields`] or the hashing changes.
pub const EC2NODECLASS_HASH_VERSION: &str = "rs-v1";
/// On a NodeClaim: the compact snapshot of the NodePool template fields it was stamped from
/// (JSON object, group path -> value or digest). An extension of this project.
pub const NODEPOOL_HASH_FIELDS_ANNOTATION: &str = "karpenter.sh/nodepool-hash-fields";
/// On a NodeClaim: the compact snapshot of the EC2NodeClass spec fields it was stamped from.
/// An extension of this project.
pub const EC2NODECLASS_HASH_FIELDS_ANNOTATION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-fields";
/// Most bytes one snapshot annotation may take; larger groups are replaced by their digest
/// (largest first) until it fits. Two snapshots stay within 2 KiB per NodeClaim.
pub const SNAPSHOT_BUDGET: usize = 1024;

/// Where an elided group keeps its digest inside a snapshot: `{"#sha256": "<16 hex>"}`.
const DIGEST_KEY: &str = "#sha256";

/// EC2NodeClass spec fields that are not hashed, as upstream leaves them out (`hash:"ignore"` in
/// `aws:pkg/apis/v1/ec2nodeclass.go`): the selector terms, checked by what they resolve to, and
/// `ipPrefixCount`, which only sizes pod addressing. `placementGroupSelector` is hashed, as
/// upstream's: moving nodes to another placement group replaces them.
const NODECLASS_UNHASHED: &[&str] = &[
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "amiSelectorTerms",
    "capacityReservationSelectorTerms",
    "ipPrefixCount",
];

/// The hashed fields of a NodePool template or a node class: top-level groups (e.g.
/// `metadata.labels`, `spec.taints`) relative to [`HashedFields::root`], each a canonical JSON
/// value (taints as sorted `key=value:Effect` strings; empty groups left out).
#[derive(Clone, Debug, PartialEq)]
pub struct HashedFields {
    /// Path prefix of the groups in the object, e.g. `spec.template.`.
    pub root: &'static str,
    /// Group path (relative to `root`) -> value.
    pub groups: BTreeMap<String, Value>,
}

/// The hashed fields of a NodePool's template: labels, annotations, taints, startup taints,
/// nodeClassRef, expireAfter and terminationGracePeriod. Requirements are not hashed: they are
/// checked against the NodeClaim's labels instead (`RequirementsDrifted`).
pub fn nodepool_fields(pool: &NodePool) -> HashedFields {
    let t = &pool.spec.template;
    let mut groups = BTreeMap::new();
    let mut put = |k: &str, v: Value| {
        if !is_empty(&v) {
            groups.insert(k.to_string(), v);
        }
    };
    put("metadata.labels", to_value(&t.metadata.labels));
    put("metadata.annotations", to_value(&t.metadata.annotations));
    put("spec.taints", taint_set(&t.spec.taints));
    put("spec.startupTaints", taint_set(&t.spec.startup_taints));
    put("spec.nodeClassRef", to_value(&t.spec.node_class_ref));
    put("spec.expireAfter", to_value(&t.spec.expire_after));
    put(
        "spec.terminationGracePeriod",
        to_value(&t.spec.termination_grace_period),
    );
    HashedFields {
        root: "spec.template.",
        groups,
    }
}

/// The hashed fields of an EC2NodeClass: every spec field except the selector terms (subnet,
/// security group, AMI and capacity reservation: drift checks what they resolved to instead)
/// and `ipPrefixCount`, one group per field.
pub fn nodeclass_fields(class: &EC2NodeClass) -> HashedFields {
    let mut groups = BTreeMap::new();
    if let Value::Object(spec) = to_value(&class.spec) {
        for (k, v) in spec {
            if !NODECLASS_UNHASHED.contains(&k.as_str()) && !is_empty(&v) {
                groups.insert(k, v);
            }
        }
    }
    HashedFields {
        root: "spec.",
        groups,
    }
}

impl HashedFields {
    /// The hash stamped on objects: the first 8 bytes of the SHA-256 of the canonical JSON of
    /// all groups, as a decimal integer (the shape of upstream's hashes).
    pub fn hash(&self) -> String {
        let digest = Sha256::digest(canonical(&Value::Object(self.map())).as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first).to_string()
    }

    /// The snapshot to stamp: compact JSON of the groups, with the largest groups replaced by
    /// their digest until it fits in [`SNAPSHOT_BUDGET`] bytes.
    pub fn snapshot(&self) -> String {
        let mut groups = self.groups.clone();
        loop {
            let text = canonical(&Value::Object(groups.clone().into_iter().collect()));
            if text.len() <= SNAPSHOT_BUDGET {
                return text;
            }
            let largest = groups
                .iter()
                .filter(|(_, v)| digest_of(v).is_none())
                .max_by_key(|(_, v)| canonical(v).len())
                .map(|(k, _)| k.clone());
            let Some(key) = largest else {
                return text;
            };
            let digest = group_digest(&groups[&key]);
            groups.insert(key, serde_json::json!({ DIGEST_KEY: digest }));
        }
    }

    fn map(&self) -> Map<String, Value> {
        self.groups
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// A snapshot read back from a NodeClaim annotation: group path -> value, or a digest for
/// groups that were too large to keep.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    groups: BTreeMap<String, Value>,
}

/// A snapshot annotation that is not a JSON object.
#[derive(Debug, thiserror::Error)]
#[error("malformed hash-fields snapshot: {0}")]
pub struct SnapshotError(String);

impl Snapshot {
    /// Parse a snapshot annotation.
    ///
    /// Errors: the text is not a JSON object.
    pub fn parse(text: &str) -> Result<Snapshot, SnapshotError> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Ok(Snapshot {
                groups: m.into_iter().collect(),
            }),
            Ok(other) => Err(SnapshotError(format!(
                "expected an object, got {}",
                kind_of(&other)
            ))),
            Err(e) => Err(SnapshotError(e.to_string())),
        }
    }
}

/// One field that differs between a snapshot and the current object.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FieldChange {
    /// Full path in the object, e.g. `spec.template.spec.taints` or
    /// `spec.template.metadata.labels["team"]`.
    pub path: String,
    /// What happened to it.
    pub change: Change,
}

/// How a field changed. Values are rendered as text (strings raw, anything else as JSON).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Change {
    /// A key or set member that was not there.
    Added {
        /// The value now present, as text (strings raw, anything else as canonical JSON).
        value: String,
    },
    /// A key or set member that is gone.
    Removed {
        /// The value the stamped snapshot had, as text.
        value: String,
    },
    /// A value that changed.
    Changed {
        /// The value in the stamped snapshot, as text.
        old: String,
        /// The value in the object now, as text.
        new: String,
    },
    /// A group kept only as a digest (too large for the snapshot) whose digest changed.
    ChangedUnrecorded {
        /// The group's value now, cut to 100 characters (with its size in bytes) when longer.
        new: String,
    },
}

/// `path: added VALUE`, `path: removed VALUE`, `path: OLD -> NEW`; values longer than 100
/// characters are cut, with their size.
impl fmt::Display for FieldChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.change {
            Change::Added { value } => write!(f, "{}: added {}", self.path, abbreviate(value)),
            Change::Removed { value } => {
                write!(f, "{}: removed {}", self.path, abbreviate(value))
            }
            Change::Changed { old, new } => write!(
                f,
                "{}: {} -> {}",
                self.path,
                abbreviate(old),
                abbreviate(new)
            ),
            Change::ChangedUnrecorded { new } => write!(
                f,
                "{}: changed (previous value too large to record) -> {new}",
                self.path
            ),
        }
    }
}

/// The fields that differ between what a NodeClaim was stamped from (`old`) and the object now
/// (`new`), in path order.
pub fn diff(old: &Snapshot, new: &HashedFields) -> Vec<FieldChange> {
    let mut out = Vec::new();
    let keys: BTreeSet<&String> = old.groups.keys().chain(new.groups.keys()).collect();
    for k in keys {
        let path = format!("{}{k}", new.root);
        let before = old.groups.get(k).unwrap_or(&Value::Null);
        let after = new.groups.get(k).unwrap_or(&Value::Null);
        match digest_of(before) {
            Some(d) if d != group_digest(after) => out.push(FieldChange {
                path,
                change: Change::ChangedUnrecorded {
                    new: abbreviate(&render(after)),
                },
            }),
            Some(_) => {}
            None => diff_value(&path, before, after, &mut out),
        }
    }
    out
}

fn diff_value(path: &str, old: &Value, new: &Value, out: &mut Vec<FieldChange>) {
    let mut push = |path: String, change: Change| out.push(FieldChange { path, change });
    match (old, new) {
        (a, b) if a == b => {}
        // A collection that appeared or disappeared: name its members, not the whole.
        (Value::Null, Value::Array(_)) => diff_value(path, &Value::Array(vec![]), new, out),
        (Value::Null, Value::Object(_)) => diff_value(path, &Value::Object(Map::new()), new, out),
        (Value::Array(_), Value::Null) => diff_value(path, old, &Value::Array(vec![]), out),
        (Value::Object(_), Value::Null) => diff_value(path, old, &Value::Object(Map::new()), out),
        (Value::Null, b) => push(path.into(), Change::Added { value: render(b) }),
        (a, Value::Null) => push(path.into(), Change::Removed { value: render(a) }),
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let sub = format!("{path}{}", key_segment(k));
                diff_value(
                    &sub,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if all_scalar(a) && all_scalar(b) => {
            let before: BTreeSet<String> = a.iter().map(render).collect();
            let after: BTreeSet<String> = b.iter().map(render).collect();
            for v in after.difference(&before) {
                push(path.into(), Change::Added { value: v.clone() });
            }
            for v in before.difference(&after) {
                push(path.into(), Change::Removed { value: v.clone() });
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff_value(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (a, b) => push(
            path.into(),
            Change::Changed {
                old: render(a),
                new: render(b),
            },
        ),
    }
}

/// `.name` for plain identifiers, `["example.com/team"]` for anything else (label keys).
fn key_segment(k: &str) -> String {
    if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        format!(".{k}")
    } else {
        format!("[{k:?}]")
    }
}

fn all_scalar(values: &[Value]) -> bool {
    values.iter().all(|v| !v.is_object() && !v.is_array())
}

/// Strings as they are, everything else as compact canonical JSON.
fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => canonical(other),
    }
}

/// At most 100 characters of a value, with its full size when cut (a userData script is not
/// printed whole; the changed path is what matters).
fn abbreviate(s: &str) -> String {
    const MAX: usize = 100;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head}... ({} bytes)", s.len())
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The digest an elided group carries, if `v` is one.
fn digest_of(v: &Value) -> Option<&str> {
    match v {
        Value::Object(m) if m.len() == 1 => m.get(DIGEST_KEY).and_then(Value::as_str),
        _ => None,
    }
}

/// 16 hex digits of the SHA-256 of a group's canonical JSON.
fn group_digest(v: &Value) -> String {
    let digest = Sha256::digest(canonical(v).as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Compact JSON with object keys sorted, whatever the map type serde_json was built with.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, &Value> = m.iter().collect();
            let body: Vec<String> = sorted
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical(v)))
                .collect();
            format!("{{{}}}", body.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Taints as a sorted set of `key=value:Effect` (or `key:Effect`) strings: their order in the
/// NodePool does not matter to the nodes (upstream hashes slices as sets).
fn taint_set(taints: &[Taint]) -> Value {
    let set: BTreeSet<String> = taints.iter().map(taint_string).collect();
    Value::Array(set.into_iter().map(Value::String).collect())
}

/// `key=value:Effect`, or `key:Effect` without a value, as kubectl prints taints.
pub fn taint_string(t: &Taint) -> String {
    match t.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

/// What a NodeClaim was stamped with for one kind of hash.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stamp {
    /// The stamped hash, if any.
    pub hash: Option<String>,
    /// The stamped hash version, if any.
    pub version: Option<String>,
    /// The stamped snapshot text, if any.
    pub fields: Option<String>,
}

impl Stamp {
    /// Read a stamp from annotations, given the three annotation keys.
    pub fn read(
        annotations: Option<&BTreeMap<String, String>>,
        hash_key: &str,
        version_key: &str,
        fields_key: &str,
    ) -> Stamp {
        let get = |k: &str| annotations.and_then(|a| a.get(k)).cloned();
        Stamp {
            hash: get(hash_key),
            version: get(version_key),
            fields: get(fields_key),
        }
    }

    /// The NodePool stamp on a NodeClaim (or NodePool).
    pub fn nodepool(annotations: Option<&BTreeMap<String, String>>) -> Stamp {
        Stamp::read(
            annotations,
            crate::labels::NODEPOOL_HASH_ANNOTATION,
            crate::labels::NODEPOOL_HASH_VERSION_ANNOTATION,
            NODEPOOL_HASH_FIELDS_ANNOTATION,
        )
    }

    /// The EC2NodeClass stamp on a NodeClaim (or EC2NodeClass).
    pub fn nodeclass(annotations: Option<&BTreeMap<String, String>>) -> Stamp {
        Stamp::read(
            annotations,
            crate::labels::EC2NODECLASS_HASH_ANNOTATION,
            crate::labels::EC2NODECLASS_HASH_VERSION_ANNOTATION,
            EC2NODECLASS_HASH_FIELDS_ANNOTATION,
        )
    }
}

/// The three NodePool stamp annotations for `fields` under `version`.
pub fn nodepool_stamp(fields: &HashedFields, version: &str) -> BTreeMap<String, String> {
    [
        (crate::labels::NODEPOOL_HASH_ANNOTATION, fields.hash()),
        (
            crate::labels::NODEPOOL_HASH_VERSION_ANNOTATION,
            version.to_string(),
        ),
        (NODEPOOL_HASH_FIELDS_ANNOTATION, fields.snapshot()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The three EC2NodeClass stamp annotations for `fields` under `version`.
pub fn nodeclass_stamp(fields: &HashedFields, version: &str) -> BTreeMap<String, String> {
    [
        (crate::labels::EC2NODECLASS_HASH_ANNOTATION, fields.hash()),
        (
            crate::labels::EC2NODECLASS_HASH_VERSION_ANNOTATION,
            version.to_string(),
        ),
        (EC2NODECLASS_HASH_FIELDS_ANNOTATION, fields.snapshot()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[cfg(test)]
mod tests;
