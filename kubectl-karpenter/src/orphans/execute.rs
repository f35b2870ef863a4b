//! Applies the plans of `orphans delete`: terminates instances through the cloud, deletes Nodes
//! and NodeClaims, and removes Karpenter's finalizer with an optimistic-concurrency patch. Prints
//! one kubectl-style line per change (`node/ip-10-0-1-7.ec2.internal deleted`); a failed
//! termination skips the finalizer removals of the same orphan, so nothing is left running
//! without a record.

use std::fmt::Debug;
use std::io::{self, Write};

use crds::NodeClaim;
use crds::labels::TERMINATION_FINALIZER;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Resource as KubeResource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::Resource;
use super::cloud::Cloud;
use super::plan::{Plan, Step};
use crate::causes::causes;

/// Attempts at a finalizer patch that keeps conflicting with concurrent writers.
const PATCH_ATTEMPTS: usize = 5;

/// What a run of the executor did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Steps that succeeded.
    pub done: usize,
    /// Steps that failed, each as `what: why`.
    pub failed: Vec<String>,
    /// Steps skipped because an earlier step of the same orphan failed.
    pub skipped: usize,
}

/// Applies `plans` in order, writing progress to `out` and failures to `err`.
///
/// Errors: writing to `out` or `err` failed (API and cloud failures are in the [`Applied`]).
pub async fn execute(
    plans: &[Plan],
    client: &kube::Client,
    cloud: Option<&Cloud>,
    out: &mut impl Write,
    err: &mut impl Write,
) -> io::Result<Applied> {
    let nodes: Api<Node> = Api::all(client.clone());
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let mut outcome = Applied::default();
    for plan in plans {
        let mut terminate_failed = false;
        for step in &plan.steps {
            if terminate_failed && matches!(step, Step::RemoveFinalizer { .. }) {
                outcome.skipped += 1;
                continue;
            }
            let result = match step {
                Step::TerminateInstance { id, .. } => match cloud {
                    Some(cloud) => cloud
                        .terminate(id)
                        .await
                        .map(|()| format!("instance/{id} terminated"))
                        .map_err(|e| e.to_string()),
                    None => Err(format!(
                        "cannot terminate instance {id}: no cloud was checked"
                    )),
                },
                Step::DeleteNode { name } => delete(&nodes, "node", name).await,
                Step::DeleteNodeClaim { name } => {
                    delete(&claims, "nodeclaim.karpenter.sh", name).await
                }
                Step::RemoveFinalizer {
                    resource: Resource::Node,
                    name,
                } => remove_finalizer(&nodes, "node", name).await,
                Step::RemoveFinalizer { name, .. } => {
                    remove_finalizer(&claims, "nodeclaim.karpenter.sh", name).await
                }
            };
            match result {
                Ok(line) => {
                    outcome.done += 1;
                    writeln!(out, "{line}")?;
                }
                Err(why) => {
                    if matches!(step, Step::TerminateInstance { .. }) {
                        terminate_failed = true;
                    }
                    writeln!(err, "error: {why}")?;
                    outcome.failed.push(why);
                }
            }
        }
    }
    out.flush()?;
    Ok(outcome)
}

async fn delete<K>(api: &Api<K>, prefix: &str, name: &str) -> Result<String, String>
where
    K: KubeResource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(format!("{prefix}/{name} deleted")),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(format!("{prefix}/{name} already gone")),
        Err(e) => Err(format!("deleting {prefix}/{name}: {}", causes(&e))),
    }
}

/// Removes [`TERMINATION_FINALIZER`] with a merge patch that carries the resourceVersion read,
/// retrying on conflicts.
async fn remove_finalizer<K>(api: &Api<K>, prefix: &str, name: &str) -> Result<String, String>
where
    K: KubeResource + Clone + DeserializeOwned + Debug,
{
    let fail = |e: kube::Error| {
        format!(
            "removing finalizer {TERMINATION_FINALIZER} from {prefix}/{name}: {}",
            causes(&e)
        )
    };
    for _ in 0..PATCH_ATTEMPTS {
        let Some(obj) = api.get_opt(name).await.map_err(fail)? else {
            return Ok(format!("{prefix}/{name} already gone"));
        };
        let finalizers = obj.finalizers();
        if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
            return Ok(format!(
                "{prefix}/{name} has no finalizer {TERMINATION_FINALIZER}"
            ));
        }
        let rest: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != TERMINATION_FINALIZER)
            .collect();
        let patch = json!({"metadata": {
            "finalizers": rest,
            "resourceVersion": obj.resource_version(),
        }});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                return Ok(format!(
                    "{prefix}/{name} finalizer {TERMINATION_FINALIZER} removed"
                ));
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Ok(format!("{prefix}/{name} already gone"));
            }
            Err(e) => return Err(fail(e)),
        }
    }
    Err(format!(
        "removing finalizer {TERMINATION_FINALIZER} from {prefix}/{name}: it kept changing \
         ({PATCH_ATTEMPTS} conflicting writes); run the command again"
    ))
}
