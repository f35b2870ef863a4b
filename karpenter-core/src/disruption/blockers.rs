//! What keeps a node from voluntary disruption (upstream `disruption/types.go`,
//! `state/statenode.go`, `pkg/utils/pod/scheduling.go`): the node or its NodeClaim annotated
//! `karpenter.sh/do-not-disrupt: "true"`, a pod annotated `karpenter.sh/do-not-disrupt` (`"true"`
//! or a duration still running), or a PodDisruptionBudget that allows no eviction of one of its
//! pods now. Serial upgrades and consolidation ask the same questions and get the same words.

use std::fmt;
use std::sync::Arc;

use crate::pod_view::PodView;
use crds::labels::DO_NOT_DISRUPT_ANNOTATION;
use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;

use crate::lifecycle::drain::{DoNotDisrupt, do_not_disrupt_annotation};
use crate::scheduling::constraints::PodSelector;

/// One reason a node cannot be disrupted now, naming the object responsible.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Blocker {
    /// The node, or its NodeClaim, is annotated `karpenter.sh/do-not-disrupt: "true"`.
    NodeOptsOut {
        /// `node` or `NodeClaim`: which object carries the annotation.
        object: String,
    },
    /// A pod is annotated `karpenter.sh/do-not-disrupt`.
    PodOptsOut {
        /// `namespace/name`.
        pod: String,
        /// When a duration-valued annotation runs out; `None` for `"true"`.
        until: Option<Timestamp>,
    },
    /// A PodDisruptionBudget covering a pod allows no disruption now
    /// (`status.disruptionsAllowed` is 0).
    PdbAllowsNone {
        /// The PodDisruptionBudget, `namespace/name`.
        pdb: String,
        /// The pod it covers, `namespace/name`.
        pod: String,
    },
    /// More than one PodDisruptionBudget covers a pod: the eviction API refuses to evict it
    /// (upstream blocks such nodes).
    SeveralPdbs {
        /// The pod, `namespace/name`.
        pod: String,
        /// The PodDisruptionBudgets, `namespace/name`.
        pdbs: Vec<String>,
    },
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::NodeOptsOut { object } => {
                write!(f, "the {object} has {DO_NOT_DISRUPT_ANNOTATION}")
            }
            Blocker::PodOptsOut { pod, until: None } => {
                write!(f, "pod {pod} has {DO_NOT_DISRUPT_ANNOTATION}")
            }
            Blocker::PodOptsOut {
                pod,
                until: Some(until),
            } => write!(
                f,
                "pod {pod} has {DO_NOT_DISRUPT_ANNOTATION} until {}",
                until.strftime("%Y-%m-%dT%H:%M:%SZ")
            ),
            Blocker::PdbAllowsNone { pdb, pod } => write!(
                f,
                "PodDisruptionBudget {pdb} allows no disruption (pod {pod})"
            ),
            Blocker::SeveralPdbs { pod, pdbs } => write!(
                f,
                "pod {pod} is covered by {} PodDisruptionBudgets ({}); the eviction API refuses it",
                pdbs.len(),
                pdbs.join(", ")
            ),
        }
    }
}

fn key(pod: &PodView) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// `karpenter.sh/do-not-disrupt: "true"` on an object's annotations (only `"true"` counts on
/// nodes and NodeClaims).
pub fn opts_out(annotations: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(DO_NOT_DISRUPT_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// The PodDisruptionBudgets whose selector matches `pod` in its namespace (a PDB without a
/// selector matches nothing, as in Kubernetes' policy/v1).
pub fn pdbs_of<'a>(
    pod: &PodView,
    pdbs: &'a [Arc<PodDisruptionBudget>],
) -> Vec<&'a Arc<PodDisruptionBudget>> {
    let ns = pod.namespace().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    pdbs.iter()
        .filter(|pdb| pdb.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|pdb| {
            let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
            selector.is_some() && PodSelector::new(selector, vec![]).matches(&labels)
        })
        .collect()
}

