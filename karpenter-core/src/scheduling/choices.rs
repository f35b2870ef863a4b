//! Which instance types a new NodeClaim lists: of the options that fit the pods planned onto it
//! (cheapest first), the ones a user would accept, narrowed as upstream Karpenter narrows them
//! before a launch. Upstream's AWS provider drops exotic types (metal, GPU and accelerator types)
//! while an ordinary type remains, and in a launch that may go spot or on-demand drops spot types
//! dearer than the cheapest on-demand offering (`aws:pkg/providers/instance/filter/filter.go`,
//! `ExoticInstanceTypeFilter` and `SpotInstanceFilter`; both stand aside when a requirement has
//! `minValues`); then it lists at most 60 types, cheapest first (`maxInstanceTypes`, core
//! `pkg/cloudprovider/types.go` `InstanceTypes.Truncate`).
//!
//! The options already fit the pods, so a pod that asks for a GPU (or for metal, or for a GPU
//! family) has only such options and keeps them: the pods are accounted for through the options.
//! The solver applies [`accepted`] where it finalises each new NodeClaim, so `karpenter simulate`,
//! the provisioner and consolidation's replacements choose alike. Pure.

use std::borrow::Borrow;
use std::collections::HashSet;

use crate::capacity::InstanceType;
use crate::scheduling::requirements::Requirements;
use crds::labels::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, INSTANCE_GPU_COUNT_LABEL,
    INSTANCE_SIZE_LABEL, INSTANCE_TYPE_LABEL, RESOURCE_AMD_GPU, RESOURCE_AWS_NEURON,
    RESOURCE_AWS_NEURON_CORE, RESOURCE_HABANA_GAUDI, RESOURCE_NVIDIA_GPU,
};

/// Upstream's cap on the instance types one launch considers (`maxInstanceTypes` in the AWS
/// provider): enough choice to fall back on when capacity is short, a NodeClaim of a few
/// kilobytes.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// Capacity type of reserved offerings (capacity reservations), which upstream's spot filter
/// never drops.
use crds::labels::CAPACITY_TYPE_RESERVED;

/// Extended resources that make an instance type exotic (upstream's list: Neuron devices and
/// cores, AMD and NVIDIA GPUs, Habana Gaudi).
const EXOTIC_RESOURCES: [&str; 5] = [
    RESOURCE_AWS_NEURON,
    RESOURCE_AWS_NEURON_CORE,
    RESOURCE_AMD_GPU,
    RESOURCE_NVIDIA_GPU,
    RESOURCE_HABANA_GAUDI,
];

/// Whether upstream's AWS provider counts the type as exotic: a metal size
/// (`karpenter.k8s.aws/instance-size` containing `metal`), or an accelerator among its capacity
/// (NVIDIA/AMD GPUs, Habana Gaudi, Neuron devices or cores). A type labelled with a GPU count
/// (`karpenter.k8s.aws/instance-gpu-count`) is exotic too, whatever its GPUs register as.
pub fn is_exotic(it: &InstanceType) -> bool {
    it.labels
        .get(INSTANCE_SIZE_LABEL)
        .is_some_and(|size| size.contains("metal"))
        || it.labels.contains_key(INSTANCE_GPU_COUNT_LABEL)
        || EXOTIC_RESOURCES.iter().any(|r| it.capacity.get(r) > 0)
}

/// Whether some requirement sets `minValues`; upstream then leaves the exotic and spot filters
/// out, so the options the NodePool demands stay.
pub fn has_min_values(requirements: &Requirements) -> bool {
    requirements.iter().any(|r| r.min_values.is_some())
}

