//! Hand-written pieces of the CRD schemas: constraints, CEL rules and Kubernetes list/map
//! markers that the derive cannot infer, matching the AWS provider's generated CRDs
//! (`aws:pkg/apis/crds/*.yaml`). Used through `#[schemars(transform = ...)]` and
//! `#[schemars(schema_with = ...)]` on fields.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use crate::labels::{
    self, AWS_GROUP, CAPACITY_TYPE_LABEL, EC2NODECLASS_LABEL, HOSTNAME_LABEL, KARPENTER_GROUP,
    NODEPOOL_LABEL,
};

/// Kubernetes qualified name (optional DNS-subdomain prefix and a name part), as a CRD pattern.
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// Kubernetes label value (possibly empty), as a CRD pattern.
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// `resource.Quantity`, as a CRD pattern.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// Condition reason, as a CRD pattern (from `metav1.Condition`).
const CONDITION_REASON_PATTERN: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";
/// Condition type, as a CRD pattern (from `metav1.Condition`).
const CONDITION_TYPE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

fn rule(rule: impl Into<String>, message: impl Into<String>) -> Value {
    json!({ "rule": rule.into(), "message": message.into() })
}

fn quoted_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = items.into_iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// CEL checks (on a string `v`) that a label key is not in a restricted domain unless it is one
/// of the allowed keys there, mirroring the rules the AWS provider patches into its CRDs.
fn restricted_domain_rules(v: &str, forbid_nodepool: bool) -> Vec<Value> {
    let aws_allowed: Vec<&str> = labels::WELL_KNOWN_LABELS
        .iter()
        .copied()
        .filter(|k| labels::label_domain(k) == AWS_GROUP)
        .chain(std::iter::once(EC2NODECLASS_LABEL))
        .collect();
    let mut rules = vec![rule(
        format!(
            "{v} in {} || !{v}.find(\"^([^/]+)\").endsWith(\"{KARPENTER_GROUP}\")",
            quoted_list([CAPACITY_TYPE_LABEL, NODEPOOL_LABEL])
        ),
        format!("label domain \"{KARPENTER_GROUP}\" is restricted"),
    )];
    if forbid_nodepool {
        rules.push(rule(
            format!("{v} != \"{NODEPOOL_LABEL}\""),
            format!("label \"{NODEPOOL_LABEL}\" is restricted"),
        ));
    }
    rules.push(rule(
        format!("{v} != \"{HOSTNAME_LABEL}\""),
        format!("label \"{HOSTNAME_LABEL}\" is restricted"),
    ));
    rules.push(rule(
        format!(
            "{v} in {} || !{v}.find(\"^([^/]+)\").endsWith(\"{AWS_GROUP}\")",
            quoted_list(aws_allowed)
        ),
        format!("label domain \"{AWS_GROUP}\" is restricted"),
    ));
    rules
}

/// Wraps a per-key CEL rule on `x` into `self.all(x, ...)` for a map or list.
fn all(rules: Vec<Value>) -> Vec<Value> {
    rules
        .into_iter()
        .map(|mut r| {
            if let Some(text) = r.get("rule").and_then(Value::as_str) {
                let wrapped = format!("self.all(x, {text})");
                r["rule"] = Value::String(wrapped);
            }
            r
        })
        .collect()
}

/// Requirement `key`: qualified name, at most 316 characters, not in a restricted domain.
pub(crate) fn requirement_key(schema: &mut Schema) {
    schema.insert("maxLength".into(), json!(316));
    schema.insert("pattern".into(), json!(QUALIFIED_NAME_PATTERN));
    schema.insert(
        "x-kubernetes-validations".into(),
        Value::Array(restricted_domain_rules("self", false)),
    );
}

/// A list of label values, replaced as a whole.
pub(crate) fn label_value_list(schema: &mut Schema) {
    if let Some(items) = schema.get_mut("items").and_then(Value::as_object_mut) {
        items.insert("maxLength".into(), json!(63));
        items.insert("pattern".into(), json!(LABEL_VALUE_PATTERN));
    }
    schema.insert("x-kubernetes-list-type".into(), json!("atomic"));
}

