//! Resource amounts as the scheduler compares them: cpu in millicores, memory and
//! ephemeral-storage in bytes, pods as a count, extended resources (e.g. `nvidia.com/gpu`) in
//! units; plus parsing of Kubernetes quantity strings.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource name of CPU.
pub const CPU: &str = "cpu";
/// Resource name of memory.
pub const MEMORY: &str = "memory";
/// Resource name of the pod count.
pub const PODS: &str = "pods";
/// Resource name of ephemeral storage.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Resource name of NVIDIA GPUs.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// An amount of each resource. Missing extended resources are zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Pods: 1 in each pod's requests, the node's maximum pod count in capacity.
    pub pods: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral: i64,
    /// Extended resources (`nvidia.com/gpu`, `hugepages-2Mi`, ...) in units; zero entries are
    /// not stored.
    pub extended: BTreeMap<String, i64>,
}

/// A malformed quantity string.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {0:?}")]
pub struct QuantityError(pub String);

/// Parse a Kubernetes quantity (`100m`, `1.5`, `128Mi`, `1G`, `2e3`) into thousandths of a unit,
/// rounding up as Kubernetes does for sub-milli precision.
///
/// Errors: anything that is not a decimal number with an optional SI, binary or exponent suffix.
pub fn parse_milli(s: &str) -> Result<i128, QuantityError> {
    let err = || QuantityError(s.to_string());
    let s = s.trim();
    let (sign, body) = match s.strip_prefix('-') {
        Some(rest) => (-1i128, rest),
        None => (1, s.strip_prefix('+').unwrap_or(s)),
    };
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(split);
    if number.is_empty() || number == "." {
        return Err(err());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // value = digits / 10^frac_len, expressed exactly as a numerator and a power-of-ten exponent.
    let digits: i128 = format!("{int_part}{frac_part}")
        .parse()
        .map_err(|_| err())?;
    let mut exp10: i32 = -(frac_part.len() as i32);
    let mut mul: i128 = 1;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => mul = 1 << 10,
        "Mi" => mul = 1 << 20,
        "Gi" => mul = 1 << 30,
        "Ti" => mul = 1 << 40,
        "Pi" => mul = 1 << 50,
        "Ei" => mul = 1 << 60,
        e if e.starts_with(['e', 'E']) => exp10 += e[1..].parse::<i32>().map_err(|_| err())?,
        _ => return Err(err()),
    }
    // Milli-units: multiply by 1000.
    exp10 += 3;
    let scaled = digits.checked_mul(mul).ok_or_else(err)?;
    let value = if exp10 >= 0 {
        scaled
            .checked_mul(10i128.checked_pow(exp10 as u32).ok_or_else(err)?)
            .ok_or_else(err)?
    } else {
        let div = 10i128.checked_pow((-exp10) as u32).ok_or_else(err)?;
        (scaled + div - 1) / div
    };
    Ok(sign * value)
}

/// Parse a quantity into whole units (bytes, counts), rounding up.
///
/// Errors: see [`parse_milli`].
pub fn parse_units(s: &str) -> Result<i64, QuantityError> {
    let milli = parse_milli(s)?;
    i64::try_from((milli + 999).div_euclid(1000)).map_err(|_| QuantityError(s.to_string()))
}

