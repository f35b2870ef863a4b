//! Workloads for `karpenter sandbox` and `karpenter simulate`, read by one reader
//! ([`WorkloadArgs::read`]) so both commands accept the same files and refuse a bad one with
//! the same error before anything starts: each file is opened within bounds ([`file`]: a
//! regular file or a pipe of at most [`MAX_WORKLOAD_BYTES`]) and streamed ([`parse`]:
//! multi-document Kubernetes YAML or an Alibaba `openb_pod_list` trace, one object at a time),
//! its pods counted against the pod cap as they are read, with int32 replicas ([`pods`]), the
//! default NodePool added when they bring none ([`defaults`]), and every object admitted by
//! the sandbox API server's own rules ([`admit`]). Every error names the file and document
//! (or line) and the object.

mod admit;
mod defaults;
mod file;
mod manifest;
mod parse;
mod pods;

use std::path::{Path, PathBuf};

use clap::Args;

pub use self::admit::{admit, create_all, install_crds};
pub use self::defaults::{DEFAULT_NODEPOOL, GPU_NODEPOOL, missing_node_classes, with_defaults};
pub use self::file::load;
pub use self::manifest::{MAX_WORKLOAD_BYTES, Manifest, WorkloadError};
pub use self::parse::{is_trace, parse_trace, parse_yaml};
pub use self::pods::{DEFAULT_MAX_PODS, MAX_POD_CAP, parse_max_pods, pods_of, scale};

/// The bundled Online Boutique manifests (Apache-2.0, GoogleCloudPlatform/microservices-demo).
pub const ONLINE_BOUTIQUE: &str = include_str!("../../../examples/workloads/online-boutique.yaml");

/// The workload flags `karpenter sandbox` and `karpenter simulate` share.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct WorkloadArgs {
    /// A workload: multi-document Kubernetes YAML or an Alibaba openb_pod_list CSV, a regular
    /// file or a pipe of at most 64 MiB. Repeatable. Without one, the bundled Online Boutique
    /// (12 Deployments of one replica; `simulate --generate` replaces it).
    #[arg(long = "workload", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Multiply the replicas of every Deployment, ReplicaSet and StatefulSet.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub scale: u32,
    /// Refuse a workload of more pods than this, before any is created (reading stops at the
    /// object that crosses it): bare Pods, replicas (times --scale) and Job parallelism, plus
    /// generated pods (DaemonSet pods are not counted). At most 150000, the most Kubernetes
    /// supports in one cluster; the sandbox needs about 75 KB of memory a pod.
    #[arg(
        long,
        value_name = "PODS",
        default_value_t = DEFAULT_MAX_PODS,
        value_parser = parse_max_pods,
    )]
    pub max_pods: u32,
}

impl Default for WorkloadArgs {
    /// No file (the bundled Online Boutique), `--scale 1`, the default pod cap.
    fn default() -> Self {
        WorkloadArgs {
            files: Vec::new(),
            scale: 1,
            max_pods: DEFAULT_MAX_PODS,
        }
    }
}

/// Pods made by a generator rather than read from a file (`simulate --generate diverse:N`):
/// they count against the pod cap after the files' pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    /// The flag as the user gave it, e.g. `--generate diverse:20000`, for the cap's error.
    pub flag: String,
    /// How many pods it makes.
    pub pods: u64,
}

/// A workload ready to apply or plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Its objects in the order they are applied (Namespaces first), replicas scaled, with the
    /// default NodePool and EC2NodeClass when it brings none; every one admitted.
    pub manifests: Vec<Manifest>,
    /// The pods it runs, counted as the cap counts them (generated ones included).
    pub pods: u64,
}

