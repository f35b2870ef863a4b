//! From a NodePool to what the solver needs (upstream `nodeclaimtemplate.go`): its requirements
//! (pool requirements, template labels, the nodepool label), DaemonSet overhead, remaining
//! limits; which NodePools the provisioner uses at all ([`node_class_of`],
//! [`usable_requirements`], [`pool_template`], shared with `why-pending`'s explanation); and
//! from a solver decision back to a NodeClaim object.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::pod_view::{PodView, PodViewSpec};
use crds::conditions::{self, READY};
use crds::labels::{INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, WELL_KNOWN_LABELS, node_class_label_key};
use crds::nodeclaim::ResourceRequirements;
use crds::{
    EC2NodeClass, NodeClaim, NodeClaimSpec, NodePool, NodeSelectorRequirementWithMinValues,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::capacity::InstanceType;
use crate::capacity::index::TypeIndex;
use crate::lifecycle::drift::HashVersions;
use crate::scheduling::pod::PodInfo;
use crate::scheduling::requirements::{Requirement, RequirementError, Requirements};
use crate::scheduling::resources::Resources;
use crate::scheduling::solver::{LIMIT_NODES, NewClaim, NodePoolTemplate};
use crate::scheduling::taints::untolerated;
use crate::snapshot::Snapshot;

/// Why the provisioner leaves a NodePool out of a pass (upstream: the NodePool is not Ready,
/// or `NoCompatibleInstanceTypes`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SkipReason {
    /// `metadata.deletionTimestamp` is set.
    #[error("the NodePool is being deleted")]
    Deleting,
    /// `spec.replicas` is set: a static NodePool, which the provisioner never scales for pods.
    #[error("static NodePool (spec.replicas): Karpenter does not provision for pods on it")]
    Static,
    /// Its `Ready` condition is not `True`: `None` without one, else `(status, reason,
    /// message)`.
    #[error("{}", match .0 {
        None => "no Ready condition yet".to_owned(),
        Some((status, reason, message)) => format!("Ready={status} {reason}: {message}"),
    })]
    NotReady(Option<(String, String, String)>),
    /// `spec.template.spec.nodeClassRef` names no EC2NodeClass of the snapshot.
    #[error("EC2NodeClass {0:?} not found")]
    NodeClassMissing(String),
    /// `spec.template.spec.nodeClassRef` has a group or kind other than `karpenter.k8s.aws`
    /// `EC2NodeClass` ([`crds::nodeclaim::NodeClassReference::unsupported`]).
    #[error("{0}")]
    UnsupportedNodeClass(String),
    /// A requirement does not parse.
    #[error("invalid requirement: {0}")]
    InvalidRequirement(String),
    /// The node class's instance types could not be listed.
    #[error("listing instance types: {0}")]
    InstanceTypes(String),
    /// The NodePool's requirements leave none of the node class's instance types.
    #[error("NodePool requirements filtered out all compatible available instance types")]
    NoCompatibleInstanceTypes,
}

/// The checks before a NodePool's instance types are listed: not being deleted, not static,
/// referencing an EC2NodeClass, `Ready=True`, and its node class in `snap`, which is returned.
///
/// Errors: the first check that fails.
pub fn node_class_of<'a>(
    pool: &NodePool,
    snap: &'a Snapshot,
) -> Result<&'a Arc<EC2NodeClass>, SkipReason> {
    if pool.metadata.deletion_timestamp.is_some() {
        return Err(SkipReason::Deleting);
    }
    if pool.is_static() {
        return Err(SkipReason::Static);
    }
    if let Some(why) = pool.spec.template.spec.node_class_ref.unsupported() {
        return Err(SkipReason::UnsupportedNodeClass(why));
    }
    let conds = pool
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if !conditions::is_true(conds, READY) {
        // Ready's message names the failing conditions (`NodeClassReady=False`); their own
        // messages say what to fix (`EC2NodeClass "default" not found`), so they go with it.
        let causes: Vec<&str> = conds
            .iter()
            .filter(|c| c.type_ != READY && c.status == "False" && !c.message.is_empty())
            .map(|c| c.message.as_str())
            .collect();
        return Err(SkipReason::NotReady(conditions::get(conds, READY).map(
            |c| {
                let message = match causes.is_empty() {
                    true => c.message.clone(),
                    false => format!("{} ({})", c.message, causes.join("; ")),
                };
                (c.status.clone(), c.reason.clone(), message)
            },
        )));
    }
    let class = &pool.spec.template.spec.node_class_ref.name;
    snap.nodeclass(class)
        .ok_or_else(|| SkipReason::NodeClassMissing(class.clone()))
}

