//! A pod's constraints beyond resources and node requirements: topology spread, pod affinity and
//! anti-affinity (required and preferred), preferred node affinity and host ports, compiled from
//! its spec; and upstream's order for relaxing preferences when a pod cannot otherwise schedule
//! (`provisioning/scheduling/preferences.go`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PodAffinityTerm, TopologySpreadConstraint};

use crate::pod_view::PodView;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Expression, Selector, SelectorExt};

use super::requirements::{Requirement, RequirementError, Requirements};

/// A compiled label selector over pods. A missing selector matches nothing, as Kubernetes
/// treats a nil selector in affinity terms and spread constraints.
#[derive(Clone, Debug)]
pub struct PodSelector {
    selector: Option<Selector>,
    /// Canonical text (sorted expressions), the selector's identity for deduplication.
    pub canonical: String,
}

impl PodSelector {
    /// Compile a selector, adding `extra` expressions (from matchLabelKeys and
    /// mismatchLabelKeys). Invalid selectors match nothing.
    pub fn new(selector: Option<&LabelSelector>, extra: Vec<Expression>) -> PodSelector {
        let Some(ls) = selector else {
            return PodSelector {
                selector: None,
                canonical: "<nothing>".into(),
            };
        };
        match Selector::try_from(ls.clone()) {
            Ok(mut s) => {
                s.extend(extra);
                let mut parts: Vec<String> = s.clone().into_iter().map(|e| e.to_string()).collect();
                parts.sort();
                PodSelector {
                    selector: Some(s),
                    canonical: parts.join(","),
                }
            }
            Err(_) => PodSelector {
                selector: None,
                canonical: "<invalid>".into(),
            },
        }
    }

    /// Whether a pod with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }
}

/// Which namespaces an affinity term's selector applies to.
#[derive(Clone, Debug)]
pub enum NamespaceSpec {
    /// These namespaces (the pod's own when the term lists none and has no selector).
    Named(BTreeSet<String>),
    /// Namespaces whose labels the selector matches (`{}` matches all).
    Selected(Selector, String),
}

