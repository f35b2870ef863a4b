//! What `karpenter sandbox` observes and reports: pods bound, pods Karpenter cannot serve (with
//! its reason), NodeClaims by phase and instance type, fleet cost per hour; when the cluster has
//! settled; and the progress line shown while it runs.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use sandbox::audit::{AuditEntry, RequestAttributes};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use karpenter_core::scheduling::solver::NO_READY_NODEPOOL;

/// A pod that is not bound.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PendingPod {
    /// `namespace/name`.
    pub name: String,
    /// Karpenter's FailedScheduling message, else kube-scheduler's condition message.
    pub reason: String,
    /// Whether Karpenter's latest word on the pod is that no NodePool can serve it.
    #[serde(skip)]
    pub karpenter_unschedulable: bool,
}

/// One observation of the cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observation {
    /// Pods that are not terminal.
    pub pods_total: usize,
    /// Of those, bound to a node.
    pub pods_bound: usize,
    /// The rest: not terminal and not bound, each with why.
    pub pending: Vec<PendingPod>,
    /// Every NodeClaim, deleting ones included.
    pub claims_total: usize,
    /// NodeClaims with `Launched=True`.
    pub claims_launched: usize,
    /// NodeClaims with `Registered=True`.
    pub claims_registered: usize,
    /// NodeClaims with `Initialized=True`.
    pub claims_initialized: usize,
    /// NodeClaims being deleted.
    pub claims_deleting: usize,
    /// Running instances by type.
    pub by_instance_type: BTreeMap<String, usize>,
    /// Running instances by (instance type, capacity type), e.g. `("m5.large", "spot")`.
    pub by_offering: BTreeMap<(String, String), usize>,
    /// Running instances by capacity type (`on-demand`, `spot`, `reserved`).
    pub by_capacity_type: BTreeMap<String, usize>,
    /// Sum of the running instances' offering prices, USD/hour.
    pub cost_per_hour: f64,
    /// Whether the spot prices in that sum are the simulated cloud's estimates (it has no spot
    /// price data: 35-70% of on-demand per type and zone), not prices EC2 quoted.
    pub spot_prices_estimated: bool,
}

/// A running instance as the report counts it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunningInstance {
    /// Instance type, e.g. `m5.large`.
    pub instance_type: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Its offering's price, USD/hour.
    pub price: f64,
}

