//! The StatefulSet controller (kube-controller-manager's `statefulset` controller): pods with
//! stable names `<set>-<ordinal>`, their `volumeClaimTemplates` turned into claims
//! `<template>-<set>-<ordinal>` created before the pod and kept after it (the default `Retain`
//! retention), `OrderedReady` (one ordinal at a time, each waiting for the lower ones to be
//! Running and Ready; scale-down from the highest ordinal) or `Parallel` pod management,
//! rolling updates from the highest ordinal, and the status `kubectl get sts` shows. Like the
//! other workload controllers, each pass decides from one snapshot ([`plan`]) and then writes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::workloads::{controller_uid, is_active, is_ready, owner_ref, template_hash};
use super::{TypedCache, key, run_passes};
use crate::store::{DeleteOptions, Store, Subresource};

/// Label naming the pod (so a Service can select one replica).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label carrying the pod's ordinal (`PodIndexLabel`, on by default since 1.28).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// Label naming the ControllerRevision the pod was created from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// What one pass does to one StatefulSet, decided before anything is written.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// ControllerRevision to create for the current template, if it does not exist yet.
    pub revision: Option<Value>,
    /// PersistentVolumeClaims to create (before the pods that use them).
    pub claims: Vec<Value>,
    /// Pods to create.
    pub create: Vec<Value>,
    /// Names of pods to delete (scale-down, failed pods, rolling update).
    pub delete: Vec<String>,
    /// The StatefulSet's status after this pass.
    pub status: Value,
}

/// The ordinal of a pod of set `set`, from its name `<set>-<ordinal>`.
fn ordinal(set: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn revision_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(REVISION_LABEL)
        .map(String::as_str)
}

/// The claim of template `template` for ordinal `ordinal` (labels: the template's plus the
/// set selector's `matchLabels`; owned by the set only under `whenDeleted: Delete`).
fn claim_for(set: &StatefulSet, template: &PersistentVolumeClaim, ordinal: i32) -> Value {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let tmpl_name = template.metadata.name.as_deref().unwrap_or_default();
    let mut labels = template.metadata.labels.clone().unwrap_or_default();
    labels.extend(set.spec.selector.match_labels.clone().unwrap_or_default());
    let mut claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": format!("{tmpl_name}-{name}-{ordinal}"),
            "namespace": set.metadata.namespace, "labels": labels},
        "spec": serde_json::to_value(&template.spec).unwrap_or_else(|_| json!({})),
    });
    if let Some(a) = &template.metadata.annotations {
        claim["metadata"]["annotations"] = json!(a);
    }
    let delete_with_set = set
        .spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_deleted.as_deref())
        == Some("Delete");
    if delete_with_set {
        let uid = set.metadata.uid.as_deref().unwrap_or_default();
        claim["metadata"]["ownerReferences"] =
            json!([owner_ref("StatefulSet", "apps/v1", name, uid)]);
    }
    claim
}

/// The pod for `ordinal`: the template with identity labels, hostname and subdomain, and each
/// claim template mounted as the volume of the same name.
fn pod_for(set: &StatefulSet, ordinal: i32, revision: &str) -> Value {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let uid = set.metadata.uid.as_deref().unwrap_or_default();
    let pod_name = format!("{name}-{ordinal}");
    let template = serde_json::to_value(&set.spec.template).unwrap_or_else(|_| json!({}));
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels[POD_NAME_LABEL] = json!(pod_name);
    labels[POD_INDEX_LABEL] = json!(ordinal.to_string());
    labels[REVISION_LABEL] = json!(revision);
    let mut spec = template["spec"].clone();
    spec["hostname"] = json!(pod_name);
    if let Some(service) = set.spec.service_name.as_deref().filter(|s| !s.is_empty()) {
        spec["subdomain"] = json!(service);
    }
    for t in set.spec.volume_claim_templates.iter().flatten() {
        let tmpl = t.metadata.name.as_deref().unwrap_or_default();
        let volume = json!({"name": tmpl,
            "persistentVolumeClaim": {"claimName": format!("{tmpl}-{name}-{ordinal}")}});
        if !spec["volumes"].is_array() {
            spec["volumes"] = json!([]);
        }
        if let Some(vs) = spec["volumes"].as_array_mut() {
            vs.retain(|v| v["name"] != tmpl);
            vs.push(volume);
        }
    }
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": set.metadata.namespace, "labels": labels,
            "ownerReferences": [owner_ref("StatefulSet", "apps/v1", name, uid)]},
        "spec": spec,
    });
    if template["metadata"]["annotations"].is_object() {
        pod["metadata"]["annotations"] = template["metadata"]["annotations"].clone();
    }
    pod
}

