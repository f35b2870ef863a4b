//! Topology: counts of matching pods per domain for every topology spread constraint and pod
//! (anti-)affinity term in play, and the domains each constraint leaves a pod (upstream
//! `provisioning/scheduling/topology.go`, `topologygroup.go`). Targets are existing nodes (their
//! labels) or NodeClaims (their requirements and a placeholder hostname). Two modes: Karpenter's
//! provisioning (hostname domains' global minimum is 0, since a new node can always be added) and
//! kube-scheduler's (only existing nodes).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::constraints::{NamespaceSpec, PodConstraints, PodSelector, Relaxation};
use super::requirements::{Requirement, Requirements};
use super::taints::untolerated;
use crds::labels::HOSTNAME_LABEL;

/// What a constraint does with the pods it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Topology spread: keep each domain within maxSkew of the least-used one.
    Spread,
    /// Pod affinity: only domains that already run matching pods.
    Affinity,
    /// Pod anti-affinity: only domains that run no matching pod.
    AntiAffinity,
}

/// Karpenter's provisioning simulation, or kube-scheduler over existing nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// New NodeClaims can always be added: the hostname spread minimum is 0.
    Provisioning,
    /// Only existing nodes: minima are computed over them.
    KubeScheduler,
}

/// Where a pod might go.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    /// An existing node (or a registered NodeClaim): labels are exact.
    Node {
        /// Target id (its hostname domain).
        id: usize,
        /// Node labels.
        labels: &'a BTreeMap<String, String>,
        /// Node taints.
        taints: &'a [Taint],
    },
    /// A NodeClaim being planned: its requirements bound the domains it may end up in.
    Claim {
        /// Target id (its placeholder hostname domain).
        id: usize,
        /// Current requirements.
        requirements: &'a Requirements,
        /// Taints the node will have.
        taints: &'a [Taint],
    },
}

impl Target<'_> {
    fn id(&self) -> usize {
        match self {
            Target::Node { id, .. } | Target::Claim { id, .. } => *id,
        }
    }

    fn taints(&self) -> &[Taint] {
        match self {
            Target::Node { taints, .. } | Target::Claim { taints, .. } => taints,
        }
    }

    /// The target's domains for a non-hostname key, `None` when unbounded (claim without an
    /// `In` requirement on the key).
    fn values(&self, key: &str) -> Option<Vec<String>> {
        match self {
            Target::Node { labels, .. } => Some(labels.get(key).cloned().into_iter().collect()),
            Target::Claim { requirements, .. } => match requirements.get(key) {
                Some(r) => r.values().map(|v| v.iter().cloned().collect()),
                None => None,
            },
        }
    }

    fn matches(&self, reqs: &Requirements) -> bool {
        match self {
            Target::Node { labels, .. } => reqs.matches_labels(labels).is_ok(),
            Target::Claim { requirements, .. } => requirements.intersects(reqs).is_ok(),
        }
    }
}

/// A pod as topology sees it.
#[derive(Clone, Copy, Debug)]
pub struct PodRef<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Constraints.
    pub constraints: &'a PodConstraints,
    /// Required node terms (the first is the pod's node filter for spread counting).
    pub node_terms: &'a [Requirements],
    /// Tolerations.
    pub tolerations: &'a [Toleration],
}

/// Why a pod's topology constraints leave no domain on a target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unsatisfiable {kind} constraint on {key}")]
pub struct TopologyError {
    /// `topology spread`, `pod affinity` or `pod anti-affinity`.
    pub kind: &'static str,
    /// Topology key.
    pub key: String,
    /// The constraint is another pod's anti-affinity against this one.
    pub inverse: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Spread(usize),
    Affinity,
    AntiAffinity,
    PreferredAffinity(usize),
    PreferredAntiAffinity(usize),
}

#[derive(Debug)]
struct Group {
    kind: Kind,
    key: String,
    hostname: bool,
    selector: PodSelector,
    namespaces: BTreeSet<String>,
    max_skew: i32,
    min_domains: Option<i32>,
    /// Spread counting filter (the owner's node requirements and tolerations).
    filter_reqs: Option<Requirements>,
    filter_tolerations: Option<Vec<Toleration>>,
    /// Domains of the key and their counts (hostname groups count per target id instead).
    by_value: BTreeMap<String, i32>,
    by_target: HashMap<usize, i32>,
    nonzero: usize,
}

impl Group {
    fn selects(&self, pod: &PodRef) -> bool {
        self.namespaces.contains(pod.namespace) && self.selector.matches(pod.labels)
    }

