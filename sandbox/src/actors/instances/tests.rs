//! The instance mirror: the pure plan, the object shape, and the actor against a fake cloud.

use std::sync::Mutex;

use async_trait::async_trait;

use super::*;
use crate::store::Store;

fn record(id: &str, nodeclaim: &str) -> BootRecord {
    BootRecord {
        provider_id: format!("aws:///us-east-1a/{id}"),
        hostname: format!("ip-{id}.ec2.internal"),
        private_ip: "10.0.1.7".into(),
        launched_at: "2025-06-01T11:00:00Z".parse().expect("time"),
        labels: BTreeMap::new(),
        taints: vec![],
        capacity: BTreeMap::new(),
        allocatable: BTreeMap::new(),
        architecture: "amd64".into(),
        image_id: "ami-0123".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: "on-demand".into(),
        price: Some(0.096),
        tags: [
            ("karpenter.sh/nodeclaim".to_owned(), nodeclaim.to_owned()),
            ("karpenter.sh/nodepool".to_owned(), "default".to_owned()),
            ("Name".to_owned(), "has spaces, not a label".to_owned()),
        ]
        .into(),
    }
}

fn object(name: &str, deleting: bool) -> Arc<Value> {
    let mut obj = json!({"metadata": {"name": name, "finalizers": [FINALIZER]}});
    if deleting {
        obj["metadata"]["deletionTimestamp"] = json!("2025-06-01T11:30:00Z");
    }
    Arc::new(obj)
}

#[test]
fn plan_creates_terminates_releases_and_removes() {
    let running = [
        record("i-0new", "a"),
        record("i-0kept", "b"),
        record("i-0deleted", "c"),
    ];
    let objects = [
        object("i-0kept", false),
        object("i-0deleted", true),
        object("i-0finished", true),
        object("i-0vanished", false),
    ];
    let plan = plan(&running, &objects);
    let created: Vec<&str> = plan
        .create
        .iter()
        .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    assert_eq!(created, ["i-0new"]);
    assert_eq!(
        plan.terminate,
        [(
            "i-0deleted".to_owned(),
            "aws:///us-east-1a/i-0deleted".to_owned()
        )]
    );
    assert_eq!(plan.release, ["i-0finished"]);
    assert_eq!(plan.remove, ["i-0vanished"]);
    assert_eq!(super::plan(&[], &[]), MirrorPlan::default());
}

#[test]
fn object_carries_the_instance_and_label_safe_tags() {
    let obj = object_for(&record("i-0abc", "default-x7k2p")).expect("valid id");
    assert_eq!(obj["kind"], "Instance");
    assert_eq!(obj["apiVersion"], "sandbox.karpenter.sh/v1");
    assert_eq!(obj["metadata"]["name"], "i-0abc");
    assert_eq!(obj["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(
        obj["metadata"]["labels"],
        json!({"karpenter.sh/nodeclaim": "default-x7k2p", "karpenter.sh/nodepool": "default"})
    );
    assert_eq!(obj["spec"]["providerID"], "aws:///us-east-1a/i-0abc");
    assert_eq!(obj["spec"]["nodeClaim"], "default-x7k2p");
    assert_eq!(obj["spec"]["tags"]["Name"], "has spaces, not a label");
    assert_eq!(obj["status"]["hourlyPrice"], 0.096);
    assert_eq!(obj["status"]["launchTime"], "2025-06-01T11:00:00Z");
    let mut bad = record("x", "a");
    bad.provider_id = "aws:///us-east-1a/I_UPPER".into();
    assert_eq!(object_for(&bad), None);
    assert_eq!(instance_id("kwok://node-1"), Some("node-1"));
    assert_eq!(instance_id("aws:///us-east-1a/"), None);
}

/// A cloud whose instances tests add and remove.
#[derive(Default)]
struct FakeCloud {
    running: Mutex<Vec<BootRecord>>,
    terminated: Mutex<Vec<String>>,
}

#[async_trait]
impl InstanceSource for FakeCloud {
    async fn running(&self) -> Result<Vec<BootRecord>, String> {
        Ok(self.running.lock().expect("lock").clone())
    }

    async fn terminate(&self, provider_id: &str) -> Result<(), String> {
        self.running
            .lock()
            .expect("lock")
            .retain(|r| r.provider_id != provider_id);
        self.terminated
            .lock()
            .expect("lock")
            .push(provider_id.to_owned());
        Ok(())
    }
}

async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..200 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn deleting_the_object_terminates_the_instance() {
    let store = Store::new();
    install_crd(&store).expect("install");
    install_crd(&store).expect("installing twice is fine");
    let rt = store.resource(GROUP, VERSION, PLURAL).expect("served");
    let cloud = Arc::new(FakeCloud::default());
    cloud
        .running
        .lock()
        .expect("lock")
        .extend([record("i-0one", "a"), record("i-0two", "b")]);
    let config = ActorConfig {
        kubelet_poll: Duration::from_millis(50),
        ..ActorConfig::default()
    };
    let task = tokio::spawn(run(Arc::clone(&store), config, cloud.clone()));
    let names = || -> Vec<String> {
        store
            .objects(&rt.key())
            .iter()
            .filter_map(|o| str_at(o, &["metadata", "name"]).map(str::to_owned))
            .collect()
    };
    eventually("both mirrored", || names() == ["i-0one", "i-0two"]).await;

    store
        .delete(&rt, "", "i-0one", &DeleteOptions::default())
        .expect("delete");
    eventually("object gone", || names() == ["i-0two"]).await;
    assert_eq!(
        *cloud.terminated.lock().expect("lock"),
        ["aws:///us-east-1a/i-0one"]
    );

    // An instance that goes away by itself takes its object with it.
    cloud.running.lock().expect("lock").clear();
    eventually("mirror emptied", || names().is_empty()).await;
    assert_eq!(cloud.terminated.lock().expect("lock").len(), 1);
    task.abort();
}
