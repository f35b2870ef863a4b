//! Tests of the scheduler actor over a sandbox store, with stub placers: a WaitForFirstConsumer
//! claim gets its selected node when the pod binds, and a rejected pod waits in the queue for
//! an event its rejecting plugin registers.

use serde_json::json;

use sandbox::actors::csi::fixtures::{claim, cluster, object, pod};

use super::queue::QueueState;
use super::unschedulable::{Plugin, Unschedulable};
use super::*;

/// Places every pod on `n1`.
struct OnN1;

impl PodPlacer for OnN1 {
    fn place(&self, view: &ClusterView) -> Vec<Result<String, Unschedulable>> {
        view.pending.iter().map(|_| Ok("n1".to_string())).collect()
    }
}

#[test]
fn binding_a_pod_selects_its_node_for_wait_for_first_consumer_claims() {
    let store = cluster();
    claim(&store, "later", Some("wait"), "1Gi");
    claim(&store, "now", Some("now"), "1Gi");
    pod(&store, "a", "later", None);
    pod(&store, "b", "now", None);
    assert_eq!(pass(&store, &OnN1, &mut Scheduler::default()), 2);
    let later = object(&store, "", "persistentvolumeclaims", "default", "later");
    assert_eq!(later["metadata"]["annotations"][SELECTED_NODE], "n1");
    let now = object(&store, "", "persistentvolumeclaims", "default", "now");
    assert_eq!(
        now["metadata"]["annotations"][SELECTED_NODE],
        json!(null),
        "Immediate claims are provisioned without the scheduler"
    );
    assert_eq!(
        object(&store, "", "pods", "default", "a")["spec"]["nodeName"],
        "n1"
    );
}

/// Places every pod on node `big` once it exists; otherwise NodeResourcesFit rejects each
/// node. Counts the pods it was asked to place (scheduling attempts).
#[derive(Default)]
struct OnBig(std::sync::atomic::AtomicUsize);

impl PodPlacer for OnBig {
    fn place(&self, view: &ClusterView) -> Vec<Result<String, Unschedulable>> {
        use std::sync::atomic::Ordering;
        self.0.fetch_add(view.pending.len(), Ordering::SeqCst);
        let big = view
            .nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("big"));
        view.pending
            .iter()
            .map(|_| {
                if big {
                    return Ok("big".to_string());
                }
                let mut why = Unschedulable::filters(view.nodes.len());
                for _ in view.nodes {
                    why.reject(Plugin::NodeResourcesFit, "Insufficient cpu".into());
                }
                Err(why)
            })
            .collect()
    }
}

/// The actor end to end over the queue (`scheduling_queue.go` `MoveAllToActiveOrBackoffQueue`
/// fed by `eventhandlers.go`): a rejected pod is marked Unschedulable once, is not tried
/// again on an unrelated change (a pod bound elsewhere, which NodeResourcesFit does not
/// register), and is tried and bound on the Node/Add event that lets it fit.
#[test]
fn a_rejected_pod_is_retried_on_a_node_add_and_not_on_an_unrelated_change() {
    use std::sync::atomic::Ordering;
    let store = cluster();
    pod(&store, "a", "none", None);
    let placer = OnBig::default();
    let no_backoff = QueueConfig {
        initial_backoff: jiff::SignedDuration::ZERO,
        max_backoff: jiff::SignedDuration::ZERO,
        ..QueueConfig::default()
    };
    let mut state = Scheduler::new(no_backoff);
    assert_eq!(pass(&store, &placer, &mut state), 0);
    assert_eq!(placer.0.load(Ordering::SeqCst), 1);
    let a = object(&store, "", "pods", "default", "a");
    assert_eq!(a["status"]["conditions"][0]["reason"], "Unschedulable");
    assert_eq!(
        a["status"]["conditions"][0]["message"],
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
    pod(&store, "b", "none", Some("n1"));
    assert_eq!(pass(&store, &placer, &mut state), 0);
    assert_eq!(pass(&store, &placer, &mut state), 0);
    assert_eq!(
        placer.0.load(Ordering::SeqCst),
        1,
        "no retry without a hinted event"
    );
    assert_eq!(
        state.queue().state("default/a"),
        Some(QueueState::Unschedulable)
    );
    let nodes = store.resource("", "v1", "nodes").expect("served");
    store
        .create(
            &nodes,
            "",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "big"}}),
        )
        .expect("node");
    assert_eq!(pass(&store, &placer, &mut state), 1);
    assert_eq!(placer.0.load(Ordering::SeqCst), 2);
    assert_eq!(
        object(&store, "", "pods", "default", "a")["spec"]["nodeName"],
        "big"
    );
    assert_eq!(state.queue().state("default/a"), None);
}
