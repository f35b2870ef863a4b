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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upstream_example_nodepools_apply_unchanged_and_resolve_once_substituted() {
    let c = TestCluster::start(
        "",
        Options {
            defaults: false,
            ..Options::default()
        },
    )
    .await;
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/upstream/nodepools");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 15, "{files:?}");
    for f in &files {
        let out = c
            .kubectl(&["apply", "-f", f.to_str().expect("utf-8")], None)
            .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if f.ends_with("windows-custom-userdata.yaml") {
            // This upstream example sets `nodeClassRef.group: karpenter.k8s.aws/v1`, which
            // upstream's own CRD rejects (pattern `^[^/]*$` in
            // pkg/apis/crds/karpenter.sh_nodepools.yaml); a faithful API server refuses it the
            // same way, while the file's EC2NodeClass applies.
            assert!(
                stderr.contains("spec.template.spec.nodeClassRef.group")
                    && stderr.contains("should match '^[^/]*$'"),
                "{stderr}"
            );
            continue;
        }
        assert!(out.status.success(), "{}: {stderr}", f.display());
    }
    let pools = c.kubectl_ok(&["get", "nodepools", "-o", "name"]).await;
    assert!(pools.lines().count() >= 5, "{pools}");
    let classes = c.kubectl_ok(&["get", "ec2nodeclasses", "-o", "name"]).await;
    assert!(classes.lines().count() >= 5, "{classes}");

    // Unsubstituted, `karpenter.sh/discovery: "${CLUSTER_NAME}"` selects no subnet, and the
    // condition says why and how to fix it.
    c.eventually("SubnetsNotFound names the placeholder", SETTLE, |c| {
        let classes = c.objects("karpenter.k8s.aws", "ec2nodeclasses");
        !classes.is_empty()
            && classes.iter().all(|n| {
                let message = condition_message(n, "SubnetsReady", "SubnetsNotFound");
                message.is_some_and(|m| {
                    m.contains("placeholder ${CLUSTER_NAME}, which was not substituted")
                        && m.contains("CLUSTER_NAME=sandbox envsubst")
                })
            })
    })
    .await;

    // Substituted as the examples' readers do (`envsubst`), every node class selecting images
    // by alias resolves, a pinned past release and the Windows families included. Examples
    // share node class names, so each is checked right after it is applied.
    let mut seen = Vec::new();
    for f in &files {
        let manifest = std::fs::read_to_string(f)
            .expect("example")
            .replace("${CLUSTER_NAME}", "sandbox");
        let out = c.kubectl(&["apply", "-f", "-"], Some(&manifest)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let known_refusal = f.ends_with("windows-custom-userdata.yaml");
        assert!(
            out.status.success() || known_refusal,
            "{}: {stderr}",
            f.display()
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(name) = stdout.lines().find_map(|l| {
            let rest = l.strip_prefix("ec2nodeclass.karpenter.k8s.aws/")?;
            rest.split_whitespace().next()
        }) else {
            panic!("{}: no EC2NodeClass applied: {stdout}", f.display());
        };
        let Some(alias) = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("- alias: "))
            .and_then(|a| a.split_whitespace().next())
        else {
            continue; // custom AMIs by id: none exist in the simulated account
        };
        let what = format!("{}: {name} resolves {alias}", f.display());
        c.eventually(&what, SETTLE, |c| {
            c.objects("karpenter.k8s.aws", "ec2nodeclasses")
                .iter()
                .find(|n| n["metadata"]["name"] == name)
                .is_some_and(|n| {
                    tests::condition(n, "AMIsReady").as_deref() == Some("True")
                        && tests::condition(n, "Ready").as_deref() == Some("True")
                        && resolves(alias, &ami_names(n))
                })
        })
        .await;
        seen.push(alias.to_string());
    }
    for alias in [
        "al2023@v20240625",
        "windows2019@latest",
        "windows2022@latest",
    ] {
        assert!(seen.iter().any(|s| s == alias), "{alias} not in {seen:?}");
    }
}

/// The names of the images a node class resolved.
fn ami_names(class: &Value) -> Vec<String> {
    class["status"]["amis"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["name"].as_str().map(String::from))
        .collect()
}

/// Whether `names` are the images the simulated account publishes for `alias`: one per
/// architecture (Windows: amd64 only) of the pinned release or of the latest, `v20260301`.
fn resolves(alias: &str, names: &[String]) -> bool {
    let Some((family, version)) = alias.split_once('@') else {
        return false;
    };
    let version = if version == "latest" {
        "v20260301"
    } else {
        version
    };
    match family.strip_prefix("windows") {
        Some(year) => {
            names.len() == 1
                && names[0].starts_with(&format!("Windows_Server-{year}-English-Core-"))
                && names[0].ends_with("-2026.03.01")
        }
        None => {
            names.len() == 2
                && names.iter().all(|n| {
                    n.starts_with(&format!("amazon-eks-node-{family}-")) && n.ends_with(version)
                })
        }
    }
}

/// The message of a node class's `type_` condition when it is False with `reason`.
fn condition_message<'a>(obj: &'a Value, type_: &str, reason: &str) -> Option<&'a str> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "False" && c["reason"] == reason)
        .and_then(|c| c["message"].as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schema_violations_are_refused_like_kube_apiserver() {
    let c = TestCluster::start(
        "",
        Options {
            defaults: false,
            ..Options::default()
        },
    )
    .await;
    let bad_operator = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: bad}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      - {key: kubernetes.io/arch, operator: Near, values: [amd64]}\n";
    let out = c.kubectl(&["apply", "-f", "-"], Some(bad_operator)).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.template.spec.requirements[0].operator: Unsupported value: \"Near\""),
        "{stderr}"
    );
    let typo = bad_operator
        .replace("operator: Near", "operator: In")
        .replace("spec:\n  template:", "spec:\n  wieght: 5\n  template:");
    let out = c.kubectl(&["apply", "-f", "-"], Some(&typo)).await;
    assert!(
        !out.status.success(),
        "kubectl validates strictly by default"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown field \"spec.wieght\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ok = c
        .kubectl(&["apply", "--validate=false", "-f", "-"], Some(&typo))
        .await;
    assert!(
        ok.status.success(),
        "unknown fields are pruned without strict validation: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let stored = c
        .kubectl_ok(&[
            "get",
            "nodepool",
            "bad",
            "-o",
            "jsonpath={.spec.disruption.consolidationPolicy}",
        ])
        .await;
    assert_eq!(
        stored, "WhenEmptyOrUnderutilized",
        "schema defaults are applied"
    );
}

/// `kubectl explain` reads the schemas from the OpenAPI v3 documents: the Karpenter kinds'
/// fields, descriptions, enums, `--recursive`, and an unknown field's error; built-in kinds too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_explain_describes_karpenter_and_built_in_kinds() {
    let c = TestCluster::start("", Options::default()).await;
    let disruption = c
        .kubectl_ok(&["explain", "nodepools.spec.disruption"])
        .await;
    for needle in [
        "GROUP:      karpenter.sh",
        "KIND:       NodePool",
        "FIELD: disruption <Object>",
        "budgets\t<[]Object>",
        "consolidationPolicy\t<string>",
        "enum: WhenEmpty, WhenEmptyOrUnderutilized",
    ] {
        assert!(
            disruption.contains(needle),
            "missing {needle:?} in:\n{disruption}"
        );
    }
    let alias = c
        .kubectl_ok(&["explain", "ec2nodeclasses.spec.amiSelectorTerms.alias"])
        .await;
    assert!(
        alias.contains("KIND:       EC2NodeClass") && alias.contains("FIELD: alias <string>"),
        "{alias}"
    );
    let recursive = c
        .kubectl_ok(&["explain", "nodeclaims", "--recursive"])
        .await;
    for needle in [
        "metadata\t<ObjectMeta>",
        "labels\t<map[string]string>",
        "nodeClassRef\t<Object>",
        "providerID\t<string>",
    ] {
        assert!(
            recursive.contains(needle),
            "missing {needle:?} in:\n{recursive}"
        );
    }
    let typo = c.kubectl(&["explain", "nodepools.spec.wieght"], None).await;
    assert!(!typo.status.success());
    assert!(
        String::from_utf8_lossy(&typo.stderr).contains("field \"wieght\" does not exist"),
        "{}",
        String::from_utf8_lossy(&typo.stderr)
    );
    let tolerations = c.kubectl_ok(&["explain", "pods.spec.tolerations"]).await;
    for needle in [
        "KIND:       Pod",
        "FIELD: tolerations <[]Toleration>",
        "tolerationSeconds\t<integer>",
    ] {
        assert!(
            tolerations.contains(needle),
            "missing {needle:?} in:\n{tolerations}"
        );
    }
    let strategy = c
        .kubectl_ok(&["explain", "deployments.spec.strategy"])
        .await;
    assert!(
        strategy.contains("GROUP:      apps")
            && strategy.contains("rollingUpdate\t<RollingUpdateDeployment>"),
        "{strategy}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_drain_respects_pod_disruption_budgets() {
    let c = TestCluster::start(
        &deployment("guarded", 2, "250m", "128Mi"),
        Options::default(),
    )
    .await;
    c.wait_for("settled", SETTLE, |o| o.pods_bound == 2 && o.settled())
        .await;
    let pdb = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: guarded}\nspec:\n  minAvailable: 2\n  selector: {matchLabels: {app: guarded}}\n";
    let created = c.kubectl(&["apply", "-f", "-"], Some(pdb)).await;
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    c.eventually("pdb status computed", SETTLE, |c| {
        c.objects("policy", "poddisruptionbudgets")
            .iter()
            .any(|p| p["status"]["currentHealthy"] == 2)
    })
    .await;
    let node = c.objects("", "nodes")[0]["metadata"]["name"]
        .as_str()
        .expect("node")
        .to_string();
    let blocked = c
        .kubectl(
            &["drain", &node, "--ignore-daemonsets", "--timeout=4s"],
            None,
        )
        .await;
    assert!(!blocked.status.success(), "the budget blocks the drain");
    let stderr = String::from_utf8_lossy(&blocked.stderr);
    assert!(
        stderr.contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{stderr}"
    );
    let pdbs = c.kubectl_ok(&["get", "pdb", "guarded"]).await;
    assert!(
        pdbs.contains("MIN AVAILABLE") && pdbs.contains("guarded"),
        "{pdbs}"
    );
    c.kubectl_ok(&["delete", "pdb", "guarded"]).await;
    c.kubectl_ok(&["drain", &node, "--ignore-daemonsets", "--timeout=30s"])
        .await;
    let left: Vec<Value> = c
        .objects("", "pods")
        .into_iter()
        .filter(|p| p["spec"]["nodeName"] == node.as_str())
        .collect();
    assert!(left.is_empty(), "drained: {left:?}");
}

