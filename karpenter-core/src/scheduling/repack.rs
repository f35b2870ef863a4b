//! The cost re-pack that follows the first-fit solve. First fit keeps adding pods to a NodeClaim
//! while any of its instance types still fits, so claims grow to the largest types and the
//! cheapest type that finally fits is often a poor match for what the claim holds (GPU nodes
//! full of CPU-only pods, nodes rounded up a size for one small pod). Here the pods that may
//! move (see [`super::topology::Topology::mobility`]) are taken out of their claims and packed
//! again, guided by the dual prices of the fleet-cost LP (what each resource is worth on the
//! cheapest possible fleet):
//!
//! 1. each claim that keeps pods (a *fixed* bin) takes movable pods into its slack, growing to a
//!    larger type when the pods it gains are worth more than the price difference;
//! 2. pods that must keep their claim's requirements go to new claims with those requirements,
//!    then fill the new claims' slack the same way;
//! 3. the remaining pods go to new claims: repeatedly the instance type whose first-fit filling
//!    (most valuable pods first) costs least per unit of worth, as many copies as the pods allow.
//!
//! The caller keeps the result only when it is cheaper than the first-fit plan.

use microlp::{ComparisonOp, OptimizationDirection, Problem};

use super::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Resources};

/// How many of the cheapest fitting types a fixed bin considers growing into.
const GROWTH_CANDIDATES: usize = 32;
/// At most this many admissible sets get LP constraints (the ones holding the most pods, plus
/// the set of every candidate); fewer constraints give a weaker but still valid pricing.
const MAX_SETS: usize = 64;
/// The re-pack is skipped (first fit stands) when shapes x candidates exceeds this, which bounds
/// its time for workloads with thousands of distinct pod sizes.
pub const MAX_WORK: usize = 4_000_000;

/// Resource names as dense vector positions (cpu, memory, pods first, then what else is used).
#[derive(Clone, Debug)]
pub struct Dims(Vec<String>);

impl Dims {
    /// The dimensions needed for `amounts`: cpu, memory and pods always, ephemeral storage and
    /// extended resources when some amount uses them.
    pub fn of<'a>(amounts: impl IntoIterator<Item = &'a Resources>) -> Dims {
        let mut names: Vec<String> = [CPU, MEMORY, PODS].map(String::from).to_vec();
        for r in amounts {
            for (name, v) in r.iter() {
                if v > 0 && !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
        }
        Dims(names)
    }

    /// `r` as a dense vector (cpu in millicores, bytes, counts).
    pub fn dense(&self, r: &Resources) -> Vec<i64> {
        self.0.iter().map(|n| r.get(n)).collect()
    }

    /// How many resources a dense vector holds: cpu, memory, pods and whatever else is used.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no dimensions (never: cpu, memory and pods are always present).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Dimension `d` of a dense amount in LP units near 1: cores, GiB, pods, units.
    fn scaled(&self, d: usize, v: i64) -> f64 {
        match self.0[d].as_str() {
            CPU => v as f64 / 1000.0,
            MEMORY | EPHEMERAL_STORAGE => v as f64 / (1u64 << 30) as f64,
            _ => v as f64,
        }
    }
}

/// An instance type a bin may become.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Index into the NodePool's instance types.
    pub index: usize,
    /// Cheapest compatible offering, USD/hour.
    pub price: f64,
    /// Allocatable minus DaemonSet overhead, dense.
    pub room: Vec<i64>,
    /// Shapes that fit, most worth per share of this type's room first (set by [`pack`]).
    pub order: Vec<usize>,
}

/// Sort by price and drop every type another at most as expensive one dominates (at least as
/// much room in every dimension): the cheapest fitting type is always among the rest.
pub fn non_dominated(mut candidates: Vec<Candidate>) -> Vec<Candidate> {
    candidates.sort_by(|a, b| a.price.total_cmp(&b.price).then(a.index.cmp(&b.index)));
    let mut kept: Vec<Candidate> = Vec::new();
    for c in candidates {
        let dominated = kept
            .iter()
            .any(|k| k.room.iter().zip(&c.room).all(|(a, b)| a >= b));
        if !dominated {
            kept.push(c);
        }
    }
    kept
}

/// Pods with the same requests and the same placement rules.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Requests of one pod, dense.
    pub request: Vec<i64>,
    /// Worth of one pod at the dual prices, USD/hour.
    pub worth: f64,
    /// `Some(c)`: only bins of class `c` (the requirements it was planned with); `None`: any bin.
    pub class: Option<usize>,
    /// Hostname anti-affinity terms that select these pods (sorted).
    pub repellers: Vec<usize>,
    /// Pods (solver indexes) still to place.
    pub pods: Vec<usize>,
}

