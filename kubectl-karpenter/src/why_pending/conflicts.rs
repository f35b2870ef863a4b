//! A pod whose own node requirements cannot all hold: `nodeSelector` and a required node-affinity
//! term, or two expressions of one term, that no node label satisfies together (`kubernetes.io/arch
//! In [amd64]` and `NotIn [amd64]`; `nodeSelector` `arch: amd64` and affinity `arch In [arm64]`).
//! The scheduler's requirement algebra intersects them into an empty set, which reads as
//! `kubernetes.io/arch DoesNotExist`, so every NodePool would be blamed for a conflict that is the
//! pod's alone. This module finds it from the pod spec, naming each side and where it is written.
//! Pure: the pod in, the conflicts out.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use karpenter_core::scheduling::requirements::Requirement;

/// One of the pod's requirements on a key, and where the pod states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stated {
    /// The requirement as the scheduler prints it, e.g. `kubernetes.io/arch NotIn [amd64]`.
    pub requirement: String,
    /// Where it is written: `nodeSelector`, `required node affinity` or, when there are several
    /// terms, `required node affinity term 2` (1-based).
    pub source: String,
}

/// A label key on which one alternative of the pod's requirements (`nodeSelector` and one required
/// node-affinity term) admits no node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The label key, e.g. `kubernetes.io/arch`.
    pub key: String,
    /// Every requirement of the alternative on that key, in the order written (two or more).
    pub stated: Vec<Stated>,
}

impl fmt::Display for Conflict {
    /// `kubernetes.io/arch In [amd64] (nodeSelector) and kubernetes.io/arch In [arm64] (required
    /// node affinity)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .stated
            .iter()
            .map(|s| format!("{} ({})", s.requirement, s.source))
            .collect();
        f.write_str(&parts.join(" and "))
    }
}

/// Why no node can ever take the pod, when its own requirements conflict in every alternative:
/// one [`Conflict`] per alternative (the first key that conflicts in each), in term order. `None`
/// when some alternative can hold, or when a requirement does not parse (the scheduler reports
/// that itself).
pub fn unsatisfiable(pod: &Pod) -> Option<Vec<Conflict>> {
    let alternatives = alternatives(pod)?;
    let conflicts: Vec<Conflict> = alternatives
        .iter()
        .map(|stated| first_conflict(stated))
        .collect::<Option<_>>()?;
    Some(conflicts)
}

/// The sentence `why-pending` prints for `conflicts` (as [`unsatisfiable`] returns them).
pub fn message(conflicts: &[Conflict]) -> String {
    match conflicts {
        [one] => format!(
            "its own node requirements conflict, so no node can take it: {one}; fix the pod's \
             nodeSelector or node affinity"
        ),
        many => {
            let terms: Vec<String> = many.iter().map(ToString::to_string).collect();
            format!(
                "every term of its required node affinity conflicts, so no node can take it: {}; \
                 fix the pod's nodeSelector or node affinity",
                terms.join("; ")
            )
        }
    }
}

/// The pod's requirement alternatives with their sources: `nodeSelector` ANDed into each required
/// node-affinity term (or alone when there is none). `None` when an expression does not parse or
/// a term uses `matchFields`.
fn alternatives(pod: &Pod) -> Option<Vec<Vec<(Requirement, String)>>> {
    let spec = pod.spec.as_ref()?;
    let selector: Vec<(Requirement, String)> = spec
        .node_selector
        .iter()
        .flatten()
        .map(|(k, v)| {
            (
                Requirement::is_in(k, [v.clone()]),
                "nodeSelector".to_owned(),
            )
        })
        .collect();
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|ns| ns.node_selector_terms.as_slice())
        .unwrap_or_default();
    if terms.is_empty() {
        return Some(vec![selector]);
    }
    let mut out = Vec::with_capacity(terms.len());
    for (i, term) in terms.iter().enumerate() {
        if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
            return None;
        }
        let source = match terms.len() {
            1 => "required node affinity".to_owned(),
            _ => format!("required node affinity term {}", i + 1),
        };
        let mut stated = selector.clone();
        for e in term.match_expressions.iter().flatten() {
            stated.push((Requirement::from_node_selector(e).ok()?, source.clone()));
        }
        out.push(stated);
    }
    Some(out)
}

