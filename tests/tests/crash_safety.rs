//! Kill-and-restart tests: the controller is frozen right after one step of launch,
//! registration, initialization or termination has taken effect (through the API client or the
//! cloud, see `tests::crash`), stopped, and replaced by a fresh controller. Once it settles there
//! must be no leaked instance, no duplicate NodeClaim for the same pods, and no finalizer left
//! behind.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::Value;
use tests::crash::{Crash, CrashingCloud, Step, client};
use tests::{Options, TestCluster, condition, deployment, provider_ids};

/// Two pods that fit on one node: a settled cluster has exactly one NodeClaim.
fn workload() -> String {
    deployment("app", 2, "500m", "256Mi")
}

/// Consolidation looks at new NodeClaims within a second (upstream polls every 10 s), so a
/// settled world is reached sooner.
fn quick_consolidation_pass() -> controller::runtime::Settings {
    controller::runtime::Settings {
        disruption_poll: Duration::from_secs(1),
        ..Default::default()
    }
}

fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
        .map(String::from)
        .collect()
}

/// The world as a settled controller leaves it: a number of NodeClaims within `claims`, all
/// initialized and judged for consolidation, one running instance each and nothing else, one
/// node each, no object stuck deleting, every pod of the workload running.
fn settled(tc: &TestCluster, claims: &RangeInclusive<usize>) -> Result<(), String> {
    let nodeclaims = tc.nodeclaims();
    if !claims.contains(&nodeclaims.len()) {
        return Err(format!(
            "{} nodeclaims: {:?}",
            nodeclaims.len(),
            names(&nodeclaims)
        ));
    }
    if let Some(c) = nodeclaims
        .iter()
        .find(|c| condition(c, "Initialized").as_deref() != Some("True"))
    {
        return Err(format!("{:?} not initialized", c["metadata"]["name"]));
    }
    // The disruption orchestrator has looked at every NodeClaim (written its Consolidatable
    // condition), so the NodeClaim status writes a step counts are the termination's own.
    if let Some(c) = nodeclaims
        .iter()
        .find(|c| condition(c, "Consolidatable").is_none())
    {
        return Err(format!(
            "{:?} not looked at by consolidation",
            c["metadata"]["name"]
        ));
    }
    let instances = tc.instance_ids();
    if instances != provider_ids(&nodeclaims) {
        return Err(format!(
            "instances {instances:?} != nodeclaim providerIDs {:?}",
            provider_ids(&nodeclaims)
        ));
    }
    let nodes = tc.objects("", "nodes");
    if nodes.len() != nodeclaims.len() {
        return Err(format!("{} nodes: {:?}", nodes.len(), names(&nodes)));
    }
    for (kind, objects) in [("nodeclaim", &nodeclaims), ("node", &nodes)] {
        if let Some(o) = objects
            .iter()
            .find(|o| o.pointer("/metadata/deletionTimestamp").is_some())
        {
            return Err(format!(
                "{kind} {:?} stuck deleting with finalizers {:?}",
                o["metadata"]["name"], o["metadata"]["finalizers"]
            ));
        }
    }
    let pods: Vec<Value> = tc
        .objects("", "pods")
        .into_iter()
        .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some("app"))
        .collect();
    let running = pods
        .iter()
        .filter(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Running"))
        .count();
    if running != 2 || pods.len() != 2 {
        return Err(format!("{running} of {} app pods running", pods.len()));
    }
    Ok(())
}

