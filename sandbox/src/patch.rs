//! PATCH bodies applied the way kube-apiserver does: JSON patch (RFC 6902), JSON merge patch
//! (RFC 7386), strategic merge patch and a simplified server-side apply.
//!
//! Strategic merge follows `k8s.io/apimachinery/pkg/util/strategicpatch` for what kubectl
//! sends: maps merge recursively and `null` deletes a key; lists replace unless their Go field
//! carries `patchStrategy:"merge"`, in which case maps are merged by `patchMergeKey` and
//! primitives are unioned; the directives `$patch` (replace/delete/merge), `$retainKeys`,
//! `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>` are honoured and never
//! kept in the result. Like upstream, merged lists put patch items in patch order and slot
//! server-only items back where they were, so a new element without `$setElementOrder` lands
//! first. Deliberate differences: `$patch: merge` is accepted in a map (upstream rejects it),
//! and values that end up in the result lose directives and `null`s (upstream drops them when
//! decoding into Go types).
//!
//! Server-side apply is simplified: the applied configuration is strategic-merged onto the
//! live object (`{}` on create). There are no managed fields, so fields left out of a later
//! apply are kept rather than removed, and nothing ever conflicts. Custom resources use the
//! same merge with only ObjectMeta's merge keys, so their other lists are replaced whole, as
//! atomic lists are.

use serde_json::{Map, Value};

/// The patch flavours of Kubernetes' PATCH verb, chosen by the Content-Type header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902 JSON patch, `application/json-patch+json`.
    Json,
    /// RFC 7386 JSON merge patch, `application/merge-patch+json`.
    Merge,
    /// Kubernetes strategic merge patch, `application/strategic-merge-patch+json`.
    StrategicMerge,
    /// Server-side apply, `application/apply-patch+yaml` (body already parsed to JSON).
    Apply,
}

