//! The whole fleet at a glance, as the `status --watch` cockpit's summary shows it and `-o json`
//! carries it as `fleet` and `otherNodes`: the Nodes no NodeClaim names (nodes Karpenter does not
//! manage, such as an EKS managed node group's, or a node left behind by its NodeClaim), the pods
//! waiting for a node, the pods' requests against every node's allocatable, the hourly and
//! monthly cost and how much of it is spot. Pure: the Nodes, pods, rows and price book come in as
//! arguments.

use std::borrow::Borrow;
use std::collections::HashSet;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::pod_view::PodView;
use karpenter_core::scheduling::pod::is_terminal;
use serde::Serialize;

use super::load::{Allocatable, Amounts, Loads};
use super::rows::{PriceBook, Row, State};
use crate::age;
use crds::labels::{
    CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, TOPOLOGY_REGION_LABEL,
    TOPOLOGY_ZONE_LABEL,
};

/// Hours in a month as AWS bills them (and eks-node-viewer multiplies): 730.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// The capacity type label of an EKS managed node group's nodes (`ON_DEMAND` or `SPOT`).
pub const EKS_CAPACITY_TYPE_LABEL: &str = "eks.amazonaws.com/capacityType";

/// The capacity type of Karpenter's spot offerings (`karpenter.sh/capacity-type=spot`).
pub const SPOT: &str = "spot";

/// A Node no NodeClaim names: one Karpenter does not manage, or one its NodeClaim left behind.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OtherNode {
    /// Node name.
    pub name: String,
    /// Its `karpenter.sh/nodepool` label: set on a node Karpenter launched whose NodeClaim is
    /// gone (`kubectl karpenter orphans` lists it); `null` on a node Karpenter does not manage.
    #[serde(rename = "nodePool")]
    pub nodepool: Option<String>,
    /// `node.kubernetes.io/instance-type` label.
    pub instance_type: Option<String>,
    /// `karpenter.sh/capacity-type`, else an EKS managed node group's
    /// `eks.amazonaws.com/capacityType` spelled as Karpenter spells it (`on-demand`, `spot`).
    pub capacity_type: Option<String>,
    /// `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// kubectl's STATUS of the Node: `Ready`, `NotReady` or `Unknown`, with
    /// `,SchedulingDisabled` when it is cordoned.
    pub status: String,
    /// Pods bound to it and not Succeeded or Failed, DaemonSet and static pods included.
    pub pods: usize,
    /// Of `pods`, those consolidation would have to move (not DaemonSet or static pods).
    pub reschedulable_pods: usize,
    /// The pods' summed requests (`cpu` in millicores, `memory` in bytes).
    pub requests: Amounts,
    /// Its `status.allocatable` (`cpu` in millicores, `memory` in bytes); `null` when unknown.
    pub allocatable: Option<Allocatable>,
    /// Hourly price of its instance type and capacity type in USD, when known.
    #[serde(rename = "pricePerHour")]
    pub price: Option<f64>,
    /// Creation time (RFC 3339).
    pub created: Option<Timestamp>,
    /// Age, formatted like kubectl.
    pub age: String,
}

fn node_label(node: &Node, key: &str) -> Option<String> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .filter(|v| !v.is_empty())
        .cloned()
}

/// kubectl's STATUS column of a Node: its `Ready` condition (`Unknown` without one), plus
/// `,SchedulingDisabled` when `spec.unschedulable` is set.
pub fn node_status(node: &Node) -> String {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    let mut status = match ready {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }
    .to_owned();
    if node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
    {
        status.push_str(",SchedulingDisabled");
    }
    status
}

