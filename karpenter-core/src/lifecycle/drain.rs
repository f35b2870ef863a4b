//! Draining a node (upstream `node/termination/terminator/terminator.go` and `eviction.go`):
//! which pods still hold the node, which to evict now, which to delete because the node's
//! termination time is near, and which wait. Pure decisions over a snapshot; the executor
//! (`controller::node::termination`) evicts and deletes.

use crate::pod_view::PodView;
use crds::labels::{DO_NOT_DISRUPT_ANNOTATION, disrupted_no_schedule_taint};
use jiff::{SignedDuration, Timestamp};
use std::sync::Arc;

use crate::scheduling::pod::{is_owned_by, is_terminal};
use crate::scheduling::taints::tolerates;

/// A pod whose `deletionTimestamp` (the end of its grace period) passed longer ago than this is
/// stuck terminating and no longer holds the drain (upstream `IsStuckTerminating`).
pub const STUCK_TERMINATING: SignedDuration = SignedDuration::from_secs(60);
/// Kubernetes' default `terminationGracePeriodSeconds`.
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;
/// The priority classes whose pods are evicted last (upstream: `system-cluster-critical`,
/// `system-node-critical`).
pub const CRITICAL_PRIORITY_CLASSES: &[&str] = &["system-cluster-critical", "system-node-critical"];

/// What the drain does with one pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Delete it with this grace period (seconds, >= 1): the node's termination time is closer
    /// than the pod's own grace period, so eviction can no longer be waited for.
    ForceDelete {
        /// Grace period of the delete, seconds.
        grace_seconds: i64,
    },
    /// Ask the eviction API (PodDisruptionBudgets may refuse with 429).
    Evict,
    /// Leave it for now, for the reason given; the next plan looks again.
    Wait(Blocker),
}

/// Why a pod that holds the node is not evicted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// The pod carries `karpenter.sh/do-not-disrupt` (value `true`, or a duration from the
    /// pod's start that has not elapsed); it waits for the termination grace period.
    DoNotDisrupt,
    /// The pod is already terminating.
    Terminating,
    /// An earlier priority group is still draining (`group` is 1..=4).
    LaterGroup {
        /// The pod's [`group`]: 1 non-critical, 2 DaemonSet, 3 critical, 4 critical DaemonSet.
        group: u8,
    },
}

/// The drain of one node at one instant.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Pods that still hold the node, each with what to do now.
    pub pods: Vec<(Arc<PodView>, Step)>,
}

impl Plan {
    /// Whether no pod holds the node any more.
    pub fn drained(&self) -> bool {
        self.pods.is_empty()
    }
}

/// How a pod's `karpenter.sh/do-not-disrupt` annotation holds its node (upstream
/// `pkg/utils/pod/scheduling.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoNotDisrupt {
    /// `"true"`: until the annotation is removed.
    Always,
    /// A Go duration (e.g. `2h`) counted from the pod's start (or creation): until this time.
    Until(Timestamp),
}

/// What the pod's `karpenter.sh/do-not-disrupt` annotation says, if it says anything upstream
/// understands (other values, and a duration on a pod with no start or creation time, are
/// ignored). Whether a window is still running is [`do_not_disrupt`]'s question.
pub fn do_not_disrupt_annotation(pod: &PodView) -> Option<DoNotDisrupt> {
    let value = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DO_NOT_DISRUPT_ANNOTATION))?;
    if value == "true" {
        return Some(DoNotDisrupt::Always);
    }
    let window = crds::duration::parse_go_duration(value).ok()?;
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)?;
    let end = started
        .saturating_add(SignedDuration::try_from(window).ok()?)
        .ok()?;
    Some(DoNotDisrupt::Until(end))
}

/// Whether the pod opts out of voluntary disruption now: `karpenter.sh/do-not-disrupt: "true"`,
/// or a Go duration (e.g. `2h`) that has not elapsed since the pod started. Other values are
/// ignored, as upstream ignores them.
pub fn do_not_disrupt(pod: &PodView, now: Timestamp) -> bool {
    match do_not_disrupt_annotation(pod) {
        Some(DoNotDisrupt::Always) => true,
        Some(DoNotDisrupt::Until(end)) => end > now,
        None => false,
    }
}