/// The positions in `options` (instance types that fit the NodeClaim, cheapest compatible
/// offering first) of the types its NodeClaim lists, in the same order:
/// 1. without `minValues`: exotic types ([`is_exotic`]) dropped when an ordinary one remains;
/// 2. without `minValues`, when the requirements allow spot and on-demand and the options offer
///    both: types whose compatible spot offerings all cost more (USD/hour) than the cheapest
///    compatible on-demand offering dropped, unless they have a reserved offering (upstream keeps
///    on-demand-only types; when every type would go, all stay);
/// 3. the first [`MAX_INSTANCE_TYPES`], or more when fewer would break a `minValues`
///    ([`listed`]).
///
/// Offerings count when available and compatible with the requirements' zone and capacity type.
pub fn accepted<T: Borrow<InstanceType>>(requirements: &Requirements, options: &[T]) -> Vec<usize> {
    let filter = crate::capacity::OfferingFilter::of(requirements);
    accepted_by(requirements, options, |i| {
        let it = options[i].borrow();
        OfferSummary {
            exotic: is_exotic(it),
            ..OfferSummary::of(
                it.offerings
                    .iter()
                    .filter(|o| o.available && filter.admits(o)),
            )
        }
    })
}

/// What steps 1 and 2 of [`accepted`] read of one option: whether the type is exotic
/// ([`is_exotic`]), and of its offerings that count (available and compatible with the
/// requirements) the cheapest on-demand and spot prices (USD/hour) and whether one is reserved.
/// The solver keeps these per type and requirements, so neither the labels nor the offerings
/// are read again for every NodeClaim.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OfferSummary {
    /// The cheapest on-demand offering's price, if any.
    pub on_demand: Option<f64>,
    /// The cheapest spot offering's price, if any.
    pub spot: Option<f64>,
    /// Whether some reserved offering counts.
    pub reserved: bool,
    /// Whether the type is exotic ([`is_exotic`]); [`OfferSummary::of`] leaves it false.
    pub exotic: bool,
}

impl OfferSummary {
    /// The summary of `offerings` (already filtered to those that count).
    pub fn of<'a>(offerings: impl IntoIterator<Item = &'a crate::capacity::Offering>) -> Self {
        let mut s = OfferSummary::default();
        for o in offerings {
            s.add(o);
        }
        s
    }

    /// Count one more offering.
    pub fn add(&mut self, o: &crate::capacity::Offering) {
        let min = |p: Option<f64>| Some(p.map_or(o.price, |p| p.min(o.price)));
        match o.capacity_type.as_str() {
            CAPACITY_TYPE_ON_DEMAND => self.on_demand = min(self.on_demand),
            CAPACITY_TYPE_SPOT => self.spot = min(self.spot),
            CAPACITY_TYPE_RESERVED => self.reserved = true,
            _ => {}
        }
    }
}

/// [`accepted`], reading each option's offerings through `summary` (by position in `options`).
pub fn accepted_by<T: Borrow<InstanceType>>(
    requirements: &Requirements,
    options: &[T],
    summary: impl Fn(usize) -> OfferSummary,
) -> Vec<usize> {
    let mut kept: Vec<usize> = (0..options.len()).collect();
    if !has_min_values(requirements) {
        let ordinary: Vec<usize> = kept
            .iter()
            .copied()
            .filter(|&i| !summary(i).exotic)
            .collect();
        if !ordinary.is_empty() {
            kept = ordinary;
        }
        kept = without_unwanted_spot(requirements, kept, summary);
    }
    let n = listed(
        requirements,
        &kept
            .iter()
            .map(|&i| options[i].borrow())
            .collect::<Vec<_>>(),
    );
    kept.truncate(n);
    kept
}

/// Step 2 of [`accepted`] over `kept` (positions into the options, summarised by `summary`).
fn without_unwanted_spot(
    requirements: &Requirements,
    kept: Vec<usize>,
    summary: impl Fn(usize) -> OfferSummary,
) -> Vec<usize> {
    let allows = |ct: &str| {
        requirements
            .get(CAPACITY_TYPE_LABEL)
            .is_none_or(|r| r.has(ct))
    };
    if !allows(CAPACITY_TYPE_SPOT) || !allows(CAPACITY_TYPE_ON_DEMAND) {
        return kept;
    }
    let summaries: Vec<OfferSummary> = kept.iter().map(|&i| summary(i)).collect();
    let cheapest_on_demand = summaries
        .iter()
        .filter_map(|s| s.on_demand)
        .fold(f64::INFINITY, f64::min);
    let any_spot = summaries.iter().any(|s| s.spot.is_some());
    if !any_spot || cheapest_on_demand == f64::INFINITY {
        return kept;
    }
    let wanted: Vec<usize> = kept
        .iter()
        .zip(&summaries)
        .filter(|(_, s)| s.reserved || s.spot.is_none_or(|p| p <= cheapest_on_demand))
        .map(|(&i, _)| i)
        .collect();
    if wanted.is_empty() { kept } else { wanted }
}