/// A NodeClaim being re-packed.
#[derive(Clone, Debug)]
pub struct Bin {
    /// Class: index of its requirements (and candidate list).
    pub class: usize,
    /// Requests of its pods (without DaemonSet overhead), dense.
    pub used: Vec<i64>,
    /// Hostname anti-affinity terms its pods own (sorted).
    pub repels: Vec<usize>,
    /// Its pods, as indexes into the solver's [`Input::pods`](super::solver::Input::pods).
    pub pods: Vec<usize>,
}

/// What one pod of each shape is worth, USD/hour: its share of the fleet-cost lower bound, from
/// the dual of the covering LP. The LP (see `simulate::bound`) covers, for every distinct
/// *admissible set* A (the candidates a shape fits in), the requests of the pods whose admissible
/// set lies within A with the types in A. Its dual has a price `π[A][r]` per set and resource
/// with `Σ_{A∋t} π[A]·room_t ≤ price_t` for every type `t`; a pod is worth `Σ_{A ⊇ adm} π[A]·req`.
/// So the pods one node of type `t` holds are never worth more than its price, and a filling
/// whose worth equals the price is as cheap as the bound allows.
///
/// `shapes` are (request, pod count). `None` when the LP has no finite optimum or a shape fits
/// no candidate.
pub fn worths(
    dims: &Dims,
    candidates: &[Candidate],
    shapes: &[(&[i64], usize)],
) -> Option<Vec<f64>> {
    let fits = |c: &Candidate, request: &[i64]| c.room.iter().zip(request).all(|(r, q)| r >= q);
    let admissible: Vec<Vec<bool>> = shapes
        .iter()
        .map(|(request, _)| candidates.iter().map(|c| fits(c, request)).collect())
        .collect();
    if admissible.iter().any(|a| !a.iter().any(|x| *x)) {
        return None;
    }
    let mut pods_in: Vec<(&Vec<bool>, usize)> = Vec::new();
    for (adm, (_, count)) in admissible.iter().zip(shapes) {
        match pods_in.iter_mut().find(|(a, _)| *a == adm) {
            Some(entry) => entry.1 += count,
            None => pods_in.push((adm, *count)),
        }
    }
    let everything = vec![true; candidates.len()];
    let mut sets: Vec<&Vec<bool>> = if pods_in.len() > MAX_SETS {
        pods_in.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        pods_in.truncate(MAX_SETS - 1);
        let mut kept: Vec<&Vec<bool>> = pods_in.iter().map(|(a, _)| *a).collect();
        kept.push(&everything);
        kept
    } else {
        pods_in.iter().map(|(a, _)| *a).collect()
    };
    sets.sort();
    sets.dedup();
    let subset = |a: &[bool], b: &[bool]| a.iter().zip(b).all(|(x, y)| !*x || *y);
    let mut problem = Problem::new(OptimizationDirection::Maximize);
    // vars[a][d]: the dual price of resource d within set a (only where some pod demands it).
    let mut vars: Vec<Vec<Option<microlp::Variable>>> = Vec::with_capacity(sets.len());
    for set in &sets {
        let mut demand = vec![0i64; dims.len()];
        for ((request, count), adm) in shapes.iter().zip(&admissible) {
            if subset(adm, set) {
                for (d, q) in demand.iter_mut().zip(request.iter()) {
                    *d += q * *count as i64;
                }
            }
        }
        vars.push(
            (0..dims.len())
                .map(|d| {
                    (demand[d] > 0)
                        .then(|| problem.add_var(dims.scaled(d, demand[d]), (0.0, f64::INFINITY)))
                })
                .collect(),
        );
    }
    for (t, c) in candidates.iter().enumerate() {
        let mut terms: Vec<(microlp::Variable, f64)> = Vec::new();
        for (a, set) in sets.iter().enumerate() {
            if !set[t] {
                continue;
            }
            for (d, var) in vars[a].iter().enumerate() {
                if let Some(v) = var
                    && c.room[d] > 0
                {
                    terms.push((*v, dims.scaled(d, c.room[d])));
                }
            }
        }
        if !terms.is_empty() {
            problem.add_constraint(terms.as_slice(), ComparisonOp::Le, c.price);
        }
    }
    let solution = problem.solve().ok()?;
    Some(
        shapes
            .iter()
            .zip(&admissible)
            .map(|((request, _), adm)| {
                let mut w = 0.0;
                for (a, set) in sets.iter().enumerate() {
                    if subset(adm, set) {
                        for d in 0..dims.len() {
                            if let Some(v) = vars[a][d] {
                                w += solution[v] * dims.scaled(d, request[d]);
                            }
                        }
                    }
                }
                w
            })
            .collect(),
    )
}

