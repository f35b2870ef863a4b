//! NodePool controllers (upstream `nodepool/readiness`, `nodepool/validation`,
//! `nodepool/counter`, `static/*`): `ValidationSucceeded` from the pool's own rules,
//! `NodeClassReady` from its node class, `Ready` from both; `status.resources` and
//! `status.nodes` from its nodes; a static pool's NodeClaims kept at `spec.replicas`
//! ([`static_capacity`]). Only Ready NodePools launch capacity.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crds::conditions::{
    self, NODE_CLASS_READY, NODE_REGISTRATION_HEALTHY, READY, STATIC_CAPACITY, VALIDATION_SUCCEEDED,
};
use crds::upgrade::UPGRADING_CONDITION;
use crds::validation::VALIDATION_FAILED_REASON;
use crds::{NodePool, StatusConditions};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_core::provisioning::template::validate;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::{Value, json};

mod static_capacity;

use crate::runtime::Context;
use crate::runtime::reconcile::{ReconcileError, affected_by, drive};
use crate::state::RegistrationHealth;
use karpenter_core::disruption::upgrade::Plan;
use karpenter_core::lifecycle::registration_health::{Tracker, Verdict};
use karpenter_core::scheduling::resources::Resources;
use karpenter_core::snapshot::nodepool_of;

/// Counters are refreshed at least this often (upstream: every 5s).
const RESYNC: Duration = Duration::from_secs(5);

/// Run the controller until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    // Readiness read from half-filled caches would flap (a node class not listed yet).
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("nodepool controller not started: the cluster state never synced");
        return;
    }
    let pools: Api<NodePool> = Api::all(ctx.client.clone());
    let controller = Controller::new(pools, watcher::Config::default());
    // A node class change re-evaluates the NodePools that use it, once the cache reconcile
    // reads from holds the change.
    let class_triggers = affected_by(
        ctx.state.nodeclass_changes.subscribe(),
        controller.store(),
        |class, pool| {
            class.metadata.name.as_deref() == Some(&pool.spec.template.spec.node_class_ref.name)
        },
    );
    let controller = controller.reconcile_on(class_triggers);
    drive(controller, reconcile, ctx).await;
}

/// The `Upgrading` condition for a rollout plan: True with the phase while a step is in
/// progress; otherwise False, saying whether the rollout is paused (and why), has drifted nodes
/// waiting, or has nothing to do.
fn upgrading(plan: &Plan) -> (bool, &'static str, String) {
    if let Some(step) = plan.in_progress.first() {
        let with = step
            .replacement
            .as_deref()
            .map(|r| format!(" with {r}"))
            .unwrap_or_default();
        return (
            true,
            step.phase.as_str(),
            format!(
                "replacing {}{with}: {}",
                step.nodeclaim,
                step.phase.as_str()
            ),
        );
    }
    // Messages carry no counts: a PDB whose allowance flaps would otherwise rewrite the status
    // every few seconds (`kubectl karpenter upgrade status` has the numbers).
    let waiting = plan.queue.len() + plan.skipped.len();
    if plan.paused {
        let why = plan
            .paused_reason
            .clone()
            .unwrap_or_else(|| "paused by the operator".into());
        return (false, "Paused", why);
    }
    if waiting > 0 {
        return (
            false,
            "Waiting",
            "drifted nodes are waiting for a step (blocked, or beyond the budget)".into(),
        );
    }
    (false, "UpToDate", "no drifted nodes".into())
}

/// The NodePool's `NodeRegistrationHealthy` verdict: its tracker (seeded, the first time, from
/// the condition as stored, with the generations it was written for) reset when the NodePool's
/// or node class's generation moved on (`generations`), then fed the registration outcomes the
/// NodeClaim lifecycle reported since the last reconcile (upstream
/// `nodepool/registrationhealth`, `nodeclaim/lifecycle` registration and liveness).
fn registration_verdict(
    ctx: &Context,
    pool: &NodePool,
    name: &str,
    generations: (i64, i64),
) -> Verdict {
    let mut health = ctx.state.registration_health();
    let RegistrationHealth { pending, trackers } = &mut *health;
    let tracker = trackers.entry(name.to_string()).or_insert_with(|| {
        let stored = conditions::get(pool.status_conditions(), NODE_REGISTRATION_HEALTHY);
        let class_generation = pool
            .status
            .as_ref()
            .map_or(0, |s| s.node_class_observed_generation);
        Tracker::seeded(
            stored.map(|c| c.status.as_str()),
            stored.map_or("", |c| c.reason.as_str()),
            stored.map_or("", |c| c.message.as_str()),
            (
                stored.and_then(|c| c.observed_generation).unwrap_or(0),
                class_generation,
            ),
        )
    });
    tracker.observe(generations);
    for outcome in pending.remove(name).unwrap_or_default() {
        tracker.record(&outcome);
    }
    tracker.verdict().clone()
}