/// Decide one pass over set `set`, given the pods it owns, the namespace's claims by name, and
/// its ControllerRevisions.
pub fn plan(
    set: &StatefulSet,
    owned: &[Arc<Pod>],
    claims: &HashMap<String, Arc<PersistentVolumeClaim>>,
    revisions: &[Arc<ControllerRevision>],
) -> Plan {
    let mut plan = Plan::default();
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let spec = &set.spec;
    let template = serde_json::to_value(&spec.template).unwrap_or_default();
    let update_revision = format!("{name}-{}", template_hash(&template));
    if !revisions
        .iter()
        .any(|r| r.metadata.name.as_deref() == Some(update_revision.as_str()))
    {
        let next = revisions
            .iter()
            .map(|r| r.revision)
            .max()
            .flatten()
            .unwrap_or(0)
            + 1;
        let mut labels = spec.selector.match_labels.clone().unwrap_or_default();
        labels.insert(
            "controller.kubernetes.io/hash".into(),
            template_hash(&template),
        );
        let uid = set.metadata.uid.as_deref().unwrap_or_default();
        plan.revision = Some(json!({
            "apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": update_revision, "namespace": set.metadata.namespace,
                "labels": labels, "ownerReferences": [owner_ref("StatefulSet", "apps/v1", name, uid)]},
            "data": {"spec": {"template": template}},
            "revision": next,
        }));
    }
    let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
    let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
    let replicas = if set.metadata.deletion_timestamp.is_some() {
        0
    } else {
        spec.replicas.unwrap_or(1)
    };
    let wanted = start..start + replicas;
    let by_ordinal: BTreeMap<i32, &Arc<Pod>> = owned
        .iter()
        .filter_map(|p| Some((ordinal(name, p.metadata.name.as_deref()?)?, p)))
        .collect();
    // Create (or replace) the replicas in ordinal order.
    let mut blocked = false;
    for o in wanted.clone() {
        match by_ordinal.get(&o) {
            Some(p) if p.metadata.deletion_timestamp.is_some() => blocked |= !parallel,
            Some(p) if matches!(phase(p), "Failed" | "Succeeded") => {
                // A finished pod is deleted and recreated under the same name.
                plan.delete.push(format!("{name}-{o}"));
                blocked |= !parallel;
            }
            Some(p) => blocked |= !parallel && !is_ready(p),
            None if blocked => {}
            None => {
                let mut claims_ready = true;
                for t in spec.volume_claim_templates.iter().flatten() {
                    let claim = claim_for(set, t, o);
                    let claim_name = claim["metadata"]["name"].as_str().unwrap_or_default();
                    match claims.get(claim_name) {
                        None => plan.claims.push(claim),
                        // A claim being deleted cannot back a new pod; wait for it to go.
                        Some(c) if c.metadata.deletion_timestamp.is_some() => claims_ready = false,
                        Some(_) => {}
                    }
                }
                if claims_ready {
                    plan.create.push(pod_for(set, o, &update_revision));
                }
                blocked |= !parallel;
            }
        }
    }
    // Scale down: pods outside the wanted ordinals, highest first; OrderedReady removes one at
    // a time and only while every remaining replica is healthy.
    let mut condemned: Vec<(&i32, &&Arc<Pod>)> = by_ordinal
        .iter()
        .filter(|(o, _)| !wanted.contains(o))
        .collect();
    condemned.reverse();
    let healthy = wanted
        .clone()
        .all(|o| by_ordinal.get(&o).is_some_and(|p| is_ready(p)));
    for (o, p) in condemned {
        if p.metadata.deletion_timestamp.is_some() {
            if parallel {
                continue;
            }
            break;
        }
        if !parallel && !healthy {
            break;
        }
        plan.delete.push(format!("{name}-{o}"));
        if !parallel {
            break;
        }
    }
    // Rolling update: once nothing else is in flight, replace the highest outdated ordinal
    // at or above the partition.
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let partition = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0);
    if rolling && healthy && plan.create.is_empty() && plan.delete.is_empty() {
        let outdated = wanted
            .clone()
            .rev()
            .filter(|o| *o >= start + partition)
            .find(|o| {
                by_ordinal
                    .get(o)
                    .is_some_and(|p| revision_of(p) != Some(update_revision.as_str()))
            });
        if let Some(o) = outdated {
            plan.delete.push(format!("{name}-{o}"));
        }
    }
    plan.status = status(set, owned, &plan, &update_revision);
    plan
}

