use super::*;
use testutil::{condition, nodeclaim};

/// This crate's NodeClaim from testutil's JSON (testutil builds the `crds` it depends on, a
/// distinct crate in this crate's own unit tests).
fn local(json: serde_json::Value) -> NodeClaim {
    serde_json::from_value(json).expect("a NodeClaim")
}

fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn record(n: usize) -> Record {
    Record {
        id: format!("uid-{n}"),
        nodeclaim: format!("default-{n}"),
        nodepool: "default".into(),
        node: Some(format!("ip-10-0-0-{n}")),
        instance_type: Some("m5.large".into()),
        capacity_type: Some("on-demand".into()),
        zone: Some("us-east-1a".into()),
        reason: reason::EMPTY.into(),
        message: None,
        outcome: Outcome::Succeeded,
        decided: at("2026-01-01T00:00:00Z"),
        finished: at("2026-01-01T00:01:00Z"),
        pods_moved: 0,
        pods: vec![],
        price: Some(0.096),
        replacement: None,
        cost_change: Some(-0.096),
    }
}

fn written(a: Append) -> (String, usize, usize) {
    match a {
        Append::Write {
            text,
            evicted,
            malformed,
        } => (text, evicted, malformed),
        Append::AlreadyRecorded => panic!("expected a write"),
    }
}

#[test]
fn append_keeps_the_newest_records_within_the_count_bound() {
    let mut text: Option<String> = None;
    for n in 0..8 {
        let (t, evicted, _) = written(append_bounded(text.as_deref(), record(n), 5, MAX_BYTES));
        assert_eq!(
            evicted,
            usize::from(n >= 5),
            "one out for each one in once full"
        );
        text = Some(t);
    }
    let parsed = parse(text.as_deref().unwrap_or_default());
    assert!(parsed.malformed.is_empty());
    let ids: Vec<&str> = parsed.records.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["uid-3", "uid-4", "uid-5", "uid-6", "uid-7"]);
}

#[test]
fn append_drops_the_oldest_records_to_stay_within_the_byte_bound() {
    let line = render(&[record(0)]).len();
    let mut text = String::new();
    for n in 0..4 {
        text = written(append_bounded(Some(&text), record(n), 100, line * 2 + 1)).0;
    }
    assert!(text.len() <= line * 2 + 1, "{} bytes", text.len());
    let ids: Vec<String> = parse(&text).records.into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["uid-2", "uid-3"]);
    // The new record is kept even when it alone is over the bound.
    let (alone, evicted, _) = written(append_bounded(Some(&text), record(9), 100, 10));
    assert_eq!(evicted, 2);
    assert_eq!(parse(&alone).records.len(), 1);
}

#[test]
fn the_default_bounds_fit_a_configmap() {
    let mut big = record(0);
    big.pods = (0..MAX_POD_NAMES)
        .map(|i| format!("some-namespace/some-deployment-5d8f7c9b6-{i:05}"))
        .collect();
    big.message = Some("x".repeat(300));
    let mut text = String::new();
    for n in 0..MAX_RECORDS + 10 {
        let mut r = big.clone();
        r.id = format!("uid-{n}");
        text = written(append(Some(&text), r)).0;
    }
    assert!(text.len() <= MAX_BYTES, "{} bytes", text.len());
    const { assert!(MAX_BYTES < 1024 * 1024) };
    assert!(parse(&text).records.len() <= MAX_RECORDS);
}

#[test]
fn a_record_is_appended_at_most_once() {
    let (text, _, _) = written(append(None, record(1)));
    assert_eq!(append(Some(&text), record(1)), Append::AlreadyRecorded);
    let (text, _, _) = written(append(Some(&text), record(2)));
    assert_eq!(parse(&text).records.len(), 2);
}

#[test]
fn malformed_lines_are_reported_and_skipped_never_a_panic() {
    let good = render(&[record(1)]);
    let text = format!("not json\n\n{good}{{\"id\": 3}}\n\u{0}\u{7f}garbage\n");
    let parsed = parse(&text);
    assert_eq!(parsed.records.len(), 1);
    assert_eq!(parsed.records[0].id, "uid-1");
    let lines: Vec<usize> = parsed.malformed.iter().map(|m| m.line).collect();
    assert_eq!(lines, [1, 4, 5]);
    assert!(
        parsed.malformed[0].to_string().starts_with(
            "line 1 of karpenter-disruption-history records.jsonl is not a disruption record: "
        ),
        "{}",
        parsed.malformed[0]
    );
    // Appending drops the unreadable lines and says how many.
    let (written_text, _, malformed) = written(append(Some(&text), record(2)));
    assert_eq!(malformed, 3);
    assert!(parse(&written_text).malformed.is_empty());
    assert_eq!(parse("").records, vec![]);
}

