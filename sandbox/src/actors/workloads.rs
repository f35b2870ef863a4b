//! Workload controllers: Deployments own a ReplicaSet per pod-template hash (the current one
//! scaled to `replicas`, older ones to zero — a Recreate-style rollout); ReplicaSets keep
//! `replicas` active pods, recreating evicted or deleted ones; DaemonSets keep one pod on every
//! eligible node (pinned with `matchFields metadata.name`, bound by the scheduler).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::{NodeEligibility, TypedCache, key, run_passes};
use crate::registry::ResourceType;
use crate::store::{DeleteOptions, Store, Subresource};

/// Tolerations the DaemonSet controller adds to every DaemonSet pod.
const DAEMON_TOLERATIONS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];

pub(crate) fn owner_ref(kind: &str, api_version: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true})
}

pub(crate) fn controller_uid(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// Running, Ready and not deleting (what ready and available replicas count).
pub(crate) fn is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    pod.metadata.deletion_timestamp.is_none()
        && status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub(crate) fn is_active(pod: &Pod) -> bool {
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    pod.metadata.deletion_timestamp.is_none() && phase != "Succeeded" && phase != "Failed"
}

/// A stable short hash of a pod template, spelled with kube's safe alphabet.
pub fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in template.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

struct Controllers {
    deployments: TypedCache<Deployment>,
    replicasets: TypedCache<ReplicaSet>,
    daemonsets: TypedCache<DaemonSet>,
    pods: TypedCache<Pod>,
    nodes: TypedCache<Node>,
    eligibility: Arc<dyn NodeEligibility>,
}

struct Types {
    deployments: ResourceType,
    replicasets: ResourceType,
    daemonsets: ResourceType,
    pods: ResourceType,
}

impl Controllers {
    fn pass(&mut self, store: &Store) {
        let (Some(deployments), Some(replicasets), Some(daemonsets), Some(pods)) = (
            store.resource("apps", "v1", "deployments"),
            store.resource("apps", "v1", "replicasets"),
            store.resource("apps", "v1", "daemonsets"),
            store.resource("", "v1", "pods"),
        ) else {
            return;
        };
        let t = Types {
            deployments,
            replicasets,
            daemonsets,
            pods,
        };
        let all_pods = self.pods.refresh(store);
        let mut pods_by_owner: HashMap<String, Vec<Arc<Pod>>> = HashMap::new();
        for p in &all_pods {
            if let Some(uid) = controller_uid(&p.metadata) {
                pods_by_owner
                    .entry(uid.to_string())
                    .or_default()
                    .push(Arc::clone(p));
            }
        }
        let rses = self.replicasets.refresh(store);
        for d in self.deployments.refresh(store) {
            reconcile_deployment(store, &t, &d, &rses);
        }
        for rs in self.replicasets.refresh(store) {
            let uid = rs.metadata.uid.clone().unwrap_or_default();
            reconcile_replicaset(
                store,
                &t,
                &rs,
                pods_by_owner.get(&uid).map(Vec::as_slice).unwrap_or(&[]),
            );
        }
        let nodes = self.nodes.refresh(store);
        for ds in self.daemonsets.refresh(store) {
            let uid = ds.metadata.uid.clone().unwrap_or_default();
            let owned = pods_by_owner.get(&uid).map(Vec::as_slice).unwrap_or(&[]);
            reconcile_daemonset(store, &t, &ds, owned, &nodes, self.eligibility.as_ref());
        }
    }
}

/// The Deployment's revision, on it and on each of its ReplicaSets (the deployment
/// controller's `deployment.kubernetes.io/revision`; `kubectl rollout history` reads it).
const REVISION: &str = "deployment.kubernetes.io/revision";
/// On a ReplicaSet: the Deployment's `spec.replicas` when it was last scaled.
const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// On a ReplicaSet: the most pods the rollout may run (`replicas` + `maxSurge`).
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// The rolling update's `maxSurge` in pods: an absolute number, or a percentage of `replicas`
/// rounded up (default 25%), as the deployment controller resolves it; 0 for `Recreate`.
fn max_surge(spec: &k8s_openapi::api::apps::v1::DeploymentSpec, replicas: i32) -> i32 {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let strategy = spec.strategy.as_ref();
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return 0;
    }
    let surge = strategy
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.max_surge.clone())
        .unwrap_or(IntOrString::String("25%".into()));
    match surge {
        IntOrString::Int(n) => n.max(0),
        IntOrString::String(p) => {
            let pct: i64 = p.trim_end_matches('%').parse().unwrap_or(25);
            ((i64::from(replicas) * pct + 99) / 100) as i32
        }
    }
}

