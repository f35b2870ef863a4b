//! Tests of `drift explain`'s core: why a NodeClaim is or is not drifted, changes marked by
//! the controller merged with those detected now, version mismatches, and stable JSON fields.

use karpenter_core::lifecycle::drift::{Finding, HashComparison};
use serde_json::{Value, json};

use super::*;
use crate::drift::fixtures::{self, AMI, claim, class, gpu_taint, pool};

fn versions() -> HashVersions {
    HashVersions::default()
}

fn explain(claim: &NodeClaim, pool: &NodePool, class: &EC2NodeClass) -> Report {
    report(claim, Some(pool), Some(class), &versions())
}

fn taint_finding() -> Finding {
    Finding {
        reason: r::NODEPOOL_DRIFTED,
        changes: vec!["spec.template.spec.taints: added dedicated=gpu:NoSchedule".into()],
    }
}

#[test]
fn unchanged_nodeclaim_says_why_it_is_not_drifted() {
    let (p, c) = (pool(json!([])), class());
    let got = explain(&claim("default-a", &p, &c), &p, &c);
    let pool_hash = hash::nodepool_fields(&p).hash();
    let class_hash = hash::nodeclass_fields(&c).hash();
    assert!(!got.drifted);
    assert_eq!(got.source, None);
    assert_eq!(got.live.verdict, LiveVerdict::NotDrifted);
    assert_eq!(
        got.message,
        format!(
            "not drifted: nodepool hash and version equal ({pool_hash}, rs-v1); ec2nodeclass hash \
             and version equal ({class_hash}, rs-v1); requirements admit its labels; AMI {AMI} \
             is current"
        )
    );
    assert_eq!(got.why.len(), 4);
    assert_eq!(got.nodepool_hash.comparison, Some(HashComparison::Equal));
    assert_eq!(
        got.nodepool_hash.current.as_deref(),
        Some(pool_hash.as_str())
    );
    assert_eq!(got.node.as_deref(), Some("ip-default-a.ec2.internal"));
    assert!(got.changes.is_empty());
}

#[test]
fn taint_added_after_stamping_is_detected_before_the_controller_marks_it() {
    let c = class();
    let nc = claim("default-a", &pool(json!([])), &c);
    let got = explain(&nc, &pool(gpu_taint()), &c);
    assert!(got.drifted);
    assert_eq!(got.source, Some(Source::Detected));
    assert_eq!(got.reason.as_deref(), Some("NodePoolDrifted"));
    assert_eq!(got.nodepool_hash.comparison, Some(HashComparison::Differs));
    assert_eq!(got.nodeclass_hash.comparison, Some(HashComparison::Equal));
    assert_eq!(
        got.changes,
        [ChangeLine {
            reason: "NodePoolDrifted".into(),
            change: "spec.template.spec.taints: added dedicated=gpu:NoSchedule".into(),
            source: Source::Detected,
        }]
    );
    assert_eq!(
        got.message,
        "drifted: detected now, not yet marked by the controller (NodePoolDrifted); the \
         controller marks it Drifted on its next check"
    );
}

#[test]
fn marked_changes_and_detected_ones_are_merged_once() {
    let c = class();
    let mut nc = claim("default-a", &pool(json!([])), &c);
    fixtures::mark_drifted(&mut nc, &[taint_finding()]);
    let mut changed = pool(gpu_taint());
    changed
        .spec
        .template
        .metadata
        .labels
        .insert("team".to_owned(), "db".to_owned());
    let got = explain(&nc, &changed, &c);
    assert_eq!(got.source, Some(Source::Controller));
    assert_eq!(
        got.message,
        "drifted: marked by the controller (NodePoolDrifted)"
    );
    let lines: Vec<(&str, Source)> = got
        .changes
        .iter()
        .map(|c| (c.change.as_str(), c.source))
        .collect();
    assert_eq!(
        lines,
        [
            (
                "spec.template.spec.taints: added dedicated=gpu:NoSchedule",
                Source::Both
            ),
            (
                "spec.template.metadata.labels.team: web -> db",
                Source::Detected
            ),
        ]
    );
    let condition = got.condition.expect("condition");
    assert_eq!(condition.status, "True");
    assert_eq!(
        condition.last_transition_time,
        Some("2025-06-01T11:55:00Z".parse().expect("time"))
    );
}

#[test]
fn marked_but_reverted_is_still_drifted_with_a_note() {
    let (p, c) = (pool(json!([])), class());
    let mut nc = claim("default-a", &p, &c);
    fixtures::mark_drifted(&mut nc, &[taint_finding()]);
    let got = explain(&nc, &p, &c);
    assert!(got.drifted);
    assert_eq!(got.live.verdict, LiveVerdict::NotDrifted);
    assert_eq!(got.changes[0].source, Source::Controller);
    assert!(
        got.message
            .ends_with("find no drift: the controller clears the condition on its next check"),
        "{}",
        got.message
    );

    // A reason only the cloud can confirm is not contradicted.
    let mut nc = claim("default-b", &p, &c);
    fixtures::mark_drifted(
        &mut nc,
        &[Finding {
            reason: r::SUBNET_DRIFT,
            changes: vec![
                "subnet: subnet-x (us-east-1a) is no longer selected; selected now: \
                           subnet-a (us-east-1a)"
                    .into(),
            ],
        }],
    );
    let got = explain(&nc, &p, &c);
    assert_eq!(
        got.why,
        ["SubnetDrift is found against the cloud, which the plugin does not check"]
    );
    assert_eq!(got.changes.len(), 1, "{:?}", got.changes);
}

