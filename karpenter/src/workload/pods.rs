//! How many pods a workload runs, counted from its objects before any pod exists: replica
//! counts are int32 of at least 0 as in Kubernetes, and the total (after `--scale`) must stay
//! within the pod cap (`--max-pods`), so a typo such as `replicas: 4294967295` is an error
//! naming the object instead of gigabytes of pods.

use serde_json::{Value, json};

use super::manifest::{Manifest, WorkloadError};

/// The default pod cap (`--max-pods`): 50,000 pods. The sandbox needs about 180 KB of memory
/// a pod (3.7 GB at 20,400 pods, BENCHMARKS.md), so the default keeps it under about 9 GB;
/// `simulate` needs far less.
pub const DEFAULT_MAX_PODS: u32 = 50_000;

/// Kinds whose `spec.replicas` `--scale` multiplies.
fn scalable(kind: &str) -> bool {
    matches!(kind, "Deployment" | "ReplicaSet" | "StatefulSet")
}

/// An int32 count of at least 0 at `field` (`spec.replicas`), or `default` when absent.
///
/// Errors: [`WorkloadError::Replicas`] for anything else (a negative number, one beyond
/// 2,147,483,647, a fraction or a string).
fn count_at(m: &Manifest, field: &str, default: u64) -> Result<u64, WorkloadError> {
    let pointer = format!("/{}", field.replace('.', "/"));
    match m.object.pointer(&pointer) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| WorkloadError::Replicas {
                object: m.describe(),
                field: field.to_string(),
                value: v.to_string(),
            }),
    }
}

/// Pods one object runs as written (before `--scale`): one for a Pod, `spec.replicas` (one
/// when absent) for a Deployment, ReplicaSet or StatefulSet, `spec.parallelism` (one when
/// absent) for a Job, none for anything else (a DaemonSet's pods, one per node, are not
/// counted).
///
/// Errors: [`WorkloadError::Replicas`] when the count is not an int32 of at least 0.
pub fn pods_of(m: &Manifest) -> Result<u64, WorkloadError> {
    match m.kind() {
        "Pod" => Ok(1),
        k if scalable(k) => count_at(m, "spec.replicas", 1),
        "Job" => count_at(m, "spec.parallelism", 1),
        _ => Ok(0),
    }
}

/// Add the pods of `manifests` (replicas multiplied by `scale`) to `total`, one object at a
/// time.
///
/// Errors: [`WorkloadError::Replicas`] (see [`pods_of`]); [`WorkloadError::OverCap`] naming
/// the first object that takes `total` over `cap`.
pub(super) fn count(
    manifests: &[Manifest],
    scale: u32,
    cap: u32,
    total: &mut u64,
) -> Result<(), WorkloadError> {
    for m in manifests {
        let mut pods = pods_of(m)?;
        if scalable(m.kind()) {
            pods *= u64::from(scale);
        }
        *total = total.saturating_add(pods);
        if *total > u64::from(cap) {
            return Err(WorkloadError::OverCap {
                what: m.describe(),
                pods: *total,
                cap,
            });
        }
    }
    Ok(())
}

/// Multiply the replicas of Deployments, ReplicaSets and StatefulSets by `factor` (an absent
/// count is 1, Kubernetes' default). Call it after [`count`] has accepted the workload: the
/// products are not checked here.
pub fn scale(manifests: &mut [Manifest], factor: u32) {
    for m in manifests.iter_mut() {
        if scalable(m.kind()) {
            let replicas = m
                .object
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            m.object["spec"]["replicas"] = json!(replicas.saturating_mul(i64::from(factor)));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn manifest(kind: &str, spec: Value) -> Manifest {
        Manifest {
            object: json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w"}, "spec": spec}),
            source: PathBuf::from("w.yaml"),
            index: 1,
        }
    }

    #[test]
    fn pods_are_counted_by_kind_with_kubernetes_defaults() {
        let cases = [
            ("Pod", json!({}), 1),
            ("Deployment", json!({}), 1),
            ("StatefulSet", json!({"replicas": 7}), 7),
            ("ReplicaSet", json!({"replicas": 0}), 0),
            ("Job", json!({"parallelism": 3}), 3),
            ("Job", json!({}), 1),
            ("DaemonSet", json!({}), 0),
            ("ConfigMap", json!(null), 0),
        ];
        for (kind, spec, want) in cases {
            assert_eq!(pods_of(&manifest(kind, spec)).expect(kind), want, "{kind}");
        }
    }

    #[test]
    fn replicas_beyond_int32_or_negative_are_refused_naming_the_object() {
        for bad in [
            json!(4_294_967_295_u64),
            json!(2_147_483_648_u64),
            json!(-1),
            json!(1.5),
            json!("many"),
        ] {
            let err = pods_of(&manifest("Deployment", json!({"replicas": bad})))
                .expect_err("not an int32 >= 0");
            assert_eq!(
                err.to_string(),
                format!(
                    "w.yaml: document 1: Deployment \"w\": spec.replicas: Invalid value: {bad}: must be an int32 from 0 to 2147483647"
                )
            );
        }
        assert_eq!(
            pods_of(&manifest("Deployment", json!({"replicas": i32::MAX}))).expect("int32"),
            2_147_483_647
        );
    }

    #[test]
    fn the_cap_names_the_object_that_crosses_it_after_scaling() {
        let ms = [
            manifest("Pod", json!({})),
            manifest("Deployment", json!({"replicas": 3})),
            manifest("Job", json!({"parallelism": 2})),
        ];
        let mut total = 0;
        count(&ms, 2, 9, &mut total).expect("1 + 3x2 + 2 = 9 pods fit a cap of 9");
        assert_eq!(total, 9);
        let mut total = 0;
        let err = count(&ms, 3, 9, &mut total).expect_err("1 + 3x3 = 10 pods");
        assert_eq!(
            err.to_string(),
            "w.yaml: document 1: Deployment \"w\" brings the workload to 10 pods, over the cap of 9 (--max-pods)"
        );
    }

    #[test]
    fn scale_multiplies_replicas_of_scalable_kinds_only() {
        let mut ms = vec![
            manifest("Deployment", json!({"replicas": 3})),
            manifest("StatefulSet", json!({})),
            manifest("Job", json!({"parallelism": 2})),
        ];
        scale(&mut ms, 10);
        assert_eq!(ms[0].object["spec"]["replicas"], 30);
        assert_eq!(ms[1].object["spec"]["replicas"], 10);
        assert_eq!(ms[2].object["spec"]["parallelism"], 2);
        assert!(ms[2].object["spec"].get("replicas").is_none());
    }
}
