//! `karpenter run` never guesses for a real cluster: without an explicit cloud provider or a
//! cluster name it exits 2, naming what is missing and how to set it, before it connects to
//! the cluster in its kubeconfig (a listener here that must see no connection); nor does it send
//! a kubeconfig's token to a plain-http server.

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

/// Connections made to `listener` from now on, each closed at once (so a client that connects
/// fails fast instead of waiting for an answer).
fn tripwire(listener: &TcpListener) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&seen);
    let listener = listener.try_clone().expect("listener");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    seen
}

#[test]
fn run_refuses_to_send_a_token_to_a_plain_http_server() {
    // The kubeconfig `run` writes has user `u` with `token: t` and an http:// server.
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let server = format!("http://{}", listener.local_addr().expect("addr"));
    let connections = tripwire(&listener);
    let out = run(
        &listener,
        &["--cloud-provider", "sim", "--cluster-name", "prod"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for want in [
        "error: using context \"c\" from KUBECONFIG (",
        &format!(
            "its user has a bearer token (token), and the server {server} is plain http: \
             credentials are sent only over https"
        ),
        "use the server's https:// address",
    ] {
        assert!(stderr.contains(want), "no {want:?} in {stderr}");
    }
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "karpenter run connected to the cluster"
    );
}
