//! What `upgrade pause|resume|step` send: for a NodePool as read, the merge patch of its
//! annotations (or none when nothing would change) and the result line. Pure; the command
//! applies the patch and, for `step`, reads again and recomputes on a conflict.
//!
//! - `pause` sets [`PAUSED_ANNOTATION`] to `"true"`; the step in progress finishes.
//! - `resume` removes [`PAUSED_ANNOTATION`], [`PAUSED_REASON_ANNOTATION`] and
//!   [`STEP_ALLOWANCE_ANNOTATION`].
//! - `step` adds one to [`STEP_ALLOWANCE_ANNOTATION`] of a paused NodePool, guarded by the
//!   resourceVersion read (a read-modify-write); a running NodePool is left alone.

use crds::NodePool;
use crds::upgrade::{
    PAUSED_ANNOTATION, PAUSED_REASON_ANNOTATION, STEP_ALLOWANCE_ANNOTATION, step_allowance,
};
use serde::Serialize;
use serde_json::{Value, json};

/// An operator's control of a NodePool's rollout (`pause`, `resume` or `step` in JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// `upgrade pause`: set `upgrades.karpenter.sh/paused: "true"`; the step in progress
    /// finishes.
    Pause,
    /// `upgrade resume`: remove the pause, its reason and the step allowance.
    Resume,
    /// `upgrade step`: while paused, let one more step start (step allowance + 1).
    Step,
}

impl Action {
    /// What it is doing, for errors: `pausing nodepool/x: …`.
    pub fn verb(self) -> &'static str {
        match self {
            Action::Pause => "pausing",
            Action::Resume => "resuming",
            Action::Step => "allowing a step on",
        }
    }
}

/// What a control did to one NodePool (the JSON and YAML document of the controls).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlResult {
    /// The NodePool's name.
    pub nodepool: String,
    /// The control applied.
    pub action: Action,
    /// Whether its annotations were changed.
    pub changed: bool,
    /// Whether its rollout is paused now.
    pub paused: bool,
    /// Steps that may still start while paused, now.
    pub step_allowance: u32,
    /// The line printed as text.
    pub message: String,
}

/// The patch to send for a control, and the result once it is applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    /// The merge patch; `None` when nothing changes.
    pub patch: Option<Value>,
    /// What the NodePool looks like afterwards, and the line to print.
    pub result: ControlResult,
}

fn annotation<'a>(pool: &'a NodePool, key: &str) -> Option<&'a str> {
    pool.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The patch and the result of `action` on `pool` as read; `waiting` is how many of its
