//! Completion of the names commands take, listed from the cluster the line being completed points
//! at (`--kubeconfig`, `--context`, `-n`… typed on it, see `completion_scope`): NodePools
//! (`--nodepool` of `status`, `drift explain`, `upgrade`, `history` and `disruption`), NodeClaims
//! and their Nodes (`drift explain`, `disruption explain`), pending pods (`why-pending`) and
//! namespaces (`-n`). Like kubectl's own name completion it asks the API server each time, gives
//! up after [`LIST_TIMEOUT`], and on any failure offers nothing: a completion never prints an
//! error into the shell.

use std::ffi::OsStr;
use std::time::Duration;

use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use crds::{NodeClaim, NodePool};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use karpenter_core::pod_view::PodView;
use kube::api::{Api, ListParams};

use crate::completion_scope;
use crate::drift::explain::nodepool_name;
use crate::global_args::{GlobalArgs, Namespaces};
use crate::session::{Connection, Error};
use crate::why_pending::report::is_pending;

/// How long a completion waits for the cluster (loading credentials, connecting, listing) before
/// it offers nothing, so a dead or slow server never hangs the shell. A kubeconfig exec plugin
/// (e.g. `aws eks get-token`) runs to its end regardless: kube runs it synchronously.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(5);

/// Which names a value is completed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Names {
    /// NodePools.
    NodePools,
    /// NodeClaims, and the Nodes they launched (`status.nodeName`).
    NodeClaimsAndNodes,
    /// Pending pods of the namespace `-n` or the context selects; none with `-A`, for which
    /// `why-pending` takes no pod name.
    PendingPods,
    /// Namespaces.
    Namespaces,
}

/// A name to offer, and the one-line help shells show beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    /// The object's name.
    pub name: String,
    /// What it is, when names of different kinds are offered together.
    pub help: Option<String>,
}

impl Named {
    /// A name without help.
    fn plain(name: &str) -> Named {
        Named {
            name: name.to_owned(),
            help: None,
        }
    }
}

/// Values naming a NodePool.
pub fn nodepools() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| complete(Names::NodePools, current))
}

/// Values naming a NodeClaim or a Node (by NodeClaim name, or its Node's).
pub fn nodeclaims_and_nodes() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| complete(Names::NodeClaimsAndNodes, current))
}

/// Values naming a pending pod.
pub fn pending_pods() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| complete(Names::PendingPods, current))
}

/// Values naming a namespace.
pub fn namespaces() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| complete(Names::Namespaces, current))
}

/// The candidates for `current` among `names` of the line's cluster.
fn complete(names: Names, current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(prefix) = current.to_str() else {
        return Vec::new();
    };
    offered(list(names, &completion_scope::typed()), prefix)
}

/// The names in `found` that start with `prefix`, in name order, each once (the first help
/// given for it wins).
pub fn offered(mut found: Vec<Named>, prefix: &str) -> Vec<CompletionCandidate> {
    found.retain(|n| n.name.starts_with(prefix));
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found.dedup_by(|later, first| later.name == first.name);
    found
        .into_iter()
        .map(|n| CompletionCandidate::new(n.name).help(n.help.map(Into::into)))
        .collect()
}

/// Every name of `names` in the cluster `global` selects; none when the kubeconfig, the
/// connection or the list fails, or when it takes longer than [`LIST_TIMEOUT`].
fn list(names: Names, global: &GlobalArgs) -> Vec<Named> {
    // Completion runs before (and instead of) the command's runtime: this one lives for one list.
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    runtime.block_on(async {
        match tokio::time::timeout(LIST_TIMEOUT, fetch(names, global)).await {
            Ok(Ok(found)) => found,
            Ok(Err(_)) | Err(_) => Vec::new(),
        }
    })
}

/// Lists `names` from the cluster `global` selects.
///
/// Errors: any of [`Connection::open`] or the list call's.
async fn fetch(names: Names, global: &GlobalArgs) -> Result<Vec<Named>, Error> {
    let conn = Connection::open(global).await?;
    Ok(match names {
        Names::NodePools => conn
            .list_all::<NodePool>("NodePools")
            .await?
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .map(Named::plain)
            .collect(),
        Names::NodeClaimsAndNodes => {
            claim_and_node_names(&conn.nodeclaims(&ListParams::default()).await?)
        }
        Names::PendingPods => {
            let Namespaces::One(namespace) = conn.namespaces(global) else {
                return Ok(Vec::new());
            };
            // The server drops bound pods; finished and deleted ones are dropped here.
            let unbound = ListParams::default().fields("spec.nodeName=");
            let api: Api<Pod> = Api::namespaced(conn.client.clone(), &namespace);
            pending_pod_names(&conn.list_or_empty(&api, &unbound, "Pods").await?)
        }
        Names::Namespaces => conn
            .list_all::<Namespace>("Namespaces")
            .await?
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .map(Named::plain)
            .collect(),
    })
}

