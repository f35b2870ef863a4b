//! Workloads for `karpenter sandbox` and `karpenter simulate`, read by one reader
//! ([`WorkloadArgs::read`]) so both commands accept the same files and refuse a bad one with
//! the same error before anything starts: the files are parsed ([`parse`]: multi-document
//! Kubernetes YAML or an Alibaba `openb_pod_list` trace), their pods counted against the pod
//! cap with int32 replicas ([`pods`]), the default NodePool added when they bring none
//! ([`defaults`]), and every object admitted by the sandbox API server's own rules
//! ([`admit`]). Every error names the file and document (or line) and the object.

mod admit;
mod defaults;
mod manifest;
mod parse;
mod pods;

use std::path::PathBuf;

use clap::Args;

pub use self::admit::{admit, create_all, install_crds};
pub use self::defaults::{DEFAULT_NODEPOOL, GPU_NODEPOOL, with_defaults};
pub use self::manifest::{Manifest, WorkloadError};
pub use self::parse::{is_trace, load, parse_trace, parse_yaml};
pub use self::pods::{DEFAULT_MAX_PODS, pods_of, scale};

/// The bundled Online Boutique manifests (Apache-2.0, GoogleCloudPlatform/microservices-demo).
pub const ONLINE_BOUTIQUE: &str = include_str!("../../../examples/workloads/online-boutique.yaml");

/// The workload flags `karpenter sandbox` and `karpenter simulate` share.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct WorkloadArgs {
    /// A workload: multi-document Kubernetes YAML or an Alibaba openb_pod_list CSV. Repeatable.
    /// Without one, the bundled Online Boutique (12 Deployments of one replica; `simulate
    /// --generate` replaces it).
    #[arg(long = "workload", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Multiply the replicas of every Deployment, ReplicaSet and StatefulSet.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub scale: u32,
    /// Refuse a workload of more pods than this, before any is created: bare Pods, replicas
    /// (times --scale) and Job parallelism, plus generated pods (DaemonSet pods are not
    /// counted). The sandbox needs about 180 KB of memory a pod.
    #[arg(
        long,
        value_name = "PODS",
        default_value_t = DEFAULT_MAX_PODS,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(i32::MAX)),
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
    /// read, replicas multiplied by `--scale`, the defaults added (discovering `cluster_name`'s
    /// subnets), and every object admitted as the sandbox's API server admits it.
    ///
    /// Errors: a file that cannot be read, does not parse or holds nothing to run; a replica
    /// count that is not an int32 of at least 0; more pods than `--max-pods` (the object that
    /// crosses the cap is named, and no pod has been built); an object the API server refuses
    /// (unknown kind, duplicate or invalid name, invalid field). See [`WorkloadError`].
    pub fn read(
        &self,
        cluster_name: &str,
        generated: Option<&Generated>,
    ) -> Result<Workload, WorkloadError> {
        let cap = self.max_pods;
        let mut total = 0;
        let mut manifests = Vec::new();
        if self.files.is_empty() && generated.is_none() {
            let bundled = PathBuf::from("<bundled online-boutique.yaml>");
            manifests = parse_yaml(&bundled, ONLINE_BOUTIQUE)?;
            pods::count(&manifests, self.scale, cap, &mut total)?;
        }
        for path in &self.files {
            let remaining = u64::from(cap).saturating_sub(total);
            let read = parse::load_within(path, remaining)?;
            pods::count(&read, self.scale, cap, &mut total)?;
            manifests.extend(read);
        }
        if let Some(g) = generated {
            total = total.saturating_add(g.pods);
            if total > u64::from(cap) {
                return Err(WorkloadError::OverCap {
                    what: g.flag.clone(),
                    pods: total,
                    cap,
                });
            }
        }
        scale(&mut manifests, self.scale);
        let manifests = with_defaults(manifests, cluster_name)?;
        admit(&manifests)?;
        Ok(Workload {
            manifests,
            pods: total,
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
        assert!(Cli::try_parse_from(["x", "--max-pods", "2147483648"]).is_err());
        let cli = Cli::try_parse_from(["x", "--max-pods", "2147483647"]).expect("int32 max");
        assert_eq!(cli.workload.max_pods, 2_147_483_647);
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