fn reconcile_deployment(store: &Store, t: &Types, d: &Deployment, rses: &[Arc<ReplicaSet>]) {
    let meta = &d.metadata;
    let (Some(name), Some(ns), Some(uid)) = (&meta.name, &meta.namespace, &meta.uid) else {
        return;
    };
    if meta.deletion_timestamp.is_some() {
        return;
    }
    let spec = &d.spec;
    let replicas = spec.replicas.unwrap_or(1);
    let template = serde_json::to_value(&spec.template).unwrap_or_default();
    let hash = template_hash(&template);
    let rs_name = format!("{name}-{hash}");
    let owned: Vec<&Arc<ReplicaSet>> = rses
        .iter()
        .filter(|rs| controller_uid(&rs.metadata) == Some(uid))
        .collect();
    let current = owned
        .iter()
        .find(|rs| rs.metadata.name.as_deref() == Some(&rs_name));
    let revision_of = |rs: &ReplicaSet| -> u64 {
        rs.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION))
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    };
    let max_replicas = replicas + max_surge(&d.spec, replicas);
    let revision = match current {
        Some(rs) => revision_of(rs),
        None => owned.iter().map(|rs| revision_of(rs)).max().unwrap_or(0) + 1,
    };
    if revision > 0
        && meta.annotations.as_ref().and_then(|a| a.get(REVISION)) != Some(&revision.to_string())
    {
        let _ = store.modify(&t.deployments, ns, name, Subresource::Main, |o| {
            o["metadata"]["annotations"][REVISION] = json!(revision.to_string());
            Ok(())
        });
    }
    match current {
        None => {
            let mut tmpl = template.clone();
            tmpl["metadata"]["labels"]["pod-template-hash"] = json!(hash);
            let mut selector = serde_json::to_value(&spec.selector).unwrap_or_default();
            selector["matchLabels"]["pod-template-hash"] = json!(hash);
            let mut labels = tmpl["metadata"]["labels"].clone();
            labels["pod-template-hash"] = json!(hash);
            let rs = json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": rs_name, "namespace": ns, "labels": labels,
                    "annotations": {DESIRED_REPLICAS: replicas.to_string(),
                                    MAX_REPLICAS: max_replicas.to_string(),
                                    REVISION: revision.to_string()},
                    "ownerReferences": [owner_ref("Deployment", "apps/v1", name, uid)]},
                "spec": {"replicas": replicas, "selector": selector, "template": tmpl},
            });
            if let Err(e) = store.create(&t.replicasets, ns, rs) {
                tracing::debug!(deployment = %name, error = %e, "creating replicaset failed");
            }
        }
        Some(rs) => {
            let annotations = rs.metadata.annotations.clone().unwrap_or_default();
            if rs.spec.replicas != Some(replicas)
                || annotations.get(DESIRED_REPLICAS) != Some(&replicas.to_string())
                || annotations.get(MAX_REPLICAS) != Some(&max_replicas.to_string())
            {
                let _ = store.modify(&t.replicasets, ns, &rs_name, Subresource::Main, |o| {
                    o["spec"]["replicas"] = json!(replicas);
                    o["metadata"]["annotations"][DESIRED_REPLICAS] = json!(replicas.to_string());
                    o["metadata"]["annotations"][MAX_REPLICAS] = json!(max_replicas.to_string());
                    Ok(())
                });
            }
        }
    }
    for old in owned
        .iter()
        .filter(|rs| rs.metadata.name.as_deref() != Some(&rs_name))
    {
        if old.spec.replicas != Some(0) {
            scale(
                store,
                &t.replicasets,
                ns,
                old.metadata.name.as_deref().unwrap_or(""),
                0,
            );
        }
    }
    let sum = |f: fn(&k8s_openapi::api::apps::v1::ReplicaSetStatus) -> i32| -> i32 {
        owned
            .iter()
            .filter_map(|rs| rs.status.as_ref())
            .map(f)
            .sum()
    };
    let total = sum(|s| s.replicas);
    let ready = sum(|s| s.ready_replicas.unwrap_or(0));
    let available = sum(|s| s.available_replicas.unwrap_or(0));
    let updated = current
        .and_then(|rs| rs.status.as_ref())
        .map_or(0, |s| s.replicas);
    let status = json!({
        "observedGeneration": meta.generation.unwrap_or(1),
        "replicas": total, "updatedReplicas": updated, "readyReplicas": ready,
        "availableReplicas": available, "unavailableReplicas": (replicas - available).max(0),
        "conditions": [
            {"type": "Available", "status": if available >= replicas { "True" } else { "False" },
             "reason": if available >= replicas { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
             "message": if available >= replicas { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." }},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
             "message": format!("ReplicaSet \"{rs_name}\" is progressing.")},
        ],
    });
    write_status(store, &t.deployments, ns, name, status);
}

fn scale(store: &Store, rt: &ResourceType, ns: &str, name: &str, replicas: i32) {
    let _ = store.modify(rt, ns, name, Subresource::Main, |o| {
        o["spec"]["replicas"] = json!(replicas);
        Ok(())
    });
}

/// Write status only when its content changed (conditions' times aside), to avoid churn.
fn write_status(store: &Store, rt: &ResourceType, ns: &str, name: &str, mut status: Value) {
    let now = store.now_rfc3339();
    let _ = store.modify(rt, ns, name, Subresource::Status, |o| {
        if let (Some(new), Some(old)) = (
            status["conditions"].as_array_mut(),
            o["status"]["conditions"].as_array(),
        ) {
            for c in new.iter_mut() {
                let prev = old.iter().find(|p| p["type"] == c["type"]);
                let time = match prev {
                    Some(p) if p["status"] == c["status"] => p["lastTransitionTime"].clone(),
                    _ => json!(now),
                };
                c["lastTransitionTime"] = time.clone();
                c["lastUpdateTime"] = prev
                    .map(|p| p["lastUpdateTime"].clone())
                    .filter(|_| c["lastTransitionTime"] == time)
                    .unwrap_or(json!(now));
            }
        } else if let Some(new) = status["conditions"].as_array_mut() {
            for c in new.iter_mut() {
                c["lastTransitionTime"] = json!(now);
                c["lastUpdateTime"] = json!(now);
            }
        }
        o["status"] = status;
        Ok(())
    });
}

fn reconcile_replicaset(store: &Store, t: &Types, rs: &ReplicaSet, owned: &[Arc<Pod>]) {
    let meta = &rs.metadata;
    let (Some(name), Some(ns), Some(uid)) = (&meta.name, &meta.namespace, &meta.uid) else {
        return;
    };
    let spec = &rs.spec;
    let replicas = spec.replicas.unwrap_or(1);
    let mut active: Vec<&Arc<Pod>> = owned.iter().filter(|p| is_active(p)).collect();
    let want = if meta.deletion_timestamp.is_some() {
        0
    } else {
        replicas
    };
    let have = active.len() as i32;
    if have < want {
        let template = serde_json::to_value(&spec.template).unwrap_or_default();
        for _ in have..want {
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": format!("{name}-"), "namespace": ns,
                    "labels": template["metadata"]["labels"], "annotations": template["metadata"]["annotations"],
                    "ownerReferences": [owner_ref("ReplicaSet", "apps/v1", name, uid)]},
                "spec": template["spec"],
            });
            if let Err(e) = store.create(&t.pods, ns, pod) {
                tracing::debug!(replicaset = %name, error = %e, "creating pod failed");
                break;
            }
        }
    } else if have > want {
        // Remove unbound pods first, then unready ones, then the youngest (as the controller ranks).
        active.sort_by_key(|p| {
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let ready = is_ready(p);
            let created = std::cmp::Reverse(p.metadata.creation_timestamp.as_ref().map(|t| t.0));
            (bound, ready, created)
        });
        for p in active.iter().take((have - want) as usize) {
            let pname = p.metadata.name.as_deref().unwrap_or("");
            let _ = store.delete(&t.pods, ns, pname, &DeleteOptions::default());
        }
    }
    let counts =
        |f: &dyn Fn(&Pod) -> bool| owned.iter().filter(|p| is_active(p) && f(p)).count() as i32;
    let ready = counts(&is_ready);
    let status = json!({
        "replicas": have, "fullyLabeledReplicas": have,
        "readyReplicas": ready, "availableReplicas": ready,
        "observedGeneration": meta.generation.unwrap_or(1),
    });
    if rs
        .status
        .as_ref()
        .map(|s| serde_json::to_value(s).unwrap_or_default())
        != Some(status.clone())
    {
        let _ = store.modify(&t.replicasets, ns, name, Subresource::Status, |o| {
            o["status"] = status;
            Ok(())
        });
    }
}

