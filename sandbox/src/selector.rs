//! Label and field selectors of list and watch requests (`labelSelector=`, `fieldSelector=`),
//! parsed from their query-string syntax; label matching is kube-core's.

use std::collections::{BTreeMap, BTreeSet};

use kube::core::{Expression, Selector, SelectorExt};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// Parse a label selector such as `app=web,tier!=db,env in (a,b),!legacy`.
///
/// Errors: a malformed requirement gives a 400 naming it, as kube-apiserver does.
pub fn parse_label_selector(s: &str) -> ApiResult<Selector> {
    let mut selector = Selector::default();
    for part in split_top_level(s) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        selector.extend(std::iter::once(parse_requirement(part)?));
    }
    Ok(selector)
}

fn parse_requirement(part: &str) -> ApiResult<Expression> {
    let bad = || ApiError::bad_request(format!("unable to parse requirement: {part:?}"));
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(
            valid_key(key.trim()).ok_or_else(bad)?,
        ));
    }
    for (op, notin) in [(" notin ", true), (" in ", false)] {
        if let Some((key, rest)) = part.split_once(op) {
            let values = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(bad)?;
            let set: BTreeSet<String> = values
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            let key = valid_key(key.trim()).ok_or_else(bad)?;
            return Ok(if notin {
                Expression::NotIn(key, set)
            } else {
                Expression::In(key, set)
            });
        }
    }
    if let Some((key, value)) = part.split_once("!=") {
        return Ok(Expression::NotEqual(
            valid_key(key.trim()).ok_or_else(bad)?,
            value.trim().to_string(),
        ));
    }
    if let Some((key, value)) = part.split_once('=') {
        let value = value.strip_prefix('=').unwrap_or(value);
        return Ok(Expression::Equal(
            valid_key(key.trim()).ok_or_else(bad)?,
            value.trim().to_string(),
        ));
    }
    Ok(Expression::Exists(valid_key(part).ok_or_else(bad)?))
}

fn valid_key(key: &str) -> Option<String> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    ok.then(|| key.to_string())
}

/// Split on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Whether an object's `metadata.labels` satisfy the selector.
pub fn labels_match(selector: &Selector, object: &Value) -> bool {
    if selector.selects_all() {
        return true;
    }
    selector.matches(&labels_of(object))
}

/// `metadata.labels` as a map (empty when absent).
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// One `path=value` or `path!=value` term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// Dotted field path, e.g. `spec.nodeName` or `involvedObject.uid`.
    pub path: String,
    /// The value compared with the field's string form.
    pub value: String,
    /// `!=` instead of `=`.
    pub negated: bool,
}

/// A parsed field selector: all terms must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<FieldRequirement>);

/// Parse a field selector such as `spec.nodeName=n1,status.phase!=Failed`, as apimachinery's
/// `fields.ParseSelector` does: terms split on commas not escaped by `\`; each term splits
/// at the first `!=`, `==` or `=` (nothing is trimmed); in a value, `\`, `,` and `=` must be
/// escaped with a backslash. Which fields a kind can be selected by is checked separately
/// ([`FieldSelector::for_kind`]).
///
/// Errors: 400 worded as apimachinery words it: `invalid selector: 'bogus'; can't understand
/// 'bogus'`, `invalid field selector: unescaped character in value: 61` (Go prints the
/// rune's code), `invalid field selector: invalid escape sequence: \x`.
pub fn parse_field_selector(s: &str) -> ApiResult<FieldSelector> {
    let mut terms = Vec::new();
    for part in split_terms(s) {
        if part.is_empty() {
            continue;
        }
        let Some((path, op, raw)) = split_term(part) else {
            return Err(ApiError::bad_request(format!(
                "invalid selector: '{s}'; can't understand '{part}'"
            )));
        };
        terms.push(FieldRequirement {
            path: path.to_string(),
            value: unescape_field_value(raw)?,
            negated: op == "!=",
        });
    }
    Ok(FieldSelector(terms))
}

