//! Shell completion: `completion SHELL` writes clap_complete's static script for the
//! `kubectl-karpenter` command, and `__complete ARGS…` answers kubectl's plugin completion
//! (kubectl 1.26+ runs `kubectl_complete-karpenter ARGS…` for `kubectl karpenter <TAB>` and reads
//! cobra's `__complete` protocol: one candidate per line, `value<TAB>help`, then `:DIRECTIVE`).
//! This module attaches the value completers (`kubeconfig_names`, `cluster_names`) to the parser's
//! command, in one place: the argument types stay free of them, so the command line and the
//! session every command opens never depend on completion.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;
use crate::{cluster_names, completion_scope, kubeconfig_names};

/// The executable name the scripts complete (what krew links on PATH).
pub const BIN_NAME: &str = "kubectl-karpenter";

/// The hidden first argument that asks for completions, as cobra programs (kubectl) spell it.
pub const REQUEST: &str = "__complete";

/// The prefix of the executable kubectl runs for a plugin's completions
/// (`kubectl_complete-<plugin>`); when this binary is linked under that name it completes.
pub const KUBECTL_COMPLETE_PREFIX: &str = "kubectl_complete-";

/// cobra's `ShellCompDirectiveNoFileComp`: the shell must not fall back to file names.
const NO_FILE_COMPLETION: u8 = 4;

/// Writes the completion script for `shell`.
///
/// Errors: writing to `out` failed.
pub fn write_script(shell: Shell, out: &mut impl Write) -> io::Result<()> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, BIN_NAME, &mut buf);
    out.write_all(&buf)?;
    out.flush()
}

/// The words to complete when this process was started to answer a completion request: the
/// arguments after `__complete`, or all arguments when `argv[0]` is `kubectl_complete-…`.
/// `None` for an ordinary invocation.
pub fn request(args: &[OsString]) -> Option<Vec<OsString>> {
    let argv0 = args.first()?;
    let linked = Path::new(argv0)
        .file_name()
        .and_then(|f| f.to_str())
        .is_some_and(|f| f.starts_with(KUBECTL_COMPLETE_PREFIX));
    if linked {
        return Some(args[1..].to_vec());
    }
    match args.get(1) {
        Some(first) if first == REQUEST => Some(args[2..].to_vec()),
        _ => None,
    }
}

/// Writes the candidates for the last of `words` (the word under the cursor, possibly empty;
/// the words before it are what was typed after `kubectl karpenter`) in cobra's format, then
/// the directive line `:4` (no file-name fallback). Names of NodePools, NodeClaims, Nodes, pods
/// and namespaces come from the cluster the global flags among those words select; when it
/// cannot be reached there are none, and no error. Flags are offered for a word that starts
/// with `-`, or when there is nothing else to offer.
///
/// Errors: completing (reading the current directory for path values) or writing failed.
pub fn write_candidates(words: &[OsString], out: &mut impl Write) -> io::Result<()> {
    let mut args = Vec::with_capacity(words.len() + 2);
    args.push(OsString::from(BIN_NAME));
    args.extend(words.iter().cloned());
    if words.is_empty() {
        args.push(OsString::new());
    }
    let index = args.len() - 1;
    let cwd = std::env::current_dir().ok();
    let mut cmd = with_completers(Cli::command());
    // Name completers list from the cluster the line points at: lend them its flags.
    let typed = completion_scope::typed_flags(&args[1..index]);
    let current = args[index].clone();
    let mut candidates = completion_scope::with_typed(typed, || {
        clap_complete::engine::complete(&mut cmd, args, index, cwd.as_deref())
    })?;
    candidates.retain(|c| !c.is_hide_set());
    if !is_flag(&current) && candidates.iter().any(|c| !is_flag(c.get_value())) {
        // Names (or subcommands) to offer: flags wait until a `-` is typed, as in kubectl.
        candidates.retain(|c| !is_flag(c.get_value()));
    }
    for candidate in &candidates {
        let value = candidate.get_value().to_string_lossy();
        match candidate.get_help() {
            Some(help) => writeln!(out, "{value}\t{}", summary(&help.to_string()))?,
            None => writeln!(out, "{value}")?,
        }
    }
    writeln!(out, ":{NO_FILE_COMPLETION}")?;
    out.flush()
}

/// `cmd` (the parser's command) with a value completer on every argument that names something:
/// `--context`, `--cluster` and `--user` complete from the kubeconfig; `-n` namespaces, every
/// `--nodepool` (of any subcommand) NodePools, the NODE|NODECLAIM of `drift explain` and
/// `disruption explain` NodeClaims and their Nodes, and the POD of `why-pending` pending pods, from
/// the cluster the line points at.
///
/// Panics (a build defect, caught by the tests) when an argument or subcommand named here does
/// not exist.
pub fn with_completers(cmd: clap::Command) -> clap::Command {
    let claims_and_nodes =
        |c: clap::Command| c.mut_arg("name", |a| a.add(cluster_names::nodeclaims_and_nodes()));
    let cmd = cmd
        .mut_arg("context", |a| a.add(kubeconfig_names::contexts()))
        .mut_arg("cluster", |a| a.add(kubeconfig_names::clusters()))
        .mut_arg("user", |a| a.add(kubeconfig_names::users()))
        .mut_arg("namespace", |a| a.add(cluster_names::namespaces()))
        .mut_subcommand("drift", |c| c.mut_subcommand("explain", claims_and_nodes))
        .mut_subcommand("disruption", |c| {
            c.mut_subcommand("explain", claims_and_nodes)
        })
        .mut_subcommand("why-pending", |c| {
            c.mut_arg("pod", |a| a.add(cluster_names::pending_pods()))
        });
    with_nodepool_completer(cmd)
}