/// Whether the pod holds its node's drain: active (not finished) and drainable
/// ([`is_drainable`]; upstream `IsWaitingEviction`).
pub fn holds_node(pod: &PodView, now: Timestamp) -> bool {
    !is_terminal(pod) && is_drainable(pod, now)
}

/// Whether a drain moves the pod off its node (upstream `IsDrainable`): not stuck terminating,
/// not tolerating `karpenter.sh/disrupted:NoSchedule` (it would come straight back), and not a
/// static pod owned by the node. Finished pods count as drainable.
pub fn is_drainable(pod: &PodView, now: Timestamp) -> bool {
    let disrupted = disrupted_no_schedule_taint();
    let tolerates_disrupted = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| tolerates(t, &disrupted)));
    let stuck = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| now.duration_since(t.0) > STUCK_TERMINATING);
    !stuck && !tolerates_disrupted && !is_owned_by(pod, "Node")
}

/// The eviction group, 1..=4 (upstream's order): non-critical pods, non-critical DaemonSet pods,
/// critical pods, critical DaemonSet pods. A group is evicted only once every earlier one is
/// gone, so DaemonSets (logging, networking) outlive the workloads that use them.
pub fn group(pod: &PodView) -> u8 {
    let critical = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c));
    let daemon = is_owned_by(pod, "DaemonSet");
    1 + u8::from(daemon) + 2 * u8::from(critical)
}

/// Plan the drain of the pods bound to a node. `termination_time` is the NodeClaim's
/// `karpenter.sh/nodeclaim-termination-timestamp` (deletion + `terminationGracePeriod`); without
/// it the drain waits as long as PDBs and do-not-disrupt pods make it.
pub fn plan(pods: &[Arc<PodView>], now: Timestamp, termination_time: Option<Timestamp>) -> Plan {
    let holding: Vec<&Arc<PodView>> = pods.iter().filter(|p| holds_node(p, now)).collect();
    let first_group = holding.iter().map(|p| group(p)).min().unwrap_or(0);
    let pods = holding
        .into_iter()
        .map(|pod| {
            let terminating = pod.metadata.deletion_timestamp.is_some();
            let step = if let Some(end) = termination_time.filter(|_| !terminating)
                && let Some(grace) = force_delete_grace(pod, now, end)
            {
                Step::ForceDelete {
                    grace_seconds: grace,
                }
            } else if terminating {
                Step::Wait(Blocker::Terminating)
            } else if group(pod) != first_group {
                Step::Wait(Blocker::LaterGroup { group: group(pod) })
            } else if do_not_disrupt(pod, now) {
                Step::Wait(Blocker::DoNotDisrupt)
            } else {
                Step::Evict
            };
            (Arc::clone(pod), step)
        })
        .collect();
    Plan { pods }
}