/// The first key (in the order written) whose requirements in `stated` admit no node together.
/// A node without the label satisfies the key only if every requirement allows it absent (`NotIn`,
/// `DoesNotExist`); one with it only if some value satisfies them all.
fn first_conflict(stated: &[(Requirement, String)]) -> Option<Conflict> {
    let mut keys: Vec<&str> = Vec::new();
    for (r, _) in stated {
        if !keys.contains(&r.key.as_str()) {
            keys.push(&r.key);
        }
    }
    keys.into_iter().find_map(|key| {
        let on_key: Vec<&(Requirement, String)> =
            stated.iter().filter(|(r, _)| r.key == key).collect();
        let (first, rest) = on_key.split_first()?;
        if rest.is_empty() {
            return None;
        }
        let values = rest
            .iter()
            .fold(first.0.clone(), |all, (r, _)| all.intersection(r));
        let absent_ok = on_key.iter().all(|(r, _)| r.allows_absent());
        if !values.is_empty() || absent_ok {
            return None;
        }
        Some(Conflict {
            key: key.to_owned(),
            stated: on_key
                .iter()
                .map(|(r, source)| Stated {
                    requirement: r.to_string(),
                    source: source.clone(),
                })
                .collect(),
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A pod with `spec` (containers added).
    fn pod(spec: Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c"}]);
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).expect("pod")
    }

    /// A required node affinity of these terms, each a list of expressions.
    fn affinity(terms: Value) -> Value {
        let terms: Vec<Value> = terms
            .as_array()
            .expect("terms")
            .iter()
            .map(|t| json!({"matchExpressions": t}))
            .collect();
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": terms}}})
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> Value {
        json!({"key": key, "operator": op, "values": values})
    }

    const ARCH: &str = "kubernetes.io/arch";

    #[test]
    fn in_and_not_in_of_one_term() {
        let p = pod(json!({"affinity": affinity(json!([[
            expr(ARCH, "In", &["amd64"]),
            expr(ARCH, "NotIn", &["amd64"]),
        ]]))}));
        let conflicts = unsatisfiable(&p).expect("conflict");
        assert_eq!(
            message(&conflicts),
            "its own node requirements conflict, so no node can take it: kubernetes.io/arch In \
             [amd64] (required node affinity) and kubernetes.io/arch NotIn [amd64] (required \
             node affinity); fix the pod's nodeSelector or node affinity"
        );
    }

    #[test]
    fn node_selector_against_affinity() {
        let p = pod(json!({
            "nodeSelector": {ARCH: "amd64"},
            "affinity": affinity(json!([[expr(ARCH, "In", &["arm64"])]])),
        }));
        let conflicts = unsatisfiable(&p).expect("conflict");
        assert_eq!(
            conflicts[0].to_string(),
            "kubernetes.io/arch In [amd64] (nodeSelector) and kubernetes.io/arch In [arm64] \
             (required node affinity)"
        );
    }

    #[test]
    fn three_requirements_that_overlap_in_pairs_but_not_together() {
        let p = pod(json!({"affinity": affinity(json!([[
            expr("zone", "In", &["a", "b"]),
            expr("zone", "In", &["b", "c"]),
            expr("zone", "NotIn", &["b"]),
        ]]))}));
        assert_eq!(unsatisfiable(&p).expect("conflict")[0].stated.len(), 3);
    }

    #[test]
    fn one_satisfiable_term_is_enough() {
        let p = pod(json!({"affinity": affinity(json!([
            [expr(ARCH, "In", &["amd64"]), expr(ARCH, "NotIn", &["amd64"])],
            [expr(ARCH, "In", &["arm64"])],
        ]))}));
        assert_eq!(unsatisfiable(&p), None);
        let p = pod(json!({"affinity": affinity(json!([
            [expr(ARCH, "In", &["amd64"]), expr(ARCH, "NotIn", &["amd64"])],
            [expr("zone", "Exists", &[]), expr("zone", "DoesNotExist", &[])],
        ]))}));
        let conflicts = unsatisfiable(&p).expect("every term conflicts");
        assert!(
            message(&conflicts).starts_with(
                "every term of its required node affinity conflicts, so no node can take it: \
                 kubernetes.io/arch In [amd64] (required node affinity term 1) and \
                 kubernetes.io/arch NotIn [amd64] (required node affinity term 1); zone Exists \
                 (required node affinity term 2) and zone DoesNotExist (required node affinity \
                 term 2)"
            ),
            "{}",
            message(&conflicts)
        );
    }

    #[test]
    fn requirements_that_can_hold_together_are_no_conflict() {
        for exprs in [
            // A node without the label satisfies both.
            json!([
                expr(ARCH, "NotIn", &["amd64"]),
                expr(ARCH, "DoesNotExist", &[])
            ]),
            // A stated DoesNotExist alone is what the pod wants, not a conflict.
            json!([expr(ARCH, "DoesNotExist", &[])]),
            json!([
                expr(ARCH, "In", &["amd64", "arm64"]),
                expr(ARCH, "NotIn", &["amd64"])
            ]),
            json!([expr("cpu", "Gt", &["4"]), expr("cpu", "Lt", &["8"])]),
        ] {
            let p = pod(json!({"affinity": affinity(json!([exprs.clone()]))}));
            assert_eq!(unsatisfiable(&p), None, "{exprs}");
        }
        assert_eq!(
            unsatisfiable(&pod(json!({"nodeSelector": {ARCH: "amd64"}}))),
            None
        );
        // Integer bounds that leave no value do conflict.
        let p = pod(json!({"affinity": affinity(json!([[
            expr("cpu", "Gt", &["8"]), expr("cpu", "Lt", &["4"]),
        ]]))}));
        assert!(unsatisfiable(&p).is_some());
    }

    #[test]
    fn unparsable_requirements_are_left_to_the_scheduler() {
        let p = pod(json!({"affinity": affinity(json!([[
            expr(ARCH, "Near", &["amd64"]), expr(ARCH, "NotIn", &["amd64"]), expr(ARCH, "In", &["amd64"]),
        ]]))}));
        assert_eq!(unsatisfiable(&p), None);
    }
}