    fn counts_on(&self, target: &Target) -> bool {
        self.filter_reqs.as_ref().is_none_or(|r| target.matches(r))
            && self
                .filter_tolerations
                .as_ref()
                .is_none_or(|t| untolerated(target.taints(), t).is_none())
    }

    fn bump(&mut self, count: &mut i32) -> bool {
        *count += 1;
        *count == 1
    }

    fn record_value(&mut self, v: &str) {
        let mut c = self.by_value.get(v).copied().unwrap_or(0);
        let became = self.bump(&mut c);
        self.by_value.insert(v.to_string(), c);
        if became {
            self.nonzero += 1;
        }
    }

    fn record_target(&mut self, id: usize) {
        let mut c = self.by_target.get(&id).copied().unwrap_or(0);
        let became = self.bump(&mut c);
        self.by_target.insert(id, c);
        if became {
            self.nonzero += 1;
        }
    }

    fn target_count(&self, id: usize) -> i32 {
        self.by_target.get(&id).copied().unwrap_or(0)
    }
}

/// Domains each topology key can take: values with the taints of where they come from.
pub type Universe = BTreeMap<String, Vec<(String, Vec<Taint>)>>;

#[derive(Debug, Default, Clone)]
struct PodTopo {
    owned: Vec<(usize, Source)>,
    inverse_owned: Vec<usize>,
    selected_by: Vec<usize>,
    inverse_selecting: Vec<usize>,
}

/// The topology state of one solve or scheduling pass.
#[derive(Debug)]
pub struct Topology {
    mode: Mode,
    groups: Vec<Group>,
    inverse: Vec<Group>,
    pods: Vec<PodTopo>,
    universe: Universe,
    /// Targets `0..nodes` are existing nodes (kube-scheduler mode computes hostname minima over
    /// them); higher ids are NodeClaims being planned.
    nodes: usize,
}

fn group_identity(
    kind: Kind,
    key: &str,
    selector: &PodSelector,
    ns: &BTreeSet<String>,
    skew: i32,
    min: Option<i32>,
    filter: &str,
) -> String {
    format!(
        "{kind:?}|{key}|{}|{}|{skew}|{min:?}|{filter}",
        selector.canonical,
        ns.iter().cloned().collect::<Vec<_>>().join(",")
    )
}

