//! Unsubstituted `${VAR}` placeholders in an EC2NodeClass's subnet and security group selector
//! terms: what a manifest copied from upstream's examples (`karpenter.sh/discovery:
//! "${CLUSTER_NAME}"`) carries when it is applied without `envsubst`. The `SubnetsNotFound` and
//! `SecurityGroupsNotFound` messages name the field and say how to fix it, so `kubectl
//! describe` alone explains why nothing matched.

use super::{SecurityGroupSelectorTerm, SubnetSelectorTerm};

/// The placeholder upstream's example manifests put where the cluster's name goes.
pub const CLUSTER_NAME_PLACEHOLDER: &str = "${CLUSTER_NAME}";

/// Message of `SubnetsReady=False` with reason `SubnetsNotFound` (upstream's wording).
pub const SUBNETS_NOT_FOUND_MESSAGE: &str = "SubnetSelector did not match any Subnets";

/// Message of `SecurityGroupsReady=False` with reason `SecurityGroupsNotFound` (upstream's
/// wording).
pub const SECURITY_GROUPS_NOT_FOUND_MESSAGE: &str =
    "SecurityGroupSelector did not match any SecurityGroups";

/// A field of a selector term that holds a placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placeholder {
    /// Where, as a path from the spec, e.g. `subnetSelectorTerms[0].tags["karpenter.sh/discovery"]`.
    pub field: String,
    /// The placeholder as written, e.g. `${CLUSTER_NAME}`.
    pub placeholder: String,
}

/// The first `${NAME}` in `value`, if any.
fn find(value: &str) -> Option<&str> {
    let start = value.find("${")?;
    let len = value[start..].find('}')?;
    let name = &value[start + 2..start + len];
    let is_variable =
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    is_variable.then(|| &value[start..=start + len])
}