impl Resources {
    /// Resources from a Kubernetes resource list; unparseable quantities are reported.
    ///
    /// Errors: the first malformed quantity.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Resources, QuantityError> {
        let mut r = Resources::default();
        for (name, q) in list {
            r.set_parsed(name, &q.0)?;
        }
        Ok(r)
    }

    /// Set one resource from a quantity string (cpu in millicores, the rest in units).
    ///
    /// Errors: a malformed quantity.
    pub fn set_parsed(&mut self, name: &str, quantity: &str) -> Result<(), QuantityError> {
        let value = if name == CPU {
            i64::try_from(parse_milli(quantity)?)
                .map_err(|_| QuantityError(quantity.to_string()))?
        } else {
            parse_units(quantity)?
        };
        self.set(name, value);
        Ok(())
    }

    /// Set one resource (cpu in millicores).
    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            CPU => self.cpu = value,
            MEMORY => self.memory = value,
            PODS => self.pods = value,
            EPHEMERAL_STORAGE => self.ephemeral = value,
            other => {
                if value == 0 {
                    self.extended.remove(other);
                } else {
                    self.extended.insert(other.to_string(), value);
                }
            }
        }
    }

    /// One resource's amount (cpu in millicores); zero when absent.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu,
            MEMORY => self.memory,
            PODS => self.pods,
            EPHEMERAL_STORAGE => self.ephemeral,
            other => self.extended.get(other).copied().unwrap_or(0),
        }
    }

    /// Names and amounts of every non-zero resource.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        [
            (CPU, self.cpu),
            (MEMORY, self.memory),
            (PODS, self.pods),
            (EPHEMERAL_STORAGE, self.ephemeral),
        ]
        .into_iter()
        .chain(self.extended.iter().map(|(k, v)| (k.as_str(), *v)))
        .filter(|(_, v)| *v != 0)
    }

    /// Add another amount in place.
    pub fn add(&mut self, other: &Resources) {
        self.cpu += other.cpu;
        self.memory += other.memory;
        self.pods += other.pods;
        self.ephemeral += other.ephemeral;
        for (k, v) in &other.extended {
            *self.extended.entry(k.clone()).or_default() += v;
        }
        self.extended.retain(|_, v| *v != 0);
    }

    /// Subtract another amount in place (may go negative).
    pub fn sub(&mut self, other: &Resources) {
        self.cpu -= other.cpu;
        self.memory -= other.memory;
        self.pods -= other.pods;
        self.ephemeral -= other.ephemeral;
        for (k, v) in &other.extended {
            *self.extended.entry(k.clone()).or_default() -= v;
        }
        self.extended.retain(|_, v| *v != 0);
    }

    /// The sum of two amounts.
    pub fn plus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.add(other);
        r
    }

    /// Whether `self` fits within `capacity` for every resource `self` requests.
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.cpu <= capacity.cpu
            && self.memory <= capacity.memory
            && self.pods <= capacity.pods
            && self.ephemeral <= capacity.ephemeral
            && self
                .extended
                .iter()
                .all(|(k, v)| *v <= capacity.extended.get(k).copied().unwrap_or(0))
    }

    /// Whether `self + extra` fits in `capacity` ([`Resources::fits_in`] of the sum, without
    /// building it: the solver asks this of every NodeClaim a pod is tried on).
    pub fn fits_in_with(&self, extra: &Resources, capacity: &Resources) -> bool {
        let cap = |k: &str| capacity.extended.get(k).copied().unwrap_or(0);
        self.cpu + extra.cpu <= capacity.cpu
            && self.memory + extra.memory <= capacity.memory
            && self.pods + extra.pods <= capacity.pods
            && self.ephemeral + extra.ephemeral <= capacity.ephemeral
            && self
                .extended
                .iter()
                .all(|(k, v)| v + extra.extended.get(k).copied().unwrap_or(0) <= cap(k))
            && extra
                .extended
                .iter()
                .filter(|(k, _)| !self.extended.contains_key(*k))
                .all(|(k, v)| *v <= cap(k))
    }

    /// The resources of `self` that exceed `capacity`, for error messages.
    pub fn exceeding(&self, capacity: &Resources) -> Vec<&str> {
        self.iter()
            .filter(|(name, v)| *v > capacity.get(name))
            .map(|(name, _)| name)
            .collect()
    }

    /// Component-wise maximum.
    pub fn max(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.max_with(other);
        r
    }

    /// Lower each amount to at most `other`'s, in place; an extended resource `other` lacks
    /// (zero) is dropped.
    pub fn min_with(&mut self, other: &Resources) {
        self.cpu = self.cpu.min(other.cpu);
        self.memory = self.memory.min(other.memory);
        self.pods = self.pods.min(other.pods);
        self.ephemeral = self.ephemeral.min(other.ephemeral);
        self.extended.retain(|k, v| match other.extended.get(k) {
            Some(o) => {
                *v = (*v).min(*o);
                *v != 0
            }
            None => false,
        });
    }

    /// Raise each amount to at least `other`'s, in place ([`Resources::max`] without a copy: the
    /// solver folds it over hundreds of instance types per NodeClaim).
    pub fn max_with(&mut self, other: &Resources) {
        self.cpu = self.cpu.max(other.cpu);
        self.memory = self.memory.max(other.memory);
        self.pods = self.pods.max(other.pods);
        self.ephemeral = self.ephemeral.max(other.ephemeral);
        for (k, v) in &other.extended {
            match self.extended.get_mut(k) {
                Some(e) => *e = (*e).max(*v),
                None => {
                    self.extended.insert(k.clone(), *v);
                }
            }
        }
    }

    /// As a Kubernetes resource list (`cpu: 1500m`, `memory: 4Gi`, ...), zero entries omitted.
    pub fn to_list(&self) -> BTreeMap<String, Quantity> {
        self.iter()
            .map(|(name, v)| (name.to_string(), Quantity(format_quantity(name, v))))
            .collect()
    }
}