fn node_is_ready(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
        && node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn daemon_pod(ds: &DaemonSet, node: &str) -> Option<Value> {
    let meta = &ds.metadata;
    let spec = &ds.spec;
    let mut template = serde_json::to_value(&spec.template).ok()?;
    let pod_spec = template.get_mut("spec")?;
    pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]});
    let tolerations = pod_spec
        .as_object_mut()
        .map(|m| m.entry("tolerations").or_insert_with(|| json!([])));
    if let Some(Value::Array(ts)) = tolerations {
        for (k, effect) in DAEMON_TOLERATIONS {
            if !ts.iter().any(|t| t["key"] == *k) {
                ts.push(json!({"key": k, "operator": "Exists", "effect": effect}));
            }
        }
    }
    Some(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": format!("{}-", meta.name.as_deref().unwrap_or("ds")),
            "namespace": meta.namespace, "labels": template["metadata"]["labels"],
            "ownerReferences": [owner_ref("DaemonSet", "apps/v1", meta.name.as_deref().unwrap_or(""), meta.uid.as_deref().unwrap_or(""))]},
        "spec": template["spec"],
    }))
}

fn pinned_node(pod: &Pod) -> Option<String> {
    if let Some(n) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
        return Some(n);
    }
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name")
        .and_then(|f| f.values.as_ref()?.first().cloned())
}

