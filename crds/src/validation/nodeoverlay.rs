//! Runtime validation of NodeOverlays: the CRD's pattern, range and CEL rules plus upstream's
//! `RuntimeValidate` (`pkg/apis/v1alpha1/nodeoverlay.go` markers and
//! `nodeoverlay_validation.go`), for the NodeOverlay controller to report as
//! `ValidationSucceeded=False` with reason [`crate::conditions::reason::RUNTIME_VALIDATION`] and
//! [`super::summarize`] as the message.

use super::{FieldError, validate_requirement};
use crate::labels;
use crate::nodeoverlay::{
    BOTH_PRICES_MESSAGE, NodeOverlay, NodeOverlaySpec, PRICE_ADJUSTMENT_PATTERN, PRICE_PATTERN,
    WEIGHT_MAX, WEIGHT_MIN,
};
use crate::requirements::{MAX_REQUIREMENTS, NodeSelectorRequirementWithMinValues, Operator};

/// Validates a NodeOverlay (see [`validate_nodeoverlay_spec`]).
pub fn validate_nodeoverlay(overlay: &NodeOverlay) -> Vec<FieldError> {
    validate_nodeoverlay_spec(&overlay.spec)
}

/// Validates a NodeOverlay spec; empty when valid. Checks, each reported on its field:
/// at most 100 requirements, each a valid requirement (qualified key outside the restricted
/// label domains, valid values, values for In and NotIn, one non-negative integer for
/// Gt/Lt/Gte/Lte; upstream `ValidateRequirement`); `price` and `priceAdjustment` against
/// their patterns and not both; no well-known resource (cpu, memory, pods, GPUs, ...) in
/// `capacity` (upstream refuses every `WellKnownResources` entry at runtime, the CRD only the
/// four core ones); `weight` within 1..=10000.
pub fn validate_nodeoverlay_spec(spec: &NodeOverlaySpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = "spec.requirements";
    if spec.requirements.len() > MAX_REQUIREMENTS {
        errs.push(FieldError::new(
            path,
            format!(
                "{} requirements exceed the maximum of {MAX_REQUIREMENTS}",
                spec.requirements.len()
            ),
        ));
    }
    for (i, req) in spec.requirements.iter().enumerate() {
        let item = format!("{path}[{i}]");
        errs.extend(validate_requirement(
            &NodeSelectorRequirementWithMinValues::from(req),
            &item,
        ));
        if req.operator == Operator::NotIn && req.values.is_empty() {
            errs.push(FieldError::new(
                format!("{item}.values"),
                "requirements with operator 'NotIn' must have a value defined",
            ));
        }
    }
    if let Some(price) = &spec.price
        && !is_valid_price(price)
    {
        errs.push(FieldError::new(
            "spec.price",
            format!("{price:?} should match '{PRICE_PATTERN}': a price in USD/hour, e.g. 0.432"),
        ));
    }
    if let Some(adjustment) = &spec.price_adjustment
        && !is_valid_price_adjustment(adjustment)
    {
        errs.push(FieldError::new(
            "spec.priceAdjustment",
            format!(
                "{adjustment:?} should match '{PRICE_ADJUSTMENT_PATTERN}': a signed amount in USD/hour (e.g. -0.5) or a signed percentage no lower than -100% (e.g. +10%)"
            ),
        ));
    }
    if spec.price.is_some() && spec.price_adjustment.is_some() {
        errs.push(FieldError::new("spec", BOTH_PRICES_MESSAGE));
    }
    for name in spec.capacity.keys() {
        if labels::WELL_KNOWN_RESOURCES.contains(&name.as_str()) {
            errs.push(FieldError::new(
                format!("spec.capacity[{name}]"),
                format!("invalid capacity: {name} in resource, restricted"),
            ));
        }
    }
    if let Some(weight) = spec.weight
        && !(WEIGHT_MIN..=WEIGHT_MAX).contains(&weight)
    {
        errs.push(FieldError::new(
            "spec.weight",
            format!("{weight} must be between {WEIGHT_MIN} and {WEIGHT_MAX}"),
        ));
    }
    errs
}

/// Whether `s` matches [`PRICE_PATTERN`]: digits, optionally `.` and more digits (`43`,
/// `34.43`; not `+42`, `.5`, `42.`, `1e10`).
pub fn is_valid_price(s: &str) -> bool {
    match s.split_once('.') {
        Some((whole, fraction)) => all_digits(whole) && all_digits(fraction),
        None => all_digits(s),
    }
}

/// Whether `s` matches [`PRICE_ADJUSTMENT_PATTERN`]: `+` or `-` and a decimal (`+43`, `-.5`,
/// `-0.5`), `+` and a decimal percentage (`+298%`, `+.5%`), or `-` and a percentage of one or
/// two whole digits (`-99.5%`, `-0%`) or exactly `-100%`. Unsigned values, `-100.0%` and
/// `-101%` do not match.
pub fn is_valid_price_adjustment(s: &str) -> bool {
    let (negative, rest) = match (s.strip_prefix('+'), s.strip_prefix('-')) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => return false,
    };
    match rest.strip_suffix('%') {
        None => is_decimal(rest),
        Some(percent) if !negative => is_decimal(percent),
        Some(percent) => {
            let (whole, fraction_ok) = match percent.split_once('.') {
                Some((whole, fraction)) => (whole, all_digits(fraction)),
                None => (percent, true),
            };
            percent == "100" || (whole.len() <= 2 && all_digits(whole) && fraction_ok)
        }
    }
}

/// `\d*\.?\d+`: digits with at most one `.`, ending in a digit.
fn is_decimal(s: &str) -> bool {
    match s.split_once('.') {
        Some((whole, fraction)) => (whole.is_empty() || all_digits(whole)) && all_digits(fraction),
        None => all_digits(s),
    }
}

/// One or more ASCII digits.
fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}
