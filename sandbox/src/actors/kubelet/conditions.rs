//! The node conditions a simulated kubelet reports, and the failures the sandbox can make it
//! report. A real kubelet posts its node's conditions every few seconds, so a condition patched
//! by hand does not last; here the kubelet is told to fail through an annotation on the Node,
//! `fail.sandbox.karpenter.sh/<ConditionType>: "<Status> since <RFC 3339 time>"` (what
//! `karpenter sandbox fail-node` writes), and reports that condition with that status and that
//! `lastTransitionTime` for as long as the annotation is there; the time may lie in the past, so
//! a failure can be rehearsed as if it had begun long ago. Without the annotation the kubelet
//! reports its own conditions healthy again (`Ready=True`, no pressure) and restores any other
//! condition it had failed. Pure: the Node comes in, the conditions to write go out.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Prefix of the annotations that fail a condition; the rest of the key is the condition's type
/// (e.g. `fail.sandbox.karpenter.sh/Ready`).
pub const FAIL_ANNOTATION_PREFIX: &str = "fail.sandbox.karpenter.sh/";
/// The `reason` of a condition the kubelet reports failed because of an annotation.
pub const FAIL_REASON: &str = "SandboxFailure";
/// The `reason` of a failed condition, other than the kubelet's own, once its annotation is
/// gone.
pub const RECOVERED_REASON: &str = "SandboxRecovered";

/// The conditions the kubelet owns, healthy: type, status, reason, message (what a real
/// kubelet reports on a healthy node).
pub const KUBELET_CONDITIONS: [(&str, &str, &str, &str); 4] = [
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    (
        "DiskPressure",
        "False",
        "KubeletHasNoDiskPressure",
        "kubelet has no disk pressure",
    ),
    (
        "PIDPressure",
        "False",
        "KubeletHasSufficientPID",
        "kubelet has sufficient PID available",
    ),
    (
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    ),
];

/// A condition the sandbox is asked to fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Reported as the condition's `lastTransitionTime`.
    pub since: Timestamp,
}

impl Failure {
    /// The annotation value: `<Status> since <RFC 3339 time>`.
    pub fn annotation_value(&self) -> String {
        format!("{} since {}", self.status, self.since)
    }

    /// Parses [`Failure::annotation_value`]; `None` unless the status is `True`, `False` or
    /// `Unknown` and the time is RFC 3339.
    pub fn parse(value: &str) -> Option<Failure> {
        let (status, since) = value.trim().split_once(" since ")?;
        if !matches!(status, "True" | "False" | "Unknown") {
            return None;
        }
        Some(Failure {
            status: status.to_owned(),
            since: since.trim().parse().ok()?,
        })
    }
}

/// The failures the node's annotations ask for, by condition type (unreadable ones are
/// ignored).
pub fn failures(node: &Node) -> BTreeMap<String, Failure> {
    node.metadata
        .annotations
        .iter()
        .flatten()
        .filter_map(|(k, v)| {
            let type_ = k.strip_prefix(FAIL_ANNOTATION_PREFIX)?;
            if type_.is_empty() {
                return None;
            }
            Some((type_.to_owned(), Failure::parse(v)?))
        })
        .collect()
}

/// The healthy status of a condition type: `False` for the ones that report a problem (the
/// `*Pressure` ones, `NetworkUnavailable`), `True` for the rest (`Ready`, and the node
/// monitoring agent's `*Ready` ones).
pub fn healthy_status(type_: &str) -> &'static str {
    if type_.ends_with("Pressure") || type_ == "NetworkUnavailable" {
        "False"
    } else {
        "True"
    }
}

/// A condition that changed at `at`, posted at `now`.
fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    at: Timestamp,
    now: Timestamp,
) -> NodeCondition {
    NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_transition_time: Some(Time(at)),
        last_heartbeat_time: Some(Time(now)),
    }
}

/// The conditions the node's kubelet reports at `now`, when they differ from what the Node
/// has: each failure as its annotation says (status, `lastTransitionTime`); the kubelet's own
/// conditions healthy otherwise, and present (a hand-made change does not last, as with a real
/// kubelet); a condition failed by a removed annotation healthy again. Transitions made here are dated
/// `now`. `None`: nothing to write.
pub fn reported(node: &Node, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let failures = failures(node);
    let mut conditions: Vec<NodeCondition> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let before = conditions.clone();
    for (type_, failure) in &failures {
        let message = format!(
            "failed by the sandbox (annotation {FAIL_ANNOTATION_PREFIX}{type_}): karpenter \
             sandbox fail-node"
        );
        let wanted = condition(
            type_,
            &failure.status,
            FAIL_REASON,
            &message,
            failure.since,
            now,
        );
        match conditions.iter_mut().find(|c| &c.type_ == type_) {
            Some(c) => {
                let same = c.status == wanted.status
                    && c.reason == wanted.reason
                    && c.last_transition_time == wanted.last_transition_time;
                if !same {
                    *c = wanted;
                }
            }
            None => conditions.push(wanted),
        }
    }
    for c in conditions.iter_mut() {
        if failures.contains_key(&c.type_) {
            continue;
        }
        let own = KUBELET_CONDITIONS.iter().find(|k| k.0 == c.type_);
        let failed_here = c.reason.as_deref() == Some(FAIL_REASON);
        let healthy = healthy_status(&c.type_);
        if !(failed_here || (own.is_some() && c.status != healthy)) {
            continue;
        }
        *c = match own {
            Some((type_, status, reason, message)) => {
                condition(type_, status, reason, message, now, now)
            }
            None => condition(
                &c.type_,
                healthy,
                RECOVERED_REASON,
                "the sandbox no longer fails it",
                now,
                now,
            ),
        };
    }
    for (type_, status, reason, message) in KUBELET_CONDITIONS {
        if !conditions.iter().any(|c| c.type_ == type_) {
            conditions.push(condition(type_, status, reason, message, now, now));
        }
    }
    (conditions != before).then_some(conditions)
}