/// Each NodeClaim's name, and its Node's once it has one; the help says which is which.
pub fn claim_and_node_names(claims: &[NodeClaim]) -> Vec<Named> {
    let mut names = Vec::new();
    for claim in claims {
        let Some(name) = claim.metadata.name.as_deref() else {
            continue;
        };
        let help = match nodepool_name(claim) {
            Some(pool) => format!("NodeClaim of NodePool {pool}"),
            None => "NodeClaim".to_owned(),
        };
        names.push(Named {
            name: name.to_owned(),
            help: Some(help),
        });
        let node = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
        if let Some(node) = node.filter(|n| !n.is_empty()) {
            names.push(Named {
                name: node.to_owned(),
                help: Some(format!("Node of NodeClaim {name}")),
            });
        }
    }
    names
}

/// The names of the pods that are pending (not bound, not finished, not being deleted).
pub fn pending_pod_names(pods: &[Pod]) -> Vec<Named> {
    pods.iter()
        .filter(|p| is_pending(&PodView::from(*p)))
        .filter_map(|p| p.metadata.name.as_deref())
        .map(Named::plain)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::time::Instant;

    use testutil::{nodeclaim, pod};

    use super::*;

    fn values(candidates: &[CompletionCandidate]) -> Vec<String> {
        candidates
            .iter()
            .map(|c| c.get_value().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn names_by_prefix_sorted_once() {
        let found = vec![
            Named::plain("gpu"),
            Named {
                name: "default".into(),
                help: Some("first".into()),
            },
            Named::plain("general"),
            Named {
                name: "default".into(),
                help: Some("second".into()),
            },
        ];
        assert_eq!(
            values(&offered(found.clone(), "")),
            ["default", "general", "gpu"]
        );
        assert_eq!(values(&offered(found.clone(), "g")), ["general", "gpu"]);
        assert!(offered(found.clone(), "x").is_empty());
        let default = &offered(found, "d")[0];
        assert_eq!(
            default.get_help().map(ToString::to_string).as_deref(),
            Some("first")
        );
    }

    #[test]
    fn nodeclaims_offer_their_nodes_too() {
        let claims = [
            nodeclaim("default-a")
                .nodepool("default")
                .node_name("ip-10-0-1-1.ec2.internal")
                .build(),
            nodeclaim("gpu-b").nodepool("gpu").build(),
        ];
        assert_eq!(
            claim_and_node_names(&claims),
            [
                Named {
                    name: "default-a".into(),
                    help: Some("NodeClaim of NodePool default".into())
                },
                Named {
                    name: "ip-10-0-1-1.ec2.internal".into(),
                    help: Some("Node of NodeClaim default-a".into())
                },
                Named {
                    name: "gpu-b".into(),
                    help: Some("NodeClaim of NodePool gpu".into())
                },
            ]
        );
    }

    #[test]
    fn only_pending_pods_are_offered() {
        let pods = [
            pod("web").build(),
            pod("bound").on_node("n1").build(),
            pod("done").phase("Succeeded").build(),
            pod("leaving").deleting("2025-06-01T00:00:00Z").build(),
        ];
        assert_eq!(pending_pod_names(&pods), [Named::plain("web")]);
    }

    /// A kubeconfig whose server is `server`, in a temporary directory.
    fn kubeconfig_for(server: &str) -> (tempfile::TempDir, OsString) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \
                 '{server}'}}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  \
                 context: {{cluster: c, user: u}}\ncurrent-context: x\n"
            ),
        )
        .expect("write kubeconfig");
        (dir, path.into_os_string())
    }

    /// The answer to completing `words` as kubectl's plugin completion prints it.
    fn answer(words: &[OsString]) -> String {
        let mut out = Vec::new();
        crate::completion::write_candidates(words, &mut out).expect("complete");
        String::from_utf8(out).expect("utf-8")
    }

    /// Completes `command` against `server`, and checks it offers no names, within the timeout.
    fn offers_nothing_in_time(server: &str, command: &[&str]) {
        let (_dir, kubeconfig) = kubeconfig_for(server);
        let mut words = vec![OsString::from("--kubeconfig"), kubeconfig];
        words.extend(command.iter().map(OsString::from));
        let started = Instant::now();
        let answer = answer(&words);
        // Flags may be offered (there are no names to offer instead); names may not.
        assert!(answer.ends_with(":4\n"), "{server} {command:?}: {answer}");
        assert!(
            answer.lines().all(|l| l.starts_with('-') || l == ":4"),
            "{server} {command:?}: {answer}"
        );
        assert!(
            started.elapsed() < LIST_TIMEOUT + Duration::from_secs(3),
            "{server} {command:?} took {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn an_unreachable_server_offers_no_names() {
        let refused = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port");
        for command in [
            &["drift", "explain", ""][..],
            &["upgrade", "pause", "--nodepool", ""],
            &["why-pending", "w"],
            &["status", "-n", ""],
        ] {
            offers_nothing_in_time(&format!("http://{refused}"), command);
        }
    }

    #[test]
    fn a_silent_server_offers_no_names_once_the_timeout_passes() {
        // It accepts connections (the kernel completes the handshake) and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let addr = silent.local_addr().expect("address");
        offers_nothing_in_time(&format!("http://{addr}"), &["disruption", "explain", ""]);
        drop(silent);
    }
}
