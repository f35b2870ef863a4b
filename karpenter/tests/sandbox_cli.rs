//! The `karpenter sandbox` command as a user runs it: the README's main command, the Alibaba
//! trace, and bad input.

use crate::common;

use common::{karpenter, repo_file, report};
use serde_json::Value;

#[test]
fn online_boutique_times_ten_settles_with_instance_types_and_cost() {
    let out = karpenter(&[
        "sandbox",
        "--scale",
        "10",
        "--until-settled",
        "--timeout",
        "3m",
        "--report",
        "json",
    ]);
    let r = report(&out);
    assert_eq!(r["settled"], true);
    assert_eq!(r["pods"]["total"], 120, "12 deployments x 10 replicas");
    assert_eq!(r["pods"]["bound"], 120);
    assert_eq!(r["pods"]["unschedulable"].as_array().map(Vec::len), Some(0));
    let claims = r["nodeclaims"]["total"].as_u64().expect("count");
    assert!(claims >= 1);
    assert_eq!(r["nodeclaims"]["initialized"].as_u64(), Some(claims));
    let by_type = r["nodeclaims"]["by_instance_type"]
        .as_object()
        .expect("by type");
    assert_eq!(
        by_type.values().filter_map(Value::as_u64).sum::<u64>(),
        claims
    );
    assert!(r["cost_per_hour_usd"].as_f64().is_some_and(|c| c > 0.0));
    assert!(r["settle_seconds"].as_f64().is_some_and(|s| s > 0.0));
    // Every NodeClaim was created by the controller, and its status written as it launched.
    let writes = &r["writes_per_nodeclaim"];
    assert_eq!(writes["nodeclaims"].as_u64(), Some(claims));
    assert_eq!(
        writes["mean_by_request"]["create nodeclaims"], 1.0,
        "{writes}"
    );
    assert!(
        writes["mean_by_request"]["patch nodeclaims/status"]
            .as_f64()
            .is_some_and(|n| n >= 1.0),
        "{writes}"
    );
    assert!(
        writes["mean"].as_f64().is_some_and(|n| n >= 2.0),
        "{writes}"
    );
    assert!(writes["max"].as_u64().is_some_and(|n| n >= 2), "{writes}");
}

#[test]
fn alibaba_trace_settles_and_lists_only_pods_nothing_can_hold() {
    let trace = repo_file("examples/traces/openb_pod_list_default.csv");
    // First fit (`--cost-repack=false`): the default cost re-pack plans the trace onto 1,866
    // smaller NodeClaims, which the release build settles in about 220 s (BENCHMARKS.md, "Live
    // vs plan") and this debug build, with the other tests running, not reliably within the
    // window. Nominations stay on (the default), so the settle path they add is covered.
    let out = karpenter(&[
        "sandbox",
        "--workload",
        trace.to_str().expect("utf-8 path"),
        "--cost-repack=false",
        "--until-settled",
        "--timeout",
        "8m",
        "--report",
        "json",
    ]);
    let r = report(&out);
    // Everything but the pod list, and the first unbound pods, for a failure's message.
    let mut summary = r.clone();
    if let Some(list) = summary["pods"]["unschedulable"].as_array_mut() {
        list.truncate(5);
    }
    assert_eq!(r["settled"], true, "{summary:#}");
    // 8,152 tasks of which 1,870 failed.
    assert_eq!(r["pods"]["total"], 6282, "{summary:#}");
    let unschedulable = r["pods"]["unschedulable"].as_array().expect("list");
    assert_eq!(
        r["pods"]["bound"].as_u64().expect("bound") as usize + unschedulable.len(),
        6282,
        "{summary:#}"
    );
    let misreported: Vec<&Value> = unschedulable
        .iter()
        .filter(|p| {
            !p["reason"]
                .as_str()
                .is_some_and(|r| r.contains("no instance type"))
        })
        .collect();
    assert!(
        misreported.is_empty(),
        "only pods no instance type can hold are listed; {} others: {misreported:#?}",
        misreported.len()
    );
}

#[test]
fn a_trace_pod_nothing_can_hold_is_listed_with_its_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("tiny.csv");
    std::fs::write(
        &trace,
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
         small,500,512,0,0,,BE,Running,0,1,0\n\
         gpu,4000,16384,1,1000,,LS,Running,0,1,0\n\
         impossible,1000,1024,64,1000,,LS,Running,0,1,0\n",
    )
    .expect("write trace");
    let out = karpenter(&[
        "sandbox",
        "--workload",
        trace.to_str().expect("utf-8 path"),
        "--until-settled",
        "--timeout",
        "2m",
        "--report",
        "json",
    ]);
    let r = report(&out);
    assert_eq!(r["pods"]["bound"], 2, "{r}");
    let list = r["pods"]["unschedulable"].as_array().expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["name"], "default/impossible");
    let reason = list[0]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("nvidia.com/gpu: 64")
            && reason.contains("no instance type has enough resources"),
        "{reason}"
    );
}

#[test]
fn a_malformed_workload_names_the_file_and_document() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: Namespace\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: [broken\n")
        .expect("write");
    let out = karpenter(&[
        "sandbox",
        "--workload",
        bad.to_str().expect("utf-8 path"),
        "--until-settled",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.yaml: document 2: invalid YAML"),
        "{stderr}"
    );

    let unknown = dir.path().join("unknown.yaml");
    std::fs::write(
        &unknown,
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n",
    )
    .expect("write");
    let kubeconfig = dir.path().join("kubeconfig");
    let out = karpenter(&[
        "sandbox",
        "--workload",
        unknown.to_str().expect("utf-8 path"),
        "--until-settled",
        "--kubeconfig-out",
        kubeconfig.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown.yaml: document 1: no resource type example.com/v1 Gadget"),
        "{stderr}"
    );
    // A sandbox that never started leaves no kubeconfig (nor its token) behind.
    assert!(!kubeconfig.exists(), "a refused start wrote a kubeconfig");

    let missing = karpenter(&["sandbox", "--workload", "/nonexistent/w.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/w.yaml"));
}

#[test]
fn a_bad_log_level_is_refused_before_anything_starts() {
    let out = karpenter(&["sandbox", "--log-level", "info,=", "--until-settled"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .starts_with("error: --log-level/LOG_LEVEL (\"info,=\") is not a log level or filter"),
        "{stderr}"
    );
}

/// Logs redirected to a file or a pipe carry no ANSI colour codes, and the kubeconfig the
/// sandbox wrote into the temp directory is gone when it exits.
#[test]
fn redirected_logs_are_plain_and_the_temporary_kubeconfig_goes_with_the_sandbox() {
    let workload = repo_file("examples/workloads/inflate.yaml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "sandbox",
            "--workload",
            workload.to_str().expect("utf-8 path"),
            "--until-settled",
            "--timeout",
            "2m",
        ])
        .env("LOG_LEVEL", "info")
        .env_remove("NO_COLOR")
        .output()
        .expect("karpenter runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("INFO"), "info logs were written: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "ANSI escapes in redirected logs"
    );
    let kubeconfig = stderr
        .lines()
        .find_map(|l| {
            l.split_once("kubeconfig written to ")
                .map(|(_, p)| p.trim())
        })
        .expect("the sandbox says where the kubeconfig is");
    assert!(
        !std::path::Path::new(kubeconfig).exists(),
        "{kubeconfig} left behind"
    );
}