/// How `minValues` is enforced when the instance types that fit cannot meet it (upstream
/// `--min-values-policy` / `MIN_VALUES_POLICY`, v1.6, `pkg/operator/options/options.go`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MinValuesPolicy {
    /// The NodeClaim is not created and the pod stays pending, with the shortfall as its reason.
    #[default]
    Strict,
    /// Each `minValues` the fitting instance types cannot meet is lowered to the number of
    /// distinct values they offer, and the NodeClaim is annotated
    /// `karpenter.sh/nodeclaim-min-values-relaxed: "true"` (upstream `scheduling/nodeclaim.go`).
    BestEffort,
}

impl MinValuesPolicy {
    /// `Strict` or `BestEffort`, as `MIN_VALUES_POLICY` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            MinValuesPolicy::Strict => "Strict",
            MinValuesPolicy::BestEffort => "BestEffort",
        }
    }
}

impl std::fmt::Display for MinValuesPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MinValuesPolicy {
    type Err = String;

    /// Parses `Strict` or `BestEffort`, case-sensitive as upstream's option is.
    ///
    /// Errors: any other value, e.g. `invalid MIN_VALUES_POLICY "strict" (Strict or BestEffort)`.
    fn from_str(s: &str) -> Result<MinValuesPolicy, String> {
        match s {
            "Strict" => Ok(MinValuesPolicy::Strict),
            "BestEffort" => Ok(MinValuesPolicy::BestEffort),
            _ => Err(format!(
                "invalid MIN_VALUES_POLICY {s:?} (Strict or BestEffort)"
            )),
        }
    }
}

/// A requirement whose `minValues` a set of instance types does not meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinValuesShortfall {
    /// The requirement's key, e.g. `node.kubernetes.io/instance-type`.
    pub key: String,
    /// Its `minValues`.
    pub needed: usize,
    /// How many distinct allowed values the instance types have.
    pub left: usize,
}

/// The first requirement with `minValues` that `types` do not meet: fewer distinct values of its
/// key (an instance type's own label, every zone and capacity type its offerings have, or its
/// name for `node.kubernetes.io/instance-type`) that the requirement allows than `minValues`
/// (upstream `InstanceTypes.SatisfiesMinValues`). `None` when
/// every one is met.
pub fn min_values_shortfall<T: Borrow<InstanceType>>(
    requirements: &Requirements,
    types: &[T],
) -> Option<MinValuesShortfall> {
    requirements.iter().find_map(|req| {
        let needed = req.min_values?;
        let mut values: HashSet<&str> = HashSet::new();
        for t in types.iter().map(Borrow::borrow) {
            let t: &InstanceType = t;
            if req.key == INSTANCE_TYPE_LABEL {
                values.insert(t.name.as_str());
            } else if let Some(vals) = t.requirements.get(&req.key).and_then(|r| r.values()) {
                values.extend(vals.iter().map(String::as_str));
            }
        }
        values.retain(|v| req.has(v));
        (values.len() < needed).then(|| MinValuesShortfall {
            key: req.key.clone(),
            needed,
            left: values.len(),
        })
    })
}

/// How many of `types` (cheapest first) a NodeClaim lists: the first [`MAX_INSTANCE_TYPES`], or
/// more when fewer would break a requirement's `minValues` (the shortest prefix that keeps every
/// `minValues`, or all of them when none does). Upstream refuses such a launch instead; keeping
/// the options the NodePool demands is what its author asked for.
pub fn listed<T: Borrow<InstanceType>>(requirements: &Requirements, types: &[T]) -> usize {
    if types.len() <= MAX_INSTANCE_TYPES
        || min_values_shortfall(requirements, &types[..MAX_INSTANCE_TYPES]).is_none()
    {
        return types.len().min(MAX_INSTANCE_TYPES);
    }
    (MAX_INSTANCE_TYPES + 1..=types.len())
        .find(|&n| min_values_shortfall(requirements, &types[..n]).is_none())
        .unwrap_or(types.len())
}
