//! `upgrade status|pause|resume|step` against the cluster: reads the NodePools (refusing a
//! `--nodepool` that names none), and for `status` their NodeClaims, pods and
//! PodDisruptionBudgets and the disruption history (ConfigMap `karpenter-disruption-history`); for the controls, sends each NodePool the patch [`control::plan`]
//! computes, re-reading and recomputing on a conflict. Exit 1 from `status` when anything is
//! drifted.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use crds::conditions::{self, DRIFTED};
use crds::history::Record;
use crds::{NodePool, StatusConditions};
use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::pod_view::PodView;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::Value;

use super::UpgradeError;
use super::args::{Selection, UpgradeAction, UpgradeArgs, UpgradeOutput};
use super::control::{self, Action, ControlResult};
use super::render;
use super::report::{self, PoolStatus};
use crate::global_args::GlobalArgs;
use crate::session::{Connection, Error, Io, Outcome};

/// Writes of one `step` that may conflict with other writers before giving up.
const ATTEMPTS: usize = 5;

/// `upgrade …`.
///
/// Errors: no target for a control (before connecting); the cluster could not be read or
/// changed; no such NodePool; writing failed.
pub async fn run<O: Write, E: Write>(
    global: &GlobalArgs,
    args: &UpgradeArgs,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let selection = args.action.selection()?;
    let output = args.action.args().output;
    let conn = Connection::open(global).await?;
    let pools = nodepools(&conn, &selection).await?;
    let action = match &args.action {
        UpgradeAction::Status(_) => {
            let histories = crate::history::command::read_histories(
                &conn,
                global.namespace.as_deref(),
                &mut *io.err,
            )
            .await?;
            let records: Vec<Record> = histories.into_iter().flat_map(|h| h.records).collect();
            let statuses = read_status(&conn, &pools, &records).await?;
            return write_status(output, &statuses, Timestamp::now(), io);
        }
        UpgradeAction::Pause(_) => Action::Pause,
        UpgradeAction::Resume(_) => Action::Resume,
        UpgradeAction::Step(_) => Action::Step,
    };
    let waiting = if action == Action::Step {
        waiting_steps(&conn.nodeclaims(&ListParams::default()).await?)
    } else {
        BTreeMap::new()
    };
    let api: Api<NodePool> = Api::all(conn.client.clone());
    control(&api, action, &pools, &waiting, output, io).await
}

/// Per NodePool, its drifted NodeClaims that wait for a step: Drifted, not deleting, not
/// already being replaced by a step.
fn waiting_steps(claims: &[crds::NodeClaim]) -> BTreeMap<String, usize> {
    let mut waiting = BTreeMap::new();
    for c in claims {
        let drifted = conditions::is_true(c.status_conditions(), DRIFTED);
        let in_step = c
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(crds::upgrade::REPLACEMENT_ANNOTATION));
        let pool = c
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crds::labels::NODEPOOL_LABEL));
        if let (true, false, None, Some(pool)) =
            (drifted, in_step, &c.metadata.deletion_timestamp, pool)
        {
            *waiting.entry(pool.clone()).or_default() += 1;
        }
    }
    waiting
}

/// The NodePools `selection` names, in name order.
async fn nodepools(conn: &Connection, selection: &Selection) -> Result<Vec<NodePool>, Error> {
    let api: Api<NodePool> = Api::all(conn.client.clone());
    let mut pools = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            return Err(UpgradeError::NotInstalled {
                server: conn.server.clone(),
                context: conn.context.clone(),
            }
            .into());
        }
        Err(e) => return Err(conn.list_error("NodePools", e)),
    };
    pools.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    match selection {
        Selection::All => Ok(pools),
        Selection::One(name) => {
            conn.require_nodepool(&pools, name)?;
            pools.retain(|p| p.metadata.name.as_deref() == Some(name.as_str()));
            Ok(pools)
        }
    }
}

/// Reads the NodeClaims, and the pods and PodDisruptionBudgets when a NodeClaim is drifted
/// (only drifted NodeClaims' pods matter), and plans every NodePool; `records` is the
/// disruption history, whose `Drifted` records are the NodePools' finished steps.
async fn read_status(
    conn: &Connection,
    pools: &[NodePool],
    records: &[Record],
) -> Result<Vec<PoolStatus>, Error> {
    if pools.is_empty() {
        return Ok(Vec::new());
    }
    let mut params = ListParams::default();
    if let [pool] = pools {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        params = params.labels(&format!("{}={name}", crds::labels::NODEPOOL_LABEL));
    }
    let claims = conn.nodeclaims(&params).await?;
    let drifted = claims
        .iter()
        .any(|c| conditions::is_true(c.status_conditions(), DRIFTED));
    let (mut pods, mut pdbs) = (Vec::new(), Vec::new());
    if drifted {
        pods = conn.list_all::<PodView>("Pods").await?;
        pdbs = conn
            .list_all::<PodDisruptionBudget>("PodDisruptionBudgets")
            .await?;
    }
    let pods: Vec<Arc<PodView>> = pods.into_iter().map(Arc::new).collect();
    let pdbs: Vec<Arc<PodDisruptionBudget>> = pdbs.into_iter().map(Arc::new).collect();
    Ok(report::statuses(
        pools,
        &claims,
        &pods,
        &pdbs,
        records,
        Timestamp::now(),
    ))
}

