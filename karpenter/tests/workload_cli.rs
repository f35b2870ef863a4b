//! The one workload reader behind `karpenter sandbox` and `karpenter simulate`: both refuse the
//! same bad workloads with the same error (unknown kinds, empty files, duplicate or invalid
//! names, replica counts that are no int32 or exceed the pod cap), before anything starts or
//! is allocated; endless inputs (`/dev/zero`) and pod caps beyond a cluster's are refused at
//! once; and `sandbox --until-settled` with no pod to run says so instead of waiting.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{karpenter, report};

/// A Deployment `name` of `replicas` small pods, as YAML.
fn deployment(name: &str, replicas: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
        - name: app
          image: public.ecr.aws/eks-distro/kubernetes/pause:3.2
          resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}
"#
    )
}

/// A bare pod named `name` (written as given, so it may be invalid).
fn pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: "{name}"}}
spec:
  containers:
    - name: app
      image: public.ecr.aws/eks-distro/kubernetes/pause:3.2
"#
    )
}

/// `text` written to `name` in `dir`.
fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write workload");
    path
}

/// `karpenter simulate --workload <path> <extra...>`.
fn simulate(path: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["simulate", "--workload", path.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    karpenter(&args)
}

/// `karpenter sandbox --workload <path> --until-settled --timeout 1m <extra...>`: a workload the
/// reader wrongly accepts runs into the timeout and exits 1, never 2.
fn sandbox(path: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "sandbox",
        "--workload",
        path.to_str().expect("utf-8 path"),
        "--until-settled",
        "--timeout",
        "1m",
    ];
    args.extend_from_slice(extra);
    karpenter(&args)
}

/// The `error: ...` line of a run refused as bad input (exit 2, nothing on stdout).
fn refusal(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout on error");
    stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line in:\n{stderr}"))
        .to_string()
}

/// Both commands refuse `text` (as file `name`) with the same error, which contains `expected`.
fn both_refuse(name: &str, text: &str, expected: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = file(dir.path(), name, text);
    let from_simulate = refusal(&simulate(&path, &[]));
    let from_sandbox = refusal(&sandbox(&path, &[]));
    assert!(from_simulate.contains(expected), "{from_simulate}");
    assert_eq!(from_simulate, from_sandbox, "one reader, one error");
}

#[test]
fn both_commands_refuse_unknown_kinds_with_the_same_error() {
    both_refuse(
        "unknown.yaml",
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n",
        "unknown.yaml: document 1: no resource type example.com/v1 Gadget is served",
    );
}

#[test]
fn both_commands_refuse_an_empty_workload_file() {
    both_refuse(
        "empty.yaml",
        "# nothing here\n---\n",
        "empty.yaml: no Kubernetes objects in the file",
    );
    both_refuse(
        "empty.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n",
        "empty.csv: no tasks in the trace",
    );
}

#[test]
fn both_commands_refuse_duplicate_and_invalid_pod_names() {
    both_refuse(
        "twice.yaml",
        &format!("{}---\n{}", pod("web"), pod("web")),
        "twice.yaml: document 2: pods \"web\" already exists",
    );
    both_refuse(
        "invalid.yaml",
        &pod("Web_1"),
        "invalid.yaml: document 1: Pod \"Web_1\" is invalid: metadata.name: Invalid value: \"Web_1\": a lowercase RFC 1123 subdomain",
    );
    // A namespace name is a DNS label: no dots.
    both_refuse(
        "namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team.a}\n",
        "namespace.yaml: document 1: Namespace \"team.a\" is invalid: metadata.name: Invalid value: \"team.a\": must not contain dots",
    );
}

#[test]
fn replicas_must_be_an_int32_and_the_pods_within_the_cap() {
    // Beyond int32: refused as Kubernetes refuses it, naming the object, before any pod exists
    // (simulate used to expand 4,294,967,295 pods and reach 12 GB).
    both_refuse(
        "huge.yaml",
        &deployment("huge", "4294967295"),
        "huge.yaml: document 1: Deployment \"huge\": spec.replicas: Invalid value: 4294967295: must be an int32 from 0 to 2147483647",
    );
    both_refuse(
        "negative.yaml",
        &deployment("negative", "-1"),
        "negative.yaml: document 1: Deployment \"negative\": spec.replicas: Invalid value: -1: must be an int32 from 0 to 2147483647",
    );
    // An int32 beyond the default cap (the sandbox used to abort on allocation failure).
    both_refuse(
        "max.yaml",
        &deployment("max", "2147483647"),
        "max.yaml: document 1: Deployment \"max\" brings the workload to 2147483647 pods, over the cap of 50000 (--max-pods)",
    );
}

