//! Tests of drift detection: each reason with the changes it names, hash versions that are not
//! compared, checks that cannot run keeping what was found, and upstream-stamped NodeClaims.

use crds::Operator;
use crds::labels::CAPACITY_TYPE_LABEL;
use serde_json::json;
use testutil::{NodePoolBuilder, condition, ec2nodeclass, nodeclaim, nodepool};

use super::*;
use crate::scheduling::testing::instance_type;

const OLD_AMI: &str = "ami-0aaa";
const NEW_AMI: &str = "ami-0bbb";

/// The NodePool `default`: template label `team: web`, capacity type spot or on-demand.
fn pool() -> NodePoolBuilder {
    nodepool("default")
        .template_label("team", "web")
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["spot", "on-demand"])
}

/// The resolved EC2NodeClass `default`: subnets a and b, one security group, and the al2023
/// images for arm64 and (`ami`) amd64.
fn class(ami: &str) -> EC2NodeClass {
    ec2nodeclass("default")
        .role("KarpenterNodeRole")
        .discovery("c")
        .merge(json!({"status": {
            "subnets": [{"id": "subnet-a", "zone": "us-east-1a"}, {"id": "subnet-b", "zone": "us-east-1b"}],
            "securityGroups": [{"id": "sg-1"}],
            "amis": [
                {"id": "ami-arm", "name": "al2023-arm64-new",
                 "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]},
                {"id": ami, "name": format!("al2023-x86_64-{ami}"),
                 "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
            ],
        }}))
        .build()
}

/// A launched NodeClaim stamped from `pool` and `class` under the current versions.
fn claim(pool: &NodePool, class: &EC2NodeClass) -> NodeClaim {
    let versions = HashVersions::default();
    let mut annotations = hash::nodepool_stamp(&hash::nodepool_fields(pool), &versions.nodepool);
    annotations.extend(crate::lifecycle::stamp::launch_stamp(
        class, OLD_AMI, &versions,
    ));
    nodeclaim("default-abc")
        .nodepool("default")
        .label("team", "web")
        .label(CAPACITY_TYPE_LABEL, "on-demand")
        .label("kubernetes.io/arch", "amd64")
        .label("node.kubernetes.io/instance-type", "m5.large")
        .annotations(annotations)
        .provider_id("aws:///us-east-1a/i-1")
        .image_id(OLD_AMI)
        .condition("Launched", "True")
        .build()
}

fn instance() -> Instance {
    Instance {
        provider_id: "aws:///us-east-1a/i-1".into(),
        id: "i-1".into(),
        nodeclaim: Some("default-abc".into()),
        nodepool: Some("default".into()),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: "on-demand".into(),
        price: 0.096,
        launched_at: jiff::Timestamp::UNIX_EPOCH,
        image_id: OLD_AMI.into(),
        subnet_id: "subnet-a".into(),
        security_group_ids: vec!["sg-1".into()],
    }
}

fn check(
    claim: &NodeClaim,
    pool: &NodePool,
    class: &EC2NodeClass,
    i: Option<&Instance>,
) -> Verdict {
    let types = vec![instance_type("m5.large", 2, 8, 0.096)];
    detect(&Inputs {
        claim,
        pool,
        node_class: Some(class),
        instance: i.map_or(Lookup::NotAsked, Lookup::Found),
        instance_types: Lookup::Found(&types),
        versions: &HashVersions::default(),
    })
}

fn findings(v: Verdict) -> Vec<(String, Vec<String>)> {
    match v {
        Verdict::Drifted(f) => f
            .into_iter()
            .map(|f| (f.reason.to_string(), f.changes))
            .collect(),
        other => panic!("expected drift, got {other:?}"),
    }
}

#[test]
fn unchanged_nodeclaim_is_not_drifted() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    assert_eq!(
        check(&claim(&p, &c), &p, &c, Some(&instance())),
        Verdict::NotDrifted
    );
}

#[test]
fn not_launched_nodeclaims_are_not_checked() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let mut nc = claim(&p, &c);
    nc.status = None;
    assert_eq!(check(&nc, &p, &c, None), Verdict::NotLaunched);
}

