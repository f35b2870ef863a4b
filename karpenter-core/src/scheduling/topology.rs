//! Topology: counts of matching pods per domain for every topology spread constraint and pod
//! (anti-)affinity term in play, and the domains each constraint leaves a pod (upstream
//! `provisioning/scheduling/topology.go`, `topologygroup.go`). Targets are existing nodes (their
//! labels) or NodeClaims (their requirements and a placeholder hostname). Two modes: Karpenter's
//! provisioning (hostname domains are targets, and their global minimum is 0, since a new node can
//! always be added) and kube-scheduler's (only existing nodes; the hostname is a label like any
//! other, required pod affinity counts the pods matching all of a pod's terms, and terminating
//! pods can be left out of spread counts).

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
        /// The node's labels: its domain for a topology key is that label's value.
        labels: &'a BTreeMap<String, String>,
        /// The node's taints (spreads with `nodeTaintsPolicy: Honor` skip untolerated ones).
        taints: &'a [Taint],
    },
    /// A NodeClaim being planned: its requirements bound the domains it may end up in.
    Claim {
        /// Target id (its placeholder hostname domain).
        id: usize,
        /// Its requirements so far: an `In` on a topology key bounds its domains, no
        /// requirement leaves them open.
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
    /// `In` requirement on the key). Borrowed: this runs for every NodeClaim a pod is tried on.
    fn values(&self, key: &str) -> Option<Domains<'_>> {
        match self {
            Target::Node { labels, .. } => Some(Domains::Label(labels.get(key))),
            Target::Claim { requirements, .. } => requirements.get(key)?.values().map(Domains::In),
        }
    }

    fn matches(&self, reqs: &Requirements) -> bool {
        match self {
            Target::Node { labels, .. } => reqs.matches_labels(labels).is_ok(),
            Target::Claim { requirements, .. } => requirements.intersects(reqs).is_ok(),
        }
    }
}

/// A target's domains for one key: a node's label value (none when it lacks the label), or the
/// values of a NodeClaim's `In` requirement.
#[derive(Clone, Copy, Debug)]
enum Domains<'a> {
    Label(Option<&'a String>),
    In(&'a BTreeSet<String>),
}

impl<'a> Domains<'a> {
    fn iter(self) -> impl Iterator<Item = &'a String> {
        let (label, set) = match self {
            Domains::Label(l) => (l, None),
            Domains::In(s) => (None, Some(s)),
        };
        label.into_iter().chain(set.into_iter().flatten())
    }

    fn len(self) -> usize {
        match self {
            Domains::Label(l) => usize::from(l.is_some()),
            Domains::In(s) => s.len(),
        }
    }
}

/// A pod as topology sees it.
#[derive(Clone, Copy, Debug)]
pub struct PodRef<'a> {
    /// The pod's namespace: spreads count only pods of it; affinity terms match it against
    /// their namespaces.
    pub namespace: &'a str,
    /// The pod's labels, matched by spread and affinity selectors.
    pub labels: &'a BTreeMap<String, String>,
    /// Its compiled spread and pod (anti-)affinity constraints.
    pub constraints: &'a PodConstraints,
    /// Required node terms (the first is the pod's node filter for spread counting).
    pub node_terms: &'a [Requirements],
    /// Its tolerations, for spreads with `nodeTaintsPolicy: Honor`.
    pub tolerations: &'a [Toleration],
}

/// Why a pod's topology constraints leave no domain on a target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unsatisfiable {kind} constraint on {key}")]
pub struct TopologyError {
    /// `topology spread`, `pod affinity` or `pod anti-affinity`.
    pub kind: &'static str,
    /// The topology key left without a domain, e.g. `topology.kubernetes.io/zone`.
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

/// A pod selector and the namespaces it applies to.
type Selection = (PodSelector, BTreeSet<String>);

#[derive(Debug)]
struct Group {
    kind: Kind,
    key: String,
    hostname: bool,
    selector: PodSelector,
    namespaces: BTreeSet<String>,
    /// Further selectors (and their namespaces) a pod must also match to count: a pod's other
    /// required affinity terms in kube-scheduler mode, which counts only pods matching all terms.
    also: Vec<Selection>,
    max_skew: i32,
    min_domains: Option<i32>,
    /// Spread counting filter (the owner's node requirements and tolerations).
    filter_reqs: Option<Requirements>,
    filter_tolerations: Option<Vec<Toleration>>,
    /// Domains of the key and their counts (hostname groups count per target id instead).
    by_value: BTreeMap<String, i32>,
    /// Counts per target id (dense: ids are node and NodeClaim indexes).
    by_target: Vec<i32>,
    nonzero: usize,
}

impl Group {
    fn selects(&self, pod: &PodRef) -> bool {
        let matches = |selector: &PodSelector, namespaces: &BTreeSet<String>| {
            namespaces.contains(pod.namespace) && selector.matches(pod.labels)
        };
        matches(&self.selector, &self.namespaces) && self.also.iter().all(|(s, ns)| matches(s, ns))
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
        if let Some(c) = self.by_value.get_mut(v) {
            *c += 1;
            if *c == 1 {
                self.nonzero += 1;
            }
            return;
        }
        self.by_value.insert(v.to_string(), 1);
        self.nonzero += 1;
    }

