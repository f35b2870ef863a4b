//! Workload rules of `pkg/apis/apps/validation` and `pkg/apis/batch/validation`: replica counts
//! and other int32 fields that may not be negative, a selector that is present, non-empty and
//! selects the pod template's labels, and the template itself (its metadata, its pod spec, the
//! restart policies each controller can run).

use serde_json::Value;

use super::meta::{annotations, label_selector, labels};
use super::pod::pod_spec;
use super::{FieldError, child};

const NON_NEGATIVE: &str = "must be greater than or equal to 0";

fn non_negative(spec: &Value, field: &str, errors: &mut Vec<FieldError>) {
    if let Some(n) = spec.get(field).and_then(Value::as_i64)
        && n < 0
    {
        errors.push(FieldError::invalid(child("spec", field), n, NON_NEGATIVE));
    }
}

/// Whether a label selector (`matchLabels`, `matchExpressions`) selects these labels.
fn selects(selector: &Value, labels: Option<&Value>) -> bool {
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let match_labels = selector.get("matchLabels").and_then(Value::as_object);
    let labels_ok = match_labels
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    let expressions_ok = expressions.into_iter().flatten().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match e.get("operator").and_then(Value::as_str) {
            Some("In") => label(key).is_some_and(|v| values.contains(&v)),
            Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
            Some("Exists") => label(key).is_some(),
            Some("DoesNotExist") => label(key).is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

fn is_empty_selector(selector: &Value) -> bool {
    let len = |f: &str| {
        selector.get(f).map_or(0, |v| match v {
            Value::Object(m) => m.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        })
    };
    len("matchLabels") + len("matchExpressions") == 0
}

/// The selector and the template it must select; `restart` lists the restart policies the
/// kind's controller runs pods with.
fn selector_and_template(kind: &str, spec: &Value, restart: &[&str], errors: &mut Vec<FieldError>) {
    let selector = spec.get("selector").filter(|s| !s.is_null());
    match selector {
        None if kind != "DaemonSet" => errors.push(FieldError::required("spec.selector", "")),
        None => {}
        Some(s) => {
            label_selector(s, "spec.selector", errors);
            if is_empty_selector(s) {
                let for_kind = match kind {
                    "StatefulSet" => "statefulset",
                    "DaemonSet" => "daemonset",
                    "Job" => "job",
                    _ => "deployment",
                };
                errors.push(FieldError::invalid(
                    "spec.selector",
                    s.clone(),
                    format!("empty selector is invalid for {for_kind}"),
                ));
            }
        }
    }
    let template = spec.get("template").filter(|t| !t.is_null());
    let Some(template) = template else {
        errors.push(FieldError::required("spec.template", ""));
        return;
    };
    let template_labels = template.pointer("/metadata/labels");
    let matches = selector.is_some_and(|s| is_empty_selector(s) || selects(s, template_labels));
    if !matches && (selector.is_some() || kind == "DaemonSet") {
        errors.push(FieldError::invalid(
            "spec.template.metadata.labels",
            template_labels.cloned().unwrap_or(Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
    let meta = template.get("metadata");
    labels(
        meta.and_then(|m| m.get("labels")),
        "spec.template.metadata.labels",
        errors,
    );
    annotations(
        meta.and_then(|m| m.get("annotations")),
        "spec.template.metadata.annotations",
        errors,
    );
    let Some(pod) = template.get("spec") else {
        errors.push(FieldError::required("spec.template.spec.containers", ""));
        return;
    };
    pod_spec(pod, "spec.template.spec", errors);
    let policy = pod
        .get("restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    if !restart.contains(&policy) {
        errors.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            policy,
            restart,
        ));
    }
    if kind != "Job"
        && pod
            .get("activeDeadlineSeconds")
            .is_some_and(|v| !v.is_null())
    {
        errors.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
}

/// Deployments, ReplicaSets, StatefulSets and DaemonSets.
pub fn replicated(kind: &str, spec: &Value, errors: &mut Vec<FieldError>) {
    if kind != "DaemonSet" {
        non_negative(spec, "replicas", errors);
    }
    non_negative(spec, "minReadySeconds", errors);
    non_negative(spec, "revisionHistoryLimit", errors);
    selector_and_template(kind, spec, &["Always"], errors);
    if kind == "Deployment"
        && let Some(deadline) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64)
    {
        let min_ready = spec
            .get("minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if deadline <= min_ready {
            errors.push(FieldError::invalid(
                "spec.progressDeadlineSeconds",
                deadline,
                "must be greater than minReadySeconds",
            ));
        }
    }
}

/// Jobs: counts, the generated selector and a template whose pods end.
pub fn job(spec: &Value, errors: &mut Vec<FieldError>) {
    for field in ["parallelism", "completions", "backoffLimit"] {
        non_negative(spec, field, errors);
    }
    selector_and_template("Job", spec, &["OnFailure", "Never"], errors);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i64, selector: Value, labels: Value) -> Value {
        json!({"replicas": replicas, "selector": selector, "template": {
            "metadata": {"labels": labels},
            "spec": {"restartPolicy": "Always", "containers": [{"name": "c"}]}}})
    }

    fn errors_of(kind: &str, spec: &Value) -> Vec<String> {
        let mut errors = Vec::new();
        replicated(kind, spec, &mut errors);
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn negative_replicas_are_refused() {
        let spec = deployment(
            -5,
            json!({"matchLabels": {"app": "a"}}),
            json!({"app": "a"}),
        );
        assert_eq!(
            errors_of("Deployment", &spec),
            vec!["spec.replicas: Invalid value: -5: must be greater than or equal to 0"]
        );
    }

    #[test]
    fn the_selector_must_select_the_template() {
        let spec = deployment(1, json!({"matchLabels": {"app": "a"}}), json!({"app": "b"}));
        assert_eq!(
            errors_of("ReplicaSet", &spec),
            vec![
                "spec.template.metadata.labels: Invalid value: {\"app\":\"b\"}: `selector` does not match template `labels`"
            ]
        );
        let spec = deployment(
            1,
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}),
            json!({"app": "b"}),
        );
        assert!(errors_of("StatefulSet", &spec).is_empty());
        let mut missing = deployment(1, json!(null), json!({"app": "a"}));
        missing["selector"] = Value::Null;
        assert_eq!(
            errors_of("Deployment", &missing),
            vec!["spec.selector: Required value"]
        );
        let empty = deployment(1, json!({}), json!({"app": "a"}));
        assert_eq!(
            errors_of("StatefulSet", &empty),
            vec!["spec.selector: Invalid value: {}: empty selector is invalid for statefulset"]
        );
    }

    #[test]
    fn controllers_run_only_their_restart_policies() {
        let mut spec = deployment(1, json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
        spec["template"]["spec"]["restartPolicy"] = json!("Never");
        assert_eq!(
            errors_of("Deployment", &spec),
            vec![
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""
            ]
        );
        let mut errors = Vec::new();
        spec["template"]["spec"]["restartPolicy"] = json!("Always");
        job(&spec, &mut errors);
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
            ]
        );
    }
}
