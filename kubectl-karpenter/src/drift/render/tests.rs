//! Tests of `drift explain`'s output: the text snapshot, notes on disagreements, colour only
//! when asked, and the JSON and YAML documents.

use crds::conditions::reason as r;
use karpenter_core::lifecycle::drift::{Finding, HashVersions};
use serde_json::{Value, json};

use super::*;
use crate::drift::explain::report_all;
use crate::drift::fixtures::{self, claim, class, gpu_taint, pool};
use crate::fixtures::now;

/// A NodeClaim marked drifted for a taint added to its NodePool, one that is not drifted, one
/// stamped by upstream Karpenter and one not launched.
fn reports() -> Vec<Report> {
    let (old, c) = (pool(json!([])), class());
    let mut drifted = claim("default-a", &old, &c);
    fixtures::mark_drifted(
        &mut drifted,
        &[Finding {
            reason: r::NODEPOOL_DRIFTED,
            changes: vec!["spec.template.spec.taints: added dedicated=gpu:NoSchedule".into()],
        }],
    );
    let current = pool(gpu_taint());
    let clean = claim("default-b", &current, &c);
    let mut upstream = claim("default-c", &current, &c);
    fixtures::stamp_upstream(&mut upstream);
    let mut launching = claim("default-d", &current, &c);
    launching.status = None;
    report_all(
        &[drifted, clean, upstream, launching],
        &[current],
        &[c],
        &HashVersions::default(),
    )
}