/// The checks after the instance types are listed: the requirements parse
/// ([`pool_requirements`]) and leave at least one of `types`.
///
/// Errors: [`SkipReason::InvalidRequirement`], [`SkipReason::NoCompatibleInstanceTypes`].
pub fn usable_requirements(
    pool: &NodePool,
    types: &[Arc<InstanceType>],
) -> Result<Requirements, SkipReason> {
    let reqs =
        pool_requirements(pool).map_err(|e| SkipReason::InvalidRequirement(e.to_string()))?;
    if !types.iter().any(|t| t.compatible(&reqs)) {
        return Err(SkipReason::NoCompatibleInstanceTypes);
    }
    Ok(reqs)
}

/// A usable NodePool as the solver's template, and its DaemonSet overhead: the overhead of
/// `snap`'s DaemonSets ([`daemon_overhead`]), and the limits left after what its NodeClaims
/// and nodes use ([`Snapshot::pool_usage`] over `types_by_name`, the pass's
/// [`crate::provisioning::listing::Listed::index`]; [`remaining_limits`]).
pub fn pool_template(
    pool: &NodePool,
    requirements: Requirements,
    types: &[Arc<InstanceType>],
    snap: &Snapshot,
    types_by_name: &TypeIndex,
) -> (NodePoolTemplate, Resources) {
    let allow = |k: &str| WELL_KNOWN_LABELS.contains(&k);
    let overhead = daemon_overhead(&requirements, pool, &snap.daemonsets, &allow);
    let name = pool.metadata.name.clone().unwrap_or_default();
    let (used, count) = snap.pool_usage(&name, types_by_name);
    let remaining = remaining_limits(pool, &used, count);
    (
        template(pool, requirements, types, overhead.clone(), remaining),
        overhead,
    )
}

/// Why [`sized_claim`] made no NodeClaim.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizedClaimError {
    /// No instance type meets the requirements, has an available offering and room for the
    /// requests.
    #[error("no instance type the NodePool allows has an available offering and room for {0}")]
    NoFit(String),
    /// The types that fit offer too few distinct values for a `minValues`.
    #[error(
        "minValues requirement is not met: {key} needs {needed} distinct values, the instance \
         types offer {left}"
    )]
    MinValues {
        /// The requirement's key.
        key: String,
        /// Its `minValues`.
        needed: usize,
        /// The distinct values the fitting types offer.
        left: usize,
    },
}

/// A NodeClaim of NodePool `nodepool` that holds no pod yet, sized for `requests` (millicores
/// and bytes; e.g. its DaemonSet pods, or what a node it replaces was sized for): the
/// `types` that meet `requirements`, have an available offering and room for the requests,
/// cheapest first (by name on a tie); listed as every new NodeClaim lists them
/// ([`choices::accepted`](crate::scheduling::choices::accepted)), with the capacity types of
/// their available offerings and the instance-type requirement's `minValues` kept. What a
/// static NodePool launches and what a drift replacement falls back to when the solver
/// cannot place the node's pods.
///
/// Errors: no type fits, or too few distinct values remain for a `minValues`.
pub fn sized_claim(
    nodepool: &str,
    requirements: Requirements,
    requests: Resources,
    types: &[Arc<InstanceType>],
) -> Result<NewClaim, SizedClaimError> {
    use crate::scheduling::choices;
    use crds::labels::CAPACITY_TYPE_LABEL;
    let mut fitting: Vec<(f64, Arc<InstanceType>)> = types
        .iter()
        .filter(|t| t.compatible(&requirements) && requests.fits_in(&t.allocatable))
        .filter_map(|t| {
            t.cheapest_offering(&requirements)
                .map(|o| (o.price, Arc::clone(t)))
        })
        .collect();
    fitting.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.name.cmp(&b.1.name)));
    let fitting: Vec<Arc<InstanceType>> = fitting.into_iter().map(|(_, t)| t).collect();
    if fitting.is_empty() {
        return Err(SizedClaimError::NoFit(requests.to_string()));
    }
    if let Some(short) = choices::min_values_shortfall(&requirements, &fitting) {
        return Err(SizedClaimError::MinValues {
            key: short.key,
            needed: short.needed,
            left: short.left,
        });
    }
    let instance_types: Vec<Arc<InstanceType>> = choices::accepted(&requirements, &fitting)
        .into_iter()
        .map(|i| Arc::clone(&fitting[i]))
        .collect();
    let mut capacity_types: Vec<String> = instance_types
        .iter()
        .flat_map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.available && o.compatible(&requirements))
                .map(|o| o.capacity_type.clone())
        })
        .collect();
    capacity_types.sort();
    capacity_types.dedup();
    let mut reqs = requirements;
    reqs.add(Requirement::is_in(CAPACITY_TYPE_LABEL, capacity_types));
    let min_values = reqs.get(INSTANCE_TYPE_LABEL).and_then(|r| r.min_values);
    reqs.remove(INSTANCE_TYPE_LABEL);
    let mut listed = Requirement::is_in(
        INSTANCE_TYPE_LABEL,
        instance_types.iter().map(|t| t.name.clone()),
    );
    listed.min_values = min_values;
    reqs.add(listed);
    Ok(NewClaim {
        nodepool: nodepool.to_string(),
        requirements: reqs,
        instance_types,
        fitting,
        requests,
        pods: Vec::new(),
        min_values_relaxed: false,
    })
}

