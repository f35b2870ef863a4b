//! Table tests for NodeOverlay validation, from upstream's valid and invalid examples
//! (`pkg/apis/v1alpha1/nodeoverlay_validation_test.go`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::labels::{self, CAPACITY_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};
use crate::nodeoverlay::{NodeOverlaySpec, OverlayRequirement};
use crate::requirements::Operator;

fn req(key: &str, op: Operator, values: &[&str]) -> OverlayRequirement {
    OverlayRequirement::new(key, op, values.iter().copied())
}

/// Upstream's base overlay: `karpenter.sh/capacity-type Exists`, nothing else.
fn spec() -> NodeOverlaySpec {
    NodeOverlaySpec {
        requirements: vec![req(CAPACITY_TYPE_LABEL, Operator::Exists, &[])],
        price: None,
        price_adjustment: None,
        capacity: BTreeMap::new(),
        weight: None,
    }
}

fn with_requirements(requirements: Vec<OverlayRequirement>) -> NodeOverlaySpec {
    NodeOverlaySpec {
        requirements,
        ..spec()
    }
}

fn fields(errs: &[FieldError]) -> Vec<&str> {
    errs.iter().map(|e| e.field.as_str()).collect()
}

#[test]
fn valid_requirements_pass() {
    let mut cases: Vec<Vec<OverlayRequirement>> = vec![
        vec![req("Test", Operator::Exists, &[])],
        vec![
            req("Test", Operator::Exists, &[]),
            req("test.com/Test", Operator::Exists, &[]),
            req("test.com.com/test", Operator::Exists, &[]),
            req("key-only", Operator::Exists, &[]),
        ],
        vec![req(labels::NODEPOOL_LABEL, Operator::In, &["silly-name"])],
        vec![
            req(TOPOLOGY_ZONE_LABEL, Operator::In, &["test"]),
            req(TOPOLOGY_ZONE_LABEL, Operator::Gt, &["1"]),
            req(TOPOLOGY_ZONE_LABEL, Operator::Lt, &["1"]),
            req(TOPOLOGY_ZONE_LABEL, Operator::Gte, &["1"]),
            req(TOPOLOGY_ZONE_LABEL, Operator::Lte, &["1"]),
            req(TOPOLOGY_ZONE_LABEL, Operator::NotIn, &["1"]),
            req(TOPOLOGY_ZONE_LABEL, Operator::Exists, &[]),
        ],
        vec![
            req(TOPOLOGY_ZONE_LABEL, Operator::In, &["test", "foo"]),
            req(TOPOLOGY_ZONE_LABEL, Operator::NotIn, &["test", "bar"]),
        ],
        vec![req("kubernetes.io/test", Operator::In, &["test"])],
        vec![req("k8s.io/test", Operator::In, &["test"])],
        vec![req("subdomain.kubernetes.io/test", Operator::In, &["test"])],
        vec![req("subdomain.k8s.io/test", Operator::In, &["test"])],
    ];
    // Well-known labels are allowed (those with a fixed value set need one of its values).
    for key in labels::WELL_KNOWN_LABELS {
        if labels::well_known_values(key).is_none() {
            cases.push(vec![req(key, Operator::In, &["test"])]);
        }
    }
    cases.push(vec![req(CAPACITY_TYPE_LABEL, Operator::In, &["spot"])]);
    for requirements in cases {
        let errs = validate_nodeoverlay_spec(&with_requirements(requirements.clone()));
        assert_eq!(errs, vec![], "{requirements:?}");
    }
}

#[test]
fn invalid_requirements_fail() {
    let long_prefix = format!("test.com.test.{}/test", "a1".repeat(125));
    let long_name = format!("test.com.test/test-{}", "b2".repeat(125));
    let mut cases: Vec<(OverlayRequirement, &str)> = vec![
        (req("Test", Operator::In, &[]), "must have a value defined"),
        (
            req("Test", Operator::NotIn, &[]),
            "requirements with operator 'NotIn' must have a value defined",
        ),
        (
            req("test.com.com}", Operator::Exists, &[]),
            "qualified name",
        ),
        (
            req("Test.com/test", Operator::Exists, &[]),
            "qualified name",
        ),
        (
            req("test/test/test", Operator::Exists, &[]),
            "qualified name",
        ),
        (req("test/", Operator::Exists, &[]), "qualified name"),
        (req("/test", Operator::Exists, &[]), "qualified name"),
        (req(&long_prefix, Operator::Exists, &[]), "253 characters"),
        (req(&long_name, Operator::Exists, &[]), "63 characters"),
        (
            req(CAPACITY_TYPE_LABEL, Operator::In, &["test"]),
            "no valid values",
        ),
        (
            req(labels::HOSTNAME_LABEL, Operator::In, &["a"]),
            "restricted",
        ),
    ];
    for domain in labels::RESTRICTED_LABEL_DOMAINS {
        let key = format!("{domain}/test");
        cases.push((req(&key, Operator::In, &["test"]), "restricted"));
    }
    for op in [Operator::Gt, Operator::Lt, Operator::Gte, Operator::Lte] {
        for values in [&[][..], &["1", "2"], &["a"], &["-1"]] {
            cases.push((req(TOPOLOGY_ZONE_LABEL, op, values), "non-negative integer"));
        }
    }
    for (requirement, want) in cases {
        let errs = validate_nodeoverlay_spec(&with_requirements(vec![requirement.clone()]));
        assert!(
            errs.iter()
                .any(|e| e.field.starts_with("spec.requirements[0]") && e.message.contains(want)),
            "{requirement:?}: want {want:?}, got {errs:?}"
        );
    }
    let too_many = vec![req("a", Operator::Exists, &[]); 101];
    assert_eq!(
        fields(&validate_nodeoverlay_spec(&with_requirements(too_many))),
        ["spec.requirements"]
    );
}

