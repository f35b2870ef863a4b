//! API-level tests of the sandbox server with a real Kubernetes client (kube-rs): CRUD, watch
//! resume and 410 Gone, selectors, binding, eviction, status and scale subresources.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::api::{
    Api, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::ObjectMeta;
use sandbox::Sandbox;
use serde_json::json;

async fn client(sb: &Sandbox) -> kube::Client {
    kube::Client::try_from(sb.client_config()).expect("client")
}

/// A pause Pod of `app` in namespace `default`.
fn pod(name: &str, app: &str) -> Pod {
    testutil::pod(name).label("app", app).image("pause").build()
}

#[tokio::test]
async fn crud_selectors_and_conflicts() {
    let sb = Sandbox::start(0).await.expect("server");
    let pods: Api<Pod> = Api::namespaced(client(&sb).await, "default");
    pods.create(&PostParams::default(), &pod("a", "web"))
        .await
        .expect("create a");
    pods.create(&PostParams::default(), &pod("b", "db"))
        .await
        .expect("create b");
    let dup = pods
        .create(&PostParams::default(), &pod("a", "web"))
        .await
        .expect_err("duplicate");
    assert!(
        matches!(dup, kube::Error::Api(ref e) if e.code == 409 && e.reason == "AlreadyExists"),
        "{dup}"
    );
    let web = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list");
    assert_eq!(web.items.len(), 1);
    let mut stale = pods.get("a").await.expect("get");
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .expect("patch");
    stale
        .metadata
        .labels
        .get_or_insert_default()
        .insert("y".into(), "2".into());
    let conflict = pods
        .replace("a", &PostParams::default(), &stale)
        .await
        .expect_err("stale write");
    assert!(
        matches!(conflict, kube::Error::Api(ref e) if e.code == 409 && e.reason == "Conflict"),
        "{conflict}"
    );
    let missing = pods.get("nope").await.expect_err("404");
    assert!(
        matches!(missing, kube::Error::Api(ref e) if e.code == 404),
        "{missing}"
    );
}

#[tokio::test]
async fn watch_resumes_and_too_old_versions_get_410() {
    let store = sandbox::Store::with_history(5);
    let sb = Sandbox::start_with(store, 0).await.expect("server");
    let pods: Api<Pod> = Api::namespaced(client(&sb).await, "default");
    let start = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    for i in 0..8 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}"), "web"))
            .await
            .expect("create");
    }
    let mut gone = pods
        .watch(&WatchParams::default(), &start)
        .await
        .expect("watch starts")
        .boxed();
    match gone.try_next().await.expect("event") {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    let recent = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut stream = pods
        .watch(&WatchParams::default().timeout(5), &recent)
        .await
        .expect("watch")
        .boxed();
    pods.delete("p0", &Default::default())
        .await
        .expect("delete");
    match stream.try_next().await.expect("event") {
        Some(WatchEvent::Deleted(p)) => assert_eq!(p.metadata.name.as_deref(), Some("p0")),
        other => panic!("expected the deletion, got {other:?}"),
    }
}

#[tokio::test]
async fn binding_eviction_status_and_scale() {
    let sb = Sandbox::start(0).await.expect("server");
    let c = client(&sb).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(&PostParams::default(), &pod("p", "web"))
        .await
        .expect("create");
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some("p".into()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some("n1".into()),
            ..ObjectReference::default()
        },
    };
    let bound: serde_json::Value = c
        .request(
            http::Request::post("/api/v1/namespaces/default/pods/p/binding")
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&binding).expect("json"))
                .expect("request"),
        )
        .await
        .expect("bind");
    assert_eq!(bound["status"], "Success");
    assert_eq!(
        pods.get("p")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.node_name)
            .as_deref(),
        Some("n1")
    );
    let status = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .expect("status patch");
    assert_eq!(
        status.status.and_then(|s| s.phase).as_deref(),
        Some("Running")
    );
    pods.evict("p", &EvictParams::default())
        .await
        .expect("evict without a budget");
    assert!(pods.get_opt("p").await.expect("get").is_none());

    let deployments: Api<Deployment> = Api::namespaced(c, "default");
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "d"}, "spec": {"replicas": 1,
        "selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "pause"}]}}}}))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    let scale = deployments
        .patch_scale(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(4));
    assert_eq!(
        deployments.get("d").await.expect("get").spec.replicas,
        Some(4)
    );
    let all: Vec<_> = pods
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch")
        .collect()
        .await;
    assert!(
        all.is_empty(),
        "no pods without workload controllers: {all:?}"
    );
}
