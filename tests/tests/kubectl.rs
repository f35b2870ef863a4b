//! Real kubectl against a running sandbox: the verbs operators use every day work, and the
//! controller reacts to what kubectl changes.

use std::time::Duration;

use serde_json::Value;
use tests::{Options, TestCluster, deployment};

const SETTLE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_drives_the_sandbox_and_the_controller_reacts() {
    let c = TestCluster::start(&deployment("web", 3, "500m", "512Mi"), Options::default()).await;
    c.wait_for("3 pods bound", SETTLE, |o| o.pods_bound == 3 && o.settled())
        .await;

    // get across kinds, including server-side printer columns for custom resources.
    let all = c
        .kubectl_ok(&["get", "nodepools,nodeclaims,nodes,pods", "-A"])
        .await;
    for needle in [
        "nodepool.karpenter.sh/default",
        "nodeclaim.karpenter.sh/default-",
        "node/ip-10-0-",
        "pod/web-",
        "Running",
        "True",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    let claims = c.kubectl_ok(&["get", "nodeclaims", "-o", "wide"]).await;
    assert!(
        claims.contains("TYPE")
            && claims.contains("CAPACITY")
            && claims.contains("ZONE")
            && claims.contains("NODEPOOL"),
        "{claims}"
    );

    // describe a NodeClaim: conditions and status are shown.
    let name = c.nodeclaims()[0]["metadata"]["name"]
        .as_str()
        .expect("claim name")
        .to_string();
    let described = c.kubectl_ok(&["describe", "nodeclaim", &name]).await;
    for needle in [
        "Launched",
        "Registered",
        "Initialized",
        "Provider ID:",
        "Node Class Ref:",
    ] {
        assert!(
            described.contains(needle),
            "missing {needle:?} in describe:\n{described}"
        );
    }

    // apply -f (create, then a changed re-apply of a built-in object: strategic merge patch).
    let applied = c
        .kubectl(
            &["apply", "-f", "-"],
            Some(&deployment("api", 2, "250m", "256Mi")),
        )
        .await;
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let changed = deployment("api", 2, "250m", "256Mi").replace("pause:3.2", "pause:3.9");
    let reapplied = c.kubectl(&["apply", "-f", "-"], Some(&changed)).await;
    assert!(
        reapplied.status.success(),
        "{}",
        String::from_utf8_lossy(&reapplied.stderr)
    );
    let image = c
        .kubectl_ok(&[
            "get",
            "deployment",
            "api",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])
        .await;
    assert!(image.ends_with("pause:3.9"), "{image}");
    c.wait_for("api pods bound", SETTLE, |o| {
        o.pods_bound == 5 && o.settled()
    })
    .await;

    // scale up: the controller adds NodeClaims for pods that no longer fit.
    let before = c.nodeclaims().len();
    c.kubectl_ok(&["scale", "deployment", "web", "--replicas=40"])
        .await;
    let o = c
        .wait_for("scaled pods bound", SETTLE, |o| {
            o.pods_bound == 42 && o.settled()
        })
        .await;
    assert!(
        o.claims_total > before,
        "scaling up should add NodeClaims: {before} -> {}",
        o.claims_total
    );

    // cordon a node.
    let nodes = c.objects("", "nodes");
    let node = nodes[0]["metadata"]["name"]
        .as_str()
        .expect("node name")
        .to_string();
    c.kubectl_ok(&["cordon", &node]).await;
    let unschedulable = c
        .kubectl_ok(&["get", "node", &node, "-o", "jsonpath={.spec.unschedulable}"])
        .await;
    assert_eq!(unschedulable, "true");
    let listed = c.kubectl_ok(&["get", "node", &node]).await;
    assert!(listed.contains("SchedulingDisabled"), "{listed}");

    // delete a pod: its ReplicaSet replaces it and the replacement is scheduled.
    let pods = c.objects("", "pods");
    let victim = pods
        .iter()
        .find(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("web-"))
        })
        .and_then(|p| p["metadata"]["name"].as_str())
        .expect("a web pod")
        .to_string();
    c.kubectl_ok(&["delete", "pod", &victim]).await;
    c.eventually("replacement pod bound", SETTLE, |c| {
        let pods = c.objects("", "pods");
        let web: Vec<&Value> = pods
            .iter()
            .filter(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("web-"))
            })
            .collect();
        web.len() == 40
            && web.iter().all(|p| p["spec"]["nodeName"].is_string())
            && !web.iter().any(|p| p["metadata"]["name"] == victim.as_str())
    })
    .await;

    // wait reads conditions through list+watch.
    c.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        &format!("nodeclaim/{name}"),
        "--timeout=10s",
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_watch_streams_changes() {
    let c = TestCluster::start("", Options::default()).await;
    let kubeconfig = c.kubeconfig().to_path_buf();
    let watcher = tokio::task::spawn_blocking(move || {
        std::process::Command::new(tests::kubectl_path())
            .args(["--kubeconfig"])
            .arg(&kubeconfig)
            .args(["get", "pods", "-w", "--request-timeout=6s"])
            .output()
            .expect("kubectl runs")
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = c
        .kubectl(
            &[
                "run",
                "solo",
                "--image=public.ecr.aws/eks-distro/kubernetes/pause:3.2",
                "--restart=Never",
            ],
            None,
        )
        .await;
    let out = watcher.await.expect("watch thread");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("solo"), "the watch saw the new pod: {text}");
}