#[test]
fn nodepool_label_and_taint_changes_are_named() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let nc = claim(&p, &c);
    let changed = pool()
        .template_label("team", "db")
        .taint("dedicated=gpu:NoSchedule")
        .build();
    assert_eq!(
        findings(check(&nc, &changed, &c, Some(&instance()))),
        [(
            "NodePoolDrifted".to_string(),
            vec![
                "spec.template.metadata.labels.team: web -> db".to_string(),
                "spec.template.spec.taints: added dedicated=gpu:NoSchedule".to_string(),
            ]
        )]
    );
}

#[test]
fn other_hash_versions_are_not_compared() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let mut nc = claim(&p, &c);
    let a = nc.metadata.annotations.get_or_insert_with(Default::default);
    a.insert(
        crds::labels::NODEPOOL_HASH_VERSION_ANNOTATION.into(),
        "v3".into(),
    );
    a.insert(crds::labels::NODEPOOL_HASH_ANNOTATION.into(), "123".into());
    a.insert(
        crds::labels::EC2NODECLASS_HASH_VERSION_ANNOTATION.into(),
        "v6".into(),
    );
    a.insert(
        crds::labels::EC2NODECLASS_HASH_ANNOTATION.into(),
        "456".into(),
    );
    let relabelled = pool().template_label("team", "db").build();
    // The label change itself is not seen (version mismatch), but the label no longer matching
    // is not a requirement either: nothing is drifted.
    assert_eq!(
        check(&nc, &relabelled, &c, Some(&instance())),
        Verdict::NotDrifted
    );
}

#[test]
fn narrowed_requirement_is_requirements_drift() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let nc = claim(&p, &c);
    let narrowed = pool()
        .merge(json!({"spec": {"template": {"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": "example.com/tier", "operator": "Exists"},
        ]}}}}))
        .build();
    let f = findings(check(&nc, &narrowed, &c, Some(&instance())));
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].0, "RequirementsDrifted");
    assert_eq!(
        f[0].1,
        [
            "requirement example.com/tier Exists no longer admits a node without label example.com/tier",
            "requirement karpenter.sh/capacity-type In [spot] no longer admits label karpenter.sh/capacity-type=on-demand",
        ]
    );
}

#[test]
fn new_ami_for_the_architecture_is_ami_drift_with_names() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let nc = claim(&p, &c);
    let f = findings(check(&nc, &p, &class(NEW_AMI), Some(&instance())));
    assert_eq!(
        f,
        [(
            "AMIDrift".to_string(),
            vec![format!(
                "AMI: {OLD_AMI} (al2023-x86_64-{OLD_AMI}) -> {NEW_AMI} (al2023-x86_64-{NEW_AMI})"
            )]
        )]
    );
}

#[test]
fn subnet_and_security_group_changes_are_named() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let nc = claim(&p, &c);
    let mut moved = instance();
    moved.subnet_id = "subnet-z".into();
    moved.security_group_ids = vec!["sg-0".into()];
    let f = findings(check(&nc, &p, &c, Some(&moved)));
    assert_eq!(
        f,
        [
            (
                "SecurityGroupDrift".to_string(),
                vec!["security groups: [sg-0] -> [sg-1]".to_string()]
            ),
            (
                "SubnetDrift".to_string(),
                vec!["subnet: subnet-z (us-east-1a) is no longer selected; selected now: subnet-a (us-east-1a), subnet-b (us-east-1b)".to_string()]
            ),
        ]
    );
}

#[test]
fn node_class_spec_change_is_node_class_drift() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let nc = claim(&p, &c);
    let mut changed = c.clone();
    changed.spec.user_data = Some("echo hi".into());
    let f = findings(check(&nc, &p, &changed, Some(&instance())));
    assert_eq!(
        f,
        [(
            "NodeClassDrift".to_string(),
            vec!["spec.userData: added echo hi".to_string()]
        )]
    );
}

#[test]
fn vanished_instance_type_is_instance_type_not_found() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let nc = claim(&p, &c);
    let types = vec![instance_type("c5.large", 2, 4, 0.085)];
    let v = detect(&Inputs {
        claim: &nc,
        pool: &p,
        node_class: Some(&c),
        instance: Lookup::Found(&instance()),
        instance_types: Lookup::Found(&types),
        versions: &HashVersions::default(),
    });
    assert_eq!(
        findings(v),
        [(
            "InstanceTypeNotFound".to_string(),
            vec!["instance type m5.large is no longer offered by the node class".to_string()]
        )]
    );
}

