//! The node-requirements algebra Karpenter schedules with: a set of allowed values per label key
//! (`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, `Gte`, `Lte`), intersected across a
//! NodePool, its pods and instance types (upstream: `pkg/scheduling/requirement(s).go`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crds::Operator;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;

/// The values one label key may take.
///
/// Represented as upstream does: a set of values that is either the allowed set
/// (`complement == false`) or the excluded set (`complement == true`), narrowed by optional
/// integer bounds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// The label key it constrains, e.g. `topology.kubernetes.io/zone`.
    pub key: String,
    complement: bool,
    values: BTreeSet<String>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
    /// NodePool `minValues`: at least this many distinct values must remain possible.
    pub min_values: Option<usize>,
}

/// A requirement that cannot be built (unknown operator, missing or non-integer value).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid requirement {key} {operator} {values:?}: {reason}")]
pub struct RequirementError {
    /// Label key.
    pub key: String,
    /// Operator as written (`In`, `Gte`, ... or the unknown string).
    pub operator: String,
    /// Values as written.
    pub values: Vec<String>,
    /// What is wrong: `unknown operator`, `at least one value is required`, `exactly one value
    /// is required` or `value must be an integer`.
    pub reason: String,
}

impl Requirement {
    /// Build from an operator name as it appears in Kubernetes' own node selectors (`In`,
    /// `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, and Karpenter's `Gte`, `Lte`).
    ///
    /// Errors: an unknown operator, and those of [`Requirement::new`].
    pub fn parse(
        key: &str,
        operator: &str,
        values: &[String],
    ) -> Result<Requirement, RequirementError> {
        match operator.parse::<Operator>() {
            Ok(op) => Requirement::new(key, op, values),
            Err(_) => Err(RequirementError {
                key: key.to_string(),
                operator: operator.to_string(),
                values: values.to_vec(),
                reason: "unknown operator".to_string(),
            }),
        }
    }

    /// Build from an operator and its values, as a NodePool or NodeClaim requirement states
    /// them (`Gte n` is kept as `Gt n-1`, `Lte n` as `Lt n+1`: the same set of integers).
    ///
    /// Errors: `In`/`NotIn` without values, or a bound that is not exactly one integer.
    pub fn new(
        key: &str,
        operator: Operator,
        values: &[String],
    ) -> Result<Requirement, RequirementError> {
        let err = |reason: &str| RequirementError {
            key: key.to_string(),
            operator: operator.to_string(),
            values: values.to_vec(),
            reason: reason.to_string(),
        };
        let bound = || -> Result<i64, RequirementError> {
            match values {
                [v] => v
                    .parse::<i64>()
                    .map_err(|_| err("value must be an integer")),
                _ => Err(err("exactly one value is required")),
            }
        };
        let mut r = Requirement::exists(key);
        match operator {
            Operator::In => {
                if values.is_empty() {
                    return Err(err("at least one value is required"));
                }
                r.complement = false;
                r.values = values.iter().cloned().collect();
            }
            Operator::NotIn => {
                if values.is_empty() {
                    return Err(err("at least one value is required"));
                }
                r.values = values.iter().cloned().collect();
            }
            Operator::Exists => {}
            Operator::DoesNotExist => r.complement = false,
            Operator::Gt => r.greater_than = Some(bound()?),
            Operator::Gte => r.greater_than = Some(bound()? - 1),
            Operator::Lt => r.less_than = Some(bound()?),
            Operator::Lte => r.less_than = Some(bound()? + 1),
        }
        Ok(r)
    }

