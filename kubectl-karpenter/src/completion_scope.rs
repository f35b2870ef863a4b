//! The cluster a command line being completed points at: the global flags typed before the word
//! under the cursor (`--kubeconfig`, `--context`, `--cluster`, `--user`, `-n/--namespace`,
//! `-A/--all-namespaces`). clap_complete's value completers see only their own value, so
//! `completion` reads these flags from the raw words before it runs the engine and lends them to
//! the completers (`cluster_names`, `kubeconfig_names`) for the length of that one call through
//! a thread-local: the engine calls completers on the thread that runs it.

use std::cell::RefCell;
use std::ffi::OsString;

use crate::global_args::GlobalArgs;

thread_local! {
    /// The flags of the line being completed on this thread, while [`with_typed`] runs.
    static TYPED: RefCell<Option<GlobalArgs>> = const { RefCell::new(None) };
}

/// The global flags among `words` (the words typed before the one being completed), as clap
/// would read them: `--flag VALUE`, `--flag=VALUE`, `-n VALUE`, `-nVALUE`, `-n=VALUE`, `-A`; the
/// last occurrence wins, and nothing after `--` is a flag. Other words (subcommands, their
/// flags and values) are skipped; a flag left without its value (the line ends, or the next word
/// is another flag, which clap would refuse as a value) is ignored.
pub fn typed_flags(words: &[OsString]) -> GlobalArgs {
    let mut flags = GlobalArgs::default();
    let mut words = words.iter().map(|w| w.to_str()).peekable();
    while let Some(word) = words.next() {
        let Some(word) = word else { continue };
        if word == "--" {
            break;
        }
        if word == "-A" || word == "--all-namespaces" {
            flags.all_namespaces = true;
            continue;
        }
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value)),
            _ => (word, None),
        };
        let (name, inline) = match name.strip_prefix("-n") {
            Some(rest) if !name.starts_with("--") && !rest.is_empty() => {
                ("-n", Some(rest.strip_prefix('=').unwrap_or(rest)))
            }
            _ => (name, inline),
        };
        let slot = match name {
            "--kubeconfig" => Slot::Kubeconfig,
            "--context" => Slot::Context,
            "--cluster" => Slot::Cluster,
            "--user" => Slot::User,
            "-n" | "--namespace" => Slot::Namespace,
            _ => continue,
        };
        let value = match inline {
            Some(value) => value.to_owned(),
            None => match words.next_if(|next| next.is_some_and(|v| !v.starts_with('-'))) {
                Some(Some(value)) => value.to_owned(),
                _ => continue,
            },
        };
        match slot {
            Slot::Kubeconfig => flags.kubeconfig = Some(value.into()),
            Slot::Context => flags.context = Some(value),
            Slot::Cluster => flags.cluster = Some(value),
            Slot::User => flags.user = Some(value),
            Slot::Namespace => flags.namespace = Some(value),
        }
    }
    flags
}

/// Which global flag a value belongs to.
enum Slot {
    Kubeconfig,
    Context,
    Cluster,
    User,
    Namespace,
}

/// Runs `complete` with `flags` as the flags completers on this thread see ([`typed`]), then
/// restores what they saw before.
pub fn with_typed<T>(flags: GlobalArgs, complete: impl FnOnce() -> T) -> T {
    let before = TYPED.with(|t| t.replace(Some(flags)));
    let result = complete();
    TYPED.with(|t| *t.borrow_mut() = before);
    result
}

/// The flags of the line being completed on this thread; none (the environment's kubeconfig and
/// its current context) outside [`with_typed`].
pub fn typed() -> GlobalArgs {
    TYPED.with(|t| t.borrow().clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn flags(list: &[&str]) -> GlobalArgs {
        let words: Vec<OsString> = list.iter().map(OsString::from).collect();
        typed_flags(&words)
    }

    #[test]
    fn every_spelling_of_the_global_flags() {
        let f = flags(&[
            "drift",
            "--kubeconfig",
            "/tmp/kc",
            "explain",
            "--context=prod",
            "--cluster",
            "c",
            "--user=u",
            "-n",
            "shop",
        ]);
        assert_eq!(f.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        assert_eq!(f.context.as_deref(), Some("prod"));
        assert_eq!(f.cluster.as_deref(), Some("c"));
        assert_eq!(f.user.as_deref(), Some("u"));
        assert_eq!(f.namespace.as_deref(), Some("shop"));
        assert!(!f.all_namespaces);
        for (words, want) in [
            (&["-nshop"][..], "shop"),
            (&["-n=shop"], "shop"),
            (&["--namespace", "shop"], "shop"),
            (&["--namespace=shop"], "shop"),
            (&["-n", "a", "why-pending", "-n", "b"], "b"),
        ] {
            assert_eq!(flags(words).namespace.as_deref(), Some(want), "{words:?}");
        }
        assert!(flags(&["why-pending", "-A"]).all_namespaces);
        assert!(flags(&["--all-namespaces"]).all_namespaces);
    }

    #[test]
    fn other_words_and_dangling_flags_are_not_flags() {
        let f = flags(&["status", "-n", "-A", "--", "--context", "x"]);
        // `-n -A`: clap takes no flag as a value, so -A is a flag and -n has no value.
        assert_eq!(f.namespace, None);
        assert!(f.all_namespaces);
        assert_eq!(f.context, None);
        assert_eq!(flags(&["why-pending", "--context"]).context, None);
        assert_eq!(flags(&["--nodepool", "gpu"]).namespace, None);
        assert_eq!(flags(&[]).kubeconfig, None);
    }

    #[test]
    fn completers_see_the_flags_only_while_lent() {
        assert_eq!(typed().context, None);
        let seen = with_typed(flags(&["--context", "prod"]), || typed().context);
        assert_eq!(seen.as_deref(), Some("prod"));
        assert_eq!(typed().context, None);
    }
}
