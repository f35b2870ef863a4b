//! What the scheduler needs to know about a pod, compiled once from its spec: requests, node
//! requirement alternatives (nodeSelector AND each required node-affinity term), tolerations,
//! and the provisionable-pod rule (upstream `pkg/utils/pod/scheduling.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;

use crate::pod_view::PodView;

use super::attach::Volumes;
use super::constraints::{self, PodConstraints};
use super::requirements::{Requirement, RequirementError, Requirements};
use super::resources::{CPU, MEMORY, PODS, QuantityError, Resources};

/// Namespace and name of a pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    /// `metadata.namespace`; empty when the pod has none.
    pub namespace: String,
    /// `metadata.name`; empty when the pod has none. Printed with the namespace as
    /// `namespace/name`.
    pub name: String,
}

impl PodKey {
    /// The key of `pod` (empty strings for a missing namespace or name).
    pub fn of(pod: &PodView) -> PodKey {
        PodKey {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for PodKey {
    /// `namespace/name`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod as the scheduler sees it.
#[derive(Clone, Debug)]
pub struct PodInfo {
    /// Namespace and name, printed `namespace/name`.
    pub key: PodKey,
    /// UID (tie-breaker in the queue order).
    pub uid: String,
    /// Effective requests as [`pod_requests`] counts them (cpu in millicores, memory in
    /// bytes, `pods: 1`).
    pub requests: Resources,
    /// Node requirement alternatives: the pod fits a node satisfying any one of them (required
    /// node-affinity terms are ORed; nodeSelector is ANDed into each).
    pub requirement_terms: Vec<Requirements>,
    /// `spec.tolerations` as written; matched against NodePool template taints and existing
    /// nodes' taints (only `NoSchedule` and `NoExecute` ones keep a pod off).
    pub tolerations: Vec<Toleration>,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Creation time in seconds since the epoch (queue order tie-breaker).
    pub created: i64,
    /// The node the pod is bound to, if any.
    pub node_name: Option<String>,
    /// `metadata.labels`: what other pods' spread and (anti-)affinity selectors match.
    pub labels: BTreeMap<String, String>,
    /// Topology spread, pod (anti-)affinity, preferred node affinity and host ports.
    pub constraints: PodConstraints,
    /// The volumes it attaches per CSI driver ([`super::volumes::VolumeIndex::attachments`]);
    /// empty as compiled, set by whoever holds the volume index.
    pub volumes: Volumes,
}

/// Why a pod cannot be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    /// A request or limit is not a valid quantity.
    #[error("invalid resource quantity in container {container:?}: {source}")]
    Quantity {
        /// The container's name, or `<overhead>` for `spec.overhead`.
        container: String,
        /// The quantity that does not parse.
        source: QuantityError,
    },
    /// A node-affinity requirement is malformed.
    #[error("invalid node affinity: {0}")]
    Requirement(#[from] RequirementError),
    /// The pod uses `matchFields`, which Karpenter does not support for provisioning.
    #[error("node affinity uses matchFields, which Karpenter cannot provision for")]
    MatchFields,
}

impl PodInfo {
    /// Compile a pod.
    ///
    /// Errors: malformed quantities or requirements, or `matchFields` terms.
    pub fn from_pod(pod: &PodView) -> Result<PodInfo, PodError> {
        PodInfo::with_terms(pod, requirement_terms(pod)?)
    }

    /// [`PodInfo::from_pod`] for a pod already bound to a node, which the solver reads for what
    /// it holds on that node (requests, host ports, labels for other pods' affinity and
    /// topology spread, its own anti-affinity), never to place it: node affinity with
    /// `matchFields` (a DaemonSet pod's, pinned to its node by name) is read as its
    /// `nodeSelector` alone instead of refusing the pod. Upstream's cluster state counts every
    /// bound pod, DaemonSet pods included (`state.Cluster`'s pod tracking).
    ///
    /// Errors: as [`PodInfo::from_pod`], but never [`PodError::MatchFields`].
    pub fn from_bound_pod(pod: &PodView) -> Result<PodInfo, PodError> {
        let terms = match requirement_terms(pod) {
            Err(PodError::MatchFields) => vec![node_selector(pod)],
            terms => terms?,
        };
        PodInfo::with_terms(pod, terms)
    }

    fn with_terms(
        pod: &PodView,
        requirement_terms: Vec<Requirements>,
    ) -> Result<PodInfo, PodError> {
        let meta = &pod.metadata;
        let spec = pod.spec.as_ref();
        Ok(PodInfo {
            key: PodKey::of(pod),
            uid: meta.uid.clone().unwrap_or_default(),
            requests: pod_requests(pod)?,
            requirement_terms,
            tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default(),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            created: meta
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
            node_name: spec
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            labels: meta.labels.clone().unwrap_or_default(),
            constraints: constraints::compile(pod)?,
            volumes: Volumes::default(),
        })
    }

    /// AND volume topology alternatives (from the pod's PersistentVolumes or StorageClasses)
    /// into the pod's requirement terms: every term gets every alternative.
    pub fn add_volume_requirements(&mut self, alternatives: &[Requirements]) {
        if alternatives.is_empty() {
            return;
        }
        let mut terms = Vec::with_capacity(self.requirement_terms.len() * alternatives.len());
        for term in &self.requirement_terms {
            for alt in alternatives {
                let mut t = term.clone();
                t.add_all(alt);
                terms.push(t);
            }
        }
        self.requirement_terms = terms;
    }
}

/// A pod's effective requests as kube-scheduler counts them against a node's allocatable
/// (Kubernetes `resourcehelper.PodRequests`, which upstream Karpenter's
/// `resources.RequestsForPods` calls): cpu in millicores, memory and ephemeral-storage in
/// bytes, extended resources in units, plus `pods: 1`.
///
/// - App containers are summed; restartable (sidecar) init containers run alongside them and
///   are added too.
/// - Each other init container runs with the sidecars started before it, so its requests plus
///   theirs is a floor; the pod asks the largest of those floors and the sum above.
/// - Pod-level `spec.resources.requests` (Kubernetes 1.34 `PodLevelResources`, on by default)
///   replace that aggregate for `cpu` and `memory`, the resources it supports.
/// - `spec.overhead` (the RuntimeClass's) is added last.
///
/// Unlike [`PodInfo::from_pod`] it reads nothing but resources, so it also takes pods the
/// provisioner cannot compile (a DaemonSet pod's `matchFields` affinity).
///
/// Errors: [`PodError::Quantity`] naming the container (`<pod>` for pod-level resources,
/// `<overhead>` for `spec.overhead`) whose request does not parse.
pub fn pod_requests(pod: &PodView) -> Result<Resources, PodError> {
    let mut requests = Resources::default();
    let Some(spec) = pod.spec.as_ref() else {
        requests.set(PODS, 1);
        return Ok(requests);
    };
    for c in &spec.containers {
        requests.add(&container_requests(&c.name, c.resources.as_ref())?);
    }
    let mut sidecars = Resources::default();
    let mut init_floor = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(&c.name, c.resources.as_ref())?;
        if c.restart_policy.as_deref() == Some("Always") {
            requests.add(&r);
            sidecars.add(&r);
            init_floor = init_floor.max(&sidecars);
        } else {
            init_floor = init_floor.max(&r.plus(&sidecars));
        }
    }
    let mut requests = requests.max(&init_floor);
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        for name in [CPU, MEMORY] {
            if let Some(q) = pod_level.get(name) {
                requests
                    .set_parsed(name, &q.0)
                    .map_err(|source| PodError::Quantity {
                        container: "<pod>".into(),
                        source,
                    })?;
            }
        }
    }
    if let Some(overhead) = &spec.overhead {
        let o = Resources::from_list(overhead).map_err(|source| PodError::Quantity {
            container: "<overhead>".into(),
            source,
        })?;
        requests.add(&o);
    }
    requests.set(PODS, 1);
    Ok(requests)
}

fn container_requests(
    name: &str,
    resources: Option<&k8s_openapi::api::core::v1::ResourceRequirements>,
) -> Result<Resources, PodError> {
    let Some(list) = resources.and_then(|r| r.requests.as_ref()) else {
        return Ok(Resources::default());
    };
    Resources::from_list(list).map_err(|source| PodError::Quantity {
        container: name.to_string(),
        source,
    })
}

/// The pod's `nodeSelector` as requirements (`In` one value per key).
fn node_selector(pod: &PodView) -> Requirements {
    let mut base = Requirements::new();
    for (k, v) in pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .into_iter()
        .flatten()
    {
        base.add(Requirement::is_in(k, [v.clone()]));
    }
    base
}

fn requirement_terms(pod: &PodView) -> Result<Vec<Requirements>, PodError> {
    let spec = pod.spec.as_ref();
    let base = node_selector(pod);
    let terms = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|ns| ns.node_selector_terms.as_slice())
        .unwrap_or_default();
    if terms.is_empty() {
        return Ok(vec![base]);
    }
    let mut out = Vec::with_capacity(terms.len());
    for term in terms {
        if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
            return Err(PodError::MatchFields);
        }
        let mut r = base.clone();
        for e in term.match_expressions.iter().flatten() {
            r.add(Requirement::from_node_selector(e)?);
        }
        out.push(r);
    }
    Ok(out)
}