    /// `key In [values]`.
    pub fn is_in<I: IntoIterator<Item = S>, S: Into<String>>(key: &str, values: I) -> Requirement {
        Requirement {
            key: key.to_string(),
            complement: false,
            values: values.into_iter().map(Into::into).collect(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// `key Exists`.
    pub fn exists(key: &str) -> Requirement {
        Requirement {
            key: key.to_string(),
            complement: true,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// `key DoesNotExist`.
    pub fn does_not_exist(key: &str) -> Requirement {
        Requirement::is_in(key, Vec::<String>::new())
    }

    /// Build from a Kubernetes node selector requirement.
    ///
    /// Errors: see [`Requirement::parse`].
    pub fn from_node_selector(
        r: &NodeSelectorRequirement,
    ) -> Result<Requirement, RequirementError> {
        Requirement::parse(&r.key, &r.operator, r.values.as_deref().unwrap_or(&[]))
    }

    /// The operator this set is equivalent to (never `Gte` or `Lte`: bounds are kept as `Gt`
    /// and `Lt`).
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, _) if self.greater_than.is_some() => Operator::Gt,
            (true, _) if self.less_than.is_some() => Operator::Lt,
            (true, true) => Operator::Exists,
            (true, false) => Operator::NotIn,
            (false, true) => Operator::DoesNotExist,
            (false, false) => Operator::In,
        }
    }

    fn within_bounds(&self, value: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        let Ok(n) = value.parse::<i64>() else {
            return false;
        };
        self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
    }

    /// Whether a label value satisfies this requirement.
    pub fn has(&self, value: &str) -> bool {
        let listed = self.values.contains(value);
        (listed != self.complement) && self.within_bounds(value)
    }

    /// Whether a node without this label satisfies the requirement (`NotIn`, `DoesNotExist`).
    pub fn allows_absent(&self) -> bool {
        matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
    }

    /// Whether no value satisfies it (an empty `In`, i.e. `DoesNotExist`).
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// The allowed values when the set is finite (`In`), else `None`.
    pub fn values(&self) -> Option<&BTreeSet<String>> {
        (!self.complement).then_some(&self.values)
    }

    /// The single allowed value, if exactly one.
    pub fn single_value(&self) -> Option<&str> {
        match self.values() {
            Some(v) if v.len() == 1 => v.iter().next().map(String::as_str),
            _ => None,
        }
    }

    /// A value that satisfies the requirement, for labelling a node that must carry the key
    /// (upstream `Requirement.Any`): the first allowed value of an `In` in set order, or for
    /// `NotIn`, `Exists`, `Gt` and `Lt` the smallest integer that is within the bounds (from 0
    /// when there is no lower bound) and not excluded. `None` for `DoesNotExist` and for a
    /// requirement no value satisfies. Upstream picks an arbitrary value (a random integer for
    /// the open sets); a stable pick gives a replacement the label of the node it replaces.
    pub fn any_value(&self) -> Option<String> {
        if !self.complement {
            return self.values.iter().find(|v| self.within_bounds(v)).cloned();
        }
        let mut n = match (self.greater_than, self.less_than) {
            (Some(g), _) => g.checked_add(1)?,
            (None, Some(l)) if l <= 0 => l.checked_sub(1)?,
            (None, _) => 0,
        };
        // At most one integer per excluded value is skipped.
        for _ in 0..=self.values.len() {
            let value = n.to_string();
            if self.has(&value) {
                return Some(value);
            }
            n = n.checked_add(1)?;
        }
        None
    }

    /// Whether some value satisfies both: `!self.intersection(other).is_empty()` without
    /// building the intersection (the solver asks this for every instance type it considers).
    pub fn overlaps(&self, other: &Requirement) -> bool {
        if self.greater_than.is_some()
            || self.less_than.is_some()
            || other.greater_than.is_some()
            || other.less_than.is_some()
        {
            return !self.intersection(other).is_empty();
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other.values.iter().any(|v| !self.values.contains(v)),
            (false, true) => self.values.iter().any(|v| !other.values.contains(v)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small.iter().any(|v| large.contains(v))
            }
        }
    }

    /// The values both requirements allow.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        let min_values = self.min_values.max(other.min_values);
        if let (Some(g), Some(l)) = (greater_than, less_than)
            && g >= l - 1
        {
            let mut none = Requirement::does_not_exist(&self.key);
            none.min_values = min_values;
            return none;
        }
        let (complement, values) = match (self.complement, other.complement) {
            (true, true) => (true, self.values.union(&other.values).cloned().collect()),
            (true, false) => (
                false,
                other.values.difference(&self.values).cloned().collect(),
            ),
            (false, true) => (
                false,
                self.values.difference(&other.values).cloned().collect(),
            ),
            (false, false) => (
                false,
                self.values.intersection(&other.values).cloned().collect(),
            ),
        };
        let mut r = Requirement {
            key: self.key.clone(),
            complement,
            values,
            greater_than,
            less_than,
            min_values,
        };
        if !r.complement {
            let filtered: BTreeSet<String> = r
                .values
                .iter()
                .filter(|v| r.within_bounds(v))
                .cloned()
                .collect();
            r.values = filtered;
        }
        r
    }
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

impl fmt::Display for Requirement {
    /// `key In [a b]`, `key NotIn [a]`, `key Exists`, `key DoesNotExist`, `key Gt 4`, as upstream
    /// prints requirements in its scheduling errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = || self.values.iter().cloned().collect::<Vec<_>>().join(" ");
        match self.operator() {
            Operator::In => write!(f, "{} In [{}]", self.key, list()),
            Operator::NotIn => write!(f, "{} NotIn [{}]", self.key, list()),
            Operator::Exists => write!(f, "{} Exists", self.key),
            Operator::DoesNotExist => write!(f, "{} DoesNotExist", self.key),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                write!(f, "{}", self.key)?;
                if let Some(g) = self.greater_than {
                    write!(f, " Gt {g}")?;
                }
                if let Some(l) = self.less_than {
                    write!(f, " Lt {l}")?;
                }
                if !self.values.is_empty() {
                    write!(f, " NotIn [{}]", list())?;
                }
                Ok(())
            }
        }
    }
}

