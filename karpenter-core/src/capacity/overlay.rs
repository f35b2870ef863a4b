//! NodeOverlays applied to the instance types of each NodePool, pure: which overlays are
//! invalid or conflict, and the instance types with overlaid prices and capacity that scheduling
//! then simulates with (upstream `pkg/controllers/nodeoverlay/controller.go` and `store.go`,
//! `AdjustedPrice` in `pkg/cloudprovider/types.go`). The NodeOverlay controller turns the
//! verdicts into `ValidationSucceeded` conditions and publishes the instance types.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crds::labels::{NODEPOOL_LABEL, normalize_label_key};
use crds::nodeoverlay::{NodeOverlay, precedence};
use crds::validation::{self, is_valid_price, is_valid_price_adjustment};
use crds::{NodePool, conditions::reason};

use crate::capacity::InstanceType;
use crate::scheduling::requirements::{Requirement, RequirementError, Requirements};
use crate::scheduling::resources::{QuantityError, Resources};

/// How a NodeOverlay changes an offering's price (USD/hour), parsed from `spec.price` or
/// `spec.priceAdjustment`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PriceChange {
    /// `price: "0.432"`: the offering costs this much, whatever the cloud price.
    Set(f64),
    /// `priceAdjustment: "-0.5"`: this amount is added to the cloud price.
    Add(f64),
    /// `priceAdjustment: "+10%"`: the cloud price changes by this percentage of itself.
    Percent(f64),
}

/// Why a NodeOverlay cannot be applied; the text becomes the message of its
/// `ValidationSucceeded=False` condition with reason `RuntimeValidation`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OverlayError {
    /// The spec breaks validation rules (`crds::validation::validate_nodeoverlay`); the text
    /// is `field: message; field: message`.
    #[error("{0}")]
    Invalid(String),
    /// `spec.price` is not an unsigned decimal (e.g. `0.432`).
    #[error("spec.price: {0:?} is not a price in USD/hour")]
    Price(String),
    /// `spec.priceAdjustment` is not a signed amount or percentage (e.g. `-0.5`, `+10%`).
    #[error("spec.priceAdjustment: {0:?} is not a signed amount or percentage")]
    PriceAdjustment(String),
    /// A `spec.capacity` amount is not a Kubernetes quantity.
    #[error("spec.capacity[{resource}]: {source}")]
    Capacity {
        /// The resource name, e.g. `hugepages-1Gi`.
        resource: String,
        /// The quantity parser's error.
        source: QuantityError,
    },
    /// A requirement cannot be built (unknown operator, missing or non-integer value).
    #[error("spec.requirements: {0}")]
    Requirement(#[from] RequirementError),
}

impl PriceChange {
    /// Parses `spec.price`: an unsigned decimal in USD/hour.
    ///
    /// Errors: [`OverlayError::Price`] when it does not match the CRD pattern.
    pub fn parse_price(price: &str) -> Result<PriceChange, OverlayError> {
        let invalid = || OverlayError::Price(price.to_string());
        if !is_valid_price(price) {
            return Err(invalid());
        }
        price.parse().map(PriceChange::Set).map_err(|_| invalid())
    }

    /// Parses `spec.priceAdjustment`: `+`/`-` and an amount in USD/hour, or a percentage with
    /// a trailing `%` (no lower than `-100%`).
    ///
    /// Errors: [`OverlayError::PriceAdjustment`] when it does not match the CRD pattern.
    pub fn parse_adjustment(adjustment: &str) -> Result<PriceChange, OverlayError> {
        let invalid = || OverlayError::PriceAdjustment(adjustment.to_string());
        if !is_valid_price_adjustment(adjustment) {
            return Err(invalid());
        }
        match adjustment.strip_suffix('%') {
            Some(percent) => percent.parse().map(PriceChange::Percent),
            None => adjustment.parse().map(PriceChange::Add),
        }
        .map_err(|_| invalid())
    }
}

