//! Tests of `upgrade status` output: the text snapshot, empty sections and summaries, colour
//! only when asked, estimates and durations in words, and the JSON document.

use crds::upgrade::{PAUSED_ANNOTATION, PAUSED_REASON_ANNOTATION, STEP_ALLOWANCE_ANNOTATION};
use serde_json::Value;

use super::*;
use crate::upgrade::fixtures::{self, annotate};

fn text(statuses: &[PoolStatus], color: bool) -> String {
    let mut out = Vec::new();
    write_text(&mut out, statuses, fixtures::now(), color).expect("write");
    String::from_utf8(out).expect("utf-8")
}

/// A NodePool with nothing drifted, paused by the controller with one step allowed.
fn idle_paused() -> PoolStatus {
    let mut pool = fixtures::pool();
    pool.metadata.name = Some("gpu".into());
    pool.metadata.annotations = None;
    annotate(&mut pool, PAUSED_ANNOTATION, "true");
    annotate(
        &mut pool,
        PAUSED_REASON_ANNOTATION,
        "replacement gpu-x did not initialize",
    );
    annotate(&mut pool, STEP_ALLOWANCE_ANNOTATION, "1");
    PoolStatus::of(&pool, &[], &[], &[], &[], fixtures::now())
}

#[test]
fn text_snapshot() {
    let got = text(&[fixtures::status()], false);
    let want = "\
NodePool:         default
State:            Running
Step Allowance:   0
Max In Progress:  1
Can Start Now:    0
In Progress:
  NODECLAIM          NODE                       REPLACEMENT   PHASE                  ELAPSED
  default-stepping   ip-10-0-1-3.ec2.internal   default-r1    LaunchingReplacement   2m
Queue:
  #     NODECLAIM       NODE                       PODS   DRAIN-TIMEOUT
  1     default-empty   ip-10-0-1-4.ec2.internal   0      0s
  2     default-busy    ip-10-0-1-1.ec2.internal   2      1m15s
Skipped:
  NODECLAIM         NODE                       WHY
  default-blocked   ip-10-0-1-2.ec2.internal   PodDisruptionBudget shop/cart allows no disruption (pod shop/cart-0)
Recent Steps:
  NODECLAIM      REPLACEMENT      OUTCOME      PODS   DURATION   FINISHED   REASON
  default-old1   default-old1-r   Succeeded    3      4m10s      60m ago    <none>
  default-old2   default-old2-r   RolledBack   0      10m10s     60m ago    replacement default-old2-r for default-old2 did not initialize within 600s (Launched=True, Registered=True, Initialized=False); rolled back
Estimate:         about 12m30s for 3 steps (each as long as recent succeeded steps that moved as many pods); draining the queued nodes may take up to 1m15s; 1 skipped NodeClaim not counted
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn empty_sections_say_none_and_several_pools_get_a_summary() {
    let got = text(&[fixtures::status(), idle_paused()], false);
    let second = got
        .split("\n\n")
        .nth(1)
        .expect("a second block after a blank line");
    assert_eq!(
        second,
        "\
NodePool:         gpu
State:            Paused by the controller: replacement gpu-x did not initialize
Step Allowance:   1
Max In Progress:  0
Can Start Now:    0
In Progress:      <none>
Queue:            <none>
Skipped:          <none>
Recent Steps:     <none>
Estimate:         nothing left"
    );
    assert_eq!(
        got.lines().last(),
        Some("2 nodepools: 1 paused; 1 step in progress, 2 queued, 1 skipped")
    );
}

#[test]
fn colour_marks_state_phase_and_outcome_only_when_asked() {
    crossterm::style::force_color_output(true);
    let plain = text(&[fixtures::status()], false);
    assert!(!plain.contains('\u{1b}'));
    let coloured = text(&[fixtures::status()], true);
    assert!(
        coloured.contains("State:            \u{1b}[38;5;10mRunning\u{1b}[39m\n"),
        "{coloured:?}"
    );
    assert!(
        coloured.contains("\u{1b}[38;5;9mRolledBack\u{1b}[39m   0      10m10s"),
        "{coloured:?}"
    );
    assert!(
        coloured.contains("\u{1b}[38;5;11mLaunchingReplacement\u{1b}[39m   2m"),
        "{coloured:?}"
    );
}

#[test]
fn estimates_in_words() {
    let e = |remaining, seconds, larger, drain| Estimate {
        remaining_steps: remaining,
        succeeded_steps: 2,
        seconds,
        larger,
        drain_timeout_seconds: drain,
    };
    assert_eq!(
        estimate_text(&e(1, Some(90), None, 0), 0),
        "about 1m30s for 1 step (each as long as recent succeeded steps that moved as many pods)"
    );
    assert_eq!(
        estimate_text(&e(2, None, None, 75), 2),
        "unknown for 2 steps (no succeeded step in the history); draining the queued nodes may \
         take up to 1m15s; 2 skipped NodeClaims not counted"
    );
    let larger = crate::upgrade::report::Larger {
        nodeclaim: "default-big".into(),
        pods: 120,
        most_moved: 1,
    };
    assert_eq!(
        estimate_text(&e(2, None, Some(larger), 1600), 0),
        "unknown for 2 steps: default-big moves 120 pods, more than any recent succeeded step \
         (1 pod); draining the queued nodes may take up to 26m40s"
    );
    assert_eq!(estimate_text(&e(0, Some(0), None, 0), 0), "nothing left");
}

#[test]
fn durations_to_the_second() {
    for (secs, want) in [
        (0, "0s"),
        (45, "45s"),
        (60, "1m"),
        (75, "1m15s"),
        (3600, "1h"),
        (3661, "1h1m1s"),
        (172_800, "48h"),
    ] {
        assert_eq!(duration(secs), want, "{secs}");
    }
}

#[test]
fn json_document_is_the_plan_with_history_and_estimate() {
    let mut out = Vec::new();
    write_document(&mut out, &[fixtures::status()], false).expect("json");
    let doc: Value = serde_json::from_slice(&out).expect("valid JSON");
    let pool = &doc[0];
    // Top-level keys in the plan's order, then state, history and estimate.
    let text = String::from_utf8(out.clone()).expect("utf-8");
    let keys: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("        \""))
        .filter_map(|l| l.split('"').next())
        .collect();
    assert_eq!(
        keys,
        [
            "nodepool",
            "paused",
            "pausedReason",
            "stepAllowance",
            "inProgress",
            "queue",
            "skipped",
            "maxInProgress",
            "canStart",
            "state",
            "history",
            "estimate"
        ]
    );
    assert_eq!(pool["inProgress"][0]["phase"], "LaunchingReplacement");
    assert_eq!(pool["inProgress"][0]["started"], "2025-06-01T11:58:00Z");
    assert_eq!(pool["queue"][1]["drain_timeout_seconds"], 75);
    assert_eq!(pool["state"], "running");
    assert_eq!(pool["history"][1]["outcome"], "RolledBack");
    assert_eq!(
        pool["estimate"],
        serde_json::json!({"remainingSteps": 3, "succeededSteps": 1, "seconds": 750,
                           "drainTimeoutSeconds": 75})
    );
    assert_eq!(pool["history"][0]["podsMoved"], 3);
    assert_eq!(pool["inProgress"][0]["pods"], 0);

    let mut yaml = Vec::new();
    write_document(&mut yaml, &[fixtures::status()], true).expect("yaml");
    let back: Value =
        serde_saphyr::from_str(&String::from_utf8(yaml).expect("utf-8")).expect("YAML parses back");
    assert_eq!(back, doc);
}
