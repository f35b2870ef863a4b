//! `why-pending`: reads the pods (the one named, or those of the namespaces `-n`/`-A` select),
//! their Events, and the cluster objects the provisioner reads (NodePools, EC2NodeClasses,
//! NodeOverlays, NodeClaims, Nodes, DaemonSets, Namespaces, volumes), builds the reports with the pure core
//! and prints them. Exit 1 when some pending pod has no NodePool that can take it.

use std::fmt::Debug;
use std::io::Write;
use std::sync::Arc;

use crds::{EC2NodeClass, NodeOverlay, NodePool};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Event, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use karpenter_core::capacity::InstanceType;
use karpenter_core::capacity::catalog::Catalog;
use karpenter_core::capacity::node_class::{CapacityConfig, CapacityOptions};
use karpenter_core::pod_view::PodView;
use karpenter_core::snapshot::Snapshot;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::NamespaceResourceScope;
use serde::de::DeserializeOwned;

use super::WhyPendingError;
use super::args::{WhyPendingArgs, WhyPendingOutput};
use super::render;
use super::report::{self, PodReport, World};
use crate::decode::{Undecodable, decode_one};
use crate::global_args::{GlobalArgs, Namespaces};
use crate::output;
use crate::session::{Connection, Error, Io, Outcome};

/// The objects of a namespaced kind matching `params`, in `namespace` or in every namespace.
async fn list_in<K>(
    conn: &Connection,
    namespace: Option<&str>,
    params: &ListParams,
    what: &'static str,
) -> Result<Vec<K>, Error>
where
    K: kube::Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(conn.client.clone(), ns),
        None => Api::all(conn.client.clone()),
    };
    conn.list_or_empty(&api, params, what).await
}

/// What [`read_world`] read: the world, and the pods skipped because they do not decode.
struct Read {
    /// The objects the reports are built from.
    world: World,
    /// Pods with a malformed field, each named once (they are left out of `world`).
    skipped: Vec<Undecodable>,
}

/// Reads what the reports need. Pods are decoded one at a time: one that does not decode is
/// skipped (and returned in [`Read::skipped`]) rather than failing the command.
async fn read_world(
    conn: &Connection,
    namespaces: &Namespaces,
    pod_name: Option<&str>,
) -> Result<Read, Error> {
    let ns = namespaces.as_namespace();
    let mut skipped = Vec::new();
    let pods: Vec<Pod> = match pod_name {
        Some(name) => {
            let Some(ns) = ns else {
                return Err(WhyPendingError::NameWithAllNamespaces.into());
            };
            vec![get_pod(conn, ns, name).await?]
        }
        None => {
            let listed = conn
                .list_decoded::<Pod>(ns, &ListParams::default(), "Pods")
                .await?;
            skipped.extend(listed.skipped);
            listed.items
        }
    };
    if !pods
        .iter()
        .any(|p| pod_name.is_some() || report::is_pending(&PodView::from(p)))
    {
        return Ok(Read {
            world: World {
                pods,
                ..World::default()
            },
            skipped,
        });
    }
    // Only Karpenter's nominations matter; the server filters them (Events support a field
    // selector on `reason`).
    let nominated = ListParams::default().fields(&format!(
        "reason={}",
        karpenter_core::provisioning::NOMINATED_REASON
    ));
    let events = list_in::<Event>(conn, ns, &nominated, "Events").await?;
    let nodeclaims = conn
        .nodeclaims(&ListParams::default())
        .await?
        .into_iter()
        .map(Arc::new)
        .collect();
    let all_pods = match ns {
        None if pod_name.is_none() => pods.iter().map(|p| Arc::new(PodView::from(p))).collect(),
        _ => {
            let all = conn
                .list_decoded::<Pod>(None, &ListParams::default(), "Pods")
                .await?;
            for pod in all.skipped {
                if !skipped.contains(&pod) {
                    skipped.push(pod);
                }
            }
            all.items
                .iter()
                .map(|p| Arc::new(PodView::from(p)))
                .collect()
        }
    };
    let snapshot = Snapshot {
        pods: all_pods,
        nodes: conn.list_shared::<Node>("Nodes").await?,
        nodeclaims,
        nodepools: conn.list_shared::<NodePool>("NodePools").await?,
        nodeclasses: conn.list_shared::<EC2NodeClass>("EC2NodeClasses").await?,
        // Instance types as the controller sees them: overlaid, when it applies overlays.
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
        // Placement does not depend on disruption budgets.
        pdbs: Vec::new(),
        // The controller's plan for pods waiting on in-flight NodeClaims lives in its memory;
        // nominations it made are on the pods.
        planned: Default::default(),
    };
    Ok(Read {
        world: World {
            pods,
            events,
            snapshot,
        },
        skipped,
    })
}

