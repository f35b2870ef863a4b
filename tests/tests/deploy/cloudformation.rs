//! `deploy/cloudformation/interruption-queue.yaml`, the interruption queue of a real cluster:
//! its EventBridge rules deliver every event the controller acts on (and every rule delivers
//! some), the queue keeps messages for upstream's 300 s with SSE and lets EventBridge send, and
//! the controller's policy grants exactly the SQS calls it makes, on that queue only.

use std::collections::BTreeSet;

use ec2api::sqs::CONTROLLER_ACTIONS;
use jiff::Timestamp;
use karpenter_core::interruption::{self, Kind, event};
use serde_json::{Value, json};

const TEMPLATE: &str = "cloudformation/interruption-queue.yaml";

fn template() -> Value {
    let path = super::deploy_dir().join(TEMPLATE);
    let text = std::fs::read_to_string(&path).expect("the template exists");
    serde_saphyr::from_str(&text).expect("plain YAML (long-form intrinsic functions)")
}

/// The resources of type `kind`, by logical id.
fn of_type<'a>(t: &'a Value, kind: &str) -> Vec<(&'a String, &'a Value)> {
    t["Resources"]
        .as_object()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .collect()
}

/// EventBridge's matching, for the patterns used here: every field of the pattern is in the
/// event, a list of values holds the event's value, an object matches recursively.
fn matches(pattern: &Value, event: &Value) -> bool {
    pattern
        .as_object()
        .expect("a pattern is an object")
        .iter()
        .all(|(k, p)| match p {
            Value::Array(values) => values.contains(&event[k]),
            Value::Object(_) => matches(p, &event[k]),
            other => panic!("unsupported pattern {other}"),
        })
}

/// Lists as sets of strings (a policy's `Action` or `Principal.Service`: a string or a list).
fn strings(v: &Value) -> BTreeSet<String> {
    match v {
        Value::String(s) => BTreeSet::from([s.clone()]),
        Value::Array(a) => a
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect(),
        _ => BTreeSet::new(),
    }
}

#[test]
fn the_interruption_queue_template_routes_what_the_controller_reads_and_grants_what_it_calls() {
    let t = template();
    let kustomization =
        std::fs::read_to_string(super::deploy_dir().join("kustomization.yaml")).expect("read");
    assert!(
        !kustomization.contains("cloudformation"),
        "the template is not a Kubernetes object"
    );
    let queues = of_type(&t, "AWS::SQS::Queue");
    assert_eq!(queues.len(), 1);
    let (queue_id, queue) = queues[0];
    assert_eq!(queue["Properties"]["MessageRetentionPeriod"], 300);
    assert_eq!(queue["Properties"]["SqsManagedSseEnabled"], true);
    let queue_arn = json!({"Fn::GetAtt": [queue_id, "Arn"]});

    let policies = of_type(&t, "AWS::SQS::QueuePolicy");
    assert_eq!(policies.len(), 1);
    let statements = policies[0].1["Properties"]["PolicyDocument"]["Statement"]
        .as_array()
        .expect("statements");
    let send = statements
        .iter()
        .find(|s| s["Effect"] == "Allow" && strings(&s["Action"]).contains("sqs:SendMessage"))
        .expect("a statement allowing SendMessage");
    assert_eq!(send["Resource"], queue_arn);
    assert_eq!(
        strings(&send["Principal"]["Service"]),
        BTreeSet::from(["events.amazonaws.com".into(), "sqs.amazonaws.com".into()])
    );

    // Every event the controller acts on is delivered; one it ignores need not be.
    let at: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
    let (acct, region, i) = ("123456789012", "us-east-1", "i-0123456789abcdef0");
    let mut acted_on = vec![
        event::spot_interruption("1", acct, region, i, at),
        event::rebalance_recommendation("2", acct, region, i, at),
        event::scheduled_change("3", acct, region, &[i], at),
    ];
    for state in ["stopping", "stopped", "shutting-down", "terminated"] {
        acted_on.push(event::state_change("4", acct, region, i, state, at));
    }
    let ignored = event::state_change("5", acct, region, i, "running", at);
    let rules = of_type(&t, "AWS::Events::Rule");
    assert_eq!(rules.len(), 4, "spot, rebalance, health, state change");
    let patterns: Vec<&Value> = rules
        .iter()
        .map(|(_, r)| &r["Properties"]["EventPattern"])
        .collect();
    for (id, rule) in &rules {
        let targets = rule["Properties"]["Targets"].as_array().expect("targets");
        assert_eq!(targets.len(), 1, "{id}");
        assert_eq!(targets[0]["Arn"], queue_arn, "{id} sends to the queue");
    }
    for body in &acted_on {
        let kind = interruption::parse(body).expect("parses").kind;
        assert_ne!(kind, Kind::NoOp, "{body}");
        let e: Value = serde_json::from_str(body).expect("JSON");
        assert!(
            patterns.iter().any(|p| matches(p, &e)),
            "no rule delivers {kind}: {body}"
        );
    }
    for (p, (id, _)) in patterns.iter().zip(&rules) {
        assert!(
            acted_on
                .iter()
                .any(|b| matches(p, &serde_json::from_str(b).expect("JSON"))),
            "rule {id} delivers nothing the controller reads"
        );
    }
    let e: Value = serde_json::from_str(&ignored).expect("JSON");
    assert!(!patterns.iter().any(|p| matches(p, &e)), "running is noise");

    // The controller's policy: its SQS calls, on the queue.
    let managed = of_type(&t, "AWS::IAM::ManagedPolicy");
    assert_eq!(managed.len(), 1);
    let statements = managed[0].1["Properties"]["PolicyDocument"]["Statement"]
        .as_array()
        .expect("statements");
    assert_eq!(statements.len(), 1);
    assert_eq!(statements[0]["Effect"], "Allow");
    assert_eq!(statements[0]["Resource"], queue_arn);
    assert_eq!(
        strings(&statements[0]["Action"]),
        CONTROLLER_ACTIONS.iter().map(|a| a.to_string()).collect()
    );
}