/// `cmd` with NodePool names on its `--nodepool` and on those of all its subcommands.
fn with_nodepool_completer(mut cmd: clap::Command) -> clap::Command {
    if cmd.get_arguments().any(|a| a.get_id() == "nodepool") {
        cmd = cmd.mut_arg("nodepool", |a| a.add(cluster_names::nodepools()));
    }
    let subcommands: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    for name in subcommands {
        cmd = cmd.mut_subcommand(name, with_nodepool_completer);
    }
    cmd
}

/// Whether a word is (the start of) a flag.
fn is_flag(word: &OsStr) -> bool {
    word.as_encoded_bytes().starts_with(b"-")
}

/// The first sentence of a help text, on one line without tabs: shells show candidate help in
/// a narrow column.
fn summary(help: &str) -> String {
    let line = help.lines().next().unwrap_or_default().replace('\t', " ");
    match line.find(". ") {
        Some(end) => line[..end].to_owned(),
        None => line.trim_end_matches('.').to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn complete(list: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        write_candidates(&words(list), &mut out).expect("complete");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.ends_with(":4\n"), "{text}");
        text.lines()
            .filter(|l| !l.starts_with(':'))
            .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn candidate_help_is_one_sentence() {
        assert_eq!(
            summary("Print the version (and more). Never contacts it."),
            "Print the version (and more)"
        );
        assert_eq!(summary("Only this NodePool."), "Only this NodePool");
        assert_eq!(summary("a\tb\nsecond line"), "a b");
        let mut out = Vec::new();
        write_candidates(&words(&["vers"]), &mut out).expect("complete");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "version\tPrint the plugin version (and the git commit it was built from, when known)\n:4\n"
        );
    }

    #[test]
    fn requests_are_recognised() {
        assert_eq!(
            request(&words(&["kubectl-karpenter", "__complete", "st"])),
            Some(words(&["st"]))
        );
        assert_eq!(
            request(&words(&[
                "/usr/bin/kubectl_complete-karpenter",
                "drift",
                ""
            ])),
            Some(words(&["drift", ""]))
        );
        assert_eq!(request(&words(&["kubectl-karpenter", "status"])), None);
        assert_eq!(request(&words(&["kubectl-karpenter"])), None);
        assert_eq!(request(&[]), None);
    }

    #[test]
    fn subcommands_values_and_flags() {
        let top = complete(&[""]);
        for want in [
            "status",
            "orphans",
            "drift",
            "upgrade",
            "version",
            "completion",
            "disruption",
        ] {
            assert!(top.iter().any(|c| c == want), "{want} missing from {top:?}");
        }
        assert_eq!(complete(&["up"]), vec!["upgrade"]);
        assert!(complete(&["drift", ""]).contains(&"explain".to_owned()));
        let formats = complete(&["status", "-o", ""]);
        assert!(
            ["table", "wide", "json", "yaml", "name"]
                .iter()
                .all(|f| formats.iter().any(|c| c == f)),
            "{formats:?}"
        );
        let flags = complete(&["upgrade", "pause", "--node"]);
        assert_eq!(flags, vec!["--nodepool"]);
        assert!(complete(&[]).contains(&"status".to_owned()));
        // Flags wait for a `-` when there is something else to offer, and are offered when
        // there is nothing else.
        assert!(complete(&["upgrade", "pause", ""]).contains(&"--nodepool".to_owned()));
        assert!(complete(&["upgrade", ""]).contains(&"pause".to_owned()));
        assert!(
            !complete(&["upgrade", ""])
                .iter()
                .any(|c| c.starts_with('-'))
        );
    }

    #[test]
    fn every_name_argument_has_a_completer() {
        use clap_complete::engine::ArgValueCompleter;

        /// `path: id` of every argument with a value completer, below `cmd`.
        fn completed(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                if arg.get::<ArgValueCompleter>().is_some() {
                    out.push(format!("{path}: {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                completed(sub, &format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut cmd = with_completers(Cli::command());
        cmd.build();
        let mut found = Vec::new();
        completed(&cmd, "", &mut found);
        for want in [
            ": context",
            ": namespace",
            " status: nodepool",
            " status: namespace",
            " drift explain: name",
            " drift explain: nodepool",
            " upgrade pause: nodepool",
            " upgrade status: nodepool",
            " history: nodepool",
            " why-pending: pod",
            " disruption: nodepool",
            " disruption explain: name",
        ] {
            assert!(found.iter().any(|f| f == want), "{want:?} not in {found:?}");
        }
        // The parser's own command carries none: the argument types know no completer.
        let mut plain = Cli::command();
        plain.build();
        let mut none = Vec::new();
        completed(&plain, "", &mut none);
        assert_eq!(none, Vec::<String>::new());
    }

    #[test]
    fn scripts_name_the_binary_and_subcommands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish, Shell::PowerShell] {
            let mut out = Vec::new();
            write_script(shell, &mut out).expect("script");
            let script = String::from_utf8(out).expect("utf-8");
            assert!(script.contains(BIN_NAME), "{shell}: {script}");
            for sub in ["status", "orphans", "explain", "upgrade", "completion"] {
                assert!(script.contains(sub), "{shell} script lacks {sub}");
            }
        }
    }
}