/// drifted NodeClaims wait for a step (a step allowed with none waiting would linger and let
/// a node that drifts later be replaced without anyone asking, so `step` refuses it).
pub fn plan(action: Action, pool: &NodePool, waiting: usize) -> Planned {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let paused = annotation(pool, PAUSED_ANNOTATION) == Some("true");
    let allowance = step_allowance(annotation(pool, STEP_ALLOWANCE_ANNOTATION));
    let result =
        |changed: bool, paused: bool, step_allowance: u32, message: String| ControlResult {
            nodepool: name.clone(),
            action,
            changed,
            paused,
            step_allowance,
            message,
        };
    match action {
        Action::Pause if paused => Planned {
            patch: None,
            result: result(
                false,
                true,
                allowance,
                format!("nodepool/{name} already paused (the step in progress, if any, finishes)"),
            ),
        },
        Action::Pause => Planned {
            patch: Some(json!({"metadata": {"annotations": {PAUSED_ANNOTATION: "true"}}})),
            result: result(
                true,
                true,
                allowance,
                format!("nodepool/{name} paused (the step in progress, if any, finishes)"),
            ),
        },
        Action::Resume => {
            let present = [
                PAUSED_ANNOTATION,
                PAUSED_REASON_ANNOTATION,
                STEP_ALLOWANCE_ANNOTATION,
            ]
            .into_iter()
            .any(|k| annotation(pool, k).is_some());
            if !present {
                return Planned {
                    patch: None,
                    result: result(
                        false,
                        false,
                        0,
                        format!("nodepool/{name} is not paused: nothing to resume"),
                    ),
                };
            }
            Planned {
                patch: Some(json!({"metadata": {"annotations": {
                    PAUSED_ANNOTATION: null,
                    PAUSED_REASON_ANNOTATION: null,
                    STEP_ALLOWANCE_ANNOTATION: null,
                }}})),
                result: result(true, false, 0, format!("nodepool/{name} resumed")),
            }
        }
        Action::Step if !paused => Planned {
            patch: None,
            result: result(
                false,
                false,
                allowance,
                format!(
                    "nodepool/{name} is not paused: its rollout is running, so there is no step \
                     to allow; nothing changed (to go one node at a time: `kubectl karpenter \
                     upgrade pause --nodepool {name}`, then `upgrade step`)"
                ),
            ),
        },
        Action::Step if waiting == 0 => Planned {
            patch: None,
            result: result(
                false,
                true,
                allowance,
                format!(
                    "nodepool/{name} has no drifted node waiting for a step: nothing to allow; \
                     nothing changed (step allowance {allowance})"
                ),
            ),
        },
        Action::Step => {
            let next = allowance.saturating_add(1);
            let steps = if next == 1 { "step" } else { "steps" };
            Planned {
                patch: Some(json!({"metadata": {
                    "resourceVersion": pool.metadata.resource_version,
                    "annotations": {STEP_ALLOWANCE_ANNOTATION: next.to_string()},
                }})),
                result: result(
                    true,
                    true,
                    next,
                    format!(
                        "nodepool/{name} allowed one more step while paused (step allowance \
                         {next}: {next} {steps} may start)"
                    ),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upgrade::fixtures::{annotate, pool};

    #[test]
    fn step_with_nothing_drifted_allows_nothing() {
        let mut paused = pool();
        annotate(&mut paused, PAUSED_ANNOTATION, "true");
        let p = plan(Action::Step, &paused, 0);
        assert_eq!(p.patch, None);
        assert!(!p.result.changed);
        assert_eq!(p.result.step_allowance, 0);
        assert_eq!(
            p.result.message,
            "nodepool/default has no drifted node waiting for a step: nothing to allow; nothing \
             changed (step allowance 0)"
        );
    }

    #[test]
    fn pause_sets_only_the_paused_annotation_once() {
        let p = plan(Action::Pause, &pool(), 1);
        assert_eq!(
            p.patch,
            Some(json!({"metadata": {"annotations": {"upgrades.karpenter.sh/paused": "true"}}}))
        );
        assert_eq!(
            p.result.message,
            "nodepool/default paused (the step in progress, if any, finishes)"
        );
        assert!(p.result.changed && p.result.paused);
        let mut paused = pool();
        annotate(&mut paused, PAUSED_ANNOTATION, "true");
        let p = plan(Action::Pause, &paused, 1);
        assert_eq!(p.patch, None);
        assert!(!p.result.changed && p.result.paused);
        // Anything but "true" is not paused for the controller, so pausing sets it.
        annotate(&mut paused, PAUSED_ANNOTATION, "yes");
        assert!(plan(Action::Pause, &paused, 1).patch.is_some());
    }

    #[test]
    fn resume_removes_the_three_controls() {
        let mut paused = pool();
        annotate(&mut paused, PAUSED_ANNOTATION, "true");
        annotate(&mut paused, PAUSED_REASON_ANNOTATION, "rolled back");
        annotate(&mut paused, STEP_ALLOWANCE_ANNOTATION, "2");
        let p = plan(Action::Resume, &paused, 1);
        assert_eq!(
            p.patch,
            Some(json!({"metadata": {"annotations": {
                "upgrades.karpenter.sh/paused": null,
                "upgrades.karpenter.sh/paused-reason": null,
                "upgrades.karpenter.sh/step-allowance": null,
            }}}))
        );
        assert_eq!(p.result.message, "nodepool/default resumed");
        assert_eq!((p.result.paused, p.result.step_allowance), (false, 0));
        let p = plan(Action::Resume, &pool(), 1);
        assert_eq!(p.patch, None);
        assert_eq!(
            p.result.message,
            "nodepool/default is not paused: nothing to resume"
        );
    }

    #[test]
    fn step_adds_one_guarded_by_the_resource_version() {
        let mut paused = pool();
        annotate(&mut paused, PAUSED_ANNOTATION, "true");
        let p = plan(Action::Step, &paused, 1);
        assert_eq!(
            p.patch,
            Some(json!({"metadata": {"resourceVersion": "7", "annotations": {
                "upgrades.karpenter.sh/step-allowance": "1"}}}))
        );
        assert_eq!(
            p.result.message,
            "nodepool/default allowed one more step while paused (step allowance 1: 1 step may \
             start)"
        );
        annotate(&mut paused, STEP_ALLOWANCE_ANNOTATION, "1");
        let p = plan(Action::Step, &paused, 1);
        assert_eq!(p.result.step_allowance, 2);
        assert_eq!(
            p.patch.as_ref().map(|v| &v["metadata"]["annotations"]),
            Some(&json!({"upgrades.karpenter.sh/step-allowance": "2"}))
        );
        // A malformed allowance counts as 0.
        annotate(&mut paused, STEP_ALLOWANCE_ANNOTATION, "lots");
        assert_eq!(plan(Action::Step, &paused, 1).result.step_allowance, 1);
    }

    #[test]
    fn step_leaves_a_running_rollout_alone() {
        let p = plan(Action::Step, &pool(), 1);
        assert_eq!(p.patch, None);
        assert!(!p.result.changed && !p.result.paused);
        assert!(
            p.result
                .message
                .starts_with("nodepool/default is not paused: its rollout is running"),
            "{}",
            p.result.message
        );
    }
}