/// The price (USD/hour) of an offering whose cloud price is `cloud_price` under `change`:
/// `Set` replaces it, `Add` adds to it, `Percent(p)` multiplies it by `1 + p/100`; a result
/// below zero is zero (upstream `AdjustedPrice`).
pub fn adjusted_price(cloud_price: f64, change: &PriceChange) -> f64 {
    let price = match *change {
        PriceChange::Set(price) => price,
        PriceChange::Add(delta) => cloud_price + delta,
        PriceChange::Percent(p) => cloud_price * (1.0 + p / 100.0),
    };
    price.max(0.0)
}

/// A NodeOverlay ready to apply: validated and parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedOverlay {
    /// The overlay's name.
    pub name: String,
    /// Its weight; unset is 0.
    pub weight: i32,
    /// Its requirements, deprecated label keys normalized.
    pub requirements: Requirements,
    /// Its price change, if it sets `price` or `priceAdjustment`.
    pub price: Option<PriceChange>,
    /// Its capacity by resource name, in units (bytes for `hugepages-*`, counts otherwise).
    pub capacity: BTreeMap<String, i64>,
}

impl ParsedOverlay {
    /// Validates (`crds::validation::validate_nodeoverlay`) and parses `overlay`.
    ///
    /// Errors: [`OverlayError::Invalid`] listing every validation failure, or the first
    /// value that does not parse.
    pub fn parse(overlay: &NodeOverlay) -> Result<ParsedOverlay, OverlayError> {
        let errors = validation::validate_nodeoverlay(overlay);
        if !errors.is_empty() {
            return Err(OverlayError::Invalid(validation::summarize(&errors)));
        }
        let spec = &overlay.spec;
        let mut requirements = Requirements::new();
        for r in &spec.requirements {
            let key = normalize_label_key(&r.key);
            requirements.add(Requirement::new(key, r.operator, &r.values)?);
        }
        let price = match (&spec.price, &spec.price_adjustment) {
            (Some(price), _) => Some(PriceChange::parse_price(price)?),
            (None, Some(adjustment)) => Some(PriceChange::parse_adjustment(adjustment)?),
            (None, None) => None,
        };
        let mut capacity = BTreeMap::new();
        for (resource, quantity) in &spec.capacity {
            let mut amount = Resources::default();
            amount
                .set_parsed(resource, &quantity.0)
                .map_err(|source| OverlayError::Capacity {
                    resource: resource.clone(),
                    source,
                })?;
            capacity.insert(resource.clone(), amount.get(resource));
        }
        Ok(ParsedOverlay {
            name: overlay.name().to_string(),
            weight: overlay.weight(),
            requirements,
            price,
            capacity,
        })
    }
}

/// One NodePool as overlays see it: its name, its template labels and the instance types the
/// cloud provider offers it, with cloud prices (not already overlaid).
#[derive(Clone, Debug)]
pub struct OverlayPool {
    /// The NodePool's name, matched by `karpenter.sh/nodepool` requirements.
    pub name: String,
    /// `spec.template.metadata.labels`, matched like instance-type labels.
    pub labels: BTreeMap<String, String>,
    /// The pool's instance types.
    pub instance_types: Vec<Arc<InstanceType>>,
}

impl OverlayPool {
    /// `nodepool` with its instance types. The pool's `spec.template.spec.requirements` play no
    /// part: an overlay matches what the cloud provider offers the pool.
    pub fn new(nodepool: &NodePool, instance_types: Vec<Arc<InstanceType>>) -> OverlayPool {
        OverlayPool {
            name: nodepool.metadata.name.clone().unwrap_or_default(),
            labels: nodepool.spec.template.metadata.labels.clone(),
            instance_types,
        }
    }
}

/// What became of one NodeOverlay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid and without conflict; its changes are in [`Evaluation::pools`] (where a higher
    /// weight did not take precedence). `ValidationSucceeded=True`.
    Applied,
    /// Invalid; the text says why. `ValidationSucceeded=False`, reason `RuntimeValidation`.
    RuntimeValidation(String),
    /// An overlay of the same weight processed before it changes the same offering's price or
    /// the same resource of some instance type; applied nowhere.
    /// `ValidationSucceeded=False`, reason `Conflict`.
    Conflict,
}

