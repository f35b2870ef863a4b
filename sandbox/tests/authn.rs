//! Authentication of the sandbox API server over HTTP: without the sandbox's bearer token (or
//! with another) a request gets kube-apiserver's 401 Status and changes nothing, except the
//! anonymous health and version endpoints; the token in the kubeconfig works; the server speaks
//! only TLS, with a certificate of the sandbox's own CA; the kubeconfig file is its owner's alone.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use sandbox::Sandbox;
use serde_json::{Value, json};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

/// kube-apiserver's answer to a request it cannot authenticate.
fn unauthorized() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
}

/// `method path` with `authorization` (the header's value, if any) and a JSON body, over https
/// (the sandbox's CA trusted, no credentials but the header): the status code and the body.
async fn request(
    sb: &Sandbox,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut config = sb.client_config();
    config.auth_info.token = None;
    let (code, body) = crate::support::send_with(
        config,
        method,
        path,
        authorization,
        body.as_bytes().to_vec(),
    )
    .await;
    (code, String::from_utf8_lossy(&body).into_owned())
}

fn lease(name: &str) -> String {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"holderIdentity": "intruder"}})
    .to_string()
}

#[tokio::test]
async fn requests_without_the_token_get_401_and_change_nothing() {
    let sb = Sandbox::start(0).await.expect("server");
    let wrong = format!("Bearer {}", "0".repeat(64));
    let basic = "Basic YWRtaW46YWRtaW4=".to_string();
    for auth in [None, Some(wrong.as_str()), Some(basic.as_str())] {
        let (code, body) = request(&sb, "POST", LEASES, auth, &lease("stolen")).await;
        assert_eq!(code, 401, "{auth:?}: {body}");
        let body: Value = serde_json::from_str(&body).expect("a JSON Status");
        assert_eq!(body, unauthorized(), "{auth:?}");
        for path in [
            "/api",
            "/apis",
            "/openapi/v3",
            "/api/v1/nodes",
            "/readyz/ping",
        ] {
            let (code, _) = request(&sb, "GET", path, auth, "").await;
            assert_eq!(code, 401, "GET {path} with {auth:?}");
        }
    }
    let leases = sb
        .store()
        .resource("coordination.k8s.io", "v1", "leases")
        .expect("leases are served");
    assert!(
        sb.store().get(&leases, "kube-system", "stolen").is_err(),
        "an unauthenticated create was stored"
    );
    assert_eq!(
        sb.audit(),
        vec![],
        "refused requests are no clients' writes"
    );

    // Health and version are public, as kube-apiserver's system:public-info-viewer makes them;
    // a wrong token is refused even there.
    for path in ["/healthz", "/livez", "/readyz", "/version", "/version/"] {
        assert_eq!(request(&sb, "GET", path, None, "").await.0, 200, "{path}");
        assert_eq!(
            request(&sb, "GET", path, Some(&wrong), "").await.0,
            401,
            "{path}"
        );
    }

    let bearer = format!("Bearer {}", sb.token());
    let (code, body) = request(&sb, "POST", LEASES, Some(&bearer), &lease("mine")).await;
    assert_eq!(code, 201, "{body}");
    assert!(sb.store().get(&leases, "kube-system", "mine").is_ok());
}

#[tokio::test]
async fn a_kube_client_needs_the_sandbox_s_token() {
    let sb = Sandbox::start(0).await.expect("server");
    let mut anonymous = sb.client_config();
    anonymous.auth_info.token = None;
    let pods: Api<Pod> = Api::all(kube::Client::try_from(anonymous).expect("client"));
    match pods.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (401, "Unauthorized"));
        }
        other => panic!("expected 401 Unauthorized, got {other:?}"),
    }
    let pods: Api<Pod> = Api::all(kube::Client::try_from(sb.client_config()).expect("client"));
    pods.list(&ListParams::default())
        .await
        .expect("the token is accepted");

    // Another sandbox's token is not this one's.
    let other = Sandbox::start(0).await.expect("server");
    assert_ne!(other.token(), sb.token());
    let mut crossed = sb.client_config();
    crossed.auth_info.token = Some(other.token().into());
    let pods: Api<Pod> = Api::all(kube::Client::try_from(crossed).expect("client"));
    assert!(pods.list(&ListParams::default()).await.is_err());
}

#[cfg(unix)]
#[tokio::test]
async fn the_kubeconfig_carries_the_token_in_a_file_only_its_owner_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::start(0).await.expect("server");
    let dir = tempfile::tempdir().expect("temp dir");
    let mode = |p: &std::path::Path| {
        std::fs::symlink_metadata(p)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    };

    // A stale, world-readable kubeconfig at the path is replaced, mode and all.
    let path = dir.path().join("nested").join("kubeconfig");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, "stale").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    sb.write_kubeconfig(&path).expect("kubeconfig");
    assert_eq!(mode(&path), 0o600);
    let kc = kube::config::Kubeconfig::read_from(&path).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    let pods: Api<Pod> = Api::all(kube::Client::try_from(config).expect("client"));
    pods.list(&ListParams::default())
        .await
        .expect("the kubeconfig's user is accepted");

    // A symlink at the path is replaced, not written through.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, "untouched").expect("write");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).expect("symlink");
    sb.write_kubeconfig(&link).expect("kubeconfig");
    assert_eq!(
        std::fs::read_to_string(&elsewhere).expect("read"),
        "untouched"
    );
    assert!(std::fs::symlink_metadata(&link).expect("meta").is_file());
    assert_eq!(mode(&link), 0o600);
    assert!(
        std::fs::read_to_string(&link)
            .expect("read")
            .contains(&format!("token: \"{}\"", sb.token()))
    );

    // Nothing staged is left behind.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["elsewhere", "link", "nested"]);
}

#[tokio::test]
async fn the_server_speaks_only_tls_with_a_certificate_of_its_own_ca() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sb = Sandbox::start(0).await.expect("server");
    assert!(sb.url().starts_with("https://127.0.0.1:"), "{}", sb.url());

    // Plain HTTP gets no HTTP answer.
    let mut stream = tokio::net::TcpStream::connect(sb.addr())
        .await
        .expect("connect");
    let plain = format!(
        "GET /version HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        sb.addr()
    );
    stream.write_all(plain.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut answer),
    )
    .await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain HTTP was answered: {}",
        String::from_utf8_lossy(&answer)
    );

    // Another sandbox's CA does not vouch for this one's server.
    let other = Sandbox::start(0).await.expect("server");
    let mut config = sb.client_config();
    config.root_cert = other.client_config().root_cert;
    let client = kube::Client::try_from(config).expect("client");
    assert!(client.apiserver_version().await.is_err());
    let client = kube::Client::try_from(sb.client_config()).expect("client");
    client
        .apiserver_version()
        .await
        .expect("its own CA vouches for it");
}