fn condition_true(obj: &Value, type_: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// The fields of a pod [`observe`] reads, decoded from the stored JSON without the rest: the
/// sandbox observes every second, and 20,400 pods decoded whole as `serde_json::Value`s (about
/// 24 KB each) were a 480 MB transient each time (BENCHMARKS.md, "Sandbox memory"). Missing or
/// null fields read as empty.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodView {
    metadata: Option<MetaView>,
    spec: Option<PodSpecView>,
    status: Option<PodStatusView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
struct MetaView {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct PodSpecView {
    node_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
struct PodStatusView {
    phase: Option<String>,
    conditions: Option<Vec<ConditionView>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
struct ConditionView {
    #[serde(rename = "type")]
    type_: Option<String>,
    message: Option<String>,
}

/// The fields of a core/v1 Event [`observe`] reads (Karpenter's scheduling verdicts), decoded
/// as [`PodView`] is.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EventView {
    source: Option<SourceView>,
    reason: Option<String>,
    message: Option<String>,
    involved_object: Option<MetaView>,
    event_time: Option<String>,
    last_timestamp: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
struct SourceView {
    component: Option<String>,
}

/// Build an observation from the sandbox's objects and the cloud's running instances;
/// `spot_prices_estimated` says whether the cloud's spot prices are estimates (the simulated
/// cloud's).
pub fn observe(
    pods: &[PodView],
    events: &[EventView],
    nodeclaims: &[impl Borrow<Value>],
    instances: &[RunningInstance],
    spot_prices_estimated: bool,
) -> Observation {
    // Karpenter's latest scheduling verdict per pod uid: (time, reason, message).
    let mut verdicts: HashMap<&str, (&str, &str, &str)> = HashMap::new();
    for e in events {
        if e.source.as_ref().and_then(|s| s.component.as_deref()) != Some("karpenter") {
            continue;
        }
        let reason = e.reason.as_deref().unwrap_or("");
        if reason != "FailedScheduling" && reason != "Nominated" {
            continue;
        }
        let Some(uid) = e.involved_object.as_ref().and_then(|o| o.uid.as_deref()) else {
            continue;
        };
        let at = e
            .event_time
            .as_deref()
            .or(e.last_timestamp.as_deref())
            .unwrap_or("");
        let message = e.message.as_deref().unwrap_or("");
        if verdicts.get(uid).is_none_or(|(t, _, _)| at >= *t) {
            verdicts.insert(uid, (at, reason, message));
        }
    }
    let mut o = Observation::default();
    for p in pods {
        let status = p.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        if phase == "Succeeded" || phase == "Failed" {
            continue;
        }
        o.pods_total += 1;
        if p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
        {
            o.pods_bound += 1;
            continue;
        }
        let meta = p.metadata.as_ref();
        let name = format!(
            "{}/{}",
            meta.and_then(|m| m.namespace.as_deref()).unwrap_or(""),
            meta.and_then(|m| m.name.as_deref()).unwrap_or("")
        );
        let uid = meta.and_then(|m| m.uid.as_deref()).unwrap_or("");
        let scheduler_message = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_.as_deref() == Some("PodScheduled"))
            })
            .and_then(|c| c.message.as_deref())
            .unwrap_or("waiting for the scheduler");
        let (reason, karpenter_unschedulable) = match verdicts.get(uid) {
            // Without a ready NodePool the verdict is provisional: NodePools (and their node
            // classes) may still be becoming ready, and the provisioner will try again.
            Some((_, "FailedScheduling", m)) => (m.to_string(), !m.contains(NO_READY_NODEPOOL)),
            Some((_, _, m)) => (m.to_string(), false),
            None => (scheduler_message.to_string(), false),
        };
        o.pending.push(PendingPod {
            name,
            reason,
            karpenter_unschedulable,
        });
    }
    for c in nodeclaims.iter().map(Borrow::borrow) {
        o.claims_total += 1;
        o.claims_launched += usize::from(condition_true(c, "Launched"));
        o.claims_registered += usize::from(condition_true(c, "Registered"));
        o.claims_initialized += usize::from(condition_true(c, "Initialized"));
        o.claims_deleting += usize::from(c.pointer("/metadata/deletionTimestamp").is_some());
    }
    for i in instances {
        *o.by_instance_type
            .entry(i.instance_type.clone())
            .or_default() += 1;
        *o.by_offering
            .entry((i.instance_type.clone(), i.capacity_type.clone()))
            .or_default() += 1;
        *o.by_capacity_type
            .entry(i.capacity_type.clone())
            .or_default() += 1;
        o.cost_per_hour += i.price;
    }
    o.spot_prices_estimated = spot_prices_estimated;
    o
}

impl Observation {
    /// Settled: every pod is bound or Karpenter reported that no NodePool can serve it, and every
    /// NodeClaim is initialized with none being deleted.
    pub fn settled(&self) -> bool {
        self.pending.iter().all(|p| p.karpenter_unschedulable)
            && self.claims_total == self.claims_initialized
            && self.claims_deleting == 0
    }

    /// One line of progress: `pods 118/120 bound | nodeclaims 5 (5 launched, 5 registered, 4 initialized) | $1.2345/hour`.
    pub fn progress_line(&self, elapsed_secs: u64) -> String {
        format!(
            "[{elapsed_secs:>4}s] pods {}/{} bound | nodeclaims {} ({} launched, {} registered, {} initialized) | ${:.4}/hour",
            self.pods_bound,
            self.pods_total,
            self.claims_total,
            self.claims_launched,
            self.claims_registered,
            self.claims_initialized,
            self.cost_per_hour
        )
    }
}

/// The `--report` document.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Pods: not terminal, bound, and the unbound ones with why.
    pub pods: PodReport,
    /// NodeClaims: all, initialized, and running instances per type.
    pub nodeclaims: ClaimReport,
    /// Sum of the launched offerings' prices, USD/hour.
    pub cost_per_hour_usd: f64,
    /// Seconds from start until settled (or until exit when it never settled).
    pub settle_seconds: f64,
    /// Whether the cluster settled ([`Observation::settled`]) before exit.
    pub settled: bool,
    /// The controller's API writes per initialized NodeClaim.
    pub writes_per_nodeclaim: ClaimWrites,
    /// Whether spot prices in the cost are estimates ([`Observation::spot_prices_estimated`]).
    pub spot_prices_estimated: bool,
    /// Running instances by instance type and capacity type, for the text report.
    #[serde(skip)]
    pub by_offering: BTreeMap<(String, String), usize>,
}

