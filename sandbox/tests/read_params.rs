//! The read parameters of lists and watches over HTTP, as kube-apiserver answers them (issue
//! 33, defect 8): resourceVersions the store has not reached, `resourceVersionMatch`, field
//! selectors, `timeoutSeconds`.

use std::time::Duration;

use sandbox::server::Limits;
use sandbox::{Sandbox, Store};
use serde_json::{Value, json};

use crate::support::{get_json, send};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// A sandbox that waits 100 ms (not 3 s) for a resourceVersion it has not reached.
async fn sandbox() -> Sandbox {
    let limits = Limits {
        resource_version_wait: Duration::from_millis(100),
        ..Limits::default()
    };
    Sandbox::start_with_limits(Store::new(), 0, limits)
        .await
        .expect("server")
}

async fn create_configmap(sb: &Sandbox, name: &str) -> u64 {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let (code, body) = send(sb, "POST", CONFIGMAPS, cm.to_string().into_bytes()).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let created: Value = serde_json::from_slice(&body).expect("JSON");
    rv_of(&created)
}

fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .expect("a resourceVersion")
}

/// The lines of a finished watch, decoded.
fn events(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON event"))
        .collect()
}

#[tokio::test]
async fn a_watch_from_a_future_version_sends_only_what_comes_after_it() {
    let sb = sandbox().await;
    let future = sb.store().resource_version() + 2;
    let path = format!("{CONFIGMAPS}?watch=true&resourceVersion={future}&timeoutSeconds=1");
    let client = kube::Client::try_from(sb.client_config()).expect("client");
    let request = http::Request::get(path)
        .body(kube::client::Body::empty())
        .expect("a request");
    // The answer's headers come once the watch is registered: every change below is live.
    let response = client.send(request).await.expect("a response");
    assert_eq!(response.status().as_u16(), 200);
    let mut rvs = Vec::new();
    for name in ["a", "b", "c", "d"] {
        rvs.push(create_configmap(&sb, name).await);
    }
    let body = response.into_body().collect_bytes().await.expect("body");
    let seen: Vec<u64> = events(&body).iter().map(|e| rv_of(&e["object"])).collect();
    let later: Vec<u64> = rvs.into_iter().filter(|rv| *rv > future).collect();
    assert!(!later.is_empty());
    assert_eq!(seen, later, "changes up to {future} are not sent");
}

#[tokio::test]
async fn a_streaming_list_from_a_future_version_gets_too_large_resource_version() {
    let sb = sandbox().await;
    let current = sb.store().resource_version();
    let future = current + 100;
    let path = format!(
        "{CONFIGMAPS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
         &resourceVersion={future}&timeoutSeconds=5"
    );
    let started = std::time::Instant::now();
    let (code, body) = send(&sb, "GET", &path, Vec::new()).await;
    assert_eq!(code, 200, "errors after the watch began are events");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "it waited briefly"
    );
    assert_eq!(
        events(&body),
        [json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("Too large resource version: {future}, current: {current}"),
            "reason": "Timeout", "code": 504,
            "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                "message": "Too large resource version"}], "retryAfterSeconds": 1}}})]
    );
}

#[tokio::test]
async fn a_list_at_a_future_version_waits_for_it_then_answers_504() {
    let sb = sandbox().await;
    let current = sb.store().resource_version();
    let path = format!("{CONFIGMAPS}?resourceVersion={}", current + 50);
    let (code, status) = get_json(&sb, &path).await;
    assert_eq!(code, 504, "{status}");
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    // A version reached while the list waits is served.
    let later = create_configmap(&sb, "late").await;
    let (code, list) = get_json(
        &sb,
        &format!("{CONFIGMAPS}?resourceVersion={later}&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn resource_version_match_is_checked_as_kube_apiserver_checks_it() {
    let sb = sandbox().await;
    let rv = create_configmap(&sb, "one").await;
    let (code, status) = get_json(
        &sb,
        &format!("{CONFIGMAPS}?resourceVersion=garbage&resourceVersionMatch=Exact"),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("invalid resource version \"garbage\"")),
        "{status}"
    );
    let (code, status) = get_json(&sb, &format!("{CONFIGMAPS}?resourceVersionMatch=Exact")).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: \
         resourceVersionMatch is forbidden unless resourceVersion is provided"
    );
    let (code, exact) = get_json(
        &sb,
        &format!("{CONFIGMAPS}?resourceVersion={rv}&resourceVersionMatch=Exact"),
    )
    .await;
    assert_eq!(code, 200, "the current version, exactly: {exact}");
    assert_eq!(exact["metadata"]["resourceVersion"], rv.to_string());
    create_configmap(&sb, "two").await;
    let (code, status) = get_json(
        &sb,
        &format!("{CONFIGMAPS}?resourceVersion={rv}&resourceVersionMatch=Exact"),
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (410, Some("Expired")),
        "a past state is not kept: {status}"
    );
}

#[tokio::test]
async fn malformed_and_unsupported_field_selectors_are_400() {
    let sb = sandbox().await;
    create_configmap(&sb, "a").await;
    for (selector, message) in [
        (
            "metadata.name%3Da%3Db",
            "invalid field selector: unescaped character in value: 61",
        ),
        ("spec.foo%3Dx", "field label not supported: spec.foo"),
        (
            "nonsense",
            "invalid selector: 'nonsense'; can't understand 'nonsense'",
        ),
    ] {
        for watch in ["", "&watch=true&timeoutSeconds=1"] {
            let path = format!("{CONFIGMAPS}?fieldSelector={selector}{watch}");
            let (code, status) = get_json(&sb, &path).await;
            assert_eq!(code, 400, "{path}: {status}");
            assert_eq!(status["message"], message, "{path}");
        }
    }
    let (code, list) = get_json(
        &sb,
        &format!("{CONFIGMAPS}?fieldSelector=metadata.name%3Da"),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn a_negative_watch_timeout_ends_the_watch_at_once() {
    let sb = sandbox().await;
    create_configmap(&sb, "a").await;
    let path = format!("{CONFIGMAPS}?watch=true&timeoutSeconds=-5");
    let watch = send(&sb, "GET", &path, Vec::new());
    let (code, body) = tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .expect("the watch ended at once");
    assert_eq!(code, 200);
    assert!(body.is_empty(), "{}", String::from_utf8_lossy(&body));
    let (code, status) =
        get_json(&sb, &format!("{CONFIGMAPS}?watch=true&timeoutSeconds=soon")).await;
    assert_eq!(code, 400, "{status}");
}
