//! Finding orphans (pure): NodeClaims, Nodes and the cloud's instances in, orphans out, as seen
//! at an injected `now`. NodeClaims and Nodes are matched by providerID; instances by
//! providerID, and by their `karpenter.sh/nodeclaim` tag for NodeClaims not yet launched.
//! NodeClaims that share a providerID are found by [`duplicates`].

mod duplicates;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use crds::NodeClaim;
use crds::conditions::{self, LAUNCHED, REGISTERED};
use crds::labels::NODEPOOL_LABEL;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{CloudInstance, CloudView, InstanceState, Kind, ObjectRef, Orphan, Thresholds};
use crate::age::human_duration;

/// Everything the classification looks at.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// Every NodeClaim of the cluster.
    pub claims: &'a [NodeClaim],
    /// Every Node of the cluster; only those labelled `karpenter.sh/nodepool` can be orphans.
    pub nodes: &'a [Node],
    /// Unfinished pods per Node name (only Nodes that were counted appear).
    pub pods_by_node: &'a BTreeMap<String, usize>,
    /// The cloud's instances, or why they were not checked.
    pub cloud: &'a CloudView,
    /// The instant the check is made.
    pub now: Timestamp,
    /// When things count as orphans.
    pub thresholds: Thresholds,
}

fn non_empty(s: Option<&String>) -> Option<&str> {
    s.map(String::as_str).filter(|s| !s.is_empty())
}

fn object_ref(meta: &ObjectMeta) -> ObjectRef {
    ObjectRef {
        name: meta.name.clone().unwrap_or_default(),
        deleting: meta.deletion_timestamp.is_some(),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
    }
}

fn label(meta: &ObjectMeta, key: &str) -> Option<String> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .filter(|v| !v.is_empty())
        .cloned()
}

/// `now - then`, or zero for a time in the future.
fn elapsed(now: Timestamp, then: Timestamp) -> SignedDuration {
    now.duration_since(then).max(SignedDuration::ZERO)
}

/// Whether `then` is at least `d` before `now`; an unknown time counts as old.
fn older_than(now: Timestamp, then: Option<Timestamp>, d: Duration) -> bool {
    let d = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
    then.is_none_or(|t| now.duration_since(t) >= d)
}

/// A threshold printed like an age (`5m`, `15m`, `30s`).
pub fn format_duration(d: Duration) -> String {
    human_duration(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
}

/// Indexes over the inputs, built once.
struct Index<'a> {
    instances: Option<&'a [CloudInstance]>,
    by_provider: HashMap<&'a str, &'a CloudInstance>,
    by_tag: HashMap<&'a str, &'a CloudInstance>,
    nodes_by_provider: HashMap<&'a str, &'a Node>,
    nodes_by_name: HashMap<&'a str, &'a Node>,
}

