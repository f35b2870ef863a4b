//! Taints and tolerations with Kubernetes' matching rules (`k8s.io/api/core/v1`
//! `Toleration.ToleratesTaint`): `NoSchedule` and `NoExecute` taints must be tolerated,
//! `PreferNoSchedule` never blocks.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether one toleration matches one taint.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            // An empty key with Equal is invalid in Kubernetes; it only matches empty keys.
            if key.is_empty() && !taint.key.is_empty() {
                return false;
            }
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The first `NoSchedule`/`NoExecute` taint none of the tolerations match, if any.
pub fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// `key=value:Effect` (or `key:Effect`), as kubectl prints taints.
pub fn taint_string(t: &Taint) -> String {
    match t.value.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => format!("{}={v}:{}", t.key, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

/// A taint from its parts.
pub fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.to_string(),
        value: value.map(String::from),
        effect: effect.to_string(),
        time_added: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(key: Option<&str>, op: &str, value: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(String::from),
            operator: Some(op.to_string()),
            value: value.map(String::from),
            effect: effect.map(String::from),
            toleration_seconds: None,
        }
    }

    #[test]
    fn toleration_matching_table() {
        let gpu = taint("nvidia.com/gpu", Some("true"), "NoSchedule");
        let cases = [
            (tol(Some("nvidia.com/gpu"), "Exists", None, None), true),
            (
                tol(
                    Some("nvidia.com/gpu"),
                    "Equal",
                    Some("true"),
                    Some("NoSchedule"),
                ),
                true,
            ),
            (
                tol(Some("nvidia.com/gpu"), "Equal", Some("false"), None),
                false,
            ),
            (
                tol(Some("nvidia.com/gpu"), "Exists", None, Some("NoExecute")),
                false,
            ),
            (tol(None, "Exists", None, None), true),
            (tol(Some("other"), "Exists", None, None), false),
        ];
        for (t, want) in cases {
            assert_eq!(tolerates(&t, &gpu), want, "{t:?}");
        }
    }

    #[test]
    fn prefer_no_schedule_never_blocks() {
        let taints = vec![
            taint("a", None, "PreferNoSchedule"),
            taint("b", Some("x"), "NoExecute"),
        ];
        assert_eq!(
            untolerated(&taints, &[]).map(taint_string),
            Some("b=x:NoExecute".to_string())
        );
        assert!(untolerated(&taints, &[tol(Some("b"), "Exists", None, None)]).is_none());
    }
}
