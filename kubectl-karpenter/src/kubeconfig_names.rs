//! Completion of the kubeconfig-name flags `--context`, `--cluster` and `--user`: candidates
//! are the names of the kubeconfig's contexts, clusters and users that start with what was typed.
//! The command line attaches these completers to its flags; clap's completion engine (behind
//! `__complete` and kubectl's plugin completion) calls them.

use std::ffi::OsStr;

use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use kube::config::Kubeconfig;

use crate::completion_scope;
use crate::kubeconfig::{self, Selection};

/// Which names of the kubeconfig a flag's value is completed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `--context`.
    Context,
    /// `--cluster`.
    Cluster,
    /// `--user`.
    User,
}

/// The names of `entry` in `kc` that start with `prefix`, in file order.
pub fn entry_names(kc: &Kubeconfig, entry: Entry, prefix: &str) -> Vec<String> {
    let names: Vec<&str> = match entry {
        Entry::Context => kc.contexts.iter().map(|c| c.name.as_str()).collect(),
        Entry::Cluster => kc.clusters.iter().map(|c| c.name.as_str()).collect(),
        Entry::User => kc.auth_infos.iter().map(|u| u.name.as_str()).collect(),
    };
    names
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// Candidates for `entry` from the kubeconfig a `--kubeconfig` typed on the same line names
/// (lent by `completion_scope`), else `KUBECONFIG` or `~/.kube/config`; none when there is no
/// readable kubeconfig.
fn kubeconfig_candidates(entry: Entry, current: &OsStr) -> Vec<CompletionCandidate> {
    let selection = Selection {
        kubeconfig: completion_scope::typed().kubeconfig,
        ..Selection::default()
    };
    let (Some(prefix), Ok(Some((kc, _)))) = (current.to_str(), kubeconfig::read(&selection)) else {
        return Vec::new();
    };
    entry_names(&kc, entry, prefix)
        .into_iter()
        .map(CompletionCandidate::new)
        .collect()
}

/// `--context` values: the kubeconfig's contexts.
pub fn contexts() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| kubeconfig_candidates(Entry::Context, current))
}

/// `--cluster` values: the kubeconfig's clusters.
pub fn clusters() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| kubeconfig_candidates(Entry::Cluster, current))
}

/// `--user` values: the kubeconfig's users.
pub fn users() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| kubeconfig_candidates(Entry::User, current))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_names_by_prefix() {
        let kc = Kubeconfig::from_yaml(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: prod-eu\n  cluster: {server: \
             'https://a'}\n- name: dev\n  cluster: {server: 'https://b'}\nusers:\n- name: \
             admin\n  user: {}\ncontexts:\n- name: prod\n  context: {cluster: prod-eu, user: \
             admin}\n- name: dev\n  context: {cluster: dev, user: admin}\n- name: prod-ro\n  \
             context: {cluster: prod-eu, user: admin}\n",
        )
        .expect("kubeconfig");
        assert_eq!(
            entry_names(&kc, Entry::Context, "prod"),
            ["prod", "prod-ro"]
        );
        assert_eq!(
            entry_names(&kc, Entry::Context, ""),
            ["prod", "dev", "prod-ro"]
        );
        assert_eq!(entry_names(&kc, Entry::Cluster, "d"), ["dev"]);
        assert_eq!(entry_names(&kc, Entry::User, ""), ["admin"]);
        assert!(entry_names(&kc, Entry::User, "x").is_empty());
    }
}