/// Prints `statuses` in `format` ("No resources found" on stderr when there are none and the
/// format is text) and says whether any NodePool has drifted NodeClaims.
///
/// Errors: writing or serializing failed.
pub fn write_status<O: Write, E: Write>(
    format: UpgradeOutput,
    statuses: &[PoolStatus],
    now: Timestamp,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    match format {
        UpgradeOutput::Text if statuses.is_empty() => writeln!(io.err, "No resources found")?,
        UpgradeOutput::Text => render::write_text(io.out, statuses, now, io.color)?,
        UpgradeOutput::Json => render::write_document(io.out, statuses, false)?,
        UpgradeOutput::Yaml => render::write_document(io.out, statuses, true)?,
    }
    io.out.flush()?;
    Ok(if statuses.iter().any(PoolStatus::drifted) {
        Outcome::Found
    } else {
        Outcome::Clean
    })
}

/// Reads and patches NodePools: the API server, or a fake in tests.
pub(crate) trait NodePools {
    /// The NodePool `name`, if it exists.
    async fn get(&self, name: &str) -> Result<Option<NodePool>, kube::Error>;
    /// Sends a merge patch.
    async fn patch(&self, name: &str, patch: &Value) -> Result<(), kube::Error>;
}

impl NodePools for Api<NodePool> {
    async fn get(&self, name: &str) -> Result<Option<NodePool>, kube::Error> {
        self.get_opt(name).await
    }

    async fn patch(&self, name: &str, patch: &Value) -> Result<(), kube::Error> {
        Api::patch(self, name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
    }
}

/// Applies `action` to one NodePool as read: sends its patch, and on a conflict (only `step`
/// is guarded by the resourceVersion) reads it again and recomputes.
///
/// Errors: the patch failed, the NodePool is gone, or it kept conflicting.
pub(crate) async fn apply(
    api: &impl NodePools,
    action: Action,
    pool: &NodePool,
    waiting: usize,
) -> Result<ControlResult, UpgradeError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let verb = action.verb();
    let failed = |source: kube::Error| UpgradeError::Patch {
        verb,
        nodepool: name.clone(),
        source: Box::new(source),
    };
    let gone = || UpgradeError::Gone {
        verb,
        nodepool: name.clone(),
    };
    let mut current = pool.clone();
    for _ in 0..ATTEMPTS {
        let planned = control::plan(action, &current, waiting);
        let Some(patch) = planned.patch else {
            return Ok(planned.result);
        };
        match api.patch(&name, &patch).await {
            Ok(()) => return Ok(planned.result),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                current = api.get(&name).await.map_err(failed)?.ok_or_else(gone)?;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Err(gone()),
            Err(e) => return Err(failed(e)),
        }
    }
    Err(UpgradeError::Conflict {
        verb,
        nodepool: name,
        attempts: ATTEMPTS,
    })
}

/// Applies `action` to every NodePool of `pools`, printing a line per NodePool (or the results
/// as a document) and errors as they happen. Always exit 0 when all succeed: a control finds
/// no problems.
///
/// Errors: the one NodePool failed (its error), or some of several failed
/// ([`UpgradeError::Incomplete`]); writing failed.
async fn control<O: Write, E: Write>(
    api: &impl NodePools,
    action: Action,
    pools: &[NodePool],
    waiting: &BTreeMap<String, usize>,
    format: UpgradeOutput,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    if pools.is_empty() {
        writeln!(io.err, "No resources found")?;
        return Ok(Outcome::Clean);
    }
    let mut results = Vec::new();
    let mut errors = Vec::new();
    for pool in pools {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let waiting = waiting.get(name).copied().unwrap_or(0);
        match apply(api, action, pool, waiting).await {
            Ok(result) => {
                if format == UpgradeOutput::Text {
                    render::write_results(io.out, std::slice::from_ref(&result))?;
                    io.out.flush()?;
                }
                results.push(result);
            }
            Err(e) if pools.len() == 1 => return Err(e.into()),
            Err(e) => {
                writeln!(io.err, "error: {e}")?;
                errors.push(e);
            }
        }
    }
    match format {
        UpgradeOutput::Text => {}
        UpgradeOutput::Json => render::write_document(io.out, &results, false)?,
        UpgradeOutput::Yaml => render::write_document(io.out, &results, true)?,
    }
    io.out.flush()?;
    if errors.is_empty() {
        Ok(Outcome::Clean)
    } else {
        Err(UpgradeError::Incomplete {
            failed: errors.len(),
            total: pools.len(),
        }
        .into())
    }
}

#[cfg(test)]
mod tests;