#[test]
fn upstream_stamps_are_a_version_mismatch_not_drift() {
    let (p, c) = (pool(gpu_taint()), class());
    let mut nc = claim("default-a", &p, &c);
    fixtures::stamp_upstream(&mut nc);
    let got = explain(&nc, &p, &c);
    assert!(!got.drifted);
    assert_eq!(
        got.nodepool_hash.comparison,
        Some(HashComparison::VersionMismatch)
    );
    assert_eq!(got.nodepool_hash.stamped_version.as_deref(), Some("v3"));
    assert_eq!(
        got.why[..2],
        [
            "nodepool stamped under hash version v3 (controller uses rs-v1): will be re-stamped, \
             not drifted",
            "ec2nodeclass stamped under hash version v6 (controller uses rs-v1): will be \
             re-stamped, not drifted",
        ]
    );
}

#[test]
fn not_launched_and_missing_objects() {
    let (p, c) = (pool(json!([])), class());
    let mut nc = claim("default-a", &p, &c);
    nc.status = None;
    let got = explain(&nc, &p, &c);
    assert!(!got.drifted);
    assert_eq!(got.live.verdict, LiveVerdict::NotLaunched);
    assert_eq!(
        got.message,
        "not launched: drift does not apply until its instance is launched"
    );

    let nc = claim("default-a", &p, &c);
    let got = report(&nc, None, None, &versions());
    assert!(!got.drifted);
    assert_eq!(got.live.verdict, LiveVerdict::Unknown);
    assert_eq!(got.nodepool_hash.comparison, None);
    assert_eq!(
        got.why,
        [
            "nodepool default not found: its hash is not compared",
            "ec2nodeclass default not found: its hash is not compared",
            "drift not checked: nodepool default not found",
        ]
    );

    // No status on the node class: the AMI cannot be checked, the rest can.
    let mut bare = c.clone();
    bare.status = None;
    let got = report(&nc, Some(&p), Some(&bare), &versions());
    assert!(!got.drifted);
    assert_eq!(
        got.why.last().map(String::as_str),
        Some("AMIDrift not checked: the node class has no status yet")
    );
}

#[test]
fn controller_messages_split_into_changes() {
    let message = "NodePoolDrifted: spec.template.spec.taints: added a:NoSchedule; \
                   NodePoolDrifted: spec.template.metadata.labels.team: web -> db; \
                   SubnetDrift: subnet: s-1 (z) is no longer selected; selected now: s-2 (z)";
    assert_eq!(
        split_message("NodePoolDrifted", message),
        [
            (
                "NodePoolDrifted".to_owned(),
                "spec.template.spec.taints: added a:NoSchedule".to_owned()
            ),
            (
                "NodePoolDrifted".to_owned(),
                "spec.template.metadata.labels.team: web -> db".to_owned()
            ),
            (
                "SubnetDrift".to_owned(),
                "subnet: s-1 (z) is no longer selected; selected now: s-2 (z)".to_owned()
            ),
        ]
    );
    // Upstream's controller leaves the message empty; others may write free text.
    assert!(split_message("NodePoolDrifted", "").is_empty());
    assert_eq!(
        split_message("Drifted", "template changed"),
        [("Drifted".to_owned(), "template changed".to_owned())]
    );
}

#[test]
fn json_field_names_are_stable() {
    let c = class();
    let mut nc = claim("default-a", &pool(json!([])), &c);
    fixtures::mark_drifted(&mut nc, &[taint_finding()]);
    let value = serde_json::to_value(explain(&nc, &pool(gpu_taint()), &c)).expect("json");
    let keys: Vec<&str> = value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = vec![
        "changes",
        "condition",
        "drifted",
        "live",
        "message",
        "name",
        "node",
        "nodeclass",
        "nodeclassHash",
        "nodepool",
        "nodepoolHash",
        "reason",
        "source",
        "why",
    ];
    want.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(value["source"], "controller");
    assert_eq!(value["nodepoolHash"]["comparison"], "differs");
    assert_eq!(value["nodepoolHash"]["currentVersion"], "rs-v1");
    assert_eq!(value["changes"][0]["source"], "both");
    assert_eq!(
        value["live"],
        json!({"verdict": "drifted", "detail": Value::Null})
    );
    assert_eq!(
        value["condition"]["lastTransitionTime"],
        "2025-06-01T11:55:00Z"
    );
}

#[test]
fn reports_are_ordered_by_nodepool_then_name_and_find_their_objects() {
    let (p, c) = (pool(json!([])), class());
    let claims = [claim("default-b", &p, &c), claim("default-a", &p, &c)];
    let reports = report_all(&claims, &[p], &[c], &versions());
    let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["default-a", "default-b"]);
    assert!(
        reports
            .iter()
            .all(|r| r.live.verdict == LiveVerdict::NotDrifted)
    );
}
