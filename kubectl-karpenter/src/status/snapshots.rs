//! Snapshot tests of every `status` view (table, wide, json, yaml, and the sorted and filtered
//! table) over the fixtures, at a fixed `now`, without colour. Expected outputs live in
//! `tests/snapshots/status/`; run with `UPDATE_SNAPSHOTS=1` to rewrite them after an intended
//! change (and review the diff).

use std::path::Path;

use super::document::{Document, View};
use super::fixtures;
use super::print::{Print, write_document};
use super::sort::SortBy;
use crate::cli::OutputFormat;

#[path = "../../tests/support/snapshot.rs"]
mod snapshot;

fn render(format: OutputFormat, view: &View) -> String {
    render_of(&fixtures::snapshot(), format, view)
}

fn render_of(snapshot: &super::document::Snapshot, format: OutputFormat, view: &View) -> String {
    let doc = Document::build(snapshot, view, fixtures::now(), &fixtures::FixedPrices);
    let mut out = Vec::new();
    let print = Print {
        format,
        headers: true,
        color: false,
        compact: false,
    };
    write_document(&mut out, &doc, print).expect("write to a Vec");
    String::from_utf8(out).expect("utf-8")
}

/// Compares `got` with the stored snapshot `tests/snapshots/status/NAME`, or stores it with
/// `UPDATE_SNAPSHOTS=1`.
fn check(name: &str, got: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/status");
    snapshot::check_snapshot(&dir, name, got);
}

#[test]
fn table() {
    check("table.txt", &render(OutputFormat::Table, &View::default()));
}

#[test]
fn wide() {
    check("wide.txt", &render(OutputFormat::Wide, &View::default()));
}

#[test]
fn json() {
    let got = render(OutputFormat::Json, &View::default());
    check("status.json", &got);
    let doc: serde_json::Value = serde_json::from_str(&got).expect("valid JSON");
    let mut keys: Vec<&String> = doc.as_object().expect("object").keys().collect();
    keys.sort_by_key(|k| got.find(&format!("\n    \"{k}\": ")));
    assert_eq!(
        keys,
        ["nodePools", "nodeClaims", "totals", "otherNodes", "fleet"]
    );
    // `limitedBy` is on every NodeClaim: null before launch, without an explanation when the
    // node class (`gpu`) is not known, explained by the `default` node class's maxPods.
    let limited_by = |name: &str| {
        let claims = doc["nodeClaims"].as_array().expect("nodeClaims");
        let claim = claims.iter().find(|c| c["name"] == name).expect(name);
        claim
            .get("limitedBy")
            .cloned()
            .expect("limitedBy is present")
    };
    assert_eq!(limited_by("default-klmno"), serde_json::Value::Null);
    assert_eq!(limited_by("stray"), serde_json::Value::Null);
    assert_eq!(
        limited_by("gpu-uvwxy"),
        serde_json::json!({"resource": "cpu", "used": 600, "allocatable": 3920, "percent": 15,
            "explanation": null})
    );
    assert_eq!(
        limited_by("default-drift"),
        serde_json::json!({"resource": "pods", "used": 1, "allocatable": 8, "percent": 12,
            "explanation": "maxPods 8 (EC2NodeClass capped)"})
    );
}

#[test]
fn yaml() {
    let got = render(OutputFormat::Yaml, &View::default());
    check("status.yaml", &got);
    let from_yaml: serde_json::Value = serde_saphyr::from_str(&got).expect("valid YAML");
    let from_json: serde_json::Value =
        serde_json::from_str(&render(OutputFormat::Json, &View::default())).expect("JSON");
    assert_eq!(from_yaml, from_json);
}

#[test]
fn table_of_one_nodepool_by_price() {
    let view = View {
        nodepool: Some("default".into()),
        sort: SortBy::Price,
    };
    check(
        "table-default-by-price.txt",
        &render(OutputFormat::Table, &view),
    );
}