/// The cluster's NodeOverlays the controller applies ([`report::overlays_in_effect`]); none
/// when the kind is not served (no NodeOverlay CRD, 404) or the user may not list it (403: a
/// role written before NodeOverlays existed).
///
/// Errors: [`Error::ListOther`] when the call fails otherwise.
pub(crate) async fn overlays_in_effect(conn: &Connection) -> Result<Vec<Arc<NodeOverlay>>, Error> {
    let api: Api<NodeOverlay> = Api::all(conn.client.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(report::overlays_in_effect(list.items)),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => Ok(Vec::new()),
        Err(e) => Err(conn.list_error("NodeOverlays", e)),
    }
}

/// The pod `name` of namespace `ns`, decoded on its own so that a malformed field is reported
/// with its path.
///
/// Errors: [`WhyPendingError::PodNotFound`], [`WhyPendingError::Undecodable`], or
/// [`Error::ListOther`] when the call fails.
async fn get_pod(conn: &Connection, ns: &str, name: &str) -> Result<Pod, Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(conn.client.clone(), ns, &ApiResource::erase::<Pod>(&()));
    let object = api
        .get_opt(name)
        .await
        .map_err(|e| conn.list_error("Pods", e))?
        .ok_or_else(|| WhyPendingError::PodNotFound {
            name: name.to_owned(),
            namespace: ns.to_owned(),
        })?;
    decode_one(&object).map_err(|reason| {
        WhyPendingError::Undecodable {
            name: name.to_owned(),
            namespace: ns.to_owned(),
            reason,
        }
        .into()
    })
}

/// The instance types a node class can launch, as the simulated cloud sells them: the
/// vendored catalog of the region of the node class's resolved subnets
/// ([`Catalog::for_region`]: its zone offerings, and its on-demand prices, us-east-1's as an
/// estimate where it has no table) in their zones, every offering available (the plugin
/// cannot see the controller's insufficient-capacity cache), sized by the node class's kubelet
/// and block device settings with upstream's default `RESERVED_ENIS` and
/// `VM_MEMORY_OVERHEAD_PERCENT`.
///
/// Errors: the node class has resolved no subnets yet, their zones name no region, no EC2
/// data is vendored for that region (the message lists the regions that are), or its kubelet
/// settings do not parse.
pub fn catalog_instance_types(nc: &EC2NodeClass) -> Result<Vec<Arc<InstanceType>>, String> {
    let zones: std::collections::BTreeSet<String> = nc
        .status
        .as_ref()
        .map(|s| s.subnets.iter().map(|s| s.zone.clone()).collect())
        .unwrap_or_default();
    let name = nc.metadata.name.as_deref().unwrap_or_default();
    let Some(first) = zones.iter().next() else {
        return Err(format!(
            "EC2NodeClass {name:?} has resolved no subnets (status.subnets is empty)"
        ));
    };
    let region = crate::price::region_of(first)
        .ok_or_else(|| format!("EC2NodeClass {name:?}: zone {first:?} names no AWS region"))?;
    let catalog = Catalog::for_region(&region).map_err(|e| e.to_string())?;
    let config = CapacityConfig::from_node_class(nc, CapacityOptions::default()).map_err(|e| {
        format!(
            "EC2NodeClass {:?}: {e}",
            nc.metadata.name.as_deref().unwrap_or_default()
        )
    })?;
    Ok(catalog.instance_types(&zones, &config, |_, _, _| false))
}

