//! kubectl's global flags, which every command of the plugin reads: which cluster to talk to
//! (`--kubeconfig`, `--context`, `--cluster`, `--user`), which namespaces a namespaced view
//! covers (`-n/--namespace`, `-A/--all-namespaces`), how long to wait for the server
//! (`--request-timeout`) and `--color`. The floor of the command
//! line: `cli` flattens these into every subcommand, `session` opens the connection they select,
//! and completion reads them from the line being completed. It imports no command and no
//! completer.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::kubeconfig::Selection;
use crate::request_timeout::RequestTimeout;

/// Flags every subcommand accepts, spelled like kubectl's. The default is none given (what
/// completion assumes before it reads the line, see `completion_scope`). Value completers are
/// attached where completion builds its command (`completion`), not here, so that this module,
/// which every command reads, depends on no completer.
#[derive(Clone, Debug, Default, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Path to the kubeconfig file to use (only that file is loaded; default: KUBECONFIG, then
    /// ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The name of the kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The name of the kubeconfig cluster to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The name of the kubeconfig user to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// The namespace for namespaced views such as the pods of `why-pending` (default: the
    /// kubeconfig context's namespace, else `default`). NodePools, NodeClaims and Nodes are
    /// cluster-scoped: other commands accept the flag and ignore it, as kubectl does.
    #[arg(
        short = 'n',
        long,
        global = true,
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// Every namespace, for namespaced views (like kubectl's -A); cluster-scoped views ignore it.
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// How long to wait for the server to answer each request before giving up: a whole number
    /// of seconds, or a number with a unit (e.g. 1s, 2m, 3h); 0 waits forever. kubectl's default
    /// is 0; the plugin's is 30s, so a server that accepts connections and never answers cannot
    /// hang it. The limit covers connecting and waiting for the answer to begin, not the
    /// transfer of a large list.
    #[arg(long, global = true, value_name = "DURATION", default_value_t = RequestTimeout::default())]
    pub request_timeout: RequestTimeout,
    /// When to colour output: auto colours only a terminal; a non-empty NO_COLOR turns colour
    /// off whatever this says (<https://no-color.org>).
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

impl GlobalArgs {
    /// The kubeconfig selection these flags make.
    pub fn selection(&self) -> Selection {
        Selection {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            cluster: self.cluster.clone(),
            user: self.user.clone(),
        }
    }

    /// The namespaces a namespaced view covers: every one with `-A`, the one `-n` names, else
    /// `context_namespace` (the kubeconfig context's `namespace`, which
    /// `kube::Config::default_namespace` already falls back to `default`), else `default`.
    /// kubectl's rule (`genericclioptions.ConfigFlags.ToRawKubeConfigLoader().Namespace()`).
    pub fn namespaces(&self, context_namespace: Option<&str>) -> Namespaces {
        if self.all_namespaces {
            return Namespaces::All;
        }
        let chosen = self
            .namespace
            .as_deref()
            .or(context_namespace)
            .filter(|ns| !ns.is_empty())
            .unwrap_or(DEFAULT_NAMESPACE);
        Namespaces::One(chosen.to_owned())
    }
}

/// Kubernetes' `metav1.NamespaceDefault`.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Which namespaces a namespaced view (e.g. pods) lists: `-A`, or one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    /// `-A/--all-namespaces`.
    All,
    /// `-n NS`, else the context's namespace, else `default`.
    One(String),
}

impl Namespaces {
    /// The namespace to pass to `kube::Api::namespaced`, or `None` for `Api::all`.
    pub fn as_namespace(&self) -> Option<&str> {
        match self {
            Namespaces::All => None,
            Namespaces::One(ns) => Some(ns),
        }
    }
}

/// `--color`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and NO_COLOR is unset or empty.
    #[default]
    Auto,
    /// Colour tables even on a pipe, unless NO_COLOR is set and non-empty.
    Always,
    /// Never colour, even on a terminal.
    Never,
}

impl ColorChoice {
    /// Whether to colour, given whether stdout is a terminal and the value of `NO_COLOR`. A
    /// non-empty `NO_COLOR` wins over every choice, `always` included: the issue asks for
    /// colour "never with NO_COLOR", and <https://no-color.org> says an empty value counts as
    /// unset.
    pub fn enabled(self, stdout_is_tty: bool, no_color: Option<&str>) -> bool {
        if no_color.is_some_and(|v| !v.is_empty()) {
            return false;
        }
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => stdout_is_tty,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_decision() {
        use ColorChoice::*;
        assert!(Auto.enabled(true, None));
        assert!(Auto.enabled(true, Some("")));
        assert!(!Auto.enabled(true, Some("1")));
        assert!(!Auto.enabled(false, None));
        assert!(Always.enabled(false, None));
        assert!(Always.enabled(false, Some("")));
        // A non-empty NO_COLOR wins over --color=always.
        assert!(!Always.enabled(true, Some("1")));
        assert!(!Never.enabled(true, None));
    }
}