impl<'a> Index<'a> {
    fn new(input: &Inputs<'a>) -> Index<'a> {
        let instances = input.cloud.instances();
        let all = instances.unwrap_or_default();
        Index {
            instances,
            by_provider: all.iter().map(|i| (i.provider_id.as_str(), i)).collect(),
            by_tag: all
                .iter()
                .filter_map(|i| Some((non_empty(i.nodeclaim.as_ref())?, i)))
                .collect(),
            nodes_by_provider: input
                .nodes
                .iter()
                .filter_map(|n| Some((non_empty(n.spec.as_ref()?.provider_id.as_ref())?, n)))
                .collect(),
            nodes_by_name: input
                .nodes
                .iter()
                .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
                .collect(),
        }
    }

    /// The instance behind a providerID (or, without one, tagged for the NodeClaim `tag`).
    fn instance(&self, provider_id: Option<&str>, tag: Option<&str>) -> InstanceState {
        let Some(_) = self.instances else {
            return InstanceState::Unchecked {
                provider_id: provider_id.map(str::to_owned),
            };
        };
        let found = match provider_id {
            Some(pid) => self.by_provider.get(pid),
            None => tag.and_then(|t| self.by_tag.get(t)),
        };
        match (found, provider_id) {
            (Some(i), _) => InstanceState::Running((*i).clone()),
            (None, Some(pid)) => InstanceState::Gone {
                provider_id: pid.to_owned(),
            },
            (None, None) => InstanceState::None,
        }
    }
}

/// "node X still present (finalizers: a; 3 pods)" and the like.
fn node_clause(node: &ObjectRef, pods: Option<usize>, what: &str) -> String {
    let mut extra = Vec::new();
    if node.deleting {
        extra.push("deleting".to_owned());
    }
    if !node.finalizers.is_empty() {
        extra.push(format!("finalizers: {}", node.finalizers.join(", ")));
    }
    match pods {
        Some(1) => extra.push("1 pod".to_owned()),
        Some(n) if n > 0 => extra.push(format!("{n} pods")),
        _ => {}
    }
    if extra.is_empty() {
        format!("node {} {what}", node.name)
    } else {
        format!("node {} {what} ({})", node.name, extra.join(", "))
    }
}

fn instance_clause(instance: &InstanceState) -> Option<String> {
    match instance {
        InstanceState::Running(i) => Some(format!("instance {} running", i.id)),
        InstanceState::Gone { .. } => Some("instance gone".to_owned()),
        InstanceState::Unchecked {
            provider_id: Some(_),
        } => Some("instance not checked".to_owned()),
        InstanceState::Unchecked { provider_id: None } | InstanceState::None => None,
    }
}

/// Every orphan, sorted by kind, then name.
pub fn classify(input: &Inputs) -> Vec<Orphan> {
    let index = Index::new(input);
    // A NodeClaim that duplicates another's providerID is reported as that alone: any other
    // verdict's clean-up would take the shared instance down with it.
    let mut duplicates = duplicates::duplicates(input, &index);
    let mut out: Vec<Orphan> = input
        .claims
        .iter()
        .filter_map(|c| {
            c.metadata
                .name
                .as_deref()
                .and_then(|n| duplicates.remove(n))
                .or_else(|| classify_claim(c, input, &index))
        })
        .collect();
    let claimed: HashSet<&str> = input
        .claims
        .iter()
        .filter_map(|c| non_empty(c.status.as_ref()?.provider_id.as_ref()))
        .collect();
    out.extend(
        input
            .nodes
            .iter()
            .filter_map(|n| classify_node(n, &claimed, input, &index)),
    );
    let names: HashSet<&str> = input
        .claims
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    for instance in index.instances.unwrap_or_default() {
        if instance.terminating
            || claimed.contains(instance.provider_id.as_str())
            || non_empty(instance.nodeclaim.as_ref()).is_some_and(|n| names.contains(n))
            || !older_than(
                input.now,
                instance.launch_time,
                input.thresholds.min_instance_age,
            )
        {
            continue;
        }
        let node = index
            .nodes_by_provider
            .get(instance.provider_id.as_str())
            .map(|n| object_ref(&n.metadata));
        let mut detail = vec![match non_empty(instance.nodeclaim.as_ref()) {
            Some(claim) => format!("tagged for nodeclaim {claim}, which does not exist"),
            None => "no karpenter.sh/nodeclaim tag".to_owned(),
        }];
        if let Some(node) = &node {
            detail.push(format!("node {} registered for it", node.name));
        }
        out.push(Orphan {
            kind: Kind::InstanceWithoutNodeClaim,
            name: instance.id.clone(),
            nodepool: instance.nodepool.clone().filter(|p| !p.is_empty()),
            nodeclaim: None,
            node,
            pods: None,
            instance: InstanceState::Running(instance.clone()),
            since: instance.launch_time,
            detail,
        });
    }
    out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    out
}

fn classify_claim(claim: &NodeClaim, input: &Inputs, index: &Index) -> Option<Orphan> {
    let t = &input.thresholds;
    let now = input.now;
    let meta = &claim.metadata;
    let name = meta.name.as_deref()?;
    let status = claim.status.as_ref();
    let provider_id = status.and_then(|s| non_empty(s.provider_id.as_ref()));
    let conds = status.map_or(&[][..], |s| &s.conditions[..]);
    let created = meta.creation_timestamp.as_ref().map(|t| t.0);
    let instance = index.instance(provider_id, Some(name));
    let node = provider_id
        .and_then(|p| index.nodes_by_provider.get(p))
        .or_else(|| {
            status
                .and_then(|s| non_empty(s.node_name.as_ref()))
                .and_then(|n| index.nodes_by_name.get(n))
        })
        .map(|n| object_ref(&n.metadata));
    let pods = node
        .as_ref()
        .and_then(|n| input.pods_by_node.get(&n.name).copied());
    let launched_at = conditions::get(conds, LAUNCHED)
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.0);
    let mut detail = Vec::new();
    let (kind, since) = if let Some(deleted) = meta.deletion_timestamp.as_ref().map(|t| t.0) {
        if !older_than(now, Some(deleted), t.stuck_after) {
            return None;
        }
        detail.push(format!(
            "deleting for {}",
            human_duration(elapsed(now, deleted))
        ));
        let mut waiting = Vec::new();
        if let Some(node) = &node {
            waiting.push(node_clause(node, pods, "still present"));
        }
        waiting.extend(instance_clause(&instance));
        let finalizers = meta.finalizers.clone().unwrap_or_default();
        if !finalizers.is_empty() {
            waiting.push(format!("finalizers {}", finalizers.join(", ")));
        }
        if !waiting.is_empty() {
            detail.push(format!("waiting on: {}", waiting.join(", ")));
        }
        (Kind::StuckTerminating, Some(deleted))
    } else if let InstanceState::Gone { provider_id } = &instance {
        let since = launched_at.or(created);
        if !older_than(now, since, t.min_instance_age) {
            return None;
        }
        detail.push(format!("instance {provider_id} no longer exists"));
        if let Some(node) = &node {
            detail.push(node_clause(node, pods, "still present"));
        }
        (Kind::InstanceGone, since)
    } else if launched_at.is_none() {
        if !older_than(now, created, t.launch_timeout) {
            return None;
        }
        let age = created.map_or_else(|| "ever".to_owned(), |c| human_duration(elapsed(now, c)));
        detail.push(format!(
            "not launched after {age} (launch timeout {})",
            format_duration(t.launch_timeout)
        ));
        if let Some(c) = conditions::get(conds, LAUNCHED) {
            let mut why = format!("Launched={}", c.status);
            for part in [&c.reason, &c.message] {
                if !part.is_empty() {
                    why.push_str(": ");
                    why.push_str(part.trim());
                }
            }
            detail.push(why);
        }
        if let InstanceState::Running(i) = &instance {
            detail.push(format!("instance {} running, tagged for it", i.id));
        }
        (Kind::NotLaunched, created)
    } else if !conditions::is_true(conds, REGISTERED) {
        if !older_than(now, launched_at, t.registration_ttl) {
            return None;
        }
        let age = launched_at.map_or_else(String::new, |l| human_duration(elapsed(now, l)));
        detail.push(format!(
            "launched {age} ago, not registered (registration TTL {})",
            format_duration(t.registration_ttl)
        ));
        if let Some(node) = &node {
            detail.push(node_clause(
                node,
                pods,
                "joined but the NodeClaim is not marked Registered",
            ));
        }
        detail.extend(instance_clause(&instance));
        (Kind::NotRegistered, launched_at)
    } else {
        return None;
    };
    Some(Orphan {
        kind,
        name: name.to_owned(),
        nodepool: label(meta, NODEPOOL_LABEL),
        nodeclaim: Some(object_ref(meta)),
        node,
        pods,
        instance,
        since,
        detail,
    })
}