/// The controller's API writes per NodeClaim: every write request of the controller (its
/// User-Agent) that succeeded and names a NodeClaim or that NodeClaim's Node (create, update,
/// patch, delete, of the object or a subresource), counted over the sandbox's run, for the
/// NodeClaims that are initialized. In a run that only provisions (`--until-settled`), that is
/// from each NodeClaim's creation to its initialization. Upstream's node-ownership design
/// expects about two writes on the NodeClaim (create, then status as it launches) beyond the
/// lifecycle's conditions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClaimWrites {
    /// Initialized NodeClaims counted.
    pub nodeclaims: usize,
    /// Writes per NodeClaim, on average.
    pub mean: f64,
    /// The most writes one NodeClaim had.
    pub max: usize,
    /// Writes per NodeClaim on average, by request as RBAC names it: `create nodeclaims`,
    /// `patch nodeclaims/status`, `patch nodes`, ...
    pub mean_by_request: BTreeMap<String, f64>,
}

impl ClaimWrites {
    /// Count `entries` (the audit log, oldest first) of clients whose User-Agent starts with
    /// `user_agent` for `claims`: (NodeClaim name, its node's name if it has one).
    pub fn count(
        entries: &[AuditEntry],
        user_agent: &str,
        claims: &[(String, Option<String>)],
    ) -> ClaimWrites {
        let mut owner: HashMap<(&str, &str), &str> = HashMap::new();
        for (claim, node) in claims {
            owner.insert(("nodeclaims", claim), claim);
            if let Some(node) = node {
                owner.insert(("nodes", node), claim);
            }
        }
        let mut per_claim: HashMap<&str, usize> = HashMap::new();
        let mut by_request: BTreeMap<String, usize> = BTreeMap::new();
        for e in entries {
            if !e.user_agent.starts_with(user_agent) || !(200..300).contains(&e.status) {
                continue;
            }
            let RequestAttributes::Resource(r) = &e.attributes else {
                continue;
            };
            let Some(name) = r.name.as_deref() else {
                continue;
            };
            let Some(claim) = owner.get(&(r.resource.as_str(), name)) else {
                continue;
            };
            *per_claim.entry(claim).or_default() += 1;
            *by_request
                .entry(format!("{} {}", r.verb, r.qualified_resource()))
                .or_default() += 1;
        }
        let n = claims.len();
        let mean = |count: usize| {
            if n == 0 {
                0.0
            } else {
                (count as f64 / n as f64 * 100.0).round() / 100.0
            }
        };
        ClaimWrites {
            nodeclaims: n,
            mean: mean(per_claim.values().sum()),
            max: per_claim.values().copied().max().unwrap_or(0),
            mean_by_request: by_request.into_iter().map(|(k, c)| (k, mean(c))).collect(),
        }
    }
}

