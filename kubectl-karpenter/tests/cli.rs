//! kubectl conventions across every subcommand, run as the built binary (and through real
//! kubectl for completion): errors that name the server or object and the fix, exit codes
//! (0 ok, 1 found, 2 error), the `KUBECONFIG` list rule, `-n`/`-A`, `version`, `--help` with
//! examples, `completion` scripts and kubectl's plugin completion (`kubectl_complete-karpenter`).

use crate::support;

use std::ffi::OsString;
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use tokio::process::Command;

use support::{BIN, Cluster, assert_fails_with, kubectl, stderr, stdout, two_contexts};

/// Every command that reads the cluster, as typed after `kubectl karpenter`.
const CLUSTER_COMMANDS: [&[&str]; 7] = [
    &["status"],
    &["drift", "explain"],
    &["upgrade", "status"],
    &["orphans", "--no-cloud"],
    &["history"],
    &["why-pending"],
    &["disruption"],
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
async fn every_request_names_the_plugin_and_no_token_goes_to_a_plain_http_server() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().expect("utf-8 path");
    let version: Value =
        serde_json::from_str(&stdout(&cluster.plugin(&["version", "-o", "json"]).await))
            .expect("version JSON");
    let agent = format!(
        "kubectl-karpenter/v{} ({})",
        version["version"].as_str().expect("version"),
        version["platform"].as_str().expect("platform")
    );
    for command in CLUSTER_COMMANDS {
        let out = run_command(&cluster, command, &["--kubeconfig", kc]).await;
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{command:?}: {}",
            stderr(&out)
        );
    }
    // Only the plugin talked to this API server: every request it recorded carries the agent.
    let agents: Vec<String> = cluster.sandbox.audit_log().accesses().into_keys().collect();
    assert_eq!(agents, [agent]);

    // The same token for a plain-http server: refused before any connection, as kubectl sends
    // credentials only over https.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let server = format!("http://{}", listener.local_addr().expect("address"));
    let path = cluster.dir.path().join("plain-http");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: plain\n  cluster: {{server: \
             '{server}'}}\nusers:\n- name: me\n  user: {{token: '{}'}}\ncontexts:\n- name: \
             plain\n  context: {{cluster: plain, user: me}}\ncurrent-context: plain\n",
            cluster.sandbox.token()
        ),
    )
    .expect("write kubeconfig");
    let plain = path.to_str().expect("utf-8 path");
    for command in CLUSTER_COMMANDS {
        let flags = ["--kubeconfig", plain, "--request-timeout", "2s"];
        let out = run_command(&cluster, command, &flags).await;
        assert_fails_with(
            &out,
            2,
            &format!(
                "error: using context \"plain\" from --kubeconfig {plain}: user \"me\" has a \
                 bearer token (token), and the server {server} is plain http: credentials are \
                 sent only over https"
            ),
        );
    }
    listener.set_nonblocking(true).expect("nonblocking");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the plugin connected to {server}"
    );
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
        assert_eq!(stdout(&out), "", "{command:?}");
        assert!(
            err.contains("install Karpenter's CRDs") && err.contains(&cluster.sandbox.url()),
            "{command:?}: {err}"
        );
    }
    // why-pending names every resource it lacks and how to install them.
    let out = run_command(&cluster, &["why-pending", "-A"], &["--kubeconfig", kc]).await;
    assert_fails_with(
        &out,
        2,
        "does not serve nodepools.karpenter.sh/v1 and nodeclaims.karpenter.sh/v1: Karpenter's \
         CRDs are not installed there; install Karpenter's CRDs (`kubectl apply -f deploy/crds/`",
    );
}

