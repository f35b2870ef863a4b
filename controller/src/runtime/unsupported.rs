//! "Nothing accepted is ignored": an object that sets a field this project does not honour yet
//! ([`crds::support::FIELDS`] marks it reported) gets a Warning Event, reason `UnsupportedField`,
//! naming each such field and what is not done; a feature gate turned on that nothing honours
//! yet is logged at start-up the same way.

use std::time::Duration;

use crds::support::{UNSUPPORTED_FIELD_REASON, message, unsupported};
use serde::Serialize;

use super::Context;
use super::events::{EventSpec, EventType, reference};
use super::feature_gates::{FeatureGate, FeatureGates};

/// How long an identical `UnsupportedField` Event is not repeated for one object.
const DEDUPE: Duration = Duration::from_secs(600);

/// Publish `obj`'s `UnsupportedField` Event when its `spec` (of kind `kind`, e.g.
/// `EC2NodeClass`) sets fields that are not honoured; nothing otherwise. Returns the fields named.
pub fn report_fields<K, S>(ctx: &Context, obj: &K, kind: &str, spec: &S) -> Vec<&'static str>
where
    K: kube::Resource<DynamicType = ()>,
    S: Serialize,
{
    let Ok(spec) = serde_json::to_value(spec) else {
        return Vec::new();
    };
    let fields = unsupported(kind, &spec);
    if !fields.is_empty() {
        ctx.recorder.publish(EventSpec {
            regarding: reference(obj),
            type_: EventType::Warning,
            reason: UNSUPPORTED_FIELD_REASON,
            message: format!("Not honoured yet: {}", message(&fields)),
            dedupe: DEDUPE,
        });
    }
    fields.into_iter().map(|(path, _)| path).collect()
}

/// The gates that are on and that nothing honours yet, with what is missing: logged at start-up
/// by [`log_gates`].
pub fn unhonoured_gates(gates: &FeatureGates) -> Vec<(FeatureGate, &'static str)> {
    FeatureGate::ALL
        .into_iter()
        .filter(|g| gates.enabled(*g))
        .filter_map(|g| crds::support::gate_report(g.name()).map(|why| (g, why)))
        .collect()
}

/// Log a warning for every gate of [`unhonoured_gates`].
pub fn log_gates(gates: &FeatureGates) {
    for (gate, why) in unhonoured_gates(gates) {
        tracing::warn!(
            gate = gate.name(),
            reason = UNSUPPORTED_FIELD_REASON,
            "feature gate on but not honoured yet: {why}"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::{CommandFactory, Parser};
    use crds::support::{GATES, SETTINGS, proof_exists};

    use super::*;
    use crate::cloudprovider::build::CloudOptions;
    use crate::runtime::options::{ControllerOptions, RunOptions};

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        controller: ControllerOptions,
        #[command(flatten)]
        run: RunOptions,
        #[command(flatten)]
        cloud: CloudOptions,
    }

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn every_setting_and_gate_is_honoured_with_a_proof_or_reported() {
        let mut problems = Vec::new();
        let cmd = Cli::command();
        for env in cmd.get_arguments().filter_map(|a| a.get_env()) {
            let env = env.to_string_lossy();
            match SETTINGS.iter().find(|s| s.name == env) {
                None => problems.push(format!("{env}: not in crds::support::SETTINGS")),
                Some(s) => match s.support {
                    Ok(proof) => {
                        if let Err(e) = proof_exists(&root(), proof) {
                            problems.push(format!("{env}: {e}"));
                        }
                    }
                    Err(why) => problems.push(format!("{env}: a setting must be honoured ({why})")),
                },
            }
        }
        for gate in FeatureGate::ALL {
            match GATES.iter().find(|g| g.name == gate.name()) {
                None => problems.push(format!("{gate}: not in crds::support::GATES")),
                Some(g) => {
                    if let Ok(proof) = g.support
                        && let Err(e) = proof_exists(&root(), proof)
                    {
                        problems.push(format!("{gate}: {e}"));
                    }
                }
            }
        }
        for g in GATES {
            if !FeatureGate::ALL.iter().any(|f| f.name() == g.name) {
                problems.push(format!("{}: listed but not a feature gate", g.name));
            }
        }
        assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    }

    #[test]
    fn gates_on_that_nothing_honours_are_named() {
        let mut gates = FeatureGates::default();
        gates.set(FeatureGate::CapacityBuffer, true);
        gates.set(FeatureGate::StaticCapacity, true);
        let named: Vec<FeatureGate> = unhonoured_gates(&gates)
            .into_iter()
            .map(|(g, _)| g)
            .collect();
        assert!(named.contains(&FeatureGate::CapacityBuffer), "{named:?}");
        assert!(!named.contains(&FeatureGate::StaticCapacity), "{named:?}");
    }
}