async fn reconcile(obj: Arc<NodePool>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = obj.metadata.name.clone().unwrap_or_default();
    crate::runtime::unsupported::report_fields(&ctx, obj.as_ref(), "NodePool", &obj.spec);
    let restamp_pending = crate::drift::stamp::stamp_nodepool(&ctx, &obj).await? > 0;
    let mut pool = (*obj).clone();
    let now = ctx.clock.now();
    let verdict = validate(&pool);
    let class_ref = pool.spec.template.spec.node_class_ref.clone();
    // A reference of another group or kind names none of our node classes, whatever its name.
    let unsupported = class_ref.unsupported();
    let class = match unsupported {
        Some(_) => None,
        None => ctx
            .state
            .nodeclasses
            .state()
            .into_iter()
            .find(|nc| nc.metadata.name.as_deref() == Some(class_ref.name.as_str())),
    };
    {
        let mut set = pool.condition_set(now);
        match &verdict {
            Ok(()) => set.set_true(VALIDATION_SUCCEEDED),
            Err(msg) => set.set_false(VALIDATION_SUCCEEDED, VALIDATION_FAILED_REASON, msg),
        };
        match &class {
            None => set.set_false(
                NODE_CLASS_READY,
                "NodeClassNotFound",
                &unsupported.clone().unwrap_or_else(|| {
                    format!("{} {:?} not found", class_ref.kind, class_ref.name)
                }),
            ),
            Some(nc) => {
                let conds = nc
                    .status
                    .as_ref()
                    .map(|s| s.conditions.as_slice())
                    .unwrap_or_default();
                match conditions::get(conds, READY) {
                    Some(c) if c.status == "True" => set.set_true(NODE_CLASS_READY),
                    Some(c) if c.status == "False" => set.set_false(
                        NODE_CLASS_READY,
                        "NodeClassNotReady",
                        &format!(
                            "{} {:?} is not ready: {}",
                            class_ref.kind, class_ref.name, c.message
                        ),
                    ),
                    _ => set.set_unknown_with_reason(
                        NODE_CLASS_READY,
                        "NodeClassNotReady",
                        "node class readiness is unknown",
                    ),
                }
            }
        };
    }
    if let Some(nc) = &class {
        let generations = (
            pool.metadata.generation.unwrap_or(0),
            nc.metadata.generation.unwrap_or(0),
        );
        let verdict = registration_verdict(&ctx, &pool, &name, generations);
        let mut set = pool.condition_set(now);
        match verdict {
            Verdict::Unknown => set.set_unknown(NODE_REGISTRATION_HEALTHY),
            Verdict::Healthy => set.set_true(NODE_REGISTRATION_HEALTHY),
            Verdict::Unhealthy { reason, message } => {
                set.set_false(NODE_REGISTRATION_HEALTHY, &reason, &message)
            }
        };
    }
    if pool.is_static() {
        // Decided on the conditions just computed: Ready gates creating NodeClaims.
        let c = static_capacity::reconcile(&ctx, &Arc::new(pool.clone())).await?;
        let mut set = pool.condition_set(now);
        match c.ok {
            true => set.set_true_with_reason(STATIC_CAPACITY, c.reason, &c.message),
            false => set.set_false(STATIC_CAPACITY, c.reason, &c.message),
        };
    }
    {
        let (status, reason, message) =
            upgrading(&crate::disruption::upgrade::plan_for(&ctx, &pool));
        let mut set = pool.condition_set(now);
        match status {
            true => set.set_true_with_reason(UPGRADING_CONDITION, reason, &message),
            false => set.set_false(UPGRADING_CONDITION, reason, &message),
        };
    }
    let (list, nodes) = counted(&ctx.state.nodeclaims.state(), &name);
    let status = pool.status.get_or_insert_with(Default::default);
    status.resources = list;
    status.nodes = nodes;
    if let Some(nc) = &class {
        status.node_class_observed_generation = nc.metadata.generation.unwrap_or(0);
    }
    if pool.status != obj.status {
        let api: Api<NodePool> = Api::all(ctx.client.clone());
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(status_patch(obj.status.as_ref(), pool.status.as_ref())),
        )
        .await?;
    }
    Ok(Action::requeue(if restamp_pending {
        crate::drift::stamp::RESTAMP_RETRY
    } else {
        RESYNC
    }))
}

