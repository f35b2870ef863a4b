//! `disruption` and `disruption explain`: reads what the orchestrator reads (NodePools,
//! EC2NodeClasses, NodeOverlays the controller applies, NodeClaims, Nodes, Pods, PodDisruptionBudgets, DaemonSets, Namespaces,
//! volumes), lists each node class's instance types from the vendored catalog of its region, computes the
//! report or the what-if with the pure core and prints it.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use crds::{EC2NodeClass, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use karpenter_core::disruption::consolidation::Settings;
use karpenter_core::disruption::report::{self, Report};
use karpenter_core::pod_view::PodView;
use karpenter_core::provisioning::plan::Listing;
use karpenter_core::snapshot::Snapshot;
use kube::api::ListParams;

use super::DisruptionError;
use super::args::{DisruptionAction, DisruptionArgs, DisruptionOutput, ExplainArgs};
use super::render;
use crate::global_args::GlobalArgs;
use crate::output;
use crate::session::{Connection, Error, Io, Outcome};
use crate::why_pending::command::{catalog_instance_types, overlays_in_effect};

/// The cluster as the orchestrator sees it.
///
/// Errors: a list failed ([`Error::NotInstalled`] when the server has no NodeClaims).
async fn read_snapshot(conn: &Connection) -> Result<Snapshot, Error> {
    let nodeclaims = conn
        .nodeclaims(&ListParams::default())
        .await?
        .into_iter()
        .map(Arc::new)
        .collect();
    Ok(Snapshot {
        pods: conn.list_shared::<PodView>("Pods").await?,
        nodes: conn.list_shared::<Node>("Nodes").await?,
        nodeclaims,
        nodepools: conn.list_shared::<NodePool>("NodePools").await?,
        nodeclasses: conn.list_shared::<EC2NodeClass>("EC2NodeClasses").await?,
        // Nodes and replacements priced as the controller prices them.
        nodeoverlays: overlays_in_effect(conn).await?,
        daemonsets: conn.list_shared::<DaemonSet>("DaemonSets").await?,
        namespaces: conn.list_shared::<Namespace>("Namespaces").await?,
        pvcs: conn
            .list_shared::<PersistentVolumeClaim>("PersistentVolumeClaims")
            .await?,
        pvs: conn
            .list_shared::<PersistentVolume>("PersistentVolumes")
            .await?,
        storage_classes: conn.list_shared::<StorageClass>("StorageClasses").await?,
        // Attach limits of existing nodes.
        csinodes: conn.list_shared::<CSINode>("CSINodes").await?,
        pdbs: conn
            .list_shared::<PodDisruptionBudget>("PodDisruptionBudgets")
            .await?,
        // The controller's plan for pods waiting on in-flight NodeClaims lives in its memory;
        // nominations it made are on the pods.
        planned: Default::default(),
    })
}

/// Each node class's instance types from the embedded catalog (a node class without resolved
/// subnets lists an error, and its NodePools get no replacements).
pub fn catalog_listings(snap: &Snapshot) -> HashMap<String, Listing> {
    snap.nodeclasses
        .iter()
        .map(|nc| {
            let listing = catalog_instance_types(nc).map(Arc::new);
            (nc.metadata.name.clone().unwrap_or_default(), listing)
        })
        .collect()
}

/// Keeps only `nodepool`'s NodePool section and nodes.
pub fn only_nodepool(report: &mut Report, nodepool: &str) {
    report.nodepools.retain(|p| p.nodepool == nodepool);
    report
        .nodes
        .retain(|n| n.nodepool.as_deref() == Some(nodepool));
}

/// `disruption` and `disruption explain`.
///
/// Errors: the cluster could not be read; `--nodepool` or the node named does not exist;
/// writing failed.
pub async fn run<O: Write, E: Write>(
    global: &GlobalArgs,
    args: &DisruptionArgs,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let conn = Connection::open(global).await?;
    let snap = read_snapshot(&conn).await?;
    let listings = catalog_listings(&snap);
    let settings = Settings {
        now: Timestamp::now(),
        spot_to_spot: args.spot_to_spot,
        hash_versions: Default::default(),
        min_values_policy: args.min_values_policy,
    };
    match &args.action {
        Some(DisruptionAction::Explain(explain)) => {
            write_explain(&snap, &listings, &settings, explain, io)
        }
        None => {
            if let Some(pool) = &args.nodepool {
                let pools: Vec<NodePool> = snap.nodepools.iter().map(|p| (**p).clone()).collect();
                conn.require_nodepool(&pools, pool)?;
            }
            let mut report = report::report(&snap, &listings, &settings);
            if let Some(pool) = &args.nodepool {
                only_nodepool(&mut report, pool);
            }
            write_report(args.output, &report, io)
        }
    }
}

/// Prints `report` in `format`.
///
/// Errors: writing or serializing failed.
pub fn write_report<O: Write, E: Write>(
    format: DisruptionOutput,
    report: &Report,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    match format {
        DisruptionOutput::Text => render::write_report(io.out, report, io.color)?,
        DisruptionOutput::Json => output::write_json_value(io.out, report)?,
        DisruptionOutput::Yaml => output::write_yaml_value(io.out, report)?,
    }
    io.out.flush()?;
    Ok(Outcome::Clean)
}

/// Computes and prints the what-if of `args.name`.
///
/// Errors: no such Karpenter node, or one not initialized yet; writing failed.
pub fn write_explain<O: Write, E: Write>(
    snap: &Snapshot,
    listings: &HashMap<String, Listing>,
    settings: &Settings,
    args: &ExplainArgs,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let what_if = report::explain(snap, listings, settings, args.bare_name())
        .map_err(DisruptionError::from)?;
    match args.output {
        DisruptionOutput::Text => render::write_explain(io.out, &what_if, io.color)?,
        DisruptionOutput::Json => output::write_json_value(io.out, &what_if)?,
        DisruptionOutput::Yaml => output::write_yaml_value(io.out, &what_if)?,
    }
    io.out.flush()?;
    Ok(Outcome::Clean)
}
