//! Workload defaults (apps/v1 and batch/v1 `defaults.go`): replica counts, update strategies,
//! history limits, a Job's counts and modes, and the pod template's spec defaults; plus the
//! selector and labels a Job's REST storage generates on create from the Job's uid.

use serde_json::{Value, json};

use super::pod::pod_spec;
use super::{Write, ensure, items, set_default};

fn spec_of(obj: &mut Value) -> Option<&mut Value> {
    ensure(obj, "spec")
}

fn template(spec: &mut Value) {
    if let Some(t) = spec.pointer_mut("/template/spec") {
        pod_spec(t);
    }
}

/// `rollingUpdate` of a `RollingUpdate` strategy, completed with the kind's defaults; other
/// strategy types are left as written.
fn rolling_update(strategy: &mut Value, max_unavailable: Value, max_surge: Option<Value>) {
    set_default(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type").and_then(Value::as_str) != Some("RollingUpdate") {
        return;
    }
    let Some(ru) = ensure(strategy, "rollingUpdate").and_then(Value::as_object_mut) else {
        return;
    };
    if ru.get("maxUnavailable").is_none_or(Value::is_null) {
        ru.insert("maxUnavailable".into(), max_unavailable);
    }
    if let Some(surge) = max_surge
        && ru.get("maxSurge").is_none_or(Value::is_null)
    {
        ru.insert("maxSurge".into(), surge);
    }
}

/// `SetDefaults_Deployment`: one replica, `RollingUpdate` at 25%/25%, ten old ReplicaSets kept,
/// ten minutes to progress.
pub fn deployment(obj: &mut Value) {
    let Some(spec) = spec_of(obj) else { return };
    set_default(spec, "replicas", json!(1));
    if let Some(strategy) = ensure(spec, "strategy") {
        rolling_update(strategy, json!("25%"), Some(json!("25%")));
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "progressDeadlineSeconds", json!(600));
    template(spec);
}

/// `SetDefaults_ReplicaSet`: one replica.
pub fn replica_set(obj: &mut Value) {
    let Some(spec) = spec_of(obj) else { return };
    set_default(spec, "replicas", json!(1));
    template(spec);
}

/// `SetDefaults_DaemonSet`: `RollingUpdate` one node at a time without surge, ten revisions.
pub fn daemon_set(obj: &mut Value) {
    let Some(spec) = spec_of(obj) else { return };
    if let Some(strategy) = ensure(spec, "updateStrategy") {
        rolling_update(strategy, json!(1), Some(json!(0)));
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    template(spec);
}

/// `SetDefaults_StatefulSet`: ordered pod management, `RollingUpdate` from partition 0, claims
/// retained, one replica, ten revisions; claim templates get the PersistentVolumeClaim defaults.
pub fn stateful_set(obj: &mut Value) {
    let Some(spec) = spec_of(obj) else { return };
    set_default(spec, "podManagementPolicy", json!("OrderedReady"));
    if let Some(strategy) = ensure(spec, "updateStrategy") {
        if strategy.get("type").is_none_or(Value::is_null) {
            strategy["type"] = json!("RollingUpdate");
            set_default(strategy, "rollingUpdate", json!({}));
        }
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate")
            && let Some(ru) = strategy.get_mut("rollingUpdate").filter(|r| r.is_object())
        {
            set_default(ru, "partition", json!(0));
        }
    }
    if let Some(retention) = ensure(spec, "persistentVolumeClaimRetentionPolicy") {
        set_default(retention, "whenDeleted", json!("Retain"));
        set_default(retention, "whenScaled", json!("Retain"));
    }
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    template(spec);
    for claim in items(spec, "volumeClaimTemplates") {
        super::kinds::claim(claim);
    }
}

/// `SetDefaults_Job` (one completion at parallelism one, six retries, non-indexed, not
/// suspended, pods replaced once terminated or failed, the Job labelled like its template) and,
/// on create, the selector the Job controller matches its pods by
/// (`batch.kubernetes.io/controller-uid`) with the labels it adds to the template.
pub fn job(obj: &mut Value, write: Write<'_>) {
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(String::from);
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(String::from);
    let Some(spec) = spec_of(obj) else { return };
    let absent = |s: &Value, f: &str| s.get(f).is_none_or(Value::is_null);
    if absent(spec, "completions") && absent(spec, "parallelism") {
        spec["completions"] = json!(1);
    }
    set_default(spec, "parallelism", json!(1));
    set_default(spec, "backoffLimit", json!(6));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    let replacement = if absent(spec, "podFailurePolicy") {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    set_default(spec, "podReplacementPolicy", json!(replacement));
    let manual = spec.get("manualSelector").and_then(Value::as_bool) == Some(true);
    if let (Write::Create, false, Some(uid), Some(name)) = (write, manual, uid, name) {
        if let Some(labels) = spec
            .get_mut("template")
            .and_then(|t| ensure(t, "metadata"))
            .and_then(|m| ensure(m, "labels"))
            .and_then(Value::as_object_mut)
        {
            for (k, v) in [
                ("batch.kubernetes.io/job-name", &name),
                ("job-name", &name),
                ("batch.kubernetes.io/controller-uid", &uid),
                ("controller-uid", &uid),
            ] {
                labels.entry(k).or_insert_with(|| json!(v));
            }
        }
        if let Some(match_labels) = ensure(spec, "selector")
            .and_then(|s| ensure(s, "matchLabels"))
            .and_then(Value::as_object_mut)
        {
            match_labels
                .entry("batch.kubernetes.io/controller-uid")
                .or_insert_with(|| json!(uid));
        }
    }
    template(spec);
    let template_labels = spec.pointer("/template/metadata/labels").cloned();
    let own_labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
    if let Some(labels) = template_labels.filter(Value::is_object)
        && own_labels.is_none_or(|l| l.is_empty())
    {
        obj["metadata"]["labels"] = labels;
    }
}