/// Requirements on several keys; all must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements(BTreeMap<String, Requirement>);

/// Why two sets of requirements cannot both hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Incompatible {
    /// The same key allows no common value.
    #[error("incompatible requirements, key {key}, {wanted} not in {allowed}")]
    Conflict {
        /// Label key.
        key: String,
        /// The incoming requirement as text, e.g. `topology.kubernetes.io/zone In [us-east-1a]`.
        wanted: String,
        /// What the other side allows for the key: its requirement, or a node's actual label
        /// (`key In [value]`, `key DoesNotExist`).
        allowed: String,
    },
    /// A custom label the NodePool does not define (upstream: "does not have known values").
    #[error("label {key:?} does not have known values")]
    UnknownLabel {
        /// Label key.
        key: String,
    },
}

impl Requirements {
    /// No requirements.
    pub fn new() -> Requirements {
        Requirements::default()
    }

    /// Requirements that pin each label to its value (`key In [value]`).
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Requirements {
        let mut r = Requirements::new();
        for (k, v) in labels {
            r.add(Requirement::is_in(k, [v.clone()]));
        }
        r
    }

    /// Add a requirement, intersecting with any existing one on the same key.
    pub fn add(&mut self, r: Requirement) {
        match self.0.get_mut(&r.key) {
            Some(existing) => *existing = existing.intersection(&r),
            None => {
                self.0.insert(r.key.clone(), r);
            }
        }
    }

    /// Add every requirement of `other`.
    pub fn add_all(&mut self, other: &Requirements) {
        for r in other.0.values() {
            self.add(r.clone());
        }
    }