/// Binary suffixes of byte amounts, largest first.
const BINARY_SUFFIXES: [(&str, i64); 4] = [
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
    ("Ki", 1 << 10),
];

/// Format one amount of resource `name` as a Kubernetes quantity (cpu `value` in millicores,
/// byte amounts in bytes, anything else a count): cpu as whole cores (`2`) or else millicores
/// (`1500m`); memory, ephemeral storage and hugepages with the largest binary suffix that is
/// exact (`4Gi`, `7910Mi`), else in bytes; counts as integers. The same as
/// [`format_quantities`] with one value.
pub fn format_quantity(name: &str, value: i64) -> String {
    format_quantities(name, &[value]).pop().unwrap_or_default()
}

/// Format amounts of resource `name` that one message compares (requested against largest,
/// limit against usage) as Kubernetes quantities in one unit, so they compare at a glance: cpu
/// (`values` in millicores) in cores when every amount is whole cores (`16`), else all in
/// millicores (`20500m` against `16000m`, never `20500m` against `16`); byte amounts (memory,
/// ephemeral storage, hugepages) with the largest binary suffix exact for every amount (`1Gi`
/// against `512Mi` becomes `1024Mi` against `512Mi`), else all in bytes; counts as integers.
/// Zero is `0` in any unit. One string per value, in order; each parses back to its value.
pub fn format_quantities(name: &str, values: &[i64]) -> Vec<String> {
    let (suffix, unit) = common_unit(name, values);
    values
        .iter()
        .map(|&v| {
            if v == 0 {
                "0".to_string()
            } else {
                format!("{}{suffix}", v / unit)
            }
        })
        .collect()
}

/// The suffix and its size (in the resource's base unit) that [`format_quantities`] writes
/// every one of `values` in.
fn common_unit(name: &str, values: &[i64]) -> (&'static str, i64) {
    let exact = |unit: i64| values.iter().all(|v| v % unit == 0);
    if name == CPU {
        return if exact(1000) { ("", 1000) } else { ("m", 1) };
    }
    if name == MEMORY || name == EPHEMERAL_STORAGE || name.starts_with("hugepages-") {
        let any = values.iter().any(|v| *v != 0);
        if let Some(&(suffix, unit)) = BINARY_SUFFIXES.iter().find(|(_, unit)| any && exact(*unit))
        {
            return (suffix, unit);
        }
    }
    ("", 1)
}