fn classify_node(
    node: &Node,
    claimed: &HashSet<&str>,
    input: &Inputs,
    index: &Index,
) -> Option<Orphan> {
    let meta = &node.metadata;
    let nodepool = label(meta, NODEPOOL_LABEL)?;
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| non_empty(s.provider_id.as_ref()));
    if provider_id.is_some_and(|p| claimed.contains(p)) {
        return None;
    }
    let this = object_ref(meta);
    let pods = input.pods_by_node.get(&this.name).copied();
    let instance = match provider_id {
        Some(pid) => index.instance(Some(pid), None),
        None => InstanceState::None,
    };
    let mut detail = vec![match provider_id {
        Some(pid) => format!("no NodeClaim has providerID {pid}"),
        None => "no spec.providerID".to_owned(),
    }];
    detail.extend(instance_clause(&instance));
    if this.deleting {
        detail.push(format!(
            "deleting (finalizers: {})",
            if this.finalizers.is_empty() {
                "none".to_owned()
            } else {
                this.finalizers.join(", ")
            }
        ));
    }
    match pods {
        Some(1) => detail.push("1 pod".to_owned()),
        Some(n) if n > 0 => detail.push(format!("{n} pods")),
        _ => {}
    }
    Some(Orphan {
        kind: Kind::NodeWithoutNodeClaim,
        name: this.name.clone(),
        nodepool: Some(nodepool),
        nodeclaim: None,
        node: Some(this),
        pods,
        instance,
        since: meta.creation_timestamp.as_ref().map(|t| t.0),
        detail,
    })
}

#[cfg(test)]
mod tests;
