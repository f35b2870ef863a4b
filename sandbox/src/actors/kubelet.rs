//! Simulated kubelets (and the cloud-node-lifecycle part of the cloud controller manager): for
//! each running instance, register a Node a configurable delay after launch, with the
//! providerID, labels and taints its user data configured and capacity from its instance type;
//! report it Ready, or the failures the sandbox asks for ([`conditions`]); start the pods bound
//! to a Ready node once their claims are bound and their CSI volumes attached to the node (until
//! then a pod stays `Pending`, as in `ContainerCreating`). Nodes whose instance is gone are
//! deleted.
//!
//! Pods are worked from what changed, as a kubelet's pod workers are fed by its watch: each pass
//! looks at the pods that changed since the last one and the bound pods still waiting to start
//! (their node not Ready, their volumes not attached), not at every pod. Every [`RESYNC`] (the
//! kubelet's `syncFrequency`), and whenever changes were missed, it reads every pod again.

pub mod conditions;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use serde_json::{Value, json};

use super::csi::{ClaimVolume, Claims, DRIVER, attachment_name};
use super::{ActorConfig, BootRecord, Dirty, InstanceSource, TypedCache, key, wait_for_changes};
use crate::pods::set_pod_condition;
use crate::store::{DeleteOptions, Store, Subresource, rfc3339};

/// How often the kubelets read every pod again, besides the ones that changed: the kubelet's
/// `syncFrequency` default (1 minute).
pub const RESYNC: Duration = Duration::from_secs(60);

/// Kubelet version the simulated nodes report.
pub const KUBELET_VERSION: &str = "v1.32.0-eks-sandbox";

/// The Node object a kubelet registers for an instance at `now` (RFC 3339; its conditions'
/// times), and its status (written separately, as the status subresource).
pub fn node_for(record: &BootRecord, now: &str) -> (Value, Value) {
    let taints: Vec<Value> = record
        .taints
        .iter()
        .map(|t| {
            let mut v = json!({"key": t.key, "effect": t.effect});
            if let Some(val) = &t.value {
                v["value"] = json!(val);
            }
            v
        })
        .collect();
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": record.hostname, "labels": record.labels},
        "spec": {"providerID": record.provider_id, "taints": taints},
    });
    let conditions: Vec<Value> = conditions::KUBELET_CONDITIONS
        .iter()
        .map(|(t, s, reason, message)| {
            json!({"type": t, "status": s, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now})
        })
        .collect();
    let status = json!({
        "capacity": record.capacity,
        "allocatable": record.allocatable,
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": record.private_ip},
            {"type": "InternalDNS", "address": record.hostname},
            {"type": "Hostname", "address": record.hostname},
        ],
        "nodeInfo": {
            "architecture": record.architecture, "operatingSystem": "linux",
            "osImage": format!("Amazon Linux 2023 ({})", record.image_id),
            "kernelVersion": "6.1.0-sandbox", "containerRuntimeVersion": "containerd://1.7.27",
            "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION,
            "machineID": "", "systemUUID": "", "bootID": "",
        },
        "phase": "Running",
    });
    (node, status)
}

struct Kubelets {
    config: ActorConfig,
    source: Arc<dyn InstanceSource>,
    nodes: TypedCache<Node>,
    pods: TypedCache<Pod>,
    claims: TypedCache<PersistentVolumeClaim>,
    volumes: TypedCache<PersistentVolume>,
    attachments: TypedCache<VolumeAttachment>,
    /// Pod IPs handed out per node.
    next_ip: HashMap<String, u32>,
    /// Pods that changed since the last pass (filled while waiting for changes).
    dirty: Dirty,
    /// Pending pods bound to a node that did not start at their last look (node not Ready,
    /// volumes not ready, or the write failed), by namespace and name.
    waiting: BTreeSet<(String, String)>,
    /// When every pod was last read.
    resynced: Instant,
}