#[test]
fn unresolved_node_class_leaves_drift_unknown() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let nc = claim(&p, &c);
    let mut empty = c.clone();
    if let Some(s) = empty.status.as_mut() {
        s.amis.clear();
    }
    assert!(matches!(
        check(&nc, &p, &empty, Some(&instance())),
        Verdict::Unknown(_)
    ));
}

#[test]
fn findings_make_one_message_in_order() {
    let f = vec![
        Finding {
            reason: "NodePoolDrifted",
            changes: vec!["a: 1 -> 2".into()],
        },
        Finding {
            reason: "AMIDrift",
            changes: vec!["AMI: x -> y".into()],
        },
    ];
    assert_eq!(
        Verdict::message(&f),
        "NodePoolDrifted: a: 1 -> 2; AMIDrift: AMI: x -> y"
    );
}

#[test]
fn drift_found_under_an_old_hash_version_is_kept() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let mut nc = claim(&p, &c);
    nc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            crds::labels::NODEPOOL_HASH_VERSION_ANNOTATION.into(),
            "rs-v0".into(),
        );
    let nc = with_condition(
        nc,
        "NodePoolDrifted",
        "NodePoolDrifted: spec.template.metadata.labels.tier: added gold",
    );
    assert_eq!(
        findings(check(&nc, &p, &c, Some(&instance()))),
        [(
            "NodePoolDrifted".to_string(),
            vec!["spec.template.metadata.labels.tier: added gold".to_string()]
        )]
    );
}

#[test]
fn upstream_stamped_nodeclaim_is_not_drifted() {
    let fixture = include_str!("../../../../tests/fixtures/upstream/nodeclaim.yaml");
    let nc: NodeClaim = serde_saphyr::from_str(fixture).expect("upstream NodeClaim parses");
    let (p, c) = (pool().build(), class(OLD_AMI));
    let upstream = Stamp::nodepool(nc.metadata.annotations.as_ref());
    assert_eq!(upstream.version.as_deref(), Some("v3"));
    assert_eq!(
        compare(
            &upstream,
            &hash::nodepool_fields(&p),
            &HashVersions::default().nodepool
        ),
        HashComparison::VersionMismatch
    );
    assert_eq!(check(&nc, &p, &c, None), Verdict::NotDrifted);
    let stale = crate::lifecycle::stamp::restamps(
        [&nc],
        |c| Stamp::nodepool(c.metadata.annotations.as_ref()),
        &HashVersions::default().nodepool,
        false,
    );
    assert_eq!(stale.len(), 1, "an upstream stamp is re-stamped");
}

/// Upstream's own `Drifted` condition (the reason repeated as the message) on a NodeClaim
/// stamped under another hash version: still drifted, with our wording, not the echo.
#[test]
fn an_upstream_drifted_condition_reads_back_without_its_echo() {
    assert!(split_message("NodePoolDrifted", "NodePoolDrifted").is_empty());
    assert_eq!(
        split_message("NodePoolDrifted", "template changed"),
        [(
            "NodePoolDrifted".to_string(),
            "template changed".to_string()
        )]
    );
    let fixture = include_str!("../../../../tests/fixtures/upstream/nodeclaim.yaml");
    let nc: NodeClaim = serde_saphyr::from_str(fixture).expect("upstream NodeClaim parses");
    let nc = with_condition(nc, "NodePoolDrifted", "NodePoolDrifted");
    let (p, c) = (pool().build(), class(OLD_AMI));
    let Verdict::Drifted(findings) = check(&nc, &p, &c, None) else {
        panic!("upstream's drift is kept")
    };
    let message = Verdict::message(&findings);
    assert!(
        message.starts_with("NodePoolDrifted: nodepool hash changed under hash version"),
        "{message}"
    );

    // Upstream's SubnetDrift while the instance cannot be described, and a requirements change
    // found now: both reasons stay.
    let (p, c) = (pool().build(), class(OLD_AMI));
    let narrowed = nodepool("default")
        .template_label("team", "web")
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["on-demand"])
        .build();
    let nc = with_condition(claim(&p, &c), "SubnetDrift", "SubnetDrift");
    let types = vec![instance_type("m5.large", 2, 8, 0.096)];
    let v = detect(&Inputs {
        claim: &nc,
        pool: &narrowed,
        node_class: Some(&c),
        instance: Lookup::Unavailable("throttled".into()),
        instance_types: Lookup::Found(&types),
        versions: &HashVersions::default(),
    });
    let Verdict::Drifted(findings) = v else {
        panic!("drifted, got {v:?}")
    };
    let reasons: Vec<&str> = findings.iter().map(|f| f.reason).collect();
    assert!(reasons.contains(&"SubnetDrift"), "{findings:?}");
    assert!(
        Verdict::message(&findings)
            .contains("SubnetDrift: found earlier; not checked now: throttled"),
        "{findings:?}"
    );
}

