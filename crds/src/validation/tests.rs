//! Table tests for NodePool and NodeClaim validation.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

use super::*;
use crate::duration::{GoDuration, NillableDuration};
use crate::nodepool::Budget;
use crate::nodepool::{
    DisruptionReason, NodeClaimTemplate, NodeClaimTemplateSpec, TemplateMetadata,
};
use crate::requirements::{NodeSelectorRequirementWithMinValues, Operator};

fn req(key: &str, op: Operator, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues::new(key, op, values.iter().copied())
}

fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(Into::into),
        effect: effect.into(),
        ..Taint::default()
    }
}

fn spec() -> NodePoolSpec {
    NodePoolSpec {
        template: NodeClaimTemplate {
            metadata: TemplateMetadata::default(),
            spec: NodeClaimTemplateSpec {
                taints: vec![],
                startup_taints: vec![],
                requirements: vec![req(labels::ARCH_LABEL, Operator::In, &["amd64"])],
                node_class_ref: NodeClassReference {
                    group: "karpenter.k8s.aws".into(),
                    kind: "EC2NodeClass".into(),
                    name: "default".into(),
                },
                termination_grace_period: None,
                expire_after: NillableDuration::parse("720h").expect("duration"),
            },
        },
        disruption: Default::default(),
        limits: BTreeMap::new(),
        weight: None,
        replicas: None,
    }
}

fn fields(errs: &[FieldError]) -> Vec<&str> {
    errs.iter().map(|e| e.field.as_str()).collect()
}

#[test]
fn valid_nodepool_has_no_errors() {
    assert_eq!(validate_nodepool_spec(&spec()), vec![]);
}

#[test]
fn requirements_table() {
    const P: &str = "spec.template.spec.requirements[0]";
    let cases: Vec<(&str, NodeSelectorRequirementWithMinValues, Vec<String>)> = vec![
        (
            "in with value",
            req("example.com/a", Operator::In, &["x"]),
            vec![],
        ),
        (
            "in without values",
            req("example.com/a", Operator::In, &[]),
            vec![format!("{P}.values")],
        ),
        (
            "notin empty ok",
            req("example.com/a", Operator::NotIn, &[]),
            vec![],
        ),
        (
            "gt one int",
            req(
                "karpenter.k8s.aws/instance-generation",
                Operator::Gt,
                &["2"],
            ),
            vec![],
        ),
        (
            "gte zero",
            req("example.com/a", Operator::Gte, &["0"]),
            vec![],
        ),
        (
            "lt negative",
            req("example.com/a", Operator::Lt, &["-1"]),
            vec![format!("{P}.values[0]"), format!("{P}.values")],
        ),
        (
            "lte not int",
            req("example.com/a", Operator::Lte, &["abc"]),
            vec![format!("{P}.values")],
        ),
        (
            "gt two values",
            req("example.com/a", Operator::Gt, &["1", "2"]),
            vec![format!("{P}.values")],
        ),
        (
            "gt no values",
            req("example.com/a", Operator::Gt, &[]),
            vec![format!("{P}.values")],
        ),
        (
            "exists with values",
            req("example.com/a", Operator::Exists, &["x"]),
            vec![format!("{P}.values")],
        ),
        (
            "doesnotexist empty",
            req("example.com/a", Operator::DoesNotExist, &[]),
            vec![],
        ),
        (
            "minValues ok",
            req("example.com/a", Operator::In, &["a", "b"]).with_min_values(2),
            vec![],
        ),
        (
            "minValues > values",
            req("example.com/a", Operator::In, &["a"]).with_min_values(2),
            vec![format!("{P}.minValues")],
        ),
        (
            "minValues 0",
            req("example.com/a", Operator::Exists, &[]).with_min_values(0),
            vec![format!("{P}.minValues")],
        ),
        (
            "minValues 51",
            req("example.com/a", Operator::Exists, &[]).with_min_values(51),
            vec![format!("{P}.minValues")],
        ),
        (
            "exists minValues",
            req("example.com/a", Operator::Exists, &[]).with_min_values(5),
            vec![],
        ),
        (
            "nodepool key",
            req(labels::NODEPOOL_LABEL, Operator::In, &["x"]),
            vec![format!("{P}.key")],
        ),
        (
            "hostname restricted",
            req(labels::HOSTNAME_LABEL, Operator::In, &["x"]),
            vec![format!("{P}.key")],
        ),
        (
            "karpenter domain",
            req("karpenter.sh/foo", Operator::Exists, &[]),
            vec![format!("{P}.key")],
        ),
        (
            "aws domain",
            req("karpenter.k8s.aws/foo", Operator::Exists, &[]),
            vec![format!("{P}.key")],
        ),
        (
            "aws well known",
            req(labels::INSTANCE_FAMILY_LABEL, Operator::In, &["m5"]),
            vec![],
        ),
        (
            "beta zone normalised",
            req(labels::BETA_ZONE_LABEL, Operator::In, &["us-west-2a"]),
            vec![],
        ),
        (
            "bad key",
            req("Example.com/a", Operator::Exists, &[]),
            vec![format!("{P}.key")],
        ),
        (
            "bad value",
            req("example.com/a", Operator::In, &["a b"]),
            vec![format!("{P}.values[0]")],
        ),
        (
            "capacity type ok",
            req(labels::CAPACITY_TYPE_LABEL, Operator::In, &["spot", "foo"]),
            vec![],
        ),
        (
            "capacity type none valid",
            req(labels::CAPACITY_TYPE_LABEL, Operator::In, &["foo"]),
            vec![format!("{P}.values")],
        ),
        (
            "capacity type notin",
            req(labels::CAPACITY_TYPE_LABEL, Operator::NotIn, &["foo"]),
            vec![],
        ),
        (
            "capacity type min values",
            req(labels::CAPACITY_TYPE_LABEL, Operator::In, &["spot", "foo"]).with_min_values(2),
            vec![format!("{P}.values")],
        ),
        (
            "tenancy",
            req(labels::INSTANCE_TENANCY_LABEL, Operator::In, &["shared"]),
            vec![format!("{P}.values")],
        ),
    ];
    for (name, r, want) in cases {
        let mut s = spec();
        s.template.spec.requirements = vec![r];
        let errs = validate_nodepool_spec(&s);
        assert_eq!(fields(&errs), want, "{name}: {errs:?}");
    }
}