/// A server that accepts connections and never answers: it holds every connection open, reads
/// nothing and writes nothing, until the test ends.
async fn silent_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_fails_every_command_after_the_request_timeout() {
    let cluster = Cluster::start(false).await;
    let addr = silent_server().await;
    let server = format!("http://{addr}");
    let path = cluster.dir.path().join("silent");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: silent\n  cluster: {{server: \
             '{server}'}}\nusers:\n- name: me\n  user: {{}}\ncontexts:\n- name: silent\n  \
             context: {{cluster: silent, user: me}}\ncurrent-context: silent\n"
        ),
    )
    .expect("write kubeconfig");
    let kc = path.to_str().expect("utf-8 path");
    // kubectl's spellings (a bare number of seconds, a duration with a unit), and how the
    // error quotes them.
    let spellings = [("1", "1s"), ("1s", "1s"), ("500ms", "500ms")];
    for (command, (timeout, shown)) in CLUSTER_COMMANDS.into_iter().zip(spellings.iter().cycle()) {
        let started = std::time::Instant::now();
        let out = run_command(
            &cluster,
            command,
            &["--kubeconfig", kc, "--request-timeout", timeout],
        )
        .await;
        let took = started.elapsed();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {err}");
        assert_eq!(stdout(&out), "", "{command:?}");
        assert!(
            err.contains(&format!(
                "the server at {server} did not answer within {shown} (--request-timeout; 0 waits \
                 forever)"
            )),
            "{command:?}: {err}"
        );
        // One timeout, not one per request the command would have made, nor a hang.
        assert!(
            took < std::time::Duration::from_secs(10),
            "{command:?} took {took:?}"
        );
    }
    // 0 waits forever, as kubectl: still waiting when the test stops it.
    let mut forever = Command::new(BIN);
    forever
        .args(["status", "--kubeconfig", kc, "--request-timeout", "0"])
        .env("HOME", cluster.dir.path())
        .env_remove("KUBECONFIG")
        .kill_on_drop(true);
    let waited = tokio::time::timeout(std::time::Duration::from_secs(3), forever.output()).await;
    assert!(waited.is_err(), "--request-timeout 0 gave up: {waited:?}");
    // A value kubectl would refuse is refused the same way.
    let out = run_command(&cluster, &["status"], &["--request-timeout", "soon"]).await;
    assert_fails_with(&out, 2, "invalid timeout \"soon\"");
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
    // Built from a git checkout (as every test run is), the commit is stamped at build time.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(head) => assert!(
            value["gitCommit"]
                .as_str()
                .is_some_and(|c| c.len() >= 7 && head.starts_with(c)),
            "gitCommit {} is not a prefix of HEAD {head}",
            value["gitCommit"]
        ),
        None => assert!(value.get("gitCommit").is_some(), "{value}"),
    }
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

