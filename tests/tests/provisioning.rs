//! Provisioning end to end: node ownership, in-flight capacity, limits, and bad input.

use std::time::Duration;

use karpenter_core::scheduling::resources::Resources;
use serde_json::Value;
use tests::{Options, TestCluster, condition, deployment};

const SETTLE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_never_creates_a_node() {
    let c = TestCluster::start(&deployment("web", 12, "900m", "1Gi"), Options::default()).await;
    let o = c
        .wait_for("settled", SETTLE, |o| o.pods_bound == 12 && o.settled())
        .await;
    assert!(o.claims_total >= 1);
    let nodes = c.objects("", "nodes");
    assert_eq!(
        nodes.len(),
        o.claims_total,
        "one node per NodeClaim, registered by kubelets"
    );
    let audit = c.cluster.sandbox.audit();
    assert!(
        audit
            .iter()
            .any(|e| e.method == "POST" && e.path == "/apis/karpenter.sh/v1/nodeclaims"),
        "the controller created NodeClaims over HTTP"
    );
    let node_creates: Vec<_> = audit
        .iter()
        .filter(|e| e.method == "POST" && e.path.starts_with("/api/v1/nodes"))
        .collect();
    assert!(
        node_creates.is_empty(),
        "no client created a Node: {node_creates:?}"
    );
    // Every node is matched to its NodeClaim by providerID and owned by it.
    for claim in c.nodeclaims() {
        let pid = claim["status"]["providerID"].as_str().expect("launched");
        let node = nodes
            .iter()
            .find(|n| n["spec"]["providerID"] == pid)
            .expect("node with the claim's providerID");
        assert_eq!(
            node["metadata"]["ownerReferences"][0]["uid"],
            claim["metadata"]["uid"]
        );
        assert_eq!(
            node["metadata"]["labels"]["karpenter.sh/initialized"],
            "true"
        );
        assert!(
            node["spec"]["taints"]
                .as_array()
                .is_none_or(|t| t.iter().all(|t| t["key"] != "karpenter.sh/unregistered"))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_batch_uses_in_flight_capacity() {
    // Nodes take 15s to register, so the first NodeClaim stays in flight during the second batch.
    let opts = Options {
        registration_delay: Duration::from_secs(15),
        ..Options::default()
    };
    let c = TestCluster::start(&deployment("first", 2, "1", "512Mi"), opts).await;
    c.eventually("first nodeclaim launched", SETTLE, |c| {
        c.nodeclaims()
            .iter()
            .any(|n| condition(n, "Launched").as_deref() == Some("True"))
    })
    .await;
    let claim = c.nodeclaims().remove(0);
    let allocatable = Resources::from_list(
        &serde_json::from_value(claim["status"]["allocatable"].clone()).expect("allocatable"),
    )
    .expect("quantities");
    assert!(
        allocatable.cpu >= 2500,
        "the launched type has room for another 500m: {allocatable}"
    );
    assert!(c.objects("", "nodes").is_empty(), "still in flight");
    let second = c
        .kubectl(
            &["apply", "-f", "-"],
            Some(&deployment("second", 1, "500m", "256Mi")),
        )
        .await;
    assert!(second.status.success());
    // The second pod is nominated to the in-flight NodeClaim, not to new capacity.
    let claim_name = claim["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    c.eventually("second pod nominated", SETTLE, |c| {
        c.objects("", "events").iter().any(|e| {
            e["reason"] == "Nominated"
                && e.pointer("/involvedObject/name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n.starts_with("second-"))
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&claim_name))
        })
    })
    .await;
    assert_eq!(
        c.nodeclaims().len(),
        1,
        "no new NodeClaim for pods in-flight capacity covers"
    );
    let o = c
        .wait_for("all bound", SETTLE, |o| o.pods_bound == 3 && o.settled())
        .await;
    assert_eq!(o.claims_total, 1);
}

const LIMITED_POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: limited
spec:
  limits:
    cpu: "8"
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodepool_limits_hold() {
    let yaml = format!("{LIMITED_POOL}---\n{}", deployment("big", 20, "1", "512Mi"));
    let c = TestCluster::start(&yaml, Options::default()).await;
    c.eventually("a pod reports the limit", SETTLE, |c| {
        c.objects("", "events").iter().any(|e| {
            e["reason"] == "FailedScheduling"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("exceed limits for nodepool"))
        })
    })
    .await;
    c.wait_for("claims initialized", SETTLE, |o| {
        o.claims_total > 0 && o.claims_initialized == o.claims_total
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut total = Resources::default();
    for claim in c.nodeclaims() {
        let cap = Resources::from_list(
            &serde_json::from_value(claim["status"]["capacity"].clone()).expect("capacity"),
        )
        .expect("quantities");
        total.add(&cap);
    }
    assert!(
        total.cpu <= 8000,
        "launched {} cpu under an 8 cpu limit",
        total.cpu
    );
    let o = c.cluster.observe().await;
    assert!(
        o.pods_bound < 20 && o.pods_bound > 0,
        "some pods run, the rest wait: {o:?}"
    );
    let pool = c.objects("karpenter.sh", "nodepools").remove(0);
    assert_eq!(condition(&pool, "Ready").as_deref(), Some("True"));
}

/// A NodePool the API server admits (upstream's schedule pattern only asks for five fields) but
/// whose budget schedule no cron parser reads: minute 61, hour 25. (A requirement such as
/// `Gt ["lots"]` no longer gets this far: the CRD's CEL rules refuse it at admission.)
const INVALID_POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: broken
spec:
  disruption:
    budgets:
    - {nodes: "0", schedule: "61 25 * * *", duration: 1h}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_invalid_nodepool_is_not_ready_and_launches_nothing() {
    let ec2nodeclass = karpenter::workload::DEFAULT_NODEPOOL
        .split("---")
        .nth(1)
        .expect("node class document");
    let yaml = format!(
        "{INVALID_POOL}---{ec2nodeclass}---\n{}",
        deployment("web", 2, "100m", "64Mi")
    );
    let c = TestCluster::start(&yaml, Options::default()).await;
    c.eventually("nodepool validated", SETTLE, |c| {
        c.objects("karpenter.sh", "nodepools")
            .iter()
            .any(|p| condition(p, "ValidationSucceeded").as_deref() == Some("False"))
    })
    .await;
    let pool = c.objects("karpenter.sh", "nodepools").remove(0);
    assert_eq!(condition(&pool, "Ready").as_deref(), Some("False"));
    let validation = pool["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|x| x["type"] == "ValidationSucceeded"))
        .cloned()
        .expect("condition");
    assert_eq!(validation["reason"], "NodePoolValidationFailed");
    assert_eq!(
        validation["message"],
        "spec.disruption.budgets[0].schedule: \"61 25 * * *\" is not a valid cron schedule: \
         minute \"61\": number out of bounds (allowed: 0-59)"
    );
    c.eventually("pods told why", SETTLE, |c| {
        c.objects("", "events")
            .iter()
            .any(|e| e["reason"] == "FailedScheduling" && e["source"]["component"] == "karpenter")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        c.nodeclaims().is_empty(),
        "an invalid NodePool launches nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_no_instance_type_fits_gets_an_event_saying_why() {
    let c = TestCluster::start(&deployment("huge", 1, "5000", "1Gi"), Options::default()).await;
    c.eventually("FailedScheduling event", SETTLE, |c| {
        c.objects("", "events").iter().any(|e| {
            e["reason"] == "FailedScheduling"
                && e["source"]["component"] == "karpenter"
                && e["message"].as_str().is_some_and(|m| {
                    m.contains("no instance type has enough resources") && m.contains("cpu: 5000")
                })
        })
    })
    .await;
    let o = c
        .wait_for("settled with the pod unschedulable", SETTLE, |o| {
            o.settled()
        })
        .await;
    assert_eq!(o.pending.len(), 1);
    assert!(
        o.pending[0]
            .reason
            .contains("incompatible with nodepool \"default\""),
        "{:?}",
        o.pending
    );
    assert_eq!(o.claims_total, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_nodeclaim_drains_and_replaces_its_capacity() {
    let c = TestCluster::start(&deployment("web", 4, "500m", "256Mi"), Options::default()).await;
    c.wait_for("settled", SETTLE, |o| o.pods_bound == 4 && o.settled())
        .await;
    let old = c.nodeclaims().remove(0);
    let old_name = old["metadata"]["name"].as_str().expect("name").to_string();
    let old_node = old["status"]["nodeName"]
        .as_str()
        .expect("registered")
        .to_string();
    let old_pid = old["status"]["providerID"]
        .as_str()
        .expect("launched")
        .to_string();
    c.kubectl_ok(&["delete", "nodeclaim", &old_name, "--wait=false"])
        .await;
    // The finalizers drain the node, terminate the instance and let both objects go; the
    // evicted pods come back and get new capacity.
    c.eventually("old claim and node gone", SETTLE, |c| {
        c.nodeclaims()
            .iter()
            .all(|n| n["metadata"]["name"] != old_name.as_str())
            && c.objects("", "nodes")
                .iter()
                .all(|n| n["metadata"]["name"] != old_node.as_str())
    })
    .await;
    assert!(
        c.cluster
            .sim
            .as_ref()
            .expect("simulated cloud")
            .instances()
            .iter()
            .all(|i| i.provider_id != old_pid),
        "instance terminated"
    );
    let o = c
        .wait_for("pods back on new capacity", SETTLE, |o| {
            o.pods_bound == 4 && o.settled()
        })
        .await;
    assert!(o.claims_total >= 1);
    let evicted = c
        .objects("", "events")
        .iter()
        .filter(|e| e["reason"] == "Evicted")
        .count();
    assert!(evicted >= 1, "pods were evicted through the eviction API");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_nodepool_removes_its_nodeclaims_and_instances() {
    let c = TestCluster::start(&deployment("web", 2, "500m", "256Mi"), Options::default()).await;
    c.wait_for("settled", SETTLE, |o| o.pods_bound == 2 && o.settled())
        .await;
    assert!(!c.sim().instances().is_empty());
    c.kubectl_ok(&["delete", "nodepool", "default"]).await;
    c.eventually("claims, nodes and instances gone", SETTLE, |c| {
        c.nodeclaims().is_empty()
            && c.objects("", "nodes").is_empty()
            && c.sim().instances().is_empty()
    })
    .await;
}

/// Controller settings with plan = binding and the live cost re-pack on (both off by default
/// until measured at scale).
fn plan_is_binding() -> controller::runtime::Settings {
    controller::runtime::Settings {
        nominate_planned_pods: true,
        cost_repack: true,
        ..Default::default()
    }
}

/// A NodePool of one GPU type and two CPU types, on-demand.
const GPU_AND_CPU_POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: mixed
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
      - {key: node.kubernetes.io/instance-type, operator: In, values: ["g4dn.xlarge", "c5.large", "c5.xlarge"]}
"#;

/// One pod asking a GPU and `cpu`.
fn gpu_deployment(name: &str, cpu: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: app\n        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2\n        resources:\n          requests: {{cpu: \"{cpu}\", memory: 1Gi, nvidia.com/gpu: \"1\"}}\n          limits: {{nvidia.com/gpu: \"1\"}}\n"
    )
}

/// The node each pod of `app` is bound to.
fn nodes_of(c: &TestCluster, app: &str) -> Vec<String> {
    c.objects("", "pods")
        .iter()
        .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some(app))
        .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
        .collect()
}

/// Plan = binding (issue 17): the pods planned onto a NodeClaim are nominated to its node when it
/// registers (`status.nominatedNodeName`), and kube-scheduler holds their room against pods of
/// the same priority. CPU-only pods pending at the same time, older and so ahead in the queue,
/// would otherwise fill the GPU node (LeastAllocated favours the largest free node), leave the
/// GPU pod without CPU and launch a second GPU node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planned_gpu_node_gets_its_gpu_pod_although_cpu_pods_were_pending_too() {
    let yaml = format!(
        "{GPU_AND_CPU_POOL}---\n{}---\n{}",
        deployment("cpu-only", 5, "1", "1Gi"),
        gpu_deployment("gpu", "2")
    );
    let c = TestCluster::start(
        &yaml,
        Options {
            batch_idle: Duration::from_secs(1),
            settings: plan_is_binding(),
            ..Options::default()
        },
    )
    .await;
    let o = c
        .wait_for("every pod bound", SETTLE, |o| {
            o.pods_bound == 6 && o.settled()
        })
        .await;
    let gpu_nodes: Vec<String> = c
        .objects("", "nodes")
        .iter()
        .filter(|n| {
            n.pointer("/metadata/labels/node.kubernetes.io~1instance-type")
                == Some(&Value::from("g4dn.xlarge"))
        })
        .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
        .collect();
    assert_eq!(
        gpu_nodes.len(),
        1,
        "one GPU node, as planned: {:?}",
        o.by_instance_type
    );
    assert_eq!(
        nodes_of(&c, "gpu"),
        gpu_nodes,
        "the GPU pod runs on the GPU node planned for it"
    );
    // Every pod planned onto a NodeClaim that registered landed on that NodeClaim's node.
    let claims = c.nodeclaims();
    for p in c.objects("", "pods") {
        let name = p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let planned = c
            .events(&name, "Nominated")
            .iter()
            .filter_map(|e| e["message"].as_str())
            .filter_map(|m| {
                m.rsplit_once("nodeclaim/")
                    .map(|(_, claim)| claim.to_string())
            })
            .next_back();
        let Some(claim) = planned else { continue };
        let node = claims
            .iter()
            .find(|cl| cl["metadata"]["name"] == claim.as_str())
            .and_then(|cl| cl["status"]["nodeName"].as_str());
        assert_eq!(
            p["spec"]["nodeName"].as_str(),
            node,
            "pod {name} was planned onto nodeclaim {claim}"
        );
        assert!(
            p["status"].get("nominatedNodeName").is_none(),
            "binding clears the nomination"
        );
    }
}

/// A nomination the plan no longer holds is cleared (KEP-5278: the component that sets one clears
/// it; kube-scheduler no longer does): a pending pod nominated to a Karpenter node that goes
/// away is nominated nowhere, so it can be provisioned for again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nomination_is_cleared_when_its_node_goes_away() {
    let c = TestCluster::start(
        &deployment("web", 1, "500m", "512Mi"),
        Options {
            settings: plan_is_binding(),
            ..Options::default()
        },
    )
    .await;
    c.wait_for("settled", SETTLE, |o| o.pods_bound == 1 && o.settled())
        .await;
    let node = c.objects("", "nodes")[0]["metadata"]["name"]
        .as_str()
        .expect("a node")
        .to_string();
    // A pod no node matches (and no NodePool can label), nominated by hand to the Karpenter
    // node: it fits the node's room, so only the node going away makes the nomination stale.
    c.kubectl_ok(&[
        "run",
        "huge",
        "--image=pause",
        "--overrides",
        r#"{"spec": {"nodeSelector": {"example.com/nowhere": "true"}}}"#,
    ])
    .await;
    c.kubectl_ok(&[
        "patch",
        "pod",
        "huge",
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(r#"{{"status": {{"nominatedNodeName": "{node}"}}}}"#),
    ])
    .await;
    let nominated = |c: &TestCluster| {
        c.objects("", "pods")
            .iter()
            .find(|p| p["metadata"]["name"] == "huge")
            .and_then(|p| p["status"]["nominatedNodeName"].as_str().map(String::from))
    };
    let claim = c.nodeclaims()[0]["metadata"]["name"]
        .as_str()
        .expect("a nodeclaim")
        .to_string();
    c.kubectl_ok(&["delete", "nodeclaim", &claim, "--wait=false"])
        .await;
    c.eventually("the nomination is cleared", SETTLE, |c| {
        nominated(c).is_none()
    })
    .await;
}

/// Three node classes whose kubelet and volume settings change allocatable, a NodePool pinned
/// to one instance type for each, and a pod for each NodePool.
const THREE_NODE_CLASSES: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: plain}
spec:
  role: KarpenterNodeRole-sandbox
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: bottlerocket}
spec:
  role: KarpenterNodeRole-sandbox
  amiSelectorTerms: [{alias: bottlerocket@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  kubelet:
    maxPods: 20
    systemReserved: {memory: 300Mi, cpu: 100m}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: tuned}
spec:
  role: KarpenterNodeRole-sandbox
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  kubelet:
    podsPerCore: 4
    kubeReserved: {cpu: 250m, memory: 1Gi}
    evictionHard: {memory.available: 5%, nodefs.available: 15%}
  blockDeviceMappings:
    - {deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 100Gi}}
"#;

fn pinned_pool_and_pod(pool: &str, class: &str, instance_type: &str) -> String {
    format!(
        r#"
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {pool}}}
spec:
  template:
    spec:
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [{instance_type}]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {class}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: on-{pool}}}
spec:
  nodeSelector: {{karpenter.sh/nodepool: {pool}}}
  containers:
    - name: app
      image: public.ecr.aws/eks-distro/kubernetes/pause:3.2
      resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kubelet_registers_the_allocatable_the_provisioner_modelled_for_its_node_class() {
    use karpenter_core::capacity::catalog::Catalog;
    use karpenter_core::capacity::node_class::{CapacityConfig, CapacityOptions};

    let pools = [
        ("plain", "plain", "m5.large"),
        ("bottlerocket", "bottlerocket", "m5.xlarge"),
        ("tuned", "tuned", "c5.2xlarge"),
    ];
    let mut yaml = THREE_NODE_CLASSES.to_string();
    for (pool, class, instance_type) in pools {
        yaml.push_str(&pinned_pool_and_pod(pool, class, instance_type));
    }
    let c = TestCluster::start(
        &yaml,
        Options {
            defaults: false,
            ..Options::default()
        },
    )
    .await;
    c.wait_for("three pods bound", SETTLE, |o| {
        o.pods_bound == 3 && o.settled()
    })
    .await;
    let catalog = Catalog::embedded().expect("catalog");
    let classes = c.objects("karpenter.k8s.aws", "ec2nodeclasses");
    let nodes = c.objects("", "nodes");
    assert_eq!(nodes.len(), 3, "one node per NodePool");
    for (pool, class_name, instance_type) in pools {
        let node = nodes
            .iter()
            .find(|n| n["metadata"]["labels"]["karpenter.sh/nodepool"] == pool)
            .unwrap_or_else(|| panic!("a node of {pool}"));
        assert_eq!(
            node["metadata"]["labels"]["node.kubernetes.io/instance-type"],
            instance_type
        );
        let class: crds::EC2NodeClass = serde_json::from_value(
            classes
                .iter()
                .find(|o| o["metadata"]["name"] == class_name)
                .cloned()
                .expect("node class stored"),
        )
        .expect("node class parses");
        let config = CapacityConfig::from_node_class(&class, CapacityOptions::default())
            .expect("settings parse");
        let modelled = config.allocation(&catalog.get(instance_type).expect("in catalog").spec);
        let mut expected = modelled.capacity.clone();
        expected.sub(&modelled.overhead);
        let registered: std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        > = serde_json::from_value(node["status"]["allocatable"].clone()).expect("allocatable");
        let registered = Resources::from_list(&registered).expect("quantities parse");
        assert_eq!(
            registered, expected,
            "{pool} ({class_name}, {instance_type})"
        );
        let capacity: std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        > = serde_json::from_value(node["status"]["capacity"].clone()).expect("capacity");
        assert_eq!(
            Resources::from_list(&capacity).expect("quantities parse"),
            modelled.capacity,
            "{pool}"
        );
        // The node class's own settings show through.
        match pool {
            "bottlerocket" => assert_eq!(registered.pods, 20, "maxPods"),
            "tuned" => {
                assert_eq!(modelled.capacity.ephemeral, 100 << 30, "root volume");
                assert_eq!(registered.pods, 32, "podsPerCore 4 x 8 vCPUs");
            }
            _ => assert_eq!(registered.pods, 29, "m5.large's ENI limit"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_class_whose_kubelet_settings_do_not_parse_is_not_valid_and_launches_nothing() {
    let node_class = THREE_NODE_CLASSES
        .split("---")
        .next()
        .expect("the plain node class")
        .replace("metadata: {name: plain}", "metadata: {name: default}")
        + "  kubelet:\n    kubeReserved: {cpu: lots}\n";
    let pool = karpenter::workload::DEFAULT_NODEPOOL
        .split("---")
        .next()
        .expect("NodePool document");
    let yaml = format!(
        "{pool}---{node_class}---\n{}",
        deployment("web", 2, "100m", "64Mi")
    );
    let c = TestCluster::start(
        &yaml,
        Options {
            defaults: false,
            ..Options::default()
        },
    )
    .await;
    c.eventually("node class validated", SETTLE, |c| {
        c.objects("karpenter.k8s.aws", "ec2nodeclasses")
            .iter()
            .any(|p| condition(p, "ValidationSucceeded").as_deref() == Some("False"))
    })
    .await;
    let class = c.objects("karpenter.k8s.aws", "ec2nodeclasses").remove(0);
    let validation = class["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|x| x["type"] == "ValidationSucceeded"))
        .cloned()
        .expect("condition");
    assert_eq!(validation["reason"], "InvalidKubeletConfiguration");
    assert!(
        validation["message"]
            .as_str()
            .is_some_and(|m| m.contains("kubeReserved") && m.contains("lots")),
        "{validation}"
    );
    assert_eq!(condition(&class, "Ready").as_deref(), Some("False"));
    c.eventually("pods told no NodePool is ready", SETTLE, |c| {
        c.objects("", "events")
            .iter()
            .any(|e| e["reason"] == "FailedScheduling" && e["source"]["component"] == "karpenter")
    })
    .await;
    assert!(
        c.nodeclaims().is_empty(),
        "nothing launched from an invalid node class"
    );
}

/// A NodePool or NodeClaim whose nodeClassRef is not a `karpenter.k8s.aws` `EC2NodeClass` is
/// refused although an EC2NodeClass of that name exists, and says why: the NodePool is not
/// Ready (`NodeClassReady=False`) and launches nothing for its pod; the NodeClaim made by hand
/// is deleted with a `NodeClassNotReady` Event instead of launched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_class_ref_of_another_group_or_kind_is_refused() {
    const WHY: &str = "is not a node class this Karpenter serves";
    let yaml = format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  role: KarpenterNodeRole-sandbox\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: sandbox}}}}]\n  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: sandbox}}}}]\n\
         ---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: foreign\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: AKSNodeClass, name: default}}\n\
         ---\napiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: handmade\nspec:\n  nodeClassRef: {{group: karpenter.azure.com, kind: EC2NodeClass, name: default}}\n  requirements:\n  - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}\n\
         ---\n{}",
        deployment("web", 1, "500m", "256Mi")
    );
    let c = TestCluster::start(&yaml, Options::default()).await;
    c.eventually(
        "NodeClassReady=False on the NodePool, saying why",
        SETTLE,
        |c| {
            c.objects("karpenter.sh", "nodepools").iter().any(|p| {
                p["metadata"]["name"] == "foreign"
                    && p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|cond| {
                            cond["type"] == "NodeClassReady"
                                && cond["status"] == "False"
                                && cond["message"].as_str().is_some_and(|m| m.contains(WHY))
                        })
            })
        },
    )
    .await;
    c.eventually("the handmade NodeClaim refused, saying why", SETTLE, |c| {
        c.events("handmade", "NodeClassNotReady")
            .iter()
            .any(|e| e["message"].as_str().is_some_and(|m| m.contains(WHY)))
    })
    .await;
    c.eventually("the handmade NodeClaim deleted", SETTLE, |c| {
        c.nodeclaims()
            .iter()
            .all(|n| n["metadata"]["name"] != "handmade")
    })
    .await;
    assert_eq!(
        c.nodeclaims(),
        Vec::<Value>::new(),
        "no NodeClaim for pool foreign"
    );
    assert!(c.sim().instances().is_empty(), "nothing was launched");
}
