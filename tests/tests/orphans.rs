//! `kubectl karpenter orphans` end to end: a sandbox with its simulated cloud and no controller
//! (nothing cleans up behind the test's back), one orphan of each kind staged by hand, then the
//! real plugin binary — directly and through real kubectl — lists them, `--dry-run` and a
//! refused delete change nothing, and `orphans delete --all --yes` removes every one of them:
//! instances terminated, finalizers released, objects gone.

use std::collections::BTreeSet;
use std::process::{Output, Stdio};
use std::time::Duration;

use controller::cloudprovider::CloudProvider;
use crds::labels::{
    CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, TERMINATION_FINALIZER,
};
use crds::{EC2NodeClass, NodeClaim, Operator};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tests::{Options, TestCluster, kubectl_path, workspace_binary};
use testutil::{nodeclaim, pod};

/// Thresholds that make everything staged just now old enough to be an orphan.
const NOW: [&str; 8] = [
    "--launch-timeout",
    "0s",
    "--registration-ttl",
    "0s",
    "--stuck-after",
    "0s",
    "--min-instance-age",
    "0s",
];

/// An on-demand m5.large NodeClaim of `default` with Karpenter's termination finalizer.
fn claim(name: &str) -> NodeClaim {
    nodeclaim(name)
        .nodepool("default")
        .finalizer(TERMINATION_FINALIZER)
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["m5.large"])
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["on-demand"])
        .build()
}

/// The condition `type_` = True as it was at staging time.
fn condition(type_: &str) -> Value {
    testutil::condition(type_, "True")
        .at("2025-06-01T00:00:00Z")
        .json()
}

/// The staged world: what each orphan is called.
struct Staged {
    /// Instances launched for NodeClaims that never existed: (node-orphan's, the bare one).
    node_instance: String,
    bare_instance: String,
    /// Every instance the simulated cloud runs after staging.
    instances: BTreeSet<String>,
}

/// Launches an instance for `claim` (which may exist only in memory) and returns its id and
/// providerID.
async fn launch(tc: &TestCluster, claim: &NodeClaim, class: &EC2NodeClass) -> (String, String) {
    let launched = tc.sim().create(claim, class).await.expect("launch");
    let pid = launched.provider_id;
    let id = pid.rsplit('/').next().expect("instance id").to_owned();
    (id, pid)
}

async fn stage(tc: &TestCluster) -> Staged {
    let client = tc.cluster.client();
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let class = Api::<EC2NodeClass>::all(client.clone())
        .get("default")
        .await
        .expect("default EC2NodeClass");
    let pp = PostParams::default();
    let set_status = |name: &'static str, status: Value| {
        let claims = claims.clone();
        async move {
            claims
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await
                .expect("status patch");
        }
    };
    let node = |name: &str, pid: &str| -> Node {
        testutil::node(name)
            .label(NODEPOOL_LABEL, "default")
            .finalizer(TERMINATION_FINALIZER)
            .provider_id(pid)
            .build()
    };

    // NotLaunched: created, never launched.
    claims
        .create(&pp, &claim("orphan-notlaunched"))
        .await
        .expect("create");

    // NotRegistered: launched, its node never joined.
    let c = claims
        .create(&pp, &claim("orphan-notregistered"))
        .await
        .expect("create");
    let (_, pid) = launch(tc, &c, &class).await;
    set_status(
        "orphan-notregistered",
        json!({"providerID": pid, "conditions": [condition("Launched")]}),
    )
    .await;

    // StuckTerminating: a registered NodeClaim deleted while its node (with a pod) and instance
    // are still there, and no controller to finish the job.
    let c = claims
        .create(&pp, &claim("orphan-stuck"))
        .await
        .expect("create");
    let (_, pid) = launch(tc, &c, &class).await;
    set_status(
        "orphan-stuck",
        json!({"providerID": pid, "nodeName": "node-stuck",
               "conditions": [condition("Launched"), condition("Registered")]}),
    )
    .await;
    nodes
        .create(&pp, &node("node-stuck", &pid))
        .await
        .expect("node");
    let pod = pod("web").on_node("node-stuck").image("pause").build();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&pp, &pod)
        .await
        .expect("pod");
    claims
        .delete("orphan-stuck", &DeleteParams::default())
        .await
        .expect("delete");

    // NodeWithoutNodeClaim (and its instance, InstanceWithoutNodeClaim): launched for a NodeClaim
    // that is gone, its node joined.
    let (node_instance, pid) = launch(tc, &claim("orphan-vanished"), &class).await;
    nodes
        .create(&pp, &node("node-orphan", &pid))
        .await
        .expect("node");

    // InstanceWithoutNodeClaim on its own.
    let (bare_instance, _) = launch(tc, &claim("orphan-never-existed"), &class).await;

    // InstanceGone: a registered NodeClaim whose instance was terminated behind its back.
    let c = claims
        .create(&pp, &claim("orphan-gone"))
        .await
        .expect("create");
    let (_, pid) = launch(tc, &c, &class).await;
    set_status(
        "orphan-gone",
        json!({"providerID": pid,
               "conditions": [condition("Launched"), condition("Registered")]}),
    )
    .await;
    assert!(tc.sim().terminate(&pid));

    let instances: BTreeSet<String> = tc.sim().instances().into_iter().map(|i| i.id).collect();
    assert_eq!(instances.len(), 4);
    // The sandbox mirrors the running instances as Instance objects.
    tc.eventually("instances mirrored", Duration::from_secs(10), |tc| {
        names(&tc.objects("sandbox.karpenter.sh", "instances")) == instances
    })
    .await;
    Staged {
        node_instance,
        bare_instance,
        instances,
    }
}