#[test]
fn the_pod_cap_counts_scaled_replicas_and_max_pods_raises_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = file(
        dir.path(),
        "six.yaml",
        &format!("{}---\n{}", pod("solo"), deployment("six", "6")),
    );
    // 1 pod + 6 replicas x 2 = 13 pods.
    let refused = refusal(&simulate(&path, &["--scale", "2", "--max-pods", "12"]));
    assert!(
        refused.contains(
            "six.yaml: document 2: Deployment \"six\" brings the workload to 13 pods, over the cap of 12 (--max-pods)"
        ),
        "{refused}"
    );
    assert_eq!(
        refused,
        refusal(&sandbox(&path, &["--scale", "2", "--max-pods", "12"]))
    );
    let r = report(&simulate(
        &path,
        &[
            "--scale",
            "2",
            "--max-pods",
            "13",
            "--instance-types",
            "synthetic-400",
            "--report",
            "json",
        ],
    ));
    assert_eq!(r["pods"]["total"], 13, "{r}");
    // Generated pods count too.
    let out = karpenter(&["simulate", "--generate", "diverse:100", "--max-pods", "99"]);
    let refused = refusal(&out);
    assert!(
        refused.contains("--generate diverse:100 brings the workload to 100 pods, over the cap of 99 (--max-pods)"),
        "{refused}"
    );
}

#[cfg(unix)]
#[test]
fn both_commands_refuse_a_device_at_once_instead_of_reading_it_forever() {
    // `--workload /dev/zero` used to eat memory until the process was killed.
    let path = Path::new("/dev/zero");
    let from_simulate = refusal(&simulate(path, &[]));
    assert_eq!(
        from_simulate,
        "error: /dev/zero: is a character device, not a workload file; --workload reads a \
         regular file (or a pipe, up to 64 MiB)"
    );
    assert_eq!(
        from_simulate,
        refusal(&sandbox(path, &[])),
        "one reader, one error"
    );
}

#[test]
fn a_pod_cap_beyond_a_cluster_is_refused_by_the_flag_not_by_an_abort() {
    // `--max-pods 2147483647` was accepted, and a workload that large aborted (exit 134) on a
    // failed allocation.
    // The sandbox settles or gives up within seconds should the flag ever be accepted again.
    for (command, more) in [
        ("simulate", &[][..]),
        ("sandbox", &["--until-settled", "--timeout", "5s"][..]),
    ] {
        let mut args = vec![command, "--max-pods", "2147483647"];
        args.extend_from_slice(more);
        let out = karpenter(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains(
                "invalid value '2147483647' for '--max-pods <PODS>': the pod cap must be from 1 \
                 to 150000 pods, the most Kubernetes supports in one cluster"
            ),
            "{command}: {stderr}"
        );
    }
}

#[test]
fn the_pod_cap_is_documented_in_both_commands_help() {
    for command in ["simulate", "sandbox"] {
        let out = karpenter(&[command, "--help"]);
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        let flag = help
            .split("--max-pods")
            .nth(1)
            .unwrap_or_else(|| panic!("{command} --help has no --max-pods:\n{help}"));
        assert!(flag.contains("[default: 50000]"), "{command}: {flag}");
    }
}

#[test]
fn sandbox_until_settled_with_no_pod_to_run_says_so_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Objects, but no pod: a Namespace and a Deployment scaled to zero.
    let path = file(
        dir.path(),
        "idle.yaml",
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: idle}}\n---\n{}",
            deployment("parked", "0")
        ),
    );
    let error = refusal(&sandbox(&path, &[]));
    assert!(
        error.contains("nothing to run: the workload creates no pods"),
        "{error}"
    );
    // Without --until-settled nothing is waited for, and simulate plans the empty fleet.
    let r = report(&simulate(
        &path,
        &["--instance-types", "synthetic-400", "--report", "json"],
    ));
    assert_eq!(r["pods"]["total"], 0, "{r}");
    assert_eq!(r["nodeclaims"]["total"], 0, "{r}");
}