/// `why-pending`: a warning on stderr for each pod skipped because it does not decode, then the
/// reports of the others.
///
/// Errors: the cluster could not be read; it does not serve Karpenter's CRDs
/// ([`Error::NotInstalled`]); the named pod does not exist or does not decode; writing failed.
pub async fn run<O: Write, E: Write>(
    global: &GlobalArgs,
    args: &WhyPendingArgs,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let conn = Connection::open(global).await?;
    conn.require_karpenter().await?;
    let namespaces = conn.namespaces(global);
    let Read { world, skipped } = read_world(&conn, &namespaces, args.pod_name()).await?;
    for pod in &skipped {
        writeln!(
            io.err,
            "warning: pod {}: does not decode ({}); skipped, the other pods are reported",
            pod.key(),
            pod.reason
        )?;
    }
    let reports = report::build(&world, args.pod_name().is_some(), catalog_instance_types);
    write_reports(args.output, &reports, &namespaces, io)
}

/// Prints `reports` in `format` (a note on stderr when there are none and the format is text)
/// and says whether some pod is stuck.
///
/// Errors: writing or serializing failed.
pub fn write_reports<O: Write, E: Write>(
    format: WhyPendingOutput,
    reports: &[PodReport],
    namespaces: &Namespaces,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    match format {
        WhyPendingOutput::Text if reports.is_empty() => match namespaces {
            Namespaces::All => writeln!(io.err, "No pending pods found")?,
            Namespaces::One(ns) => writeln!(io.err, "No pending pods found in {ns} namespace.")?,
        },
        WhyPendingOutput::Text => render::write_text(io.out, reports, io.color)?,
        WhyPendingOutput::Json => output::write_json_value(io.out, &reports)?,
        WhyPendingOutput::Yaml => output::write_yaml_value(io.out, &reports)?,
    }
    io.out.flush()?;
    Ok(if reports.iter().any(|r| r.state.is_problem()) {
        Outcome::Found
    } else {
        Outcome::Clean
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use testutil::ec2nodeclass;

    use super::*;

    fn resolved(zones: &[&str]) -> EC2NodeClass {
        let subnets: Vec<_> = zones
            .iter()
            .enumerate()
            .map(|(i, z)| json!({"id": format!("subnet-{i}"), "zone": z}))
            .collect();
        ec2nodeclass("default")
            .merge(json!({"status": {"subnets": subnets}}))
            .build()
    }

    #[test]
    fn instance_types_come_from_the_catalog_of_the_subnets_region() {
        let types = catalog_instance_types(&resolved(&["eu-west-1a", "eu-west-1b"]))
            .expect("eu-west-1 is vendored");
        let m5 = types
            .iter()
            .find(|t| t.name == "m5.large")
            .expect("m5.large in eu-west-1");
        let zones: std::collections::BTreeSet<&str> =
            m5.offerings.iter().map(|o| o.zone.as_str()).collect();
        assert_eq!(zones, ["eu-west-1a", "eu-west-1b"].into());
        assert_eq!(
            m5.labels
                .get(crds::labels::TOPOLOGY_REGION_LABEL)
                .map(String::as_str),
            Some("eu-west-1")
        );

        let err = catalog_instance_types(&resolved(&["us-gov-west-1a"]))
            .expect_err("no GovCloud zone offerings are vendored");
        assert!(err.contains("us-gov-west-1"), "{err}");
        let err = catalog_instance_types(&resolved(&[])).expect_err("unresolved");
        assert!(err.contains("resolved no subnets"), "{err}");
    }
}