/// What keeps `pod` from being evicted now, if anything: its do-not-disrupt annotation (a
/// duration counts until it runs out at `now`), a covering PodDisruptionBudget with no
/// disruption allowed, or (with `several_pdbs_block`) more than one covering PDB.
pub fn pod_blocker(
    pod: &PodView,
    pdbs: &[Arc<PodDisruptionBudget>],
    now: Timestamp,
    several_pdbs_block: bool,
) -> Option<Blocker> {
    match do_not_disrupt_annotation(pod) {
        Some(DoNotDisrupt::Always) => {
            return Some(Blocker::PodOptsOut {
                pod: key(pod),
                until: None,
            });
        }
        Some(DoNotDisrupt::Until(end)) if end > now => {
            return Some(Blocker::PodOptsOut {
                pod: key(pod),
                until: Some(end),
            });
        }
        _ => {}
    }
    let covering = pdbs_of(pod, pdbs);
    if several_pdbs_block && covering.len() > 1 {
        return Some(Blocker::SeveralPdbs {
            pod: key(pod),
            pdbs: covering
                .iter()
                .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
                .collect(),
        });
    }
    covering
        .into_iter()
        .find(|pdb| {
            pdb.status
                .as_ref()
                .and_then(|s| s.disruptions_allowed)
                .unwrap_or(0)
                < 1
        })
        .map(|pdb| Blocker::PdbAllowsNone {
            pdb: format!("{}/{}", pdb.namespace().unwrap_or_default(), pdb.name_any()),
            pod: key(pod),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use testutil::T0;

    /// The pod shop/web-1 with `annotations` and `labels`, created and started at [`T0`].
    fn pod(annotations: serde_json::Value, labels: serde_json::Value) -> PodView {
        testutil::pod("web-1")
            .namespace("shop")
            .created(T0)
            .merge(
                json!({"metadata": {"annotations": annotations, "labels": labels},
                "status": {"startTime": T0}}),
            )
            .decode()
    }

    /// The PodDisruptionBudget `name` in `shop` over the pods of app `web`, allowing `allowed`
    /// evictions.
    fn pdb(name: &str, allowed: i32) -> Arc<PodDisruptionBudget> {
        testutil::pdb(name)
            .namespace("shop")
            .selecting("app", "web")
            .disruptions_allowed(allowed)
            .arc()
    }

    fn at(t: &str) -> Timestamp {
        t.parse().expect("time")
    }

    #[test]
    fn do_not_disrupt_true_blocks_and_a_duration_blocks_until_it_runs_out() {
        let always = pod(json!({"karpenter.sh/do-not-disrupt": "true"}), json!({}));
        let b = pod_blocker(&always, &[], at("2030-01-01T00:00:00Z"), true);
        assert_eq!(
            b.map(|b| b.to_string()).as_deref(),
            Some("pod shop/web-1 has karpenter.sh/do-not-disrupt")
        );
        let windowed = pod(json!({"karpenter.sh/do-not-disrupt": "2h"}), json!({}));
        let b = pod_blocker(&windowed, &[], at("2026-01-01T01:00:00Z"), true);
        assert_eq!(
            b,
            Some(Blocker::PodOptsOut {
                pod: "shop/web-1".into(),
                until: Some(at("2026-01-01T02:00:00Z"))
            })
        );
        assert_eq!(
            b.map(|b| b.to_string()).as_deref(),
            Some("pod shop/web-1 has karpenter.sh/do-not-disrupt until 2026-01-01T02:00:00Z")
        );
        assert_eq!(
            pod_blocker(&windowed, &[], at("2026-01-01T02:00:01Z"), true),
            None
        );
        let junk = pod(json!({"karpenter.sh/do-not-disrupt": "soon"}), json!({}));
        assert_eq!(
            pod_blocker(&junk, &[], at("2026-01-01T00:00:00Z"), true),
            None
        );
    }

    #[test]
    fn pdbs_that_allow_nothing_or_overlap_block() {
        let web = pod(json!({}), json!({"app": "web"}));
        let now = at("2026-01-01T00:00:00Z");
        assert_eq!(pod_blocker(&web, &[pdb("web", 1)], now, true), None);
        assert_eq!(
            pod_blocker(&web, &[pdb("web", 0)], now, true).map(|b| b.to_string()),
            Some("PodDisruptionBudget shop/web allows no disruption (pod shop/web-1)".into())
        );
        let both = [pdb("a", 1), pdb("b", 1)];
        assert!(matches!(
            pod_blocker(&web, &both, now, true),
            Some(Blocker::SeveralPdbs { .. })
        ));
        assert_eq!(pod_blocker(&web, &both, now, false), None);
        let other = pod(json!({}), json!({"app": "db"}));
        assert_eq!(pod_blocker(&other, &[pdb("web", 0)], now, true), None);
    }
}