impl Verdict {
    /// The `ValidationSucceeded=False` reason, `None` when applied.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Verdict::Applied => None,
            Verdict::RuntimeValidation(_) => Some(reason::RUNTIME_VALIDATION),
            Verdict::Conflict => Some(reason::CONFLICT),
        }
    }

    /// The `ValidationSucceeded=False` message, empty when applied.
    pub fn message(&self) -> &str {
        match self {
            Verdict::Applied => "",
            Verdict::RuntimeValidation(message) => message,
            Verdict::Conflict => reason::CONFLICT_MESSAGE,
        }
    }
}

/// The result of [`evaluate`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    /// Each overlay's verdict, by overlay name.
    pub verdicts: BTreeMap<String, Verdict>,
    /// Each pool's instance types, by pool name, in the order given: overlaid ones are new
    /// values, untouched ones the same `Arc`s.
    pub pools: BTreeMap<String, Vec<Arc<InstanceType>>>,
}

/// The changes applied overlays make to one instance type of one pool, each with the weight
/// of the last (lowest-precedence) applied overlay that also set it, for conflict checks.
#[derive(Debug, Default)]
struct TypeChanges {
    /// By offering index: the price change that applies.
    prices: BTreeMap<usize, (PriceChange, i32)>,
    /// By resource name: the amount that applies.
    capacity: BTreeMap<String, (i64, i32)>,
}

/// Applies `overlays` to every pool's instance types. Overlays are taken in precedence order
/// ([`precedence`]: weight, then name later in the alphabet first). An invalid one gets
/// [`Verdict::RuntimeValidation`]. An overlay matches an instance type of a pool when its
/// requirements are compatible with the type's requirements plus the pool's template labels
/// and `karpenter.sh/nodepool In [pool]` (a key none of them define matches only NotIn and
/// DoesNotExist) and it selects at least one offering by zone and capacity type. It conflicts
/// ([`Verdict::Conflict`], applied nowhere) when, for some matched type, an applied overlay of
/// the same weight already changes the price of one of its matched offerings or sets one of
/// its resources. Otherwise it applies everywhere it matches: each offering takes the price
/// change of the first overlay that matches it, relative to the cloud price; each resource the
/// amount of the first overlay that sets it, in capacity and in allocatable (capacity minus
/// overhead). Price and capacity from different overlays combine.
/// `overlays` may be held by value or shared (`&[NodeOverlay]`, `&[Arc<NodeOverlay>]`).
pub fn evaluate<O: Borrow<NodeOverlay>>(overlays: &[O], pools: &[OverlayPool]) -> Evaluation {
    let mut ordered: Vec<&NodeOverlay> = overlays.iter().map(Borrow::borrow).collect();
    ordered.sort_by(|a, b| precedence(a, b));
    let type_requirements: Vec<Vec<Requirements>> = pools
        .iter()
        .map(|pool| {
            let mut base = Requirements::from_labels(&pool.labels);
            base.add(Requirement::is_in(NODEPOOL_LABEL, [pool.name.as_str()]));
            let with_type = |it: &Arc<InstanceType>| {
                let mut reqs = base.clone();
                reqs.add_all(&it.requirements);
                reqs
            };
            pool.instance_types.iter().map(with_type).collect()
        })
        .collect();
    let mut changes: BTreeMap<(usize, usize), TypeChanges> = BTreeMap::new();
    let mut verdicts = BTreeMap::new();
    for overlay in ordered {
        let verdict = match ParsedOverlay::parse(overlay) {
            Err(e) => Verdict::RuntimeValidation(e.to_string()),
            Ok(parsed) => {
                let matches = matched_types(&parsed, pools, &type_requirements);
                if conflicts(&parsed, &matches, &changes) {
                    Verdict::Conflict
                } else {
                    record(&parsed, &matches, &mut changes);
                    Verdict::Applied
                }
            }
        };
        verdicts.insert(overlay.name().to_string(), verdict);
    }
    let pools = pools
        .iter()
        .enumerate()
        .map(|(p, pool)| {
            let types = pool.instance_types.iter().enumerate().map(|(t, it)| {
                changes
                    .get(&(p, t))
                    .map_or_else(|| Arc::clone(it), |c| Arc::new(apply(it, c)))
            });
            (pool.name.clone(), types.collect())
        })
        .collect();
    Evaluation { verdicts, pools }
}