    /// The requirement on `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    /// Whether a requirement on `key` exists.
    pub fn has_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Remove the requirement on `key`.
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.0.remove(key)
    }

    /// All requirements in key order.
    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.0.values()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Check that keys present in both allow a common value. `NotIn`/`DoesNotExist` on both sides
    /// never conflict (a node without the label satisfies both).
    ///
    /// Errors: the first conflicting key.
    pub fn intersects(&self, incoming: &Requirements) -> Result<(), Incompatible> {
        let (small, large, swapped) = if self.0.len() <= incoming.0.len() {
            (self, incoming, false)
        } else {
            (incoming, self, true)
        };
        for (key, a) in &small.0 {
            let Some(b) = large.0.get(key) else { continue };
            let (existing, wanted) = if swapped { (b, a) } else { (a, b) };
            let both_absent = existing.allows_absent() && wanted.allows_absent();
            if !(existing.overlaps(wanted) || both_absent) {
                return Err(Incompatible::Conflict {
                    key: key.clone(),
                    wanted: wanted.to_string(),
                    allowed: existing.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Whether `incoming` can be added: keys `self` does not define must be allowed undefined
    /// (well-known labels) or only exclude values; then [`Requirements::intersects`].
    ///
    /// Errors: the unknown label or conflicting key.
    pub fn compatible(
        &self,
        incoming: &Requirements,
        allowed_undefined: impl Fn(&str) -> bool,
    ) -> Result<(), Incompatible> {
        for (key, r) in &incoming.0 {
            if !self.0.contains_key(key) && !r.allows_absent() && !allowed_undefined(key) {
                return Err(Incompatible::UnknownLabel { key: key.clone() });
            }
        }
        self.intersects(incoming)
    }

    /// Whether a node's labels satisfy every requirement (absent labels satisfy only `NotIn` and
    /// `DoesNotExist`).
    ///
    /// Errors: the first requirement the labels break.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> Result<(), Incompatible> {
        for r in self.0.values() {
            let ok = match labels.get(&r.key) {
                Some(v) => r.has(v),
                None => r.allows_absent(),
            };
            if !ok {
                let actual = labels.get(&r.key).map_or_else(
                    || format!("{} DoesNotExist", r.key),
                    |v| format!("{} In [{v}]", r.key),
                );
                return Err(Incompatible::Conflict {
                    key: r.key.clone(),
                    wanted: r.to_string(),
                    allowed: actual,
                });
            }
        }
        Ok(())
    }

    /// Requirements from a NodePool's or NodeClaim's requirement list; entries that do not parse
    /// are skipped (NodePool validation reports them).
    pub fn from_api(list: &[crds::NodeSelectorRequirementWithMinValues]) -> Requirements {
        let mut reqs = Requirements::new();
        for r in list {
            if let Ok(mut req) = Requirement::new(&r.key, r.operator, &r.values) {
                req.min_values = r.min_values.and_then(|m| usize::try_from(m).ok());
                reqs.add(req);
            }
        }
        reqs
    }

    /// The labels a node made for these requirements carries: for a well-known key
    /// ([`crds::labels::WELL_KNOWN_LABELS`]) its value when only one is allowed (the cloud
    /// provider labels the rest from the instance it launches); for any other key, a value the
    /// requirement allows ([`Requirement::any_value`]), so a NodePool requirement such as
    /// `example.com/team In [a, b]` gives its NodeClaims `example.com/team: a` and they satisfy
    /// the requirement they were made from (upstream
    /// `NodeClaimTemplate.resolveCustomLabelsFromRequirements`).
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.0
            .values()
            .filter_map(|r| {
                let value = if crds::labels::is_well_known_label(&r.key) {
                    r.single_value().map(str::to_string)
                } else {
                    r.any_value()
                };
                value.map(|v| (r.key.clone(), v))
            })
            .collect()
    }

    /// Each requirement as a key, an operator and its values (`In` values in their set order;
    /// one bound for `Gt`/`Lt`; none for `Exists`/`DoesNotExist`), the shape both Kubernetes'
    /// node selectors and NodeClaim requirements are written in.
    pub fn parts(&self) -> impl Iterator<Item = (&str, Operator, Vec<String>)> + '_ {
        self.0.values().map(|r| {
            let operator = r.operator();
            let values = match operator {
                Operator::In | Operator::NotIn => r.values.iter().cloned().collect(),
                Operator::Gt | Operator::Gte => {
                    vec![r.greater_than.unwrap_or_default().to_string()]
                }
                Operator::Lt | Operator::Lte => vec![r.less_than.unwrap_or_default().to_string()],
                Operator::Exists | Operator::DoesNotExist => vec![],
            };
            (r.key.as_str(), operator, values)
        })
    }

    /// As Kubernetes node selector requirements (see [`Requirements::parts`]).
    pub fn to_node_selector(&self) -> Vec<NodeSelectorRequirement> {
        self.parts()
            .map(|(key, operator, values)| NodeSelectorRequirement {
                key: key.to_string(),
                operator: operator.to_string(),
                values: (!values.is_empty()).then_some(values),
            })
            .collect()
    }
}

impl fmt::Display for Requirements {
    /// Requirements joined by `, `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.values().map(ToString::to_string).collect();
        write!(f, "{}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: &str, values: &[&str]) -> Requirement {
        let values: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        Requirement::parse(key, op, &values).expect("valid requirement")
    }

    fn reqs(rs: &[Requirement]) -> Requirements {
        let mut out = Requirements::new();
        for r in rs {
            out.add(r.clone());
        }
        out
    }

    #[test]
    fn operators_round_trip() {
        assert_eq!(req("a", "In", &["x"]).operator(), Operator::In);
        assert_eq!(req("a", "NotIn", &["x"]).operator(), Operator::NotIn);
        assert_eq!(req("a", "Exists", &[]).operator(), Operator::Exists);
        assert_eq!(
            req("a", "DoesNotExist", &[]).operator(),
            Operator::DoesNotExist
        );
        assert_eq!(req("a", "Gt", &["2"]).operator(), Operator::Gt);
        assert!(Requirement::parse("a", "Gt", &["x".into()]).is_err());
        assert!(Requirement::parse("a", "In", &[]).is_err());
        assert!(Requirement::parse("a", "Near", &[]).is_err());
    }

    #[test]
    fn has_follows_kubernetes_semantics() {
        assert!(req("g", "Gt", &["2"]).has("3"));
        assert!(!req("g", "Gt", &["2"]).has("2"));
        assert!(req("g", "Gte", &["2"]).has("2"));
        assert!(req("g", "Lte", &["2"]).has("2"));
        assert!(!req("g", "Lt", &["2"]).has("x"));
        assert!(req("a", "NotIn", &["x"]).has("y"));
        assert!(!req("a", "DoesNotExist", &[]).has("y"));
    }

    #[test]
    fn intersection_table() {
        // (a, b, value that must be allowed, value that must be rejected)
        let cases = [
            (
                req("k", "In", &["a", "b"]),
                req("k", "In", &["b", "c"]),
                "b",
                "a",
            ),
            (
                req("k", "In", &["a", "b"]),
                req("k", "NotIn", &["a"]),
                "b",
                "a",
            ),
            (
                req("k", "NotIn", &["a"]),
                req("k", "NotIn", &["b"]),
                "c",
                "b",
            ),
            (req("k", "Exists", &[]), req("k", "In", &["a"]), "a", "b"),
            (req("k", "Gt", &["2"]), req("k", "Lt", &["10"]), "5", "10"),
            (
                req("k", "In", &["1", "5", "9"]),
                req("k", "Gt", &["4"]),
                "9",
                "1",
            ),
        ];
        for (a, b, yes, no) in cases {
            let i = a.intersection(&b);
            assert!(i.has(yes) && !i.has(no), "{a} ∩ {b} = {i}");
            assert_eq!(i, b.intersection(&a), "symmetric");
        }
        assert!(
            req("k", "Gt", &["5"])
                .intersection(&req("k", "Lt", &["6"]))
                .is_empty()
        );
    }

    #[test]
    fn overlaps_agrees_with_intersection() {
        let samples = [
            req("k", "In", &["a", "b"]),
            req("k", "In", &["b", "c"]),
            req("k", "In", &["c"]),
            req("k", "NotIn", &["a"]),
            req("k", "NotIn", &["a", "b", "c"]),
            req("k", "Exists", &[]),
            req("k", "DoesNotExist", &[]),
            req("k", "Gt", &["2"]),
            req("k", "Lt", &["3"]),
            req("k", "In", &["1", "5"]),
        ];
        for a in &samples {
            for b in &samples {
                assert_eq!(
                    a.overlaps(b),
                    !a.intersection(b).is_empty(),
                    "{a} overlaps {b}"
                );
            }
        }
    }

    #[test]
    fn intersects_and_compatible() {
        let pool = reqs(&[
            req("kubernetes.io/arch", "In", &["amd64", "arm64"]),
            req("team", "In", &["a"]),
        ]);
        let pod = reqs(&[req("kubernetes.io/arch", "In", &["arm64"])]);
        assert!(pool.intersects(&pod).is_ok());
        let bad = reqs(&[req("kubernetes.io/arch", "In", &["s390x"])]);
        let err = pool.intersects(&bad).expect_err("conflict");
        assert_eq!(
            err.to_string(),
            "incompatible requirements, key kubernetes.io/arch, kubernetes.io/arch In [s390x] not in kubernetes.io/arch In [amd64 arm64]"
        );
        let both_absent = reqs(&[req("team", "DoesNotExist", &[])]);
        let excl = reqs(&[req("team", "NotIn", &["a"])]);
        assert!(both_absent.intersects(&excl).is_ok());
        let custom = reqs(&[req("gpu-vendor", "In", &["x"])]);
        assert_eq!(
            pool.compatible(&custom, |k| k.starts_with("kubernetes.io/")),
            Err(Incompatible::UnknownLabel {
                key: "gpu-vendor".into()
            })
        );
        assert!(
            pool.compatible(&reqs(&[req("kubernetes.io/os", "In", &["linux"])]), |k| k
                .starts_with("kubernetes.io/"))
                .is_ok()
        );
    }

    #[test]
    fn label_matching_and_derived_labels() {
        let r = reqs(&[
            req("zone", "In", &["a"]),
            req("spot", "DoesNotExist", &[]),
            req("cpu", "Gt", &["3"]),
        ]);
        let labels: BTreeMap<String, String> = [("zone", "a"), ("cpu", "4")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert!(r.matches_labels(&labels).is_ok());
        let mut small = labels.clone();
        small.insert("cpu".into(), "2".into());
        assert!(r.matches_labels(&small).is_err());
        assert_eq!(r.labels().get("zone").map(String::as_str), Some("a"));
        assert_eq!(r.to_node_selector().len(), 3);
    }

    #[test]
    fn any_value_is_a_value_the_requirement_allows() {
        let cases: &[(&str, &[&str], Option<&str>)] = &[
            ("In", &["b", "a"], Some("a")),
            ("NotIn", &["0", "1", "3"], Some("2")),
            ("Exists", &[], Some("0")),
            ("DoesNotExist", &[], None),
            ("Gt", &["4"], Some("5")),
            ("Gte", &["4"], Some("4")),
            ("Lt", &["3"], Some("0")),
            ("Lt", &["-2"], Some("-3")),
            ("Lte", &["0"], Some("0")),
        ];
        for (op, values, want) in cases {
            let r = req("example.com/team", op, values);
            let got = r.any_value();
            assert_eq!(got.as_deref(), *want, "{r}");
            if let Some(v) = got {
                assert!(r.has(&v), "{r} does not allow its own pick {v}");
            }
        }
        let bounded = req("n", "Gt", &["1"]).intersection(&req("n", "NotIn", &["2", "3"]));
        assert_eq!(bounded.any_value().as_deref(), Some("4"));
        let none = req("n", "Gt", &["1"]).intersection(&req("n", "Lt", &["3"]));
        let none = none.intersection(&req("n", "NotIn", &["2"]));
        assert_eq!(none.any_value(), None, "{none}");
    }

    #[test]
    fn custom_keys_get_a_label_and_well_known_keys_only_a_single_value() {
        let r = reqs(&[
            req("example.com/team", "In", &["a", "b"]),
            req("example.com/tier", "Exists", &[]),
            req("example.com/gone", "DoesNotExist", &[]),
            req(
                "topology.kubernetes.io/zone",
                "In",
                &["us-east-1a", "us-east-1b"],
            ),
            req("karpenter.sh/capacity-type", "In", &["spot"]),
        ]);
        let labels = r.labels();
        assert_eq!(
            labels,
            [
                ("example.com/team", "a"),
                ("example.com/tier", "0"),
                ("karpenter.sh/capacity-type", "spot"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
        );
    }
}