impl NamespaceSpec {
    /// Resolve against the cluster's namespaces and their labels.
    pub fn resolve(
        &self,
        namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> BTreeSet<String> {
        match self {
            NamespaceSpec::Named(n) => n.clone(),
            NamespaceSpec::Selected(s, _) => namespaces
                .iter()
                .filter(|(_, labels)| s.matches(labels))
                .map(|(n, _)| n.clone())
                .collect(),
        }
    }

    /// Canonical text for deduplication.
    pub fn canonical(&self) -> String {
        match self {
            NamespaceSpec::Named(n) => n.iter().cloned().collect::<Vec<_>>().join(","),
            NamespaceSpec::Selected(_, c) => format!("selector:{c}"),
        }
    }
}

/// A topology spread constraint.
#[derive(Clone, Debug)]
pub struct SpreadConstraint {
    /// Topology key, e.g. `topology.kubernetes.io/zone`.
    pub key: String,
    /// Largest allowed difference between a domain's matching pods and the global minimum.
    pub max_skew: i32,
    /// With fewer eligible domains than this, the global minimum counts as 0.
    pub min_domains: Option<i32>,
    /// `DoNotSchedule` (true) or `ScheduleAnyway` (false, a preference).
    pub hard: bool,
    /// Pods counted (with matchLabelKeys applied).
    pub selector: PodSelector,
    /// nodeAffinityPolicy `Honor` (default): only domains the pod's node requirements allow.
    pub honor_node_affinity: bool,
    /// nodeTaintsPolicy `Honor` (default `Ignore`): only domains whose taints the pod tolerates.
    pub honor_node_taints: bool,
}

/// A pod affinity or anti-affinity term.
#[derive(Clone, Debug)]
pub struct AffinityTerm {
    /// Topology key, e.g. `kubernetes.io/hostname`.
    pub key: String,
    /// Pods the term refers to (with matchLabelKeys / mismatchLabelKeys applied).
    pub selector: PodSelector,
    /// Namespaces of those pods.
    pub namespaces: NamespaceSpec,
}

/// A host port a container binds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Host IP (`0.0.0.0` when unset, which conflicts with every IP).
    pub ip: String,
    /// `ports[].hostPort`, 1 to 65535 (a port without a host port binds nothing and is skipped).
    pub port: i32,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

impl HostPort {
    /// Whether two bindings collide (upstream `HostPort.Matches`).
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.protocol == other.protocol
            && self.port == other.port
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// Everything a pod asks of its placement besides resources and required node requirements.
#[derive(Clone, Debug, Default)]
pub struct PodConstraints {
    /// Topology spread constraints, in spec order.
    pub spread: Vec<SpreadConstraint>,
    /// Required pod affinity (`requiredDuringSchedulingIgnoredDuringExecution`): each term
    /// needs a matching pod in the same topology domain.
    pub affinity: Vec<AffinityTerm>,
    /// Required pod anti-affinity: no pod a term matches may share its topology domain.
    pub anti_affinity: Vec<AffinityTerm>,
    /// Preferred pod affinity, heaviest first.
    pub preferred_affinity: Vec<AffinityTerm>,
    /// Preferred pod anti-affinity, heaviest first.
    pub preferred_anti_affinity: Vec<AffinityTerm>,
    /// Preferred node affinity, heaviest first.
    pub preferred_node: Vec<Requirements>,
    /// Host ports of the app and sidecar containers; pods whose ports conflict never share a
    /// node (upstream `HostPortUsage`).
    pub host_ports: Vec<HostPort>,
}

fn label_expressions(
    pod_labels: &BTreeMap<String, String>,
    keys: Option<&Vec<String>>,
    mismatch: bool,
) -> Vec<Expression> {
    keys.into_iter()
        .flatten()
        .filter_map(|k| {
            pod_labels.get(k).map(|v| {
                let set: BTreeSet<String> = [v.clone()].into();
                if mismatch {
                    Expression::NotIn(k.clone(), set)
                } else {
                    Expression::In(k.clone(), set)
                }
            })
        })
        .collect()
}

fn affinity_term(
    term: &PodAffinityTerm,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> AffinityTerm {
    let mut extra = label_expressions(labels, term.match_label_keys.as_ref(), false);
    extra.extend(label_expressions(
        labels,
        term.mismatch_label_keys.as_ref(),
        true,
    ));
    let namespaces = match &term.namespace_selector {
        Some(ls) => match Selector::try_from(ls.clone()) {
            Ok(s) => {
                let canonical = s.to_string();
                NamespaceSpec::Selected(s, canonical)
            }
            Err(_) => NamespaceSpec::Named(BTreeSet::new()),
        },
        None => {
            let listed: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
            NamespaceSpec::Named(if listed.is_empty() {
                [namespace.to_string()].into()
            } else {
                listed
            })
        }
    };
    AffinityTerm {
        key: term.topology_key.clone(),
        selector: PodSelector::new(term.label_selector.as_ref(), extra),
        namespaces,
    }
}

fn spread_constraint(
    c: &TopologySpreadConstraint,
    labels: &BTreeMap<String, String>,
) -> SpreadConstraint {
    SpreadConstraint {
        key: c.topology_key.clone(),
        max_skew: c.max_skew.max(1),
        min_domains: c.min_domains,
        hard: c.when_unsatisfiable != "ScheduleAnyway",
        selector: PodSelector::new(
            c.label_selector.as_ref(),
            label_expressions(labels, c.match_label_keys.as_ref(), false),
        ),
        honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
        honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
    }
}

/// Compile a pod's constraints.
///
/// Errors: a preferred node-affinity term with a malformed requirement.
pub fn compile(pod: &PodView) -> Result<PodConstraints, RequirementError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(PodConstraints::default());
    };
    let mut c = PodConstraints {
        spread: spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .map(|t| spread_constraint(t, &labels))
            .collect(),
        ..PodConstraints::default()
    };
    if let Some(aff) = &spec.affinity {
        if let Some(pa) = &aff.pod_affinity {
            c.affinity = pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(|t| affinity_term(t, namespace, &labels))
                .collect();
            let mut preferred: Vec<_> = pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .collect();
            preferred.sort_by_key(|w| std::cmp::Reverse(w.weight));
            c.preferred_affinity = preferred
                .iter()
                .map(|w| affinity_term(&w.pod_affinity_term, namespace, &labels))
                .collect();
        }
        if let Some(paa) = &aff.pod_anti_affinity {
            c.anti_affinity = paa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(|t| affinity_term(t, namespace, &labels))
                .collect();
            let mut preferred: Vec<_> = paa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .collect();
            preferred.sort_by_key(|w| std::cmp::Reverse(w.weight));
            c.preferred_anti_affinity = preferred
                .iter()
                .map(|w| affinity_term(&w.pod_affinity_term, namespace, &labels))
                .collect();
        }
        if let Some(na) = &aff.node_affinity {
            let mut preferred: Vec<_> = na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .collect();
            preferred.sort_by_key(|w| std::cmp::Reverse(w.weight));
            for p in preferred {
                let mut r = Requirements::new();
                for e in p.preference.match_expressions.iter().flatten() {
                    r.add(Requirement::from_node_selector(e)?);
                }
                c.preferred_node.push(r);
            }
        }
    }
    // Host ports bind for the pod's lifetime only in app containers and restartable (sidecar)
    // init containers; kube-scheduler's NodePorts ignores other init containers.
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    for container in spec.containers.iter().chain(sidecars) {
        for p in container.ports.iter().flatten() {
            if let Some(port) = p.host_port.filter(|p| *p != 0) {
                c.host_ports.push(HostPort {
                    ip: p
                        .host_ip
                        .clone()
                        .filter(|ip| !ip.is_empty())
                        .unwrap_or_else(|| "0.0.0.0".into()),
                    port,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                });
            }
        }
    }
    Ok(c)
}

/// How far a pod's preferences have been relaxed, in upstream's order: drop the first of several
/// required node-affinity terms, then preferred pod affinity (heaviest first), preferred pod
/// anti-affinity, preferred node affinity, one `ScheduleAnyway` spread at a time, and finally
/// tolerate `PreferNoSchedule` taints (only when some NodePool has such a taint).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relaxation {
    /// Required node-affinity terms dropped from the front.
    pub node_terms: usize,
    /// Preferred pod-affinity terms dropped (heaviest first).
    pub affinity: usize,
    /// Preferred pod anti-affinity terms dropped.
    pub anti_affinity: usize,
    /// Preferred node-affinity terms dropped.
    pub preferred_node: usize,
    /// `ScheduleAnyway` spreads dropped, in spec order.
    pub anyway_spreads: usize,
    /// `PreferNoSchedule` taints are tolerated.
    pub tolerate_prefer_no_schedule: bool,
}