/// The grace period to delete a pod with when the node must be gone at `end`: once `now` is past
/// `end` minus the pod's own grace period, the seconds left until `end` (at least 1).
fn force_delete_grace(pod: &PodView, now: Timestamp, end: Timestamp) -> Option<i64> {
    let pod_grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS);
    let delete_at = end.checked_sub(SignedDuration::from_secs(pod_grace)).ok()?;
    (now >= delete_at).then(|| end.duration_since(now).as_secs().max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use testutil::{PodBuilder, T0};

    fn t(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    /// A running pod `name` (its uid too) on node `n`, created and started at [`T0`].
    fn pod(name: &str) -> PodBuilder {
        testutil::pod(name)
            .uid(name)
            .created(T0)
            .on_node("n")
            .phase("Running")
            .merge(json!({"status": {"startTime": T0}}))
    }

    fn steps(plan: &Plan) -> Vec<(String, Step)> {
        plan.pods
            .iter()
            .map(|(p, s)| (p.metadata.name.clone().unwrap_or_default(), s.clone()))
            .collect()
    }

    #[test]
    fn groups_drain_in_upstream_order() {
        let ds = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "d", "controller": true}]}});
        let critical = json!({"spec": {"priorityClassName": "system-node-critical"}});
        let mut critical_ds = ds.clone();
        json_patch::merge(&mut critical_ds, &critical);
        let pods = vec![
            pod("app").arc(),
            pod("logs").merge(ds).arc(),
            pod("dns").merge(critical).arc(),
            pod("cni").merge(critical_ds).arc(),
        ];
        let now = t("2026-01-01T01:00:00Z");
        let groups: Vec<u8> = pods.iter().map(|p| group(p)).collect();
        assert_eq!(groups, vec![1, 2, 3, 4]);
        assert_eq!(
            steps(&plan(&pods, now, None)),
            vec![
                ("app".into(), Step::Evict),
                ("logs".into(), Step::Wait(Blocker::LaterGroup { group: 2 })),
                ("dns".into(), Step::Wait(Blocker::LaterGroup { group: 3 })),
                ("cni".into(), Step::Wait(Blocker::LaterGroup { group: 4 })),
            ]
        );
        // With the workloads gone, the DaemonSet pod is next.
        assert_eq!(plan(&pods[1..], now, None).pods[0].1, Step::Evict);
    }

    #[test]
    fn finished_static_tolerating_and_stuck_pods_do_not_hold_the_node() {
        let now = t("2026-01-01T01:00:00Z");
        let pods = vec![
            pod("done").phase("Succeeded").arc(),
            pod("static").owner("v1", "Node", "n", "n").arc(),
            pod("tolerant").merge(json!({"spec": {"tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}]}})).arc(),
            pod("stuck").deleting("2026-01-01T00:58:00Z").arc(),
            pod("leaving").deleting("2026-01-01T00:59:30Z").arc(),
        ];
        assert_eq!(
            steps(&plan(&pods, now, None)),
            vec![("leaving".into(), Step::Wait(Blocker::Terminating))]
        );
        assert!(plan(&pods[..4], now, None).drained());
    }

    #[test]
    fn do_not_disrupt_waits_until_its_window_ends_or_the_termination_time_nears() {
        let now = t("2026-01-01T01:00:00Z");
        let pinned = pod("pinned").do_not_disrupt().arc();
        let windowed = pod("batch")
            .annotation(DO_NOT_DISRUPT_ANNOTATION, "2h")
            .arc();
        let elapsed = pod("old")
            .annotation(DO_NOT_DISRUPT_ANNOTATION, "30m")
            .arc();
        let invalid = pod("typo")
            .annotation(DO_NOT_DISRUPT_ANNOTATION, "yes")
            .arc();
        let pods = vec![pinned, windowed, elapsed, invalid];
        assert_eq!(
            steps(&plan(&pods, now, None)),
            vec![
                ("pinned".into(), Step::Wait(Blocker::DoNotDisrupt)),
                ("batch".into(), Step::Wait(Blocker::DoNotDisrupt)),
                ("old".into(), Step::Evict),
                ("typo".into(), Step::Evict),
            ]
        );
        // 20s before the node's termination time, pods with the default 30s grace period are
        // deleted with the 20s that remain; a pod with a 10s grace period is still evicted.
        let short = pod("short").grace_period(10).arc();
        let end = t("2026-01-01T01:00:20Z");
        assert_eq!(
            steps(&plan(&[Arc::clone(&pods[0]), short], now, Some(end))),
            vec![
                ("pinned".into(), Step::ForceDelete { grace_seconds: 20 }),
                ("short".into(), Step::Evict),
            ]
        );
        // Past the termination time, the grace period is at least one second.
        let late = t("2026-01-01T01:05:00Z");
        assert_eq!(
            plan(&pods[..1], late, Some(end)).pods[0].1,
            Step::ForceDelete { grace_seconds: 1 }
        );
    }
}