impl Topology {
    /// Build groups for every constraint of `pods`, count `existing` pods (each with the target
    /// it runs on), and register existing pods' required anti-affinity as inverse constraints.
    /// `universe` lists the domains per key (from NodePools, instance types and nodes); target
    /// ids below `nodes` are existing nodes.
    pub fn new(
        mode: Mode,
        pods: &[PodRef],
        existing: &[(PodRef, Target)],
        universe: Universe,
        namespaces: &BTreeMap<String, BTreeMap<String, String>>,
        nodes: usize,
    ) -> Topology {
        let mut t = Topology {
            mode,
            groups: Vec::new(),
            inverse: Vec::new(),
            pods: vec![PodTopo::default(); pods.len()],
            universe,
            nodes,
        };
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut inverse_index: HashMap<String, usize> = HashMap::new();
        for (pi, pod) in pods.iter().enumerate() {
            let c = pod.constraints;
            for (si, s) in c.spread.iter().enumerate() {
                let ns: BTreeSet<String> = [pod.namespace.to_string()].into();
                let filter_reqs = s
                    .honor_node_affinity
                    .then(|| pod.node_terms.first().cloned().unwrap_or_default());
                let filter_tols = s.honor_node_taints.then(|| pod.tolerations.to_vec());
                let filter = format!(
                    "{}|{}",
                    filter_reqs
                        .as_ref()
                        .map(|r| r.to_string())
                        .unwrap_or_default(),
                    filter_tols
                        .as_ref()
                        .map(|t| format!("{t:?}"))
                        .unwrap_or_default()
                );
                let id = group_identity(
                    Kind::Spread,
                    &s.key,
                    &s.selector,
                    &ns,
                    s.max_skew,
                    s.min_domains,
                    &filter,
                );
                let g = t.group(
                    &mut index,
                    id,
                    Kind::Spread,
                    &s.key,
                    s.selector.clone(),
                    ns,
                    s.max_skew,
                    s.min_domains,
                    filter_reqs,
                    filter_tols,
                );
                t.pods[pi].owned.push((g, Source::Spread(si)));
            }
            let terms = [
                (Kind::Affinity, &c.affinity, None),
                (Kind::AntiAffinity, &c.anti_affinity, None),
                (Kind::Affinity, &c.preferred_affinity, Some(true)),
                (Kind::AntiAffinity, &c.preferred_anti_affinity, Some(false)),
            ];
            for (kind, list, preferred) in terms {
                for (ti, term) in list.iter().enumerate() {
                    let ns = term.namespaces.resolve(namespaces);
                    let id =
                        group_identity(kind, &term.key, &term.selector, &ns, i32::MAX, None, "");
                    let g = t.group(
                        &mut index,
                        id,
                        kind,
                        &term.key,
                        term.selector.clone(),
                        ns,
                        i32::MAX,
                        None,
                        None,
                        None,
                    );
                    let source = match (kind, preferred) {
                        (Kind::Affinity, None) => Source::Affinity,
                        (Kind::AntiAffinity, None) => Source::AntiAffinity,
                        (Kind::Affinity, Some(_)) => Source::PreferredAffinity(ti),
                        _ => Source::PreferredAntiAffinity(ti),
                    };
                    t.pods[pi].owned.push((g, source));
                }
            }
            for term in &c.anti_affinity {
                let g = t.inverse_group(
                    &mut inverse_index,
                    &term.key,
                    &term.selector,
                    &term.namespaces,
                    namespaces,
                );
                t.pods[pi].inverse_owned.push(g);
            }
        }
        // Existing pods' required anti-affinity constrains the pods being placed.
        for (pod, target) in existing {
            for term in &pod.constraints.anti_affinity {
                let g = t.inverse_group(
                    &mut inverse_index,
                    &term.key,
                    &term.selector,
                    &term.namespaces,
                    namespaces,
                );
                record_group(&mut t.inverse[g], target, true);
            }
        }
        for (pi, pod) in pods.iter().enumerate() {
            t.pods[pi].selected_by = (0..t.groups.len())
                .filter(|&g| t.groups[g].selects(pod))
                .collect();
            t.pods[pi].inverse_selecting = (0..t.inverse.len())
                .filter(|&g| t.inverse[g].selects(pod))
                .collect();
        }
        for (pod, target) in existing {
            for g in &mut t.groups {
                if g.selects(pod) && g.counts_on(target) {
                    let all = g.kind == Kind::AntiAffinity;
                    record_group(g, target, all);
                }
            }
        }
        t
    }

    #[allow(clippy::too_many_arguments)]
    fn group(
        &mut self,
        index: &mut HashMap<String, usize>,
        id: String,
        kind: Kind,
        key: &str,
        selector: PodSelector,
        namespaces: BTreeSet<String>,
        max_skew: i32,
        min_domains: Option<i32>,
        filter_reqs: Option<Requirements>,
        filter_tolerations: Option<Vec<Toleration>>,
    ) -> usize {
        if let Some(&g) = index.get(&id) {
            return g;
        }
        let hostname = key == HOSTNAME_LABEL;
        let mut by_value = BTreeMap::new();
        if !hostname {
            for (v, _) in self.universe.get(key).into_iter().flatten() {
                by_value.insert(v.clone(), 0);
            }
        }
        self.groups.push(Group {
            kind,
            key: key.to_string(),
            hostname,
            selector,
            namespaces,
            max_skew,
            min_domains,
            filter_reqs,
            filter_tolerations,
            by_value,
            by_target: HashMap::new(),
            nonzero: 0,
        });
        index.insert(id, self.groups.len() - 1);
        self.groups.len() - 1
    }

