//! Upstream Karpenter's feature gates (`FEATURE_GATES="NodeRepair=true,..."`), parsed and
//! validated into a map over upstream's defaults.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// One of upstream Karpenter's feature gates (`pkg/operator/options`). This project accepts
/// every gate name upstream accepts, so `FEATURE_GATES` values written for upstream apply
/// unchanged; what a gate switches is decided by the controllers that read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FeatureGate {
    /// Consolidation may replace a spot node with a cheaper spot node (upstream default: off).
    SpotToSpotConsolidation,
    /// Unhealthy nodes are repaired (replaced) (upstream default: off).
    NodeRepair,
    /// Capacity reservations are launched into (upstream default: on).
    ReservedCapacity,
    /// NodePools with a fixed node count (upstream default: off).
    StaticCapacity,
    /// NodeOverlay price and capacity overrides (upstream default: off).
    NodeOverlay,
    /// CapacityBuffer virtual pods (upstream default: off).
    CapacityBuffer,
}

impl FeatureGate {
    /// Every gate, in the order `--help` and errors list them.
    pub const ALL: [FeatureGate; 6] = [
        FeatureGate::SpotToSpotConsolidation,
        FeatureGate::NodeRepair,
        FeatureGate::ReservedCapacity,
        FeatureGate::StaticCapacity,
        FeatureGate::NodeOverlay,
        FeatureGate::CapacityBuffer,
    ];

    /// The gate's name in `FEATURE_GATES`.
    pub fn name(self) -> &'static str {
        match self {
            FeatureGate::SpotToSpotConsolidation => "SpotToSpotConsolidation",
            FeatureGate::NodeRepair => "NodeRepair",
            FeatureGate::ReservedCapacity => "ReservedCapacity",
            FeatureGate::StaticCapacity => "StaticCapacity",
            FeatureGate::NodeOverlay => "NodeOverlay",
            FeatureGate::CapacityBuffer => "CapacityBuffer",
        }
    }

    /// Upstream's default when `FEATURE_GATES` does not name the gate.
    pub fn default_enabled(self) -> bool {
        matches!(self, FeatureGate::ReservedCapacity)
    }
}

impl fmt::Display for FeatureGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Validated feature gates: the gates `FEATURE_GATES` set explicitly; the rest keep upstream's
/// defaults ([`FeatureGate::default_enabled`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates(BTreeMap<FeatureGate, bool>);

impl FeatureGates {
    /// Whether `gate` is on.
    pub fn enabled(&self, gate: FeatureGate) -> bool {
        self.0
            .get(&gate)
            .copied()
            .unwrap_or_else(|| gate.default_enabled())
    }

    /// Turn `gate` on or off.
    pub fn set(&mut self, gate: FeatureGate, on: bool) {
        self.0.insert(gate, on);
    }
}

/// Go's `strconv.ParseBool`, which upstream's gate parser uses.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

impl FromStr for FeatureGates {
    type Err = String;

    /// Parse `Name=true,Other=false` (spaces around items allowed, empty items skipped; a gate
    /// named twice takes the last value, as upstream's map flag does).
    ///
    /// Errors: an item without `=`, an unknown gate (the message lists the known ones), a value
    /// that is not a Go boolean.
    fn from_str(s: &str) -> Result<FeatureGates, String> {
        let mut gates = FeatureGates::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?} is not Name=true|false"))?;
            let (name, value) = (name.trim(), value.trim());
            let gate = FeatureGate::ALL
                .into_iter()
                .find(|g| g.name() == name)
                .ok_or_else(|| {
                    let known: Vec<&str> = FeatureGate::ALL.iter().map(|g| g.name()).collect();
                    format!(
                        "unknown feature gate {name:?} (known: {})",
                        known.join(", ")
                    )
                })?;
            let on = parse_go_bool(value)
                .ok_or_else(|| format!("{name}={value}: the value must be true or false"))?;
            gates.set(gate, on);
        }
        Ok(gates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_parse_into_a_map_over_upstreams_defaults() {
        let gates: FeatureGates =
            " NodeRepair=true, ReservedCapacity=false,,SpotToSpotConsolidation=T"
                .parse()
                .expect("valid gates");
        assert!(gates.enabled(FeatureGate::NodeRepair));
        assert!(!gates.enabled(FeatureGate::ReservedCapacity));
        assert!(gates.enabled(FeatureGate::SpotToSpotConsolidation));
        assert!(!gates.enabled(FeatureGate::StaticCapacity));
        let defaults = FeatureGates::default();
        assert!(defaults.enabled(FeatureGate::ReservedCapacity));
        assert!(!defaults.enabled(FeatureGate::NodeRepair));
        let last: FeatureGates = "NodeRepair=true,NodeRepair=false".parse().expect("valid");
        assert!(!last.enabled(FeatureGate::NodeRepair));
    }
}