impl OtherNode {
    /// The row of `node`, with its pods and allocatable from `loads`, priced by `prices`, seen
    /// at `now`.
    pub fn of(node: &Node, loads: &Loads, prices: &dyn PriceBook, now: Timestamp) -> OtherNode {
        let name = node.metadata.name.clone().unwrap_or_default();
        let instance_type = node_label(node, INSTANCE_TYPE_LABEL);
        let capacity_type = node_label(node, CAPACITY_TYPE_LABEL).or_else(|| {
            node_label(node, EKS_CAPACITY_TYPE_LABEL)
                .map(|t| t.to_ascii_lowercase().replace('_', "-"))
        });
        let zone = node_label(node, TOPOLOGY_ZONE_LABEL);
        let region = node_label(node, TOPOLOGY_REGION_LABEL);
        let price = instance_type.as_deref().and_then(|t| {
            prices.hourly_price(
                t,
                region.as_deref(),
                zone.as_deref(),
                capacity_type.as_deref(),
            )
        });
        let load = loads.of_node(&name);
        let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
        OtherNode {
            nodepool: node_label(node, NODEPOOL_LABEL),
            instance_type,
            capacity_type,
            zone,
            status: node_status(node),
            pods: load.pods.pods,
            reschedulable_pods: load.pods.reschedulable,
            requests: load.pods.requests,
            allocatable: load.allocatable,
            price,
            created,
            age: age::age(created, now),
            name,
        }
    }
}

/// The Nodes no NodeClaim in `rows` names, in name order.
pub fn other_nodes(
    nodes: &[Node],
    rows: &[Row],
    loads: &Loads,
    prices: &dyn PriceBook,
    now: Timestamp,
) -> Vec<OtherNode> {
    let named: HashSet<&str> = rows.iter().filter_map(|r| r.node.as_deref()).collect();
    let mut others: Vec<OtherNode> = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|name| !named.contains(name))
        })
        .map(|n| OtherNode::of(n, loads, prices, now))
        .collect();
    others.sort_by(|a, b| a.name.cmp(&b.name));
    others
}

/// Pods waiting for a node: not bound to one, not Succeeded or Failed, not being deleted.
pub fn pending_pods<P: Borrow<Pod>>(pods: &[P]) -> usize {
    pods.iter()
        .map(|p| PodView::from(p.borrow()))
        .filter(|p| {
            let bound = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
            !bound && !is_terminal(p) && p.metadata.deletion_timestamp.is_none()
        })
        .count()
}

/// The cockpit's summary over every node shown (NodeClaims and other nodes).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    /// NodeClaims (every lifecycle state).
    pub node_claims: usize,
    /// Nodes no NodeClaim names ([`OtherNode`]).
    pub other_nodes: usize,
    /// Pods waiting for a node ([`pending_pods`]).
    pub pending_pods: usize,
    /// The pods' requests on every node (`cpu` in millicores, `memory` in bytes).
    pub requested: Amounts,
    /// The allocatable of every node whose allocatable is known (`cpu` in millicores, `memory`
    /// in bytes); a NodeClaim whose Node has not joined counts its own allocatable.
    pub allocatable: Amounts,
    /// What the nodes that stay cost, USD per hour: every priced node but the terminating
    /// ones (rounded to a millionth).
    pub price_per_hour: f64,
    /// `price_per_hour` × [`HOURS_PER_MONTH`], USD per month.
    pub price_per_month: f64,
    /// What the terminating NodeClaims cost until they are gone, USD per hour (not in
    /// `price_per_hour`).
    pub terminating_price_per_hour: f64,
    /// Nodes that stay (not terminating) with capacity type `spot`.
    pub spot_nodes: usize,
    /// Nodes that stay (not terminating), spot or not.
    pub staying_nodes: usize,
    /// What the spot nodes that stay cost, USD per hour (part of `price_per_hour`).
    pub spot_price_per_hour: f64,
    /// Nodes whose price is not known (they add nothing to the prices).
    pub unpriced: usize,
}

/// Rounds a sum of prices to a millionth (sums of binary fractions carry noise).
fn round_price(p: f64) -> f64 {
    (p * 1e6).round() / 1e6
}

