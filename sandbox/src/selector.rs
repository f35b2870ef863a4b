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

/// Parse a field selector such as `spec.nodeName=n1,status.phase!=Failed`.
pub fn parse_field_selector(s: &str) -> ApiResult<FieldSelector> {
    let mut terms = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (path, value, negated) = if let Some((p, v)) = part.split_once("!=") {
            (p, v, true)
        } else if let Some((p, v)) = part.split_once("==") {
            (p, v, false)
        } else if let Some((p, v)) = part.split_once('=') {
            (p, v, false)
        } else {
            return Err(ApiError::bad_request(format!(
                "invalid selector: '{part}'; can't understand '{part}'"
            )));
        };
        terms.push(FieldRequirement {
            path: path.trim().to_string(),
            value: value.trim().to_string(),
            negated,
        });
    }
    Ok(FieldSelector(terms))
}

impl FieldSelector {
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

fn field_string(object: &Value, path: &str) -> String {
    let mut cur = object;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
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
}
