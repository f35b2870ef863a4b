//! The Helm charts in `charts/`: `helm lint` passes, `charts/karpenter-crd`'s templates (and
//! `charts/karpenter/crds/`) are byte-for-byte `deploy/crds/`, the default render agrees with
//! `deploy/` (RBAC rules, the Deployment's container), every value set renders what it should
//! (IRSA, replicas and the PDB, feature gates, the ServiceMonitor), every environment variable
//! the chart can render is one the controller reads, and the rendered objects apply to the
//! sandbox with real kubectl (and pass `helm upgrade --install --dry-run=server` against it);
//! and `helm install`, `helm upgrade` and `helm uninstall` run against the sandbox (Helm stores
//! each release revision as a Secret written in protobuf, which the sandbox decodes).
//!
//! `helm` is `$HELM` or `helm` on PATH; `scripts/test.sh` installs it, and these tests fail
//! (never skip) without it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;
use controller::cloudprovider::build::CloudOptions;
use controller::runtime::ControllerOptions;
use controller::runtime::feature_gates::{FeatureGate, FeatureGates};
use controller::runtime::options::RunOptions;
use karpenter::workload::parse_yaml;
use serde_json::{Value, json};
use tests::{Options, TestCluster};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart(name: &str) -> PathBuf {
    root().join("charts").join(name)
}

