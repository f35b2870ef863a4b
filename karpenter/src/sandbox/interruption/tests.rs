//! The Interruption actor: the pure pending list, node resolution and status, and a
//! rehearsal through the store into a simulated cloud with a queue.

use controller::cloudprovider::CloudProvider;
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL};
use crds::{EC2NodeClass, Operator};
use karpenter_core::clock::FakeClock;
use karpenter_core::interruption::SPOT_WARNING;
use testutil::{ec2nodeclass, nodeclaim};

use super::*;

fn object(name: &str, spec: Value, status: Option<Value>) -> Arc<Value> {
    let mut o = json!({"apiVersion": "sandbox.karpenter.sh/v1", "kind": "Interruption",
        "metadata": {"name": name}, "spec": spec});
    if let Some(s) = status {
        o["status"] = s;
    }
    Arc::new(o)
}

#[test]
fn only_interruptions_not_sent_yet_are_pending() {
    let sent = json!({"conditions": [{"type": "Sent", "status": "True"}]});
    let refused = json!({"conditions": [{"type": "Sent", "status": "False"}]});
    let mut deleting = (*object("d", json!({"node": "n", "kind": "rebalance"}), None)).clone();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-03-01T00:00:00Z");
    let objects = [
        object(
            "new",
            json!({"node": "ip-10-0-1-2.ec2.internal", "kind": "spot-interruption"}),
            None,
        ),
        object("sent", json!({"node": "n", "kind": "stopping"}), Some(sent)),
        object(
            "refused",
            json!({"node": "n", "kind": "stopping"}),
            Some(refused),
        ),
        Arc::new(deleting),
        object("bad", json!({"node": "n", "kind": "reboot"}), None),
    ];
    let p = pending(&objects);
    let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["new", "bad"]);
    assert_eq!(
        p[0].1,
        Ok(InterruptionSpec {
            node: "ip-10-0-1-2.ec2.internal".into(),
            kind: InterruptionKind::SpotInterruption,
        })
    );
    assert!(p[1].1.as_ref().is_err_and(|e| e.contains("invalid spec")));
}

#[test]
fn a_node_resolves_to_its_provider_id_else_a_nodeclaim_s() {
    let node = |name: &str, pid: Option<&str>| {
        let mut n = json!({"metadata": {"name": name}, "spec": {}});
        if let Some(p) = pid {
            n["spec"]["providerID"] = json!(p);
        }
        Arc::new(n)
    };
    let claim = |name: &str, pid: &str| {
        Arc::new(json!({"metadata": {"name": name}, "status": {"providerID": pid}}))
    };
    let nodes = [
        node("ip-a", Some("aws:///us-east-1a/i-0a")),
        node("bare", None),
    ];
    let claims = [
        claim("default-x", "aws:///us-east-1b/i-0b"),
        claim("default-y", ""),
    ];
    assert_eq!(
        provider_id_of("ip-a", &nodes, &claims),
        Ok("aws:///us-east-1a/i-0a".into())
    );
    assert_eq!(
        provider_id_of("default-x", &nodes, &claims),
        Ok("aws:///us-east-1b/i-0b".into())
    );
    let err = provider_id_of("bare", &nodes, &claims).expect_err("no instance");
    assert_eq!(err.reason, "NoInstance");
    assert_eq!(
        err.message,
        "node bare has no providerID: no instance to interrupt"
    );
    let err = provider_id_of("default-y", &nodes, &claims).expect_err("not launched");
    assert_eq!(err.reason, "NoInstance");
    let err = provider_id_of("ghost", &nodes, &claims).expect_err("unknown");
    assert_eq!(err.reason, "NodeNotFound");
    assert_eq!(err.message, "no node or nodeclaim named ghost");
}

#[test]
fn the_crd_lists_columns_for_kubectl_get() {
    let crd = crd();
    assert_eq!(
        crd["metadata"]["name"],
        "interruptions.sandbox.karpenter.sh"
    );
    let version = &crd["spec"]["versions"][0];
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .filter(|c| c["priority"] == 0)
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        ["Node", "Kind", "Instance", "Sent", "Reclaim-At", "Age"]
    );
    let kinds =
        &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["kind"]["enum"];
    assert_eq!(kinds.as_array().map(Vec::len), Some(5));
}