/// PATH with [`plugin_dir`] first, then the test's own PATH (for kubectl).
fn completion_path(root: &Path) -> OsString {
    let dir = plugin_dir(root);
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(&rest))).expect("PATH")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_completes_the_plugin_through_kubectl_complete_karpenter() {
    let cluster = Cluster::start(false).await;
    let kubectl = kubectl();
    let path = completion_path(cluster.dir.path());
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

/// Creates `object` of `plural` in the sandbox (`group` "" for the core API).
fn create(cluster: &Cluster, group: &str, plural: &str, namespace: &str, object: Value) {
    let store = cluster.sandbox.store();
    let rt = store.resource(group, "v1", plural).expect("type is served");
    store.create(&rt, namespace, object).expect("create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_completes_names_from_the_cluster_the_line_points_at() {
    let cluster = Cluster::start(true).await;
    // NodeClaims of `default` and `gpu`, three of them with Nodes.
    cluster.populate();
    for pool in ["default", "gpu"] {
        create(
            &cluster,
            "karpenter.sh",
            "nodepools",
            "",
            testutil::nodepool(pool).json(),
        );
    }
    let shop = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
    create(&cluster, "", "namespaces", "", shop);
    for (namespace, pod) in [
        ("shop", testutil::pod("web").namespace("shop")),
        (
            "shop",
            testutil::pod("api")
                .namespace("shop")
                .on_node("ip-10-0-1-1.ec2.internal"),
        ),
        ("default", testutil::pod("batch").namespace("default")),
    ] {
        create(&cluster, "", "pods", namespace, pod.json());
    }
    let kubectl = kubectl();
    let path = completion_path(cluster.dir.path());
    let kubeconfig = cluster.kubeconfig();
    // `kubectl karpenter WORDS…<TAB>` with KUBECONFIG set (or not), through real kubectl.
    let complete = |words: &[&str], kubeconfig: Option<&Path>| {
        let shown = format!("{words:?}");
        let mut cmd = Command::new(&kubectl);
        cmd.arg("__complete")
            .arg("karpenter")
            .args(words)
            .env("PATH", &path)
            .env("HOME", cluster.dir.path())
            .env_remove("KUBECONFIG");
        if let Some(kubeconfig) = kubeconfig {
            cmd.env("KUBECONFIG", kubeconfig);
        }
        async move {
            let out = cmd.output().await.expect("run kubectl");
            assert!(out.status.success(), "{shown}: {}", stderr(&out));
            let answer = stdout(&out);
            assert!(answer.lines().any(|l| l == ":4"), "{shown}: {answer}");
            candidates(&answer)
        }
    };
    let names = |words: &[&str]| complete(words, Some(&kubeconfig));

    let nodeclaims_and_nodes = [
        "default-launching",
        "default-ready",
        "default-registering",
        "gpu-initializing",
        "gpu-terminating",
        "ip-10-0-1-1.ec2.internal",
        "ip-10-0-1-9.ec2.internal",
        "ip-10-0-3-3.ec2.internal",
    ];
    assert_eq!(names(&["drift", "explain", ""]).await, nodeclaims_and_nodes);
    assert_eq!(
        names(&["drift", "explain", "ip-10-0-1"]).await,
        ["ip-10-0-1-1.ec2.internal", "ip-10-0-1-9.ec2.internal"]
    );
    assert_eq!(
        names(&["disruption", "explain", "default-re"]).await,
        ["default-ready", "default-registering"]
    );
    for words in [
        &["upgrade", "pause", "--nodepool", ""][..],
        &["status", "--nodepool", ""],
        &["drift", "explain", "--nodepool", ""],
        &["history", "--nodepool", ""],
        &["disruption", "--nodepool", ""],
    ] {
        assert_eq!(
            complete(words, Some(&kubeconfig)).await,
            ["default", "gpu"],
            "{words:?}"
        );
    }
    assert_eq!(
        names(&["upgrade", "step", "--nodepool=g"]).await,
        ["--nodepool=gpu"]
    );
    // Pending pods of the namespace -n names (bound ones are not offered), else the context's.
    assert_eq!(names(&["why-pending", "-n", "shop", ""]).await, ["web"]);
    assert_eq!(names(&["why-pending", ""]).await, ["batch"]);
    // why-pending takes no pod name with -A: no names (the pending `batch` is not offered).
    assert!(names(&["why-pending", "-A", "b"]).await.is_empty());
    let namespaces = names(&["status", "-n", ""]).await;
    assert!(namespaces.iter().any(|n| n == "shop"), "{namespaces:?}");
    assert_eq!(names(&["why-pending", "--namespace", "sh"]).await, ["shop"]);

    // --kubeconfig and --context typed on the line choose the cluster.
    let kc = kubeconfig.to_str().expect("utf-8 path");
    assert_eq!(
        complete(
            &["--kubeconfig", kc, "upgrade", "status", "--nodepool", ""],
            None
        )
        .await,
        ["default", "gpu"]
    );
    let two = two_contexts(&cluster, "dead");
    assert!(
        complete(&["drift", "explain", "d"], Some(&two))
            .await
            .is_empty()
    );
    assert_eq!(
        complete(
            &["drift", "explain", "--context", "live", "gpu-"],
            Some(&two)
        )
        .await,
        ["gpu-initializing", "gpu-terminating"]
    );
    // No kubeconfig: no names to offer (flags then, as when a cluster has no names).
    let flags = complete(&["drift", "explain", ""], None).await;
    assert!(flags.iter().all(|c| c.starts_with('-')), "{flags:?}");
    assert!(complete(&["drift", "explain", "d"], None).await.is_empty());

    // A dead server: the plugin itself offers no names, exits 0 and prints no error.
    let out = Command::new(BIN)
        .args(["__complete", "--context", "dead", "why-pending", "b"])
        .env("HOME", cluster.dir.path())
        .env("KUBECONFIG", &two)
        .output()
        .await
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), ":4\n");
    assert_eq!(stderr(&out), "");
}