/// The workload controllers and kube-scheduler write what their real counterparts write: a
/// Deployment's revision (so a JSON patch adding an annotation works and `kubectl rollout
/// history` lists revisions), its ReplicaSets' desired and max replicas, and the scheduler's
/// `Scheduled` Event that `kubectl describe pod` shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workload_controllers_and_the_scheduler_annotate_and_record_as_kubernetes_does() {
    let c = TestCluster::start(&deployment("web", 3, "250m", "128Mi"), Options::default()).await;
    c.wait_for("3 pods bound", SETTLE, |o| o.pods_bound == 3 && o.settled())
        .await;
    let get = |c: &TestCluster, path: &str| {
        let deploy = c
            .objects("apps", "deployments")
            .into_iter()
            .find(|d| d["metadata"]["name"] == "web")
            .expect("the deployment");
        deploy.pointer(path).cloned().unwrap_or(Value::Null)
    };
    c.eventually("the deployment has its revision", SETTLE, |c| {
        get(
            c,
            "/metadata/annotations/deployment.kubernetes.io~1revision",
        ) == "1"
    })
    .await;
    // A JSON patch that adds to metadata.annotations needs the map to exist, as on a real
    // cluster, where the revision annotation is always there.
    c.kubectl_ok(&[
        "patch",
        "deployment",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/annotations/team","value":"shop"}]"#,
    ])
    .await;
    assert_eq!(get(&c, "/metadata/annotations/team"), "shop");
    let replicasets = |c: &TestCluster| c.objects("apps", "replicasets");
    let rs = &replicasets(&c)[0];
    let annotation = |o: &Value, k: &str| o["metadata"]["annotations"][k].clone();
    assert_eq!(
        annotation(rs, "deployment.kubernetes.io/desired-replicas"),
        "3"
    );
    assert_eq!(annotation(rs, "deployment.kubernetes.io/max-replicas"), "4");
    assert_eq!(annotation(rs, "deployment.kubernetes.io/revision"), "1");

    c.kubectl_ok(&["scale", "deployment/web", "--replicas=5"])
        .await;
    c.eventually("the ReplicaSet records the new scale", SETTLE, |c| {
        replicasets(c).iter().any(|rs| {
            annotation(rs, "deployment.kubernetes.io/desired-replicas") == "5"
                && annotation(rs, "deployment.kubernetes.io/max-replicas") == "7"
        })
    })
    .await;
    c.kubectl_ok(&[
        "set",
        "image",
        "deployment/web",
        "app=public.ecr.aws/eks-distro/kubernetes/pause:3.9",
    ])
    .await;
    c.eventually("a second revision", SETTLE, |c| {
        get(
            c,
            "/metadata/annotations/deployment.kubernetes.io~1revision",
        ) == "2"
    })
    .await;
    let history = c
        .kubectl_ok(&["rollout", "history", "deployment/web"])
        .await;
    assert!(
        history.lines().any(|l| l.trim_start().starts_with('1'))
            && history.lines().any(|l| l.trim_start().starts_with('2')),
        "{history}"
    );

    let pod = c
        .objects("", "pods")
        .into_iter()
        .find(|p| p["spec"]["nodeName"].is_string())
        .expect("a bound pod");
    let name = pod["metadata"]["name"].as_str().expect("name").to_string();
    let scheduled = c.events(&name, "Scheduled");
    assert_eq!(scheduled.len(), 1, "{scheduled:?}");
    assert_eq!(scheduled[0]["source"]["component"], "default-scheduler");
    let described = c.kubectl_ok(&["describe", "pod", &name]).await;
    assert!(
        described.contains("Scheduled") && described.contains("default-scheduler"),
        "{described}"
    );
}