/// Resources every NodePool's `status.resources` reports, zero when it has no node (upstream
/// `nodepool/counter` `BaseResources`): a pool whose last node is gone shows `cpu: 0`, not the
/// figures of its last node.
const BASE_RESOURCES: [&str; 5] = ["cpu", "memory", "pods", "ephemeral-storage", "nodes"];

/// The NodePool `name`'s `status.resources` (the summed capacity of its NodeClaims that have a
/// node, as quantities by resource name, with [`BASE_RESOURCES`] at zero when absent, and
/// `nodes` the count) and `status.nodes`, from the NodeClaims in `claims` (upstream
/// `nodepool/counter`).
fn counted(claims: &[Arc<crds::NodeClaim>], name: &str) -> (BTreeMap<String, Quantity>, i64) {
    let mut resources = Resources::default();
    let mut nodes = 0;
    for claim in claims {
        if nodepool_of(claim.metadata.labels.as_ref()) != Some(name) {
            continue;
        }
        let Some(status) = claim.status.as_ref().filter(|s| s.node_name.is_some()) else {
            continue;
        };
        nodes += 1;
        resources.add(&Resources::from_list(&status.capacity).unwrap_or_default());
    }
    let mut list: BTreeMap<String, Quantity> = BASE_RESOURCES
        .iter()
        .map(|r| (r.to_string(), Quantity("0".into())))
        .collect();
    list.extend(resources.to_list());
    list.insert("nodes".into(), Quantity(nodes.to_string()));
    (list, nodes)
}

/// The JSON merge patch (RFC 7386) that turns the stored status `old` into `new`: the new
/// status, with `null` for each resource `old` counted and `new` does not (a merge patch keeps
/// map keys it does not mention, so a resource whose last node went would otherwise keep its
/// figure forever).
fn status_patch(old: Option<&crds::NodePoolStatus>, new: Option<&crds::NodePoolStatus>) -> Value {
    let mut patch = json!({ "status": new });
    let gone = old
        .into_iter()
        .flat_map(|o| o.resources.keys())
        .filter(|k| new.is_none_or(|n| !n.resources.contains_key(*k)));
    for key in gone {
        patch["status"]["resources"][key.as_str()] = Value::Null;
    }
    patch
}

#[cfg(test)]
mod counter_tests {
    use super::*;
    use serde_json::json;

    fn claim(
        pool: &str,
        node: Option<&str>,
        cpu: &str,
        gpus: Option<&str>,
    ) -> Arc<crds::NodeClaim> {
        let mut capacity = json!({"cpu": cpu, "memory": "4Gi", "pods": "29"});
        if let Some(g) = gpus {
            capacity["nvidia.com/gpu"] = json!(g);
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": "c", "labels": {"karpenter.sh/nodepool": pool}},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                         "requirements": []},
                "status": {"nodeName": node, "capacity": capacity}
            }))
            .expect("nodeclaim"),
        )
    }

    fn q(list: &BTreeMap<String, Quantity>, k: &str) -> String {
        list.get(k).map(|q| q.0.clone()).unwrap_or_default()
    }

    #[test]
    fn a_pool_counts_the_capacity_of_its_nodeclaims_with_a_node() {
        let claims = [
            claim("a", Some("n1"), "2", None),
            claim("a", Some("n2"), "4", None),
            claim("a", None, "8", None),
            claim("b", Some("n3"), "16", None),
        ];
        let (list, nodes) = counted(&claims, "a");
        assert_eq!(nodes, 2);
        assert_eq!(q(&list, "cpu"), "6");
        assert_eq!(q(&list, "pods"), "58");
        assert_eq!(q(&list, "nodes"), "2");
        assert_eq!(q(&list, "ephemeral-storage"), "0");
    }

    #[test]
    fn a_pool_whose_last_node_went_reports_zero_and_drops_what_only_that_node_had() {
        let before = crds::NodePoolStatus {
            resources: counted(&[claim("a", Some("n1"), "2", Some("1"))], "a").0,
            nodes: 1,
            ..Default::default()
        };
        assert_eq!(q(&before.resources, "nvidia.com/gpu"), "1");
        let (list, nodes) = counted(&[], "a");
        let after = crds::NodePoolStatus {
            resources: list,
            nodes,
            ..Default::default()
        };
        let patch = status_patch(Some(&before), Some(&after));
        let resources = &patch["status"]["resources"];
        assert_eq!(resources["cpu"], json!("0"));
        assert_eq!(resources["pods"], json!("0"));
        assert_eq!(resources["nodes"], json!("0"));
        assert_eq!(resources["nvidia.com/gpu"], Value::Null);
        assert!(
            resources
                .as_object()
                .expect("map")
                .contains_key("nvidia.com/gpu")
        );
        assert_eq!(patch["status"]["nodes"], json!(0));
    }
}