/// First fit of the shapes (in `order`) into `slack`: how many of each, and their worth.
fn fill(
    slack: &mut [i64],
    shapes: &[Shape],
    order: &[usize],
    accept: impl Fn(&Shape) -> bool,
    picked: &mut Vec<(usize, usize)>,
) -> f64 {
    picked.clear();
    let mut total = 0.0;
    for &s in order {
        let shape = &shapes[s];
        if shape.pods.is_empty() || !accept(shape) {
            continue;
        }
        let mut k = shape.pods.len() as i64;
        for (need, left) in shape.request.iter().zip(slack.iter()) {
            if *need > 0 {
                k = k.min(left / need);
            }
        }
        if k <= 0 {
            continue;
        }
        for (need, left) in shape.request.iter().zip(slack.iter_mut()) {
            *left -= need * k;
        }
        picked.push((s, k as usize));
        total += shape.worth * k as f64;
    }
    total
}

fn take(shapes: &mut [Shape], picked: &[(usize, usize)], bin: &mut Bin) {
    for &(s, k) in picked {
        let shape = &mut shapes[s];
        for _ in 0..k {
            if let Some(p) = shape.pods.pop() {
                bin.pods.push(p);
                for (u, r) in bin.used.iter_mut().zip(&shape.request) {
                    *u += r;
                }
            }
        }
    }
}

fn accepts(bin_class: usize, repels: &[usize], shape: &Shape) -> bool {
    shape.class.is_none_or(|c| c == bin_class)
        && !shape
            .repellers
            .iter()
            .any(|r| repels.binary_search(r).is_ok())
}

/// Fill each bin's slack, growing it to one of its cheapest fitting types when the pods gained
/// are worth more than the price difference.
fn fill_bins(bins: &mut [Bin], shapes: &mut [Shape], classes: &[Vec<Candidate>]) {
    let mut picked = Vec::new();
    let mut best_picked = Vec::new();
    let mut slack = Vec::new();
    for bin in bins.iter_mut() {
        if shapes.iter().all(|s| s.pods.is_empty()) {
            return;
        }
        let fitting = classes[bin.class]
            .iter()
            .filter(|c| c.room.iter().zip(&bin.used).all(|(r, u)| r >= u))
            .take(GROWTH_CANDIDATES);
        let mut base: Option<f64> = None;
        let mut best: Option<f64> = None;
        for c in fitting {
            let base_price = *base.get_or_insert(c.price);
            slack.clear();
            slack.extend(c.room.iter().zip(&bin.used).map(|(r, u)| r - u));
            let gained = fill(
                &mut slack,
                shapes,
                &c.order,
                |s| accepts(bin.class, &bin.repels, s),
                &mut picked,
            );
            // Slack of the cheapest fitting type is free; growing must pay for itself.
            let growth = c.price - base_price;
            let gain = gained - growth;
            if !picked.is_empty() && (growth <= 0.0 || gain > 0.0) && best.is_none_or(|b| gain > b)
            {
                best = Some(gain);
                std::mem::swap(&mut picked, &mut best_picked);
            }
        }
        if best.is_some() {
            take(shapes, &best_picked, bin);
        }
    }
}

/// Open new bins of `class` for the accepted shapes until none is left: each time the type
/// whose filling costs least per unit of worth, repeated while the same filling is possible.
///
/// `None` when some accepted pod fits no candidate type.
fn open_bins(
    class: usize,
    candidates: &[Candidate],
    shapes: &mut [Shape],
    accept: impl Fn(&Shape) -> bool,
    dims: usize,
    out: &mut Vec<Bin>,
) -> Option<()> {
    let mut picked = Vec::new();
    let mut best_picked = Vec::new();
    let mut slack = Vec::new();
    while shapes.iter().any(|s| !s.pods.is_empty() && accept(s)) {
        let mut best: Option<(f64, f64)> = None;
        for c in candidates {
            slack.clear();
            slack.extend_from_slice(&c.room);
            let gained = fill(&mut slack, shapes, &c.order, &accept, &mut picked);
            if picked.is_empty() {
                continue;
            }
            let pods: usize = picked.iter().map(|(_, k)| k).sum();
            // Worthless pods (no demanded resource) still need a node: count them a little.
            let cost_per_worth = c.price / (gained + 1e-9 * pods as f64);
            if best.is_none_or(|(b, price)| {
                cost_per_worth < b || (cost_per_worth == b && c.price < price)
            }) {
                best = Some((cost_per_worth, c.price));
                std::mem::swap(&mut picked, &mut best_picked);
            }
        }
        best?;
        let copies = best_picked
            .iter()
            .map(|&(s, k)| shapes[s].pods.len() / k)
            .min()
            .unwrap_or(1)
            .max(1);
        for _ in 0..copies {
            let mut bin = Bin {
                class,
                used: vec![0; dims],
                repels: Vec::new(),
                pods: Vec::new(),
            };
            take(shapes, &best_picked, &mut bin);
            out.push(bin);
        }
    }
    Some(())
}

