//! The install manifests in `deploy/` (and its CloudFormation template for the interruption
//! queue, see `deploy/cloudformation.rs`): real `kubectl apply -k deploy/` against the sandbox
//! (twice: the second changes nothing), the CRD copies equal crdgen's output, the Deployment
//! only sets environment variables the controller reads, and the RBAC rules cover every request
//! the controller makes, started as `karpenter run` starts it (leader election included), while
//! it provisions, registers, upgrades drifted nodes, drains and collects garbage, as the sandbox's audit log records them (and every rule the
//! scenario leaves unused is one of the few justified below).

#[path = "deploy/cloudformation.rs"]
mod cloudformation;
#[path = "deploy/rbac.rs"]
mod rbac;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use controller::cloudprovider::build::CloudOptions;
use controller::operator::{Operator, Stopped, start_operator};
use controller::runtime::leader::{self, LeaseConfig};
use controller::runtime::options::RunOptions;
use controller::runtime::{ControllerOptions, Settings, USER_AGENT};
use crds::{EC2NodeClass, NodeClaim};
use karpenter::workload::parse_yaml;
use karpenter_core::clock::SystemClock;
use rbac::Authorizer;
use sandbox::audit::RequestAttributes;
use serde_json::Value;
use tests::{Options, TestCluster, condition, deployment, kubectl_path};

const SETTLE: Duration = Duration::from_secs(120);
const RBAC: &str = "rbac.authorization.k8s.io";

/// Permissions in `deploy/` the sandbox scenario does not exercise, each with the reason it is
/// still needed (the same reasons are comments in the YAML). Any other unused permission fails
/// the test: a rule nobody uses is privilege nobody needs.
const JUSTIFIED_UNUSED: &[(&str, &str)] = &[
    (
        "get karpenter.sh nodeclaims",
        "the serial upgrade re-reads a NodeClaim (and looks for an existing replacement) before a step",
    ),
    (
        "watch karpenter.sh nodeoverlays",
        "with FEATURE_GATES=NodeOverlay=true the caches watch NodeOverlays (the scenario runs with the gate off, which only lists them)",
    ),
    (
        "patch karpenter.sh nodeoverlays/status",
        "with FEATURE_GATES=NodeOverlay=true the nodeoverlay controller writes ValidationSucceeded and Ready",
    ),
    (
        "patch core pods/status",
        "plan = binding (NOMINATE_PLANNED_PODS, on by default) nominates pods when their node registers",
    ),
];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `kubectl kustomize deploy/` (no cluster needed), parsed.
pub(crate) fn kustomized() -> Vec<Value> {
    let out = Command::new(kubectl_path())
        .arg("kustomize")
        .arg(deploy_dir())
        .output()
        .expect("kubectl runs (install it or set KUBECTL)");
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    parse_yaml(Path::new("deploy/"), &text)
        .expect("kustomize output parses")
        .into_iter()
        .map(|m| m.object)
        .collect()
}

pub(crate) fn find<'a>(objects: &'a [Value], kind: &str, n: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && name(o) == n)
        .unwrap_or_else(|| panic!("deploy/ has no {kind} {n}"))
}

