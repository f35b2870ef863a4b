use serde_json::{Value, json};

use super::{Write, apply};
use crate::registry::Registry;

fn defaulted(group: &str, plural: &str, mut obj: Value) -> Value {
    let r = Registry::default();
    let rt = r.get(group, "v1", plural).expect("served");
    apply(rt, &mut obj, Write::Create);
    obj
}

/// Online Boutique's adservice container, as its manifest writes it.
fn grpc_container() -> Value {
    json!({"name": "server", "image": "us-central1-docker.pkg.dev/google-samples/microservices-demo/adservice:v0.10.2",
        "ports": [{"containerPort": 9555}],
        "readinessProbe": {"initialDelaySeconds": 20, "periodSeconds": 15, "grpc": {"port": 9555}},
        "livenessProbe": {"httpGet": {"port": 8080}},
        "resources": {"requests": {"cpu": "200m", "memory": "180Mi"}, "limits": {"cpu": "300m", "memory": "300Mi"}}})
}

#[test]
fn probes_and_containers_get_what_kubectl_describe_dereferences() {
    let pod = defaulted(
        "",
        "pods",
        json!({"spec": {"containers": [grpc_container()]}}),
    );
    let c = &pod["spec"]["containers"][0];
    assert_eq!(
        c["readinessProbe"],
        json!({"initialDelaySeconds": 20, "periodSeconds": 15, "timeoutSeconds": 1,
            "successThreshold": 1, "failureThreshold": 3, "grpc": {"port": 9555, "service": ""}})
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"port": 8080, "path": "/", "scheme": "HTTP"})
    );
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    let spec = &pod["spec"];
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["securityContext"], json!({}));
}

#[test]
fn templates_get_the_pod_spec_defaults_but_not_the_pod_only_ones() {
    let d = defaulted(
        "apps",
        "deployments",
        json!({"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "x:1", "resources": {"limits": {"cpu": "1"}}}]}}}}),
    );
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    let template = &spec["template"]["spec"];
    assert_eq!(template["restartPolicy"], "Always");
    assert!(
        template["containers"][0]["resources"]
            .get("requests")
            .is_none()
    );
    assert!(template.get("enableServiceLinks").is_none());
}

#[test]
fn a_partial_rolling_update_is_completed() {
    let d = defaulted(
        "apps",
        "deployments",
        json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 2}}}}),
    );
    assert_eq!(
        d["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 2}})
    );
    let recreate = defaulted(
        "apps",
        "deployments",
        json!({"spec": {"strategy": {"type": "Recreate"}}}),
    );
    assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
    let ds = defaulted("apps", "daemonsets", json!({"spec": {}}));
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
}