impl Kubelets {
    async fn pass(&mut self, store: &Store) {
        let running = match self.source.running().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet: listing instances failed");
                return;
            }
        };
        let (Some(nodes_rt), Some(pods_rt)) = (
            store.resource("", "v1", "nodes"),
            store.resource("", "v1", "pods"),
        ) else {
            return;
        };
        let nodes = self.nodes.refresh(store);
        let by_provider: HashMap<&str, &Arc<Node>> = nodes
            .iter()
            .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref().map(|p| (p, n)))
            .collect();
        let now = store.now();
        let delay =
            jiff::SignedDuration::try_from(self.config.registration_delay).unwrap_or_default();
        let live: HashSet<&str> = running.iter().map(|r| r.provider_id.as_str()).collect();
        for record in &running {
            if by_provider.contains_key(record.provider_id.as_str())
                || record.launched_at + delay > now
            {
                continue;
            }
            let (node, status) = node_for(record, &rfc3339(now));
            match store.create(&nodes_rt, "", node) {
                Ok(_) => {
                    let _ =
                        store.modify(&nodes_rt, "", &record.hostname, Subresource::Status, |n| {
                            n["status"] = status;
                            Ok(())
                        });
                    tracing::debug!(node = %record.hostname, provider_id = %record.provider_id, "kubelet registered node");
                }
                Err(e) => {
                    tracing::debug!(node = %record.hostname, error = %e, "kubelet registration failed")
                }
            }
        }
        // Cloud controller manager: a Node whose instance no longer runs is deleted. The
        // kubelets of the others report their conditions; pods start on their Ready nodes only.
        let mut ready_nodes: HashSet<String> = HashSet::new();
        for node in &nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let provider = node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .unwrap_or("");
            if provider.starts_with("aws://") && !live.contains(provider) {
                if node.metadata.deletion_timestamp.is_none() {
                    let _ = store.delete(&nodes_rt, "", &name, &DeleteOptions::default());
                }
                continue;
            }
            // Nodes no simulated kubelet runs (made by hand, by tests) are left as they are.
            if !live.contains(provider) {
                ready_nodes.insert(name);
                continue;
            }
            let reported = conditions::reported(node, now);
            if let Some(reported) = &reported {
                let written = store.modify(&nodes_rt, "", &name, Subresource::Status, |n| {
                    n["status"]["conditions"] = json!(reported);
                    Ok(())
                });
                match written {
                    Ok(_) => tracing::debug!(node = %name, "kubelet reported its conditions"),
                    Err(e) => {
                        tracing::debug!(node = %name, error = %e, "kubelet status update failed")
                    }
                }
            }
            let current = node.status.as_ref().and_then(|s| s.conditions.as_deref());
            if conditions::is_ready(reported.as_deref().or(current).unwrap_or_default()) {
                ready_nodes.insert(name);
            }
        }
        self.start_pods(store, &pods_rt, &ready_nodes, &nodes);
    }

    /// Pods bound to a live node start running.
    fn start_pods(
        &mut self,
        store: &Store,
        pods_rt: &crate::registry::ResourceType,
        live: &HashSet<String>,
        nodes: &[Arc<Node>],
    ) {
        let node_ips: BTreeMap<String, String> = nodes
            .iter()
            .filter_map(|n| {
                let ip = n
                    .status
                    .as_ref()?
                    .addresses
                    .as_ref()?
                    .iter()
                    .find(|a| a.type_ == "InternalIP")?
                    .address
                    .clone();
                Some((n.metadata.name.clone()?, ip))
            })
            .collect();
        let claims = Claims::new(&self.claims.refresh(store), &self.volumes.refresh(store));
        let attached: HashSet<String> = self
            .attachments
            .refresh(store)
            .iter()
            .filter(|a| a.status.as_ref().is_some_and(|s| s.attached))
            .filter(|a| a.metadata.deletion_timestamp.is_none())
            .filter_map(|a| a.metadata.name.clone())
            .collect();
        for pod in self.candidates(store, pods_rt) {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or("Pending");
            if phase != "Pending" || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if !live.contains(&node) || !volumes_ready(&pod, &node, &claims, &attached) {
                self.wait(&pod);
                continue;
            }
            let host_ip = node_ips.get(&node).cloned().unwrap_or_default();
            let n = self.next_ip.entry(node.clone()).or_insert(0);
            *n += 1;
            let pod_ip = pod_ip(&host_ip, *n);
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let containers: Vec<String> = pod
                .spec
                .as_ref()
                .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default();
            let images: HashMap<String, String> = pod
                .spec
                .as_ref()
                .map(|s| {
                    s.containers
                        .iter()
                        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                        .collect()
                })
                .unwrap_or_default();
            let now = store.now_rfc3339();
            let result = store.modify(pods_rt, &ns, &name, Subresource::Status, |p| {
                p["status"]["phase"] = json!("Running");
                p["status"]["hostIP"] = json!(host_ip);
                p["status"]["hostIPs"] = json!([{"ip": host_ip}]);
                p["status"]["podIP"] = json!(pod_ip);
                p["status"]["podIPs"] = json!([{"ip": pod_ip}]);
                p["status"]["startTime"] = json!(now);
                for c in ["Initialized", "ContainersReady", "Ready"] {
                    set_pod_condition(p, &now, c, "True", None, None);
                }
                let statuses: Vec<Value> = containers
                    .iter()
                    .map(|c| {
                        json!({"name": c, "ready": true, "started": true, "restartCount": 0,
                        "image": images.get(c).cloned().unwrap_or_default(), "imageID": "",
                        "state": {"running": {"startedAt": now}}})
                    })
                    .collect();
                p["status"]["containerStatuses"] = json!(statuses);
                Ok(())
            });
            if let Err(e) = result {
                tracing::debug!(pod = %name, error = %e, "kubelet could not start pod");
                self.wait(&pod);
            }
        }
    }

    /// The pods this pass looks at, sorted by namespace and name: every pod on a resync (the
    /// first pass, every [`RESYNC`], after missed changes); otherwise the ones waiting to start
    /// and the ones that changed since the last pass, read again from the store.
    fn candidates(
        &mut self,
        store: &Store,
        pods_rt: &crate::registry::ResourceType,
    ) -> Vec<Arc<Pod>> {
        let key = pods_rt.key();
        if self.dirty.resync || self.resynced.elapsed() >= RESYNC {
            self.dirty.clear();
            self.waiting.clear();
            self.resynced = Instant::now();
            return self.pods.refresh(store);
        }
        let mut keys = std::mem::take(&mut self.waiting);
        keys.extend(self.dirty.take(&key));
        keys.iter()
            .filter_map(|(ns, name)| self.pods.get(store, ns, name))
            .collect()
    }

    /// Keep a bound pod that did not start for the next pass.
    fn wait(&mut self, pod: &Pod) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.waiting.insert((ns, name));
    }
}