impl Relaxation {
    /// The next relaxation step, or `None` when nothing is left to relax.
    pub fn next(
        self,
        node_terms: usize,
        c: &PodConstraints,
        prefer_no_schedule_exists: bool,
    ) -> Option<Relaxation> {
        let mut r = self;
        let anyway = c.spread.iter().filter(|s| !s.hard).count();
        if node_terms > r.node_terms + 1 {
            r.node_terms += 1;
        } else if r.affinity < c.preferred_affinity.len() {
            r.affinity += 1;
        } else if r.anti_affinity < c.preferred_anti_affinity.len() {
            r.anti_affinity += 1;
        } else if r.preferred_node < c.preferred_node.len() {
            r.preferred_node += 1;
        } else if r.anyway_spreads < anyway {
            r.anyway_spreads += 1;
        } else if prefer_no_schedule_exists && !r.tolerate_prefer_no_schedule {
            r.tolerate_prefer_no_schedule = true;
        } else {
            return None;
        }
        Some(r)
    }

    /// Whether a spread constraint (by index) is still in force.
    pub fn spread_active(&self, c: &PodConstraints, index: usize) -> bool {
        let s = &c.spread[index];
        if s.hard {
            return true;
        }
        let anyway_rank = c.spread[..index].iter().filter(|x| !x.hard).count();
        anyway_rank >= self.anyway_spreads
    }
}