/// The comma-separated terms of a field selector; an escaped comma (`\,`) stays in its term.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// A term split at the first operator: `(field, operator, raw value)`.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    term.char_indices().find_map(|(i, _)| {
        ["!=", "==", "="]
            .into_iter()
            .find(|op| term[i..].starts_with(op))
            .map(|op| (&term[..i], op, &term[i + op.len()..]))
    })
}

/// A field selector value with its escapes (`\\`, `\,`, `\=`) undone.
///
/// Errors: 400 for an unescaped `,` or `=`, or an unknown or unfinished escape.
fn unescape_field_value(raw: &str) -> ApiResult<String> {
    let mut value = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => value.push(e),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "invalid field selector: invalid escape sequence: \\{other}"
                    )));
                }
                None => {
                    return Err(ApiError::bad_request(
                        "invalid field selector: invalid escape sequence: \\",
                    ));
                }
            },
            ',' | '=' => {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: unescaped character in value: {}",
                    u32::from(c)
                )));
            }
            other => value.push(other),
        }
    }
    Ok(value)
}

/// The fields objects of a kind can be selected by, as kube-apiserver registers them
/// (`AddFieldLabelConversionFunc` in k8s.io/kubernetes `pkg/apis/*/v1/conversion.go`; every
/// other kind, custom resources included, only `metadata.name` and `metadata.namespace`).
fn selectable_fields(group: &str, kind: &str) -> &'static [&'static str] {
    const META: &[&str] = &["metadata.name", "metadata.namespace"];
    match (group, kind) {
        ("", "Pod") => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "Node") => &["metadata.name", "spec.unschedulable"],
        ("", "Namespace") => &["metadata.name", "status.phase"],
        ("", "Secret") => &["metadata.name", "metadata.namespace", "type"],
        ("", "Service") => &[
            "metadata.name",
            "metadata.namespace",
            "spec.clusterIP",
            "spec.type",
        ],
        ("", "ReplicationController") | ("apps", "ReplicaSet") => {
            &["metadata.name", "metadata.namespace", "status.replicas"]
        }
        ("batch", "Job") => &["metadata.name", "metadata.namespace", "status.successful"],
        ("", "Event") => &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => META,
    }
}

impl FieldSelector {
    /// This selector for objects of `kind` in API group `group`, checked against the fields
    /// kube-apiserver lets that kind be selected by (`spec.host`, which old clients send for
    /// pods, reads as `spec.nodeName`, as kube-apiserver converts it).
    ///
    /// Errors: 400 `field label not supported: <field>`, as kube-apiserver's list handler
    /// answers.
    pub fn for_kind(self, group: &str, kind: &str) -> ApiResult<FieldSelector> {
        let supported = selectable_fields(group, kind);
        self.0
            .into_iter()
            .map(|mut term| {
                if (group, kind, term.path.as_str()) == ("", "Pod", "spec.host") {
                    term.path = "spec.nodeName".into();
                }
                if supported.contains(&term.path.as_str()) {
                    Ok(term)
                } else {
                    Err(ApiError::bad_request(format!(
                        "field label not supported: {}",
                        term.path
                    )))
                }
            })
            .collect::<ApiResult<Vec<_>>>()
            .map(FieldSelector)
    }

    /// Whether the selector has no term (and so matches every object).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the object satisfies every term; a missing field reads as the empty string.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|t| {
            let actual = field_string(object, &t.path);
            (actual == t.value) != t.negated
        })
    }

    /// The value required by an `=` term on `path`, if there is one (used to index lookups).
    pub fn required(&self, path: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|t| t.path == path && !t.negated)
            .map(|t| t.value.as_str())
    }
}