/// Whether every claim of the pod is bound and every EBS volume among them is attached to
/// `node` (`attached`: names of attached VolumeAttachments).
fn volumes_ready(pod: &Pod, node: &str, claims: &Claims, attached: &HashSet<String>) -> bool {
    claims.of_pod(pod).iter().all(|v| match v {
        ClaimVolume::Unbound => false,
        ClaimVolume::Csi(csi) if csi.driver == DRIVER => {
            attached.contains(&attachment_name(&csi.handle, &csi.driver, node))
        }
        // Other drivers are not simulated: their volumes need no attaching here.
        ClaimVolume::Csi(_) | ClaimVolume::Other => true,
    })
}

fn pod_ip(host_ip: &str, n: u32) -> String {
    let octets: Vec<u32> = host_ip.split('.').filter_map(|o| o.parse().ok()).collect();
    match octets.as_slice() {
        [_, b, c, d] => format!(
            "10.{}.{}.{}",
            100 + (b + c) % 100,
            (d + n / 250) % 256,
            n % 250 + 2
        ),
        _ => format!("10.244.0.{}", n % 250 + 2),
    }
}

/// Run the kubelets until the store goes away.
pub async fn run(store: Arc<Store>, config: ActorConfig, source: Arc<dyn InstanceSource>) {
    let mut rx = store.subscribe_changes();
    let poll = config.kubelet_poll;
    let mut kubelets = Kubelets {
        config,
        source,
        nodes: TypedCache::new(key("", "nodes")),
        pods: TypedCache::new(key("", "pods")),
        claims: TypedCache::new(key("", "persistentvolumeclaims")),
        volumes: TypedCache::new(key("", "persistentvolumes")),
        attachments: TypedCache::new(key("storage.k8s.io", "volumeattachments")),
        next_ip: HashMap::new(),
        dirty: Dirty::tracking(vec![key("", "pods")]),
        waiting: BTreeSet::new(),
        resynced: Instant::now(),
    };
    let interest = [
        key("", "pods"),
        key("", "nodes"),
        key("", "persistentvolumeclaims"),
        key("storage.k8s.io", "volumeattachments"),
    ];
    loop {
        kubelets.pass(&store).await;
        if !wait_for_changes(
            &mut rx,
            &interest,
            poll,
            Duration::from_millis(50),
            &mut kubelets.dirty,
        )
        .await
        {
            return;
        }
    }
}