/// The pod's node requirements at a relaxation level: the first remaining required term, plus
/// the heaviest remaining preferred term.
pub fn node_requirements(
    terms: &[Requirements],
    c: &PodConstraints,
    r: &Relaxation,
) -> Requirements {
    let mut reqs = terms
        .get(r.node_terms.min(terms.len().saturating_sub(1)))
        .cloned()
        .unwrap_or_default();
    if let Some(p) = c.preferred_node.get(r.preferred_node) {
        reqs.add_all(p);
    }
    reqs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use testutil::pod;

    #[test]
    fn spread_and_affinity_terms_compile_with_label_keys() {
        let p = pod("p")
            .namespace("ns1")
            .label("app", "web")
            .label("tier", "fe").spec(json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}],
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["tier"]},
                {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {"matchLabels": {"app": "web"}}, "nodeTaintsPolicy": "Honor", "nodeAffinityPolicy": "Ignore"}],
            "affinity": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "z", "labelSelector": {}}},
                    {"weight": 50, "podAffinityTerm": {"topologyKey": "heavy", "labelSelector": {}, "namespaces": ["a", "b"]}}]}}})).decode::<PodView>();
        let c = compile(&p).expect("compiles");
        assert_eq!(c.spread.len(), 2);
        assert!(c.spread[0].hard && !c.spread[1].hard);
        assert!(
            c.spread[0].selector.canonical.contains("tier in (fe)"),
            "{}",
            c.spread[0].selector.canonical
        );
        assert!(!c.spread[1].honor_node_affinity && c.spread[1].honor_node_taints);
        assert_eq!(c.anti_affinity.len(), 1);
        assert_eq!(c.preferred_anti_affinity[0].key, "heavy", "heaviest first");
        assert_eq!(c.preferred_anti_affinity[0].namespaces.canonical(), "a,b");
        assert_eq!(
            c.anti_affinity[0].namespaces.canonical(),
            "ns1",
            "own namespace by default"
        );
        assert_eq!(
            c.host_ports,
            vec![HostPort {
                ip: "0.0.0.0".into(),
                port: 8080,
                protocol: "TCP".into()
            }]
        );
        let web: BTreeMap<String, String> = [
            ("app".to_string(), "web".to_string()),
            ("tier".to_string(), "fe".to_string()),
        ]
        .into();
        assert!(c.spread[0].selector.matches(&web));
        assert!(
            !PodSelector::new(None, vec![]).matches(&web),
            "a nil selector matches nothing"
        );
    }

    #[test]
    fn relaxation_follows_upstream_order() {
        let p = pod("p")
            .namespace("ns1")
            .label("app", "web")
            .label("tier", "fe").spec(json!({"containers": [],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}],
            "affinity": {
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {"topologyKey": "k", "labelSelector": {}}}]},
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}}]}}})).decode::<PodView>();
        let c = compile(&p).expect("compiles");
        let mut r = Relaxation::default();
        let mut steps = Vec::new();
        while let Some(next) = r.next(2, &c, true) {
            steps.push(next);
            r = next;
        }
        assert_eq!(steps.len(), 5, "{steps:?}");
        assert_eq!(steps[0].node_terms, 1);
        assert_eq!(steps[1].affinity, 1);
        assert_eq!(steps[2].preferred_node, 1);
        assert_eq!(steps[3].anyway_spreads, 1);
        assert!(steps[4].tolerate_prefer_no_schedule);
        assert!(Relaxation::default().spread_active(&c, 0));
        assert!(!steps[3].spread_active(&c, 0));
    }
}