impl Fleet {
    /// The summary of `rows` and `others`, with `pending` pods waiting.
    pub fn of(rows: &[Row], others: &[OtherNode], pending: usize) -> Fleet {
        let mut fleet = Fleet {
            node_claims: rows.len(),
            other_nodes: others.len(),
            pending_pods: pending,
            ..Fleet::default()
        };
        let claims = rows.iter().map(|r| {
            (
                r.state == State::Terminating,
                r.capacity_type.as_deref(),
                r.requests,
                r.allocatable,
                r.price,
            )
        });
        let others = others.iter().map(|o| {
            (
                false,
                o.capacity_type.as_deref(),
                o.requests,
                o.allocatable,
                o.price,
            )
        });
        for (terminating, capacity, requests, allocatable, price) in claims.chain(others) {
            fleet.requested.cpu += requests.cpu;
            fleet.requested.memory += requests.memory;
            if let Some(a) = allocatable {
                fleet.allocatable.cpu += a.cpu;
                fleet.allocatable.memory += a.memory;
            }
            let spot = capacity == Some(SPOT);
            if !terminating {
                fleet.staying_nodes += 1;
                fleet.spot_nodes += usize::from(spot);
            }
            match (price, terminating) {
                (None, _) => fleet.unpriced += 1,
                (Some(p), true) => fleet.terminating_price_per_hour += p,
                (Some(p), false) => {
                    fleet.price_per_hour += p;
                    if spot {
                        fleet.spot_price_per_hour += p;
                    }
                }
            }
        }
        fleet.price_per_hour = round_price(fleet.price_per_hour);
        fleet.spot_price_per_hour = round_price(fleet.spot_price_per_hour);
        fleet.terminating_price_per_hour = round_price(fleet.terminating_price_per_hour);
        fleet.price_per_month = round_price(fleet.price_per_hour * HOURS_PER_MONTH);
        fleet
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::document::{Document, View};
    use crate::status::fixtures;

    #[test]
    fn a_node_no_nodeclaim_names_is_listed_apart_with_its_pods_and_price() {
        let doc = Document::build(
            &fixtures::snapshot(),
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        let names: Vec<&str> = doc.other_nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["ip-10-0-9-9.ec2.internal"]);
        let other = &doc.other_nodes[0];
        assert_eq!(other.nodepool, None);
        assert_eq!(other.capacity_type.as_deref(), Some("on-demand"));
        assert_eq!(other.price, Some(0.096));
        assert_eq!((other.pods, other.requests.cpu), (1, 500));
        assert_eq!(other.status, "Ready");
        assert_eq!(other.age, "30d");
    }

    #[test]
    fn the_summary_leaves_terminating_nodes_out_of_the_cost() {
        let doc = Document::build(
            &fixtures::snapshot(),
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        let fleet = &doc.fleet;
        assert_eq!((fleet.node_claims, fleet.other_nodes), (7, 1));
        assert_eq!(fleet.pending_pods, 1, "the pod with no node");
        // Two m5.large (the ready NodeClaim and the other node), two spot c5.xlarge and the
        // initializing g5.xlarge stay; the terminating spot g5.xlarge is on its way out.
        assert_eq!(fleet.price_per_hour, 1.335);
        assert_eq!(fleet.terminating_price_per_hour, 0.064);
        assert_eq!(fleet.price_per_month, 974.55);
        assert_eq!((fleet.spot_nodes, fleet.staying_nodes), (2, 7));
        assert_eq!(fleet.spot_price_per_hour, 0.137);
        assert_eq!(fleet.requested.cpu, 1100 + 100 + 600 + 500);
    }

    #[test]
    fn node_status_reads_like_kubectl() {
        let ready = testutil::node("a").ready("True").build();
        assert_eq!(node_status(&ready), "Ready");
        let mut cordoned = testutil::node("b").ready("False").build();
        cordoned
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        assert_eq!(node_status(&cordoned), "NotReady,SchedulingDisabled");
        assert_eq!(node_status(&testutil::node("c").build()), "Unknown");
    }
}