impl PatchType {
    /// The patch type named by a Content-Type header value (parameters such as `charset`
    /// are ignored), or `None` for a media type PATCH does not accept (answer 415).
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let media = ct.split(';').next().unwrap_or_default().trim();
        match media.to_ascii_lowercase().as_str() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// Why a patch could not be applied; the messages are shown to kubectl users.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The body is not a well-formed patch of its type.
    #[error("invalid patch: {0}")]
    InvalidPatch(String),
    /// A JSON patch operation failed: a `test` found another value, a path does not exist...
    #[error("JSON patch operation #{index} failed at {path}: {reason}")]
    JsonPatch {
        /// Zero-based index of the failing operation.
        index: usize,
        /// The JSON pointer it named.
        path: String,
        /// What went wrong, e.g. a `test` value that differs or a missing path.
        reason: String,
    },
    /// Strategic merge patch was asked of a kind it cannot know: a custom resource (415).
    #[error("strategic merge patch is not supported for {kind} in {group}: use a merge patch")]
    UnsupportedForKind {
        /// API group of the object.
        group: String,
        /// Kind of the object, e.g. `NodeClaim`.
        kind: String,
    },
    /// A `$patch` directive had a value other than replace, delete or merge.
    #[error("unknown patch type: {value} in map: {map}")]
    UnknownDirective {
        /// The `$patch` value found, neither `replace`, `delete` nor `merge`.
        value: String,
        /// The map that carried it.
        map: String,
    },
    /// An element of a list merged by key lacks that key.
    #[error("map: {element} does not contain declared merge key: {key}")]
    MissingMergeKey {
        /// The merge key of the list.
        key: String,
        /// The list element without the merge key, as JSON.
        element: String,
    },
    /// Any other misuse of a `$` directive.
    #[error("invalid {directive} directive: {reason}")]
    BadDirective {
        /// The directive, e.g. `$retainKeys`.
        directive: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Apply `patch` (already parsed to JSON) to `original` for an object of the given API group
/// ("" for core) and kind, returning the patched object.
pub fn apply_patch(
    kind: PatchType,
    group: &str,
    kind_name: &str,
    original: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    let schema = Schema {
        group,
        kind: kind_name,
    };
    match kind {
        PatchType::Json => json_patch_apply(original, patch),
        PatchType::Merge => {
            let mut doc = original.clone();
            json_patch::merge(&mut doc, as_object(patch)?);
            Ok(doc)
        }
        PatchType::StrategicMerge if !is_builtin(group) => Err(PatchError::UnsupportedForKind {
            group: group.to_string(),
            kind: kind_name.to_string(),
        }),
        PatchType::StrategicMerge | PatchType::Apply => {
            let original = original.as_object().cloned().unwrap_or_default();
            let patch = as_object(patch)?.as_object().cloned().unwrap_or_default();
            merge_object(original, patch, schema, "").map(Value::Object)
        }
    }
}

fn as_object(patch: &Value) -> Result<&Value, PatchError> {
    match patch {
        Value::Object(_) => Ok(patch),
        _ => Err(PatchError::InvalidPatch(format!(
            "expected a JSON object, got {patch}"
        ))),
    }
}

fn json_patch_apply(original: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| PatchError::InvalidPatch(format!("not a JSON patch: {e}")))?;
    let mut doc = original.clone();
    json_patch::patch(&mut doc, &ops).map_err(|e| PatchError::JsonPatch {
        index: e.operation,
        path: e.path.to_string(),
        reason: match e.kind {
            json_patch::PatchErrorKind::TestFailed => "test failed: the value differs".into(),
            json_patch::PatchErrorKind::InvalidPointer => "the path does not exist".into(),
            other => other.to_string(),
        },
    })?;
    Ok(doc)
}

// ---------------------------------------------------------------------------------------------
// Patch metadata: the `patchStrategy` / `patchMergeKey` struct tags of the Kubernetes Go types
// (k8s.io/api and k8s.io/apimachinery, release-1.32), keyed by kind and JSON field path. A path
// names object fields only: list elements add no segment. `patchStrategy:"retainKeys"`
// (Deployment `spec.strategy`, PodSpec `volumes` and `resourceClaims`) only shapes the patches
// kubectl computes; the server honours any `$retainKeys` it is sent, so it needs no entry.

/// How a field is patched, per its Go struct tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    /// No tag: objects merge key by key, lists are replaced whole.
    Default,
    /// `patchStrategy:"merge"` keyed by `patchMergeKey` ("" for a list of primitives).
    Merge(&'static str),
    /// `patchStrategy:"replace"`: the patch value replaces the field whole.
    Replace,
}

use Strategy::{Merge, Replace};

const ADMISSION: &str = "admissionregistration.k8s.io";
const FLOW_CONTROL: &str = "flowcontrol.apiserver.k8s.io";

/// Tagged fields outside PodSpec and ObjectMeta: (group, kind, path, strategy). Untagged lists
/// worth a note, hence replaced whole: Pod `status.containerStatuses` (and the init and
/// ephemeral ones), Node `spec.taints`, PodSpec `tolerations`.
#[rustfmt::skip]
const KIND_FIELDS: &[(&str, &str, &str, Strategy)] = &[
    ("", "Pod", "status.conditions", Merge("type")),
    ("", "Pod", "status.podIPs", Merge("ip")),
    ("", "Pod", "status.hostIPs", Merge("ip")),
    ("", "Pod", "status.resourceClaimStatuses", Merge("name")),
    ("", "Node", "spec.podCIDRs", Merge("")),
    ("", "Node", "status.conditions", Merge("type")),
    ("", "Node", "status.addresses", Merge("type")),
    ("", "Service", "spec.ports", Merge("port")),
    ("", "Service", "status.conditions", Merge("type")),
    ("", "ServiceAccount", "secrets", Merge("name")),
    ("", "Namespace", "status.conditions", Merge("type")),
    ("", "PersistentVolumeClaim", "status.conditions", Merge("type")),
    ("", "ReplicationController", "status.conditions", Merge("type")),
    ("", "ComponentStatus", "conditions", Merge("type")),
    ("apps", "Deployment", "status.conditions", Merge("type")),
    ("apps", "ReplicaSet", "status.conditions", Merge("type")),
    ("apps", "StatefulSet", "status.conditions", Merge("type")),
    ("apps", "DaemonSet", "status.conditions", Merge("type")),
    ("batch", "Job", "status.conditions", Merge("type")),
    ("autoscaling", "HorizontalPodAutoscaler", "status.conditions", Merge("type")),
    ("policy", "PodDisruptionBudget", "spec.selector", Replace),
    ("policy", "PodDisruptionBudget", "status.conditions", Merge("type")),
    (ADMISSION, "ValidatingWebhookConfiguration", "webhooks", Merge("name")),
    (ADMISSION, "ValidatingWebhookConfiguration", "webhooks.matchConditions", Merge("name")),
    (ADMISSION, "MutatingWebhookConfiguration", "webhooks", Merge("name")),
    (ADMISSION, "MutatingWebhookConfiguration", "webhooks.matchConditions", Merge("name")),
    (ADMISSION, "ValidatingAdmissionPolicy", "spec.matchConditions", Merge("name")),
    (ADMISSION, "ValidatingAdmissionPolicy", "spec.variables", Merge("name")),
    ("storage.k8s.io", "CSINode", "spec.drivers", Merge("name")),
    (FLOW_CONTROL, "FlowSchema", "status.conditions", Merge("type")),
    (FLOW_CONTROL, "PriorityLevelConfiguration", "status.conditions", Merge("type")),
];

/// Where a kind holds a PodSpec: (group, kind, path).
#[rustfmt::skip]
const POD_SPECS: &[(&str, &str, &str)] = &[
    ("", "Pod", "spec"),
    ("", "PodTemplate", "template.spec"),
    ("", "ReplicationController", "spec.template.spec"),
    ("apps", "Deployment", "spec.template.spec"),
    ("apps", "ReplicaSet", "spec.template.spec"),
    ("apps", "StatefulSet", "spec.template.spec"),
    ("apps", "DaemonSet", "spec.template.spec"),
    ("batch", "Job", "spec.template.spec"),
    ("batch", "CronJob", "spec.jobTemplate.spec.template.spec"),
];

/// Lists of a PodSpec tagged `merge`, with their merge keys (`volumes` and `resourceClaims`
/// are `merge,retainKeys`).
#[rustfmt::skip]
const POD_SPEC_FIELDS: &[(&str, &str)] = &[
    ("containers", "name"), ("initContainers", "name"), ("ephemeralContainers", "name"),
    ("volumes", "name"), ("imagePullSecrets", "name"), ("hostAliases", "ip"),
    ("topologySpreadConstraints", "topologyKey"), ("schedulingGates", "name"),
    ("resourceClaims", "name"),
];

/// Lists of a Container (or EphemeralContainer) tagged `merge`, with their merge keys.
#[rustfmt::skip]
const CONTAINER_FIELDS: &[(&str, &str)] = &[
    ("ports", "containerPort"), ("env", "name"), ("volumeMounts", "mountPath"),
    ("volumeDevices", "devicePath"),
];

/// Lists of ObjectMeta tagged `merge`; every `metadata` field of a built-in type is one.
const OBJECT_META_FIELDS: &[(&str, &str)] = &[("finalizers", ""), ("ownerReferences", "uid")];

/// API groups with a dot that kube-apiserver serves itself (custom resources' groups always
/// have a dot, so the core group and dotless ones are built in too).
const BUILTIN_GROUPS: &str = "networking.k8s.io rbac.authorization.k8s.io storage.k8s.io \
    scheduling.k8s.io coordination.k8s.io discovery.k8s.io events.k8s.io node.k8s.io \
    admissionregistration.k8s.io apiextensions.k8s.io apiregistration.k8s.io \
    certificates.k8s.io flowcontrol.apiserver.k8s.io resource.k8s.io storagemigration.k8s.io \
    internal.apiserver.k8s.io";

fn is_builtin(group: &str) -> bool {
    !group.contains('.') || BUILTIN_GROUPS.split_whitespace().any(|g| g == group)
}

/// The kind whose patch metadata applies.
#[derive(Debug, Clone, Copy)]
struct Schema<'a> {
    group: &'a str,
    kind: &'a str,
}