/// Whether the conditions say `Ready=True`.
pub fn is_ready(conditions: &[NodeCondition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    /// A node as the kubelet registered it at T0, with `annotations`.
    fn node(annotations: &[(&str, &str)]) -> Node {
        let conditions: Vec<NodeCondition> = KUBELET_CONDITIONS
            .iter()
            .map(|(ty, st, r, m)| {
                let t0 = t("2026-01-01T00:00:00Z");
                condition(ty, st, r, m, t0, t0)
            })
            .collect();
        let annotations: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "annotations": annotations},
            "status": {"conditions": conditions},
        }))
        .expect("a node")
    }

    fn with(node: &Node, conditions: Vec<NodeCondition>) -> Node {
        let mut n = node.clone();
        n.status.get_or_insert_with(Default::default).conditions = Some(conditions);
        n
    }

    fn status_of(conditions: &[NodeCondition], type_: &str) -> Option<(String, Timestamp)> {
        let c = conditions.iter().find(|c| c.type_ == type_)?;
        Some((c.status.clone(), c.last_transition_time.as_ref()?.0))
    }

    #[test]
    fn the_annotation_value_round_trips_and_rejects_other_text() {
        let f = Failure {
            status: "False".into(),
            since: t("2025-12-31T23:29:00Z"),
        };
        assert_eq!(f.annotation_value(), "False since 2025-12-31T23:29:00Z");
        assert_eq!(Failure::parse(&f.annotation_value()), Some(f));
        for bad in [
            "",
            "False",
            "Broken since 2025-12-31T23:29:00Z",
            "False since yesterday",
        ] {
            assert_eq!(Failure::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_failure_lasts_while_annotated_and_heals_without() {
        let now = t("2026-01-01T01:00:00Z");
        let healthy = node(&[]);
        assert_eq!(
            reported(&healthy, now),
            None,
            "a healthy node is left alone"
        );

        let key = format!("{FAIL_ANNOTATION_PREFIX}Ready");
        let failed = node(&[(&key, "False since 2026-01-01T00:29:00Z")]);
        let conditions = reported(&failed, now).expect("Ready fails");
        assert_eq!(
            status_of(&conditions, "Ready"),
            Some(("False".into(), t("2026-01-01T00:29:00Z")))
        );
        assert_eq!(conditions.len(), 4, "the other conditions stay");
        let reporting = with(&failed, conditions);
        assert_eq!(reported(&reporting, now), None, "kept as it is");

        // The annotation removed: Ready again, from now.
        let mut healed = reporting.clone();
        healed.metadata.annotations = None;
        let conditions = reported(&healed, now).expect("Ready again");
        assert_eq!(status_of(&conditions, "Ready"), Some(("True".into(), now)));
        assert_eq!(
            conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .and_then(|c| c.reason.clone()),
            Some("KubeletReady".into())
        );
        assert!(is_ready(&conditions));

        // A hand-made NotReady does not last either.
        let mut patched = healthy.clone();
        let conditions = patched
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .expect("conditions");
        conditions[3].status = "False".into();
        let conditions = reported(&patched, now).expect("the kubelet posts Ready");
        assert_eq!(status_of(&conditions, "Ready"), Some(("True".into(), now)));

        // A node without conditions gets the kubelet's.
        let mut bare = healthy.clone();
        bare.status = None;
        let conditions = reported(&bare, now).expect("the kubelet's conditions");
        assert_eq!(conditions.len(), 4);
        assert!(is_ready(&conditions));
    }

    #[test]
    fn other_conditions_are_added_and_restored() {
        let now = t("2026-01-01T01:00:00Z");
        let key = format!("{FAIL_ANNOTATION_PREFIX}AcceleratedHardwareReady");
        let failed = node(&[
            (&key, "False since 2026-01-01T00:40:00Z"),
            ("fail.sandbox.karpenter.sh/Ready", "nonsense"),
        ]);
        let conditions = reported(&failed, now).expect("added");
        assert_eq!(
            status_of(&conditions, "AcceleratedHardwareReady"),
            Some(("False".into(), t("2026-01-01T00:40:00Z")))
        );
        assert!(
            is_ready(&conditions),
            "an unreadable annotation fails nothing"
        );
        let mut healed = with(&failed, conditions);
        healed.metadata.annotations = None;
        let conditions = reported(&healed, now).expect("restored");
        let c = conditions
            .iter()
            .find(|c| c.type_ == "AcceleratedHardwareReady")
            .expect("still reported");
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some(RECOVERED_REASON))
        );
        assert_eq!(reported(&with(&healed, conditions), now), None);
        assert_eq!(healthy_status("MemoryPressure"), "False");
        assert_eq!(healthy_status("NetworkUnavailable"), "False");
        assert_eq!(healthy_status("KernelReady"), "True");
    }
}
