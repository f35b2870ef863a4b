//! `drift explain`: reads the NodeClaims (the one named, those of a NodePool, or all), the
//! NodePools and EC2NodeClasses, explains each NodeClaim with the pure core and prints the
//! reports. Exit 1 when any NodeClaim is drifted.

use std::io::Write;

use crds::{EC2NodeClass, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_core::lifecycle::drift::HashVersions;
use kube::api::{Api, ListParams};

use super::args::{ExplainArgs, ExplainOutput};
use super::explain::report_all;
use super::render;
use super::report::Report;
use super::resolve::{self, Kind};
use crate::global_args::GlobalArgs;
use crate::session::{Connection, Error, Io, Outcome};

/// The Node `name` names, unless the name is qualified as a NodeClaim; `None` when there is
/// no such Node.
async fn read_node(conn: &Connection, name: &str) -> Result<Option<Node>, Error> {
    let (bare, kind) = resolve::strip_kind(name);
    if kind == Some(Kind::NodeClaim) {
        return Ok(None);
    }
    let api: Api<Node> = Api::all(conn.client.clone());
    api.get_opt(bare)
        .await
        .map_err(|e| conn.list_error("Nodes", e))
}

/// `drift explain`.
///
/// Errors: the cluster could not be read; the name leads to no NodeClaim
/// ([`resolve::ResolveError`]); writing failed.
pub async fn explain<O: Write, E: Write>(
    global: &GlobalArgs,
    args: &ExplainArgs,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let conn = Connection::open(global).await?;
    let mut params = ListParams::default();
    if let Some(pool) = &args.nodepool {
        params = params.labels(&format!("{}={pool}", crds::labels::NODEPOOL_LABEL));
    }
    let claims = conn.nodeclaims(&params).await?;
    let claims = crate::status::filter_nodepool(claims, args.nodepool.as_deref());
    let mut node_name = None;
    let selected = match &args.name {
        None => claims.iter().collect(),
        Some(name) => {
            let node = match resolve::by_name(name, &claims) {
                Some(_) => None,
                None => read_node(&conn, name).await?,
            };
            node_name = node.as_ref().and_then(|n| n.metadata.name.clone());
            vec![resolve::resolve(
                name,
                &claims,
                node.as_ref(),
                &conn.context,
            )?]
        }
    };
    let (pools, classes) = if selected.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        (
            conn.list_all::<NodePool>("NodePools").await?,
            conn.list_all::<EC2NodeClass>("EC2NodeClasses").await?,
        )
    };
    let mut reports = report_all(selected, &pools, &classes, &HashVersions::default());
    // A NodeClaim found through its Node's providerID may not have recorded the Node yet.
    if let (Some(node), [report]) = (node_name, reports.as_mut_slice()) {
        report.node.get_or_insert(node);
    }
    write_reports(args.output, &reports, Timestamp::now(), io)
}

/// Prints `reports` in `format` ("No resources found" on stderr when there are none and the
/// format is text) and says whether any is drifted.
///
/// Errors: writing or serializing failed.
pub fn write_reports<O: Write, E: Write>(
    format: ExplainOutput,
    reports: &[Report],
    now: Timestamp,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    match format {
        ExplainOutput::Text if reports.is_empty() => writeln!(io.err, "No resources found")?,
        ExplainOutput::Text => render::write_text(io.out, reports, now, io.color)?,
        ExplainOutput::Json => render::write_document(io.out, reports, false)?,
        ExplainOutput::Yaml => render::write_document(io.out, reports, true)?,
    }
    io.out.flush()?;
    Ok(if reports.iter().any(|r| r.drifted) {
        Outcome::Found
    } else {
        Outcome::Clean
    })
}