/// Re-pack `shapes` into `bins` (the fixed bins, whose pods stay) and new bins. `classes[c]`
/// lists the candidate types of class `c` cheapest first ([`non_dominated`]); new bins for
/// unrestricted pods get class `free_class`. Returns the bins, fixed ones first and in order.
///
/// `None` when a pod fits no candidate type of its class (the caller keeps the first-fit plan).
pub fn pack(
    mut bins: Vec<Bin>,
    shapes: &mut [Shape],
    mut classes: Vec<Vec<Candidate>>,
    free_class: usize,
    dims: usize,
) -> Option<Vec<Bin>> {
    for candidates in &mut classes {
        for c in candidates.iter_mut() {
            c.order = fill_order(&c.room, shapes);
        }
    }
    fill_bins(&mut bins, shapes, &classes);
    // Pods that must keep their requirements: new bins per class, then their slack.
    let fixed = bins.len();
    for (class, candidates) in classes.iter().enumerate() {
        open_bins(
            class,
            candidates,
            shapes,
            |s| s.class == Some(class),
            dims,
            &mut bins,
        )?;
    }
    fill_bins(&mut bins[fixed..], shapes, &classes);
    open_bins(
        free_class,
        &classes[free_class],
        shapes,
        |s| s.class.is_none(),
        dims,
        &mut bins,
    )?;
    Some(bins)
}