fn text(reports: &[Report], color: bool) -> String {
    let mut out = Vec::new();
    write_text(&mut out, reports, now(), color).expect("write");
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn text_snapshot() {
    let reports = reports();
    let pool_hash = reports[1].nodepool_hash.current.clone().expect("hash");
    let old_hash = reports[0].nodepool_hash.stamped.clone().expect("hash");
    let class_hash = reports[1].nodeclass_hash.current.clone().expect("hash");
    let want = "\
Name:          default-a
Node:          ip-default-a.ec2.internal
NodePool:      default
EC2NodeClass:  default
Drifted:       True (marked by the controller)
Reason:        NodePoolDrifted
Since:         2025-06-01T11:55:00Z (5m ago)
Changes:
  NodePoolDrifted: spec.template.spec.taints: added dedicated=gpu:NoSchedule
NodePool Hash:
  Stamped:     <OLD-POOL> (version rs-v1)
  Current:     <POOL> (version rs-v1)
  Comparison:  Differs
EC2NodeClass Hash:
  Stamped:     <CLASS> (version rs-v1)
  Current:     <CLASS> (version rs-v1)
  Comparison:  Equal

Name:          default-b
Node:          ip-default-b.ec2.internal
NodePool:      default
EC2NodeClass:  default
Drifted:       False
Why:
  nodepool hash and version equal (<POOL>, rs-v1)
  ec2nodeclass hash and version equal (<CLASS>, rs-v1)
  requirements admit its labels
  AMI ami-0aaa is current
NodePool Hash:
  Stamped:     <POOL> (version rs-v1)
  Current:     <POOL> (version rs-v1)
  Comparison:  Equal
EC2NodeClass Hash:
  Stamped:     <CLASS> (version rs-v1)
  Current:     <CLASS> (version rs-v1)
  Comparison:  Equal

Name:          default-c
Node:          ip-default-c.ec2.internal
NodePool:      default
EC2NodeClass:  default
Drifted:       False
Why:
  nodepool stamped under hash version v3 (controller uses rs-v1): will be re-stamped, not drifted
  ec2nodeclass stamped under hash version v6 (controller uses rs-v1): will be re-stamped, not drifted
  requirements admit its labels
  AMI ami-0aaa is current
NodePool Hash:
  Stamped:     6821555240594823858 (version v3)
  Current:     <POOL> (version rs-v1)
  Comparison:  VersionMismatch (will be re-stamped, not drifted)
EC2NodeClass Hash:
  Stamped:     4929514813234187212 (version v6)
  Current:     <CLASS> (version rs-v1)
  Comparison:  VersionMismatch (will be re-stamped, not drifted)

Name:          default-d
Node:          <none>
NodePool:      default
EC2NodeClass:  default
Drifted:       False (not launched)
Why:
  not launched yet: drift applies once its instance is launched
NodePool Hash:
  Stamped:     <POOL> (version rs-v1)
  Current:     <POOL> (version rs-v1)
  Comparison:  Equal
EC2NodeClass Hash:
  Stamped:     <CLASS> (version rs-v1)
  Current:     <CLASS> (version rs-v1)
  Comparison:  Equal

4 nodeclaims: 1 drifted (1 marked by the controller, 0 detected now), 2 not drifted, 1 not launched
";
    let got = text(&reports, false)
        .replace(&pool_hash, "<POOL>")
        .replace(&old_hash, "<OLD-POOL>")
        .replace(&class_hash, "<CLASS>");
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn one_report_has_no_summary_and_notes_disagreements() {
    let c = class();
    let mut nc = claim("default-a", &pool(json!([])), &c);
    fixtures::mark_drifted(
        &mut nc,
        &[Finding {
            reason: r::SECURITY_GROUP_DRIFT,
            changes: vec!["security groups: [sg-0] -> [sg-1]".into()],
        }],
    );
    let reports = report_all(&[nc], &[pool(gpu_taint())], &[c], &HashVersions::default());
    let got = text(&reports, false);
    assert!(!got.contains("nodeclaims:"), "{got}");
    let changes: Vec<&str> = got
        .lines()
        .skip_while(|l| *l != "Changes:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(
        changes,
        [
            "  SecurityGroupDrift: security groups: [sg-0] -> [sg-1] (in the condition; not \
             detected now)",
            "  NodePoolDrifted: spec.template.spec.taints: added dedicated=gpu:NoSchedule \
             (detected now; not in the condition yet)",
        ]
    );
    assert_eq!(
        summary(&reports),
        "1 nodeclaim: 1 drifted (1 marked by the controller, 0 detected now), 0 not drifted"
    );
}

#[test]
fn colour_marks_the_verdict_and_comparisons_only_when_asked() {
    crossterm::style::force_color_output(true);
    let reports = reports();
    let plain = text(&reports, false);
    assert!(!plain.contains('\u{1b}'), "{plain}");
    let coloured = text(&reports, true);
    assert!(
        coloured
            .contains("Drifted:       \u{1b}[38;5;11mTrue (marked by the controller)\u{1b}[39m"),
        "{coloured:?}"
    );
    assert!(
        coloured.contains("Drifted:       \u{1b}[38;5;10mFalse\u{1b}[39m"),
        "{coloured:?}"
    );
    assert_eq!(coloured.lines().count(), plain.lines().count());
}

#[test]
fn json_is_an_array_with_stable_fields_and_yaml_matches_it() {
    let reports = reports();
    let mut out = Vec::new();
    write_document(&mut out, &reports, false).expect("json");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(
        text.starts_with("[\n    {\n        \"name\": \"default-a\",\n"),
        "{text}"
    );
    let doc: Value = serde_json::from_str(&text).expect("valid JSON");
    let items = doc.as_array().expect("array");
    assert_eq!(items.len(), 4);
    let drifted = &items[0];
    assert_eq!(drifted["drifted"], true);
    assert_eq!(drifted["source"], "controller");
    assert_eq!(drifted["reason"], "NodePoolDrifted");
    assert_eq!(
        drifted["changes"][0],
        json!({
            "reason": "NodePoolDrifted",
            "change": "spec.template.spec.taints: added dedicated=gpu:NoSchedule",
            "source": "both",
        })
    );
    for key in [
        "stamped",
        "stampedVersion",
        "current",
        "currentVersion",
        "comparison",
    ] {
        assert!(drifted["nodepoolHash"].get(key).is_some(), "{key}");
        assert!(drifted["nodeclassHash"].get(key).is_some(), "{key}");
    }
    assert_eq!(items[1]["drifted"], false);
    assert_eq!(items[1]["source"], Value::Null);
    assert!(
        items[1]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("not drifted: nodepool hash and version equal")),
        "{}",
        items[1]["message"]
    );
    assert_eq!(items[2]["nodepoolHash"]["comparison"], "versionMismatch");

    let mut out = Vec::new();
    write_document(&mut out, &reports, true).expect("yaml");
    let yaml = String::from_utf8(out).expect("utf-8");
    assert!(yaml.starts_with("- name: default-a\n"), "{yaml}");
    let back: Value = serde_saphyr::from_str(&yaml).expect("yaml parses back");
    assert_eq!(back, doc);
}
