//! The one document `kubectl karpenter status` prints, whatever the format: `nodePools`,
//! `nodeClaims`, `totals`, `otherNodes` (Nodes no NodeClaim names) and `fleet` (the cockpit's
//! summary: pending pods, requested against allocatable, cost, spot share) (camelCase keys, every key always present, `null` for unknown
//! values), built from a snapshot of NodePools, NodeClaims, Nodes, pods and EC2NodeClasses. Tables render it,
//! `-o json|yaml` serialize it, `--watch` compares it. Pure: no I/O.

use std::sync::Arc;

use crds::{EC2NodeClass, NodeClaim, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::capacity::catalog::Catalog;
use serde::Serialize;

use super::fleet::{Fleet, OtherNode, other_nodes, pending_pods};
use super::limits::Sizing;
use super::load::Loads;
use super::pools::{PoolCounts, PoolRow, ReservationUse, build_pool_rows};
use super::rows::{PriceBook, Row, Totals, filter_nodepool};
use super::sort::{SortBy, sort_rows};

/// What was read from the cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Every NodePool (the document keeps only the one `--nodepool` names).
    pub pools: Vec<NodePool>,
    /// Every NodeClaim (or those of the NodePool `--nodepool` names).
    pub claims: Vec<NodeClaim>,
    /// The Nodes (or those of the NodePool `--nodepool` names): their allocatable.
    pub nodes: Vec<Node>,
    /// Every pod not Succeeded or Failed, in every namespace: what runs on each node (shared
    /// with the pod watch's store while `--watch` runs, so a refresh copies no pod).
    pub pods: Vec<Arc<Pod>>,
    /// Every EC2NodeClass (none when they cannot be read): why a node holds what it does.
    pub node_classes: Vec<EC2NodeClass>,
}

/// What to show of a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// Only this NodePool and its NodeClaims (`--nodepool`).
    pub nodepool: Option<String>,
    /// Order of the NodeClaims (`--sort-by`).
    pub sort: SortBy,
}

/// The status document.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Document {
    /// The NodePools, in name order.
    pub node_pools: Vec<PoolRow>,
    /// The NodeClaims, in `--sort-by` order.
    pub node_claims: Vec<Row>,
    /// Totals over `node_claims`.
    pub totals: Totals,
    /// The Nodes no NodeClaim names (Karpenter does not manage them, or their NodeClaim is
    /// gone), in name order.
    pub other_nodes: Vec<OtherNode>,
    /// The summary over `node_claims` and `other_nodes`, with the pods waiting for a node.
    pub fleet: Fleet,
}

