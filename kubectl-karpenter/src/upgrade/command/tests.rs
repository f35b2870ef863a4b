//! Tests of the `upgrade` commands against a recording fake: re-reads after conflicts, controls
//! that send nothing, deleted NodePools, `--all` past a failure, and exit codes.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crds::upgrade::{PAUSED_ANNOTATION, STEP_ALLOWANCE_ANNOTATION};
use serde_json::json;

use super::*;
use crate::upgrade::fixtures::{self, annotate};

/// NodePools in memory: merge patches of annotations, guarded by `metadata.resourceVersion`
/// when the patch carries one; `interfere` writes of another client land before each of the
/// next patches (the controller taking one step from the allowance); `broken` fails with 500.
#[derive(Default)]
struct Fake {
    pools: RefCell<BTreeMap<String, NodePool>>,
    interfere: RefCell<usize>,
    broken: Option<String>,
    patches: RefCell<Vec<(String, Value)>>,
}

fn api_error(code: u16, reason: &str) -> kube::Error {
    kube::Error::Api(Box::new(
        kube::core::Status::failure(reason, reason).with_code(code),
    ))
}

fn rv(pool: &NodePool) -> u64 {
    pool.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Fake {
    fn with(pools: Vec<NodePool>) -> Fake {
        let fake = Fake::default();
        for p in pools {
            let name = p.metadata.name.clone().unwrap_or_default();
            fake.pools.borrow_mut().insert(name, p);
        }
        fake
    }

    fn annotation(&self, pool: &str, key: &str) -> Option<String> {
        self.pools.borrow()[pool]
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key).cloned())
    }
}

impl NodePools for Fake {
    async fn get(&self, name: &str) -> Result<Option<NodePool>, kube::Error> {
        Ok(self.pools.borrow().get(name).cloned())
    }

    async fn patch(&self, name: &str, patch: &Value) -> Result<(), kube::Error> {
        self.patches
            .borrow_mut()
            .push((name.to_owned(), patch.clone()));
        if self.broken.as_deref() == Some(name) {
            return Err(api_error(500, "InternalError"));
        }
        let mut pools = self.pools.borrow_mut();
        let Some(pool) = pools.get_mut(name) else {
            return Err(api_error(404, "NotFound"));
        };
        let mut interfere = self.interfere.borrow_mut();
        if *interfere > 0 {
            *interfere -= 1;
            annotate(pool, STEP_ALLOWANCE_ANNOTATION, "5");
            pool.metadata.resource_version = Some((rv(pool) + 1).to_string());
        }
        let meta = &patch["metadata"];
        if let Some(want) = meta["resourceVersion"].as_str()
            && Some(want) != pool.metadata.resource_version.as_deref()
        {
            return Err(api_error(409, "Conflict"));
        }
        let annotations = pool
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (k, v) in meta["annotations"].as_object().into_iter().flatten() {
            match v.as_str() {
                Some(v) => annotations.insert(k.clone(), v.to_owned()),
                None => annotations.remove(k),
            };
        }
        pool.metadata.resource_version = Some((rv(pool) + 1).to_string());
        Ok(())
    }
}

fn paused() -> NodePool {
    let mut pool = fixtures::pool();
    annotate(&mut pool, PAUSED_ANNOTATION, "true");
    pool
}

#[tokio::test]
async fn step_rereads_and_recomputes_after_a_conflict() {
    let fake = Fake::with(vec![paused()]);
    *fake.interfere.borrow_mut() = 1;
    let result = apply(&fake, Action::Step, &paused(), 1)
        .await
        .expect("applied");
    // The other writer set 5; the retry added one to that, not to what was first read.
    assert_eq!(result.step_allowance, 6);
    assert_eq!(
        fake.annotation("default", STEP_ALLOWANCE_ANNOTATION)
            .as_deref(),
        Some("6")
    );
    let patches = fake.patches.borrow();
    assert_eq!(patches.len(), 2);
    assert_eq!(patches[0].1["metadata"]["resourceVersion"], "7");
    assert_eq!(patches[1].1["metadata"]["resourceVersion"], "8");
}

#[tokio::test]
async fn step_gives_up_after_repeated_conflicts_and_names_the_fix() {
    let fake = Fake::with(vec![paused()]);
    *fake.interfere.borrow_mut() = ATTEMPTS;
    let err = apply(&fake, Action::Step, &paused(), 1)
        .await
        .expect_err("conflicts");
    assert_eq!(
        err.to_string(),
        "allowing a step on nodepool/default: it kept changing (5 conflicting writes, e.g. the \
         controller starting steps); run the command again"
    );
    assert_eq!(fake.patches.borrow().len(), ATTEMPTS);
}