#[test]
fn records_are_camel_case_json_lines() {
    let mut r = record(1);
    r.replacement = Some(Replacement {
        nodeclaim: "default-r".into(),
        instance_type: Some("m5.xlarge".into()),
        price: Some(0.192),
        replaces: 2,
    });
    let line = render(&[r.clone()]);
    assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
    for key in [
        "\"instanceType\":\"m5.large\"",
        "\"capacityType\":\"on-demand\"",
        "\"podsMoved\":0",
        "\"costChange\":-0.096",
        "\"decided\":\"2026-01-01T00:00:00Z\"",
        "\"outcome\":\"Succeeded\"",
        "\"replaces\":2",
    ] {
        assert!(line.contains(key), "{key} in {line}");
    }
    assert_eq!(parse(&line).records, vec![r]);
}

#[test]
fn a_removal_takes_reason_time_pods_and_prices_from_the_nodeclaim() {
    let pods = serde_json::to_string(&DrainedPods::of(vec![
        "shop/web-1".into(),
        "shop/web-0".into(),
    ]))
    .expect("json");
    let claim = local(
        nodeclaim("default-abc")
            .uid("u-1")
            .nodepool("default")
            .label(INSTANCE_TYPE_LABEL, "m5.large")
            .label(CAPACITY_TYPE_LABEL, "spot")
            .label(TOPOLOGY_ZONE_LABEL, "us-east-1b")
            .node_name("ip-10-0-1-1")
            .annotation(DRAINED_PODS_ANNOTATION, pods)
            .annotation(
                crate::disruption::STARTED_ANNOTATION,
                "2026-01-01T00:00:00Z",
            )
            .annotation(crate::disruption::REPLACEMENT_ANNOTATION, "default-new")
            .annotation(CANDIDATES_ANNOTATION, "2")
            .with_condition(
                condition(DISRUPTION_REASON, "True")
                    .reason(reason::UNDERUTILIZED)
                    .at("2026-01-01T00:00:05Z"),
            )
            .deleting("2026-01-01T00:00:30Z")
            .json(),
    );
    assert_eq!(replacement_name(&claim).as_deref(), Some("default-new"));
    assert_eq!(replaced_together(&claim), 2);
    let r = Record::removal(
        &claim,
        Removal {
            finished: Some(at("2026-01-01T00:02:00Z")),
            price: Some(0.05),
            replacement: Some(Replacement {
                nodeclaim: "default-new".into(),
                instance_type: Some("m5.large".into()),
                price: Some(0.06),
                replaces: 2,
            }),
        },
    );
    assert_eq!(r.id, "u-1");
    assert_eq!(r.reason, "Underutilized");
    assert_eq!(r.outcome, Outcome::Succeeded);
    assert_eq!(r.decided, at("2026-01-01T00:00:00Z"), "the command's start");
    assert_eq!(r.finished, at("2026-01-01T00:02:00Z"));
    assert_eq!(r.node.as_deref(), Some("ip-10-0-1-1"));
    assert_eq!(
        (
            r.instance_type.as_deref(),
            r.capacity_type.as_deref(),
            r.zone.as_deref()
        ),
        (Some("m5.large"), Some("spot"), Some("us-east-1b"))
    );
    assert_eq!(r.pods_moved, 2);
    assert_eq!(r.pods, ["shop/web-0", "shop/web-1"]);
    let change = r.cost_change.expect("both prices known");
    assert!((change - (0.03 - 0.05)).abs() < 1e-12, "{change}");
}

#[test]
fn without_a_karpenter_reason_a_removal_is_deleted_at_its_deletion_time() {
    let claim = local(
        nodeclaim("default-x")
            .uid("u-2")
            .annotation(DRAINED_PODS_ANNOTATION, "{not json")
            .deleting("2026-01-01T00:00:30Z")
            .json(),
    );
    let r = Record::removal(
        &claim,
        Removal {
            finished: Some(at("2026-01-01T00:01:00Z")),
            price: None,
            replacement: None,
        },
    );
    assert_eq!(r.reason, reason::DELETED);
    assert_eq!(r.decided, at("2026-01-01T00:00:30Z"));
    assert_eq!(r.pods_moved, 0, "an unreadable pods annotation counts none");
    assert_eq!(r.nodepool, "");
    assert_eq!(r.cost_change, None, "unknown price");
    // A reason set long before the deletion was left by a delete that did not go through.
    let stale = local(
        nodeclaim("default-z")
            .with_condition(
                condition(DISRUPTION_REASON, "True")
                    .reason(reason::EXPIRED)
                    .at("2026-01-01T00:00:00Z"),
            )
            .deleting("2026-01-01T01:00:00Z")
            .json(),
    );
    assert_eq!(disruption_reason(&stale), reason::DELETED);
    assert_eq!(decided_at(&stale), Some(at("2026-01-01T01:00:00Z")));
    // A condition that is not True is no reason.
    let claim = local(
        nodeclaim("default-y")
            .with_condition(condition(DISRUPTION_REASON, "False").reason(reason::EXPIRED))
            .json(),
    );
    assert_eq!(disruption_reason(&claim), reason::DELETED);
    assert_eq!(decided_at(&claim), None);
}