/// A NodePool's `requirements`: at most 100, plus the CEL rules on operators and minValues and
/// the ban on `karpenter.sh/nodepool`.
pub(crate) fn nodepool_requirements(schema: &mut Schema) {
    requirements(schema);
    if let Some(Value::Array(rules)) = schema.get_mut("x-kubernetes-validations") {
        rules.push(rule(
            format!("self.all(x, x.key != \"{NODEPOOL_LABEL}\")"),
            format!("label \"{NODEPOOL_LABEL}\" is restricted"),
        ));
    }
}

/// A NodeClaim's `requirements`: at most 100, plus the CEL rules on operators and minValues.
pub(crate) fn requirements(schema: &mut Schema) {
    schema.insert("maxItems".into(), json!(100));
    schema.insert("x-kubernetes-list-type".into(), json!("atomic"));
    schema.insert(
        "x-kubernetes-validations".into(),
        json!([
            rule(
                "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
                "requirements with operator 'In' must have a value defined",
            ),
            rule(
                "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
                "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
            ),
            rule(
                "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
                "requirements with 'minValues' must have at least that many values specified in the 'values' field",
            ),
        ]),
    );
}

/// A NodeOverlay's `requirements`: at most 100, with upstream's CEL rules on operators (NotIn
/// and In need values; the numeric operators one non-negative integer). Upstream's messages
/// differ from the NodePool ones by a comma, so they are spelled out here.
pub(crate) fn overlay_requirements(schema: &mut Schema) {
    schema.insert("maxItems".into(), json!(100));
    schema.insert("x-kubernetes-list-type".into(), json!("atomic"));
    schema.insert(
        "x-kubernetes-validations".into(),
        json!([
            rule(
                "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
                "requirements with operator 'NotIn' must have a value defined",
            ),
            rule(
                "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
                "requirements with operator 'In' must have a value defined",
            ),
            rule(
                "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
                "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
            ),
        ]),
    );
}

/// The resources a NodeOverlay's `capacity` may not set (upstream's CEL list).
pub(crate) const OVERLAY_RESTRICTED_CAPACITY: &[&str] =
    &["cpu", "memory", "ephemeral-storage", "pods"];
/// Message of the CEL rule refusing [`OVERLAY_RESTRICTED_CAPACITY`].
pub(crate) const OVERLAY_RESTRICTED_CAPACITY_MESSAGE: &str = "invalid resource restricted";

/// A NodeOverlay's `capacity`: a `ResourceList` that may not name the core resources.
pub(crate) fn overlay_capacity(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = quantity_map(generator);
    let restricted = OVERLAY_RESTRICTED_CAPACITY
        .iter()
        .map(|r| format!("'{r}'"))
        .collect::<Vec<_>>()
        .join(", ");
    schema.insert(
        "x-kubernetes-validations".into(),
        json!([rule(
            format!("self.all(x, !(x in [{restricted}]))"),
            OVERLAY_RESTRICTED_CAPACITY_MESSAGE,
        )]),
    );
    schema
}

/// `metadata.labels` of a NodeClaim template: valid label values, at most 100, no restricted keys.
pub(crate) fn template_labels(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "type": "string",
            "maxLength": 63,
            "pattern": LABEL_VALUE_PATTERN,
        },
        "maxProperties": 100,
        "x-kubernetes-map-type": "atomic",
        "x-kubernetes-validations": all(restricted_domain_rules("x", true)),
    })
}

/// `metadata.annotations` of a NodeClaim template.
pub(crate) fn annotations(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string" },
        "x-kubernetes-map-type": "granular",
    })
}

/// A plain `map[string]string`.
pub(crate) fn string_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string" },
    })
}

/// Tags in a selector term: at most 20, no empty keys or values.
pub(crate) fn selector_tags(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string" },
        "maxProperties": 20,
        "x-kubernetes-validations": [
            rule("self.all(k, k != '' && self[k] != '')", "empty tag keys or values aren't supported"),
        ],
    })
}

/// `spec.tags` of an EC2NodeClass: no empty keys and none of the keys Karpenter owns.
pub(crate) fn ec2nodeclass_tags(_: &mut SchemaGenerator) -> Schema {
    let mut rules = vec![
        rule("self.all(k, k != '')", "empty tag keys aren't supported"),
        rule(
            format!("self.all(k, k !='{}')", labels::EKS_CLUSTER_NAME_TAG_KEY),
            format!(
                "tag contains a restricted tag matching {}",
                labels::EKS_CLUSTER_NAME_TAG_KEY
            ),
        ),
        rule(
            "self.all(k, !k.startsWith('kubernetes.io/cluster') )",
            "tag contains a restricted tag matching kubernetes.io/cluster/",
        ),
    ];
    for key in [
        labels::NODEPOOL_TAG_KEY,
        labels::NODECLAIM_TAG_KEY,
        labels::EC2NODECLASS_TAG_KEY,
    ] {
        rules.push(rule(
            format!("self.all(k, k != '{key}')"),
            format!("tag contains a restricted tag matching {key}"),
        ));
    }
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string" },
        "x-kubernetes-validations": rules,
    })
}