/// A NodePool's requirements: its spec requirements (with minValues), its template labels as
/// `In`, and `karpenter.sh/nodepool In [name]`.
///
/// Errors: a requirement that does not parse (the NodePool is then not Ready).
pub fn pool_requirements(pool: &NodePool) -> Result<Requirements, RequirementError> {
    let mut reqs = Requirements::new();
    for r in &pool.spec.template.spec.requirements {
        let mut req = Requirement::new(&r.key, r.operator, &r.values)?;
        req.min_values = r.min_values.and_then(|m| usize::try_from(m).ok());
        reqs.add(req);
    }
    for (k, v) in &pool.spec.template.metadata.labels {
        reqs.add(Requirement::is_in(k, [v.clone()]));
    }
    reqs.add(Requirement::is_in(
        NODEPOOL_LABEL,
        [pool.metadata.name.clone().unwrap_or_default()],
    ));
    Ok(reqs)
}

/// Requests of the DaemonSets whose pods would run on this pool's nodes: they tolerate the
/// template's taints and their node requirements are compatible with the pool's.
pub fn daemon_overhead(
    requirements: &Requirements,
    pool: &NodePool,
    daemonsets: &[Arc<DaemonSet>],
    well_known: &dyn Fn(&str) -> bool,
) -> Resources {
    let taints: Vec<_> = pool
        .spec
        .template
        .spec
        .taints
        .iter()
        .chain(pool.spec.template.spec.startup_taints.iter())
        .cloned()
        .collect();
    let mut total = Resources::default();
    for ds in daemonsets {
        let pod = PodView {
            metadata: ObjectMeta::default(),
            spec: ds.spec.template.spec.as_ref().map(PodViewSpec::from),
            status: None,
        };
        let Ok(info) = PodInfo::from_pod(&pod) else {
            continue;
        };
        let tolerated = untolerated(&taints, &info.tolerations).is_none();
        let compatible = info
            .requirement_terms
            .iter()
            .any(|t| requirements.compatible(t, well_known).is_ok());
        if tolerated && compatible {
            let mut r = info.requests.clone();
            r.pods = 1;
            total.add(&r);
        }
    }
    total
}

/// What the pool's limits still allow given its current usage (cpu in millicores, memory in
/// bytes, `nodes` as a count). Unparseable limits are treated as zero: launch nothing rather
/// than exceed a limit the user meant to set.
pub fn remaining_limits(
    pool: &NodePool,
    used: &Resources,
    node_count: i64,
) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (name, q) in &pool.spec.limits {
        let limit = if name == LIMIT_NODES {
            crate::scheduling::resources::parse_units(&q.0).unwrap_or(0) - node_count
        } else {
            let mut r = Resources::default();
            match r.set_parsed(name, &q.0) {
                Ok(()) => r.get(name) - used.get(name),
                Err(_) => 0,
            }
        };
        out.insert(name.clone(), limit);
    }
    out
}