fn reconcile_daemonset(
    store: &Store,
    t: &Types,
    ds: &DaemonSet,
    owned: &[Arc<Pod>],
    nodes: &[Arc<Node>],
    eligibility: &dyn NodeEligibility,
) {
    let meta = &ds.metadata;
    let (Some(name), Some(ns)) = (&meta.name, &meta.namespace) else {
        return;
    };
    if meta.deletion_timestamp.is_some() {
        return;
    }
    let Some(probe) = daemon_pod(ds, "").and_then(|v| serde_json::from_value::<Pod>(v).ok()) else {
        return;
    };
    let mut by_node: BTreeMap<String, Vec<&Arc<Pod>>> = BTreeMap::new();
    for p in owned.iter().filter(|p| is_active(p)) {
        if let Some(n) = pinned_node(p) {
            by_node.entry(n).or_default().push(p);
        }
    }
    let mut desired = 0;
    for node in nodes.iter().filter(|n| node_is_ready(n)) {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let wanted = eligibility.eligible(&probe, node);
        let existing = by_node.remove(&node_name).unwrap_or_default();
        if wanted {
            desired += 1;
            if existing.is_empty()
                && let Some(pod) = daemon_pod(ds, &node_name)
                && let Err(e) = store.create(&t.pods, ns, pod)
            {
                tracing::debug!(daemonset = %name, error = %e, "creating daemon pod failed");
            }
        } else {
            for p in existing {
                let _ = store.delete(
                    &t.pods,
                    ns,
                    p.metadata.name.as_deref().unwrap_or(""),
                    &DeleteOptions::default(),
                );
            }
        }
    }
    let scheduled = owned
        .iter()
        .filter(|p| is_active(p) && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count();
    let ready = owned.iter().filter(|p| is_ready(p)).count();
    let status = json!({
        "desiredNumberScheduled": desired, "currentNumberScheduled": scheduled, "numberMisscheduled": 0,
        "numberReady": ready, "numberAvailable": ready, "updatedNumberScheduled": scheduled,
        "observedGeneration": meta.generation.unwrap_or(1),
    });
    if ds
        .status
        .as_ref()
        .map(|s| serde_json::to_value(s).unwrap_or_default())
        != Some(status.clone())
    {
        let _ = store.modify(&t.daemonsets, ns, name, Subresource::Status, |o| {
            o["status"] = status;
            Ok(())
        });
    }
}

/// Run the workload controllers until the store goes away; `eligibility` says which nodes each
/// DaemonSet's pods belong on.
pub async fn run(store: Arc<Store>, eligibility: Arc<dyn NodeEligibility>) {
    let c = Controllers {
        deployments: TypedCache::new(key("apps", "deployments")),
        replicasets: TypedCache::new(key("apps", "replicasets")),
        daemonsets: TypedCache::new(key("apps", "daemonsets")),
        pods: TypedCache::new(key("", "pods")),
        nodes: TypedCache::new(key("", "nodes")),
        eligibility,
    };
    let interest = [
        key("apps", "deployments"),
        key("apps", "replicasets"),
        key("apps", "daemonsets"),
        key("", "pods"),
        key("", "nodes"),
    ];
    run_passes(store, "workload controllers", &interest, c, |c, s| {
        c.pass(s)
    })
    .await;
}