impl Schema<'_> {
    fn is(&self, group: &str, kind: &str) -> bool {
        self.group == group && self.kind == kind
    }

    /// The strategy of the field at `path` (e.g. `spec.template.spec.containers.env`).
    fn strategy(&self, path: &str) -> Strategy {
        let tagged = KIND_FIELDS
            .iter()
            .find(|(g, k, p, _)| self.is(g, k) && *p == path);
        if let Some(&(.., strategy)) = tagged {
            return strategy;
        }
        let (parent, name) = path.rsplit_once('.').unwrap_or(("", path));
        if parent == "metadata" || parent.ends_with(".metadata") {
            return keyed(OBJECT_META_FIELDS, name);
        }
        let pod_spec = POD_SPECS.iter().find(|(g, k, _)| self.is(g, k));
        let Some(rest) = pod_spec.and_then(|(.., p)| path.strip_prefix(p)?.strip_prefix('.'))
        else {
            return Strategy::Default;
        };
        match rest.split_once('.') {
            None => keyed(POD_SPEC_FIELDS, rest),
            Some(("containers" | "initContainers" | "ephemeralContainers", field)) => {
                keyed(CONTAINER_FIELDS, field)
            }
            Some(_) => Strategy::Default,
        }
    }
}

fn keyed(table: &[(&str, &'static str)], name: &str) -> Strategy {
    table
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(Strategy::Default, |&(_, key)| Merge(key))
}

// ---------------------------------------------------------------------------------------------
// Strategic merge.

type Object = Map<String, Value>;

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Merge `patch` into `original`, the object at `path` (dotted field names, "" for the root).
fn merge_object(
    mut original: Object,
    mut patch: Object,
    schema: Schema,
    path: &str,
) -> Result<Object, PatchError> {
    if let Some(directive) = patch.remove(PATCH) {
        match directive.as_str() {
            Some("replace") => return Ok(strip_object(patch)),
            Some("delete") => return Ok(Object::new()),
            Some("merge") => {}
            _ => {
                patch.insert(PATCH.into(), directive.clone());
                return Err(unknown_directive(&directive, &patch));
            }
        }
    }
    if let Some(keep) = patch.remove(RETAIN_KEYS) {
        retain_keys(&mut original, &patch, &keep)?;
    }
    let orders: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ORDER))
        .cloned()
        .collect();
    for directive in orders {
        set_element_order(&mut original, &mut patch, &directive, schema, path)?;
    }
    let mut deletions = Vec::new();
    for (key, value) in patch {
        if let Some(name) = key.strip_prefix(DELETE_FROM) {
            deletions.push((name.to_string(), value));
            continue;
        }
        let path = child(path, &key);
        let strategy = schema.strategy(&path);
        let result = match (original.get_mut(&key).map(std::mem::take), value) {
            (_, Value::Null) => None,
            (Some(Value::Object(o)), Value::Object(p)) if strategy != Replace => {
                Some(Value::Object(merge_object(o, p, schema, &path)?))
            }
            (Some(Value::Array(o)), Value::Array(p)) => {
                Some(Value::Array(patch_list(o, p, strategy, schema, &path)?))
            }
            (_, p) => strip(p),
        };
        // Replace or drop the value where it stands, so key order survives `preserve_order`.
        if let Some(value) = result {
            original.insert(key, value);
        } else {
            original.retain(|k, _| *k != key);
        }
    }
    for (name, value) in deletions {
        let Value::Array(gone) = value else {
            return Err(bad_directive(
                &format!("{DELETE_FROM}{name}"),
                "its value must be a list",
            ));
        };
        if let Some(Value::Array(list)) = original.get_mut(&name) {
            list.retain(|v| !gone.iter().any(|g| same(g, v)));
        }
    }
    Ok(original)
}

/// `$setElementOrder/<field>`: patch the field, then order it as the directive lists, slotting
/// server-only items back where they were.
fn set_element_order(
    original: &mut Object,
    patch: &mut Object,
    directive: &str,
    schema: Schema,
    path: &str,
) -> Result<(), PatchError> {
    let name = &directive[SET_ORDER.len()..];
    let Some(Value::Array(order)) = patch.remove(directive) else {
        return Err(bad_directive(directive, "its value must be a list"));
    };
    let path = child(path, name);
    let strategy = schema.strategy(&path);
    let key = if let Merge(key) = strategy { key } else { "" };
    let server = as_list(original.get_mut(name).map(std::mem::take), name)?;
    let patched = as_list(patch.remove(name), name)?;
    check_order(
        patched.as_deref().unwrap_or_default(),
        &order,
        key,
        directive,
    )?;
    let reference = upstream_view(server.clone().unwrap_or_default(), patched.as_deref(), key);
    let merged = match (server, patched) {
        (Some(server), None) => server,
        (None, Some(patched)) => strip_list(patched),
        (Some(server), Some(patched)) => patch_list(server, patched, strategy, schema, &path)?,
        (None, None) => return Ok(()),
    };
    let arranged = arrange(merged, &order, &reference, key);
    original.insert(name.to_string(), Value::Array(arranged));
    Ok(())
}

