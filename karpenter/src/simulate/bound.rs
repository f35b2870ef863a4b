//! A lower bound on the hourly cost of any fleet that holds a set of pods: the optimum of a
//! linear program over instance-type counts (continuous, so the bound is the LP relaxation of
//! the real integer problem).
//!
//! Variables: `x_t ≥ 0`, how many nodes of type `t`; minimise `Σ price_t x_t` with each type at
//! its cheapest offering that is not a capacity reservation. A reservation's offering is a
//! variable of its own, `0 ≤ y_{t,k} ≤ room_k` at the reserved price, with `Σ_t y_{t,k} ≤
//! room_k` per reservation `k`: a real fleet uses at most the reservation's room, so the bound
//! stays a bound when reserved capacity costs next to nothing. Constraints, for every resource `r` (cpu, memory, pods and extended
//! resources such as GPUs):
//! - all pods: `Σ_t allocatable_{t,r} x_t ≥ Σ_p request_{p,r}`;
//! - for every distinct *admissible set* A (the types a pod's requirements admit and whose
//!   allocatable holds its requests): the pods whose admissible set lies within A must be covered
//!   by the types in A, since each of them runs on a node of such a type. E.g. a GPU pod needing
//!   10 cores cannot use the GPU of a 4-core GPU node, so its GPU, CPU and memory must all come
//!   from GPU nodes with at least 10 cores.
//!
//! And one node count per *hostname anti-affinity group*: pods of one namespace that carry the
//! same required pod anti-affinity term with topology key `kubernetes.io/hostname`, naming
//! their own namespace, whose selector matches their own labels. Each term forbids every other
//! member on its node (hostnames are unique per node), so the group needs as many nodes as it
//! has members: for every distinct admissible set A of a member, `Σ_{t∈A} x_t ≥` the members
//! whose admissible set lies within A.
//!
//! Any real fleet gives a feasible solution (count its nodes by type), so the optimum is a valid
//! lower bound. It ignores per-node DaemonSet overhead, integrality and every other topology
//! constraint (spread, affinity, anti-affinity between different terms), all of which only
//! raise a real fleet's cost.

use std::collections::BTreeMap;
use std::sync::Arc;

use microlp::{ComparisonOp, OptimizationDirection, Problem};

use karpenter_core::capacity::InstanceType;
use karpenter_core::scheduling::constraints::NamespaceSpec;
use karpenter_core::scheduling::pod::PodInfo;
use karpenter_core::scheduling::requirements::Requirements;
use karpenter_core::scheduling::resources::Resources;

/// Why no bound could be computed.
#[derive(Debug, thiserror::Error)]
pub enum BoundError {
    /// Some class of pods fits no instance type (those pods cannot be held at any price).
    #[error("pods of class {0} fit no instance type")]
    Infeasible(String),
    /// The LP solver (microlp) failed for another reason than infeasibility.
    #[error("LP solver: {0}")]
    Solver(String),
}

/// Resource units used in the LP (kept near 1 for numerical stability): cores, GiB, pods, units.
fn scaled(r: &Resources) -> BTreeMap<String, f64> {
    r.iter()
        .map(|(name, v)| {
            let x = match name {
                "cpu" => v as f64 / 1000.0,
                "memory" | "ephemeral-storage" => v as f64 / (1u64 << 30) as f64,
                _ => v as f64,
            };
            (name.to_string(), x)
        })
        .collect()
}

struct Class {
    /// Indexes of the types any pod of the class could use.
    types: Vec<usize>,
    demand: BTreeMap<String, f64>,
}

/// An instance type as a NodePool can launch it: under the pool's requirements.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The instance type, with its offerings (prices in USD/hour) and allocatable.
    pub instance_type: Arc<InstanceType>,
    /// The pool's requirements (they decide the admissible offerings and pods).
    pub requirements: Requirements,
}

/// Topology key whose domains are single nodes.
const HOSTNAME: &str = "kubernetes.io/hostname";