/// The status after the pass's plan: counts over the pods the set owns, those the plan deletes
/// left out and those it creates counted (not ready, at the update revision), as the controller
/// reports them at the end of a sync.
fn status(set: &StatefulSet, owned: &[Arc<Pod>], plan: &Plan, update_revision: &str) -> Value {
    let live: Vec<&Arc<Pod>> = owned
        .iter()
        .filter(|p| is_active(p))
        .filter(|p| {
            p.metadata
                .name
                .as_ref()
                .is_none_or(|n| !plan.delete.contains(n))
        })
        .collect();
    let count = |f: &dyn Fn(&Pod) -> bool| live.iter().filter(|p| f(p)).count();
    let created = plan.create.len();
    let updated = count(&|p| revision_of(p) == Some(update_revision)) + created;
    let previous = set.status.as_ref().and_then(|s| s.current_revision.clone());
    let current_revision = match previous {
        Some(r) if updated < live.len() + created => r,
        _ => update_revision.to_string(),
    };
    let ready = count(&is_ready);
    json!({
        "observedGeneration": set.metadata.generation.unwrap_or(1),
        "replicas": live.len() + created,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": count(&|p| revision_of(p) == Some(current_revision.as_str()))
            + if current_revision == update_revision { created } else { 0 },
        "updatedReplicas": updated,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
        "collisionCount": 0,
    })
}

/// Apply a plan to set `name` in `ns`: revision, claims, pods, deletions, then status when it
/// changed. Failed writes are logged and retried on the next pass.
fn execute(store: &Store, set: &StatefulSet, plan: Plan) {
    let (Some(sets), Some(pods), Some(pvcs), Some(revisions)) = (
        store.resource("apps", "v1", "statefulsets"),
        store.resource("", "v1", "pods"),
        store.resource("", "v1", "persistentvolumeclaims"),
        store.resource("apps", "v1", "controllerrevisions"),
    ) else {
        return;
    };
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let ns = set.metadata.namespace.as_deref().unwrap_or("default");
    if let Some(r) = plan.revision
        && let Err(e) = store.create(&revisions, ns, r)
    {
        tracing::debug!(statefulset = %name, error = %e, "creating controllerrevision failed");
    }
    let mut failed_claims = HashSet::new();
    for c in plan.claims {
        let claim = c["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Err(e) = store.create(&pvcs, ns, c) {
            tracing::debug!(statefulset = %name, claim = %claim, error = %e, "creating claim failed");
            failed_claims.insert(claim);
        }
    }
    for p in plan.create {
        let uses_failed = p["spec"]["volumes"].as_array().is_some_and(|vs| {
            vs.iter().any(|v| {
                v["persistentVolumeClaim"]["claimName"]
                    .as_str()
                    .is_some_and(|c| failed_claims.contains(c))
            })
        });
        if uses_failed {
            continue;
        }
        if let Err(e) = store.create(&pods, ns, p) {
            tracing::debug!(statefulset = %name, error = %e, "creating pod failed");
        }
    }
    for p in plan.delete {
        if let Err(e) = store.delete(&pods, ns, &p, &DeleteOptions::default()) {
            tracing::debug!(statefulset = %name, pod = %p, error = %e, "deleting pod failed");
        }
    }
    let old = set
        .status
        .as_ref()
        .map(|s| serde_json::to_value(s).unwrap_or_default());
    if old.as_ref() != Some(&plan.status) {
        let _ = store.modify(&sets, ns, name, Subresource::Status, |o| {
            o["status"] = plan.status;
            Ok(())
        });
    }
}

