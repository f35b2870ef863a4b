//! What every command of the plugin runs with: the [`Connection`] to the cluster the global
//! flags select (kubeconfig, context, API server, namespace) and its list helpers, the [`Io`]
//! handles output goes to, the one [`Error`] a command fails with (exit code 2) and the
//! [`Outcome`] it ends with (exit code 0 or 1). Commands build on this module; the dispatcher in
//! `run` sits above them.

use std::fmt::Debug;
use std::io::{self, Write};

use crds::NodeClaim;
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde::de::DeserializeOwned;

use crate::causes::causes;
use crate::decode::{Decoded, decode_each};
use crate::drift::resolve::ResolveError;
use crate::global_args::{GlobalArgs, Namespaces};
use crate::kubeconfig::{self, Loaded};
use crate::orphans::cloud_error::CloudError;
use crate::output::OutputError;
use crate::request_timeout::AnswerTimeoutLayer;
use crate::upgrade::UpgradeError;
use crate::why_pending::WhyPendingError;

/// Why a command failed (printed as `error: …`, exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable kubeconfig or context.
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    /// The client could not be built from the configuration.
    #[error("creating a client for context \"{context}\": {}", causes(source))]
    Client {
        /// The kubeconfig context used (`in-cluster` for in-cluster credentials).
        context: String,
        /// kube's error building the client (TLS or proxy settings).
        source: kube::Error,
    },
    /// The server does not serve Karpenter's CRDs (NodePools, NodeClaims).
    #[error(
        "the server at {server} (context \"{context}\") does not serve {}: Karpenter's CRDs are \
         not installed there; install Karpenter's CRDs (`kubectl apply -f deploy/crds/` from the \
         Karpenter repository, or all of Karpenter with `kubectl apply -k deploy/`) or pick the \
         cluster that runs Karpenter with --context",
        missing.join(" and ")
    )]
    NotInstalled {
        /// API server URL without a trailing `/`, e.g. `https://127.0.0.1:6443`.
        server: String,
        /// The kubeconfig context used (`in-cluster` for in-cluster credentials).
        context: String,
        /// The resources it does not serve, as `plural.group/version`, e.g.
        /// `nodeclaims.karpenter.sh/v1`.
        missing: Vec<String>,
    },
    /// Listing NodeClaims failed.
    #[error(
        "listing NodeClaims from {server} (context \"{context}\"): {}; check that the \
         cluster is reachable and that --context/--kubeconfig name the right one",
        causes(source)
    )]
    List {
        /// API server URL without a trailing `/`.
        server: String,
        /// The kubeconfig context used.
        context: String,
        /// The list call's error, printed with its causes.
        source: kube::Error,
    },
    /// Listing another kind of object failed.
    #[error(
        "listing {what} from {server} (context \"{context}\"): {}; check that the cluster is \
         reachable and that --context/--kubeconfig name the right one",
        causes(source.as_ref())
    )]
    ListOther {
        /// What was listed, e.g. `Nodes`.
        what: &'static str,
        /// API server URL without a trailing `/`.
        server: String,
        /// The kubeconfig context used.
        context: String,
        /// The list call's error, printed with its causes.
        source: Box<kube::Error>,
    },
    /// The cloud could not be read or changed.
    #[error(transparent)]
    Cloud(#[from] CloudError),
    /// `orphans delete NAME…` named something that is not an orphan.
    #[error(
        "not an orphan: {}; `kubectl karpenter orphans` lists them (NAME column){}",
        names.join(", "),
        if available.is_empty() { "; there are none now".to_owned() } else { format!(": {}", available.join(", ")) }
    )]
    UnknownOrphans {
        /// The names that matched nothing.
        names: Vec<String>,
        /// The orphans' names.
        available: Vec<String>,
    },
    /// `orphans delete` without a terminal to confirm on, and without `--yes`.
    #[error(
        "refusing to change the cluster without confirmation: not running on a terminal; pass \
         --yes to go ahead, or --dry-run to only preview"
    )]
    NeedsConfirmation,
    /// The confirmation prompt failed.
    #[error("asking for confirmation: {0}")]
    Prompt(io::Error),
    /// Some changes of `orphans delete` failed.
    #[error(
        "{failed} of {total} changes failed (see the errors above); run `kubectl karpenter \
         orphans` to see what is left"
    )]
    Incomplete {
        /// Steps that failed (each already printed as an error).
        failed: usize,
        /// Steps tried or skipped.
        total: usize,
    },
    /// `drift explain NAME` named no NodeClaim.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// An `upgrade` command failed (no target, no such NodePool, a patch failed).
    #[error(transparent)]
    Upgrade(#[from] UpgradeError),
    /// `--nodepool NAME` (of `status` or `upgrade`) named no NodePool.
    #[error(
        "no NodePool named \"{name}\" (context \"{context}\"); {}",
        if available.is_empty() {
            "the cluster has no NodePools".to_owned()
        } else {
            format!("NodePools: {}", available.join(", "))
        }
    )]
    UnknownNodePool {
        /// The name given.
        name: String,
        /// The kubeconfig context.
        context: String,
        /// The NodePools there are, in name order.
        available: Vec<String>,
    },
    /// Writing output failed.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// `why-pending POD` named no pod, or a pod with `-A`.
    #[error(transparent)]
    WhyPending(#[from] WhyPendingError),
    /// `disruption explain NODE` named no Karpenter node, or one not initialized yet.
    #[error(transparent)]
    Disruption(#[from] crate::disruption::DisruptionError),
}

/// The resources of `karpenter.sh/v1` every command reads (plural names, as API discovery lists
/// them).
pub const KARPENTER_RESOURCES: [&str; 2] = ["nodepools", "nodeclaims"];

/// How a command that ran to the end came out (exit codes 0 and 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to report (exit 0).
    Clean,
    /// Problems found, e.g. orphans (exit 1).
    Found,
}

