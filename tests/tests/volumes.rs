//! Stateful workloads in the sandbox: a StatefulSet's claims are provisioned by the simulated EBS
//! CSI driver in its pods' zones, its volumes attached to their nodes as VolumeAttachments, and a
//! pod that moves has its volume detached before it is attached elsewhere; real kubectl lists
//! the storage kinds.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sandbox::store::EventType;
use serde_json::Value;
use tests::{Options, TestCluster};

const SETTLE: Duration = Duration::from_secs(90);
const DRIVER: &str = "ebs.csi.aws.com";

const WORKLOAD: &str = "\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: ebs-gp3}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
parameters: {type: gp3}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: db
        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2
        resources: {requests: {cpu: 500m, memory: 512Mi}}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: ebs-gp3
      resources: {requests: {storage: 4Gi}}
";

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn named<'a>(objects: &'a [Value], name: &str) -> Option<&'a Value> {
    objects.iter().find(|o| text(o, "/metadata/name") == name)
}

/// The db pods that are Running, by name: their node.
fn running(c: &TestCluster) -> BTreeMap<String, String> {
    c.objects("", "pods")
        .iter()
        .filter(|p| {
            text(p, "/metadata/labels/app") == "db" && text(p, "/status/phase") == "Running"
        })
        .map(|p| {
            (
                text(p, "/metadata/name").into(),
                text(p, "/spec/nodeName").into(),
            )
        })
        .collect()
}

/// The (volume, node) pairs the running db pods use, through their claims.
fn in_use(c: &TestCluster) -> BTreeSet<(String, String)> {
    let claims = c.objects("", "persistentvolumeclaims");
    running(c)
        .into_iter()
        .filter_map(|(pod, node)| {
            let claim = named(&claims, &format!("data-{pod}"))?;
            Some((text(claim, "/spec/volumeName").to_string(), node))
        })
        .collect()
}