impl Document {
    /// The document of `snapshot` as `view` asks, seen at `now`; instance types are sized
    /// from the embedded catalog (when it cannot be read, nothing is explained).
    pub fn build(
        snapshot: &Snapshot,
        view: &View,
        now: Timestamp,
        prices: &dyn PriceBook,
    ) -> Document {
        let wanted = view.nodepool.as_deref();
        let claims = filter_nodepool(snapshot.claims.clone(), wanted);
        let pools: Vec<NodePool> = snapshot
            .pools
            .iter()
            .filter(|p| wanted.is_none() || p.metadata.name.as_deref() == wanted)
            .cloned()
            .collect();
        let loads = Loads::of(&snapshot.nodes, &snapshot.pods);
        let sizing = Sizing::new(&snapshot.node_classes, Catalog::embedded().ok());
        let mut rows: Vec<Row> = claims
            .iter()
            .map(|c| Row::of(c, now, prices, &loads, &sizing))
            .collect();
        sort_rows(&mut rows, view.sort);
        // Counted again from the rows, which know the nodes' health (unhealthy NodeClaims).
        let mut node_pools = build_pool_rows(&pools, &claims, now);
        for pool in &mut node_pools {
            let mine = rows
                .iter()
                .filter(|r| r.nodepool.as_deref() == Some(&pool.name));
            pool.node_claims = PoolCounts::of(mine.map(|r| r.state));
            let class = pools
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(pool.name.as_str()))
                .map(|p| p.spec.template.spec.node_class_ref.name.as_str());
            pool.reservations = snapshot
                .node_classes
                .iter()
                .find(|c| c.metadata.name.as_deref() == class)
                .and_then(ReservationUse::of);
        }
        let others = other_nodes(&snapshot.nodes, &rows, &loads, prices, now);
        Document {
            node_pools,
            totals: Totals::of(&rows),
            fleet: Fleet::of(&rows, &others, pending_pods(&snapshot.pods)),
            other_nodes: others,
            node_claims: rows,
        }
    }

    /// Whether there is nothing to show: no NodePool and no NodeClaim.
    pub fn is_empty(&self) -> bool {
        self.node_pools.is_empty() && self.node_claims.is_empty()
    }

    /// The document with every AGE blanked: what `--watch` compares, so that only real changes
    /// (not the clock) print a new block on a pipe.
    pub fn without_ages(&self) -> Document {
        let mut copy = self.clone();
        for row in &mut copy.node_claims {
            row.age.clear();
        }
        for node in &mut copy.other_nodes {
            node.age.clear();
        }
        copy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::fixtures;

    fn snapshot() -> Snapshot {
        fixtures::snapshot()
    }

    #[test]
    fn nodepool_filter_applies_to_both_sections() {
        let view = View {
            nodepool: Some("gpu".into()),
            ..View::default()
        };
        let doc = Document::build(&snapshot(), &view, fixtures::now(), &fixtures::FixedPrices);
        let pools: Vec<&str> = doc.node_pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(pools, ["gpu"]);
        let claims: Vec<&str> = doc.node_claims.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(claims, ["gpu-pqrst", "gpu-uvwxy"]);
        assert_eq!(doc.totals.total, 2);
        assert_eq!(doc.totals.terminating, 1);

        let view = View {
            nodepool: Some("absent".into()),
            ..View::default()
        };
        let doc = Document::build(&snapshot(), &view, fixtures::now(), &fixtures::FixedPrices);
        assert!(doc.is_empty());
    }

    #[test]
    fn sort_applies_to_the_nodeclaims() {
        let view = View {
            sort: SortBy::Price,
            ..View::default()
        };
        let doc = Document::build(&snapshot(), &view, fixtures::now(), &fixtures::FixedPrices);
        assert_eq!(doc.node_claims[0].name, "gpu-pqrst");
        assert_eq!(
            doc.node_claims.last().map(|r| r.name.as_str()),
            Some("stray")
        );
    }

    /// The ready NodeClaim's node reports `Ready=False` since 40 minutes: the row, its
    /// NodePool's counts and the totals say Unhealthy; JSON says which condition since when and
    /// when repair acts, in camelCase.
    #[test]
    fn a_node_failing_a_repair_policy_shows_as_unhealthy() {
        let mut sick = snapshot();
        let node = sick
            .nodes
            .iter_mut()
            .find(|n| n.metadata.name.as_deref() == Some("ip-10-0-1-17.ec2.internal"))
            .expect("the ready node");
        let since = fixtures::now() - jiff::SignedDuration::from_mins(40);
        node.status.get_or_insert_with(Default::default).conditions =
            Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: "False".into(),
                last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    since,
                )),
                ..Default::default()
            }]);
        let doc = Document::build(
            &sick,
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        let row = doc
            .node_claims
            .iter()
            .find(|r| r.name == "default-abcde")
            .expect("the row");
        assert_eq!(row.state, crate::status::rows::State::Unhealthy);
        let default = &doc.node_pools[0];
        assert_eq!(
            (default.node_claims.ready, default.node_claims.unhealthy),
            (0, 1)
        );
        assert_eq!(doc.totals.unhealthy, 1);
        let json = serde_json::to_value(&doc).expect("json");
        let claim = json["nodeClaims"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "default-abcde"))
            .expect("in JSON");
        assert_eq!(claim["state"], "Unhealthy");
        assert_eq!(
            claim["unhealthy"],
            serde_json::json!({"condition": "Ready=False", "since": "2025-06-01T11:20:00Z",
                "toleration": "30m", "repairAfter": "2025-06-01T11:50:00Z"})
        );
        assert_eq!(json["nodePools"][0]["nodeClaims"]["unhealthy"], 1);
        assert_eq!(json["totals"]["unhealthy"], 1);
        let healthy = Document::build(
            &snapshot(),
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        let json = serde_json::to_value(&healthy).expect("json");
        assert!(
            json["nodeClaims"][0]["unhealthy"].is_null(),
            "present, null"
        );
    }

    #[test]
    fn ages_do_not_count_as_changes() {
        let at = |now: &str| {
            let now: Timestamp = now.parse().expect("time");
            Document::build(&snapshot(), &View::default(), now, &fixtures::FixedPrices)
        };
        let (a, b) = (at("2025-06-01T12:00:00Z"), at("2025-06-01T12:00:07Z"));
        assert_ne!(a, b);
        assert_eq!(a.without_ages(), b.without_ages());
        let mut changed = snapshot();
        crate::fixtures::set_true(&mut changed.claims[2], &["Launched"]);
        let c = Document::build(
            &changed,
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        assert_ne!(a.without_ages(), c.without_ages());
    }
}