/// A client for the cluster the global flags select, and how to name it in errors.
pub struct Connection {
    /// A kube client for the selected context's cluster and user.
    pub client: kube::Client,
    /// API server URL without a trailing `/`, e.g. `https://127.0.0.1:6443`; named in errors.
    pub server: String,
    /// The kubeconfig context used (`in-cluster` for in-cluster credentials); named in errors.
    pub context: String,
    /// kubeconfig cluster entry, when known (an EKS cluster ARN on EKS).
    pub cluster: Option<String>,
    /// The context's namespace (`default` when it names none; the pod's own namespace
    /// in-cluster), which `-n` overrides: see [`Connection::namespaces`].
    pub namespace: String,
}

impl Connection {
    /// Loads the kubeconfig and builds the client; every request it sends fails with
    /// [`NoAnswer`](crate::request_timeout::NoAnswer) (naming the server) when the server has not
    /// begun to answer within `--request-timeout`.
    ///
    /// Errors: [`Error::Kubeconfig`], [`Error::Client`].
    pub async fn open(global: &GlobalArgs) -> Result<Connection, Error> {
        let Loaded {
            config,
            context,
            cluster,
        } = kubeconfig::load(&global.selection()).await?;
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned();
        let namespace = config.default_namespace.clone();
        let client = kube::client::ClientBuilder::try_from(config)
            .map_err(|source| Error::Client {
                context: context.clone(),
                source,
            })?
            .with_layer(&AnswerTimeoutLayer::new(global.request_timeout, &server))
            .build();
        Ok(Connection {
            client,
            server,
            context,
            cluster,
            namespace,
        })
    }

    /// The namespaces a namespaced view lists, from `-n`/`-A` and the context's namespace.
    pub fn namespaces(&self, global: &GlobalArgs) -> Namespaces {
        global.namespaces(Some(&self.namespace))
    }