#[test]
fn nodeclaims_may_carry_nodepool_key() {
    let r = vec![req(labels::NODEPOOL_LABEL, Operator::In, &["default"])];
    assert_eq!(
        validate_requirements(&r, "spec.requirements", false),
        vec![]
    );
    let many: Vec<_> = (0..101)
        .map(|i| req(&format!("example.com/k{i}"), Operator::Exists, &[]))
        .collect();
    assert_eq!(
        fields(&validate_requirements(&many, "spec.requirements", false)),
        vec!["spec.requirements"]
    );
}

#[test]
fn labels_table() {
    const P: &str = "spec.template.metadata.labels";
    let cases: &[(&str, &str, &[&str])] = &[
        ("team", "a", &[]),
        ("example.com/team", "", &[]),
        (labels::CAPACITY_TYPE_LABEL, "spot", &[]),
        (labels::NODEPOOL_LABEL, "x", &["[karpenter.sh/nodepool]"]),
        (labels::HOSTNAME_LABEL, "x", &["[kubernetes.io/hostname]"]),
        ("karpenter.sh/custom", "x", &["[karpenter.sh/custom]"]),
        (
            "sub.karpenter.k8s.aws/custom",
            "x",
            &["[sub.karpenter.k8s.aws/custom]"],
        ),
        ("a/b/c", "x", &["[a/b/c]"]),
        ("team", "bad value!", &["[team]"]),
        ("team", &"x".repeat(64), &["[team]"]),
    ];
    for (key, value, want) in cases {
        let labels_map = BTreeMap::from([(key.to_string(), value.to_string())]);
        let errs = validate_template_labels(&labels_map, P);
        let want: Vec<String> = want.iter().map(|w| format!("{P}{w}")).collect();
        assert_eq!(fields(&errs), want, "{key}={value}: {errs:?}");
    }
}