/// `kubectl create namespace|secret|configmap` go through client-go's typed client, which
/// sends the object as protobuf (`application/vnd.kubernetes.protobuf`), as kube-apiserver
/// accepts (and `kubectl delete namespace` its DeleteOptions). The sandbox's own unit tests
/// cover the 415 for a kind it does not decode from protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_create_sends_protobuf_and_the_sandbox_reads_it() {
    let c = TestCluster::start(
        "",
        Options {
            controller: false,
            ..Options::default()
        },
    )
    .await;
    c.kubectl_ok(&["create", "namespace", "team-a"]).await;
    c.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "db",
        "-n",
        "team-a",
        "--from-literal=password=s3cret",
    ])
    .await;
    c.kubectl_ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "team-a",
        "--from-literal=mode=fast",
    ])
    .await;
    let secret: serde_json::Value = serde_json::from_str(
        &c.kubectl_ok(&["get", "secret", "db", "-n", "team-a", "-o", "json"])
            .await,
    )
    .expect("JSON");
    assert_eq!(secret["data"]["password"], "czNjcmV0", "base64 of s3cret");
    assert_eq!(secret["type"], "Opaque");
    let mode = c
        .kubectl_ok(&[
            "get",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.data.mode}",
        ])
        .await;
    assert_eq!(mode, "fast");
    c.kubectl_ok(&["delete", "namespace", "team-a"]).await;
}
