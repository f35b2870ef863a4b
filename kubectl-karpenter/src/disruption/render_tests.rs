//! Snapshots of `disruption`'s tables and summary and of `disruption explain`'s block.

use crds::DisruptionReason;
use karpenter_core::disruption::consolidation::Placement;
use karpenter_core::disruption::report::{ActionReport, BudgetReport, NodeVerdict, PoolReport};

use super::*;

fn at(t: &str) -> jiff::Timestamp {
    t.parse().expect("time")
}

fn budget(reason: DisruptionReason, allowed: Option<usize>, until: Option<&str>) -> BudgetReport {
    BudgetReport {
        reason,
        allowed,
        disrupting: 1,
        until: until.map(at),
    }
}

fn node(name: &str, status: Status, message: &str, savings: Option<f64>) -> NodeReport {
    NodeReport {
        nodeclaim: format!("default-{name}"),
        node: Some(format!("ip-{name}")),
        nodepool: Some("default".into()),
        instance_type: "m5.xlarge".into(),
        capacity_type: "on-demand".into(),
        zone: "us-east-1a".into(),
        price: Some(0.192),
        pods: 3,
        verdict: NodeVerdict {
            status,
            message: message.into(),
            action: None,
            savings,
            cause: None,
            balanced: None,
        },
    }
}

fn sample() -> Report {
    Report {
        time: at("2026-01-01T12:00:00Z"),
        nodepools: vec![PoolReport {
            nodepool: "default".into(),
            consolidation_policy: "WhenEmptyOrUnderutilized".into(),
            consolidate_after: "30s".into(),
            nodes: 3,
            budgets: vec![
                budget(DisruptionReason::Drifted, None, None),
                budget(DisruptionReason::Empty, Some(1), None),
                budget(
                    DisruptionReason::Underutilized,
                    Some(0),
                    Some("2026-01-01T17:00:00Z"),
                ),
            ],
            replicas: None,
        }],
        nodes: vec![
            node(
                "a",
                Status::Consolidatable,
                "replace with m5.large ($0.0960/h, 12 option(s)), saving $0.0960/h",
                Some(0.096),
            ),
            node(
                "b",
                Status::Blocked,
                "pod shop/web-1 has karpenter.sh/do-not-disrupt",
                None,
            ),
            node("c", Status::Disrupting, "being deleted", None),
        ],
    }
}

#[test]
fn the_report_is_a_pool_table_a_node_table_and_a_summary() {
    let mut out = Vec::new();
    write_report(&mut out, &sample(), false).expect("write");
    let got = String::from_utf8(out).expect("utf-8");
    let want = "\
NODEPOOL   POLICY                     CONSOLIDATE-AFTER   NODES   DISRUPTING   ALLOWED-DRIFTED   ALLOWED-EMPTY   ALLOWED-UNDERUTILIZED
default    WhenEmptyOrUnderutilized   30s                 3       1            no limit          1               0 until 17:00 UTC

NODE   NODECLAIM   NODEPOOL   INSTANCE-TYPE   PODS   PRICE/HOUR   VERDICT          DETAIL
ip-a   default-a   default    m5.xlarge       3      $0.1920      Consolidatable   replace with m5.large ($0.0960/h, 12 option(s)), saving $0.0960/h
ip-b   default-b   default    m5.xlarge       3      $0.1920      Blocked          pod shop/web-1 has karpenter.sh/do-not-disrupt
ip-c   default-c   default    m5.xlarge       3      $0.1920      Disrupting       being deleted

3 nodes: 1 consolidatable (saving up to $0.0960/h), 1 blocked, 1 disrupting
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn verdicts_are_coloured_only_when_asked() {
    let mut plain = Vec::new();
    write_report(&mut plain, &sample(), false).expect("write");
    assert!(!String::from_utf8_lossy(&plain).contains('\u{1b}'));
    let mut coloured = Vec::new();
    write_report(&mut coloured, &sample(), true).expect("write");
    assert!(String::from_utf8_lossy(&coloured).contains('\u{1b}'));
}

#[test]
fn an_empty_cluster_says_so() {
    let report = Report {
        time: at("2026-01-01T12:00:00Z"),
        nodepools: vec![],
        nodes: vec![],
    };
    let mut out = Vec::new();
    write_report(&mut out, &report, false).expect("write");
    assert_eq!(
        String::from_utf8(out).expect("utf-8"),
        "No NodePools.\n\nNo nodes.\n"
    );
}

#[test]
fn explain_is_a_describe_block_with_blockers_and_placements() {
    let what_if = WhatIf {
        node: node(
            "b",
            Status::Blocked,
            "pod shop/web-1 has karpenter.sh/do-not-disrupt",
            None,
        ),
        blockers: vec![
            "pod shop/web-1 has karpenter.sh/do-not-disrupt".into(),
            "PodDisruptionBudget shop/web allows no disruption (pod shop/web-2)".into(),
        ],
        action: Some(ActionReport::Replace {
            reason: DisruptionReason::Underutilized,
            instance_type: "m5.large".into(),
            options: 12,
            price: 0.096,
        }),
        why_not: None,
        balanced: Some(karpenter_core::disruption::balanced::Score {
            savings_fraction: 0.5,
            disruption_fraction: 0.25,
            k: 2,
        }),
        message: "replace with m5.large ($0.0960/h, 12 option(s)), saving $0.0960/h".into(),
        placements: vec![
            Placement {
                pod: "shop/web-1".into(),
                to: Destination::Existing {
                    name: "ip-a".into(),
                },
            },
            Placement {
                pod: "shop/web-2".into(),
                to: Destination::NewNodeClaim {
                    claim: 0,
                    nodepool: "default".into(),
                    instance_type: "m5.large".into(),
                    options: 12,
                    price: Some(0.096),
                },
            },
        ],
        cost_change: Some(-0.096),
    };
    let mut out = Vec::new();
    write_explain(&mut out, &what_if, false).expect("write");
    let got = String::from_utf8(out).expect("utf-8");
    let want = "\
Node:            ip-b
NodeClaim:       default-b
NodePool:        default
Offering:        m5.xlarge on-demand in us-east-1a ($0.1920/h)
Pods To Move:    3
Verdict:         Blocked: pod shop/web-1 has karpenter.sh/do-not-disrupt
Blockers:
  pod shop/web-1 has karpenter.sh/do-not-disrupt
  PodDisruptionBudget shop/web allows no disruption (pod shop/web-2)
If Removed Now:  replace with m5.large ($0.0960/h, 12 option(s)), saving $0.0960/h
Cost Change:     -$0.0960/h
Balanced Score:  score 2.00 >= threshold 0.50 (k 2, savings 50.0%, disruption 25.0%)
Placements:
  POD          DESTINATION
  shop/web-1   ip-a
  shop/web-2   new NodeClaim #1 (default: m5.large, 12 option(s), $0.0960/h)
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn a_static_nodepool_shows_its_replicas_as_its_policy() {
    let mut report = sample();
    report.nodepools[0].replicas = Some(3);
    report.nodes.clear();
    let mut out = Vec::new();
    write_report(&mut out, &report, false).expect("write");
    let got = String::from_utf8(out).expect("utf-8");
    assert!(
        got.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("default    Static (replicas 3)   30s")),
        "\n{got}"
    );
}
