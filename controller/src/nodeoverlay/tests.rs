//! The statuses the NodeOverlay controller writes for each verdict, and only when they change.

use std::collections::BTreeMap;
use std::sync::Arc;

use crds::conditions::{self, READY, VALIDATION_SUCCEEDED, reason};
use crds::{NodeOverlay, NodeOverlaySpec};
use karpenter_core::capacity::overlay::Verdict;

use super::*;

fn overlay(name: &str) -> NodeOverlay {
    let mut o = NodeOverlay::new(
        name,
        NodeOverlaySpec {
            requirements: vec![],
            price: Some("1".into()),
            price_adjustment: None,
            capacity: BTreeMap::new(),
            weight: None,
        },
    );
    o.metadata.generation = Some(1);
    o
}

fn at(t: &str) -> Timestamp {
    t.parse().expect("time")
}

fn condition(status: &NodeOverlayStatus, type_: &str) -> (String, String, String) {
    let c = conditions::get(&status.conditions, type_).expect("condition set");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn each_verdict_becomes_validation_succeeded_and_ready() {
    let overlays = vec![
        Arc::new(overlay("ok")),
        Arc::new(overlay("clash")),
        Arc::new(overlay("bad")),
        Arc::new(overlay("unjudged")),
    ];
    let verdicts = BTreeMap::from([
        ("ok".to_string(), Verdict::Applied),
        ("clash".to_string(), Verdict::Conflict),
        (
            "bad".to_string(),
            Verdict::RuntimeValidation("spec.price: nope".into()),
        ),
    ]);
    let patches: BTreeMap<String, NodeOverlayStatus> =
        status_patches(&overlays, &verdicts, at("2026-01-01T00:00:00Z"))
            .into_iter()
            .collect();
    assert_eq!(
        patches.keys().map(String::as_str).collect::<Vec<_>>(),
        ["bad", "clash", "ok"]
    );
    assert_eq!(
        condition(&patches["ok"], VALIDATION_SUCCEEDED).0,
        "True".to_string()
    );
    assert_eq!(condition(&patches["ok"], READY).0, "True");
    assert_eq!(
        condition(&patches["clash"], VALIDATION_SUCCEEDED),
        (
            "False".to_string(),
            reason::CONFLICT.to_string(),
            reason::CONFLICT_MESSAGE.to_string()
        )
    );
    assert_eq!(condition(&patches["clash"], READY).0, "False");
    assert_eq!(
        condition(&patches["bad"], VALIDATION_SUCCEEDED),
        (
            "False".to_string(),
            reason::RUNTIME_VALIDATION.to_string(),
            "spec.price: nope".to_string()
        )
    );
}

#[test]
fn an_unchanged_verdict_writes_nothing_and_a_new_one_keeps_history() {
    let verdicts = |v: Verdict| BTreeMap::from([("o".to_string(), v)]);
    let first = status_patches(
        &[Arc::new(overlay("o"))],
        &verdicts(Verdict::Applied),
        at("2026-01-01T00:00:00Z"),
    );
    let mut written = overlay("o");
    written.status = Some(first[0].1.clone());
    let written = Arc::new(written);
    let again = status_patches(
        std::slice::from_ref(&written),
        &verdicts(Verdict::Applied),
        at("2026-01-01T01:00:00Z"),
    );
    assert!(again.is_empty(), "{again:?}");
    let changed = status_patches(
        &[written],
        &verdicts(Verdict::Conflict),
        at("2026-01-01T02:00:00Z"),
    );
    assert_eq!(changed.len(), 1);
    let c = conditions::get(&changed[0].1.conditions, VALIDATION_SUCCEEDED).expect("set");
    assert_eq!(c.status, "False");
    assert_eq!(c.last_transition_time.0, at("2026-01-01T02:00:00Z"));
}

#[test]
fn the_gate_off_warning_names_the_gate_and_how_to_turn_it_on() {
    let m = gate_off_message("fee");
    assert!(m.contains("NodeOverlay fee is not applied"), "{m}");
    assert!(m.contains("FEATURE_GATES=NodeOverlay=true"), "{m}");
}