/// The shapes that fit `room`, by worth per largest share of `room` one pod takes (so a type's
/// scarce resource goes to the pods that are worth most for it).
fn fill_order(room: &[i64], shapes: &[Shape]) -> Vec<usize> {
    let mut keyed: Vec<(f64, usize)> = shapes
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let mut share = 0.0f64;
            for (q, r) in s.request.iter().zip(room) {
                if *q > 0 {
                    if *r < *q {
                        return None;
                    }
                    share = share.max(*q as f64 / *r as f64);
                }
            }
            Some((s.worth / share.max(f64::MIN_POSITIVE), i))
        })
        .collect();
    keyed.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    keyed.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(index: usize, price: f64, cpu: i64, memory_gib: i64) -> Candidate {
        Candidate {
            index,
            price,
            room: vec![cpu * 1000, memory_gib << 30, 110],
            order: Vec::new(),
        }
    }

    fn shape(cpu_milli: i64, memory_gib: i64, pods: Vec<usize>) -> Shape {
        Shape {
            request: vec![cpu_milli, memory_gib << 30, 1],
            worth: 0.0,
            class: None,
            repellers: Vec::new(),
            pods,
        }
    }

    fn dims() -> Dims {
        Dims::of(&Vec::<Resources>::new())
    }

    #[test]
    fn dominated_types_are_dropped() {
        let kept = non_dominated(vec![
            candidate(0, 0.2, 2, 8),
            candidate(1, 0.3, 2, 4),
            candidate(2, 0.4, 4, 16),
        ]);
        let names: Vec<usize> = kept.iter().map(|c| c.index).collect();
        assert_eq!(names, vec![0, 2], "type 1 costs more than type 0 for less");
    }

    #[test]
    fn worth_prices_the_binding_resource_per_admissible_set() {
        // Types at 0.05 USD/hour per core; small pods may use either, 6-core pods only the
        // 8-core type, which is dearer per core (0.075). Each pod's worth is its share of the
        // cheapest fleet: 0.05 per core for small pods, 0.075 for large ones.
        let types = vec![candidate(0, 0.2, 4, 16), candidate(1, 0.6, 8, 32)];
        let small = vec![1000, 1 << 30, 1];
        let large = vec![6000, 1 << 30, 1];
        let w = worths(&dims(), &types, &[(&small, 40), (&large, 2)]).expect("finite");
        assert!((w[0] - 0.05).abs() < 1e-9, "{w:?}");
        assert!((w[1] - 6.0 * 0.075).abs() < 1e-9, "{w:?}");
        let too_big = vec![16_000, 1 << 30, 1];
        assert!(worths(&dims(), &types, &[(&too_big, 1)]).is_none());
    }

    #[test]
    fn many_admissible_sets_still_price_no_filling_above_its_type() {
        // 80 sizes, each its own admissible set (more than MAX_SETS): no type's worth of pods
        // exceeds its price, the dual property the re-pack relies on.
        let types: Vec<Candidate> = (1..=80)
            .map(|c| {
                candidate(
                    c as usize,
                    0.05 * c as f64 + 0.01 * (c % 7) as f64,
                    c,
                    4 * c,
                )
            })
            .collect();
        let requests: Vec<Vec<i64>> = (1..=80).map(|c| vec![c * 1000 - 500, 1 << 30, 1]).collect();
        let shapes: Vec<(&[i64], usize)> = requests.iter().map(|r| (r.as_slice(), 3)).collect();
        let w = worths(&dims(), &types, &shapes).expect("finite");
        assert!(w.iter().any(|x| *x > 0.0));
        for t in &types {
            for (r, worth) in requests.iter().zip(&w) {
                let copies = (t.room[0] / r[0]).min(t.room[2] / r[2]);
                assert!(
                    *worth >= 0.0 && *worth * copies as f64 <= t.price + 1e-6,
                    "type {} price {} holds {copies} pods worth {worth}",
                    t.index,
                    t.price
                );
            }
        }
    }

    #[test]
    fn new_bins_use_the_type_that_costs_least_per_worth() {
        // Ten 1.5-core pods: a 2-core type holds one (0.75 used), an 8-core type five (0.94).
        let dims = dims();
        let classes = vec![non_dominated(vec![
            candidate(0, 0.1, 2, 8),
            candidate(1, 0.4, 8, 32),
        ])];
        let mut shapes = vec![shape(1500, 1, (0..10).collect())];
        let w = worths(&dims, &classes[0], &[(&shapes[0].request, 10)]).expect("finite");
        shapes[0].worth = w[0];
        let bins = pack(Vec::new(), &mut shapes, classes, 0, dims.len()).expect("fits");
        assert_eq!(bins.len(), 2);
        assert!(bins.iter().all(|b| b.pods.len() == 5 && b.used[0] == 7500));
    }

    #[test]
    fn fixed_bins_take_pods_into_slack_but_not_repelled_ones() {
        let dims = dims();
        let classes = vec![non_dominated(vec![
            candidate(0, 0.1, 2, 8),
            candidate(1, 0.2, 4, 16),
        ])];
        let fixed = Bin {
            class: 0,
            used: vec![500, 1 << 30, 1],
            repels: vec![7],
            pods: vec![100],
        };
        let mut shapes = vec![shape(500, 1, vec![1, 2]), shape(500, 1, vec![3])];
        shapes[1].repellers = vec![7];
        for s in &mut shapes {
            s.worth = 0.05;
        }
        let bins = pack(vec![fixed], &mut shapes, classes, 0, dims.len()).expect("fits");
        assert_eq!(
            bins[0].pods,
            vec![100, 2, 1],
            "slack of the 2-core type holds two"
        );
        assert_eq!(bins.len(), 2, "the repelled pod gets a bin of its own");
        assert_eq!(bins[1].pods, vec![3]);
    }

    #[test]
    fn pinned_pods_stay_in_their_class() {
        let dims = dims();
        let classes = vec![vec![candidate(0, 0.1, 2, 8)], vec![candidate(0, 0.1, 2, 8)]];
        let fixed = Bin {
            class: 0,
            used: vec![500, 1 << 30, 1],
            repels: Vec::new(),
            pods: vec![100],
        };
        let mut shapes = vec![shape(500, 1, vec![1])];
        shapes[0].class = Some(1);
        shapes[0].worth = 0.05;
        let bins = pack(vec![fixed], &mut shapes, classes, 0, dims.len()).expect("fits");
        assert_eq!(
            bins[0].pods,
            vec![100],
            "a class-1 pod does not join a class-0 bin"
        );
        assert_eq!((bins[1].class, bins[1].pods.clone()), (1, vec![1]));
    }

    #[test]
    fn a_pod_no_type_holds_is_an_error() {
        let classes = vec![vec![candidate(0, 0.1, 2, 8)]];
        let mut shapes = vec![shape(4000, 1, vec![0])];
        shapes[0].worth = 1.0;
        assert!(pack(Vec::new(), &mut shapes, classes, 0, 3).is_none());
    }
}
