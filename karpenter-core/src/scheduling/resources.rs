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

    /// The resources of `self` that exceed `capacity`, for error messages.
    pub fn exceeding(&self, capacity: &Resources) -> Vec<&str> {
        self.iter()
            .filter(|(name, v)| *v > capacity.get(name))
            .map(|(name, _)| name)
            .collect()
    }

    /// Component-wise maximum.
    pub fn max(&self, other: &Resources) -> Resources {
        let mut r = Resources {
            cpu: self.cpu.max(other.cpu),
            memory: self.memory.max(other.memory),
            pods: self.pods.max(other.pods),
            ephemeral: self.ephemeral.max(other.ephemeral),
            extended: self.extended.clone(),
        };
        for (k, v) in &other.extended {
            let e = r.extended.entry(k.clone()).or_insert(*v);
            *e = (*e).max(*v);
        }
        r
    }

    /// As a Kubernetes resource list (`cpu: 1500m`, `memory: 4Gi`, ...), zero entries omitted.
    pub fn to_list(&self) -> BTreeMap<String, Quantity> {
        self.iter()
            .map(|(name, v)| (name.to_string(), Quantity(format_quantity(name, v))))
            .collect()
    }
}

/// Format an amount the way Kubernetes prints it: cpu as whole cores or millicores, memory and
/// storage with the largest exact binary suffix, counts as integers.
pub fn format_quantity(name: &str, value: i64) -> String {
    if name == CPU {
        return if value % 1000 == 0 {
            (value / 1000).to_string()
        } else {
            format!("{value}m")
        };
    }
    if name == MEMORY || name == EPHEMERAL_STORAGE || name.starts_with("hugepages-") {
        for (suffix, unit) in [
            ("Ti", 1i64 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ] {
            if value != 0 && value % unit == 0 {
                return format!("{}{suffix}", value / unit);
            }
        }
    }
    value.to_string()
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