/// Whether Karpenter should provision for this pod: kube-scheduler marked it
/// `PodScheduled=False/Unschedulable`, it is not bound, not nominated, not terminal or deleting,
/// and not owned by a DaemonSet or a Node (static pod).
pub fn is_provisionable(pod: &PodView) -> bool {
    let unschedulable = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        });
    let nominated = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    unschedulable
        && !nominated
        && is_waiting(pod)
        && !is_owned_by(pod, "DaemonSet")
        && !is_owned_by(pod, "Node")
}

/// Whether a pod still waits for a node: not bound, not finished and not being deleted.
pub fn is_waiting(pod: &PodView) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    !bound && !is_terminal(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// Whether the pod finished (phase Succeeded or Failed).
pub fn is_terminal(pod: &PodView) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether a controller owner reference of this kind exists.
pub fn is_owned_by(pod: &PodView, kind: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == kind && o.controller == Some(true))
}

/// Queue order upstream uses (`provisioning/scheduling/queue.go`): cpu desc, memory desc,
/// creation time, uid — first-fit decreasing.
pub fn queue_order(a: &PodInfo, b: &PodInfo) -> std::cmp::Ordering {
    b.requests
        .cpu
        .cmp(&a.requests.cpu)
        .then(b.requests.memory.cmp(&a.requests.memory))
        .then(a.created.cmp(&b.created))
        .then(a.uid.cmp(&b.uid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use testutil::pod;

    #[test]
    fn requests_take_the_larger_of_containers_and_init() {
        let p = pod("p").uid("u").spec(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m", "nvidia.com/gpu": "1"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "1Mi"}}}],
        })).decode::<PodView>();
        let info = PodInfo::from_pod(&p).expect("compiles");
        assert_eq!(info.requests.cpu, 2000);
        assert_eq!(info.requests.memory, 64 << 20);
        assert_eq!(info.requests.get("nvidia.com/gpu"), 1);
        assert_eq!(info.requests.pods, 1);
    }

    #[test]
    fn requests_count_sidecars_and_overhead_and_ignore_affinity() {
        // A DaemonSet pod: pinned with `matchFields`, which the provisioner cannot compile,
        // yet its requests count on its node.
        let p = pod("agent").uid("u").spec(json!({
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "120m", "memory": "1Gi"}}}],
            "overhead": {"cpu": "10m", "memory": "1Mi"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}},
        })).decode::<PodView>();
        assert_eq!(PodInfo::from_pod(&p).err(), Some(PodError::MatchFields));
        // Bound, it is read for what it holds on its node, its pinning ignored.
        let bound = PodInfo::from_bound_pod(&p).expect("a bound DaemonSet pod is read");
        assert_eq!(bound.requirement_terms.len(), 1);
        assert!(bound.requirement_terms[0].is_empty());
        let r = pod_requests(&p).expect("requests parse");
        // cpu: max(100m + 50m sidecar, 120m init + the 50m sidecar started before it) + 10m
        // overhead; memory: the init container's 1Gi beats 128Mi, plus 1Mi overhead.
        assert_eq!((r.cpu, r.memory, r.pods), (180, (1 << 30) + (1 << 20), 1));
    }

    #[test]
    fn an_init_container_before_a_sidecar_does_not_run_with_it() {
        // Kubernetes `PodRequests`: sidecars count only for init containers after them.
        let p = pod("p").uid("u").spec(json!({
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}],
            "initContainers": [
                {"name": "first", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                {"name": "last", "resources": {"requests": {"cpu": "250m"}}}],
        })).decode::<PodView>();
        // max(100m + 200m, 500m, 250m + 200m) = 500m.
        assert_eq!(pod_requests(&p).expect("parses").cpu, 500);
    }

    #[test]
    fn pod_level_requests_replace_the_containers_for_cpu_and_memory() {
        // Kubernetes 1.34 PodLevelResources: `spec.resources` wins for cpu and memory; other
        // resources still come from the containers; overhead is added on top.
        let p = pod("p")
            .uid("u")
            .spec(json!({
                "resources": {"requests": {"cpu": "2500m", "memory": "1Gi"}},
                "containers": [
                    {"name": "a", "resources": {"requests": {"ephemeral-storage": "1Gi"}}},
                    {"name": "b"}],
                "overhead": {"cpu": "100m"},
            }))
            .decode();
        let r = pod_requests(&p).expect("parses");
        assert_eq!((r.cpu, r.memory, r.ephemeral), (2600, 1 << 30, 1 << 30));
        let bad = pod("q")
            .uid("u")
            .spec(json!({
            "resources": {"requests": {"cpu": "lots"}}, "containers": []}))
            .decode();
        assert!(matches!(
            pod_requests(&bad),
            Err(PodError::Quantity { container, .. }) if container == "<pod>"
        ));
    }

    #[test]
    fn node_selector_is_anded_into_each_affinity_term() {
        let p = pod("p").uid("u").spec(json!({
            "containers": [],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]},
                {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}]}}},
        })).decode::<PodView>();
        let info = PodInfo::from_pod(&p).expect("compiles");
        assert_eq!(info.requirement_terms.len(), 2);
        for t in &info.requirement_terms {
            assert!(t.has_key("kubernetes.io/os"));
        }
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let bad_q = pod("p")
            .uid("u")
            .spec(
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}),
            )
            .decode();
        assert!(matches!(
            PodInfo::from_pod(&bad_q),
            Err(PodError::Quantity { .. })
        ));
        let fields = pod("p").uid("u").spec(json!({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}}})).decode::<PodView>();
        assert_eq!(
            PodInfo::from_pod(&fields).err(),
            Some(PodError::MatchFields)
        );
    }

    #[test]
    fn provisionable_needs_unschedulable_condition() {
        let mut p = pod("p")
            .uid("u")
            .spec(json!({"containers": []}))
            .decode::<PodView>();
        assert!(!is_provisionable(&p));
        p.status = serde_json::from_value(json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})).ok();
        assert!(is_provisionable(&p));
        p.metadata.owner_references = serde_json::from_value(json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "x", "controller": true}])).ok();
        assert!(!is_provisionable(&p));
    }
}