fn names(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// NodeClaims, Nodes, Instance objects and simulated instances, with finalizers and deletion
/// marks: everything `orphans delete` could change.
fn world(tc: &TestCluster) -> Vec<String> {
    let mut out = Vec::new();
    for (group, plural) in [
        ("karpenter.sh", "nodeclaims"),
        ("", "nodes"),
        ("sandbox.karpenter.sh", "instances"),
    ] {
        for o in tc.objects(group, plural) {
            out.push(format!(
                "{plural}/{} finalizers={} deleting={}",
                o["metadata"]["name"],
                o["metadata"]["finalizers"],
                o["metadata"]["deletionTimestamp"].is_string()
            ));
        }
    }
    out.extend(
        tc.sim()
            .instances()
            .into_iter()
            .map(|i| format!("sim/{}", i.id)),
    );
    out.sort();
    out
}

async fn run(program: &std::path::Path, args: &[&str], path: Option<std::ffi::OsString>) -> Output {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).stdin(Stdio::null()).env_remove("KUBECONFIG");
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    cmd.output().await.expect("run")
}

async fn plugin(tc: &TestCluster, args: &[&str]) -> Output {
    let kc = tc.kubeconfig().to_str().expect("utf-8 path").to_owned();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--kubeconfig", &kc]);
    all.extend(NOW);
    run(&workspace_binary("kubectl-karpenter"), &all, None).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// (KIND, NAME) of each table row.
fn rows(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let mut cells = l.split_whitespace();
            Some((cells.next()?.to_owned(), cells.next()?.to_owned()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orphans_are_listed_and_cleaned_up() {
    let tc = TestCluster::start(
        "",
        Options {
            controller: false,
            // Kubelets must not register nodes on their own: the test decides which exist.
            registration_delay: Duration::from_secs(3600),
            ..Options::default()
        },
    )
    .await;
    let staged = stage(&tc).await;
    let mut expected = vec![
        ("NotLaunched".to_owned(), "orphan-notlaunched".to_owned()),
        ("NotRegistered".into(), "orphan-notregistered".into()),
        ("StuckTerminating".into(), "orphan-stuck".into()),
        ("NodeWithoutNodeClaim".into(), "node-orphan".into()),
    ];
    let mut bare = [staged.node_instance.clone(), staged.bare_instance.clone()];
    bare.sort();
    for id in bare {
        expected.push(("InstanceWithoutNodeClaim".into(), id));
    }
    expected.push(("InstanceGone".into(), "orphan-gone".into()));

    // The plugin binary, directly.
    let listed = plugin(&tc, &["orphans", "-o", "wide"]).await;
    let table = text(&listed.stdout);
    assert_eq!(
        listed.status.code(),
        Some(1),
        "{}\n{table}",
        text(&listed.stderr)
    );
    assert_eq!(
        text(&listed.stderr),
        "",
        "no warning: the sandbox's cloud was checked"
    );
    assert_eq!(rows(&table), expected, "\n{table}");
    let stuck = table
        .lines()
        .find(|l| l.starts_with("StuckTerminating"))
        .unwrap_or_default();
    assert!(
        stuck.contains("waiting on: node node-stuck still present (finalizers: karpenter.sh/termination, 1 pod), instance i-"),
        "{stuck}"
    );
    assert!(
        table.trim_end().ends_with(
            "cloud: sandbox, 4 instances checked; running orphaned instances cost $0.3840/hour"
        ),
        "\n{table}"
    );

    // Through real kubectl, which finds the plugin on PATH.
    let bin = workspace_binary("kubectl-karpenter");
    let dir = bin.parent().expect("bin dir").to_path_buf();
    let path = std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let kc = tc.kubeconfig().to_str().expect("utf-8").to_owned();
    let mut args = vec!["karpenter", "orphans", "--kubeconfig", &kc];
    args.extend(NOW);
    let via_kubectl = run(&kubectl_path(), &args, Some(path)).await;
    assert_eq!(
        via_kubectl.status.code(),
        Some(1),
        "{}",
        text(&via_kubectl.stderr)
    );
    assert_eq!(rows(&text(&via_kubectl.stdout)), expected);
    // The mirror objects read well in plain kubectl too.
    let instances = tc.kubectl_ok(&["get", "instances"]).await;
    assert!(
        instances.starts_with("NAME ")
            && instances.contains("TYPE")
            && instances.contains("NODECLAIM"),
        "{instances}"
    );
    assert!(
        instances.contains("m5.large") && instances.contains("orphan-vanished"),
        "{instances}"
    );

    // --dry-run previews and changes nothing; so does a delete without a terminal or --yes.
    let before = world(&tc);
    let dry = plugin(&tc, &["orphans", "delete", "--all", "--dry-run"]).await;
    assert_eq!(dry.status.code(), Some(1), "{}", text(&dry.stderr));
    let preview = text(&dry.stdout);
    assert!(
        preview.contains(
            "StuckTerminating nodeclaim.karpenter.sh/orphan-stuck:\n  - terminate instance i-"
        ),
        "{preview}"
    );
    assert!(
        preview.contains("  - remove finalizer karpenter.sh/termination from node node-stuck\n"),
        "{preview}"
    );
    assert_eq!(text(&dry.stderr), "dry run: nothing was changed\n");
    let refused = plugin(&tc, &["orphans", "delete", "--all"]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stdout));
    assert!(
        text(&refused.stderr).contains("pass --yes"),
        "{}",
        text(&refused.stderr)
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        world(&tc),
        before,
        "--dry-run and a refused delete change nothing"
    );

    // --yes cleans up everything.
    let deleted = plugin(&tc, &["orphans", "delete", "--all", "--yes"]).await;
    let out = text(&deleted.stdout);
    assert_eq!(
        deleted.status.code(),
        Some(0),
        "{}\n{out}",
        text(&deleted.stderr)
    );
    for id in &staged.instances {
        assert!(
            out.contains(&format!("instance/{id} terminated\n")),
            "{id}:\n{out}"
        );
    }
    assert!(
        out.contains("node/node-stuck finalizer karpenter.sh/termination removed\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "nodeclaim.karpenter.sh/orphan-stuck finalizer karpenter.sh/termination removed\n"
        ),
        "{out}"
    );
    assert!(tc.sim().instances().is_empty(), "every instance terminated");
    tc.eventually("everything gone", Duration::from_secs(10), |tc| {
        tc.nodeclaims().is_empty()
            && tc.objects("", "nodes").is_empty()
            && tc.objects("sandbox.karpenter.sh", "instances").is_empty()
    })
    .await;

    let again = plugin(&tc, &["orphans"]).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stdout));
    assert_eq!(text(&again.stderr), "No orphans found\n");
}
