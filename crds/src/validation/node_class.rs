//! Validation of an EC2NodeClass spec for objects the API server did not check (CRDs installed
//! without the CEL rules, or a server that does not evaluate them): the rules of upstream's CRD
//! (`aws:pkg/apis/v1/ec2nodeclass.go` `XValidation` markers) that decide which IAM identity
//! nodes get, with upstream's messages. The node class controller turns a non-empty result into
//! `ValidationSucceeded=False` with reason [`NODE_CLASS_VALIDATION_FAILED_REASON`].

use super::FieldError;
use crate::conditions::reason;
use crate::ec2nodeclass::EC2NodeClassSpec;

/// Reason for `ValidationSucceeded=False` on an EC2NodeClass whose spec breaks a CRD rule.
pub const NODE_CLASS_VALIDATION_FAILED_REASON: &str = reason::NODE_CLASS_VALIDATION_FAILED;

/// Upstream's message when both or neither of `role` and `instanceProfile` are set.
pub const ROLE_XOR_INSTANCE_PROFILE: &str =
    "must specify exactly one of ['role', 'instanceProfile']";

/// Validates an EC2NodeClass spec: exactly one of `role` and `instanceProfile`, neither empty.
pub fn validate_ec2nodeclass_spec(spec: &EC2NodeClassSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.role.is_some() == spec.instance_profile.is_some() {
        errs.push(FieldError::new("spec", ROLE_XOR_INSTANCE_PROFILE));
    }
    for (field, value) in [
        ("role", &spec.role),
        ("instanceProfile", &spec.instance_profile),
    ] {
        if value.as_deref() == Some("") {
            errs.push(FieldError::new(
                format!("spec.{field}"),
                format!("{field} cannot be empty"),
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(role: Option<&str>, profile: Option<&str>) -> EC2NodeClassSpec {
        let tags = json!([{"tags": {"karpenter.sh/discovery": "c"}}]);
        let mut spec: EC2NodeClassSpec = serde_json::from_value(json!({
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": tags,
            "securityGroupSelectorTerms": tags,
        }))
        .expect("a minimal spec");
        spec.role = role.map(Into::into);
        spec.instance_profile = profile.map(Into::into);
        spec
    }

    #[test]
    fn exactly_one_non_empty_identity_is_valid() {
        let cases = [
            (spec(Some("r"), None), ""),
            (spec(None, Some("p")), ""),
            (
                spec(Some("r"), Some("p")),
                "spec: must specify exactly one of ['role', 'instanceProfile']",
            ),
            (
                spec(None, None),
                "spec: must specify exactly one of ['role', 'instanceProfile']",
            ),
            (spec(Some(""), None), "spec.role: role cannot be empty"),
            (
                spec(None, Some("")),
                "spec.instanceProfile: instanceProfile cannot be empty",
            ),
        ];
        for (s, want) in cases {
            assert_eq!(
                super::super::summarize(&validate_ec2nodeclass_spec(&s)),
                want
            );
        }
    }
}