#[test]
fn taints_table() {
    const P: &str = "spec.template.spec";
    let ns = labels::TAINT_EFFECT_NO_SCHEDULE;
    type Case = (&'static str, Vec<Taint>, Vec<Taint>, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        (
            "ok",
            vec![taint("example.com/a", Some("b"), ns)],
            vec![taint("example.com/a", None, "NoExecute")],
            vec![],
        ),
        (
            "empty key",
            vec![taint("", None, ns)],
            vec![],
            vec!["spec.template.spec.taints[0].key"],
        ),
        (
            "bad key",
            vec![taint("a b", None, ns)],
            vec![],
            vec!["spec.template.spec.taints[0].key"],
        ),
        (
            "bad value",
            vec![taint("a", Some("x y"), ns)],
            vec![],
            vec!["spec.template.spec.taints[0].value"],
        ),
        (
            "bad effect",
            vec![taint("a", None, "Sometimes")],
            vec![],
            vec!["spec.template.spec.taints[0].effect"],
        ),
        (
            "missing effect",
            vec![taint("a", None, "")],
            vec![],
            vec!["spec.template.spec.taints[0].effect"],
        ),
        (
            "duplicate across lists",
            vec![taint("a", Some("1"), ns)],
            vec![taint("a", Some("2"), ns)],
            vec!["spec.template.spec.startupTaints[0]"],
        ),
        (
            "duplicate within",
            vec![taint("a", None, ns), taint("a", None, ns)],
            vec![],
            vec!["spec.template.spec.taints[1]"],
        ),
    ];
    for (name, t, st, want) in cases {
        let errs = validate_taints(&t, &st, P);
        assert_eq!(fields(&errs), want, "{name}: {errs:?}");
    }
}

#[test]
fn spec_fields_table() {
    type Mutate = fn(&mut NodePoolSpec);
    let cases: Vec<(&str, Mutate, Vec<&str>)> = vec![
        ("weight 0", |s| s.weight = Some(0), vec!["spec.weight"]),
        ("weight 100", |s| s.weight = Some(100), vec![]),
        ("weight 101", |s| s.weight = Some(101), vec!["spec.weight"]),
        (
            "replicas negative",
            |s| s.replicas = Some(-1),
            vec!["spec.replicas"],
        ),
        (
            "static with cpu limit",
            |s| {
                s.replicas = Some(3);
                s.limits.insert(
                    "cpu".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("10".into()),
                );
            },
            vec!["spec.limits"],
        ),
        (
            "static with nodes limit",
            |s| {
                s.replicas = Some(3);
                s.limits.insert(
                    "nodes".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("10".into()),
                );
            },
            vec![],
        ),
        (
            "static with weight",
            |s| {
                s.replicas = Some(3);
                s.weight = Some(10);
            },
            vec!["spec.weight"],
        ),
        (
            "empty nodeclass name",
            |s| s.template.spec.node_class_ref.name.clear(),
            vec!["spec.template.spec.nodeClassRef.name"],
        ),
        (
            "versioned group",
            |s| s.template.spec.node_class_ref.group = "karpenter.k8s.aws/v1".into(),
            vec!["spec.template.spec.nodeClassRef.group"],
        ),
        (
            "expireAfter fractional",
            |s| s.template.spec.expire_after = NillableDuration::parse("1.5h").expect("duration"),
            vec!["spec.template.spec.expireAfter"],
        ),
        (
            "expireAfter never",
            |s| s.template.spec.expire_after = NillableDuration::never(),
            vec![],
        ),
        (
            "tgp ms",
            |s| {
                s.template.spec.termination_grace_period =
                    Some(GoDuration::parse("500ms").expect("duration"))
            },
            vec!["spec.template.spec.terminationGracePeriod"],
        ),
        (
            "consolidateAfter ms",
            |s| {
                s.disruption.consolidate_after = NillableDuration::parse("100ms").expect("duration")
            },
            vec!["spec.disruption.consolidateAfter"],
        ),
        (
            "labels bad",
            |s| {
                s.template
                    .metadata
                    .labels
                    .insert("karpenter.sh/x".into(), "y".into());
            },
            vec!["spec.template.metadata.labels[karpenter.sh/x]"],
        ),
    ];
    for (name, mutate, want) in cases {
        let mut s = spec();
        mutate(&mut s);
        let errs = validate_nodepool_spec(&s);
        assert_eq!(fields(&errs), want, "{name}: {errs:?}");
    }
}