    fn inverse_group(
        &mut self,
        index: &mut HashMap<String, usize>,
        key: &str,
        selector: &PodSelector,
        namespaces: &NamespaceSpec,
        all_namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> usize {
        let ns = namespaces.resolve(all_namespaces);
        let id = group_identity(
            Kind::AntiAffinity,
            key,
            selector,
            &ns,
            i32::MAX,
            None,
            "inverse",
        );
        if let Some(&g) = index.get(&id) {
            return g;
        }
        self.inverse.push(Group {
            kind: Kind::AntiAffinity,
            key: key.to_string(),
            hostname: key == HOSTNAME_LABEL,
            selector: selector.clone(),
            namespaces: ns,
            max_skew: i32::MAX,
            min_domains: None,
            filter_reqs: None,
            filter_tolerations: None,
            by_value: BTreeMap::new(),
            by_target: HashMap::new(),
            nonzero: 0,
        });
        index.insert(id, self.inverse.len() - 1);
        self.inverse.len() - 1
    }

    /// Whether the pod takes part in any topology constraint (owns one, or is counted or
    /// constrained by one); pods that do not skip topology work entirely.
    pub fn involves(&self, pod: usize) -> bool {
        let p = &self.pods[pod];
        !(p.owned.is_empty()
            && p.inverse_owned.is_empty()
            && p.selected_by.is_empty()
            && p.inverse_selecting.is_empty())
    }

    /// The extra requirements the pod's constraints impose on a target (for a NodeClaim, its
    /// domains narrowed to the allowed ones; for a node, nothing or an error).
    ///
    /// Errors: a constraint leaves no domain.
    pub fn requirements(
        &self,
        pod_index: usize,
        pod: &PodRef,
        relaxation: &Relaxation,
        pod_reqs: &Requirements,
        target: &Target,
    ) -> Result<Requirements, TopologyError> {
        let mut out = Requirements::new();
        let topo = &self.pods[pod_index];
        for &(g, source) in &topo.owned {
            let active = match source {
                Source::Spread(i) => relaxation.spread_active(pod.constraints, i),
                Source::Affinity | Source::AntiAffinity => true,
                Source::PreferredAffinity(i) => i >= relaxation.affinity,
                Source::PreferredAntiAffinity(i) => i >= relaxation.anti_affinity,
            };
            if !active {
                continue;
            }
            let group = &self.groups[g];
            let allowed = self.allowed(group, pod, pod_reqs, target)?;
            if let Some(r) = allowed {
                out.add(r);
            }
        }
        for &g in &topo.inverse_selecting {
            let group = &self.inverse[g];
            let allowed = self
                .anti_affinity(group, pod_reqs, target, false)
                .map_err(|mut e| {
                    e.inverse = true;
                    e
                })?;
            if let Some(r) = allowed {
                out.add(r);
            }
        }
        Ok(out)
    }

    fn allowed(
        &self,
        g: &Group,
        pod: &PodRef,
        pod_reqs: &Requirements,
        target: &Target,
    ) -> Result<Option<Requirement>, TopologyError> {
        match g.kind {
            Kind::Spread => self.spread(g, pod, pod_reqs, target),
            Kind::Affinity => self.affinity(g, pod, pod_reqs, target),
            Kind::AntiAffinity => self.anti_affinity(g, pod_reqs, target, true),
        }
    }

    fn err(g: &Group) -> TopologyError {
        TopologyError {
            kind: match g.kind {
                Kind::Spread => "topology spread",
                Kind::Affinity => "pod affinity",
                Kind::AntiAffinity => "pod anti-affinity",
            },
            key: g.key.clone(),
            inverse: false,
        }
    }

    /// Candidate values of a target for a key, limited to what the pod allows.
    fn candidates(&self, g: &Group, pod_reqs: &Requirements, target: &Target) -> Vec<String> {
        let pod_ok = |v: &str| pod_reqs.get(&g.key).is_none_or(|r| r.has(v));
        match target.values(&g.key) {
            Some(vs) => vs.into_iter().filter(|v| pod_ok(v)).collect(),
            None => g.by_value.keys().filter(|v| pod_ok(v)).cloned().collect(),
        }
    }

    fn spread(
        &self,
        g: &Group,
        pod: &PodRef,
        pod_reqs: &Requirements,
        target: &Target,
    ) -> Result<Option<Requirement>, TopologyError> {
        let own = i32::from(g.selects(pod));
        if g.hostname {
            let count = g.target_count(target.id()) + own;
            let min = match self.mode {
                Mode::Provisioning => 0,
                Mode::KubeScheduler => {
                    let counted = g.by_target.keys().filter(|&&id| id < self.nodes).count();
                    if counted < self.nodes {
                        0
                    } else {
                        (0..self.nodes)
                            .map(|id| g.target_count(id))
                            .min()
                            .unwrap_or(0)
                    }
                }
            };
            return if count - min <= g.max_skew {
                Ok(None)
            } else {
                Err(Topology::err(g))
            };
        }
        // Global minimum over the domains the pod could use.
        let eligible = |v: &str| {
            let by_affinity =
                g.filter_reqs.is_none() || pod_reqs.get(&g.key).is_none_or(|r| r.has(v));
            let by_taints = g.filter_tolerations.as_ref().is_none_or(|tols| {
                self.universe
                    .get(&g.key)
                    .into_iter()
                    .flatten()
                    .any(|(value, taints)| value == v && untolerated(taints, tols).is_none())
            });
            by_affinity && by_taints
        };
        let domains: Vec<(&String, i32)> = g
            .by_value
            .iter()
            .filter(|(v, _)| eligible(v))
            .map(|(v, c)| (v, *c))
            .collect();
        let mut min = domains.iter().map(|(_, c)| *c).min().unwrap_or(0);
        if g.min_domains.is_some_and(|m| (domains.len() as i32) < m) {
            min = 0;
        }
        let mut best: Option<(i32, String)> = None;
        for v in self.candidates(g, pod_reqs, target) {
            let count = g.by_value.get(&v).copied().unwrap_or(0) + own;
            if count - min <= g.max_skew
                && best
                    .as_ref()
                    .is_none_or(|(c, bv)| count < *c || (count == *c && v < *bv))
            {
                best = Some((count, v));
            }
        }
        match best {
            Some((_, v)) => Ok(Some(Requirement::is_in(&g.key, [v]))),
            None => Err(Topology::err(g)),
        }
    }

    fn affinity(
        &self,
        g: &Group,
        pod: &PodRef,
        pod_reqs: &Requirements,
        target: &Target,
    ) -> Result<Option<Requirement>, TopologyError> {
        let bootstrap = g.selects(pod) && g.nonzero == 0;
        if g.hostname {
            return if g.target_count(target.id()) > 0 || bootstrap {
                Ok(None)
            } else {
                Err(Topology::err(g))
            };
        }
        let candidates = self.candidates(g, pod_reqs, target);
        let with_pods: Vec<String> = candidates
            .iter()
            .filter(|v| g.by_value.get(*v).is_some_and(|c| *c > 0))
            .cloned()
            .collect();
        if !with_pods.is_empty() {
            return Ok(Some(Requirement::is_in(&g.key, with_pods)));
        }
        if bootstrap {
            // The first pod of a self-affine group picks a domain; the rest follow it.
            if let Some(first) = candidates.into_iter().next() {
                return Ok(Some(Requirement::is_in(&g.key, [first])));
            }
        }
        Err(Topology::err(g))
    }

    /// Domains without matching pods. `pin` (the pod's own term) settles a NodeClaim on one of
    /// them, so the claim's domain is known and later pods can use the others.
    fn anti_affinity(
        &self,
        g: &Group,
        pod_reqs: &Requirements,
        target: &Target,
        pin: bool,
    ) -> Result<Option<Requirement>, TopologyError> {
        if g.hostname {
            return if g.target_count(target.id()) == 0 {
                Ok(None)
            } else {
                Err(Topology::err(g))
            };
        }
        let free: Vec<String> = self
            .candidates(g, pod_reqs, target)
            .into_iter()
            .filter(|v| g.by_value.get(v).is_none_or(|c| *c == 0))
            .collect();
        if free.is_empty() {
            return Err(Topology::err(g));
        }
        Ok(match target {
            Target::Node { .. } => None,
            Target::Claim { .. } if pin => free
                .into_iter()
                .next()
                .map(|v| Requirement::is_in(&g.key, [v])),
            Target::Claim { .. } => Some(Requirement::is_in(&g.key, free)),
        })
    }

    /// Count a placed pod: every group that selects it records its domain (spread and affinity
    /// only when the domain is known; anti-affinity every domain it might end up in), and its own
    /// anti-affinity terms record it for later pods.
    pub fn record(&mut self, pod_index: usize, target: &Target) {
        let topo = &self.pods[pod_index];
        for &g in &topo.selected_by {
            let group = &mut self.groups[g];
            if group.counts_on(target) {
                let all = group.kind == Kind::AntiAffinity;
                record_group(group, target, all);
            }
        }
        for &g in &topo.inverse_owned {
            record_group(&mut self.inverse[g], target, true);
        }
    }

    /// Keys that constrain some pod (the provisioner adds them to NodeClaim requirements).
    pub fn keys(&self) -> BTreeSet<String> {
        self.groups
            .iter()
            .chain(self.inverse.iter())
            .map(|g| g.key.clone())
            .collect()
    }
}

fn record_group(g: &mut Group, target: &Target, all_domains: bool) {
    if g.hostname {
        g.record_target(target.id());
        return;
    }
    match target.values(&g.key) {
        Some(vs) if vs.len() == 1 || (all_domains && !vs.is_empty()) => {
            for v in vs {
                g.record_value(&v);
            }
        }
        None if all_domains => {
            let all: Vec<String> = g.by_value.keys().cloned().collect();
            for v in all {
                g.record_value(&v);
            }
        }
        _ => {}
    }
}