/// A field's value as field selectors compare it: a string as it is, a missing one empty,
/// except the boolean fields kube-apiserver always fills in (`spec.unschedulable` of Nodes,
/// `spec.hostNetwork` of Pods: `false` when unset).
fn field_string(object: &Value, path: &str) -> String {
    let mut cur = object;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None if matches!(path, "spec.unschedulable" | "spec.hostNetwork") => {
                return "false".into();
            }
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn label_selector_grammar() {
        let cases = [
            ("app=web", json!({"app": "web"}), true),
            ("app==web", json!({"app": "web"}), true),
            ("app!=web", json!({"app": "db"}), true),
            ("app!=web", json!({}), true),
            ("app in (web, db)", json!({"app": "db"}), true),
            ("app notin (web,db)", json!({"app": "db"}), false),
            ("app,tier", json!({"app": "x"}), false),
            ("!legacy", json!({"legacy": "1"}), false),
            (
                "env in (a,b),app=web",
                json!({"env": "b", "app": "web"}),
                true,
            ),
            (
                "karpenter.sh/nodepool",
                json!({"karpenter.sh/nodepool": "default"}),
                true,
            ),
        ];
        for (sel, labels, want) in cases {
            let s = parse_label_selector(sel).expect(sel);
            assert_eq!(labels_match(&s, &obj(labels)), want, "{sel}");
        }
    }

    #[test]
    fn malformed_label_selector_is_rejected() {
        assert!(parse_label_selector("app in web").is_err());
        assert!(parse_label_selector("a b=c").is_err());
    }

    #[test]
    fn field_selector_reads_nested_fields() {
        let pod = json!({"metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let s = parse_field_selector("spec.nodeName=n1,status.phase!=Failed").expect("valid");
        assert!(s.matches(&pod));
        assert_eq!(s.required("spec.nodeName"), Some("n1"));
        let unbound = parse_field_selector("spec.nodeName=").expect("valid");
        assert!(!unbound.matches(&pod));
        assert!(unbound.matches(&json!({"spec": {}})));
        assert!(parse_field_selector("bogus").is_err());
    }

    #[test]
    fn malformed_field_selectors_are_refused_as_apimachinery_refuses_them() {
        let cases = [
            (
                "bogus",
                "invalid selector: 'bogus'; can't understand 'bogus'",
            ),
            (
                "spec.nodeName=a,oops",
                "invalid selector: 'spec.nodeName=a,oops'; can't understand 'oops'",
            ),
            (
                "spec.nodeName=a=b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "metadata.name!==x",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "metadata.name=a\\x",
                "invalid field selector: invalid escape sequence: \\x",
            ),
            (
                "metadata.name=a\\",
                "invalid field selector: invalid escape sequence: \\",
            ),
        ];
        for (selector, message) in cases {
            let err = parse_field_selector(selector).expect_err(selector);
            assert_eq!(err.reason, crate::error::Reason::BadRequest, "{selector}");
            assert_eq!(err.message, message, "{selector}");
        }
        let escaped = parse_field_selector(r"metadata.name=a\,b\=c\\d,,").expect("valid");
        assert_eq!(escaped.required("metadata.name"), Some(r"a,b=c\d"));
        let spaced = parse_field_selector("spec.nodeName = n1").expect("parses");
        assert_eq!(spaced.0[0].path, "spec.nodeName ", "nothing is trimmed");
    }

    #[test]
    fn each_kind_is_selected_by_its_own_fields_only() {
        let pods = |s: &str| parse_field_selector(s).expect(s).for_kind("", "Pod");
        assert!(pods("spec.nodeName=n1,status.phase!=Failed").is_ok());
        assert_eq!(
            pods("spec.host=n1")
                .expect("converted")
                .required("spec.nodeName"),
            Some("n1")
        );
        let err = pods("spec.nodeName = n1").expect_err("a padded field is another field");
        assert_eq!(err.message, "field label not supported: spec.nodeName ");
        let err = pods("=x").expect_err("no field");
        assert_eq!(err.message, "field label not supported: ");
        let events = parse_field_selector("reason=Nominated,involvedObject.uid=u")
            .expect("valid")
            .for_kind("", "Event");
        assert!(events.is_ok());
        let claims = parse_field_selector("status.providerID=x")
            .expect("valid")
            .for_kind("karpenter.sh", "NodeClaim");
        assert_eq!(
            claims
                .expect_err("custom resources: name and namespace")
                .message,
            "field label not supported: status.providerID"
        );
        let nodes = parse_field_selector("spec.unschedulable=false")
            .expect("valid")
            .for_kind("", "Node")
            .expect("supported");
        assert!(nodes.matches(&json!({"spec": {}})), "unset reads as false");
        assert!(!nodes.matches(&json!({"spec": {"unschedulable": true}})));
    }
}
