//! The AMIRelease actor: the pure pending list and status, and publishing through the store
//! into a simulated cloud whose node class resolution then moves.

use std::time::Duration;

use testutil::ec2nodeclass;

use super::*;
use controller::cloudprovider::CloudProvider;
use karpenter_core::clock::SystemClock;

fn release(name: &str, spec: Value, status: Option<Value>) -> Arc<Value> {
    let mut o = json!({"apiVersion": "sandbox.karpenter.sh/v1", "kind": "AMIRelease",
        "metadata": {"name": name}, "spec": spec});
    if let Some(s) = status {
        o["status"] = s;
    }
    Arc::new(o)
}

#[test]
fn only_unpublished_releases_are_pending() {
    let done = json!({"conditions": [{"type": "Published", "status": "True"}]});
    let refused = json!({"conditions": [{"type": "Published", "status": "False"}]});
    let mut deleting = (*release("d", json!({"family": "al2"}), None)).clone();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-03-01T00:00:00Z");
    let objects = [
        release(
            "new",
            json!({"family": "al2023", "version": "v20260401"}),
            None,
        ),
        release("done", json!({"family": "al2023"}), Some(done)),
        release("refused", json!({"family": "al2023"}), Some(refused)),
        Arc::new(deleting),
        release("broken", json!({"version": 7}), None),
    ];
    let p = pending(&objects);
    let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["new", "broken"]);
    assert_eq!(
        p[0].1,
        Ok(ReleaseSpec {
            family: "al2023".into(),
            version: Some("v20260401".into()),
            architectures: vec![],
            broken: false,
        })
    );
    assert!(p[1].1.as_ref().is_err_and(|e| e.contains("invalid spec")));
}

#[test]
fn status_lists_the_images_or_the_refusal() {
    let now: jiff::Timestamp = "2026-03-02T10:00:00.5Z".parse().expect("time");
    let mut net = controller::cloudprovider::sim::network::SimNetwork::new("demo");
    let amis = net
        .publish_release("al2023", Some("v20260401"), &[])
        .expect("publishes");
    let s = status(&Ok(amis.clone()), now);
    assert_eq!(s["version"], "v20260401");
    assert_eq!(s["amis"][1]["id"], json!(amis[1].id));
    assert_eq!(s["amis"][1]["architecture"], "arm64");
    assert_eq!(s["conditions"][0]["status"], "True");
    assert_eq!(
        s["conditions"][0]["message"],
        "published al2023@v20260401 for amd64, arm64"
    );
    assert_eq!(
        s["conditions"][0]["lastTransitionTime"],
        "2026-03-02T10:00:00Z"
    );
    let s = status(&Err(("AlreadyPublished".into(), "exists".into())), now);
    assert_eq!(s["conditions"][0]["status"], "False");
    assert_eq!(s["conditions"][0]["reason"], "AlreadyPublished");
    assert!(s.get("amis").is_none());
}

async fn status_of(store: &Store, name: &str) -> Value {
    let rt = store.resource(GROUP, VERSION, PLURAL).expect("served");
    for _ in 0..200 {
        if let Ok(obj) = store.get(&rt, "", name)
            && obj.pointer("/status/conditions").is_some()
        {
            return obj["status"].clone();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("amirelease/{name} got no status");
}

#[tokio::test]
async fn creating_a_release_publishes_it_and_signals_re_resolution() {
    let store = Store::new();
    let sim = Arc::new(SimCloud::new("demo", Arc::new(SystemClock)).expect("catalog"));
    let task = start(&store, Arc::clone(&sim), Arc::new(SystemClock)).expect("starts");
    let mut changes = sim.resolution_changes().expect("the sim signals changes");
    let class = ec2nodeclass("default").build();
    let before = sim.resolve_node_class(&class).await.status.amis;
    let rt = store
        .resource(GROUP, VERSION, PLURAL)
        .expect("CRD installed");

    store
        .create(
            &rt,
            "",
            (*release("next", json!({"family": "al2023"}), None)).clone(),
        )
        .expect("created");
    let s = status_of(&store, "next").await;
    assert_eq!(s["conditions"][0]["status"], "True", "{s}");
    assert_eq!(s["version"], "v20260302");
    tokio::time::timeout(Duration::from_secs(1), changes.changed())
        .await
        .expect("a change is signalled")
        .expect("sender alive");
    let after = sim.resolve_node_class(&class).await.status.amis;
    let ids: Vec<&str> = after.iter().map(|a| a.id.as_str()).collect();
    let published: Vec<&str> = s["amis"]
        .as_array()
        .expect("amis")
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(published.iter().all(|id| ids.contains(id)), "{ids:?}");
    assert!(before.iter().all(|a| !ids.contains(&a.id.as_str())));

    // Refused releases say why and publish nothing; a status written once is final.
    let twice = release(
        "again",
        json!({"family": "al2023", "version": "v20260302", "architectures": ["arm64"]}),
        None,
    );
    store.create(&rt, "", (*twice).clone()).expect("created");
    let s = status_of(&store, "again").await;
    assert_eq!(s["conditions"][0]["reason"], "AlreadyPublished", "{s}");
    assert_eq!(sim.resolve_node_class(&class).await.status.amis, after);
    task.abort();
}

#[tokio::test]
async fn a_broken_release_publishes_images_no_node_registers_from() {
    let store = Store::new();
    let sim = Arc::new(SimCloud::new("demo", Arc::new(SystemClock)).expect("catalog"));
    let task = start(&store, Arc::clone(&sim), Arc::new(SystemClock)).expect("starts");
    let rt = store
        .resource(GROUP, VERSION, PLURAL)
        .expect("CRD installed");
    let spec = json!({"family": "al2023", "architectures": ["arm64"], "broken": true});
    let parsed = pending(&[release("bad", spec.clone(), None)]);
    assert!(parsed[0].1.as_ref().is_ok_and(|s| s.broken), "{parsed:?}");

    store
        .create(&rt, "", (*release("bad", spec, None)).clone())
        .expect("created");
    let s = status_of(&store, "bad").await;
    assert_eq!(s["conditions"][0]["status"], "True", "{s}");
    let id = s["amis"][0]["id"].as_str().expect("published image");
    assert_eq!(sim.broken_images(), [id.to_string()].into());

    // Without `broken`, images are healthy.
    store
        .create(
            &rt,
            "",
            (*release("good", json!({"family": "al2"}), None)).clone(),
        )
        .expect("created");
    let s = status_of(&store, "good").await;
    assert_eq!(s["amis"].as_array().map(Vec::len), Some(2), "{s}");
    assert_eq!(sim.broken_images().len(), 1);
    task.abort();
}