    /// Checks, by API discovery (`GET /apis/karpenter.sh/v1`), that the server serves
    /// [`KARPENTER_RESOURCES`]: a command that reads them says so plainly instead of reporting an
    /// empty cluster.
    ///
    /// Errors: [`Error::NotInstalled`] naming the ones it does not serve, [`Error::ListOther`]
    /// when discovery fails otherwise (e.g. the server is unreachable).
    pub async fn require_karpenter(&self) -> Result<(), Error> {
        let group_version = format!("{}/{}", NodeClaim::group(&()), NodeClaim::version(&()));
        let served: Vec<String> = match self.client.list_api_group_resources(&group_version).await {
            Ok(list) => list.resources.into_iter().map(|r| r.name).collect(),
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(e) => return Err(self.list_error("the karpenter.sh/v1 API resources", e)),
        };
        let missing: Vec<String> = KARPENTER_RESOURCES
            .iter()
            .filter(|r| !served.iter().any(|s| s == *r))
            .map(|r| format!("{r}.{group_version}"))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::NotInstalled {
            server: self.server.clone(),
            context: self.context.clone(),
            missing,
        })
    }

    /// Lists NodeClaims matching `params`.
    ///
    /// Errors: [`Error::NotInstalled`] when the server does not serve them (naming, by
    /// [`Connection::require_karpenter`], every Karpenter resource it lacks), else
    /// [`Error::List`].
    pub async fn nodeclaims(&self, params: &ListParams) -> Result<Vec<NodeClaim>, Error> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        match api.list(params).await {
            Ok(list) => Ok(list.items),
            Err(kube::Error::Api(status)) if status.code == 404 => Err(self
                .require_karpenter()
                .await
                .err()
                .unwrap_or_else(|| Error::NotInstalled {
                    server: self.server.clone(),
                    context: self.context.clone(),
                    missing: vec!["nodeclaims.karpenter.sh/v1".to_owned()],
                })),
            Err(source) => Err(Error::List {
                server: self.server.clone(),
                context: self.context.clone(),
                source,
            }),
        }
    }

    /// Lists the objects of `api` matching `params`. A 404 for one of Karpenter's own kinds
    /// (NodeClaim, NodePool, EC2NodeClass: any kind of the `karpenter.sh` or
    /// `karpenter.k8s.aws` groups) means the server does not serve that CRD, and reads as an
    /// empty list (e.g. EC2NodeClasses on a cluster without the AWS provider); for core kinds
    /// a 404 is an error like any other.
    ///
    /// Errors: [`Error::ListOther`] naming `what`.
    pub async fn list_or_empty<K>(
        &self,
        api: &Api<K>,
        params: &ListParams,
        what: &'static str,
    ) -> Result<Vec<K>, Error>
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        match api.list(params).await {
            Ok(list) => Ok(list.items),
            Err(kube::Error::Api(status)) if status.code == 404 && is_karpenter_kind::<K>() => {
                Ok(Vec::new())
            }
            Err(e) => Err(self.list_error(what, e)),
        }
    }

    /// [`Connection::list_or_empty`] of every object of a kind (namespaced kinds in every
    /// namespace), without a selector.
    ///
    /// Errors: [`Error::ListOther`] naming `what`.
    pub async fn list_all<K>(&self, what: &'static str) -> Result<Vec<K>, Error>
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.client.clone());
        self.list_or_empty(&api, &ListParams::default(), what).await
    }

    /// The objects of kind `K` matching `params`, in `namespace` (every namespace for `None`),
    /// decoded one at a time ([`decode_each`]): an object with a malformed field is skipped and
    /// named in [`Decoded::skipped`] instead of failing the whole list.
    ///
    /// Errors: [`Error::ListOther`] naming `what` when the list call fails.
    pub async fn list_decoded<K>(
        &self,
        namespace: Option<&str>,
        params: &ListParams,
        what: &'static str,
    ) -> Result<Decoded<K>, Error>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        let resource = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let list = api
            .list(params)
            .await
            .map_err(|e| self.list_error(what, e))?;
        Ok(decode_each(list.items))
    }

    /// [`Connection::list_all`], each object behind an `Arc` (the form the core's `Snapshot`
    /// holds).
    ///
    /// Errors: [`Error::ListOther`] naming `what`.
    pub async fn list_shared<K>(&self, what: &'static str) -> Result<Vec<std::sync::Arc<K>>, Error>
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        Ok(self
            .list_all::<K>(what)
            .await?
            .into_iter()
            .map(std::sync::Arc::new)
            .collect())
    }

    /// Checks that `name` is one of `pools` (the `--nodepool` of `status` and `upgrade`).
    ///
    /// Errors: [`Error::UnknownNodePool`] listing the NodePools there are.
    pub fn require_nodepool(&self, pools: &[crds::NodePool], name: &str) -> Result<(), Error> {
        if pools
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(name))
        {
            return Ok(());
        }
        let mut available: Vec<String> = pools
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        available.sort();
        Err(Error::UnknownNodePool {
            name: name.to_owned(),
            context: self.context.clone(),
            available,
        })
    }

    /// [`Error::ListOther`] for `what`.
    pub fn list_error(&self, what: &'static str, source: kube::Error) -> Error {
        Error::ListOther {
            what,
            server: self.server.clone(),
            context: self.context.clone(),
            source: Box::new(source),
        }
    }
}