/// The controller's informer caches.
pub struct Controller {
    sets: TypedCache<StatefulSet>,
    pods: TypedCache<Pod>,
    claims: TypedCache<PersistentVolumeClaim>,
    revisions: TypedCache<ControllerRevision>,
}

impl Default for Controller {
    fn default() -> Self {
        Controller {
            sets: TypedCache::new(key("apps", "statefulsets")),
            pods: TypedCache::new(key("", "pods")),
            claims: TypedCache::new(key("", "persistentvolumeclaims")),
            revisions: TypedCache::new(key("apps", "controllerrevisions")),
        }
    }
}

impl Controller {
    /// One pass over every StatefulSet. Without StatefulSets it reads nothing else; with them,
    /// it indexes only the pods and revisions they own (not the tens of thousands of pods
    /// other controllers own).
    pub fn pass(&mut self, store: &Store) {
        let sets = self.sets.refresh(store);
        if sets.is_empty() {
            return;
        }
        let uids: HashSet<&str> = sets
            .iter()
            .filter_map(|s| s.metadata.uid.as_deref())
            .collect();
        let mut by_owner: HashMap<String, Vec<Arc<Pod>>> = HashMap::new();
        for p in self.pods.refresh(store) {
            if let Some(uid) = controller_uid(&p.metadata).filter(|u| uids.contains(u)) {
                by_owner
                    .entry(uid.to_string())
                    .or_default()
                    .push(Arc::clone(&p));
            }
        }
        let mut revisions_by_owner: HashMap<String, Vec<Arc<ControllerRevision>>> = HashMap::new();
        for r in self.revisions.refresh(store) {
            if let Some(uid) = controller_uid(&r.metadata).filter(|u| uids.contains(u)) {
                revisions_by_owner
                    .entry(uid.to_string())
                    .or_default()
                    .push(Arc::clone(&r));
            }
        }
        let mut claims: HashMap<String, HashMap<String, Arc<PersistentVolumeClaim>>> =
            HashMap::new();
        for c in self.claims.refresh(store) {
            if let (Some(ns), Some(n)) = (&c.metadata.namespace, &c.metadata.name) {
                claims
                    .entry(ns.clone())
                    .or_default()
                    .insert(n.clone(), Arc::clone(&c));
            }
        }
        let none = HashMap::new();
        for set in &sets {
            let uid = set.metadata.uid.clone().unwrap_or_default();
            let ns = set.metadata.namespace.clone().unwrap_or_default();
            let p = plan(
                set,
                by_owner.get(&uid).map(Vec::as_slice).unwrap_or(&[]),
                claims.get(&ns).unwrap_or(&none),
                revisions_by_owner
                    .get(&uid)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]),
            );
            execute(store, set, p);
        }
    }
}

/// Run the StatefulSet controller until the store goes away.
pub async fn run(store: Arc<Store>) {
    let c = Controller::default();
    let interest = [
        key("apps", "statefulsets"),
        key("", "pods"),
        key("", "persistentvolumeclaims"),
    ];
    run_passes(store, "statefulset controller", &interest, c, |c, s| {
        c.pass(s)
    })
    .await;
}

#[cfg(test)]
#[path = "statefulset_tests.rs"]
mod tests;