/// `$retainKeys`: drop every original key not listed; the patch may only set listed keys.
fn retain_keys(original: &mut Object, patch: &Object, keep: &Value) -> Result<(), PatchError> {
    let keep: Option<Vec<&str>> = keep
        .as_array()
        .and_then(|l| l.iter().map(Value::as_str).collect());
    let Some(keep) = keep else {
        return Err(bad_directive(
            RETAIN_KEYS,
            "its value must be a list of field names",
        ));
    };
    let listed = |k: &String| keep.contains(&k.as_str());
    if let Some((key, _)) = patch
        .iter()
        .find(|(k, v)| !v.is_null() && !k.starts_with('$') && !listed(k))
    {
        return Err(bad_directive(
            RETAIN_KEYS,
            &format!("the patch sets {key:?}, which it does not list"),
        ));
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// Patch one list field: merge it when tagged so, otherwise replace it with the patch list.
fn patch_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    strategy: Strategy,
    schema: Schema,
    path: &str,
) -> Result<Vec<Value>, PatchError> {
    let Merge(key) = strategy else {
        return Ok(strip_list(patch));
    };
    if !original.iter().chain(&patch).any(Value::is_object) {
        let mut union: Vec<Value> = Vec::new();
        for v in original.iter().chain(&patch) {
            if !union.iter().any(|u| same(u, v)) {
                union.push(v.clone());
            }
        }
        return Ok(arrange(union, &patch, &original, ""));
    }
    if key.is_empty() || !original.iter().chain(&patch).all(Value::is_object) {
        let why = "it mixes objects and other values, or has no merge key";
        return Err(PatchError::InvalidPatch(format!(
            "cannot merge list {path}: {why}"
        )));
    }
    let mut merged = original;
    let mut items = Vec::new();
    let mut replace = false;
    for element in patch {
        let Some(directive) = element.get(PATCH) else {
            items.push(element);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let id = merge_key_of(&element, key)?;
                merged.retain(|m| !same_id(m.get(key), Some(id)));
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(bad_directive(PATCH, "lists cannot be merged by directive"));
            }
            _ => {
                return Err(unknown_directive(
                    directive,
                    element.as_object().unwrap_or(&Object::new()),
                ));
            }
        }
    }
    if replace {
        return Ok(strip_list(items));
    }
    let server = merged.clone();
    for item in &items {
        let id = merge_key_of(item, key)?;
        let patch_item = item.as_object().cloned().unwrap_or_default();
        match merged.iter_mut().find(|m| same_id(m.get(key), Some(id))) {
            Some(Value::Object(existing)) => {
                let base = std::mem::take(existing);
                *existing = merge_object(base, patch_item, schema, path)?;
            }
            _ => merged.extend(strip(Value::Object(patch_item))),
        }
    }
    Ok(arrange(merged, &items, &server, key))
}

/// Upstream rejects a patch list that is not a subsequence of its `$setElementOrder` list.
fn check_order(
    patch: &[Value],
    order: &[Value],
    key: &str,
    directive: &str,
) -> Result<(), PatchError> {
    let mut order = order.iter();
    for item in patch.iter().filter(|p| p.get(PATCH).is_none()) {
        if !order.any(|o| same_id(ident(o, key), ident(item, key))) {
            return Err(bad_directive(
                directive,
                &format!("the patch list does not follow it at {item}"),
            ));
        }
    }
    Ok(())
}

/// The live list as upstream's `$setElementOrder` step sees it. Upstream deletes and appends
/// in place in the live list's backing array, so after `k` removals by `$patch: delete` the
/// first `k` new patch items take the freed slots and count as server items when server-only
/// items are slotted back (upstream's "add map and delete map from merging list" case).
fn upstream_view(mut server: Vec<Value>, patch: Option<&[Value]>, key: &str) -> Vec<Value> {
    let Some(patch) = patch.filter(|_| !key.is_empty()) else {
        return server;
    };
    let is_delete = |p: &&Value| p.get(PATCH).and_then(Value::as_str) == Some("delete");
    let deletes: Vec<&Value> = patch.iter().filter(is_delete).collect();
    let live = server.len();
    server.retain(|s| !deletes.iter().any(|d| same_id(d.get(key), s.get(key))));
    let freed = live - server.len();
    let new: Vec<Value> = patch
        .iter()
        .filter(|p| {
            p.get(PATCH).is_none() && !server.iter().any(|s| same_id(s.get(key), p.get(key)))
        })
        .take(freed)
        .cloned()
        .collect();
    server.extend(new);
    server
}

/// Order `merged` as upstream does: items named in `wanted` come in that order, the others keep
/// their relative place from `server` and are slotted in before the first wanted item that
/// `server` shows after them. Items are identified by `key`, or by value when it is "".
fn arrange(merged: Vec<Value>, wanted: &[Value], server: &[Value], key: &str) -> Vec<Value> {
    let position = |list: &[Value], v: &Value| {
        list.iter()
            .position(|x| same_id(ident(x, key), ident(v, key)))
    };
    let (mut chosen, mut rest): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| position(wanted, v).is_some());
    chosen.sort_by_key(|v| position(wanted, v));
    rest.sort_by_key(|v| position(server, v).unwrap_or(usize::MAX));
    let mut out = Vec::with_capacity(chosen.len() + rest.len());
    let (mut chosen, mut rest) = (chosen.into_iter().peekable(), rest.into_iter().peekable());
    loop {
        let take_rest = match (rest.peek(), chosen.peek()) {
            (Some(r), Some(c)) => {
                matches!((position(server, r), position(server, c)), (Some(i), Some(j)) if i < j)
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        out.extend(if take_rest {
            rest.next()
        } else {
            chosen.next()
        });
    }
    out
}

fn ident<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    if key.is_empty() { Some(v) } else { v.get(key) }
}