#[test]
fn budgets_table() {
    const P: &str = "spec.disruption.budgets[0]";
    let b = |nodes: &str, schedule: Option<&str>, duration: Option<&str>| Budget {
        reasons: None,
        nodes: nodes.into(),
        schedule: schedule.map(Into::into),
        duration: duration.map(|d| GoDuration::parse(d).expect("duration")),
    };
    let cases: Vec<(&str, Budget, Vec<String>)> = vec![
        ("percent", b("10%", None, None), vec![]),
        ("count", b("5", None, None), vec![]),
        ("100%", b("100%", None, None), vec![]),
        ("101%", b("101%", None, None), vec![format!("{P}.nodes")]),
        ("word", b("all", None, None), vec![format!("{P}.nodes")]),
        ("negative", b("-1", None, None), vec![format!("{P}.nodes")]),
        (
            "schedule+duration",
            b("0", Some("0 9 * * mon-fri"), Some("8h")),
            vec![],
        ),
        ("macro", b("0", Some("@daily"), Some("1h30m")), vec![]),
        (
            "schedule alone",
            b("0", Some("@daily"), None),
            vec![P.to_string()],
        ),
        (
            "duration alone",
            b("0", None, Some("1h")),
            vec![P.to_string()],
        ),
        (
            "bad schedule",
            b("0", Some("daily"), Some("1h")),
            vec![format!("{P}.schedule")],
        ),
        (
            "four fields",
            b("0", Some("0 9 * *"), Some("1h")),
            vec![format!("{P}.schedule")],
        ),
        (
            "minute and hour out of range",
            b("0", Some("61 25 * * *"), Some("1h")),
            vec![format!("{P}.schedule")],
        ),
        (
            "day of month zero",
            b("0", Some("0 9 0 * *"), Some("1h")),
            vec![format!("{P}.schedule")],
        ),
        (
            "seconds field",
            b("0", Some("0 0 9 * * *"), Some("1h")),
            vec![format!("{P}.schedule")],
        ),
        (
            "croner's last-day extension",
            b("0", Some("0 9 L * *"), Some("1h")),
            vec![format!("{P}.schedule")],
        ),
        (
            "midnight macro",
            b("0", Some("@midnight"), Some("1h")),
            vec![],
        ),
        (
            "names, lists, ranges and steps",
            b("0", Some("*/15 9-17 1,15 JAN-JUL MON-WED"), Some("1h")),
            vec![],
        ),
        (
            "seconds duration",
            b("0", Some("@hourly"), Some("30s")),
            vec![format!("{P}.duration")],
        ),
        (
            "duration with 0s",
            b("0", Some("@hourly"), Some("10m0s")),
            vec![],
        ),
    ];
    for (name, budget, want) in cases {
        let errs = validate_budgets(&[budget], "spec.disruption.budgets");
        assert_eq!(fields(&errs), want, "{name}: {errs:?}");
    }
    let dup = Budget {
        reasons: Some(vec![DisruptionReason::Empty, DisruptionReason::Empty]),
        ..Budget::default()
    };
    assert_eq!(fields(&validate_budgets(&[dup], "b")), vec!["b[0].reasons"]);
    let many = vec![Budget::default(); 51];
    assert_eq!(fields(&validate_budgets(&many, "b")), vec!["b"]);
}

#[test]
fn an_out_of_range_schedule_says_which_field_and_why() {
    let budget = Budget {
        reasons: None,
        nodes: "0".into(),
        schedule: Some("61 25 * * *".into()),
        duration: Some(GoDuration::parse("1h").expect("duration")),
    };
    let errs = validate_budgets(&[budget], "spec.disruption.budgets");
    assert_eq!(
        summarize(&errs),
        "spec.disruption.budgets[0].schedule: \"61 25 * * *\" is not a valid cron schedule: \
         minute \"61\": number out of bounds (allowed: 0-59)"
    );
    let err = parse_budget_schedule("0 9 * * FRI#2").expect_err("nth weekday");
    assert_eq!(err, "day of week \"FRI#2\": L, W and # are not supported");
}

#[test]
fn updates() {
    let old = spec();
    let mut new = spec();
    assert!(validate_nodepool_update(&old, &new).is_empty());
    new.replicas = Some(1);
    new.template.spec.node_class_ref.kind = "Other".into();
    assert_eq!(
        fields(&validate_nodepool_update(&old, &new)),
        vec!["spec.replicas", "spec.template.spec.nodeClassRef.kind"]
    );
}

#[test]
fn names_and_values() {
    assert!(qualified_name_errors("example.com/My_Name-1.2").is_empty());
    assert!(qualified_name_errors("name").is_empty());
    assert!(!qualified_name_errors("/name").is_empty());
    assert!(!qualified_name_errors("Example.com/name").is_empty());
    assert!(!qualified_name_errors("example.com/").is_empty());
    assert!(!qualified_name_errors("-name").is_empty());
    assert!(!qualified_name_errors(&"n".repeat(64)).is_empty());
    assert!(label_value_errors("").is_empty());
    assert!(label_value_errors("a.b-c_d").is_empty());
    assert!(!label_value_errors("a/b").is_empty());
    assert!(!label_value_errors("a.").is_empty());
}

#[test]
fn summary_joins_errors() {
    let errs = vec![FieldError::new("a", "x"), FieldError::new("b", "y")];
    assert_eq!(summarize(&errs), "a: x; b: y");
}