    fn record_target(&mut self, id: usize) {
        let mut c = self.target_count(id);
        let became = self.bump(&mut c);
        if self.by_target.len() <= id {
            self.by_target.resize(id + 1, 0);
        }
        self.by_target[id] = c;
        if became {
            self.nonzero += 1;
        }
    }

    fn target_count(&self, id: usize) -> i32 {
        self.by_target.get(id).copied().unwrap_or(0)
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
    /// `universe` lists the domains per key (from NodePools, instance types and nodes). Target ids
    /// below `_nodes` are existing nodes, higher ones NodeClaims being planned; the count itself
    /// is unused (kube-scheduler mode computed hostname minima from it and now reads the
    /// hostname labels instead).
    pub fn new(
        mode: Mode,
        pods: &[PodRef],
        existing: &[(PodRef, Target)],
        universe: Universe,
        namespaces: &BTreeMap<String, BTreeMap<String, String>>,
        _nodes: usize,
    ) -> Topology {
        Topology::with_spread_counts(mode, pods, existing, &[], universe, namespaces)
    }

    /// [`Topology::new`], leaving the existing pods whose `spread_counts` entry is `false` out of
    /// topology spread counts (kube-scheduler's PodTopologySpread skips terminating pods; they
    /// still count for pod affinity and anti-affinity). Missing entries count.
    pub fn with_spread_counts(
        mode: Mode,
        pods: &[PodRef],
        existing: &[(PodRef, Target)],
        spread_counts: &[bool],
        universe: Universe,
        namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Topology {
        let mut t = Topology {
            mode,
            groups: Vec::new(),
            inverse: Vec::new(),
            pods: vec![PodTopo::default(); pods.len()],
            universe,
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
                    ((s.selector.clone(), ns), Vec::new()),
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
                // kube-scheduler counts, for required affinity, only pods matching all the terms.
                let joint =
                    mode == Mode::KubeScheduler && kind == Kind::Affinity && preferred.is_none();
                for (ti, term) in list.iter().enumerate() {
                    let ns = term.namespaces.resolve(namespaces);
                    let also: Vec<Selection> = if joint {
                        list.iter()
                            .enumerate()
                            .filter(|(oi, _)| *oi != ti)
                            .map(|(_, o)| (o.selector.clone(), o.namespaces.resolve(namespaces)))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    let also_id: Vec<String> = also
                        .iter()
                        .map(|(s, ns)| {
                            let ns: Vec<&str> = ns.iter().map(String::as_str).collect();
                            format!("{}@{}", s.canonical, ns.join(","))
                        })
                        .collect();
                    let id = group_identity(
                        kind,
                        &term.key,
                        &term.selector,
                        &ns,
                        i32::MAX,
                        None,
                        &also_id.join(";"),
                    );
                    let g = t.group(
                        &mut index,
                        id,
                        kind,
                        &term.key,
                        ((term.selector.clone(), ns), also),
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
        for (i, (pod, target)) in existing.iter().enumerate() {
            let spread_counts = spread_counts.get(i).copied().unwrap_or(true);
            for g in &mut t.groups {
                if g.kind == Kind::Spread && !spread_counts {
                    continue;
                }
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
        ((selector, namespaces), also): (Selection, Vec<Selection>),
        max_skew: i32,
        min_domains: Option<i32>,
        filter_reqs: Option<Requirements>,
        filter_tolerations: Option<Vec<Toleration>>,
    ) -> usize {
        if let Some(&g) = index.get(&id) {
            return g;
        }
        let hostname = self.hostname_targets(key);
        let by_value = self.empty_domains(key, hostname);
        self.groups.push(Group {
            kind,
            key: key.to_string(),
            hostname,
            selector,
            namespaces,
            also,
            max_skew,
            min_domains,
            filter_reqs,
            filter_tolerations,
            by_value,
            by_target: Vec::new(),
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
        let hostname = self.hostname_targets(key);
        // The domains too, or a NodeClaim without a requirement on the key has no candidates.
        let by_value = self.empty_domains(key, hostname);
        self.inverse.push(Group {
            kind: Kind::AntiAffinity,
            key: key.to_string(),
            hostname,
            selector: selector.clone(),
            namespaces: ns,
            also: Vec::new(),
            max_skew: i32::MAX,
            min_domains: None,
            filter_reqs: None,
            filter_tolerations: None,
            by_value,
            by_target: Vec::new(),
            nonzero: 0,
        });
        index.insert(id, self.inverse.len() - 1);
        self.inverse.len() - 1
    }

    /// Every domain of the key with a zero count (none for hostname targets, counted per target).
    fn empty_domains(&self, key: &str, hostname: bool) -> BTreeMap<String, i32> {
        if hostname {
            return BTreeMap::new();
        }
        self.universe
            .get(key)
            .into_iter()
            .flatten()
            .map(|(v, _)| (v.clone(), 0))
            .collect()
    }

    /// Whether a key's domains are targets rather than label values: the hostname while
    /// provisioning, where every NodeClaim is a hostname of its own. kube-scheduler treats the
    /// hostname as any other node label.
    fn hostname_targets(&self, key: &str) -> bool {
        self.mode == Mode::Provisioning && key == HOSTNAME_LABEL
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

    /// How freely a planned pod may move to another NodeClaim after the solve (the cost re-pack):
    /// `None` when it must stay, because it owns a hostname-keyed constraint (its count on its
    /// own NodeClaim is what the constraint checked) or some pod's hostname affinity counts it
    /// (moving it could strand that pod). Otherwise whether it may only move among NodeClaims
    /// with the requirements it has now (`true`: a constraint keyed on another label, such as
    /// the zone, involves it; NodeClaims with identical requirements have identical domains, so
    /// every count and check stays as it was). Other pods' hostname spread and anti-affinity stay
    /// satisfied when a pod they count moves away, and a new NodeClaim is an empty hostname
    /// domain; the other direction, other pods' required anti-affinity against this one, is
    /// [`Topology::hostname_repellers`].
    pub fn mobility(&self, pod: usize) -> Option<bool> {
        let p = &self.pods[pod];
        let mut pinned = false;
        for &(g, _) in &p.owned {
            if self.groups[g].hostname {
                return None;
            }
            pinned = true;
        }
        for &g in &p.inverse_owned {
            if self.inverse[g].hostname {
                return None;
            }
            pinned = true;
        }
        for &g in &p.selected_by {
            let g = &self.groups[g];
            if g.hostname && g.kind == Kind::Affinity {
                return None;
            }
            pinned |= !g.hostname;
        }
        for &g in &p.inverse_selecting {
            pinned |= !self.inverse[g].hostname;
        }
        Some(pinned)
    }

    /// Ids of the hostname-keyed required anti-affinity terms (of any pod) that select this pod:
    /// it may not share a NodeClaim with a pod owning one of them.
    pub fn hostname_repellers(&self, pod: usize) -> Vec<usize> {
        self.pods[pod]
            .inverse_selecting
            .iter()
            .copied()
            .filter(|&g| self.inverse[g].hostname)
            .collect()
    }

    /// Ids of the hostname-keyed required anti-affinity terms this pod owns (see
    /// [`Topology::hostname_repellers`]).
    pub fn hostname_repels(&self, pod: usize) -> Vec<usize> {
        self.pods[pod]
            .inverse_owned
            .iter()
            .copied()
            .filter(|&g| self.inverse[g].hostname)
            .collect()
    }

    /// Whether a hostname-keyed constraint already rules out the target `target_id` for the pod:
    /// one of its active anti-affinity terms, or another pod's required anti-affinity against
    /// it, counts a pod there, or one of its hostname spreads is past its skew without it.
    /// [`Topology::requirements`] rejects all of these too; this check reads only counts, so the
    /// solver asks it first of every node and NodeClaim a pod is tried on.
    pub fn hostname_blocked(
        &self,
        pod_index: usize,
        relaxation: &Relaxation,
        pod: &PodRef,
        target_id: usize,
    ) -> bool {
        let topo = &self.pods[pod_index];
        let owned = topo.owned.iter().any(|&(g, source)| {
            let g = &self.groups[g];
            if !g.hostname {
                return false;
            }
            let count = g.target_count(target_id);
            match (g.kind, source) {
                (Kind::AntiAffinity, Source::AntiAffinity) => count > 0,
                (Kind::AntiAffinity, Source::PreferredAntiAffinity(i)) => {
                    i >= relaxation.anti_affinity && count > 0
                }
                (Kind::Spread, Source::Spread(i)) => {
                    relaxation.spread_active(pod.constraints, i) && count > g.max_skew
                }
                _ => false,
            }
        });
        owned
            || topo.inverse_selecting.iter().any(|&g| {
                let g = &self.inverse[g];
                g.hostname && g.target_count(target_id) > 0
            })
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

    /// Candidate values of a target for a key (its domains, or every domain seen when it is
    /// unbounded), limited to what the pod allows, in value order.
    fn candidates<'s>(
        g: &'s Group,
        pod_reqs: &'s Requirements,
        target: &'s Target,
    ) -> impl Iterator<Item = &'s String> + 's {
        let pod_req = pod_reqs.get(&g.key);
        let (bounded, open) = match target.values(&g.key) {
            Some(d) => (Some(d.iter()), None),
            None => (None, Some(g.by_value.keys())),
        };
        bounded
            .into_iter()
            .flatten()
            .chain(open.into_iter().flatten())
            .filter(move |v| pod_req.is_none_or(|r| r.has(v)))
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
            // A new NodeClaim is always an empty hostname domain: the global minimum is 0.
            let count = g.target_count(target.id()) + own;
            return if count <= g.max_skew {
                Ok(None)
            } else {
                Err(Topology::err(g))
            };
        }
        // Global minimum over the domains the pod could use.
        let pod_req = pod_reqs.get(&g.key);
        let eligible = |v: &str| {
            let by_affinity = g.filter_reqs.is_none() || pod_req.is_none_or(|r| r.has(v));
            let by_taints = g.filter_tolerations.as_ref().is_none_or(|tols| {
                self.universe
                    .get(&g.key)
                    .into_iter()
                    .flatten()
                    .any(|(value, taints)| value == v && untolerated(taints, tols).is_none())
            });
            by_affinity && by_taints
        };
        let (mut domains, mut min) = (0i32, None::<i32>);
        for (v, c) in &g.by_value {
            if eligible(v) {
                domains += 1;
                min = Some(min.map_or(*c, |m| m.min(*c)));
            }
        }
        let mut min = min.unwrap_or(0);
        if g.min_domains.is_some_and(|m| domains < m) {
            min = 0;
        }
        let mut best: Option<(i32, &String)> = None;
        for v in Topology::candidates(g, pod_reqs, target) {
            let count = g.by_value.get(v).copied().unwrap_or(0) + own;
            if count - min <= g.max_skew
                && best.is_none_or(|(c, bv)| count < c || (count == c && v < bv))
            {
                best = Some((count, v));
            }
        }
        match best {
            Some((_, v)) => Ok(Some(Requirement::is_in(&g.key, [v.as_str()]))),
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
        let with_pods: Vec<&str> = Topology::candidates(g, pod_reqs, target)
            .filter(|v| g.by_value.get(*v).is_some_and(|c| *c > 0))
            .map(String::as_str)
            .collect();
        if !with_pods.is_empty() {
            return Ok(Some(Requirement::is_in(&g.key, with_pods)));
        }
        if bootstrap {
            // The first pod of a self-affine group picks a domain; the rest follow it.
            if let Some(first) = Topology::candidates(g, pod_reqs, target).next() {
                return Ok(Some(Requirement::is_in(&g.key, [first.as_str()])));
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
        if let Target::Node { labels, .. } = target
            && !labels.contains_key(&g.key)
        {
            // A node without the topology label is in no domain: no pod there can conflict.
            return Ok(None);
        }
        let mut free = Topology::candidates(g, pod_reqs, target)
            .filter(|v| g.by_value.get(*v).is_none_or(|c| *c == 0))
            .map(String::as_str)
            .peekable();
        if free.peek().is_none() {
            return Err(Topology::err(g));
        }
        Ok(match target {
            Target::Node { .. } => None,
            Target::Claim { .. } if pin => free.next().map(|v| Requirement::is_in(&g.key, [v])),
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
        Some(vs) if vs.len() == 1 || (all_domains && vs.len() > 0) => {
            for v in vs.iter() {
                g.record_value(v);
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
