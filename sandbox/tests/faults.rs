//! API-level tests of the sandbox's fault injection with a real Kubernetes client (kube-rs): each
//! injected fault reaches the client as kube-apiserver's would (status, reason, headers), writes
//! whose response is lost still take effect, dropped watches break off, and clients the filter
//! spares are never faulted.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use sandbox::Sandbox;
use sandbox::faults::{FaultConfig, FaultKind, UserAgentFilter};
use serde_json::json;

/// A client without kube-rs's automatic retries, so each fault reaches the caller.
async fn client(sb: &Sandbox) -> kube::Client {
    let mut config = sb.client_config();
    config.default_retry = false;
    kube::Client::try_from(config).expect("client")
}

/// A pause Pod in namespace `default`.
fn pod(name: &str) -> Pod {
    testutil::pod(name).image("pause").build()
}

/// Turn on exactly one kind of fault for every request it applies to.
fn only(sb: &Sandbox, kind: FaultKind) {
    sb.faults()
        .configure(FaultConfig::default().with_rate(kind, 1000));
    sb.faults().enable();
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(e) => *e,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn injected_errors_reach_clients_as_kube_apiservers_would() {
    let sb = Sandbox::start(0).await.expect("server");
    let c = client(&sb).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .expect("create");
    let label = Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}}));

    only(&sb, FaultKind::Conflict);
    pods.get("a").await.expect("reads are not conflicts");
    let e = api_error(
        pods.patch("a", &PatchParams::default(), &label)
            .await
            .expect_err("409"),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(e.message.contains("pods \"a\""), "{}", e.message);

    only(&sb, FaultKind::TooManyRequests);
    let resp = c
        .send(
            http::Request::get("/api/v1/namespaces/default/pods/a")
                .body(Vec::new().into())
                .expect("request"),
        )
        .await
        .expect("a response");
    assert_eq!(resp.status(), 429);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );

    only(&sb, FaultKind::InternalError);
    let e = api_error(pods.get("a").await.expect_err("500"));
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));

    only(&sb, FaultKind::ExpiredResourceVersion);
    pods.get("a").await.expect("a get names no resourceVersion");
    let resp = c
        .send(
            http::Request::get("/api/v1/namespaces/default/pods?resourceVersion=1")
                .body(Vec::new().into())
                .expect("request"),
        )
        .await
        .expect("a response");
    assert_eq!(resp.status(), 410);
    let mut watch = pods
        .watch(&WatchParams::default(), "1")
        .await
        .expect("watch")
        .boxed();
    match watch.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }

    only(&sb, FaultKind::Slow);
    pods.get("a").await.expect("a slow request is answered");

    let counts = sb.faults().counts();
    assert_eq!(counts.of(FaultKind::Slow), 1);
    // Counters reset with each configuration; faults were applied to requests of their kind.
    assert_eq!(counts.total(), 1);
}

#[tokio::test]
async fn a_write_whose_response_is_lost_still_takes_effect() {
    let sb = Sandbox::start(0).await.expect("server");
    let pods: Api<Pod> = Api::namespaced(client(&sb).await, "default");
    only(&sb, FaultKind::LostResponse);
    let e = api_error(
        pods.create(&PostParams::default(), &pod("a"))
            .await
            .expect_err("504"),
    );
    assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
    pods.get("a").await.expect("the pod was created anyway");
    let again = api_error(
        pods.create(&PostParams::default(), &pod("a"))
            .await
            .expect_err("a blind retry"),
    );
    assert_eq!(again.reason, "AlreadyExists");
    assert_eq!(sb.faults().counts().retried, 1);
}

#[tokio::test]
async fn dropped_watches_break_off_and_spared_clients_are_never_faulted() {
    let sb = Sandbox::start(0).await.expect("server");
    let pods: Api<Pod> = Api::namespaced(client(&sb).await, "default");
    let mut config = FaultConfig::default().with_rate(FaultKind::DropWatch, 1000);
    config.drop_watch_max = Duration::from_millis(100);
    sb.faults().configure(config);
    sb.faults().enable();
    let mut watch = pods
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    // Without the fault this watch would stay open for 30 minutes; the guard only keeps a
    // broken build from hanging.
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match watch.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the dropped watch never broke off");
    assert_eq!(sb.faults().counts().of(FaultKind::DropWatch), 1);

    let mut spare = FaultConfig::uniform(1000);
    spare.user_agent = UserAgentFilter::Only("faulted-client/".into());
    sb.faults().configure(spare);
    for name in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &pod(name))
            .await
            .expect("an unfiltered client is spared");
    }
    assert_eq!(sb.faults().counts().considered, 0);
}