fn with_condition(mut nc: NodeClaim, reason: &str, message: &str) -> NodeClaim {
    nc.status
        .get_or_insert_with(Default::default)
        .conditions
        .push(
            serde_json::from_value(
                condition("Drifted", "True")
                    .reason(reason)
                    .message(message)
                    .json(),
            )
            .expect("condition"),
        );
    nc
}

#[test]
fn an_empty_instance_type_list_is_no_evidence() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let nc = claim(&p, &c);
    let none: Vec<std::sync::Arc<InstanceType>> = vec![];
    let v = detect(&Inputs {
        claim: &nc,
        pool: &p,
        node_class: Some(&c),
        instance: Lookup::Found(&instance()),
        instance_types: Lookup::Found(&none),
        versions: &HashVersions::default(),
    });
    assert!(
        matches!(v, Verdict::Unknown(ref why) if why.contains("InstanceTypeNotFound")),
        "{v:?}"
    );
}

#[test]
fn a_failed_lookup_keeps_what_was_found_before() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let message = "SubnetDrift: subnet: subnet-z (us-east-1a) is no longer selected; selected now: subnet-a (us-east-1a)";
    let nc = with_condition(claim(&p, &c), "SubnetDrift", message);
    let types = vec![instance_type("m5.large", 2, 8, 0.096)];
    let v = detect(&Inputs {
        claim: &nc,
        pool: &p,
        node_class: Some(&c),
        instance: Lookup::Unavailable("throttled".into()),
        instance_types: Lookup::Found(&types),
        versions: &HashVersions::default(),
    });
    let Verdict::Drifted(f) = v else {
        panic!("kept drift, got {v:?}")
    };
    assert_eq!(Verdict::message(&f), message, "same condition, no flap");
    // Without a previous finding, the same failure is Unknown, not "not drifted".
    let clean = claim(&p, &c);
    let v = detect(&Inputs {
        claim: &clean,
        pool: &p,
        node_class: Some(&c),
        instance: Lookup::Unavailable("throttled".into()),
        instance_types: Lookup::Found(&types),
        versions: &HashVersions::default(),
    });
    assert!(matches!(v, Verdict::Unknown(_)), "{v:?}");
}

#[test]
fn a_missing_node_class_leaves_drift_unknown() {
    let (p, c) = (pool().build(), class(OLD_AMI));
    let nc = claim(&p, &c);
    let v = detect(&Inputs {
        claim: &nc,
        pool: &p,
        node_class: None,
        instance: Lookup::NotAsked,
        instance_types: Lookup::NotAsked,
        versions: &HashVersions::default(),
    });
    assert!(
        matches!(v, Verdict::Unknown(ref why) if why.contains("not found")),
        "{v:?}"
    );
}

#[test]
fn messages_are_bounded_and_split_back() {
    let huge = "x".repeat(20_000);
    let f = vec![
        Finding {
            reason: "NodeClassDrift",
            changes: vec![format!("spec.userData: added {huge}")],
        },
        Finding {
            reason: "SubnetDrift",
            changes: vec!["subnet: a is no longer selected; selected now: b".into()],
        },
    ];
    let m = Verdict::message(&f);
    assert!(m.len() <= 1024, "{} bytes", m.len());
    let parts = split_message("NodeClassDrift", &m);
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(
        parts[1],
        (
            "SubnetDrift".into(),
            "subnet: a is no longer selected; selected now: b".into()
        )
    );
    let many: Vec<Finding> = (0..100)
        .map(|i| Finding {
            reason: "NodePoolDrifted",
            changes: vec![format!(
                "spec.template.metadata.labels.l{i}: added {}",
                "v".repeat(40)
            )],
        })
        .collect();
    let m = Verdict::message(&many);
    assert!(m.len() <= 1024 && m.ends_with("more changes)"), "{m}");
}