/// Whether `K` is one of Karpenter's CRD kinds (API group `karpenter.sh` or
/// `karpenter.k8s.aws`), which a cluster may not serve.
pub fn is_karpenter_kind<K: kube::Resource>() -> bool
where
    K::DynamicType: Default,
{
    matches!(
        K::group(&K::DynamicType::default()).as_ref(),
        "karpenter.sh" | "karpenter.k8s.aws"
    )
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Output(OutputError::Io(e))
    }
}

impl Error {
    /// Whether the failure is only that the reader of stdout went away (`| head`): not an error.
    /// Looks through the whole chain of causes, so a pipe closed under a JSON or YAML encoder
    /// or a table writer is recognised as well as a plain write.
    pub fn is_broken_pipe(&self) -> bool {
        if let Error::Output(OutputError::Json(e)) = self
            && e.io_error_kind() == Some(io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if e.downcast_ref::<io::Error>().is_some_and(broken_pipe) {
                return true;
            }
            cause = e.source();
        }
        false
    }
}

/// Whether `e` is a closed pipe, or an I/O error wrapping one (`io::Error::other`).
fn broken_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
        || e.get_ref()
            .and_then(|inner| inner.downcast_ref::<io::Error>())
            .is_some_and(broken_pipe)
}

/// Where output goes and how the terminal looks.
pub struct Io<'a, O: Write, E: Write> {
    /// Data (tables, lists).
    pub out: &'a mut O,
    /// Notes such as "No resources found".
    pub err: &'a mut E,
    /// Whether tables may be coloured (decided from `--color`, the TTY and `NO_COLOR`).
    pub color: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_karpenter_kinds_may_be_missing() {
        assert!(is_karpenter_kind::<crds::NodePool>());
        assert!(is_karpenter_kind::<NodeClaim>());
        assert!(is_karpenter_kind::<crds::EC2NodeClass>());
        assert!(!is_karpenter_kind::<k8s_openapi::api::core::v1::Pod>());
        assert!(!is_karpenter_kind::<
            k8s_openapi::api::policy::v1::PodDisruptionBudget,
        >());
    }

    #[test]
    fn broken_pipe_is_recognised() {
        let e = Error::from(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(e.is_broken_pipe());
        let e = Error::from(io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(!e.is_broken_pipe());
        // Under the JSON encoder, and under the YAML encoder's or a table's own wrapping.
        let json = serde_json::Error::io(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(Error::Output(OutputError::Json(json)).is_broken_pipe());
        let wrapped = Error::Output(OutputError::Io(io::Error::other(io::Error::from(
            io::ErrorKind::BrokenPipe,
        ))));
        assert!(wrapped.is_broken_pipe());
    }
}