async fn status_of(store: &Store, name: &str, events: usize) -> Value {
    let rt = store.resource(GROUP, VERSION, PLURAL).expect("served");
    for _ in 0..300 {
        if let Ok(obj) = store.get(&rt, "", name)
            && obj.pointer("/status/conditions").is_some()
            && obj
                .pointer("/status/events")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
                >= events
        {
            return obj["status"].clone();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("interruption/{name} has no status with {events} events");
}

#[tokio::test]
async fn an_interruption_object_is_sent_and_ec2_s_later_events_are_recorded() {
    let t0: jiff::Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
    let clock = Arc::new(FakeClock::new(t0));
    let sim = Arc::new(
        SimCloud::new("demo", Arc::clone(&clock) as Arc<dyn Clock>)
            .expect("catalog")
            .with_interruption_queue("karpenter-sandbox"),
    );
    let mut nc: EC2NodeClass = ec2nodeclass("default").build();
    nc.status = Some(
        sim.with_network(|n| n.resolve("demo", &nc, jiff::Timestamp::now()))
            .status,
    );
    let claim = nodeclaim("default-spot")
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["m5.large"])
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["spot"])
        .build();
    let launched = sim.create(&claim, &nc).await.expect("launch");

    let store = Store::new();
    let nodes = store.resource("", "v1", "nodes").expect("nodes served");
    store
        .create(
            &nodes,
            "",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-1-2.ec2.internal"},
                "spec": {"providerID": launched.provider_id}}),
        )
        .expect("node");
    let task = start(
        &store,
        Arc::clone(&sim),
        Arc::clone(&clock) as Arc<dyn Clock>,
    )
    .expect("starts");
    let rt = store
        .resource(GROUP, VERSION, PLURAL)
        .expect("CRD installed");
    let spec = json!({"node": "ip-10-0-1-2.ec2.internal", "kind": "spot-interruption"});
    store
        .create(&rt, "", (*object("spot", spec, None)).clone())
        .expect("created");
    let s = status_of(&store, "spot", 1).await;
    assert_eq!(s["conditions"][0]["status"], "True", "{s}");
    let id = launched.provider_id.rsplit('/').next().expect("id");
    assert_eq!(s["instanceID"], id);
    assert_eq!(s["providerID"], json!(launched.provider_id));
    assert_eq!(s["capacityType"], "spot");
    assert_eq!(s["queue"], "karpenter-sandbox");
    assert_eq!(s["reclaimAt"], "2026-11-26T10:02:00Z");
    assert_eq!(
        s["events"][0]["detailType"],
        "EC2 Spot Instance Interruption Warning"
    );
    assert_eq!(
        s["conditions"][0]["message"],
        format!(
            "sent EC2 Spot Instance Interruption Warning for {id} to karpenter-sandbox; EC2 \
             reclaims it at 2026-11-26T10:02:00Z"
        )
    );
    let queue = sim.interruption_queue().expect("queue");
    assert_eq!(queue.len(), 1);

    // The warning runs out: EC2 reclaims the instance and its state changes are recorded.
    clock.advance(jiff::SignedDuration::try_from(SPOT_WARNING).expect("duration"));
    let s = status_of(&store, "spot", 2).await;
    assert_eq!(s["events"][1]["state"], "shutting-down", "{s}");
    assert!(sim.instances().is_empty());
    assert_eq!(queue.len(), 2);

    // Refusals: an unknown node, a kind EC2 does not send for the instance's state.
    let refused = [
        (
            "ghost",
            json!({"node": "ghost", "kind": "terminating"}),
            "NodeNotFound",
        ),
        (
            "again",
            json!({"node": "ip-10-0-1-2.ec2.internal", "kind": "terminating"}),
            "InstanceNotRunning",
        ),
    ];
    for (name, spec, reason) in refused {
        store
            .create(&rt, "", (*object(name, spec, None)).clone())
            .expect("created");
        let s = status_of(&store, name, 0).await;
        assert_eq!(s["conditions"][0]["status"], "False", "{s}");
        assert_eq!(s["conditions"][0]["reason"], reason, "{s}");
    }
    assert_eq!(queue.len(), 2, "refusals send nothing");
    task.abort();
}