/// Where `helm` is: `$HELM`, else `helm` on PATH.
fn helm_path() -> PathBuf {
    std::env::var_os("HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("helm"))
}

/// Run helm; its output, failing the test when helm cannot be run at all.
fn helm(args: &[&str]) -> std::process::Output {
    Command::new(helm_path())
        .args(args)
        .output()
        .expect("helm runs (scripts/test.sh installs it; or set HELM)")
}

/// `helm template karpenter charts/karpenter -n karpenter` with `args` (`--set ...`), parsed.
fn render(args: &[&str]) -> Vec<Value> {
    let path = chart("karpenter");
    let mut all = vec![
        "template",
        "karpenter",
        path.to_str().expect("UTF-8 path"),
        "--namespace",
        "karpenter",
    ];
    all.extend_from_slice(args);
    let out = helm(&all);
    assert!(
        out.status.success(),
        "helm {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    parse_yaml(Path::new("helm template"), &text)
        .expect("helm template's output parses")
        .into_iter()
        .map(|m| m.object)
        .collect()
}

/// [`render`] with the cluster name set (the chart requires it).
fn render_with(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--set", "settings.clusterName=my-cluster"];
    all.extend_from_slice(args);
    render(&all)
}

fn kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(objects: &'a [Value], k: &str) -> &'a Value {
    let found = kind(objects, k);
    assert_eq!(found.len(), 1, "expected one {k}, got {found:#?}");
    found[0]
}

fn container(objects: &[Value]) -> &Value {
    &one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn env_value(objects: &[Value], name: &str) -> Option<String> {
    container(objects)["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(String::from))
}

fn env_names(c: &Value) -> Vec<String> {
    c["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Every environment variable `karpenter run` reads (clap's `env`).
fn read_by_the_controller() -> BTreeSet<String> {
    let cmd = RunOptions::augment_args(ControllerOptions::augment_args(
        CloudOptions::augment_args(clap::Command::new("karpenter")),
    ));
    cmd.get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn both_charts_lint_and_carry_the_workspace_version() {
    for (name, extra) in [
        (
            "karpenter",
            &["--set", "settings.clusterName=my-cluster"][..],
        ),
        ("karpenter-crd", &[][..]),
    ] {
        let path = chart(name);
        let mut args = vec!["lint", "--strict", path.to_str().expect("UTF-8 path")];
        args.extend_from_slice(extra);
        let out = helm(&args);
        assert!(
            out.status.success(),
            "helm lint {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let meta = std::fs::read_to_string(path.join("Chart.yaml")).expect("Chart.yaml");
        for key in ["version", "appVersion"] {
            assert!(
                meta.lines()
                    .any(|l| l == format!("{key}: {}", env!("CARGO_PKG_VERSION"))),
                "{name}/Chart.yaml's {key} is not {}",
                env!("CARGO_PKG_VERSION")
            );
        }
    }
}

#[test]
fn the_charts_crds_are_byte_copies_of_deploy_crds() {
    let deploy = root().join("deploy/crds");
    let files = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    let expected = files(&deploy);
    assert_eq!(expected.len(), 4, "{expected:?}");
    let mut stale = Vec::new();
    for dir in [
        chart("karpenter-crd").join("templates"),
        chart("karpenter").join("crds"),
    ] {
        assert_eq!(files(&dir), expected, "{} holds other files", dir.display());
        for file in &expected {
            let want = std::fs::read(deploy.join(file)).expect("deploy/crds file");
            if std::fs::read(dir.join(file)).ok().as_deref() != Some(&want[..]) {
                stale.push(dir.join(file).display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "copy deploy/crds/*.yaml over them (or run crdgen into both directories):\n  {}",
        stale.join("\n  ")
    );
    // And the CRD chart renders them unchanged, one CRD per file.
    let path = chart("karpenter-crd");
    let out = helm(&["template", "karpenter-crd", path.to_str().expect("UTF-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = parse_yaml(
        Path::new("crd chart"),
        &String::from_utf8_lossy(&out.stdout),
    )
    .expect("parses");
    let names: BTreeSet<String> = rendered
        .iter()
        .map(|m| {
            assert_eq!(m.object["kind"], "CustomResourceDefinition");
            m.object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let want: BTreeSet<String> = crds::generate::manifests()
        .into_iter()
        .map(|(_, yaml)| {
            let docs = parse_yaml(Path::new("crdgen"), &yaml).expect("crdgen parses");
            docs[0].object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(names, want);
}

#[test]
fn the_default_render_agrees_with_deploy() {
    let deploy = crate::deploy::kustomized();
    let chart = render_with(&[]);
    // RBAC: the same rules, bound to the same ServiceAccount.
    for k in ["ClusterRole", "Role"] {
        assert_eq!(
            one(&chart, k)["rules"],
            crate::deploy::find(&deploy, k, "karpenter")["rules"],
            "the chart's {k} differs from deploy/'s"
        );
    }
    for k in ["ClusterRoleBinding", "RoleBinding"] {
        let ours = one(&chart, k);
        let theirs = crate::deploy::find(&deploy, k, "karpenter");
        assert_eq!(ours["roleRef"], theirs["roleRef"], "{k}");
        assert_eq!(ours["subjects"], theirs["subjects"], "{k}");
    }
    assert_eq!(
        one(&chart, "ServiceAccount")["metadata"]["name"],
        "karpenter"
    );
    // The Deployment: the same container (the chart adds settings' variables, each one the
    // controller reads) and the same pod-level choices.
    let theirs_deploy = crate::deploy::find(&deploy, "Deployment", "karpenter");
    let ours_deploy = one(&chart, "Deployment");
    let theirs = &theirs_deploy["spec"]["template"]["spec"]["containers"][0];
    let ours = container(&chart);
    for field in [
        "name",
        "image",
        "imagePullPolicy",
        "args",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
    ] {
        assert_eq!(ours[field], theirs[field], "container {field}");
    }
    let (ours_env, theirs_env) = (env_names(ours), env_names(theirs));
    let missing: Vec<&String> = theirs_env
        .iter()
        .filter(|e| !ours_env.contains(e))
        .collect();
    assert!(missing.is_empty(), "the chart does not set {missing:?}");
    for name in &theirs_env {
        let find = |c: &Value| {
            c["env"]
                .as_array()
                .and_then(|a| a.iter().find(|e| e["name"] == name.as_str()))
                .cloned()
        };
        if name != "CLUSTER_NAME" {
            assert_eq!(find(ours), find(theirs), "env {name}");
        }
    }
    assert_eq!(
        env_value(&chart, "CLUSTER_NAME").as_deref(),
        Some("my-cluster")
    );
    let known = read_by_the_controller();
    let unknown: Vec<&String> = ours_env.iter().filter(|e| !known.contains(*e)).collect();
    assert!(
        unknown.is_empty(),
        "not read by the controller: {unknown:?}"
    );
    for field in ["replicas", "revisionHistoryLimit", "selector"] {
        assert_eq!(
            ours_deploy["spec"][field], theirs_deploy["spec"][field],
            "{field}"
        );
    }
    assert_eq!(
        ours_deploy["spec"]["strategy"]["rollingUpdate"],
        theirs_deploy["spec"]["strategy"]["rollingUpdate"]
    );
    let (ours_pod, theirs_pod) = (
        &ours_deploy["spec"]["template"]["spec"],
        &theirs_deploy["spec"]["template"]["spec"],
    );
    for field in [
        "serviceAccountName",
        "priorityClassName",
        "dnsPolicy",
        "securityContext",
        "tolerations",
    ] {
        assert_eq!(ours_pod[field], theirs_pod[field], "pod {field}");
    }
    assert_eq!(
        ours_pod["affinity"]["nodeAffinity"],
        theirs_pod["affinity"]["nodeAffinity"]
    );
    let selector = json!({"matchLabels": {
        "app.kubernetes.io/name": "karpenter",
        "app.kubernetes.io/instance": "karpenter",
    }});
    let anti = &ours_pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        [0];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(anti["labelSelector"], selector);
    let spread = &ours_pod["topologySpreadConstraints"][0];
    assert_eq!(spread["labelSelector"], selector);
    assert_eq!(
        spread["whenUnsatisfiable"],
        theirs_pod["topologySpreadConstraints"][0]["whenUnsatisfiable"]
    );
    // Service and PodDisruptionBudget.
    let service = one(&chart, "Service");
    let theirs_service = crate::deploy::find(&deploy, "Service", "karpenter");
    assert_eq!(service["spec"]["ports"], theirs_service["spec"]["ports"]);
    assert_eq!(
        service["spec"]["selector"],
        theirs_service["spec"]["selector"]
    );
    let pdb = one(&chart, "PodDisruptionBudget");
    assert_eq!(
        pdb["spec"],
        crate::deploy::find(&deploy, "PodDisruptionBudget", "karpenter")["spec"]
    );
    // Upstream's labels on every object.
    for o in &chart {
        let labels = &o["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/name"], "karpenter", "{o}");
        assert_eq!(labels["app.kubernetes.io/instance"], "karpenter", "{o}");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{o}");
        assert_eq!(
            labels["helm.sh/chart"],
            format!("karpenter-{}", env!("CARGO_PKG_VERSION"))
        );
    }
    // No ServiceMonitor unless asked for.
    assert!(kind(&chart, "ServiceMonitor").is_empty());
}

#[test]
fn the_chart_refuses_to_render_without_a_cluster_name() {
    let path = chart("karpenter");
    let out = helm(&["template", "karpenter", path.to_str().expect("UTF-8")]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("settings.clusterName is required"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_upstream_setting_renders_only_variables_the_controller_reads() {
    let objects = render(&[
        "--set",
        "settings.clusterName=prod",
        "--set",
        "settings.clusterEndpoint=https://example.eks.amazonaws.com",
        "--set",
        "settings.clusterCABundle=Y2E=",
        "--set",
        "settings.isolatedVPC=true",
        "--set",
        "settings.eksControlPlane=true",
        "--set",
        "settings.interruptionQueue=prod",
        "--set",
        "settings.reservedENIs=1",
        "--set",
        "settings.vmMemoryOverheadPercent=0.05",
        "--set",
        "settings.batchMaxDuration=20s",
        "--set",
        "settings.batchIdleDuration=2s",
        "--set",
        "settings.minValuesPolicy=BestEffort",
        "--set",
        "settings.preferencePolicy=Ignore",
        "--set",
        "settings.ignoreDRARequests=false",
        "--set",
        "settings.enableZonalShift=true",
        "--set",
        "settings.disableClusterStateObservability=true",
        "--set",
        "settings.disableDryRun=true",
        "--set",
        "settings.amiRefreshInterval=5m",
        "--set",
        "settings.subnetRefreshInterval=5m",
        "--set",
        "settings.awsFeatureGates.nodeClassCEL=true",
        "--set",
        "webhook.enabled=true",
        "--set",
        "logLevel=debug",
        "--set",
        "controller.env[0].name=AWS_REGION",
        "--set",
        "controller.env[0].value=eu-west-1",
    ]);
    let known = read_by_the_controller();
    let names = env_names(container(&objects));
    let unknown: Vec<&String> = names
        .iter()
        .filter(|e| !known.contains(*e) && !e.starts_with("AWS_"))
        .collect();
    assert!(
        unknown.is_empty(),
        "not read by the controller: {unknown:?}"
    );
    for (var, value) in [
        ("CLUSTER_NAME", "prod"),
        ("CLUSTER_ENDPOINT", "https://example.eks.amazonaws.com"),
        ("CLUSTER_CA_BUNDLE", "Y2E="),
        ("ISOLATED_VPC", "true"),
        ("INTERRUPTION_QUEUE", "prod"),
        ("RESERVED_ENIS", "1"),
        ("VM_MEMORY_OVERHEAD_PERCENT", "0.05"),
        ("BATCH_MAX_DURATION", "20s"),
        ("BATCH_IDLE_DURATION", "2s"),
        ("MIN_VALUES_POLICY", "BestEffort"),
        ("LOG_LEVEL", "debug"),
        ("AWS_REGION", "eu-west-1"),
    ] {
        assert_eq!(env_value(&objects, var).as_deref(), Some(value), "{var}");
    }
    // The controller accepts what the chart renders (each variable given as its flag).
    let cmd = RunOptions::augment_args(ControllerOptions::augment_args(
        CloudOptions::augment_args(clap::Command::new("karpenter")),
    ));
    let flag = |var: &str| {
        cmd.get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == var))
            .and_then(|a| a.get_long())
            .map(String::from)
    };
    let mut args = vec!["karpenter".to_string()];
    for e in container(&objects)["env"].as_array().expect("env") {
        let (Some(name), Some(value)) = (e["name"].as_str(), e["value"].as_str()) else {
            continue;
        };
        if let Some(long) = flag(name) {
            args.push(format!("--{long}={value}"));
        }
    }
    cmd.clone()
        .try_get_matches_from(&args)
        .unwrap_or_else(|e| panic!("the controller refuses {args:?}: {e}"));
    // Values the controller does not read change nothing else: the webhook is ignored.
    let plain = render(&[
        "--set",
        "settings.clusterName=prod",
        "--set",
        "webhook.enabled=true",
    ]);
    let without = render(&["--set", "settings.clusterName=prod"]);
    assert_eq!(plain, without);
}

#[test]
fn irsa_annotates_the_service_account_and_an_existing_one_can_be_used() {
    let arn = "arn:aws:iam::111122223333:role/KarpenterController";
    let objects = render_with(&[
        "--set",
        &format!("serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={arn}"),
        "--set",
        "additionalAnnotations.team=platform",
    ]);
    let sa = one(&objects, "ServiceAccount");
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        arn
    );
    assert_eq!(sa["metadata"]["annotations"]["team"], "platform");
    assert_eq!(
        one(&objects, "Deployment")["metadata"]["annotations"]["team"],
        "platform"
    );
    // An existing ServiceAccount (e.g. made by eksctl for Pod Identity): none rendered, and the
    // pods and bindings use it.
    let objects = render_with(&[
        "--set",
        "serviceAccount.create=false",
        "--set",
        "serviceAccount.name=karpenter-existing",
    ]);
    assert!(kind(&objects, "ServiceAccount").is_empty());
    assert_eq!(
        one(&objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"],
        "karpenter-existing"
    );
    for k in ["ClusterRoleBinding", "RoleBinding"] {
        assert_eq!(
            one(&objects, k)["subjects"][0]["name"],
            "karpenter-existing"
        );
    }
}

#[test]
fn replicas_and_the_pod_disruption_budget() {
    let objects = render_with(&[
        "--set",
        "replicas=3",
        "--set",
        "podDisruptionBudget.maxUnavailable=2",
        "--set",
        "podDisruptionBudget.name=karpenter-pdb",
        "--set",
        "podLabels.team=platform",
        "--set",
        "podAnnotations.note=hi",
        "--set",
        "priorityClassName=high",
        "--set",
        "hostNetwork=true",
        "--set",
        "dnsPolicy=Default",
        "--set",
        "nodeSelector.role=system",
        "--set",
        "imagePullSecrets[0].name=registry",
        "--set",
        "controller.image.tag=9.9.9",
        "--set",
        "controller.image.digest=sha256:abc",
        "--set",
        "additionalLabels.team=platform",
    ]);
    let deploy = one(&objects, "Deployment");
    assert_eq!(deploy["spec"]["replicas"], 3);
    let pdb = one(&objects, "PodDisruptionBudget");
    assert_eq!(pdb["metadata"]["name"], "karpenter-pdb");
    assert_eq!(pdb["spec"]["maxUnavailable"], 2);
    assert_eq!(pdb["spec"]["selector"], deploy["spec"]["selector"]);
    let pod = &deploy["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["team"], "platform");
    assert_eq!(pod["metadata"]["annotations"]["note"], "hi");
    assert_eq!(pod["spec"]["priorityClassName"], "high");
    assert_eq!(pod["spec"]["hostNetwork"], true);
    assert_eq!(pod["spec"]["dnsPolicy"], "Default");
    assert_eq!(pod["spec"]["nodeSelector"]["role"], "system");
    assert_eq!(
        pod["spec"]["imagePullSecrets"],
        json!([{"name": "registry"}])
    );
    assert_eq!(
        container(&objects)["image"],
        "ghcr.io/karpenter-rs/karpenter:9.9.9@sha256:abc"
    );
    for o in &objects {
        assert_eq!(o["metadata"]["labels"]["team"], "platform", "{o}");
    }
}

#[test]
fn feature_gates_become_feature_gates_the_controller_parses() {
    let gates = |args: &[&str]| -> FeatureGates {
        let objects = render_with(args);
        env_value(&objects, "FEATURE_GATES")
            .expect("FEATURE_GATES is always set")
            .parse()
            .expect("the controller parses FEATURE_GATES")
    };
    let defaults = gates(&[]);
    for gate in FeatureGate::ALL {
        assert_eq!(defaults.enabled(gate), gate.default_enabled(), "{gate}");
    }
    let on = gates(&[
        "--set",
        "settings.featureGates.nodeRepair=true",
        "--set",
        "settings.featureGates.nodeOverlay=true",
        "--set",
        "settings.featureGates.spotToSpotConsolidation=true",
        "--set",
        "settings.featureGates.staticCapacity=true",
        "--set",
        "settings.featureGates.capacityBuffer=true",
        "--set",
        "settings.featureGates.reservedCapacity=false",
    ]);
    for gate in FeatureGate::ALL {
        assert_eq!(
            on.enabled(gate),
            gate != FeatureGate::ReservedCapacity,
            "{gate}"
        );
    }
    // Every gate is named, as upstream's chart writes them.
    let objects = render_with(&[]);
    let text = env_value(&objects, "FEATURE_GATES").expect("set");
    for gate in FeatureGate::ALL {
        assert!(text.contains(&format!("{gate}=")), "{text}");
    }
}

#[test]
fn service_monitor_when_enabled_and_the_cluster_serves_it() {
    let args = [
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "serviceMonitor.additionalLabels.release=prometheus",
        "--set",
        "serviceMonitor.endpointConfig.interval=15s",
    ];
    // helm template knows no cluster: without monitoring.coreos.com/v1 nothing is rendered.
    assert!(kind(&render_with(&args), "ServiceMonitor").is_empty());
    let mut with_api = args.to_vec();
    with_api.extend_from_slice(&["--api-versions", "monitoring.coreos.com/v1"]);
    let objects = render_with(&with_api);
    let monitor = one(&objects, "ServiceMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        one(&objects, "Service")["spec"]["selector"]
    );
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        json!(["karpenter"])
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "http-metrics");
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["interval"], "15s");
}

/// The default render, applied with real kubectl to the sandbox: the API server takes every
/// object, and the Deployment's env and the ClusterRole read back from it are the chart's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_chart_applies_to_the_sandbox() {
    let c = bare_sandbox().await;
    let path = chart("karpenter");
    // Helm itself talks to the sandbox: discovery, the release history (a Secret list) and a
    // server-side dry run of every object (the real install is
    // `helm_installs_upgrades_and_uninstalls_the_chart_on_the_sandbox`).
    let kubeconfig = c.kubeconfig().to_str().expect("UTF-8").to_string();
    // (helm blocks this worker thread; the cluster serves from the others.)
    let dry_run = tokio::task::block_in_place(|| {
        helm(&[
            "upgrade",
            "--install",
            "karpenter",
            path.to_str().expect("UTF-8"),
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            "default",
            "--dry-run=server",
            "--set",
            "settings.clusterName=sandbox",
        ])
    });
    assert!(
        dry_run.status.success(),
        "helm --dry-run=server: {}",
        String::from_utf8_lossy(&dry_run.stderr)
    );
    assert!(String::from_utf8_lossy(&dry_run.stdout).contains("kind: Deployment"));
    let out = helm(&[
        "template",
        "karpenter",
        path.to_str().expect("UTF-8"),
        "--namespace",
        "karpenter",
        "--include-crds",
        "--set",
        "settings.clusterName=sandbox",
        "--set",
        "settings.featureGates.nodeRepair=true",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The namespace as a manifest, applied with the chart.
    let rendered = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: karpenter\n---\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let applied = c.kubectl(&["apply", "-f", "-"], Some(&rendered)).await;
    assert!(
        applied.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let deployment: Value = serde_json::from_str(
        &c.kubectl_ok(&[
            "get",
            "-n",
            "karpenter",
            "deployment/karpenter",
            "-o",
            "json",
        ])
        .await,
    )
    .expect("JSON");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let find = |n: &str| {
        env.as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == n))
            .and_then(|e| e["value"].as_str())
            .map(String::from)
    };
    assert_eq!(find("CLUSTER_NAME").as_deref(), Some("sandbox"));
    assert!(
        find("FEATURE_GATES").is_some_and(|g| g.contains("NodeRepair=true")),
        "{env}"
    );
    let role: Value = serde_json::from_str(
        &c.kubectl_ok(&["get", "clusterrole/karpenter", "-o", "json"])
            .await,
    )
    .expect("JSON");
    let deploy = crate::deploy::kustomized();
    let want = &crate::deploy::find(&deploy, "ClusterRole", "karpenter")["rules"];
    assert_eq!(&role["rules"], want);
    c.kubectl_ok(&[
        "get",
        "-n",
        "karpenter",
        "serviceaccount/karpenter",
        "role/karpenter",
        "rolebinding/karpenter",
        "service/karpenter",
        "pdb/karpenter",
    ])
    .await;
    c.kubectl_ok(&[
        "get",
        "crd",
        "nodepools.karpenter.sh",
        "nodeoverlays.karpenter.sh",
    ])
    .await;
}

/// A sandbox with no controller and no default NodePool or node class: only the chart's
/// objects are in it.
async fn bare_sandbox() -> TestCluster {
    TestCluster::start(
        "",
        Options {
            controller: false,
            defaults: false,
            ..Options::default()
        },
    )
    .await
}

/// `kubectl get -o json` of `what` in the sandbox, parsed.
async fn get_json(c: &TestCluster, what: &[&str]) -> Value {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend(["-o", "json"]);
    serde_json::from_str(&c.kubectl_ok(&args).await).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_and_uninstalls_the_chart_on_the_sandbox() {
    let c = bare_sandbox().await;
    let path = chart("karpenter");
    let path = path.to_str().expect("UTF-8").to_string();
    let kubeconfig = c.kubeconfig().to_str().expect("UTF-8").to_string();
    let run = |args: Vec<&str>| {
        let mut all = args;
        all.extend(["--kubeconfig", &kubeconfig, "--namespace", "kube-system"]);
        // (helm blocks this worker thread; the cluster serves from the others.)
        let out = tokio::task::block_in_place(|| helm(&all));
        assert!(
            out.status.success(),
            "helm {all:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let installed = run(vec![
        "install",
        "karpenter",
        &path,
        "--set",
        "settings.clusterName=sandbox",
    ]);
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    // What upstream's chart creates, found by its name label.
    let listed = c
        .kubectl_ok(&[
            "get",
            "deploy,sa,clusterrole,pdb",
            "-A",
            "-l",
            "app.kubernetes.io/name=karpenter",
            "-o",
            "name",
        ])
        .await;
    for want in [
        "deployment.apps/karpenter",
        "serviceaccount/karpenter",
        "clusterrole.rbac.authorization.k8s.io/karpenter",
        "poddisruptionbudget.policy/karpenter",
    ] {
        assert!(listed.lines().any(|l| l == want), "{want} in {listed}");
    }
    // The release is stored as Helm stores it: a Secret per revision.
    let release = get_json(
        &c,
        &[
            "-n",
            "kube-system",
            "secret/sh.helm.release.v1.karpenter.v1",
        ],
    )
    .await;
    assert_eq!(release["type"], "helm.sh/release.v1");
    assert_eq!(release["metadata"]["labels"]["owner"], "helm");

    let upgraded = run(vec![
        "upgrade",
        "karpenter",
        &path,
        "--set",
        "settings.clusterName=sandbox",
        "--set",
        "replicas=3",
        "--set",
        "settings.featureGates.nodeRepair=true",
    ]);
    assert!(upgraded.contains("REVISION: 2"), "{upgraded}");
    let deployment = get_json(&c, &["-n", "kube-system", "deployment/karpenter"]).await;
    assert_eq!(deployment["spec"]["replicas"], 3);
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .is_some_and(|a| a.iter().any(|e| e["name"] == "FEATURE_GATES"
                && e["value"]
                    .as_str()
                    .is_some_and(|v| v.contains("NodeRepair=true")))),
        "{env}"
    );
    let history = run(vec!["history", "karpenter"]);
    assert!(
        history.contains("superseded") && history.contains("deployed"),
        "{history}"
    );

    run(vec!["uninstall", "karpenter"]);
    let left = c
        .kubectl_ok(&[
            "get",
            "deploy,sa,clusterrole,pdb,secrets",
            "-A",
            "-l",
            "app.kubernetes.io/name=karpenter",
            "-o",
            "name",
        ])
        .await;
    assert!(left.trim().is_empty(), "left after uninstall: {left}");
    let releases = c
        .kubectl_ok(&[
            "get",
            "secrets",
            "-n",
            "kube-system",
            "-l",
            "owner=helm",
            "-o",
            "name",
        ])
        .await;
    assert!(
        releases.trim().is_empty(),
        "release Secrets left: {releases}"
    );
}
