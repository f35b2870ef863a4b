//! `orphans [list]` and `orphans delete`: read NodeClaims, Nodes, the pods on suspect Nodes and
//! the cloud's instances; classify; then print, or preview, confirm and clean up.

use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Write};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};

use super::classify::{Inputs, classify};
use super::cloud::{self, Cloud};
use super::plan::{plan, step_count, write_preview};
use super::{CloudView, Orphan, table};
use crate::cli::{DetectArgs, OrphansDeleteArgs, OrphansListArgs, OrphansOutput};
use crate::global_args::GlobalArgs;
use crate::render::TableOptions;
use crate::session::{Connection, Error, Io, Outcome};

/// Asks the user to go ahead.
pub trait Prompt {
    /// `Ok(Some(answer))`, or `Ok(None)` when there is no terminal to ask on.
    ///
    /// Errors: the terminal failed.
    fn confirm(&mut self, question: &str) -> io::Result<Option<bool>>;
}

/// Asks on the terminal with dialoguer (default: no), when both stdin and stderr are terminals.
#[derive(Clone, Copy, Debug, Default)]
pub struct TerminalPrompt;

impl Prompt for TerminalPrompt {
    fn confirm(&mut self, question: &str) -> io::Result<Option<bool>> {
        if !(io::stdin().is_terminal() && io::stderr().is_terminal()) {
            return Ok(None);
        }
        match dialoguer::Confirm::new()
            .with_prompt(question)
            .default(false)
            .interact_opt()
        {
            // Esc or q answers no.
            Ok(answer) => Ok(Some(answer.unwrap_or(false))),
            Err(dialoguer::Error::IO(e)) => Err(e),
        }
    }
}

/// What the cluster and the cloud look like now.
pub struct World {
    /// The orphans found, in table order.
    pub orphans: Vec<Orphan>,
    /// The cloud's instances, or why not.
    pub cloud_view: CloudView,
    /// The cloud, when it was checked.
    pub cloud: Option<Cloud>,
    /// The connection they were read through (its context and server name errors).
    pub conn: Connection,
    /// When the world was looked at.
    pub now: Timestamp,
}

/// Picks the cloud: none with `--no-cloud`; the sandbox's when the server serves its
/// `instances`; else EC2 (feature `aws`).
async fn choose_cloud(
    conn: &Connection,
    args: &DetectArgs,
) -> Result<Result<Cloud, String>, Error> {
    if args.no_cloud {
        return Ok(Err("--no-cloud".to_owned()));
    }
    let groups = conn
        .client
        .list_api_groups()
        .await
        .map_err(|e| conn.list_error("API groups", e))?;
    if groups.groups.iter().any(|g| g.name == crds::sandbox::GROUP) {
        return Ok(Ok(Cloud::sandbox(conn.client.clone())));
    }
    ec2(conn, args).await
}

#[cfg(feature = "aws")]
async fn ec2(conn: &Connection, args: &DetectArgs) -> Result<Result<Cloud, String>, Error> {
    let (cluster, region) = cloud::cluster_name(
        args.cluster_name.as_deref(),
        conn.cluster.as_deref(),
        &conn.context,
    )?;
    let ec2 =
        super::ec2::Ec2Cloud::connect(cluster, args.aws_endpoint_url.as_deref(), region).await?;
    Ok(Ok(Cloud::Ec2(ec2)))
}

#[cfg(not(feature = "aws"))]
async fn ec2(conn: &Connection, args: &DetectArgs) -> Result<Result<Cloud, String>, Error> {
    // Named so the EKS cluster check is exercised in every build.
    let cluster = cloud::cluster_name(
        args.cluster_name.as_deref(),
        conn.cluster.as_deref(),
        &conn.context,
    )
    .map(|(name, _)| format!(" for cluster {name}"))
    .unwrap_or_default();
    Ok(Err(format!(
        "the server is not a sandbox, and this kubectl-karpenter was built without EC2 support; \
         to check EC2 instances{cluster}, install it with `cargo install --features aws`, or pass \
         --no-cloud to silence this"
    )))
}

/// Unfinished pods on `node` (phase not Succeeded or Failed).
async fn pods_on(conn: &Connection, node: &str) -> Result<usize, Error> {
    let api: Api<Pod> = Api::all(conn.client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let pods = api
        .list(&params)
        .await
        .map_err(|e| conn.list_error("Pods", e))?;
    Ok(pods
        .items
        .iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .count())
}

/// Reads everything and classifies it; prints one warning line when the cloud was not checked
/// for a reason other than `--no-cloud`.
///
/// Errors: the cluster or the cloud could not be read.
pub async fn look<E: Write>(
    global: &GlobalArgs,
    args: &DetectArgs,
    err: &mut E,
) -> Result<World, Error> {
    let conn = Connection::open(global).await?;
    let claims = conn.nodeclaims(&ListParams::default()).await?;
    let nodes: Api<Node> = Api::all(conn.client.clone());
    let nodes = nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| conn.list_error("Nodes", e))?
        .items;
    let (cloud, cloud_view) = match choose_cloud(&conn, args).await? {
        Ok(cloud) => {
            let instances = cloud.list().await?;
            let view = CloudView::Checked {
                source: cloud.source(),
                instances,
            };
            (Some(cloud), view)
        }
        Err(reason) => {
            if !args.no_cloud {
                writeln!(err, "warning: cloud instances were not checked: {reason}")?;
            }
            (None, CloudView::Unchecked { reason })
        }
    };
    let now = Timestamp::now();
    let none = BTreeMap::new();
    let mut pods_by_node = BTreeMap::new();
    let mut inputs = Inputs {
        claims: &claims,
        nodes: &nodes,
        pods_by_node: &none,
        cloud: &cloud_view,
        now,
        thresholds: args.thresholds(),
    };
    // Pods are counted only on the Nodes orphans involve, then the details are redone.
    let first = classify(&inputs);
    for node in first.iter().filter_map(|o| o.node.as_ref()) {
        if !pods_by_node.contains_key(&node.name) {
            let n = pods_on(&conn, &node.name).await?;
            pods_by_node.insert(node.name.clone(), n);
        }
    }
    let orphans = if pods_by_node.is_empty() {
        first
    } else {
        inputs.pods_by_node = &pods_by_node;
        classify(&inputs)
    };
    Ok(World {
        orphans,
        cloud_view,
        cloud,
        conn,
        now,
    })
}