/// The hostname anti-affinity group of a pod (see the module docs), as an identity: its
/// namespace and the canonical selector and namespaces of the first required anti-affinity
/// term that forbids the pod's own kind on its node. `None` when it has no such term.
fn anti_affinity_group(p: &PodInfo) -> Option<String> {
    p.constraints.anti_affinity.iter().find_map(|term| {
        let own_namespace = match &term.namespaces {
            NamespaceSpec::Named(names) => names.contains(&p.key.namespace),
            NamespaceSpec::Selected(..) => false,
        };
        (term.key == HOSTNAME && own_namespace && term.selector.matches(&p.labels)).then(|| {
            format!(
                "{}/{}/{}",
                p.key.namespace,
                term.selector.canonical,
                term.namespaces.canonical()
            )
        })
    })
}

/// The bound for `pods` over `candidates` (each at its cheapest available offering under its
/// pool's requirements). Ephemeral storage is left out, as the simulated pods rarely request it.
///
/// Errors: a class fits no type, or the solver fails.
pub fn lower_bound(pods: &[&PodInfo], candidates: &[Candidate]) -> Result<f64, BoundError> {
    let types: Vec<&Arc<InstanceType>> = candidates.iter().map(|c| &c.instance_type).collect();
    // Each type at its cheapest offering outside any reservation, and its reserved offerings
    // (reservation id, price, room) apart.
    let prices: Vec<Option<f64>> = candidates
        .iter()
        .map(|c| {
            c.instance_type
                .offerings
                .iter()
                .filter(|o| {
                    o.available && o.reservation_id.is_none() && o.compatible(&c.requirements)
                })
                .map(|o| o.price)
                .min_by(f64::total_cmp)
        })
        .collect();
    let reserved: Vec<Vec<(String, f64, i64)>> = candidates
        .iter()
        .map(|c| {
            c.instance_type
                .offerings
                .iter()
                .filter(|o| o.available && o.compatible(&c.requirements))
                .filter_map(|o| {
                    let id = o.reservation_id.clone()?;
                    (o.reservation_capacity > 0).then_some((id, o.price, o.reservation_capacity))
                })
                .collect()
        })
        .collect();
    let offered = |t: usize| prices[t].is_some() || !reserved[t].is_empty();
    // Pods with the same requirements and requests have the same admissible types.
    let mut shapes: BTreeMap<String, (Vec<bool>, BTreeMap<String, f64>)> = BTreeMap::new();
    // Per hostname anti-affinity group: members by their shape.
    let mut groups: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for p in pods {
        let terms: Vec<String> = p
            .requirement_terms
            .iter()
            .map(Requirements::to_string)
            .collect();
        let mut request = p.requests.clone();
        request.ephemeral = 0;
        let key = format!("[{}] {request}", terms.join(" | "));
        let entry = shapes.entry(key.clone()).or_insert_with(|| {
            let admissible: Vec<bool> = (0..types.len())
                .map(|t| {
                    let it = &types[t];
                    offered(t)
                        && request.fits_in(&it.allocatable)
                        && (p.requirement_terms.is_empty()
                            || p.requirement_terms.iter().any(|term| {
                                let mut reqs = candidates[t].requirements.clone();
                                reqs.add_all(term);
                                it.compatible(&reqs)
                            }))
                })
                .collect();
            (admissible, BTreeMap::new())
        });
        if !entry.0.iter().any(|a| *a) {
            return Err(BoundError::Infeasible(key));
        }
        if let Some(group) = anti_affinity_group(p) {
            *groups
                .entry(group)
                .or_default()
                .entry(key.clone())
                .or_default() += 1.0;
        }
        for (k, v) in scaled(&request) {
            *entry.1.entry(k).or_default() += v;
        }
    }
    // One class per distinct admissible set A: every pod whose admissible set lies within A.
    let mut sets: Vec<&Vec<bool>> = shapes.values().map(|(a, _)| a).collect();
    sets.sort();
    sets.dedup();
    let subset = |a: &[bool], b: &[bool]| a.iter().zip(b).all(|(x, y)| !*x || *y);
    let built: Vec<Class> = sets
        .iter()
        .map(|set| {
            let mut demand: BTreeMap<String, f64> = BTreeMap::new();
            for (admissible, d) in shapes.values() {
                if subset(admissible, set) {
                    for (k, v) in d {
                        *demand.entry(k.clone()).or_default() += v;
                    }
                }
            }
            Class {
                types: (0..set.len()).filter(|&t| set[t]).collect(),
                demand,
            }
        })
        .collect();
    let mut problem = Problem::new(OptimizationDirection::Minimize);
    // Per type: its unreserved variable, if it has an unreserved offering, and one variable per
    // reserved offering, bounded by the reservation's room; the reservation's room bounds the
    // sum of its variables over every type and pool.
    let vars: Vec<Vec<microlp::Variable>> = (0..types.len())
        .map(|t| {
            let mut v: Vec<microlp::Variable> = prices[t]
                .map(|price| problem.add_var(price, (0.0, f64::INFINITY)))
                .into_iter()
                .collect();
            v.extend(
                reserved[t]
                    .iter()
                    .map(|(_, price, room)| problem.add_var(*price, (0.0, *room as f64))),
            );
            v
        })
        .collect();
    // Per reservation id: its variables (each counting one instance) and its room.
    type Room = (Vec<(microlp::Variable, f64)>, i64);
    let mut by_reservation: BTreeMap<&str, Room> = BTreeMap::new();
    for t in 0..types.len() {
        let first = usize::from(prices[t].is_some());
        for (k, (id, _, room)) in reserved[t].iter().enumerate() {
            let entry = by_reservation.entry(id.as_str()).or_insert((Vec::new(), 0));
            entry.0.push((vars[t][first + k], 1.0));
            entry.1 = entry.1.max(*room);
        }
    }
    for (terms, room) in by_reservation.values() {
        problem.add_constraint(terms.as_slice(), ComparisonOp::Le, *room as f64);
    }
    let capacities: Vec<BTreeMap<String, f64>> =
        types.iter().map(|t| scaled(&t.allocatable)).collect();
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    for (_, demand) in shapes.values() {
        for (k, v) in demand {
            *total.entry(k.clone()).or_default() += v;
        }
    }
    let mut add = |type_set: &[usize], demand: &BTreeMap<String, f64>| {
        for (resource, need) in demand {
            if *need <= 0.0 {
                continue;
            }
            let terms: Vec<(microlp::Variable, f64)> = type_set
                .iter()
                .flat_map(|&t| {
                    let cap = capacities[t].get(resource).copied().unwrap_or(0.0);
                    vars[t]
                        .iter()
                        .filter(move |_| cap > 0.0)
                        .map(move |v| (*v, cap))
                })
                .collect();
            problem.add_constraint(terms.as_slice(), ComparisonOp::Ge, *need);
        }
    };
    let all: Vec<usize> = (0..types.len()).filter(|&t| !vars[t].is_empty()).collect();
    add(&all, &total);
    for c in &built {
        add(&c.types, &c.demand);
    }
    // Node counts: each member of an anti-affinity group on a node of its own.
    for members in groups.values() {
        let member_sets: Vec<&Vec<bool>> = members.keys().map(|k| &shapes[k].0).collect();
        let mut distinct = member_sets.clone();
        distinct.sort();
        distinct.dedup();
        for set in distinct {
            let need: f64 = members
                .iter()
                .zip(&member_sets)
                .filter(|(_, a)| subset(a, set))
                .map(|((_, n), _)| n)
                .sum();
            let terms: Vec<(microlp::Variable, f64)> = (0..set.len())
                .filter(|&t| set[t])
                .flat_map(|t| vars[t].iter().map(|v| (*v, 1.0)))
                .collect();
            problem.add_constraint(terms.as_slice(), ComparisonOp::Ge, need);
        }
    }
    match problem.solve() {
        Ok(solution) => Ok(solution.objective()),
        Err(microlp::Error::Infeasible) => Err(BoundError::Infeasible("all pods".into())),
        Err(e) => Err(BoundError::Solver(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::scheduling::testing::{instance_type, pod};
    use serde_json::json;

    fn candidates(types: Vec<Arc<InstanceType>>) -> Vec<Candidate> {
        types
            .into_iter()
            .map(|t| Candidate {
                instance_type: t,
                requirements: Requirements::new(),
            })
            .collect()
    }

    #[test]
    fn bound_is_the_fluid_optimum_for_one_resource() {
        // Two types with the same price per core: the bound is exactly price per core x cores.
        let types = vec![
            instance_type("two", 2, 64, 0.2),
            instance_type("four", 4, 64, 0.4),
        ];
        let pods: Vec<PodInfo> = (0..10)
            .map(|i| pod(&format!("p{i}"), 1000, 100, json!({})))
            .collect();
        let refs: Vec<&PodInfo> = pods.iter().collect();
        // Spot at 0.6x is the cheapest offering of the test types.
        let b = lower_bound(&refs, &candidates(types)).expect("bound");
        assert!((b - 10.0 * 0.1 * 0.6).abs() < 1e-6, "{b}");
    }

    /// A reservation counts for at most its room: 10 pods of a core each need 10 cores of
    /// "two" (2 cores); the reservation of 1 gives 2 cores for next to nothing, the other 8
    /// cores cost the spot price. Without the room the bound would fall to nothing.
    #[test]
    fn reserved_capacity_counts_for_at_most_its_room() {
        use karpenter_core::capacity::Offering;
        let mut two = (*instance_type("two", 2, 64, 0.2)).clone();
        two.offerings.push(Offering {
            zone: two.offerings[0].zone.clone(),
            capacity_type: "reserved".into(),
            price: 0.2 / 10_000_000.0,
            available: true,
            reservation_id: Some("cr-1".into()),
            reservation_capacity: 1,
        });
        let pods: Vec<PodInfo> = (0..10)
            .map(|i| pod(&format!("p{i}"), 1000, 100, json!({})))
            .collect();
        let refs: Vec<&PodInfo> = pods.iter().collect();
        let b = lower_bound(&refs, &candidates(vec![Arc::new(two)])).expect("bound");
        let spot_per_core = 0.1 * 0.6;
        assert!(
            (b - (8.0 * spot_per_core + 0.2 / 10_000_000.0)).abs() < 1e-6,
            "{b}"
        );
    }

    #[test]
    fn class_constraints_tighten_the_bound() {
        // GPU pods need the GPU type; CPU pods could use the cheap CPU type.
        let cpu = instance_type("cpu", 4, 16, 0.1);
        let mut gpu = (*instance_type("gpu", 4, 16, 1.0)).clone();
        gpu.capacity.set("nvidia.com/gpu", 1);
        gpu.allocatable.set("nvidia.com/gpu", 1);
        let types = vec![cpu, Arc::new(gpu)];
        let gpu_pod = |n: &str| {
            pod(
                n,
                3000,
                1024,
                json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "3", "nvidia.com/gpu": "1"}}}]}),
            )
        };
        let pods = [gpu_pod("g1"), gpu_pod("g2")];
        let refs: Vec<&PodInfo> = pods.iter().collect();
        let b = lower_bound(&refs, &candidates(types.clone())).expect("bound");
        assert!(
            (b - 2.0 * 0.6).abs() < 1e-6,
            "two GPU nodes at spot price: {b}"
        );
        let huge = pod("huge", 64_000, 1024, json!({}));
        assert!(matches!(
            lower_bound(&[&huge], &candidates(types)),
            Err(BoundError::Infeasible(_))
        ));
    }

    #[test]
    fn each_member_of_a_hostname_anti_affinity_group_counts_one_node() {
        // Three 500m pods that repel their own kind per hostname need three nodes, although
        // their 1.5 cores fit one: the bound is three of the cheapest node, at spot (0.6x).
        let types = vec![
            instance_type("two", 2, 64, 0.2),
            instance_type("eight", 8, 64, 0.8),
        ];
        let anti = |selector: serde_json::Value| {
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}]}}})
        };
        let member = |n: &str, selector: serde_json::Value| {
            let mut p = pod(n, 500, 100, anti(selector));
            p.labels.insert("app".into(), "nginx".into());
            p
        };
        let group: Vec<PodInfo> = (0..3)
            .map(|i| member(&format!("n{i}"), json!({"app": "nginx"})))
            .collect();
        let refs: Vec<&PodInfo> = group.iter().collect();
        let b = lower_bound(&refs, &candidates(types.clone())).expect("bound");
        assert!((b - 3.0 * 0.2 * 0.6).abs() < 1e-6, "three nodes: {b}");
        // A term that does not select the pod's own labels forms no group: the fluid bound.
        let others: Vec<PodInfo> = (0..3)
            .map(|i| member(&format!("o{i}"), json!({"app": "redis"})))
            .collect();
        let refs: Vec<&PodInfo> = others.iter().collect();
        let b = lower_bound(&refs, &candidates(types)).expect("bound");
        assert!((b - 1.5 * 0.1 * 0.6).abs() < 1e-6, "fluid: {b}");
    }
}