#[test]
fn stateful_sets_and_their_claim_templates() {
    let sts = defaulted(
        "apps",
        "statefulsets",
        json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    );
    let spec = &sts["spec"];
    assert_eq!(spec["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(
        spec["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    assert_eq!(
        spec["volumeClaimTemplates"][0]["spec"]["volumeMode"],
        "Filesystem"
    );
    assert_eq!(
        spec["volumeClaimTemplates"][0]["status"]["phase"],
        "Pending"
    );
}

#[test]
fn jobs_get_counts_and_a_generated_selector() {
    let job = defaulted(
        "batch",
        "jobs",
        json!({"metadata": {"name": "pi", "uid": "u-1"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "pi", "image": "perl"}]}}}}),
    );
    let spec = &job["spec"];
    assert_eq!(
        (spec["completions"].clone(), spec["parallelism"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(spec["backoffLimit"], 6);
    assert_eq!(spec["completionMode"], "NonIndexed");
    assert_eq!(spec["suspend"], false);
    assert_eq!(
        spec["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
    );
    assert_eq!(spec["template"]["metadata"]["labels"]["job-name"], "pi");
    assert_eq!(
        job["metadata"]["labels"]["batch.kubernetes.io/job-name"],
        "pi"
    );
}

#[test]
fn services_are_allocated_once() {
    let r = Registry::default();
    let rt = r.get("", "v1", "services").expect("served");
    let mut svc =
        json!({"spec": {"type": "NodePort", "selector": {"app": "a"}, "ports": [{"port": 80}]}});
    apply(rt, &mut svc, Write::Create);
    let spec = &svc["spec"];
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(spec["ports"][0]["targetPort"], 80);
    assert_eq!(spec["ports"][0]["protocol"], "TCP");
    assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    assert_eq!(spec["externalTrafficPolicy"], "Cluster");
    assert_eq!(spec["internalTrafficPolicy"], "Cluster");
    let node_port = spec["ports"][0]["nodePort"].as_i64().expect("allocated");
    assert!((30000..=32767).contains(&node_port));
    let ip = spec["clusterIP"].clone();
    assert_eq!(spec["clusterIPs"], json!([ip]));
    let old = svc.clone();
    let mut reapplied =
        json!({"spec": {"type": "NodePort", "selector": {"app": "b"}, "ports": [{"port": 80}]}});
    apply(rt, &mut reapplied, Write::Update(&old));
    assert_eq!(reapplied["spec"]["clusterIP"], ip);
    assert_eq!(reapplied["spec"]["ports"][0]["nodePort"], node_port);
    let mut external = json!({"spec": {"type": "ExternalName", "externalName": "example.com"}});
    apply(rt, &mut external, Write::Create);
    assert!(external["spec"].get("clusterIP").is_none());
}

#[test]
fn other_kinds() {
    let pc = defaulted("scheduling.k8s.io", "priorityclasses", json!({"value": 10}));
    assert_eq!(pc["preemptionPolicy"], "PreemptLowerPriority");
    let sc = defaulted(
        "storage.k8s.io",
        "storageclasses",
        json!({"provisioner": "ebs.csi.aws.com"}),
    );
    assert_eq!(
        (sc["reclaimPolicy"].clone(), sc["volumeBindingMode"].clone()),
        (json!("Delete"), json!("Immediate"))
    );
    let pvc = defaulted(
        "",
        "persistentvolumeclaims",
        json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}}),
    );
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pvc["status"]["phase"], "Pending");
    let pv = defaulted(
        "",
        "persistentvolumes",
        json!({"spec": {"capacity": {"storage": "0.0001"}}}),
    );
    assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(pv["spec"]["capacity"]["storage"], "1m");
    let secret = defaulted(
        "",
        "secrets",
        json!({"stringData": {"token": "abc"}, "data": {"x": "eA=="}}),
    );
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["data"], json!({"x": "eA==", "token": "YWJj"}));
    assert!(secret.get("stringData").is_none());
    let rb = defaulted(
        "rbac.authorization.k8s.io",
        "rolebindings",
        json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "a"}, {"kind": "User", "name": "u"}]}),
    );
    assert_eq!(rb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    assert!(
        rb["subjects"][0].get("apiGroup").is_none(),
        "omitted, as Go omits \"\""
    );
    assert_eq!(rb["subjects"][1]["apiGroup"], "rbac.authorization.k8s.io");
    let node = defaulted("", "nodes", json!({"status": {"capacity": {"cpu": "2"}}}));
    assert_eq!(node["status"]["allocatable"], json!({"cpu": "2"}));
}

#[test]
fn volumes_without_a_source_are_empty_dirs() {
    let pod = defaulted(
        "",
        "pods",
        json!({"spec": {"containers": [{"name": "c"}], "volumes": [
            {"name": "scratch"},
            {"name": "cfg", "configMap": {"name": "x"}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}}),
    );
    let volumes = &pod["spec"]["volumes"];
    assert_eq!(volumes[0]["emptyDir"], json!({}));
    assert_eq!(volumes[1]["configMap"]["defaultMode"], 420);
    assert_eq!(
        volumes[2]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
        3600
    );
}