#[test]
fn an_interrupted_nodeclaim_names_its_interruption() {
    let snapshot = fixtures::snapshot_with_interruption();
    let table = render_of(&snapshot, OutputFormat::Table, &View::default());
    check("interrupted.txt", &table);
    let line = table
        .lines()
        .find(|l| l.starts_with("default-spot "))
        .expect("the interrupted row");
    assert!(line.contains(" Interrupted (SpotInterrupted) "), "{line}");
    assert!(
        table.contains(", 1 interrupted; $"),
        "the totals count it: {table}"
    );
    let wide = render_of(&snapshot, OutputFormat::Wide, &View::default());
    check("interrupted-wide.txt", &wide);
    let line = wide
        .lines()
        .find(|l| l.starts_with("default-spot "))
        .expect("the interrupted row");
    assert!(
        line.ends_with("SpotInterrupted     2025-06-01T12:01:40Z"),
        "{line}"
    );
    let json = render_of(&snapshot, OutputFormat::Json, &View::default());
    let doc: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let row = |name: &str| {
        doc["nodeClaims"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == name))
            .cloned()
            .expect(name)
    };
    let spot = row("default-spot");
    assert_eq!(spot["state"], "Interrupted");
    assert_eq!(spot["disruptionReason"], "SpotInterrupted");
    assert_eq!(spot["drainBy"], "2025-06-01T12:01:40Z");
    let ready = row("default-abcde");
    assert_eq!(
        (ready.get("disruptionReason"), ready.get("drainBy")),
        (
            Some(&serde_json::Value::Null),
            Some(&serde_json::Value::Null)
        )
    );
    assert_eq!(doc["totals"]["interrupted"], 1);
    let default_pool = doc["nodePools"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "default"))
        .expect("default pool");
    assert_eq!(default_pool["nodeClaims"]["interrupted"], 1);
}

/// The `--watch` cockpit over a scale-down, as two frames two seconds apart at 80 and 200
/// columns: `default-idle` is `Empty`, then `Terminating (Empty)`, and the summary's cost per
/// hour drops by its price (terminating nodes are counted apart).
#[test]
fn the_cockpit_shows_a_scale_down_at_80_and_200_columns() {
    use super::cockpit::screen;
    let (before, after) = fixtures::scale_down();
    let later = fixtures::now() + jiff::SignedDuration::from_secs(2);
    let frame = |snapshot, now, width| {
        let doc = Document::build(snapshot, &View::default(), now, &fixtures::FixedPrices);
        let mut text = screen(&doc, width, 60, false).join("\n");
        text.push('\n');
        text
    };
    let tainted = |snapshot| {
        let doc = Document::build(snapshot, &View::default(), later, &fixtures::FixedPrices);
        doc.node_claims
            .iter()
            .find(|r| r.name == "default-idle")
            .is_some_and(|r| r.disrupted_taint)
    };
    assert_eq!((tainted(&before), tainted(&after)), (false, true));
    for width in [80, 200] {
        let first = frame(&before, fixtures::now(), width);
        let second = frame(&after, later, width);
        check(&format!("cockpit-{width}-before.txt"), &first);
        check(&format!("cockpit-{width}-after.txt"), &second);
        let idle = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("default-idle "))
                .map(|l| l.trim_end().to_owned())
                .expect("the idle NodeClaim's line")
        };
        assert!(idle(&first).ends_with("  Empty"), "{first}");
        assert!(idle(&second).ends_with("  Terminating (Empty)"), "{second}");
        for text in [&first, &second] {
            assert!(text.lines().all(|l| l.chars().count() <= width), "{text}");
        }
        let cost = |text: &str| {
            text.lines()
                .next()
                .and_then(|l| l.split("  ").find(|i| i.ends_with("/h")))
                .map(str::to_owned)
                .expect("the cost per hour")
        };
        assert_eq!(cost(&first), "$1.431/h", "{first}");
        assert_eq!(cost(&second), "$1.335/h", "{second}");
    }
}
