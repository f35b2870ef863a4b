//! How many pods a workload runs, counted from its objects as they are read, before any pod
//! exists: replica counts are int32 of at least 0 as in Kubernetes, and the total (after
//! `--scale`) must stay within the pod cap (`--max-pods`, itself at most [`MAX_POD_CAP`]), so a
//! typo such as `replicas: 4294967295` or a file of a million Pods is an error naming the object
//! that crosses the cap instead of gigabytes of pods.

use serde_json::{Value, json};

use super::manifest::{Manifest, WorkloadError};

/// The sandbox's memory per pod, KB: its peak RSS with the controller, 1,507 MiB at Online
/// Boutique x1700 (20,400 pods; BENCHMARKS.md, issue 36's table), over the pods. Every text
/// that gives the figure (`--max-pods`'s help and error, docs/getting-started.md) gives this.
pub const POD_MEMORY_KB: u32 = 75;

/// The default pod cap (`--max-pods`): 50,000 pods, which keep the sandbox under about 4 GB
/// ([`POD_MEMORY_KB`] a pod); `simulate` needs far less.
pub const DEFAULT_MAX_PODS: u32 = 50_000;

/// The highest pod cap `--max-pods` accepts: 150,000 pods, the most Kubernetes supports in one
/// cluster (kubernetes.io, "Considerations for large clusters"). At [`POD_MEMORY_KB`] a pod
/// even this cap asks for some 11 GB.
pub const MAX_POD_CAP: u32 = 150_000;

/// `--max-pods`'s value parser: a whole number of pods from 1 to [`MAX_POD_CAP`].
///
/// Errors: anything else, with the range and why it ends there (clap prints it after
/// `invalid value '<s>' for '--max-pods <PODS>'`).
pub fn parse_max_pods(s: &str) -> Result<u32, String> {
    let range = format!(
        "the pod cap must be from 1 to {MAX_POD_CAP} pods, the most Kubernetes supports in one \
         cluster (the sandbox needs about {POD_MEMORY_KB} KB of memory a pod)"
    );
    match s.parse::<u64>() {
        Ok(n) => u32::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_POD_CAP).contains(n))
            .ok_or(range),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Err(range),
        Err(_) => Err(format!("not a whole number of pods; {range}")),
    }
}

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

/// The pod cap applied while a workload is read: each object's pods (replicas multiplied by
/// `--scale`) are added as the object is read, and the first object that takes the total over
/// the cap stops the reading.
#[derive(Debug)]
pub(super) struct Tally {
    scale: u32,
    cap: u32,
    total: u64,
}

impl Tally {
    /// No pods yet, against `cap` (`--max-pods`), with replicas multiplied by `scale`.
    pub(super) fn new(scale: u32, cap: u32) -> Tally {
        Tally {
            scale,
            cap,
            total: 0,
        }
    }

    /// Pods counted so far.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Add the pods `m` runs (see [`pods_of`]; replicas multiplied by the scale).
    ///
    /// Errors: [`WorkloadError::Replicas`] (see [`pods_of`]); [`WorkloadError::OverCap`] naming
    /// `m` when it takes the total over the cap.
    pub(super) fn add(&mut self, m: &Manifest) -> Result<(), WorkloadError> {
        let mut pods = pods_of(m)?;
        if scalable(m.kind()) {
            pods *= u64::from(self.scale);
        }
        self.add_pods(pods, || m.describe())
    }

    /// Add `pods` made by `what` (e.g. `--generate diverse:20000`, for the error).
    ///
    /// Errors: [`WorkloadError::OverCap`] naming `what` when they take the total over the cap.
    pub(super) fn add_pods(
        &mut self,
        pods: u64,
        what: impl FnOnce() -> String,
    ) -> Result<(), WorkloadError> {
        self.total = self.total.saturating_add(pods);
        if self.total > u64::from(self.cap) {
            return Err(WorkloadError::OverCap {
                what: what(),
                pods: self.total,
                cap: self.cap,
            });
        }
        Ok(())
    }
}

/// Multiply the replicas of Deployments, ReplicaSets and StatefulSets by `factor` (an absent
/// count is 1, Kubernetes' default). Call it after a [`Tally`] has accepted the workload: the
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
        let mut fits = Tally::new(2, 9);
        for m in &ms {
            fits.add(m).expect("1 + 3x2 + 2 = 9 pods fit a cap of 9");
        }
        assert_eq!(fits.total(), 9);
        let mut over = Tally::new(3, 9);
        let err = ms
            .iter()
            .try_for_each(|m| over.add(m))
            .expect_err("1 + 3x3 = 10 pods");
        assert_eq!(
            err.to_string(),
            "w.yaml: document 1: Deployment \"w\" brings the workload to 10 pods, over the cap of 9 (--max-pods)"
        );
    }

    #[test]
    fn the_cap_flag_takes_1_to_150000_and_says_why_it_stops_there() {
        assert_eq!(parse_max_pods("1"), Ok(1));
        assert_eq!(parse_max_pods("150000"), Ok(MAX_POD_CAP));
        let range = "the pod cap must be from 1 to 150000 pods, the most Kubernetes supports in \
                     one cluster (the sandbox needs about 75 KB of memory a pod)";
        for over in [
            "0",
            "150001",
            "2147483647",
            "4294967296",
            "99999999999999999999999",
        ] {
            assert_eq!(parse_max_pods(over), Err(range.to_string()), "{over}");
        }
        for bad in ["-1", "1e5", "", "many"] {
            assert_eq!(
                parse_max_pods(bad),
                Err(format!("not a whole number of pods; {range}")),
                "{bad}"
            );
        }
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

    /// "about N KB of memory a pod", each N in `text`.
    fn figures(text: &str) -> Vec<u32> {
        text.split("about ")
            .skip(1)
            .filter_map(|rest| rest.split_once(" KB of memory a pod"))
            .filter_map(|(n, _)| n.trim().parse().ok())
            .collect()
    }

    #[test]
    fn every_text_gives_the_one_measured_memory_figure_per_pod() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            workload: super::super::WorkloadArgs,
        }
        let help = Cli::command().render_long_help().to_string();
        let error = parse_max_pods("0").expect_err("out of range");
        let docs = include_str!("../../../docs/getting-started.md");
        for (what, text) in [
            ("--help", help.as_str()),
            ("the error", &error),
            ("docs", docs),
        ] {
            assert_eq!(figures(text), vec![POD_MEMORY_KB], "{what}: {text}");
        }
    }
}