async fn wait_settled(tc: &TestCluster, claims: RangeInclusive<usize>, what: &str) {
    let start = Instant::now();
    loop {
        match settled(tc, &claims) {
            Ok(()) => return,
            Err(e) if start.elapsed() > Duration::from_secs(60) => {
                panic!("{what}: not settled after 60s: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn wait_fired(crash: &Crash, what: &str) {
    let start = Instant::now();
    while !crash.fired() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: the crash step was never reached"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Start a controller that crashes at `step`.
fn start_crashing(tc: &mut TestCluster, step: Step) -> Arc<Crash> {
    let crash = Crash::at(step);
    let cloud = CrashingCloud::new(Arc::clone(&tc.cluster.cloud), &crash);
    let client = client(tc.cluster.sandbox.client_config(), &crash);
    tc.cluster.start_controller_with(cloud, client);
    crash
}

/// What the world must look like right after the crash: proof that the crash happened at the
/// step the test names (`Err` says what differs).
type AtCrash = fn(&TestCluster) -> Result<(), String>;

/// Kill the controller during provisioning and launch, check the world is stopped at the step,
/// restart it, and check the outcome.
async fn crash_while_launching(what: &str, step: Step, at_crash: AtCrash) {
    let mut tc = TestCluster::start(
        &workload(),
        Options {
            controller: false,
            settings: quick_consolidation_pass(),
            ..Options::default()
        },
    )
    .await;
    let crash = start_crashing(&mut tc, step);
    wait_fired(&crash, what).await;
    tc.cluster.stop_controller();
    if let Err(e) = at_crash(&tc) {
        panic!("{what}: not the state this step leaves: {e}");
    }
    let cloud = Arc::clone(&tc.cluster.cloud);
    tc.cluster.start_controller(cloud);
    wait_settled(&tc, 1..=1, what).await;
    assert_eq!(tc.sim().launches(), 1, "{what}: launched a second instance");
}

/// Bring a NodeClaim up, then kill the controller while it terminates it, check the world is
/// stopped at the step, restart, and check that the NodeClaim, its node and its instance are
/// gone and a replacement serves the pods.
async fn crash_while_terminating(what: &str, step: fn(&Old) -> Step, at_crash: AtCrash) {
    crash_while_terminating_with(what, Termination::default(), step, at_crash).await;
}

/// The NodeClaim and node a termination test terminates.
struct Old {
    claim: String,
    node: String,
}

/// How a termination test starts its termination.
#[derive(Default)]
struct Termination {
    /// Delete the Node instead of the NodeClaim.
    from_node: bool,
    /// The NodePool's `terminationGracePeriod`, if any.
    grace_period: Option<&'static str>,
    /// The crash falls between the two evictions of the drain: the evicted pods may come back
    /// in one provisioning batch or, when the restarted drain evicts the second pod after the
    /// first batch closed, in two, each with its own replacement NodeClaim. Two NodeClaims of
    /// one pod each are then settled: consolidation cannot merge them (two c6g.medium cost what
    /// the c6g.large for both pods costs), and which of the two happens is a matter of timing.
    split_drain: bool,
}

async fn crash_while_terminating_with(
    what: &str,
    how: Termination,
    step: fn(&Old) -> Step,
    at_crash: AtCrash,
) {
    let mut tc = TestCluster::start(
        &workload(),
        Options {
            controller: false,
            settings: quick_consolidation_pass(),
            ..Options::default()
        },
    )
    .await;
    if let Some(grace) = how.grace_period {
        let patch = format!(
            r#"{{"spec":{{"template":{{"spec":{{"terminationGracePeriod":"{grace}"}}}}}}}}"#
        );
        tc.kubectl_ok(&["patch", "nodepool", "default", "--type=merge", "-p", &patch])
            .await;
    }
    let cloud = Arc::clone(&tc.cluster.cloud);
    tc.cluster.start_controller(cloud);
    wait_settled(&tc, 1..=1, what).await;
    let old = tc.nodeclaims()[0].clone();
    let old_name = old["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let old_instance = old
        .pointer("/status/providerID")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let old_node = old
        .pointer("/status/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let crash = start_crashing(
        &mut tc,
        step(&Old {
            claim: old_name.clone(),
            node: old_node.clone(),
        }),
    );
    if how.from_node {
        tc.kubectl_ok(&["delete", "node", &old_node, "--wait=false"])
            .await;
    } else {
        tc.kubectl_ok(&["delete", "nodeclaim", &old_name, "--wait=false"])
            .await;
    }
    wait_fired(&crash, what).await;
    tc.cluster.stop_controller();
    if let Err(e) = at_crash(&tc) {
        panic!("{what}: not the state this step leaves: {e}");
    }
    let cloud = Arc::clone(&tc.cluster.cloud);
    tc.cluster.start_controller(cloud);
    let replacements = if how.split_drain { 1..=2 } else { 1..=1 };
    wait_settled(&tc, replacements, what).await;
    let claims = tc.nodeclaims();
    assert!(
        !names(&claims).contains(&old_name),
        "{what}: {old_name} survived"
    );
    assert!(
        !tc.sim()
            .instances()
            .iter()
            .any(|i| i.provider_id == old_instance),
        "{what}: instance {old_instance} leaked"
    );
    assert!(
        !names(&tc.objects("", "nodes")).contains(&old_node),
        "{what}: node {old_node} survived"
    );
    // Settled means one instance per NodeClaim and none other running; with the old
    // NodeClaim's launch, every launch is accounted for: no duplicate was launched and
    // terminated on the way.
    assert_eq!(
        tc.sim().launches(),
        1 + claims.len(),
        "{what}: expected the original launch and one per replacement NodeClaim"
    );
}

fn api(method: Method, path: &[&str], nth: usize) -> Step {
    Step::Api {
        method,
        path: path.iter().map(|p| p.to_string()).collect(),
        nth,
    }
}

/// Fails with `what` unless `holds`.
fn expect(holds: bool, what: &str) -> Result<(), String> {
    if holds { Ok(()) } else { Err(what.to_string()) }
}

fn only_claim(tc: &TestCluster) -> Result<Value, String> {
    match tc.nodeclaims().as_slice() {
        [c] => Ok(c.clone()),
        other => Err(format!("{} nodeclaims", other.len())),
    }
}

fn only_node(tc: &TestCluster) -> Result<Value, String> {
    match tc.objects("", "nodes").as_slice() {
        [n] => Ok(n.clone()),
        other => Err(format!("{} nodes", other.len())),
    }
}

/// The node being terminated (the replacement may be up already).
fn old_node(tc: &TestCluster) -> Result<Value, String> {
    let nodes: Vec<Value> = tc
        .objects("", "nodes")
        .into_iter()
        .filter(|n| n["metadata"]["deletionTimestamp"].is_string())
        .collect();
    match nodes.as_slice() {
        [n] => Ok(n.clone()),
        other => Err(format!("{} nodes deleting", other.len())),
    }
}

/// The NodeClaim being terminated.
fn old_claim(tc: &TestCluster) -> Result<Value, String> {
    let claims: Vec<Value> = tc
        .nodeclaims()
        .into_iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_string())
        .collect();
    match claims.as_slice() {
        [c] => Ok(c.clone()),
        other => Err(format!("{} nodeclaims deleting", other.len())),
    }
}

fn label(o: &Value, key: &str) -> Option<String> {
    o["metadata"]["labels"][key].as_str().map(String::from)
}

fn has_finalizer(o: &Value) -> bool {
    o["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == "karpenter.sh/termination"))
}

fn tainted(node: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["key"] == "karpenter.sh/disrupted"))
}

fn pods_on(tc: &TestCluster, node: &Value) -> usize {
    let name = node["metadata"]["name"].as_str().unwrap_or_default();
    tc.objects("", "pods")
        .iter()
        .filter(|p| p["spec"]["nodeName"].as_str() == Some(name))
        .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some("app"))
        .count()
}

#[tokio::test]
async fn killed_after_creating_the_nodeclaim() {
    crash_while_launching(
        "after the NodeClaim was created",
        api(Method::POST, &["/apis/karpenter.sh/v1/nodeclaims"], 1),
        |tc| {
            let c = only_claim(tc)?;
            expect(
                c.pointer("/status/providerID").is_none(),
                "already launched",
            )?;
            expect(tc.sim().launches() == 0, "an instance was launched")
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_the_instance_launched_before_the_nodeclaim_knew() {
    crash_while_launching(
        "after the instance launched, before the NodeClaim recorded it",
        Step::Cloud {
            call: "create",
            nth: 1,
        },
        |tc| {
            let c = only_claim(tc)?;
            expect(tc.sim().launches() == 1, "no instance launched")?;
            expect(c.pointer("/status/providerID").is_none(), "launch recorded")
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_recording_the_launch() {
    crash_while_launching(
        "after the NodeClaim recorded its launch",
        api(Method::PATCH, &["/nodeclaims/", "/status"], 1),
        |tc| {
            let c = only_claim(tc)?;
            expect(
                condition(&c, "Launched").as_deref() == Some("True"),
                "not Launched",
            )?;
            expect(
                condition(&c, "Registered").as_deref() != Some("True"),
                "already Registered",
            )
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_syncing_the_registered_node() {
    crash_while_launching(
        "after the node was synced, before the NodeClaim was Registered",
        api(Method::PATCH, &["/api/v1/nodes/"], 1),
        |tc| {
            let (c, n) = (only_claim(tc)?, only_node(tc)?);
            expect(
                label(&n, "karpenter.sh/registered").as_deref() == Some("true"),
                "node not synced",
            )?;
            expect(has_finalizer(&n), "node has no finalizer")?;
            expect(
                condition(&c, "Registered").as_deref() != Some("True"),
                "already Registered",
            )
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_labelling_the_node_initialized() {
    crash_while_launching(
        "after the node was labelled initialized, before the NodeClaim was Initialized",
        api(Method::PATCH, &["/api/v1/nodes/"], 2),
        |tc| {
            let (c, n) = (only_claim(tc)?, only_node(tc)?);
            expect(
                label(&n, "karpenter.sh/initialized").as_deref() == Some("true"),
                "node not labelled",
            )?;
            expect(
                condition(&c, "Initialized").as_deref() != Some("True"),
                "already Initialized",
            )
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_deleting_the_node() {
    crash_while_terminating(
        "after the NodeClaim finalizer deleted the node",
        |old| api(Method::DELETE, &["/api/v1/nodes/", &old.node], 1),
        |tc| {
            let n = old_node(tc)?;
            expect(
                n["metadata"]["deletionTimestamp"].is_string(),
                "node not deleting",
            )?;
            expect(!tainted(&n), "node already tainted")
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_tainting_the_node() {
    crash_while_terminating(
        "after the node was tainted for termination",
        |old| api(Method::PATCH, &["/api/v1/nodes/", &old.node], 1),
        |tc| {
            let n = old_node(tc)?;
            expect(tainted(&n), "node not tainted")?;
            expect(pods_on(tc, &n) == 2, "pods already evicted")
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_the_first_eviction() {
    crash_while_terminating_with(
        "after the first eviction",
        Termination {
            split_drain: true,
            ..Termination::default()
        },
        |_| api(Method::POST, &["/eviction"], 1),
        |tc| {
            let n = old_node(tc)?;
            expect(pods_on(tc, &n) == 1, "not exactly one pod evicted")
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_terminating_the_instance() {
    crash_while_terminating(
        "after the instance was terminated, before the cloud reported it gone",
        |_| Step::Cloud {
            call: "delete",
            nth: 1,
        },
        |tc| {
            let n = old_node(tc)?;
            expect(has_finalizer(&n), "node finalizer released")?;
            let pid = old_claim(tc)?["status"]["providerID"].clone();
            expect(
                !tc.sim().instances().iter().any(|i| i.provider_id == pid),
                "instance still running",
            )?;
            expect(pods_on(tc, &n) == 0, "node not drained")
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_the_cloud_reported_the_instance_gone() {
    crash_while_terminating(
        "after the cloud reported the instance gone, before finalizers were released",
        |_| Step::InstanceGone,
        |tc| {
            let n = old_node(tc)?;
            expect(has_finalizer(&n), "node finalizer released")?;
            expect(
                has_finalizer(&old_claim(tc)?),
                "nodeclaim finalizer released",
            )
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_releasing_the_node_finalizer() {
    crash_while_terminating(
        "after the node's finalizer was released, before the NodeClaim's",
        |old| api(Method::PATCH, &["/api/v1/nodes/", &old.node], 2),
        |tc| {
            expect(old_node(tc).is_err(), "node still there")?;
            expect(
                has_finalizer(&old_claim(tc)?),
                "nodeclaim finalizer released",
            )
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_stamping_the_termination_time() {
    crash_while_terminating_with(
        "after the termination-timestamp annotation was written",
        Termination {
            grace_period: Some("1h"),
            ..Termination::default()
        },
        |old| {
            api(
                Method::PATCH,
                &["/apis/karpenter.sh/v1/nodeclaims/", &old.claim],
                1,
            )
        },
        |tc| {
            let c = old_claim(tc)?;
            expect(
                c.pointer("/metadata/annotations/karpenter.sh~1nodeclaim-termination-timestamp")
                    .is_some(),
                "no termination timestamp",
            )?;
            expect(
                tc.objects("", "nodes")
                    .iter()
                    .all(|n| n["metadata"]["deletionTimestamp"].is_null()),
                "node already deleting",
            )
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_marking_the_nodeclaim_drained() {
    crash_while_terminating(
        "after Drained=True was written, before the instance was terminated",
        |old| {
            api(
                Method::PATCH,
                &["/apis/karpenter.sh/v1/nodeclaims/", &old.claim, "/status"],
                2,
            )
        },
        |tc| {
            let c = old_claim(tc)?;
            expect(
                condition(&c, "Drained").as_deref() == Some("True"),
                "not Drained",
            )?;
            let pid = c["status"]["providerID"].clone();
            expect(
                tc.sim().instances().iter().any(|i| i.provider_id == pid),
                "instance already terminated",
            )
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_recording_instance_termination() {
    crash_while_terminating(
        "after InstanceTerminating=True was written",
        |old| {
            api(
                Method::PATCH,
                &["/apis/karpenter.sh/v1/nodeclaims/", &old.claim, "/status"],
                4,
            )
        },
        |tc| {
            let c = old_claim(tc)?;
            expect(
                condition(&c, "InstanceTerminating").as_deref() == Some("True"),
                "InstanceTerminating not recorded",
            )
        },
    )
    .await;
}

#[tokio::test]
async fn killed_after_node_deletion_deleted_the_nodeclaim() {
    crash_while_terminating_with(
        "after deleting the Node led to deleting its NodeClaim",
        Termination {
            from_node: true,
            ..Termination::default()
        },
        |old| {
            api(
                Method::DELETE,
                &["/apis/karpenter.sh/v1/nodeclaims/", &old.claim],
                1,
            )
        },
        |tc| {
            let (c, n) = (old_claim(tc)?, old_node(tc)?);
            expect(
                has_finalizer(&c) && has_finalizer(&n),
                "a finalizer released",
            )?;
            expect(!tainted(&n), "node already tainted")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_right_after_a_consolidation_replacement_was_created() {
    use crds::disruption::{COMMAND_ANNOTATION, REPLACEMENT_ANNOTATION, REPLACES_ANNOTATION};
    let what = "after a consolidation command created its replacement";
    let annotation = |o: &Value, key: &str| -> Option<String> {
        o.pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .map(String::from)
    };
    let app_pods = |tc: &TestCluster| -> Vec<Value> {
        tc.objects("", "pods")
            .into_iter()
            .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some("app"))
            .collect()
    };
    let running = |pods: &[Value]| {
        pods.iter()
            .filter(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Running"))
            .count()
    };
    // Four 1-cpu pods that must share a node (required pod affinity on the hostname, so the
    // cost re-pack cannot spread them), then one: the node left holding it is oversized and
    // gets replaced.
    let together = deployment("app", 4, "1", "1Gi").replace(
        "      containers:\n",
        "      affinity:\n        podAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - topologyKey: kubernetes.io/hostname\n            labelSelector: {matchLabels: {app: app}}\n      containers:\n",
    );
    let mut tc = TestCluster::start(
        &together,
        Options {
            settings: controller::runtime::Settings {
                disruption_poll: Duration::from_millis(500),
                consolidation_validation_delay: Duration::from_secs(1),
                ..Default::default()
            },
            controller: false,
            ..Options::default()
        },
    )
    .await;
    // On-demand capacity: a spot node is replaced only behind SpotToSpotConsolidation.
    tc.merge_patch(
        "nodepool",
        "default",
        r#"{"spec":{"template":{"spec":{"requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]}]}}}}"#,
    )
    .await;
    let cloud = Arc::clone(&tc.cluster.cloud);
    tc.cluster.start_controller(cloud);
    tc.eventually(
        "four pods running on initialized nodes",
        Duration::from_secs(60),
        |tc| {
            running(&app_pods(tc)) == 4
                && tc
                    .nodeclaims()
                    .iter()
                    .all(|c| condition(c, "Initialized").as_deref() == Some("True"))
        },
    )
    .await;
    let before = names(&tc.nodeclaims());
    // The next NodeClaim created is the replacement: no pod is pending.
    let crash = start_crashing(
        &mut tc,
        api(Method::POST, &["/apis/karpenter.sh/v1/nodeclaims"], 1),
    );
    let launches = tc.sim().launches();
    tc.kubectl_ok(&["scale", "deployment/app", "--replicas=1"])
        .await;
    wait_fired(&crash, what).await;
    tc.cluster.stop_controller();

    let claims = tc.nodeclaims();
    let replacement = claims
        .iter()
        .find(|c| annotation(c, REPLACES_ANNOTATION).is_some())
        .map(|c| names(std::slice::from_ref(c))[0].clone())
        .unwrap_or_else(|| panic!("{what}: no replacement in {:?}", names(&claims)));
    let candidates: Vec<String> = claims
        .iter()
        .filter(|c| annotation(c, REPLACEMENT_ANNOTATION).as_deref() == Some(replacement.as_str()))
        .filter(|c| annotation(c, COMMAND_ANNOTATION).is_some())
        .map(|c| names(std::slice::from_ref(c))[0].clone())
        .collect();
    assert!(
        !candidates.is_empty() && candidates.iter().all(|c| before.contains(c)),
        "{what}: the candidates name the replacement: {candidates:?}"
    );
    assert_eq!(tc.sim().launches(), launches, "{what}: already launched");

    let cloud = Arc::clone(&tc.cluster.cloud);
    tc.cluster.start_controller(cloud);
    let start = Instant::now();
    loop {
        let claims = tc.nodeclaims();
        let pods = app_pods(&tc);
        let nodes = tc.objects("", "nodes");
        let done = claims.iter().all(|c| {
            annotation(c, COMMAND_ANNOTATION).is_none()
                && c.pointer("/metadata/deletionTimestamp").is_none()
                && condition(c, "Initialized").as_deref() == Some("True")
        }) && !candidates.iter().any(|c| names(&claims).contains(c))
            && names(&claims).contains(&replacement)
            && tc.instance_ids() == provider_ids(&claims)
            && nodes.len() == claims.len()
            && pods.len() == 1
            && running(&pods) == 1;
        if done {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: not converged: nodeclaims {:?}, instances {:?}, {} app pods",
            names(&claims),
            tc.instance_ids(),
            pods.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        tc.sim().launches(),
        launches + 1,
        "{what}: exactly one replacement launched"
    );
}