/// Whether two merge-key values (or primitive items) are present and equal.
fn same_id(a: Option<&Value>, b: Option<&Value>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if same(a, b))
}

/// JSON equality where 80 and 80.0 are the same number, as in Go's decoded maps.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn merge_key_of<'a>(element: &'a Value, key: &str) -> Result<&'a Value, PatchError> {
    element.get(key).ok_or_else(|| PatchError::MissingMergeKey {
        key: key.to_string(),
        element: element.to_string(),
    })
}

fn as_list(value: Option<Value>, name: &str) -> Result<Option<Vec<Value>>, PatchError> {
    match value {
        None => Ok(None),
        Some(Value::Array(list)) => Ok(Some(list)),
        Some(other) => Err(PatchError::InvalidPatch(format!(
            "expected a list for {name}, got {other}"
        ))),
    }
}

/// A patch value taken as is: drop directives and `null`s, and (as upstream) any map that
/// still carries `$patch`. `None` when the value itself is such a map.
fn strip(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) if map.contains_key(PATCH) => None,
        Value::Object(map) => Some(Value::Object(strip_object(map))),
        Value::Array(list) => Some(Value::Array(strip_list(list))),
        other => Some(other),
    }
}

fn strip_object(map: Object) -> Object {
    map.into_iter()
        .filter(|(k, v)| !v.is_null() && !k.starts_with('$'))
        .filter_map(|(k, v)| Some((k, strip(v)?)))
        .collect()
}

fn strip_list(list: Vec<Value>) -> Vec<Value> {
    list.into_iter().filter_map(strip).collect()
}

fn unknown_directive(value: &Value, map: &Object) -> PatchError {
    let value = value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_string);
    PatchError::UnknownDirective {
        value,
        map: Value::Object(map.clone()).to_string(),
    }
}

