//! A running `karpenter sandbox` admits only the holder of its kubeconfig: an HTTP request
//! without the kubeconfig's bearer token (or with another) gets kube-apiserver's 401 Status and
//! stores nothing, the kubeconfig's token works, the kubeconfig file is mode 0600, and real
//! kubectl works with it, reports "You must be logged in to the server (Unauthorized)" with a
//! stale token and gets nowhere without one.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A `karpenter sandbox` child process, killed when dropped.
struct RunningSandbox(Child);

impl Drop for RunningSandbox {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `karpenter sandbox` writing its kubeconfig to `kubeconfig`, and wait for the file.
async fn start(dir: &Path, kubeconfig: &Path) -> RunningSandbox {
    let workload = dir.join("one.yaml");
    std::fs::write(
        &workload,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: one}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: one}}\n  template:\n    metadata: {labels: {app: one}}\n    spec:\n      containers:\n      - {name: app, image: public.ecr.aws/eks-distro/kubernetes/pause:3.2, resources: {requests: {cpu: 500m, memory: 512Mi}}}\n",
    )
    .expect("write workload");
    let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("sandbox")
        .arg("--workload")
        .arg(&workload)
        .arg("--kubeconfig-out")
        .arg(kubeconfig)
        .env("LOG_LEVEL", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("karpenter sandbox starts");
    let sandbox = RunningSandbox(child);
    let start = Instant::now();
    while !kubeconfig.exists() {
        assert!(start.elapsed() < Duration::from_secs(30), "no kubeconfig");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sandbox
}

/// A client for the server `kubeconfig` names that trusts its CA but presents no credentials
/// of its own (requests carry only the headers a test gives them).
async fn anonymous_client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    config.auth_info = Default::default();
    kube::Client::try_from(config).expect("client")
}

/// `method path` with `authorization` (the header's value, if any) and a JSON body: the status
/// code and the body as JSON.
async fn request(
    client: &kube::Client,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(value) = authorization {
        request = request.header(http::header::AUTHORIZATION, value);
    }
    let request = request
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .expect("a request");
    let response = client.send(request).await.expect("a response");
    let code = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .expect("the body");
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
    (code, body)
}

/// The user's `token:` in a kubeconfig the sandbox wrote.
fn token_of(kubeconfig: &Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("a token in the kubeconfig")
        .trim_matches('"')
        .to_owned()
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    let kubectl = std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into());
    Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs (install it or set KUBECTL)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_kubeconfig_s_token_opens_the_sandbox_api() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let _sandbox = start(dir.path(), &kubeconfig).await;

    let mode = std::fs::metadata(&kubeconfig)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "kubeconfig mode {mode:o}");

    let token = token_of(&kubeconfig);
    let client = anonymous_client(&kubeconfig).await;
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
    let lease = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"holderIdentity": "intruder"}})
    };
    let unauthorized = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401});
    let wrong = format!("Bearer {}", "f".repeat(token.len()));
    for auth in [None, Some(wrong.as_str())] {
        let (code, body) = request(&client, "POST", leases, auth, &lease("stolen")).await;
        assert_eq!((code, &body), (401, &unauthorized), "POST with {auth:?}");
    }

    let bearer = format!("Bearer {token}");
    let (code, body) = request(
        &client,
        "GET",
        &format!("{leases}/stolen"),
        Some(&bearer),
        &Value::Null,
    )
    .await;
    assert_eq!(code, 404, "an unauthenticated create was stored: {body}");
    let (code, body) = request(&client, "POST", leases, Some(&bearer), &lease("mine")).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["spec"]["holderIdentity"], "intruder");

    let out = kubectl(&kubeconfig, &["get", "nodes"]);
    assert!(
        out.status.success(),
        "kubectl get nodes: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&kubeconfig).expect("read kubeconfig");
    let ours = format!("  user:\n    token: \"{token}\"\n");
    assert!(
        text.contains(&ours),
        "the user's token is where the sandbox writes it"
    );

    // A stale token (another run's kubeconfig): kubectl's usual error.
    let stale = dir.path().join("stale");
    let other = format!("  user:\n    token: \"{}\"\n", "0".repeat(token.len()));
    std::fs::write(&stale, text.replace(&ours, &other)).expect("write");
    let out = kubectl(&stale, &["get", "nodes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "kubectl with a stale token succeeded"
    );
    assert!(
        stderr.contains("error: You must be logged in to the server (Unauthorized)"),
        "{stderr}"
    );

    // No token at all: kubectl asks for a username, as against any https kube-apiserver when
    // the kubeconfig has no credentials, and gets nowhere without one.
    let tokenless = dir.path().join("tokenless");
    std::fs::write(&tokenless, text.replace(&ours, "  user: {}\n")).expect("write");
    let out = kubectl(&tokenless, &["get", "nodes"]);
    assert!(
        !out.status.success(),
        "kubectl without a token succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
