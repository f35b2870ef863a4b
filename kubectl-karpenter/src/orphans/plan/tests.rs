//! Plans for the sample's orphans: the steps per kind, the finalizer rule without a cloud view,
//! one termination per instance, and the preview text.

use super::*;
use crate::orphans::fixtures::{checked, orphans, world};
use crate::orphans::{CloudView, InstanceState};

fn lines(plans: &[Plan]) -> String {
    let mut out = Vec::new();
    write_preview(&mut out, plans).expect("write");
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn preview_of_every_kind_with_the_cloud_checked() {
    let w = world();
    let plans = plan(&orphans(&w, &checked(&w)), true);
    let want = "\
NotLaunched nodeclaim.karpenter.sh/default-unlaunched:
  - delete nodeclaim default-unlaunched
NotRegistered nodeclaim.karpenter.sh/default-unregistered:
  - delete nodeclaim default-unregistered
  - terminate instance i-0a1b2c3d4e5f60002 (aws:///us-east-1a/i-0a1b2c3d4e5f60002)
  - delete node ip-10-0-1-2
  - remove finalizer karpenter.sh/termination from nodeclaim default-unregistered
StuckTerminating nodeclaim.karpenter.sh/gpu-stuck:
  - terminate instance i-0a1b2c3d4e5f60003 (aws:///us-east-1a/i-0a1b2c3d4e5f60003)
  - delete node ip-10-0-3-3
  - remove finalizer karpenter.sh/termination from node ip-10-0-3-3
  - remove finalizer karpenter.sh/termination from nodeclaim gpu-stuck
NodeWithoutNodeClaim node/ip-10-0-2-5:
  - terminate instance i-0a1b2c3d4e5f60005 (aws:///us-east-1a/i-0a1b2c3d4e5f60005)
  - delete node ip-10-0-2-5
  - remove finalizer karpenter.sh/termination from node ip-10-0-2-5
InstanceWithoutNodeClaim instance/i-0a1b2c3d4e5f60005:
  note: instance i-0a1b2c3d4e5f60005 is terminated with node/ip-10-0-2-5 above
InstanceGone nodeclaim.karpenter.sh/default-lost:
  - delete nodeclaim default-lost
  - delete node ip-10-0-1-9
  - remove finalizer karpenter.sh/termination from node ip-10-0-1-9
  - remove finalizer karpenter.sh/termination from nodeclaim default-lost
";
    let got = lines(&plans);
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn an_instance_is_terminated_once_even_when_two_orphans_share_it() {
    let w = world();
    let found = orphans(&w, &checked(&w));
    let instance_only: Vec<Orphan> = found
        .iter()
        .filter(|o| o.kind == Kind::InstanceWithoutNodeClaim)
        .cloned()
        .collect();
    let plans = plan(&instance_only, true);
    assert_eq!(
        plans[0].steps,
        [Step::TerminateInstance {
            id: "i-0a1b2c3d4e5f60005".into(),
            provider_id: "aws:///us-east-1a/i-0a1b2c3d4e5f60005".into(),
        }]
    );
    assert_eq!(step_count(&plan(&found, true)), 16);
}

#[test]
fn without_a_cloud_view_finalizers_stay_for_the_controller() {
    let w = world();
    let cloud = CloudView::Unchecked {
        reason: "--no-cloud".into(),
    };
    let plans = plan(&orphans(&w, &cloud), false);
    for p in &plans {
        assert!(
            !p.steps.iter().any(|s| matches!(
                s,
                Step::RemoveFinalizer { .. } | Step::TerminateInstance { .. }
            )),
            "{p:#?}"
        );
    }
    let stuck = plans
        .iter()
        .find(|p| p.orphan.kind == Kind::StuckTerminating)
        .expect("stuck");
    assert_eq!(
        stuck.steps,
        [Step::DeleteNode {
            name: "ip-10-0-3-3".into()
        }]
    );
    assert_eq!(stuck.notes, [UNCHECKED_NOTE]);
    // A NodeClaim without Karpenter's finalizer needs no note.
    let unlaunched = plans
        .iter()
        .find(|p| p.orphan.kind == Kind::NotLaunched)
        .expect("unlaunched");
    assert!(unlaunched.notes.is_empty());
}

#[test]
fn other_finalizers_are_kept_and_said_so() {
    let w = world();
    let mut found = orphans(&w, &checked(&w));
    let lost = found
        .iter_mut()
        .find(|o| o.kind == Kind::InstanceGone)
        .expect("lost");
    if let Some(claim) = lost.nodeclaim.as_mut() {
        claim.finalizers.push("example.com/audit".into());
        claim.deleting = true;
    }
    let plans = plan(std::slice::from_ref(lost), true);
    assert_eq!(
        plans[0].steps.len(),
        3,
        "no second delete: {:?}",
        plans[0].steps
    );
    assert_eq!(
        plans[0].notes,
        ["nodeclaim default-lost keeps its other finalizers: example.com/audit"]
    );
    let text = lines(&plans);
    assert!(
        text.ends_with(
            "  note: nodeclaim default-lost keeps its other finalizers: example.com/audit\n"
        ),
        "{text}"
    );
}

#[test]
fn a_node_already_deleting_is_not_deleted_again() {
    let w = world();
    let mut found = orphans(&w, &checked(&w));
    let node = found
        .iter_mut()
        .find(|o| o.kind == Kind::NodeWithoutNodeClaim)
        .expect("node");
    node.instance = InstanceState::Gone {
        provider_id: "aws:///us-east-1a/i-x".into(),
    };
    if let Some(n) = node.node.as_mut() {
        n.deleting = true;
    }
    let plans = plan(std::slice::from_ref(node), true);
    assert_eq!(
        plans[0].steps,
        [Step::RemoveFinalizer {
            resource: Resource::Node,
            name: "ip-10-0-2-5".into()
        }]
    );
}

#[test]
fn a_duplicate_provider_id_is_left_alone() {
    let mut w = world();
    let mut copy =
        crate::orphans::fixtures::launched("default-copy", "default", 1, Some("ip-10-0-1-1"));
    crate::orphans::fixtures::set_true_at(&mut copy, "Registered", "11:30:05");
    w.claims.push(copy);
    let dupes: Vec<Orphan> = orphans(&w, &checked(&w))
        .into_iter()
        .filter(|o| o.kind == Kind::DuplicateProviderID)
        .collect();
    let plans = plan(&dupes, true);
    assert_eq!(plans.len(), 1);
    assert!(plans[0].steps.is_empty(), "{:?}", plans[0].steps);
    let got = lines(&plans);
    assert!(
        got.starts_with(
            "DuplicateProviderID nodeclaim.karpenter.sh/default-copy:\n  note: left alone"
        ),
        "{got}"
    );
    assert_eq!(step_count(&plans), 0);
}
