//! kubectl conventions across every subcommand, run as the built binary (and through real
//! kubectl for completion): errors that name the server or object and the fix, exit codes
//! (0 ok, 1 found, 2 error), the `KUBECONFIG` list rule, `-n`/`-A`, `version`, `--help` with
//! examples, `completion` scripts and kubectl's plugin completion (`kubectl_complete-karpenter`).

use crate::support;

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use tokio::process::Command;

use support::{BIN, Cluster, assert_fails_with, kubectl, stderr, stdout, two_contexts};

/// Every command that reads the cluster, as typed after `kubectl karpenter`.
const CLUSTER_COMMANDS: [&[&str]; 4] = [
    &["status"],
    &["drift", "explain"],
    &["upgrade", "status"],
    &["orphans", "--no-cloud"],
];

/// Runs `kubectl karpenter <command> <more>…` (the plugin binary directly).
async fn run_command(cluster: &Cluster, command: &[&str], more: &[&str]) -> Output {
    let args: Vec<&str> = command.iter().chain(more).copied().collect();
    cluster.plugin(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_names_the_server_and_the_flags_to_check() {
    let cluster = Cluster::start(true).await;
    let path = cluster.dir.path().join("unreachable");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster: {server: \
         'http://127.0.0.1:1'}\nusers:\n- name: me\n  user: {}\ncontexts:\n- name: gone\n  \
         context: {cluster: gone, user: me}\ncurrent-context: gone\n",
    )
    .expect("write kubeconfig");
    let kc = path.to_str().expect("utf-8 path");
    for command in CLUSTER_COMMANDS {
        let out = run_command(&cluster, command, &["--kubeconfig", kc]).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {err}");
        assert_eq!(stdout(&out), "", "{command:?}");
        for want in [
            "error: ",
            "http://127.0.0.1:1",
            "context \"gone\"",
            "--context",
            "--kubeconfig",
        ] {
            assert!(err.contains(want), "{command:?}: no {want:?} in {err}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_karpenter_says_the_crds_are_not_installed() {
    let cluster = Cluster::start(false).await;
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().expect("utf-8 path");
    for command in CLUSTER_COMMANDS {
        let out = run_command(&cluster, command, &["--kubeconfig", kc]).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {err}");
        assert!(
            err.contains("install Karpenter's CRDs") && err.contains(&cluster.sandbox.url()),
            "{command:?}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_are_named_with_where_to_find_real_ones() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().expect("utf-8 path");
    let out = cluster
        .plugin(&["drift", "explain", "no-such-node", "--kubeconfig", kc])
        .await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("\"no-such-node\"") && err.contains("kubectl karpenter status"),
        "{err}"
    );
    let out = cluster
        .plugin(&["upgrade", "pause", "--nodepool", "nope", "--kubeconfig", kc])
        .await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("no NodePool named \"nope\""), "{err}");
    let out = cluster
        .plugin(&["status", "--context", "prod", "--kubeconfig", kc])
        .await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("context \"prod\" not found")
            && err.contains("pass one of them with --context"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_kubeconfig_file_of_the_list_wins() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let live_first = two_contexts(&cluster, "live");
    let dead_first = two_contexts(&cluster, "dead");
    let run = |list: std::ffi::OsString| {
        let home = cluster.dir.path().to_path_buf();
        async move {
            Command::new(BIN)
                .args(["upgrade", "status", "-o", "json"])
                .env("HOME", home)
                .env("KUBECONFIG", list)
                .output()
                .await
                .expect("run")
        }
    };
    // The dead context is current in the first file: its server is the one named.
    let out = run(std::env::join_paths([&dead_first, &live_first]).expect("join")).await;
    assert_fails_with(&out, 2, "context \"dead\"");
    // Swapped, the live one wins and the command runs.
    let out = run(std::env::join_paths([&live_first, &dead_first]).expect("join")).await;
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "{}",
        stderr(&out)
    );
    let _: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // --context picks from the merged entries.
    let out = Command::new(BIN)
        .args(["upgrade", "status", "--context", "dead"])
        .env("HOME", cluster.dir.path())
        .env(
            "KUBECONFIG",
            std::env::join_paths([&live_first, &dead_first]).expect("join"),
        )
        .output()
        .await
        .expect("run");
    assert_fails_with(&out, 2, "context \"dead\"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_flags_are_accepted_by_every_command_and_conflict() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().expect("utf-8 path");
    for command in CLUSTER_COMMANDS {
        for flags in [&["-n", "kube-system"][..], &["-A"], &["--namespace=x"]] {
            let out =
                run_command(&cluster, command, &[flags, &["--kubeconfig", kc]].concat()).await;
            assert!(
                matches!(out.status.code(), Some(0 | 1)),
                "{command:?} {flags:?}: {}",
                stderr(&out)
            );
        }
        let out = run_command(&cluster, command, &["-n", "a", "-A", "--kubeconfig", kc]).await;
        assert_fails_with(&out, 2, "cannot be used with");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_help_and_usage_exit_codes() {
    let cluster = Cluster::start(false).await;
    let version = env!("CARGO_PKG_VERSION");
    // No kubeconfig at all: version never needs one.
    let out = cluster.plugin(&["version"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(&format!("kubectl-karpenter {version}")),
        "{}",
        stdout(&out)
    );
    let out = cluster.plugin(&["version", "-o", "json"]).await;
    let value: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["name"], "kubectl-karpenter");
    assert_eq!(value["version"], version);
    assert!(value.get("gitCommit").is_some(), "{value}");
    let out = cluster.plugin(&["version", "-o", "yaml"]).await;
    let yaml: Value = serde_saphyr::from_str(&stdout(&out)).expect("YAML");
    assert_eq!(yaml, value);
    let out = cluster.plugin(&["--version"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), format!("kubectl-karpenter {version}\n"));

    for command in [
        &[][..],
        &["status"],
        &["drift"],
        &["drift", "explain"],
        &["upgrade"],
        &["upgrade", "step"],
        &["orphans"],
        &["orphans", "delete"],
        &["version"],
        &["completion"],
    ] {
        let out = run_command(&cluster, command, &["--help"]).await;
        assert_eq!(out.status.code(), Some(0), "{command:?}");
        let help = stdout(&out);
        assert!(
            help.contains("Usage: kubectl karpenter") && help.contains("Examples:\n"),
            "{command:?}:\n{help}"
        );
    }
    let out = cluster.plugin(&["completion", "tcsh"]).await;
    assert_fails_with(&out, 2, "invalid value 'tcsh'");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_scripts_for_every_shell() {
    let cluster = Cluster::start(false).await;
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let out = cluster.plugin(&["completion", shell]).await;
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains("kubectl-karpenter"), "{shell}");
        for sub in [
            "status", "drift", "explain", "upgrade", "orphans", "version",
        ] {
            assert!(script.contains(sub), "{shell} script lacks {sub}");
        }
    }
    // bash accepts the script: it defines the completion function and registers it.
    let out = cluster.plugin(&["completion", "bash"]).await;
    let script = cluster.dir.path().join("completion.bash");
    std::fs::write(&script, &out.stdout).expect("write script");
    let check = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p kubectl-karpenter",
            script.display()
        ))
        .output()
        .await
        .expect("bash must be installed");
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(
        stdout(&check).contains("kubectl-karpenter"),
        "{}",
        stdout(&check)
    );
}

/// A directory with `kubectl-karpenter` and `kubectl_complete-karpenter` linked to the binary.
fn plugin_dir(root: &Path) -> std::path::PathBuf {
    let dir = root.join("bin");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for name in ["kubectl-karpenter", "kubectl_complete-karpenter"] {
        std::os::unix::fs::symlink(BIN, dir.join(name)).expect("symlink");
    }
    dir
}

/// Candidates of a cobra `__complete` answer, without their help and the directive line.
fn candidates(answer: &str) -> Vec<String> {
    answer
        .lines()
        .filter(|l| !l.starts_with(':') && !l.starts_with("Completion ended"))
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_completes_the_plugin_through_kubectl_complete_karpenter() {
    let cluster = Cluster::start(false).await;
    let dir = plugin_dir(cluster.dir.path());
    let kubectl = kubectl();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(dir.clone()).chain(std::env::split_paths(&rest)))
            .expect("PATH");
    let complete = |words: &[&str]| {
        let mut cmd = Command::new(&kubectl);
        cmd.arg("__complete")
            .arg("karpenter")
            .args(words)
            .env("PATH", &path)
            .env("HOME", cluster.dir.path())
            .env_remove("KUBECONFIG");
        async move { cmd.output().await.expect("run kubectl") }
    };
    let out = complete(&[""]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let top = candidates(&stdout(&out));
    for want in [
        "status",
        "drift",
        "upgrade",
        "orphans",
        "version",
        "completion",
    ] {
        assert!(top.iter().any(|c| c == want), "{want} not in {top:?}");
    }
    assert!(
        stdout(&out).lines().any(|l| l == ":4"),
        "no directive: {}",
        stdout(&out)
    );
    let out = complete(&["upgrade", "p"]).await;
    assert_eq!(candidates(&stdout(&out)), ["pause"], "{}", stdout(&out));
    let out = complete(&["drift", "explain", "-o", ""]).await;
    assert_eq!(
        candidates(&stdout(&out)),
        ["text", "json", "yaml"],
        "{}",
        stdout(&out)
    );

    // The same answer without kubectl, through the hidden `__complete`.
    let out = cluster.plugin(&["__complete", "orphans", "de"]).await;
    assert_eq!(candidates(&stdout(&out)), ["delete"], "{}", stdout(&out));

    // Context names come from the kubeconfig KUBECONFIG names.
    let kubeconfig = two_contexts(&cluster, "live");
    let out = Command::new(BIN)
        .args(["__complete", "status", "--context", ""])
        .env("HOME", cluster.dir.path())
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .expect("run");
    assert_eq!(
        candidates(&stdout(&out)),
        ["live", "dead"],
        "{}",
        stdout(&out)
    );
    let out = Command::new(BIN)
        .args(["__complete", "--cluster", "d"])
        .env("HOME", cluster.dir.path())
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .expect("run");
    assert_eq!(candidates(&stdout(&out)), ["dead"], "{}", stdout(&out));
    // No kubeconfig: nothing to offer, and no error.
    let out = cluster.plugin(&["__complete", "--context", ""]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(candidates(&stdout(&out)).is_empty(), "{}", stdout(&out));
}