/// Pods in the report.
#[derive(Clone, Debug, Serialize)]
pub struct PodReport {
    /// Pods that are not terminal.
    pub total: usize,
    /// Pods bound to a node.
    pub bound: usize,
    /// Pods not bound, with why.
    pub unschedulable: Vec<PendingPod>,
}

/// NodeClaims in the report.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimReport {
    /// Every NodeClaim, deleting ones included.
    pub total: usize,
    /// NodeClaims with `Initialized=True`.
    pub initialized: usize,
    /// Running instances per instance type.
    pub by_instance_type: BTreeMap<String, usize>,
    /// Running instances per capacity type (`on-demand`, `spot`, `reserved`).
    pub by_capacity_type: BTreeMap<String, usize>,
}

impl Report {
    /// The report of a final observation.
    pub fn new(
        o: &Observation,
        settle_seconds: f64,
        settled: bool,
        writes_per_nodeclaim: ClaimWrites,
    ) -> Report {
        Report {
            pods: PodReport {
                total: o.pods_total,
                bound: o.pods_bound,
                unschedulable: o.pending.clone(),
            },
            nodeclaims: ClaimReport {
                total: o.claims_total,
                initialized: o.claims_initialized,
                by_instance_type: o.by_instance_type.clone(),
                by_capacity_type: o.by_capacity_type.clone(),
            },
            cost_per_hour_usd: (o.cost_per_hour * 10_000.0).round() / 10_000.0,
            settle_seconds: (settle_seconds * 10.0).round() / 10.0,
            settled,
            writes_per_nodeclaim,
            spot_prices_estimated: o.spot_prices_estimated,
            by_offering: o.by_offering.clone(),
        }
    }