/// The first placeholder among a term's tags (keys, then values) and other named fields.
fn in_term<'a>(
    list: &str,
    index: usize,
    tags: impl IntoIterator<Item = (&'a String, &'a String)>,
    fields: &[(&str, Option<&'a String>)],
) -> Option<Placeholder> {
    let at = |field: String, placeholder: &str| Placeholder {
        field,
        placeholder: placeholder.to_string(),
    };
    for (key, value) in tags {
        if let Some(p) = find(key).or_else(|| find(value)) {
            return Some(at(format!("{list}[{index}].tags[{key:?}]"), p));
        }
    }
    fields.iter().find_map(|(name, value)| {
        let p = find(value.as_ref()?)?;
        Some(at(format!("{list}[{index}].{name}"), p))
    })
}

/// The first placeholder in subnet selector terms.
pub fn in_subnet_terms(terms: &[SubnetSelectorTerm]) -> Option<Placeholder> {
    terms
        .iter()
        .enumerate()
        .find_map(|(i, t)| in_term("subnetSelectorTerms", i, &t.tags, &[("id", t.id.as_ref())]))
}

/// The first placeholder in security group selector terms.
pub fn in_security_group_terms(terms: &[SecurityGroupSelectorTerm]) -> Option<Placeholder> {
    terms.iter().enumerate().find_map(|(i, t)| {
        let fields = [("id", t.id.as_ref()), ("name", t.name.as_ref())];
        in_term("securityGroupSelectorTerms", i, &t.tags, &fields)
    })
}

/// `message`, followed, when a placeholder was found, by where it is and how to substitute it
/// (`cluster_name` is the value `${CLUSTER_NAME}` stands for).
pub fn not_found_message(message: &str, found: Option<&Placeholder>, cluster_name: &str) -> String {
    let Some(p) = found else {
        return message.to_string();
    };
    let variable = p.placeholder.trim_start_matches("${").trim_end_matches('}');
    let (replacement, value) = if p.placeholder == CLUSTER_NAME_PLACEHOLDER {
        (
            format!("the cluster's name ({cluster_name:?})"),
            cluster_name,
        )
    } else {
        (format!("the value of {variable}"), "...")
    };
    format!(
        "{message}: {field} contains the literal placeholder {placeholder}, which was not \
         substituted; replace it with {replacement}, e.g. apply the manifest with \
         `{variable}={value} envsubst < manifest.yaml | kubectl apply -f -`",
        field = p.field,
        placeholder = p.placeholder,
    )
}

/// The `SubnetsNotFound` message for these terms.
pub fn subnets_not_found(terms: &[SubnetSelectorTerm], cluster_name: &str) -> String {
    not_found_message(
        SUBNETS_NOT_FOUND_MESSAGE,
        in_subnet_terms(terms).as_ref(),
        cluster_name,
    )
}

/// The `SecurityGroupsNotFound` message for these terms.
pub fn security_groups_not_found(
    terms: &[SecurityGroupSelectorTerm],
    cluster_name: &str,
) -> String {
    not_found_message(
        SECURITY_GROUPS_NOT_FOUND_MESSAGE,
        in_security_group_terms(terms).as_ref(),
        cluster_name,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn tagged(key: &str, value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(key.to_string(), value.to_string())])
    }

    #[test]
    fn placeholders_are_found_in_tags_ids_and_names() {
        assert_eq!(
            find("KarpenterNodeRole-${CLUSTER_NAME}"),
            Some("${CLUSTER_NAME}")
        );
        assert_eq!(find("${AWS_ACCOUNT_ID}x"), Some("${AWS_ACCOUNT_ID}"));
        for plain in ["demo", "$CLUSTER_NAME", "${}", "${a b}", "${OPEN"] {
            assert_eq!(find(plain), None, "{plain}");
        }
        let subnets = [
            SubnetSelectorTerm {
                tags: tagged("karpenter.sh/discovery", "demo"),
                id: None,
            },
            SubnetSelectorTerm {
                tags: tagged("kubernetes.io/cluster/${CLUSTER_NAME}", "owned"),
                id: None,
            },
        ];
        assert_eq!(
            in_subnet_terms(&subnets),
            Some(Placeholder {
                field: "subnetSelectorTerms[1].tags[\"kubernetes.io/cluster/${CLUSTER_NAME}\"]"
                    .into(),
                placeholder: "${CLUSTER_NAME}".into(),
            })
        );
        assert_eq!(in_subnet_terms(&subnets[..1]), None);
        let groups = [SecurityGroupSelectorTerm {
            name: Some("${CLUSTER_NAME}-node".into()),
            ..SecurityGroupSelectorTerm::default()
        }];
        assert_eq!(
            in_security_group_terms(&groups).map(|p| p.field),
            Some("securityGroupSelectorTerms[0].name".into())
        );
    }

    #[test]
    fn the_message_says_what_to_substitute() {
        let terms = [SubnetSelectorTerm {
            tags: tagged("karpenter.sh/discovery", "${CLUSTER_NAME}"),
            id: None,
        }];
        assert_eq!(
            subnets_not_found(&terms, "demo"),
            "SubnetSelector did not match any Subnets: \
             subnetSelectorTerms[0].tags[\"karpenter.sh/discovery\"] contains the literal \
             placeholder ${CLUSTER_NAME}, which was not substituted; replace it with the \
             cluster's name (\"demo\"), e.g. apply the manifest with \
             `CLUSTER_NAME=demo envsubst < manifest.yaml | kubectl apply -f -`"
        );
        let other = [SecurityGroupSelectorTerm {
            id: Some("sg-${GROUP}".into()),
            ..SecurityGroupSelectorTerm::default()
        }];
        let message = security_groups_not_found(&other, "demo");
        assert!(
            message.starts_with(SECURITY_GROUPS_NOT_FOUND_MESSAGE)
                && message.contains("replace it with the value of GROUP")
                && message.contains("`GROUP=... envsubst"),
            "{message}"
        );
        assert_eq!(
            security_groups_not_found(&[SecurityGroupSelectorTerm::default()], "demo"),
            SECURITY_GROUPS_NOT_FOUND_MESSAGE,
            "no placeholder, upstream's message alone"
        );
    }
}