#[tokio::test]
async fn controls_that_change_nothing_send_nothing() {
    let fake = Fake::with(vec![paused()]);
    let result = apply(&fake, Action::Pause, &paused(), 1)
        .await
        .expect("applied");
    assert!(!result.changed);
    let result = apply(&fake, Action::Step, &fixtures::pool(), 1)
        .await
        .expect("applied");
    assert!(!result.changed);
    assert!(fake.patches.borrow().is_empty());
}

#[tokio::test]
async fn a_deleted_nodepool_is_named() {
    let fake = Fake::default();
    let err = apply(&fake, Action::Pause, &fixtures::pool(), 1)
        .await
        .expect_err("gone");
    assert!(
        err.to_string()
            .starts_with("pausing nodepool/default: it was deleted meanwhile"),
        "{err}"
    );
}

fn run_control(
    fake: &Fake,
    action: Action,
    pools: &[NodePool],
    format: UpgradeOutput,
) -> (Result<Outcome, Error>, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let io = Io {
        out: &mut out,
        err: &mut err,
        color: false,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    // Every NodePool has a drifted node waiting, so a step has something to allow.
    let waiting = pools
        .iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), 1))
        .collect();
    let result = runtime.block_on(control(fake, action, pools, &waiting, format, io));
    (
        result,
        String::from_utf8(out).expect("utf-8"),
        String::from_utf8(err).expect("utf-8"),
    )
}

#[test]
fn all_nodepools_go_on_past_a_failure_then_report_it() {
    let mut gpu = fixtures::pool();
    gpu.metadata.name = Some("gpu".into());
    let mut zeta = fixtures::pool();
    zeta.metadata.name = Some("zeta".into());
    let pools = vec![fixtures::pool(), gpu, zeta];
    let fake = Fake {
        broken: Some("gpu".into()),
        ..Fake::with(pools.clone())
    };
    let (result, out, err) = run_control(&fake, Action::Pause, &pools, UpgradeOutput::Text);
    assert_eq!(
        out,
        "nodepool/default paused (the step in progress, if any, finishes)\n\
         nodepool/zeta paused (the step in progress, if any, finishes)\n"
    );
    assert!(
        err.starts_with("error: pausing nodepool/gpu: ") && err.contains("InternalError"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let e = result.expect_err("incomplete");
    assert_eq!(
        e.to_string(),
        "1 of 3 NodePools could not be changed (see the errors above); `kubectl karpenter \
         upgrade status` shows where each one stands"
    );

    // One NodePool: its own error, nothing else.
    let (result, _, err) = run_control(&fake, Action::Pause, &pools[1..2], UpgradeOutput::Text);
    assert_eq!(err, "");
    assert!(
        result
            .expect_err("fails")
            .to_string()
            .contains("`kubectl auth can-i patch nodepools.karpenter.sh`")
    );
}

#[test]
fn control_results_as_json_and_none_found() {
    let fake = Fake::with(vec![paused()]);
    let (result, out, _) = run_control(&fake, Action::Step, &[paused()], UpgradeOutput::Json);
    assert_eq!(result.expect("ok"), Outcome::Clean);
    let doc: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        doc,
        json!([{"nodepool": "default", "action": "step", "changed": true, "paused": true,
                "stepAllowance": 1,
                "message": "nodepool/default allowed one more step while paused (step \
                            allowance 1: 1 step may start)"}])
    );
    let (result, out, err) = run_control(&fake, Action::Pause, &[], UpgradeOutput::Text);
    assert_eq!(result.expect("ok"), Outcome::Clean);
    assert_eq!((out.as_str(), err.as_str()), ("", "No resources found\n"));
}

fn status_output(format: UpgradeOutput, statuses: &[PoolStatus]) -> (Outcome, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let io = Io {
        out: &mut out,
        err: &mut err,
        color: false,
    };
    let outcome = write_status(format, statuses, fixtures::now(), io).expect("write");
    (
        outcome,
        String::from_utf8(out).expect("utf-8"),
        String::from_utf8(err).expect("utf-8"),
    )
}

#[test]
fn status_exits_1_only_with_drifted_nodeclaims() {
    let (outcome, _, _) = status_output(UpgradeOutput::Text, &[fixtures::status()]);
    assert_eq!(outcome, Outcome::Found);
    let idle = PoolStatus::of(&fixtures::pool(), &[], &[], &[], &[], fixtures::now());
    let (outcome, out, _) = status_output(UpgradeOutput::Yaml, &[idle]);
    assert_eq!(outcome, Outcome::Clean);
    assert!(out.starts_with("- nodepool: default\n"), "{out}");
    let (outcome, out, err) = status_output(UpgradeOutput::Text, &[]);
    assert_eq!(outcome, Outcome::Clean);
    assert_eq!((out.as_str(), err.as_str()), ("", "No resources found\n"));
    let (_, out, _) = status_output(UpgradeOutput::Json, &[]);
    assert_eq!(out, "[]\n");
}