/// The solver's view of a ready NodePool.
pub fn template(
    pool: &NodePool,
    requirements: Requirements,
    instance_types: &[Arc<InstanceType>],
    daemon_overhead: Resources,
    remaining: BTreeMap<String, i64>,
) -> NodePoolTemplate {
    NodePoolTemplate {
        name: pool.metadata.name.clone().unwrap_or_default(),
        weight: pool.spec.weight.unwrap_or(0),
        requirements,
        taints: pool.spec.template.spec.taints.clone(),
        instance_types: instance_types.to_vec(),
        daemon_overhead,
        remaining,
    }
}

/// The NodeClaim object for a solver decision: `generateName: <pool>-`, owned by the NodePool,
/// labelled with the pool's template labels, the nodepool and node-class labels and the
/// claim's single-valued requirements; requirements list the decision's instance types, cheapest
/// first (the solver has already narrowed them, see [`crate::scheduling::choices`]).
/// Annotated with the pool's template annotations, the NodePool drift stamp (hash, hash
/// version and field snapshot, see [`crds::hash`]) under `versions`, and
/// `karpenter.sh/nodeclaim-min-values-relaxed` (`"true"` when the solver lowered a `minValues`,
/// which the NodeClaim's requirements then carry; else `"false"`), as upstream annotates every
/// new NodeClaim; and `karpenter.sh/price-overlay-applied: "true"` /
/// `karpenter.sh/capacity-overlay-applied: "true"` when a NodeOverlay changed the price /
/// capacity of one of its instance-type options (upstream `nodeclaimtemplate.go`).
pub fn nodeclaim(pool: &NodePool, decision: &NewClaim, versions: &HashVersions) -> NodeClaim {
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let spec = &pool.spec.template.spec;
    let mut labels: BTreeMap<String, String> = decision
        .requirements
        .labels()
        .into_iter()
        .filter(|(k, _)| k != INSTANCE_TYPE_LABEL)
        .collect();
    labels.extend(pool.spec.template.metadata.labels.clone());
    labels.insert(NODEPOOL_LABEL.into(), pool_name.clone());
    labels.insert(
        node_class_label_key(&spec.node_class_ref.group, &spec.node_class_ref.kind),
        spec.node_class_ref.name.clone(),
    );
    // minValues as the decision holds them (lowered where BestEffort relaxed them), else the
    // pool's own.
    let mut min_values: HashMap<&str, i64> = spec
        .requirements
        .iter()
        .filter_map(|r| r.min_values.map(|m| (r.key.as_str(), m)))
        .collect();
    for r in decision.requirements.iter() {
        if min_values.contains_key(r.key.as_str()) {
            match r.min_values.and_then(|m| i64::try_from(m).ok()) {
                Some(m) => min_values.insert(r.key.as_str(), m),
                None => min_values.remove(r.key.as_str()),
            };
        }
    }
    let requirements = decision
        .requirements
        .parts()
        .map(|(key, operator, values)| {
            let values = if key == INSTANCE_TYPE_LABEL {
                decision
                    .instance_types
                    .iter()
                    .map(|t| t.name.clone())
                    .collect()
            } else {
                values
            };
            let mut out = NodeSelectorRequirementWithMinValues::new(key, operator, values);
            out.min_values = min_values.get(key).copied();
            out
        })
        .collect();
    let mut annotations = pool.spec.template.metadata.annotations.clone();
    annotations.insert(
        crds::labels::NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION.into(),
        decision.min_values_relaxed.to_string(),
    );
    let overlaid = [
        (
            crds::labels::PRICE_OVERLAY_APPLIED_ANNOTATION,
            decision
                .instance_types
                .iter()
                .any(|t| t.price_overlay_applied),
        ),
        (
            crds::labels::CAPACITY_OVERLAY_APPLIED_ANNOTATION,
            decision
                .instance_types
                .iter()
                .any(|t| t.capacity_overlay_applied),
        ),
    ];
    for (key, applied) in overlaid {
        if applied {
            annotations.insert(key.into(), "true".into());
        }
    }
    annotations.extend(crds::hash::nodepool_stamp(
        &crds::hash::nodepool_fields(pool),
        &versions.nodepool,
    ));
    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{pool_name}-")),
            labels: Some(labels),
            annotations: Some(annotations),
            // Created with its termination finalizer, so the lifecycle controller need not
            // patch it on (upstream adds it in its first reconcile): one API write less.
            finalizers: Some(vec![crds::labels::TERMINATION_FINALIZER.to_owned()]),
            owner_references: Some(vec![OwnerReference {
                api_version: "karpenter.sh/v1".into(),
                kind: "NodePool".into(),
                name: pool_name,
                uid: pool.metadata.uid.clone().unwrap_or_default(),
                block_owner_deletion: Some(true),
                controller: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints: spec.taints.clone(),
            startup_taints: spec.startup_taints.clone(),
            requirements,
            resources: ResourceRequirements {
                requests: decision.requests.to_list(),
            },
            node_class_ref: spec.node_class_ref.clone(),
            termination_grace_period: spec.termination_grace_period.clone(),
            expire_after: spec.expire_after.clone(),
        },
        status: None,
    }
}

/// The validation verdict: every spec rule plus requirements the scheduler must be able to
/// parse, and template labels the pool's own requirements allow. `Err` holds the condition
/// message.
///
/// A template label its requirements do not allow (`labels: {team: a}` with `team In [b]`)
/// would give every NodeClaim a label that its NodePool's requirements reject: each would be
/// `RequirementsDrifted` at once and replaced by another with the same label, for ever.
/// Upstream Karpenter accepts such a NodePool and churns; here it is not Ready and says why.
pub fn validate(pool: &NodePool) -> Result<(), String> {
    let mut errors = crds::validation::validate_nodepool(pool);
    if let Err(e) = pool_requirements(pool) {
        errors.push(crds::validation::FieldError {
            field: "spec.template.spec.requirements".into(),
            message: e.to_string(),
        });
    }
    let spec_requirements = Requirements::from_api(&pool.spec.template.spec.requirements);
    for (key, value) in &pool.spec.template.metadata.labels {
        if let Some(r) = spec_requirements.get(key).filter(|r| !r.has(value)) {
            errors.push(crds::validation::FieldError {
                field: format!("spec.template.metadata.labels[{key}]"),
                message: format!("label {key}={value} is not allowed by requirement {r}"),
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(crds::validation::summarize(&errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing::small_medium_large;

    /// A NodePool whose nodeClassRef is not a `karpenter.k8s.aws` `EC2NodeClass` is left out of
    /// provisioning, even Ready and with an EC2NodeClass of that name, and says why.
    #[test]
    fn a_node_class_ref_of_another_group_or_kind_is_not_provisioned_for() {
        let snap = Snapshot {
            nodeclasses: vec![Arc::new(testutil::ec2nodeclass("default").build())],
            ..Snapshot::default()
        };
        let pool = |group: &str, kind: &str| -> NodePool {
            let mut pool = testutil::nodepool("web").condition(READY, "True").build();
            let r = &mut pool.spec.template.spec.node_class_ref;
            (r.group, r.kind) = (group.into(), kind.into());
            pool
        };
        let ok = pool("karpenter.k8s.aws", "EC2NodeClass");
        assert_eq!(
            node_class_of(&ok, &snap).map(|nc| nc.metadata.name.clone()),
            Ok(Some("default".into()))
        );
        for (group, kind) in [
            ("karpenter.k8s.aws", "AKSNodeClass"),
            ("karpenter.azure.com", "EC2NodeClass"),
        ] {
            let err = node_class_of(&pool(group, kind), &snap).expect_err(kind);
            assert_eq!(
                err.to_string(),
                format!(
                    "nodeClassRef {group}/{kind} \"default\" is not a node class this Karpenter \
                     serves (only karpenter.k8s.aws/EC2NodeClass)"
                )
            );
            assert!(matches!(err, SkipReason::UnsupportedNodeClass(_)));
        }
    }

    #[test]
    fn template_annotations_reach_the_nodeclaim() {
        let mut pool = testutil::nodepool("web").build();
        pool.spec
            .template
            .metadata
            .annotations
            .insert("example.com/owner".into(), "team-web".into());
        let types = small_medium_large();
        let decision = NewClaim {
            nodepool: "web".into(),
            requirements: Requirements::new(),
            instance_types: types.clone(),
            fitting: types,
            requests: Resources::default(),
            pods: Vec::new(),
            min_values_relaxed: false,
        };
        let claim = nodeclaim(&pool, &decision, &HashVersions::default());
        let annotations = claim.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get("example.com/owner").map(String::as_str),
            Some("team-web")
        );
        assert_eq!(
            annotations
                .get(crds::labels::NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION)
                .map(String::as_str),
            Some("false")
        );
    }
}
