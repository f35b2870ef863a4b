//! A property of drift detection over generated NodePools: a NodeClaim the provisioner has just
//! made from a NodePool, launched on the offering its requirements chose, is never drifted
//! against that same NodePool. A NodeClaim the template itself produced and that is already
//! drifted would be replaced by one with the same flaw, for ever (issue 33: a NodePool
//! requirement `example.com/team In [a, b]` gave NodeClaims no `example.com/team` label).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crds::labels::{CAPACITY_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};
use crds::{NodeClaim, Operator};
use proptest::prelude::*;
use serde_json::json;
use testutil::{NodePoolBuilder, ec2nodeclass, nodepool, pod};

use super::*;
use crate::provisioning::plan::{self, Listing};
use crate::scheduling::testing::small_medium_large;
use crate::snapshot::Snapshot;

/// The custom label keys the generated requirements and template labels use.
const KEYS: [&str; 3] = ["example.com/team", "example.com/tier", "example.com/slot"];

/// Values of the generated `In`/`NotIn` requirements: words and integers, so bounds meet both.
const VALUES: [&str; 6] = ["a", "b", "c", "1", "5", "12"];

/// One generated requirement: a key of [`KEYS`], an operator and its values.
fn requirement() -> impl Strategy<Value = (String, Operator, Vec<String>)> {
    let key = prop::sample::select(KEYS.to_vec()).prop_map(str::to_string);
    let values = prop::sample::subsequence(VALUES.to_vec(), 1..=3)
        .prop_map(|v| v.into_iter().map(str::to_string).collect::<Vec<_>>());
    let bound = (0i64..15).prop_map(|n| vec![n.to_string()]);
    let operator_values = prop_oneof![
        values.clone().prop_map(|v| (Operator::In, v)),
        values.prop_map(|v| (Operator::NotIn, v)),
        Just((Operator::Exists, vec![])),
        Just((Operator::DoesNotExist, vec![])),
        bound.clone().prop_map(|v| (Operator::Gt, v)),
        bound.clone().prop_map(|v| (Operator::Gte, v)),
        bound.clone().prop_map(|v| (Operator::Lt, v)),
        bound.prop_map(|v| (Operator::Lte, v)),
    ];
    (key, operator_values).prop_map(|(k, (op, v))| (k, op, v))
}

/// A NodePool `default` with generated custom requirements and template labels, and well-known
/// requirements on the zone and capacity type the test instance types are offered in.
fn nodepool_strategy() -> impl Strategy<Value = NodePool> {
    let custom = prop::collection::vec(requirement(), 0..4);
    let labels = prop::collection::btree_map(
        prop::sample::select(KEYS.to_vec()),
        prop::sample::select(VALUES.to_vec()),
        0..2,
    );
    let zones = prop::sample::subsequence(vec!["test-zone-a", "test-zone-b"], 1..=2);
    let capacity = prop::sample::subsequence(vec!["on-demand", "spot"], 1..=2);
    (custom, labels, zones, capacity).prop_map(|(custom, labels, zones, capacity)| {
        let mut pool: NodePoolBuilder = nodepool("default")
            .condition("Ready", "True")
            .requirement(TOPOLOGY_ZONE_LABEL, Operator::In, zones)
            .requirement(CAPACITY_TYPE_LABEL, Operator::In, capacity);
        for (key, operator, values) in custom {
            pool = pool.requirement(key, operator, values);
        }
        for (key, value) in labels {
            pool = pool.template_label(key, value);
        }
        pool.build()
    })
}

/// What a cloud provider's launch adds to a NodeClaim: its instance type's labels and the zone
/// and capacity type of the cheapest offering its requirements allow (the first instance type
/// is the cheapest), and `Launched=True`.
fn launched(mut claim: NodeClaim, decision: &crate::scheduling::solver::NewClaim) -> NodeClaim {
    let it = &decision.instance_types[0];
    let offering = it
        .cheapest_offering(&decision.requirements)
        .expect("the solver chose a type with a compatible offering");
    let mut labels: BTreeMap<String, String> = it.labels.clone();
    labels.insert(TOPOLOGY_ZONE_LABEL.into(), offering.zone.clone());
    labels.insert(CAPACITY_TYPE_LABEL.into(), offering.capacity_type.clone());
    labels.extend(claim.metadata.labels.take().unwrap_or_default());
    claim.metadata.labels = Some(labels);
    claim.metadata.name = Some("default-fresh".into());
    let status = json!({"providerID": "aws:///test-zone-a/i-1", "imageID": "ami-1",
        "conditions": [{"type": "Launched", "status": "True", "reason": "Launched", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    claim.status = Some(serde_json::from_value(status).expect("a NodeClaim status"));
    claim
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every NodeClaim the plan makes for a pending pod (with and without a selector on a custom
    /// key), once launched, passes every drift check that can run against its own NodePool.
    #[test]
    fn a_freshly_created_nodeclaim_is_never_drifted(
        pool in nodepool_strategy(),
        selector in prop::option::of((prop::sample::select(KEYS.to_vec()),
                                      prop::sample::select(VALUES.to_vec()))),
    ) {
        // A NodePool whose template labels its requirements reject is not Ready (see
        // `template::validate`): nothing is made from it.
        prop_assume!(crate::provisioning::template::validate(&pool).is_ok());
        let mut pending = pod("web").uid("web").cpu("500m").memory("512Mi").unschedulable();
        if let Some((key, value)) = selector {
            pending = pending.node_selector(key, value);
        }
        let snap = Snapshot {
            pods: vec![pending.arc()],
            nodepools: vec![Arc::new(pool.clone())],
            nodeclasses: vec![ec2nodeclass("default").subnet_ids(["subnet-1"]).arc()],
            ..Snapshot::default()
        };
        let listings: HashMap<String, Listing> =
            HashMap::from([("default".to_string(), Ok(Arc::new(small_medium_large())))]);
        let versions = HashVersions::default();
        let out = plan::plan(&snap, &listings, &plan::Settings {
            hash_versions: versions.clone(),
            repack: false,
            min_values_policy: Default::default(),
        });
        let types = small_medium_large();
        for planned in out.nodeclaims {
            let claim = launched(planned.nodeclaim, &planned.decision);
            let verdict = detect(&Inputs {
                claim: &claim,
                pool: &pool,
                node_class: None,
                instance: Lookup::NotAsked,
                instance_types: Lookup::Found(&types),
                versions: &versions,
            });
            prop_assert!(
                !matches!(verdict, Verdict::Drifted(_)),
                "labels {:?} drifted: {:?}", claim.metadata.labels, verdict
            );
        }
    }
}

/// The one NodePool shape the property leaves out is refused: a template label its own
/// requirements reject would make every NodeClaim of the pool drifted at birth.
#[test]
fn a_template_label_its_requirements_reject_makes_the_nodepool_invalid() {
    let pool = nodepool("default")
        .requirement("example.com/tier", Operator::In, ["1"])
        .template_label("example.com/tier", "a")
        .build();
    let err = crate::provisioning::template::validate(&pool).expect_err("invalid");
    assert!(
        err.contains("example.com/tier=a is not allowed by requirement example.com/tier In [1]"),
        "{err}"
    );
    let fine = nodepool("default")
        .requirement("example.com/tier", Operator::In, ["1", "a"])
        .template_label("example.com/tier", "a")
        .build();
    assert_eq!(crate::provisioning::template::validate(&fine), Ok(()));
}