impl fmt::Display for Resources {
    /// `{cpu: 1500m, memory: 4Gi, pods: 3}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .iter()
            .map(|(n, v)| format!("{n}: {}", format_quantity(n, v)))
            .collect();
        write!(f, "{{{}}}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_like_kubernetes() {
        let cases = [
            ("100m", 100),
            ("1", 1000),
            ("1.5", 1500),
            ("0.1", 100),
            ("2e3", 2_000_000),
            ("1k", 1_000_000),
            ("1Ki", 1_024_000),
            ("128Mi", 128 * 1024 * 1024 * 1000),
            ("1G", 1_000_000_000_000),
            ("1n", 1),
            ("+3", 3000),
            ("-2", -2000),
        ];
        for (s, want) in cases {
            assert_eq!(parse_milli(s), Ok(want), "{s}");
        }
        for bad in ["", "abc", "1Qi", "1.2.3", "."] {
            assert!(parse_milli(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_units("1.5Gi"), Ok(1_610_612_736));
        assert_eq!(parse_units("100m"), Ok(1));
    }

    #[test]
    fn amounts_format_as_kubernetes_quantities() {
        let one = [
            (CPU, 2000, "2"),
            (CPU, 1500, "1500m"),
            (CPU, 0, "0"),
            (MEMORY, 4 << 30, "4Gi"),
            (MEMORY, 7910 << 20, "7910Mi"),
            (MEMORY, 1_000_000_000, "1000000000"),
            (EPHEMERAL_STORAGE, 20 << 30, "20Gi"),
            ("hugepages-2Mi", 2 << 20, "2Mi"),
            (PODS, 110, "110"),
            (NVIDIA_GPU, 4, "4"),
        ];
        for (name, value, want) in one {
            assert_eq!(format_quantity(name, value), want, "{name} {value}");
        }
        // Amounts compared in one message share a unit: the issue's `cpu requested 2000,
        // largest 893690m` (2000 cores against 893.69) is written in millicores throughout.
        let alike = |name, values: &[i64]| format_quantities(name, values);
        assert_eq!(alike(CPU, &[2_000_000, 893_690]), ["2000000m", "893690m"]);
        assert_eq!(alike(CPU, &[20_500, 16_000]), ["20500m", "16000m"]);
        assert_eq!(alike(CPU, &[4000, 3000, 1000, 2000]), ["4", "3", "1", "2"]);
        assert_eq!(alike(CPU, &[4000, 0, 4000]), ["4", "0", "4"]);
        assert_eq!(alike(MEMORY, &[1 << 30, 512 << 20]), ["1024Mi", "512Mi"]);
        assert_eq!(alike(MEMORY, &[8 << 30, 0]), ["8Gi", "0"]);
        assert_eq!(alike(MEMORY, &[1 << 30, 1000]), ["1073741824", "1000"]);
        assert_eq!(alike(MEMORY, &[0, 0]), ["0", "0"]);
        // Every string parses back to its amount.
        for (name, values) in [
            (CPU, vec![2_000_000, 893_690, 0]),
            (MEMORY, vec![64 << 30, 7910 << 20, 3 << 10]),
        ] {
            for (text, value) in alike(name, &values).iter().zip(&values) {
                let mut r = Resources::default();
                r.set_parsed(name, text).expect("a quantity");
                assert_eq!(r.get(name), *value, "{text}");
            }
        }
    }

    #[test]
    fn fit_and_arithmetic() {
        let mut req = Resources::default();
        req.set_parsed("cpu", "1500m").expect("cpu");
        req.set_parsed("memory", "2Gi").expect("memory");
        req.set_parsed(NVIDIA_GPU, "1").expect("gpu");
        let mut cap = Resources::default();
        cap.set_parsed("cpu", "2").expect("cpu");
        cap.set_parsed("memory", "4Gi").expect("memory");
        assert!(!req.fits_in(&cap));
        assert_eq!(req.exceeding(&cap), vec![NVIDIA_GPU]);
        cap.set(NVIDIA_GPU, 1);
        assert!(req.fits_in(&cap));
        assert!(!req.plus(&req).fits_in(&cap));
        let mut left = cap.clone();
        left.sub(&req);
        assert_eq!((left.cpu, left.get(NVIDIA_GPU)), (500, 0));
        assert_eq!(
            req.to_string(),
            "{cpu: 1500m, memory: 2Gi, nvidia.com/gpu: 1}"
        );
    }
}