fn bad_directive(directive: &str, reason: &str) -> PatchError {
    PatchError::BadDirective {
        directive: directive.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PatchType::{Apply, Json, Merge, StrategicMerge};

    /// Objects the cases start from, as the sandbox stores them after kubectl created them.
    const FIXTURES: &str = r#"{
      "pod": {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "p", "tier": "web"}, "annotations": {"note": "x"},
          "finalizers": ["example.com/f1"]},
        "spec": {"nodeName": "n1",
          "containers": [{"name": "c1", "image": "nginx:1"}, {"name": "c2", "image": "busybox"}]}},
      "node": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "a", "value": "b", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Disk", "status": "False"}],
          "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}},
      "deployment": {"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web", "stage": "dev"},
          "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "<d1.yaml>"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
          "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}},
          "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "containers": [
              {"name": "app", "image": "nginx:1.25", "imagePullPolicy": "IfNotPresent",
               "ports": [{"containerPort": 80, "protocol": "TCP"}],
               "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
              {"name": "sidecar", "image": "busybox:1", "env": [{"name": "S", "value": "s"}]}]}}},
        "status": {"conditions": [{"type": "Available", "status": "True"}]}}
    }"#;

    /// Each case: `type` (json, merge, smp or apply), `group` (default ""), `kind`, `original`
    /// (an object or a fixture's name), `patch`, and either `want` or `changes`: RFC 6902
    /// operations turning the original into the expected result. Names starting "kubectl" use
    /// the body kubectl v1.32 sent to a logging server (annotation payloads shortened).
    const CASES: &str = r#"[
      {"name": "kubectl cordon n1", "type": "smp", "kind": "Node", "original": "node",
       "patch": {"spec": {"unschedulable": true}},
       "changes": [{"op": "add", "path": "/spec/unschedulable", "value": true}]},
      {"name": "kubectl label pod p a=b", "type": "merge", "kind": "Pod", "original": "pod",
       "patch": {"metadata": {"labels": {"a": "b"}}},
       "changes": [{"op": "add", "path": "/metadata/labels/a", "value": "b"}]},
      {"name": "kubectl label pod p tier-", "type": "merge", "kind": "Pod", "original": "pod",
       "patch": {"metadata": {"labels": {"tier": null}}},
       "changes": [{"op": "remove", "path": "/metadata/labels/tier"}]},
      {"name": "strategic null deletes a label", "type": "smp", "kind": "Pod", "original": "pod",
       "patch": {"metadata": {"labels": {"tier": null}}},
       "changes": [{"op": "remove", "path": "/metadata/labels/tier"}]},
      {"name": "kubectl annotate pod p note=y --overwrite", "type": "merge", "kind": "Pod",
       "original": "pod", "patch": {"metadata": {"annotations": {"note": "y"}}},
       "changes": [{"op": "replace", "path": "/metadata/annotations/note", "value": "y"}]},
      {"name": "kubectl scale --replicas=5 (sent to the scale subresource)", "type": "merge",
       "group": "apps", "kind": "Deployment", "original": "deployment",
       "patch": {"spec": {"replicas": 5}},
       "changes": [{"op": "replace", "path": "/spec/replicas", "value": 5}]},
      {"name": "kubectl taint nodes n1 gpu=true:NoSchedule (taints have no strategy: replaced)",
       "type": "smp", "kind": "Node", "original": "node",
       "patch": {"spec": {"taints": [{"effect": "NoSchedule", "key": "gpu", "value": "true"},
         {"effect": "NoSchedule", "key": "a", "value": "b"}]}},
       "changes": [{"op": "add", "path": "/spec/taints/0",
         "value": {"effect": "NoSchedule", "key": "gpu", "value": "true"}}]},
      {"name": "kubectl taint nodes n1 a:NoSchedule-", "type": "smp", "kind": "Node",
       "original": "node", "patch": {"spec": {"taints": null}},
       "changes": [{"op": "remove", "path": "/spec/taints"}]},
      {"name": "kubectl set image deployment/web app=nginx:1.27: only the matched container changes",
       "type": "smp", "group": "apps", "kind": "Deployment", "original": "deployment",
       "patch": {"spec": {"template": {"spec": {
         "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
         "containers": [{"image": "nginx:1.27", "name": "app"}]}}}},
       "changes": [{"op": "replace", "path": "/spec/template/spec/containers/0/image",
         "value": "nginx:1.27"}]},
      {"name": "kubectl set env deployment/web B=9", "type": "smp", "group": "apps",
       "kind": "Deployment", "original": "deployment",
       "patch": {"spec": {"template": {"spec": {
         "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
         "containers": [
           {"$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
            "env": [{"name": "B", "value": "9"}], "name": "app"},
           {"$setElementOrder/env": [{"name": "S"}, {"name": "B"}],
            "env": [{"name": "B", "value": "9"}], "name": "sidecar"}]}}}},
       "changes": [
         {"op": "replace", "path": "/spec/template/spec/containers/0/env/1/value", "value": "9"},
         {"op": "add", "path": "/spec/template/spec/containers/1/env/-", "value": {"name": "B", "value": "9"}}]},
      {"name": "kubectl rollout restart deployment/web", "type": "smp", "group": "apps",
       "kind": "Deployment", "original": "deployment",
       "patch": {"spec": {"template": {"metadata": {"annotations": {
         "kubectl.kubernetes.io/restartedAt": "2026-11-22T00:56:47Z"}}}}},
       "changes": [{"op": "add", "path": "/spec/template/metadata/annotations",
         "value": {"kubectl.kubernetes.io/restartedAt": "2026-11-22T00:56:47Z"}}]},
      {"name": "kubectl patch: env var deleted by $patch: delete", "type": "smp", "group": "apps",
       "kind": "Deployment", "original": "deployment",
       "patch": {"spec": {"template": {"spec": {"containers": [
         {"name": "app", "env": [{"name": "A", "$patch": "delete"}]}]}}}},
       "changes": [{"op": "remove", "path": "/spec/template/spec/containers/0/env/0"}]},
      {"name": "kubectl patch: finalizers are unioned, new ones first as upstream does",
       "type": "smp", "kind": "Pod", "original": "pod",
       "patch": {"metadata": {"finalizers": ["example.com/f2"]}},
       "changes": [{"op": "add", "path": "/metadata/finalizers/0", "value": "example.com/f2"}]},
      {"name": "kubectl patch --type=json", "type": "json", "kind": "Pod", "original": "pod",
       "patch": [{"op": "test", "path": "/metadata/name", "value": "p"},
         {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:2"}],
       "want": {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "p", "labels": {"app": "p", "tier": "web"}, "annotations": {"note": "x"},
           "finalizers": ["example.com/f1"]},
         "spec": {"nodeName": "n1",
           "containers": [{"name": "c1", "image": "nginx:2"}, {"name": "c2", "image": "busybox"}]}}},
      {"name": "kubectl apply -f d2.yaml after d1.yaml: a three-way patch", "type": "smp",
       "group": "apps", "kind": "Deployment", "original": "deployment",
       "patch": {
         "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "<d2.yaml>"},
           "labels": {"stage": null}},
         "spec": {"replicas": 3,
           "strategy": {"$retainKeys": ["type"], "rollingUpdate": null, "type": "Recreate"},
           "template": {"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
             "containers": [{"image": "busybox:2", "name": "sidecar"},
               {"$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
                "$setElementOrder/ports": [{"containerPort": 80}, {"containerPort": 443}],
                "env": [{"name": "C", "value": "3"}, {"$patch": "delete", "name": "B"}],
                "image": "nginx:1.26", "name": "app", "ports": [{"containerPort": 443}]}],
             "tolerations": [{"key": "gpu", "operator": "Exists"}]}}}},
       "want": {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "web", "labels": {"app": "web"},
           "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "<d2.yaml>"}},
         "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
           "strategy": {"type": "Recreate"},
           "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
             "tolerations": [{"key": "gpu", "operator": "Exists"}],
             "containers": [
               {"name": "sidecar", "image": "busybox:2", "env": [{"name": "S", "value": "s"}]},
               {"name": "app", "image": "nginx:1.26", "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}],
                "env": [{"name": "A", "value": "1"}, {"name": "C", "value": "3"}]}]}}},
         "status": {"conditions": [{"type": "Available", "status": "True"}]}}},
      {"name": "kubectl apply pod: $deleteFromPrimitiveList/finalizers, ownerReferences by uid",
       "type": "smp", "kind": "Pod",
       "original": {"metadata": {"name": "q", "finalizers": ["example.com/a", "example.com/b"],
         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1", "uid": "u-1"}]}},
       "patch": {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/b"],
         "$setElementOrder/finalizers": ["example.com/a", "example.com/c"],
         "$setElementOrder/ownerReferences": [{"uid": "u-1"}, {"uid": "u-2"}],
         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "<p2.yaml>"},
         "finalizers": ["example.com/c"],
         "ownerReferences": [{"controller": true, "uid": "u-1"},
           {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs2", "uid": "u-2"}]}},
       "want": {"metadata": {"name": "q",
         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "<p2.yaml>"},
         "finalizers": ["example.com/a", "example.com/c"],
         "ownerReferences": [
           {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1", "uid": "u-1", "controller": true},
           {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs2", "uid": "u-2"}]}}},
      {"name": "kubectl apply --server-side, creating", "type": "apply", "group": "apps",
       "kind": "Deployment", "original": {},
       "patch": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
         "spec": {"replicas": 3}},
       "want": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
         "spec": {"replicas": 3}}},
      {"name": "server-side apply merges like strategic merge", "type": "apply", "group": "apps",
       "kind": "Deployment", "original": "deployment",
       "patch": {"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "busybox:2"}]}}}},
       "changes": [{"op": "replace", "path": "/spec/template/spec/containers/1/image",
         "value": "busybox:2"}]},
      {"name": "server-side apply of a custom resource replaces lists", "type": "apply",
       "group": "example.com", "kind": "Widget",
       "original": {"metadata": {"labels": {"a": "b"}}, "spec": {"items": [1, 2], "size": 1}},
       "patch": {"spec": {"items": [3]}},
       "want": {"metadata": {"labels": {"a": "b"}}, "spec": {"items": [3], "size": 1}}},
      {"name": "kubectl patch svc: ports merged by port", "type": "smp", "kind": "Service",
       "original": {"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]}},
       "patch": {"spec": {"ports": [{"port": 443, "targetPort": 9443}]}},
       "want": {"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 9443}]}}},
      {"name": "$retainKeys clears unlisted keys", "type": "smp", "group": "apps", "kind": "Deployment",
       "original": {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}},
       "patch": {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
       "want": {"spec": {"strategy": {"type": "Recreate"}}}},
      {"name": "tolerations have no strategy and are replaced", "type": "smp", "kind": "Pod",
       "original": {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}},
       "patch": {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}},
       "want": {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}},
      {"name": "$patch: replace in a list and in a map", "type": "smp", "kind": "Pod",
       "original": {"spec": {"containers": [{"name": "a"}, {"name": "b"}],
         "securityContext": {"runAsUser": 1, "fsGroup": 2}}},
       "patch": {"spec": {"containers": [{"name": "c"}, {"$patch": "replace"}],
         "securityContext": {"$patch": "replace", "runAsUser": 3}}},
       "want": {"spec": {"containers": [{"name": "c"}], "securityContext": {"runAsUser": 3}}}},
      {"name": "$patch: delete and merge in maps", "type": "smp", "kind": "Pod",
       "original": {"spec": {"affinity": {"nodeAffinity": {}}, "dnsConfig": {"options": []}}},
       "patch": {"spec": {"affinity": {"$patch": "delete"},
         "dnsConfig": {"$patch": "merge", "nameservers": ["1.1.1.1"]}}},
       "want": {"spec": {"affinity": {}, "dnsConfig": {"options": [], "nameservers": ["1.1.1.1"]}}}},
      {"name": "CronJob pod spec: containers and env merged by name", "type": "smp",
       "group": "batch", "kind": "CronJob",
       "original": {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
         {"name": "a", "env": [{"name": "X", "value": "1"}]}, {"name": "b"}]}}}}}},
       "patch": {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
         {"name": "a", "env": [{"name": "X", "value": "2"}]}]}}}}}},
       "want": {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
         {"name": "a", "env": [{"name": "X", "value": "2"}]}, {"name": "b"}]}}}}}}},
      {"name": "Node status.conditions merged by type", "type": "smp", "kind": "Node",
       "original": "node", "patch": {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
       "changes": [{"op": "replace", "path": "/status/conditions/0/status", "value": "False"}]},
      {"name": "Pod status: conditions merged by type, containerStatuses replaced", "type": "smp",
       "kind": "Pod",
       "original": {"status": {"conditions": [{"type": "Ready", "status": "False"}],
         "containerStatuses": [{"name": "a"}, {"name": "b"}]}},
       "patch": {"status": {"conditions": [{"type": "Ready", "status": "True"}],
         "containerStatuses": [{"name": "b"}]}},
       "want": {"status": {"conditions": [{"type": "Ready", "status": "True"}],
         "containerStatuses": [{"name": "b"}]}}},
      {"name": "PodDisruptionBudget spec.selector is replaced", "type": "smp", "group": "policy",
       "kind": "PodDisruptionBudget",
       "original": {"spec": {"selector": {"matchLabels": {"a": "1"}}, "minAvailable": 1}},
       "patch": {"spec": {"selector": {"matchLabels": {"b": "2"}}}},
       "want": {"spec": {"selector": {"matchLabels": {"b": "2"}}, "minAvailable": 1}}},
      {"name": "upstream case: set elements order in a list with server-only items 3",
       "type": "smp", "kind": "Pod",
       "original": {"spec": {"containers": [{"name": "1", "other": "a"}, {"name": "2", "value": 2},
         {"name": "7"}, {"name": "9"}, {"name": "8"}, {"name": "3"}, {"name": "4"}]}},
       "patch": {"spec": {
         "$setElementOrder/containers": [{"name": "2"}, {"name": "1"}, {"name": "4"}, {"name": "3"}]}},
       "want": {"spec": {"containers": [{"name": "2", "value": 2}, {"name": "1", "other": "a"},
         {"name": "7"}, {"name": "9"}, {"name": "8"}, {"name": "4"}, {"name": "3"}]}}},
      {"name": "directives and nulls never leak into new values", "type": "smp", "kind": "Pod",
       "original": {"spec": {"containers": [{"name": "c1"}]}},
       "patch": {"spec": {
         "volumes": [{"name": "v", "$retainKeys": ["name"], "emptyDir": {"$patch": "delete"}}],
         "containers": [{"name": "new", "$setElementOrder/env": [{"name": "E"}],
           "env": [{"name": "E", "value": null}, {"name": "D", "$patch": "delete"}]}]}},
       "want": {"spec": {"volumes": [{"name": "v"}],
         "containers": [{"name": "new", "env": [{"name": "E"}]}, {"name": "c1"}]}}}
    ]"#;

    /// Patches that fail, with the message kubectl shows.
    const ERRORS: &str = r#"[
      {"name": "JSON patch test fails", "type": "json", "kind": "Pod", "original": "pod",
       "patch": [{"op": "test", "path": "/metadata/name", "value": "other"}],
       "error": "JSON patch operation #0 failed at /metadata/name: test failed: the value differs"},
      {"name": "JSON patch path missing", "type": "json", "kind": "Pod", "original": "pod",
       "patch": [{"op": "remove", "path": "/metadata/labels/nope"}],
       "error": "JSON patch operation #0 failed at /metadata/labels/nope: the path does not exist"},
      {"name": "JSON patch not a list", "type": "json", "kind": "Pod", "original": "pod",
       "patch": {"op": "add"},
       "error": "invalid patch: not a JSON patch: invalid type: map, expected a sequence"},
      {"name": "unknown $patch", "type": "smp", "kind": "Pod", "original": "pod",
       "patch": {"spec": {"$patch": "bogus"}},
       "error": "unknown patch type: bogus in map: {\"$patch\":\"bogus\"}"},
      {"name": "merge key missing", "type": "smp", "kind": "Pod", "original": "pod",
       "patch": {"spec": {"containers": [{"image": "x"}]}},
       "error": "map: {\"image\":\"x\"} does not contain declared merge key: name"},
      {"name": "field outside $retainKeys", "type": "smp", "group": "apps", "kind": "Deployment",
       "original": "deployment", "patch": {"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}},
       "error": "invalid $retainKeys directive: the patch sets \"rollingUpdate\", which it does not list"},
      {"name": "strategic merge of a custom resource", "type": "smp", "group": "example.com",
       "kind": "Widget", "original": {}, "patch": {},
       "error": "strategic merge patch is not supported for Widget in example.com: use a merge patch"},
      {"name": "patch list out of $setElementOrder", "type": "smp", "kind": "Pod", "original": "pod",
       "patch": {"spec": {"$setElementOrder/containers": [{"name": "c1"}, {"name": "c2"}],
         "containers": [{"name": "c2"}, {"name": "c1"}]}},
       "error": "invalid $setElementOrder/containers directive: the patch list does not follow it at {\"name\":\"c1\"}"},
      {"name": "merge patch not an object", "type": "merge", "kind": "Pod", "original": "pod",
       "patch": [1], "error": "invalid patch: expected a JSON object, got [1]"}
    ]"#;

    fn run(case: &Value) -> Result<Value, PatchError> {
        let fixtures: Value = serde_json::from_str(FIXTURES).expect("fixtures are JSON");
        let kind = match case["type"].as_str() {
            Some("json") => Json,
            Some("merge") => Merge,
            Some("smp") => StrategicMerge,
            _ => Apply,
        };
        let group = case["group"].as_str().unwrap_or_default();
        let kind_name = case["kind"].as_str().unwrap_or_default();
        apply_patch(
            kind,
            group,
            kind_name,
            &original(case, &fixtures),
            &case["patch"],
        )
    }

    fn original(case: &Value, fixtures: &Value) -> Value {
        match &case["original"] {
            Value::String(name) => fixtures[name.as_str()].clone(),
            other => other.clone(),
        }
    }

    #[test]
    fn table() {
        let fixtures: Value = serde_json::from_str(FIXTURES).expect("fixtures are JSON");
        let cases: Vec<Value> = serde_json::from_str(CASES).expect("cases are JSON");
        for case in &cases {
            let want = match case.get("changes") {
                Some(ops) => {
                    let mut want = original(case, &fixtures);
                    let ops: json_patch::Patch =
                        serde_json::from_value(ops.clone()).expect("changes");
                    json_patch::patch(&mut want, &ops).expect("changes apply");
                    want
                }
                None => case["want"].clone(),
            };
            assert_eq!(run(case), Ok(want), "{}", case["name"]);
        }
    }

    #[test]
    fn errors() {
        let cases: Vec<Value> = serde_json::from_str(ERRORS).expect("errors are JSON");
        for case in &cases {
            let got = run(case).map_err(|e| e.to_string());
            assert_eq!(
                got,
                Err(case["error"].as_str().unwrap_or_default().to_string()),
                "{}",
                case["name"]
            );
        }
        let custom = apply_patch(
            StrategicMerge,
            "example.com",
            "Widget",
            &Value::Null,
            &Value::Null,
        );
        assert!(matches!(custom, Err(PatchError::UnsupportedForKind { .. })));
    }

    #[test]
    fn content_types() {
        let parse = PatchType::from_content_type;
        assert_eq!(parse("application/json-patch+json"), Some(Json));
        assert_eq!(
            parse("application/merge-patch+json; charset=utf-8"),
            Some(Merge)
        );
        assert_eq!(
            parse("application/strategic-merge-patch+json"),
            Some(StrategicMerge)
        );
        assert_eq!(parse("application/apply-patch+yaml"), Some(Apply));
        assert_eq!(parse("application/json"), None);
    }
}