#[test]
fn price_pattern() {
    for valid in ["43", "34.43", "0", "0.432"] {
        assert!(is_valid_price(valid), "{valid}");
        let spec = NodeOverlaySpec {
            price: Some(valid.into()),
            ..spec()
        };
        assert_eq!(validate_nodeoverlay_spec(&spec), vec![], "{valid}");
    }
    for invalid in [
        "+42",
        ".5",
        "42.",
        "42%",
        "3,14",
        "1e10",
        "0x42",
        "forty-two",
        "42a",
        "42 ",
        " 42",
        "42.0.0",
        "-",
        ".",
        "-.42",
        "",
    ] {
        assert!(!is_valid_price(invalid), "{invalid:?}");
        let spec = NodeOverlaySpec {
            price: Some(invalid.into()),
            ..spec()
        };
        assert_eq!(
            fields(&validate_nodeoverlay_spec(&spec)),
            ["spec.price"],
            "{invalid:?}"
        );
    }
}

#[test]
fn price_adjustment_pattern() {
    for valid in [
        "+1%",
        "-1%",
        "-0%",
        "-100%",
        "-99.5%",
        "+100.102%",
        "+298%",
        "+.5%",
        "+43",
        "-43",
        "+34.43",
        "-34.43",
        "-0.5",
        "-.5",
        "-129",
    ] {
        assert!(is_valid_price_adjustment(valid), "{valid}");
        let spec = NodeOverlaySpec {
            price_adjustment: Some(valid.into()),
            ..spec()
        };
        assert_eq!(validate_nodeoverlay_spec(&spec), vec![], "{valid}");
    }
    for invalid in [
        "1%",
        "1",
        "1.3",
        "-100.0%",
        "-101%",
        "-101.1%",
        "-100.5%",
        "-.5%",
        "-1.%",
        "+42.",
        "42%",
        "3,14",
        "+1e10",
        "+0x42",
        "forty-two",
        "-",
        "+",
        ".",
        "+%",
        "++1",
        "+1%%",
        "",
    ] {
        assert!(!is_valid_price_adjustment(invalid), "{invalid:?}");
        let spec = NodeOverlaySpec {
            price_adjustment: Some(invalid.into()),
            ..spec()
        };
        assert_eq!(
            fields(&validate_nodeoverlay_spec(&spec)),
            ["spec.priceAdjustment"],
            "{invalid:?}"
        );
    }
}

#[test]
fn price_and_adjustment_are_exclusive() {
    let spec = NodeOverlaySpec {
        price: Some("0.432".into()),
        price_adjustment: Some("+10%".into()),
        ..spec()
    };
    let errs = validate_nodeoverlay_spec(&spec);
    assert_eq!(
        errs,
        [FieldError::new(
            "spec",
            "cannot set both 'price' and 'priceAdjustment'"
        )]
    );
}

#[test]
fn capacity_only_takes_extended_resources() {
    let with = |name: &str| NodeOverlaySpec {
        capacity: BTreeMap::from([(name.to_string(), Quantity("1".into()))]),
        ..spec()
    };
    assert_eq!(
        validate_nodeoverlay_spec(&with("smarter-devices/fuse")),
        vec![]
    );
    assert_eq!(validate_nodeoverlay_spec(&with("hugepages-1Gi")), vec![]);
    // The CRD refuses the first four; runtime validation every well-known resource.
    for name in [
        "cpu",
        "memory",
        "pods",
        "ephemeral-storage",
        "nvidia.com/gpu",
    ] {
        let errs = validate_nodeoverlay_spec(&with(name));
        assert_eq!(
            errs,
            [FieldError::new(
                format!("spec.capacity[{name}]"),
                format!("invalid capacity: {name} in resource, restricted")
            )]
        );
    }
}

#[test]
fn weight_range() {
    for (weight, ok) in [
        (None, true),
        (Some(1), true),
        (Some(10_000), true),
        (Some(0), false),
        (Some(-3), false),
        (Some(10_001), false),
    ] {
        let spec = NodeOverlaySpec { weight, ..spec() };
        let errs = validate_nodeoverlay_spec(&spec);
        assert_eq!(errs.is_empty(), ok, "{weight:?}: {errs:?}");
        if !ok {
            assert_eq!(fields(&errs), ["spec.weight"]);
        }
    }
}

#[test]
fn every_error_is_reported_once_per_field() {
    let spec = NodeOverlaySpec {
        requirements: vec![
            req("Test", Operator::NotIn, &[]),
            req(labels::HOSTNAME_LABEL, Operator::Exists, &[]),
        ],
        price: Some("x".into()),
        price_adjustment: None,
        capacity: BTreeMap::from([("cpu".to_string(), Quantity("1".into()))]),
        weight: Some(0),
    };
    assert_eq!(
        fields(&validate_nodeoverlay_spec(&spec)),
        [
            "spec.requirements[0].values",
            "spec.requirements[1].key",
            "spec.price",
            "spec.capacity[cpu]",
            "spec.weight",
        ]
    );
}
