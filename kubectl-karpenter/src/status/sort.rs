//! `--sort-by`: the order of the NodeClaim rows of `kubectl karpenter status` (name, NodePool,
//! lifecycle state, age, price, instance type, pods, cpu or memory use), ties by NodePool then
//! name. Pure.

use std::cmp::Ordering;

use super::rows::Row;

/// `--sort-by`: the order of the NodeClaim rows. Ties, and the default, go by NodePool
/// (NodeClaims without one last), then name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SortBy {
    /// NodeClaim name.
    Name,
    /// NodePool, then name.
    #[default]
    Nodepool,
    /// Lifecycle state: Launching, Registering, Initializing, Ready, Drifted, Interrupted,
    /// Terminating.
    State,
    /// Oldest first (as kubectl's `--sort-by=.metadata.creationTimestamp`); unknown last.
    Age,
    /// Most expensive first; unknown prices last.
    Price,
    /// Instance type; NodeClaims without one (not launched yet) last.
    InstanceType,
    /// Fewest pods to reschedule first (empty nodes on top), then fewest pods.
    Pods,
    /// Smallest share of allocatable cpu requested first (idle nodes on top); unknown last.
    Cpu,
    /// Smallest share of allocatable memory requested first; unknown last.
    Memory,
}

/// `requested / allocatable`, comparable across nodes; `None` without an allocatable.
fn share(requested: i64, allocatable: Option<i64>) -> Option<f64> {
    allocatable
        .filter(|&a| a > 0)
        .map(|a| requested as f64 / a as f64)
}

/// Smallest share first; unknown last.
fn by_share(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Sorts `rows` by `by` (stable, ties by NodePool then name).
pub fn sort_rows(rows: &mut [Row], by: SortBy) {
    let default = |r: &Row| (r.nodepool.is_none(), r.nodepool.clone(), r.name.clone());
    match by {
        SortBy::Name => rows.sort_by(|a, b| a.name.cmp(&b.name).then(default(a).cmp(&default(b)))),
        SortBy::Nodepool => rows.sort_by_cached_key(default),
        SortBy::State => rows.sort_by_cached_key(|r| (r.state, default(r))),
        SortBy::Age => rows.sort_by_cached_key(|r| (r.created.is_none(), r.created, default(r))),
        SortBy::Price => rows.sort_by(|a, b| {
            let by_price = match (a.price, b.price) {
                (Some(x), Some(y)) => y.total_cmp(&x),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            };
            by_price.then_with(|| default(a).cmp(&default(b)))
        }),
        SortBy::InstanceType => rows.sort_by_cached_key(|r| {
            (
                r.instance_type.is_none(),
                r.instance_type.clone(),
                default(r),
            )
        }),
        SortBy::Pods => rows.sort_by_cached_key(|r| (r.reschedulable_pods, r.pods, default(r))),
        SortBy::Cpu => rows.sort_by(|a, b| {
            let cpu = |r: &Row| share(r.requests.cpu, r.allocatable.map(|x| x.cpu));
            by_share(cpu(a), cpu(b)).then_with(|| default(a).cmp(&default(b)))
        }),
        SortBy::Memory => rows.sort_by(|a, b| {
            let memory = |r: &Row| share(r.requests.memory, r.allocatable.map(|x| x.memory));
            by_share(memory(a), memory(b)).then_with(|| default(a).cmp(&default(b)))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn order(by: SortBy) -> Vec<String> {
        let mut rows = crate::status::fixtures::build_rows(
            &fixtures::sample(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        sort_rows(&mut rows, by);
        rows.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn sort_orders() {
        let cases: &[(SortBy, [&str; 6])] = &[
            (
                SortBy::Name,
                [
                    "default-abcde",
                    "default-fghij",
                    "default-klmno",
                    "gpu-pqrst",
                    "gpu-uvwxy",
                    "stray",
                ],
            ),
            (
                SortBy::State,
                [
                    "default-klmno",
                    "default-fghij",
                    "gpu-pqrst",
                    "default-abcde",
                    "stray",
                    "gpu-uvwxy",
                ],
            ),
            // Oldest first; no creation time last.
            (
                SortBy::Age,
                [
                    "gpu-uvwxy",
                    "default-abcde",
                    "gpu-pqrst",
                    "default-fghij",
                    "default-klmno",
                    "stray",
                ],
            ),
            // Dearest first; unknown prices last (by NodePool, then name).
            (
                SortBy::Price,
                [
                    "gpu-pqrst",
                    "default-abcde",
                    "default-fghij",
                    "gpu-uvwxy",
                    "default-klmno",
                    "stray",
                ],
            ),
            // Same type: by NodePool then name; no type last.
            (
                SortBy::InstanceType,
                [
                    "default-fghij",
                    "gpu-pqrst",
                    "gpu-uvwxy",
                    "default-abcde",
                    "default-klmno",
                    "stray",
                ],
            ),
        ];
        for (by, want) in cases {
            assert_eq!(order(*by), want, "{by:?}");
        }
        assert_eq!(order(SortBy::Nodepool), order(SortBy::default()));
    }

    #[test]
    fn sort_by_load() {
        let order = |sort: SortBy| -> Vec<String> {
            let view = crate::status::document::View {
                sort,
                ..Default::default()
            };
            let doc = crate::status::document::Document::build(
                &crate::status::fixtures::snapshot(),
                &view,
                fixtures::now(),
                &fixtures::FixedPrices,
            );
            doc.node_claims.into_iter().map(|r| r.name).collect()
        };
        // Nothing to reschedule first: no pods, then the empty drifted node (a DaemonSet pod),
        // then the terminating node (its pods are leaving), then the busy ready node.
        assert_eq!(
            order(SortBy::Pods),
            [
                "default-fghij",
                "default-klmno",
                "gpu-pqrst",
                "stray",
                "default-drift",
                "gpu-uvwxy",
                "default-abcde",
            ]
        );
        // Idle first (0 of a known allocatable), the busiest known last, unknown after.
        assert_eq!(
            order(SortBy::Cpu),
            [
                "default-fghij",
                "gpu-pqrst",
                "default-drift",
                "gpu-uvwxy",
                "default-abcde",
                "default-klmno",
                "stray",
            ]
        );
        assert_eq!(
            order(SortBy::Memory)[4..],
            ["default-abcde", "default-klmno", "stray"]
        );
    }
}
