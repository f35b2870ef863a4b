//! `karpenter run` never guesses for a real cluster: without an explicit cloud provider or a
//! cluster name it exits 2, naming what is missing and how to set it, before it connects to
//! the cluster in its kubeconfig (a listener here that must see no connection).

use std::net::TcpListener;
use std::process::{Command, Output};

/// Run `karpenter run` with `args` against a kubeconfig whose server is `listener`, with none
/// of the settings in the environment.
fn run(listener: &TcpListener, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let server = format!("http://{}", listener.local_addr().expect("addr"));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\"}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .expect("write kubeconfig");
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("run")
        .args(args)
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("CLOUD_PROVIDER")
        .env_remove("CLUSTER_NAME")
        .env("LOG_LEVEL", "warn")
        .output()
        .expect("karpenter runs")
}

fn untouched(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).expect("nonblocking");
    matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[test]
fn run_refuses_to_guess_the_cloud_or_the_cluster_name() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let out = run(&listener, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--cloud-provider aws (or CLOUD_PROVIDER=aws)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("--cluster-name NAME (or CLUSTER_NAME=NAME)"),
        "{stderr}"
    );

    let out = run(&listener, &["--cloud-provider", "sim"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("no cloud provider"), "{stderr}");
    assert!(stderr.contains("no cluster name"), "{stderr}");

    let out = run(&listener, &["--cluster-name", "prod"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no cloud provider"), "{stderr}");
    assert!(!stderr.contains("no cluster name"), "{stderr}");

    assert!(
        untouched(&listener),
        "karpenter run connected to the cluster"
    );
}