/// Writes `orphans` as `args` asks; "No orphans found" on stderr for an empty table or name
/// list.
///
/// Errors: writing failed.
pub fn write_list<O: Write, E: Write>(
    args: &OrphansListArgs,
    orphans: &[Orphan],
    cloud: &CloudView,
    now: Timestamp,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let table = matches!(args.output, OrphansOutput::Table | OrphansOutput::Wide);
    if orphans.is_empty() && (table || args.output == OrphansOutput::Name) {
        writeln!(io.err, "No orphans found")?;
        return Ok(Outcome::Clean);
    }
    match args.output {
        OrphansOutput::Table | OrphansOutput::Wide => {
            let opts = TableOptions {
                wide: args.output == OrphansOutput::Wide,
                headers: !args.no_headers,
                color: io.color,
            };
            table::write_table(io.out, orphans, cloud, now, opts)?;
        }
        OrphansOutput::Json => table::write_document(io.out, orphans, cloud, false)?,
        OrphansOutput::Yaml => table::write_document(io.out, orphans, cloud, true)?,
        OrphansOutput::Name => table::write_names(io.out, orphans)?,
    }
    io.out.flush()?;
    Ok(if orphans.is_empty() {
        Outcome::Clean
    } else {
        Outcome::Found
    })
}

/// `orphans [list]`.
///
/// Errors: see [`look`]; writing failed.
pub async fn list<O: Write, E: Write>(
    global: &GlobalArgs,
    args: &OrphansListArgs,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let world = look(global, &args.detect, io.err).await?;
    write_list(args, &world.orphans, &world.cloud_view, world.now, io)
}

/// The orphans `names` pick (by NAME or `-o name` form), or all of them with `all`.
///
/// Errors: [`Error::UnknownOrphans`] for names that match nothing.
pub fn select(orphans: &[Orphan], names: &[String], all: bool) -> Result<Vec<Orphan>, Error> {
    if all {
        return Ok(orphans.to_vec());
    }
    let matches = |o: &Orphan, n: &str| o.name == n || o.qualified_name() == n;
    let unknown: Vec<String> = names
        .iter()
        .filter(|n| !orphans.iter().any(|o| matches(o, n)))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(Error::UnknownOrphans {
            names: unknown,
            available: orphans.iter().map(|o| o.name.clone()).collect(),
        });
    }
    Ok(orphans
        .iter()
        .filter(|o| names.iter().any(|n| matches(o, n)))
        .cloned()
        .collect())
}

/// `orphans delete`: preview, then (unless `--dry-run`) confirm and apply.
///
/// Errors: see [`look`] and [`select`]; [`Error::NeedsConfirmation`] without a terminal and
/// without `--yes`; [`Error::Incomplete`] when some changes failed.
pub async fn delete<O: Write, E: Write>(
    global: &GlobalArgs,
    args: &OrphansDeleteArgs,
    io: Io<'_, O, E>,
    prompt: &mut dyn Prompt,
) -> Result<Outcome, Error> {
    let world = look(global, &args.detect, io.err).await?;
    let chosen = select(&world.orphans, &args.names, args.all)?;
    if chosen.is_empty() {
        writeln!(io.err, "No orphans found")?;
        return Ok(Outcome::Clean);
    }
    let plans = plan(&chosen, world.cloud_view.checked());
    write_preview(io.out, &plans)?;
    io.out.flush()?;
    let steps = step_count(&plans);
    if args.dry_run {
        writeln!(io.err, "dry run: nothing was changed")?;
        return Ok(Outcome::Found);
    }
    if steps == 0 {
        writeln!(io.err, "nothing to change")?;
        return Ok(Outcome::Found);
    }
    if !args.yes {
        let noun = if chosen.len() == 1 {
            "orphan"
        } else {
            "orphans"
        };
        let question = format!("Clean up {} {noun} ({steps} changes)?", chosen.len());
        match prompt.confirm(&question).map_err(Error::Prompt)? {
            None => return Err(Error::NeedsConfirmation),
            Some(false) => {
                writeln!(io.err, "Aborted; nothing was changed.")?;
                return Ok(Outcome::Found);
            }
            Some(true) => {}
        }
    }
    let applied = super::execute::execute(
        &plans,
        &world.conn.client,
        world.cloud.as_ref(),
        io.out,
        io.err,
    )
    .await?;
    if !applied.failed.is_empty() {
        return Err(Error::Incomplete {
            failed: applied.failed.len(),
            total: steps,
        });
    }
    Ok(Outcome::Clean)
}

#[cfg(test)]
mod tests;