/// The (volume, node) pairs of attached VolumeAttachments.
fn attached(c: &TestCluster) -> BTreeSet<(String, String)> {
    c.objects("storage.k8s.io", "volumeattachments")
        .iter()
        .filter(|a| a.pointer("/status/attached") == Some(&Value::Bool(true)))
        .map(|a| {
            (
                text(a, "/spec/source/persistentVolumeName").into(),
                text(a, "/spec/nodeName").into(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_statefulset_gets_zonal_volumes_attached_where_its_pods_run() {
    let c = TestCluster::start(WORKLOAD, Options::default()).await;
    c.eventually("3 db pods running with their volumes", SETTLE, |c| {
        running(c).len() == 3 && in_use(c).len() == 3 && attached(c) == in_use(c)
    })
    .await;

    // Claims: one per ordinal, each Bound to its own volume.
    let claims = c.objects("", "persistentvolumeclaims");
    let names: BTreeSet<&str> = claims.iter().map(|p| text(p, "/metadata/name")).collect();
    assert_eq!(
        names,
        BTreeSet::from(["data-db-0", "data-db-1", "data-db-2"])
    );
    assert!(claims.iter().all(|p| text(p, "/status/phase") == "Bound"));
    // Volumes: provisioned by the driver in the zone of the node their pod runs on.
    let nodes = c.objects("", "nodes");
    let zone_of = |node: &str| {
        named(&nodes, node)
            .map(|n| text(n, "/metadata/labels/topology.kubernetes.io~1zone").to_string())
            .unwrap_or_default()
    };
    let pvs = c.objects("", "persistentvolumes");
    assert_eq!(pvs.len(), 3);
    for (pv, node) in in_use(&c) {
        let v = named(&pvs, &pv).expect("the claim's volume exists");
        assert_eq!(text(v, "/spec/csi/driver"), DRIVER);
        assert!(text(v, "/spec/csi/volumeHandle").starts_with("vol-"));
        assert_eq!(text(v, "/spec/capacity/storage"), "4Gi");
        assert_eq!(text(v, "/status/phase"), "Bound");
        let zone = v
            .pointer("/spec/nodeAffinity/required/nodeSelectorTerms/0/matchExpressions/0/values/0")
            .and_then(Value::as_str);
        assert_eq!(zone, Some(zone_of(&node).as_str()), "{pv} on {node}");
    }
    // Every node registered the driver with its attach limit.
    let csinodes = c.objects("storage.k8s.io", "csinodes");
    assert_eq!(csinodes.len(), nodes.len());
    for cn in &csinodes {
        let count = cn
            .pointer("/spec/drivers/0/allocatable/count")
            .and_then(Value::as_i64);
        assert!(count.is_some_and(|n| n > 0), "{cn}");
    }
    c.eventually("the StatefulSet reports 3 ready replicas", SETTLE, |c| {
        c.objects("apps", "statefulsets")[0].pointer("/status/readyReplicas")
            == Some(&Value::from(3))
    })
    .await;

    // Real kubectl lists the storage kinds with their columns.
    let listed = c
        .kubectl_ok(&["get", "volumeattachments,csinodes,sts,pvc,pv", "-A"])
        .await;
    for needle in [
        "volumeattachment.storage.k8s.io/csi-",
        "csinode.storage.k8s.io/",
        "statefulset.apps/db",
        "3/3",
        "persistentvolumeclaim/data-db-0",
        "persistentvolume/pvc-",
        "ATTACHER",
        "ebs.csi.aws.com",
        "Bound",
        "RWO",
        "ebs-gp3",
    ] {
        assert!(listed.contains(needle), "missing {needle:?} in:\n{listed}");
    }

    let node0 = running(&c)["db-0"].clone();
    for (args, needle) in [
        (["describe", "pvc", "data-db-0"], "Bound"),
        (["describe", "sts", "db"], "Volume Claims"),
        (["describe", "csinode", node0.as_str()], DRIVER),
        (
            ["describe", "storageclass", "ebs-gp3"],
            "WaitForFirstConsumer",
        ),
    ] {
        let described = c.kubectl_ok(&args).await;
        assert!(described.contains(needle), "{args:?}:\n{described}");
    }

    // db-1 moves: its node is cordoned and the pod deleted; the StatefulSet recreates it, it
    // lands on another node in its volume's zone, and the volume is detached from the old node
    // before it is attached to the new one.
    let old_node = running(&c).get("db-1").cloned().expect("db-1 runs");
    let volume = named(&c.objects("", "persistentvolumeclaims"), "data-db-1")
        .map(|p| text(p, "/spec/volumeName").to_string())
        .expect("data-db-1 is bound");
    let mut events = c.cluster.sandbox.store().subscribe();
    c.kubectl_ok(&["cordon", &old_node]).await;
    c.kubectl_ok(&["delete", "pod", "db-1"]).await;
    c.eventually("db-1 running elsewhere with its volume", SETTLE, |c| {
        let now = running(c);
        now.get("db-1").is_some_and(|n| *n != old_node)
            && attached(c).contains(&(volume.clone(), now["db-1"].clone()))
    })
    .await;
    let new_node = running(&c)["db-1"].clone();
    let (mut detached_at, mut attached_at) = (None, None);
    let mut seen = 0u64;
    while let Ok(e) = events.try_recv() {
        seen += 1;
        let object = e.decoded();
        if e.key.plural != "volumeattachments"
            || text(&object, "/spec/source/persistentVolumeName") != volume
        {
            continue;
        }
        let node = text(&object, "/spec/nodeName");
        match e.event_type {
            EventType::Deleted if node == old_node => detached_at = detached_at.or(Some(e.rv)),
            EventType::Added if node == new_node => attached_at = attached_at.or(Some(e.rv)),
            _ => {}
        }
    }
    assert!(seen > 0);
    let (Some(detached), Some(attached_rv)) = (detached_at, attached_at) else {
        panic!(
            "expected a detach from {old_node} and an attach to {new_node}: {detached_at:?} {attached_at:?}"
        );
    };
    assert!(
        detached < attached_rv,
        "detached at {detached}, attached elsewhere at {attached_rv}"
    );
    let nodes = c.objects("", "nodes");
    let zone_of = |node: &str| {
        named(&nodes, node)
            .map(|n| text(n, "/metadata/labels/topology.kubernetes.io~1zone").to_string())
    };
    assert!(
        zone_of(&new_node).is_some() && zone_of(&new_node) == zone_of(&old_node),
        "db-1 stays in its volume's zone"
    );
    assert!(
        !attached(&c)
            .iter()
            .any(|(v, n)| *v == volume && *n == old_node)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_step_terminates_a_node_only_after_its_volumes_are_detached() {
    use tokio::sync::broadcast::error::TryRecvError;

    let c = TestCluster::start(WORKLOAD, Options::default()).await;
    c.eventually("3 db pods running with their volumes", SETTLE, |c| {
        running(c).len() == 3 && in_use(c).len() == 3 && attached(c) == in_use(c)
    })
    .await;
    let with_volumes: BTreeSet<String> = attached(&c).into_iter().map(|(_, n)| n).collect();
    let node_names = |c: &TestCluster| -> BTreeSet<String> {
        c.objects("", "nodes")
            .iter()
            .map(|n| text(n, "/metadata/name").to_string())
            .collect()
    };
    let mut events = c.cluster.sandbox.store().subscribe();
    // A new AMI drifts every node; the serial upgrade replaces them one step at a time.
    c.publish_ami("al2023", None);
    c.eventually(
        "a node holding volumes replaced",
        Duration::from_secs(240),
        |c| {
            let now = node_names(c);
            with_volumes.iter().any(|n| !now.contains(n))
        },
    )
    .await;
    // Store order: the node's VolumeAttachments are deleted before the Node is, which the
    // controller deletes only after the instance is terminated.
    let mut detached: BTreeMap<String, u64> = BTreeMap::new();
    let mut node_deleted: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        let e = match events.try_recv() {
            Ok(e) => e,
            Err(TryRecvError::Lagged(_)) => continue,
            Err(_) => break,
        };
        if e.event_type != EventType::Deleted {
            continue;
        }
        match e.key.plural.as_str() {
            "volumeattachments" => {
                let node = text(&e.decoded(), "/spec/nodeName").to_string();
                let rv = detached.entry(node).or_insert(e.rv);
                *rv = (*rv).max(e.rv);
            }
            "nodes" => {
                node_deleted.insert(text(&e.decoded(), "/metadata/name").to_string(), e.rv);
            }
            _ => {}
        }
    }
    let replaced: Vec<&String> = with_volumes
        .iter()
        .filter(|n| node_deleted.contains_key(*n))
        .collect();
    assert!(!replaced.is_empty(), "a node with volumes was deleted");
    for node in replaced {
        let va = detached
            .get(node)
            .unwrap_or_else(|| panic!("{node}'s volumes were detached"));
        assert!(
            *va < node_deleted[node],
            "{node}: last VolumeAttachment deleted at {va}, the Node at {}",
            node_deleted[node]
        );
    }
    c.eventually("the db pods run again with their volumes", SETTLE, |c| {
        running(c).len() == 3 && attached(c) == in_use(c)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_are_never_planned_past_a_nodes_ebs_attach_limit() {
    // 28 small pods with a volume each on m5.large only: cpu and pods (29) would fit them all on
    // one node, but m5.large attaches 26 EBS volumes besides its root volume.
    let workload = WORKLOAD
        .replace(
            "replicas: 3",
            "replicas: 28\n  podManagementPolicy: Parallel",
        )
        .replace("cpu: 500m, memory: 512Mi", "cpu: 10m, memory: 16Mi");
    let node_class = karpenter::workload::DEFAULT_NODEPOOL
        .split("---")
        .nth(1)
        .expect("node class document");
    let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      requirements:\n      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";
    let c = TestCluster::start(
        &format!("{workload}---\n{pool}---{node_class}"),
        Options {
            defaults: false,
            ..Options::default()
        },
    )
    .await;
    c.eventually("28 db pods running with their volumes", SETTLE, |c| {
        running(c).len() == 28 && attached(c) == in_use(c)
    })
    .await;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for (_, node) in attached(&c) {
        *per_node.entry(node).or_default() += 1;
    }
    assert!(
        per_node.len() >= 2,
        "one m5.large cannot attach 28: {per_node:?}"
    );
    assert!(
        per_node.values().all(|n| *n <= 26),
        "no node past its attach limit: {per_node:?}"
    );
    // No pod ever waited on a node for want of an attachment slot.
    let refused = c.objects("", "events").into_iter().any(|e| {
        text(&e, "/message").contains("exceed max volume count")
            && text(&e, "/source/component") != "karpenter"
    });
    assert!(!refused, "kube-scheduler never met a node at its limit");
}
