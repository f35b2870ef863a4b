//! The `karpenter simulate` command as a user runs it: JSON on stdout only, the report's fields,
//! the generated benchmark mix, the Alibaba trace, and bad input.

mod common;

use common::{karpenter, repo_file, report};
use serde_json::Value;

fn number(r: &Value, path: &str) -> f64 {
    r.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} in {r}"))
}

#[test]
fn diverse_mix_on_synthetic_types_reports_fleet_cost_and_bound() {
    let out = karpenter(&[
        "simulate",
        "--generate",
        "diverse:1000",
        "--instance-types",
        "synthetic-400",
        "--report",
        "json",
    ]);
    let r = report(&out);
    assert_eq!(r["instance_types"], "synthetic-400");
    assert_eq!(r["pods"]["total"], 1000);
    assert_eq!(r["pods"]["scheduled"], 1000);
    assert_eq!(r["pods"]["unschedulable"].as_array().map(Vec::len), Some(0));
    // One claim per hostname anti-affinity pod (a fifth of the mix) at least.
    let claims = r["nodeclaims"]["total"].as_u64().expect("total");
    assert!(claims >= 200, "{claims}");
    let by_type: u64 = r["nodeclaims"]["by_instance_type"]
        .as_object()
        .expect("by type")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(by_type, claims);
    let cost = number(&r, "/cost_per_hour_usd");
    let bound = number(&r, "/lower_bound_cost_per_hour_usd");
    assert!(bound > 0.0 && cost >= bound, "cost {cost} bound {bound}");
    assert!((number(&r, "/cost_over_bound") - cost / bound).abs() < 1e-3);
    assert!(number(&r, "/solve_seconds") > 0.0);
}

#[test]
fn alibaba_trace_on_the_aws_catalog_schedules_every_task_near_the_bound() {
    let trace = repo_file("examples/traces/openb_pod_list_default.csv");
    let out = karpenter(&[
        "simulate",
        "--workload",
        trace.to_str().expect("utf-8 path"),
        "--report",
        "json",
    ]);
    let r = report(&out);
    assert_eq!(r["instance_types"], "aws");
    assert_eq!(r["pods"]["total"], 6282);
    assert_eq!(r["pods"]["scheduled"], 6282);
    let ratio = number(&r, "/cost_over_bound");
    // The bound is a valid lower bound: no fleet beats it. The quality target is 1.15.
    assert!((1.0..=1.15).contains(&ratio), "cost over bound {ratio}");
    // Every GPU task needs a GPU node: the fleet has some.
    let by_type = r["nodeclaims"]["by_instance_type"]
        .as_object()
        .expect("by type");
    assert!(
        by_type
            .keys()
            .any(|t| t.starts_with('g') || t.starts_with('p'))
    );
}

#[test]
fn a_workload_file_is_solved_and_text_goes_to_stdout() {
    let out = karpenter(&["simulate", "--scale", "2"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Pods:") && text.contains("Cost:"), "{text}");
    let json = report(&karpenter(&[
        "simulate",
        "--workload",
        repo_file("examples/workloads/online-boutique.yaml")
            .to_str()
            .expect("utf-8 path"),
        "--report",
        "json",
    ]));
    let total = json["pods"]["total"].as_u64().expect("total");
    assert!(total > 0);
    assert_eq!(json["pods"]["scheduled"].as_u64(), Some(total));
    // The serialised NodeClaims' sizes, and the spot-price caveat.
    let p50 = number(&json, "/nodeclaims/bytes_p50");
    let p99 = number(&json, "/nodeclaims/bytes_p99");
    assert!(p50 > 0.0 && p99 >= p50, "p50 {p50} p99 {p99}");
    assert_eq!(json["spot_prices_estimated"], true);
    assert!(
        text.contains("Prices:") && text.contains("estimated"),
        "{text}"
    );
}

#[test]
fn bad_input_is_a_clear_error_with_exit_code_two() {
    let out = karpenter(&["simulate", "--workload", "/nonexistent/workload.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing on stdout on error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/workload.yaml"), "{err}");
    let out = karpenter(&["simulate", "--generate", "uniform:10"]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("diverse"), "{err}");
}