#[test]
fn a_deletion_without_a_reason_is_the_holding_commands() {
    // An interruption command held it when something else (its node going away with the
    // instance) deleted it: the history names the interruption, not a user's delete.
    let claim = local(
        nodeclaim("default-z")
            .annotation(crate::disruption::REASON_ANNOTATION, "InstanceTerminated")
            .deleting("2026-01-01T01:00:00Z")
            .json(),
    );
    assert_eq!(disruption_reason(&claim), "InstanceTerminated");
    // The condition, when it explains the deletion, comes first.
    let claim = local(
        nodeclaim("default-z")
            .annotation(crate::disruption::REASON_ANNOTATION, "Underutilized")
            .with_condition(condition(DISRUPTION_REASON, "True").reason(reason::EXPIRED))
            .json(),
    );
    assert_eq!(disruption_reason(&claim), reason::EXPIRED);
}

#[test]
fn cost_change_shares_the_replacement_and_needs_both_prices() {
    assert_eq!(cost_change(Some(0.5), None), Some(-0.5));
    let r = |price, replaces| Replacement {
        nodeclaim: "r".into(),
        instance_type: None,
        price,
        replaces,
    };
    assert_eq!(
        cost_change(Some(0.5), Some(&r(Some(0.2), 1))),
        Some(0.2 - 0.5)
    );
    assert_eq!(
        cost_change(Some(0.5), Some(&r(Some(0.2), 2))),
        Some(0.1 - 0.5)
    );
    assert_eq!(
        cost_change(Some(0.5), Some(&r(Some(0.2), 0))),
        Some(0.2 - 0.5)
    );
    assert_eq!(cost_change(Some(0.5), Some(&r(None, 1))), None);
    assert_eq!(cost_change(None, None), None);
}

#[test]
fn drained_pods_count_every_pod_and_name_a_few() {
    let names: Vec<String> = (0..MAX_POD_NAMES + 5)
        .map(|i| format!("ns/p-{i:03}"))
        .collect();
    let d = DrainedPods::of(names);
    assert_eq!(d.count as usize, MAX_POD_NAMES + 5);
    assert_eq!(d.pods.len(), MAX_POD_NAMES);
    assert_eq!(d.pods[0], "ns/p-000");
}

#[test]
fn upgrade_steps_are_the_drifted_records_of_the_nodepool() {
    let claim = local(
        nodeclaim("default-old")
            .uid("u-old")
            .nodepool("default")
            .node_name("ip-1")
            .json(),
    );
    let rolled_back = Record::rollback(
        &claim,
        reason::DRIFTED,
        Replacement {
            nodeclaim: "default-r1".into(),
            ..Replacement::default()
        },
        "replacement default-r1 did not initialize within 600s; rolled back",
        at("2026-01-01T00:10:00Z"),
    );
    assert_eq!(rolled_back.id, "u-old/rollback/default-r1");
    assert_eq!(rolled_back.outcome, Outcome::RolledBack);
    let mut succeeded = record(1);
    succeeded.reason = reason::DRIFTED.into();
    succeeded.replacement = Some(Replacement {
        nodeclaim: "default-r2".into(),
        ..Replacement::default()
    });
    succeeded.finished = at("2026-01-01T00:20:00Z");
    succeeded.pods_moved = 12;
    let mut empty = record(2);
    empty.reason = reason::DRIFTED.into();
    empty.finished = at("2026-01-01T00:30:00Z");
    let mut other_pool = record(3);
    other_pool.reason = reason::DRIFTED.into();
    other_pool.nodepool = "gpu".into();
    let consolidated = record(4);
    let records = [succeeded, rolled_back, other_pool, consolidated, empty];
    let steps = upgrade_steps(&records, "default");
    let summary: Vec<(&str, Outcome, Option<&str>)> = steps
        .iter()
        .map(|s| (s.nodeclaim.as_str(), s.outcome, s.replacement.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            ("default-old", Outcome::RolledBack, Some("default-r1")),
            ("default-1", Outcome::Succeeded, Some("default-r2")),
            ("default-2", Outcome::Succeeded, None),
        ]
    );
    assert!(
        steps[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("did not initialize"))
    );
    assert_eq!(
        steps[2].reason.as_deref(),
        Some("empty node: drained without a replacement")
    );
    assert_eq!(steps[1].seconds, 20 * 60);
    assert_eq!(steps[1].started, "2026-01-01T00:00:00Z");
    assert_eq!((steps[1].pods_moved, steps[2].pods_moved), (12, 0));
    // At most HISTORY_LENGTH steps, the newest.
    let many: Vec<Record> = (0..HISTORY_LENGTH + 2)
        .map(|n| {
            let mut r = record(n);
            r.reason = reason::DRIFTED.into();
            r.finished = at("2026-01-01T01:00:00Z") + jiff::SignedDuration::from_secs(n as i64);
            r
        })
        .collect();
    let steps = upgrade_steps(&many, "default");
    assert_eq!(steps.len(), HISTORY_LENGTH);
    assert_eq!(steps[0].nodeclaim, "default-2");
}