/// A `ResourceList`: resource name to quantity (integer or string).
pub(crate) fn quantity_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true,
        },
    })
}

/// An EBS `volumeSize`: a quantity string in Gi, G, Ti or T within EBS limits.
pub(crate) fn volume_size(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$",
    })
}

/// A list of `core/v1` taints with the key, value and effect constraints of the CRD.
pub(crate) fn taints(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "atomic",
        "items": {
            "description": "A taint: pods that do not tolerate it are not scheduled to (or are evicted from) the node, depending on its effect.",
            "type": "object",
            "required": ["effect", "key"],
            "properties": {
                "effect": {
                    "description": "What happens to pods that do not tolerate the taint: NoSchedule, PreferNoSchedule or NoExecute.",
                    "type": "string",
                    "enum": labels::TAINT_EFFECTS,
                },
                "key": {
                    "description": "The taint key, a qualified name.",
                    "type": "string",
                    "minLength": 1,
                    "pattern": QUALIFIED_NAME_PATTERN,
                },
                "timeAdded": {
                    "description": "When the taint was added (RFC 3339); only meaningful for NoExecute taints.",
                    "type": "string",
                    "format": "date-time",
                },
                "value": {
                    "description": "The taint value, a qualified name when set.",
                    "type": "string",
                    "pattern": QUALIFIED_NAME_PATTERN,
                },
            },
        },
    })
}

fn condition_items() -> Value {
    json!({
        "description": "One aspect of the object's current state.",
        "type": "object",
        "required": ["lastTransitionTime", "message", "reason", "status", "type"],
        "properties": {
            "lastTransitionTime": {
                "description": "When the condition last changed status (RFC 3339).",
                "type": "string",
                "format": "date-time",
            },
            "message": {
                "description": "Human-readable details about the last transition; may be empty.",
                "type": "string",
                "maxLength": 32768,
            },
            "observedGeneration": {
                "description": "The metadata.generation the condition was computed from.",
                "type": "integer",
                "format": "int64",
                "minimum": 0,
            },
            "reason": {
                "description": "CamelCase identifier of why the condition last transitioned.",
                "type": "string",
                "maxLength": 1024,
                "minLength": 1,
                "pattern": CONDITION_REASON_PATTERN,
            },
            "status": {
                "description": "True, False or Unknown.",
                "type": "string",
                "enum": ["True", "False", "Unknown"],
            },
            "type": {
                "description": "The condition type in CamelCase, e.g. Ready.",
                "type": "string",
                "maxLength": 316,
                "pattern": CONDITION_TYPE_PATTERN,
            },
        },
    })
}

/// Status conditions as a map-list keyed by `type` (NodePool, NodeClaim).
pub(crate) fn conditions_map_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": condition_items(),
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// Status conditions as a plain list (EC2NodeClass, as upstream).
pub(crate) fn conditions_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": condition_items(),
    })
}

/// `core/v1` node selector requirements as they appear in `status.amis[].requirements`.
pub(crate) fn node_selector_requirements(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "description": "A label key, an operator and values, as in a node selector.",
            "type": "object",
            "required": ["key", "operator"],
            "properties": {
                "key": { "description": "The label key.", "type": "string" },
                "operator": {
                    "description": "In, NotIn, Exists, DoesNotExist, Gt or Lt.",
                    "type": "string",
                },
                "values": {
                    "description": "The values the operator compares against.",
                    "type": "array",
                    "items": { "type": "string" },
                    "x-kubernetes-list-type": "atomic",
                },
            },
        },
    })
}

/// `spec.kubelet`: typed known fields, and any other KubeletConfiguration field is kept.
pub(crate) fn preserve_unknown_fields(schema: &mut Schema) {
    schema.remove("additionalProperties");
    schema.insert("type".into(), json!("object"));
    schema.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
}