    /// The report as text: `Settled after 12.3s`, pod and NodeClaim counts, cost per hour and
    /// per month (730 hours), instance types, and pending pods grouped by reason.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} after {:.1}s",
            if self.settled {
                "Settled"
            } else {
                "Not settled"
            },
            self.settle_seconds
        );
        let _ = writeln!(
            s,
            "Pods: {} bound of {}; {} not bound",
            self.pods.bound,
            self.pods.total,
            self.pods.unschedulable.len()
        );
        let _ = writeln!(
            s,
            "NodeClaims: {} ({} initialized)",
            self.nodeclaims.total, self.nodeclaims.initialized
        );
        let spot = self
            .nodeclaims
            .by_capacity_type
            .get("spot")
            .copied()
            .unwrap_or(0);
        let estimate = match (spot, self.spot_prices_estimated) {
            (1.., true) => {
                "; spot prices are estimates (35-70% of on-demand: the simulated cloud has no \
                 spot price data)"
            }
            _ => "",
        };
        let _ = writeln!(
            s,
            "Cost: ${:.4}/hour (${:.2}/month){estimate}",
            self.cost_per_hour_usd,
            self.cost_per_hour_usd * 730.0
        );
        let w = &self.writes_per_nodeclaim;
        if w.nodeclaims > 0 {
            let _ = writeln!(
                s,
                "Controller API writes per NodeClaim: {:.1} on average, at most {}",
                w.mean, w.max
            );
        }
        if !self.by_offering.is_empty() {
            let _ = writeln!(s, "Instance types:");
            let mut offerings: Vec<(&(String, String), &usize)> = self.by_offering.iter().collect();
            offerings.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let width = offerings
                .iter()
                .map(|((t, _), _)| t.len())
                .max()
                .unwrap_or(0);
            for ((t, capacity_type), n) in offerings {
                let _ = writeln!(s, "  {n:>5}  {t:<width$}  {capacity_type}");
            }
        }
        let mut reasons: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for p in &self.pods.unschedulable {
            reasons
                .entry(p.reason.as_str())
                .or_default()
                .push(p.name.as_str());
        }
        if !reasons.is_empty() {
            let _ = writeln!(s, "Pods not bound:");
            for (reason, names) in reasons {
                let shown: Vec<&str> = names.iter().take(5).copied().collect();
                let more = if names.len() > 5 {
                    format!(" and {} more", names.len() - 5)
                } else {
                    String::new()
                };
                let _ = writeln!(s, "  {}{more}: {reason}", shown.join(", "));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The views of `objects`, as the sandbox decodes them from its store.
    fn views<T: serde::de::DeserializeOwned>(objects: &[Value]) -> Vec<T> {
        objects
            .iter()
            .map(|o| serde_json::from_value(o.clone()).expect("a view"))
            .collect()
    }

    #[test]
    fn settles_only_when_pending_pods_are_karpenter_unschedulable() {
        let pods = vec![
            json!({"metadata": {"name": "a", "namespace": "default", "uid": "1"}, "spec": {"nodeName": "n"}, "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "b", "namespace": "default", "uid": "2"}, "spec": {}, "status": {"phase": "Pending"}}),
        ];
        let claims = vec![json!({"metadata": {"name": "c"}, "status": {"conditions": [
            {"type": "Launched", "status": "True"}, {"type": "Registered", "status": "True"}, {"type": "Initialized", "status": "True"}]}})];
        let instances = vec![RunningInstance {
            instance_type: "m5.large".into(),
            capacity_type: "spot".into(),
            price: 0.096,
        }];
        let pods: Vec<PodView> = views(&pods);
        let o = observe(&pods, &[], &claims, &instances, true);
        assert!(!o.settled(), "b has no verdict yet");
        let failed = json!({"source": {"component": "karpenter"}, "reason": "FailedScheduling", "message": "Failed to schedule pod, too big",
            "involvedObject": {"uid": "2"}, "eventTime": "2026-01-01T00:00:01.000000Z"});
        let o = observe(
            &pods,
            &views(std::slice::from_ref(&failed)),
            &claims,
            &instances,
            true,
        );
        assert!(o.settled());
        assert_eq!(o.pending[0].reason, "Failed to schedule pod, too big");
        let early = json!({"source": {"component": "karpenter"}, "reason": "FailedScheduling",
            "message": format!("Failed to schedule pod, {NO_READY_NODEPOOL}"),
            "involvedObject": {"uid": "2"}, "eventTime": "2026-01-01T00:00:01.000000Z"});
        assert!(
            !observe(&pods, &views(&[early]), &claims, &instances, true).settled(),
            "no ready NodePool yet is not a final verdict"
        );
        let later = json!({"source": {"component": "karpenter"}, "reason": "Nominated", "message": "Pod should schedule on: nodeclaim/x",
            "involvedObject": {"uid": "2"}, "eventTime": "2026-01-01T00:00:02.000000Z"});
        assert!(
            !observe(&pods, &views(&[failed, later]), &claims, &instances, true).settled(),
            "a later nomination supersedes"
        );
        let writes = ClaimWrites::count(&[], "karpenter-rs/", &[]);
        let r = Report::new(&o, 12.34, true, writes);
        let v = serde_json::to_value(&r).expect("serializes");
        assert_eq!(v["pods"]["unschedulable"][0]["name"], "default/b");
        assert_eq!(v["nodeclaims"]["by_instance_type"]["m5.large"], 1);
        assert_eq!(v["cost_per_hour_usd"], 0.096);
        assert_eq!(v["nodeclaims"]["by_capacity_type"]["spot"], 1);
        assert_eq!(v["spot_prices_estimated"], true);
        // Each line says the capacity type, and the cost says the spot price is an estimate.
        let text = r.text();
        assert!(text.contains("      1  m5.large  spot\n"), "{text}");
        assert!(
            text.contains("Cost: $0.0960/hour ($70.08/month); spot prices are estimates"),
            "{text}"
        );
    }
}