/// `(pool index, type index, matched offering indices)` for every type `overlay` matches.
type Matches = Vec<(usize, usize, Vec<usize>)>;

fn matched_types(
    overlay: &ParsedOverlay,
    pools: &[OverlayPool],
    reqs: &[Vec<Requirements>],
) -> Matches {
    let mut found = Vec::new();
    for (p, pool) in pools.iter().enumerate() {
        for (t, it) in pool.instance_types.iter().enumerate() {
            let compatible = reqs[p][t]
                .compatible(&overlay.requirements, |_| false)
                .is_ok();
            if !compatible {
                continue;
            }
            let offerings: Vec<usize> = it
                .offerings
                .iter()
                .enumerate()
                .filter(|(_, o)| o.compatible(&overlay.requirements))
                .map(|(i, _)| i)
                .collect();
            if !offerings.is_empty() {
                found.push((p, t, offerings));
            }
        }
    }
    found
}

/// Whether an applied overlay of the same weight already changes what `overlay` would.
fn conflicts(
    overlay: &ParsedOverlay,
    matches: &Matches,
    changes: &BTreeMap<(usize, usize), TypeChanges>,
) -> bool {
    let same_weight = |w: i32| w == overlay.weight;
    matches.iter().any(|(p, t, offerings)| {
        let Some(c) = changes.get(&(*p, *t)) else {
            return false;
        };
        let price = overlay.price.is_some()
            && offerings
                .iter()
                .any(|o| c.prices.get(o).is_some_and(|(_, w)| same_weight(*w)));
        let capacity = overlay
            .capacity
            .keys()
            .any(|r| c.capacity.get(r).is_some_and(|(_, w)| same_weight(*w)));
        price || capacity
    })
}

/// Records `overlay`'s changes where no earlier overlay made them, and its weight everywhere.
fn record(
    overlay: &ParsedOverlay,
    matches: &Matches,
    changes: &mut BTreeMap<(usize, usize), TypeChanges>,
) {
    if overlay.price.is_none() && overlay.capacity.is_empty() {
        return;
    }
    let weight = overlay.weight;
    for (p, t, offerings) in matches {
        let c = changes.entry((*p, *t)).or_default();
        if let Some(change) = overlay.price {
            for o in offerings {
                c.prices
                    .entry(*o)
                    .and_modify(|(_, w)| *w = weight)
                    .or_insert((change, weight));
            }
        }
        for (resource, amount) in &overlay.capacity {
            c.capacity
                .entry(resource.clone())
                .and_modify(|(_, w)| *w = weight)
                .or_insert((*amount, weight));
        }
    }
}

/// A copy of `it` with the changes applied and the overlay flags set.
fn apply(it: &InstanceType, changes: &TypeChanges) -> InstanceType {
    let mut out = it.clone();
    for (o, (change, _)) in &changes.prices {
        if let Some(offering) = out.offerings.get_mut(*o) {
            offering.price = adjusted_price(offering.price, change);
        }
    }
    for (resource, (amount, _)) in &changes.capacity {
        out.capacity.set(resource, *amount);
        let allocatable = *amount - out.overhead.get(resource);
        out.allocatable.set(resource, allocatable);
    }
    out.price_overlay_applied |= !changes.prices.is_empty();
    out.capacity_overlay_applied |= !changes.capacity.is_empty();
    out
}