impl WorkloadArgs {
    /// Read the workload: the files in order (the bundled Online Boutique when there is none
    /// and nothing is `generated`), each object's pods counted against `--max-pods` as it is
    /// read (reading stops at the object that crosses the cap), replicas multiplied by
    /// `--scale`, the defaults added (discovering `cluster_name`'s subnets), and every object
    /// admitted as the sandbox's API server admits it.
    ///
    /// Errors: a file that is not a regular file or a pipe, is larger than
    /// [`MAX_WORKLOAD_BYTES`], cannot be read, does not parse or holds nothing to run; a replica
    /// count that is not an int32 of at least 0; more pods than `--max-pods` (the object that
    /// crosses the cap is named, and no pod has been built); an object the API server refuses
    /// (unknown kind, duplicate or invalid name, invalid field). See [`WorkloadError`].
    pub fn read(
        &self,
        cluster_name: &str,
        generated: Option<&Generated>,
    ) -> Result<Workload, WorkloadError> {
        let mut tally = pods::Tally::new(self.scale, self.max_pods);
        let mut manifests = Vec::new();
        let mut keep = |m: Manifest| {
            tally.add(&m)?;
            manifests.push(m);
            Ok(())
        };
        if self.files.is_empty() && generated.is_none() {
            let bundled = Path::new("<bundled online-boutique.yaml>");
            parse::read_yaml(bundled, ONLINE_BOUTIQUE.as_bytes(), &mut keep)?;
        }
        for path in &self.files {
            file::read_file(path, &mut keep)?;
        }
        if let Some(g) = generated {
            tally.add_pods(g.pods, || g.flag.clone())?;
        }
        scale(&mut manifests, self.scale);
        let manifests = with_defaults(manifests, cluster_name)?;
        admit(&manifests)?;
        Ok(Workload {
            manifests,
            pods: tally.total(),
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        workload: WorkloadArgs,
    }

    #[test]
    fn flags_default_to_the_bundled_workload_and_the_documented_cap() {
        let cli = Cli::try_parse_from(["x"]).expect("no flags");
        assert_eq!(cli.workload, WorkloadArgs::default());
        let w = cli.workload.read("c", None).expect("bundled");
        assert_eq!(w.pods, 12);
        assert!(Cli::try_parse_from(["x", "--max-pods", "0"]).is_err());
        let cli = Cli::try_parse_from(["x", "--max-pods", "150000"]).expect("the highest cap");
        assert_eq!(cli.workload.max_pods, MAX_POD_CAP);
    }

    #[test]
    fn a_cap_beyond_what_a_cluster_holds_is_a_clear_error_not_an_abort() {
        // --max-pods 2147483647 was accepted, and a workload that large aborted on a failed
        // allocation (exit 134) instead of answering.
        let err = Cli::try_parse_from(["x", "--max-pods", "2147483647"])
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains(
                "invalid value '2147483647' for '--max-pods <PODS>': the pod cap must be from 1 \
                 to 150000 pods, the most Kubernetes supports in one cluster"
            ),
            "{err}"
        );
    }

    /// `text` written to `name` in a fresh directory.
    fn file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    #[test]
    fn reading_stops_at_the_first_pod_over_the_cap_before_later_documents_are_parsed() {
        // Eleven Pods, then a document that does not parse: with a cap of 10 the 11th Pod is
        // refused and the broken document is never read (the whole file used to be parsed
        // first, so the broken document was the error, after gigabytes for a large file).
        let pod = |i: usize| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\nspec: {{containers: [{{name: c, image: pause}}]}}\n---\n"
            )
        };
        let text: String = (1..=11).map(pod).collect::<String>() + "kind: [broken\n";
        let (_dir, path) = file("pods.yaml", &text);
        let args = WorkloadArgs {
            files: vec![path.clone()],
            max_pods: 10,
            ..WorkloadArgs::default()
        };
        let err = args.read("c", None).expect_err("11 pods");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: document 11: Pod \"p11\" brings the workload to 11 pods, over the cap of 10 \
                 (--max-pods)",
                path.display()
            )
        );
    }

    #[test]
    fn replicas_count_against_the_cap_as_each_object_is_read_across_files() {
        let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 4\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: pause}]}\n";
        let (_a, first) = file("web.yaml", deployment);
        let job = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: batch}\nspec:\n  parallelism: 3\n  template:\n    spec: {restartPolicy: Never, containers: [{name: c, image: pause}]}\n---\nkind: [broken\n";
        let (_b, second) = file("job.yaml", job);
        let args = WorkloadArgs {
            files: vec![first, second.clone()],
            scale: 2,
            max_pods: 10,
        };
        // 4 replicas x 2 = 8 pods, then the Job's 3 take it to 11: refused before document 2.
        let err = args.read("c", None).expect_err("11 pods");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: document 1: Job \"batch\" brings the workload to 11 pods, over the cap of 10 \
                 (--max-pods)",
                second.display()
            )
        );
    }

    #[cfg(unix)]
    #[test]
    fn dev_zero_is_refused_at_once_instead_of_read_until_memory_runs_out() {
        let args = WorkloadArgs {
            files: vec![PathBuf::from("/dev/zero")],
            ..WorkloadArgs::default()
        };
        let err = args.read("c", None).expect_err("a device");
        assert!(
            err.to_string()
                .starts_with("/dev/zero: is a character device, not a workload file"),
            "{err}"
        );
    }

    #[test]
    fn the_bundled_workload_scaled_over_the_cap_is_refused_before_any_pod_exists() {
        let args = WorkloadArgs {
            scale: 10,
            max_pods: 100,
            ..WorkloadArgs::default()
        };
        let err = args.read("c", None).expect_err("120 pods");
        assert!(
            err.to_string()
                .ends_with("brings the workload to 110 pods, over the cap of 100 (--max-pods)"),
            "{err}"
        );
    }

    #[test]
    fn generated_pods_replace_the_bundled_workload_and_count_against_the_cap() {
        let args = WorkloadArgs {
            max_pods: 10,
            ..WorkloadArgs::default()
        };
        let g = |pods| Generated {
            flag: format!("--generate diverse:{pods}"),
            pods,
        };
        let w = args.read("c", Some(&g(10))).expect("10 pods fit");
        assert_eq!(w.pods, 10);
        assert_eq!(
            w.manifests.iter().map(Manifest::kind).collect::<Vec<_>>(),
            ["NodePool", "EC2NodeClass"],
            "only the defaults"
        );
        let err = args.read("c", Some(&g(11))).expect_err("11 pods");
        assert_eq!(
            err.to_string(),
            "--generate diverse:11 brings the workload to 11 pods, over the cap of 10 (--max-pods)"
        );
    }
}