#[test]
fn the_crd_copies_in_deploy_equal_crdgen_output() {
    let mut stale = Vec::new();
    for (file, yaml) in crds::generate::manifests() {
        let path = deploy_dir().join("crds").join(file);
        match std::fs::read_to_string(&path) {
            Ok(text) if text == yaml => {}
            Ok(_) => stale.push(format!("{} differs", path.display())),
            Err(e) => stale.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "run `cargo run -p crds --bin crdgen -- deploy/crds`:\n  {}",
        stale.join("\n  ")
    );
}

#[test]
fn the_deployment_sets_only_what_the_controller_reads_and_runs_this_version() {
    let objects = kustomized();
    let deploy = find(&objects, "Deployment", "karpenter");
    let spec = &deploy["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    assert_eq!(
        container["image"],
        format!(
            "ghcr.io/karpenter-rs/karpenter:{}",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(container["args"], serde_json::json!(["run"]));
    // Every environment variable is one `karpenter run` reads (clap's `env`), or the AWS SDK's.
    let cmd = RunOptions::augment_args(ControllerOptions::augment_args(
        CloudOptions::augment_args(clap::Command::new("karpenter")),
    ));
    let known: BTreeSet<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    let env: Vec<String> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(name_of_env)
        .collect();
    assert!(env.contains(&"CLUSTER_NAME".to_string()));
    let unknown: Vec<&String> = env
        .iter()
        .filter(|e| !known.contains(*e) && !e.starts_with("AWS_"))
        .collect();
    assert!(
        unknown.is_empty(),
        "not read by the controller: {unknown:?}"
    );
    // The probes and the metrics Service use the ports the controller listens on by default.
    let defaults = RunOptions::augment_args(clap::Command::new("run"))
        .try_get_matches_from(["run"])
        .expect("defaults parse");
    let metrics = defaults
        .get_one::<u16>("metrics_port")
        .copied()
        .expect("metrics port");
    let health = defaults
        .get_one::<u16>("health_probe_port")
        .copied()
        .expect("health port");
    let port = |n: &str| {
        container["ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == n))
            .and_then(|p| p["containerPort"].as_u64())
    };
    assert_eq!(port("http-metrics"), Some(u64::from(metrics)));
    assert_eq!(port("http"), Some(u64::from(health)));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let service = find(&objects, "Service", "karpenter");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http-metrics");
    assert_eq!(spec["serviceAccountName"], "karpenter");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
}

fn name_of_env(e: &Value) -> String {
    e["name"].as_str().unwrap_or_default().to_string()
}

#[test]
fn the_dockerfile_builds_the_aws_binary_with_the_workspace_toolchain() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).expect("Dockerfile");
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let rust_version = workspace
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"'))
        .expect("workspace rust-version");
    assert!(
        dockerfile.contains(&format!(
            "FROM docker.io/library/rust:{rust_version}-alpine"
        )),
        "the builder image is Rust {rust_version}"
    );
    let build = dockerfile
        .lines()
        .find(|l| l.contains("cargo build"))
        .expect("a cargo build step");
    for flag in ["--release", "--locked", "--features aws", "--bin karpenter"] {
        assert!(build.contains(flag), "{build:?} lacks {flag}");
    }
    assert!(dockerfile.contains("FROM scratch"));
    assert!(dockerfile.contains("USER 65532:65532"));
}

/// The requests the controller's client made, per the sandbox audit log.
fn controller_calls(c: &TestCluster) -> BTreeSet<RequestAttributes> {
    c.cluster
        .sandbox
        .audit_log()
        .accesses()
        .remove(USER_AGENT)
        .unwrap_or_default()
}

fn authorizer(c: &TestCluster) -> Authorizer {
    Authorizer::for_service_account(
        &c.objects(RBAC, "clusterroles"),
        &c.objects(RBAC, "clusterrolebindings"),
        &c.objects(RBAC, "roles"),
        &c.objects(RBAC, "rolebindings"),
        "karpenter",
        "karpenter",
    )
    .expect("deploy/'s bindings refer to its roles")
}

async fn apply_k(c: &TestCluster) -> String {
    let dir = deploy_dir();
    let dir = dir.to_str().expect("UTF-8 path");
    c.kubectl_ok(&["apply", "-k", dir]).await
}

/// Start the controller as `karpenter run` does (rate-limited client, caches, leader election
/// through the Lease in the `karpenter` namespace, controllers once it leads) and wait until it
/// leads.
async fn run_operator(c: &TestCluster) -> Operator {
    let config = c.cluster.sandbox.client_config();
    let lease_client = controller::runtime::client(config.clone()).expect("client");
    let client = controller::runtime::rate_limited_client(config, 200, 300).expect("client");
    client.apiserver_version().await.expect("GET /version");
    let lease = LeaseConfig::new(
        "karpenter-leader-election",
        "karpenter",
        &leader::default_identity(),
    );
    let op = start_operator(
        client,
        Arc::clone(&c.cluster.cloud),
        Arc::new(SystemClock),
        // As `karpenter run` sets it: the disruption history lives beside the Lease.
        Settings {
            system_namespace: "karpenter".into(),
            ..c.cluster.settings.clone()
        },
        Some(leader::Elector::new(lease_client, lease)),
    );
    let mut leading = op.leading();
    tokio::time::timeout(SETTLE, leading.wait_for(|l| *l))
        .await
        .expect("the operator leads within the timeout")
        .expect("the operator runs");
    op
}

fn pods_of(c: &TestCluster, key: &str, value: &str) -> Vec<Value> {
    c.objects("", "pods")
        .into_iter()
        .filter(|p| {
            p.pointer("/metadata/labels")
                .and_then(|l| l.get(key))
                .and_then(Value::as_str)
                == Some(value)
        })
        .collect()
}

fn running(c: &TestCluster, app: &str) -> usize {
    pods_of(c, "app", app)
        .iter()
        .filter(|p| {
            p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
        })
        .count()
}

fn initialized(c: &TestCluster) -> bool {
    let claims = c.nodeclaims();
    !claims.is_empty()
        && claims
            .iter()
            .all(|x| condition(x, "Initialized").as_deref() == Some("True"))
}

/// Launch an instance with no NodeClaim (its kubelet registers an orphaned node).
async fn stray_instance(c: &TestCluster) -> String {
    let mut claim: NodeClaim =
        serde_json::from_value(c.nodeclaims()[0].clone()).expect("nodeclaim");
    claim.metadata.name = Some("never-existed".into());
    claim.status = None;
    let class: EC2NodeClass =
        serde_json::from_value(c.objects("karpenter.k8s.aws", "ec2nodeclasses")[0].clone())
            .expect("node class");
    let launched = c
        .cluster
        .cloud
        .create(&claim, &class)
        .await
        .expect("launch");
    c.sim()
        .instances()
        .into_iter()
        .find(|i| i.provider_id == launched.provider_id)
        .map(|i| i.hostname)
        .expect("the stray instance")
}

/// The scenario the controller's calls are recorded in: provisioning and registration, an AMI
/// release that drifts every node and is rolled out (replacements, drains through evictions,
/// terminations), a node deleted by hand, a NodeClaim deleted by hand whose do-not-disrupt pod
/// is deleted at its terminationGracePeriod, and an orphaned node collected.
async fn exercise_the_controller(c: &TestCluster) {
    c.eventually("web runs on initialized nodes", SETTLE, |c| {
        initialized(c) && running(c, "web") == 3
    })
    .await;
    let before: BTreeSet<String> = c.nodeclaims().iter().map(name).collect();
    let new: BTreeSet<String> = c
        .publish_ami("al2023", None)
        .into_iter()
        .map(|a| a.id)
        .collect();
    c.eventually("every node replaced by one on the new AMI", SETTLE, |c| {
        let claims = c.nodeclaims();
        initialized(c)
            && claims.iter().all(|x| {
                !before.contains(&name(x))
                    && x["status"]["imageID"]
                        .as_str()
                        .is_some_and(|i| new.contains(i))
            })
            && running(c, "web") == 3
    })
    .await;
    let node = c.nodeclaims()[0]["status"]["nodeName"]
        .as_str()
        .expect("registered")
        .to_string();
    c.kubectl_ok(&["delete", "node", &node, "--wait=false"])
        .await;
    c.eventually("the deleted node gone and web running again", SETTLE, |c| {
        !c.objects("", "nodes").iter().any(|n| name(n) == node)
            && initialized(c)
            && running(c, "web") == 3
    })
    .await;
    // A pod that will not leave (do-not-disrupt) on a NodeClaim deleted by hand: it is deleted
    // once the NodeClaim's terminationGracePeriod (10s, set on the NodePool) runs out.
    let claim = c.nodeclaims()[0].clone();
    let node = claim["status"]["nodeName"].as_str().unwrap_or_default();
    let stuck = c
        .objects("", "pods")
        .into_iter()
        .find(|p| p["spec"]["nodeName"] == node && p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| name(&p))
        .expect("a pod on the node");
    c.kubectl_ok(&[
        "annotate",
        "pod",
        &stuck,
        "karpenter.sh/do-not-disrupt=true",
    ])
    .await;
    c.kubectl_ok(&["delete", "nodeclaim", &name(&claim), "--wait=false"])
        .await;
    c.eventually("the do-not-disrupt pod deleted", SETTLE, |c| {
        !c.objects("", "pods").iter().any(|p| name(p) == stuck)
    })
    .await;
    let stray = stray_instance(c).await;
    c.eventually("the orphaned node deleted", SETTLE, |c| {
        c.cluster
            .sandbox
            .audit()
            .iter()
            .any(|e| e.method == "DELETE" && e.path == format!("/api/v1/nodes/{stray}"))
    })
    .await;
}

fn pdb_spec_and_generation(c: &TestCluster) -> (Value, Value) {
    let pdb = c
        .objects("policy", "poddisruptionbudgets")
        .into_iter()
        .find(|p| name(p) == "karpenter" && p["metadata"]["namespace"] == "karpenter")
        .expect("the karpenter PDB");
    (pdb["spec"].clone(), pdb["metadata"]["generation"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apply_k_installs_karpenter_and_its_rbac_covers_every_controller_call() {
    let pdb = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\nspec:\n  minAvailable: 2\n  selector:\n    matchLabels: {app: web}\n";
    // Pods with a 1s grace period are evicted during drains and deleted only in the last second
    // of a NodeClaim's terminationGracePeriod.
    let web = deployment("web", 3, "900m", "1Gi").replace(
        "    spec:\n      containers:",
        "    spec:\n      terminationGracePeriodSeconds: 1\n      containers:",
    );
    let workload = format!("{web}---\n{pdb}");
    let c = TestCluster::start(
        &workload,
        Options {
            settings: Settings {
                orphaned_node_grace: Duration::from_secs(1),
                ..Settings::default()
            },
            controller: false,
            ..Options::default()
        },
    )
    .await;

    // Install with real kubectl; a second apply changes nothing.
    let first = apply_k(&c).await;
    for object in [
        "namespace/karpenter",
        "customresourcedefinition.apiextensions.k8s.io/nodepools.karpenter.sh",
        "customresourcedefinition.apiextensions.k8s.io/nodeclaims.karpenter.sh",
        "customresourcedefinition.apiextensions.k8s.io/ec2nodeclasses.karpenter.k8s.aws",
        "serviceaccount/karpenter",
        "clusterrole.rbac.authorization.k8s.io/karpenter",
        "clusterrolebinding.rbac.authorization.k8s.io/karpenter",
        "role.rbac.authorization.k8s.io/karpenter",
        "rolebinding.rbac.authorization.k8s.io/karpenter",
        "deployment.apps/karpenter",
        "poddisruptionbudget.policy/karpenter",
        "service/karpenter",
    ] {
        assert!(
            first.lines().any(|l| l.starts_with(&format!("{object} "))),
            "apply -k did not report {object}:\n{first}"
        );
    }
    let pdb_before = pdb_spec_and_generation(&c);
    let second = apply_k(&c).await;
    // kubectl always re-sends a PodDisruptionBudget's selector (its patch strategy is
    // `replace`, so the computed patch is never empty) and reports it `configured`; the PDB
    // itself must not change.
    let changed: Vec<&str> = second
        .lines()
        .filter(|l| {
            !l.ends_with(" unchanged") && *l != "poddisruptionbudget.policy/karpenter configured"
        })
        .collect();
    assert!(changed.is_empty(), "the second apply changed: {changed:?}");
    assert_eq!(pdb_spec_and_generation(&c), pdb_before);
    let listed = c
        .kubectl_ok(&[
            "get",
            "-n",
            "karpenter",
            "deployment/karpenter",
            "serviceaccount/karpenter",
            "role/karpenter",
            "rolebinding/karpenter",
            "pdb/karpenter",
            "service/karpenter",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(listed.lines().count(), 6, "{listed}");
    c.kubectl_ok(&[
        "get",
        "clusterrole/karpenter",
        "clusterrolebinding/karpenter",
    ])
    .await;
    // The Deployment's pods: two, system-cluster-critical, under the karpenter service account.
    c.eventually("two controller pods", SETTLE, |c| {
        pods_of(c, "app.kubernetes.io/instance", "karpenter").len() == 2
    })
    .await;
    for pod in pods_of(&c, "app.kubernetes.io/instance", "karpenter") {
        assert_eq!(pod["metadata"]["namespace"], "karpenter");
        assert_eq!(pod["spec"]["serviceAccountName"], "karpenter");
        assert_eq!(pod["spec"]["priority"], 2_000_000_000);
    }

    let grace = r#"{"spec":{"template":{"spec":{"terminationGracePeriod":"10s"}}}}"#;
    c.kubectl_ok(&["patch", "nodepool", "default", "--type=merge", "-p", grace])
        .await;
    let operator = run_operator(&c).await;
    exercise_the_controller(&c).await;
    // A graceful stop releases the Lease.
    assert_eq!(operator.shutdown().await, Stopped::Shutdown);

    // Every request the controller made is allowed by deploy/'s RBAC.
    let auth = authorizer(&c);
    let calls = controller_calls(&c);
    let mut table: BTreeMap<String, String> = BTreeMap::new();
    let mut denied = BTreeSet::new();
    for call in &calls {
        let row = match call {
            RequestAttributes::Resource(r) => {
                let mut r = r.clone();
                r.name = None;
                RequestAttributes::Resource(r).to_string()
            }
            other => other.to_string(),
        };
        match auth.allowing(call) {
            Some(grant) => {
                table.insert(row, grant.source.clone());
            }
            None => {
                denied.insert(call.to_string());
            }
        }
    }
    println!("controller calls ({USER_AGENT}) and the role allowing each:");
    for (call, source) in &table {
        println!("  {call:<60} {source}");
    }
    assert!(
        denied.is_empty(),
        "deploy/'s RBAC denies calls the controller makes:\n  {}",
        denied.into_iter().collect::<Vec<_>>().join("\n  ")
    );
    // The scenario did reach the calls that matter (the check above is not vacuous).
    for needed in [
        "create karpenter.sh nodeclaims",
        "delete karpenter.sh nodeclaims",
        "patch karpenter.sh nodeclaims/status",
        "watch core pods",
        "create core pods/eviction -n default",
        "delete core pods -n default",
        "patch core nodes",
        "delete core nodes",
        "update coordination.k8s.io leases -n karpenter",
        "create core configmaps -n karpenter",
    ] {
        assert!(
            table.keys().any(|k| k == needed),
            "the scenario never made `{needed}`"
        );
    }
    // Rules nothing used must be justified.
    let unused: Vec<String> = auth
        .grants
        .iter()
        .filter(|g| !calls.iter().any(|call| g.allows(call)))
        .flat_map(|g| g.rule.permissions())
        .collect();
    println!("rules the scenario never used:");
    let mut unjustified = Vec::new();
    for permission in &unused {
        match JUSTIFIED_UNUSED.iter().find(|(p, _)| p == permission) {
            Some((_, why)) => println!("  {permission:<40} {why}"),
            None => unjustified.push(permission),
        }
    }
    assert!(
        unjustified.is_empty(),
        "deploy/ grants permissions the controller never used; remove them or justify them \
         in JUSTIFIED_UNUSED and the YAML: {unjustified:?}"
    );
    // Karpenter never launches capacity for itself: its pods require nodes without a NodePool.
    let own_nodes: Vec<String> = pods_of(&c, "app.kubernetes.io/instance", "karpenter")
        .iter()
        .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
        .collect();
    assert!(own_nodes.is_empty(), "controller pods on {own_nodes:?}");
}
