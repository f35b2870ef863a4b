//! EC2NodeClass resolution against EC2 (upstream `aws:pkg/providers/{subnet,securitygroup,amifamily}`):
//! selector terms become Describe* filters; the results become the node class's status.
//!
//! - Subnets: terms by `id` or `tags` (`*` = any value), ORed; sorted by free IPv4 addresses,
//!   most first (the launch takes the first subnet of each zone).
//! - Security groups: terms by `id`, `name` or `tags`.
//! - AMIs: terms by `id`, or `name`/`owner`/`tags` (owners default to `self` and `amazon` when a
//!   name is given), or an alias `family@version` resolved through SSM public parameters
//!   (e.g. `/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id`)
//!   for amd64 and arm64. Where SSM has no such parameter (an EC2 emulator, a partition without
//!   EKS parameters), the alias falls back to Amazon-owned images with the family's release name
//!   pattern, newest first. Images are ordered non-deprecated first, then newest first.
//! - Instance profile: `instanceProfile` as given, or for `role` an instance profile Karpenter
//!   creates in IAM and deletes with the node class (`<cluster>_<hash of region and role>`).

use std::collections::BTreeSet;

use crds::ec2nodeclass::{
    Alias, Ami, AmiFamily, AmiSelectorTerm, SecurityGroup, SecurityGroupSelectorTerm, Subnet,
    SubnetSelectorTerm, placeholder,
};
use crds::labels::ARCH_LABEL;
use crds::{EC2NodeClass, EC2NodeClassStatus};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::launchtemplate::fnv;
use ec2api::{Ec2, Ec2Error, Filter, ImageInfo, ImageQuery};
use karpenter_core::cloud::NodeClassResolution;

fn tag_filters(tags: &std::collections::BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::new("tag-key", k.clone())
            } else {
                Filter::new(format!("tag:{k}"), v.clone())
            }
        })
        .collect()
}

async fn subnets(ec2: &dyn Ec2, terms: &[SubnetSelectorTerm]) -> Result<Vec<Subnet>, Ec2Error> {
    let mut found = Vec::new();
    for term in terms {
        let filters = match &term.id {
            Some(id) => vec![Filter::new("subnet-id", id.clone())],
            None if term.tags.is_empty() => continue,
            None => tag_filters(&term.tags),
        };
        found.extend(ec2.describe_subnets(filters).await?);
    }
    found.sort_by(|a, b| b.available_ips.cmp(&a.available_ips).then(a.id.cmp(&b.id)));
    let mut seen = BTreeSet::new();
    Ok(found
        .into_iter()
        .filter(|s| seen.insert(s.id.clone()))
        .map(|s| Subnet {
            id: s.id,
            zone: s.zone,
            zone_id: s.zone_id,
        })
        .collect())
}

async fn security_groups(
    ec2: &dyn Ec2,
    terms: &[SecurityGroupSelectorTerm],
) -> Result<Vec<SecurityGroup>, Ec2Error> {
    let mut found = Vec::new();
    for term in terms {
        let filters = if let Some(id) = &term.id {
            vec![Filter::new("group-id", id.clone())]
        } else if let Some(name) = &term.name {
            vec![Filter::new("group-name", name.clone())]
        } else if !term.tags.is_empty() {
            tag_filters(&term.tags)
        } else {
            continue;
        };
        found.extend(ec2.describe_security_groups(filters).await?);
    }
    let mut seen = BTreeSet::new();
    Ok(found
        .into_iter()
        .filter(|g| seen.insert(g.id.clone()))
        .map(|g| SecurityGroup {
            id: g.id,
            name: Some(g.name),
        })
        .collect())
}

/// The SSM parameter holding an alias's image for one architecture (`x86_64` or `arm64`).
pub fn alias_parameter(alias: &Alias, k8s: &str, arch: &str) -> Option<String> {
    let v = alias.version.as_str();
    let latest = v == "latest";
    Some(match alias.family {
        AmiFamily::Al2023 => {
            let leaf = if latest {
                "recommended".to_string()
            } else {
                format!("amazon-eks-node-al2023-{arch}-standard-{k8s}-{v}")
            };
            format!(
                "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/standard/{leaf}/image_id"
            )
        }
        AmiFamily::Al2 => {
            let (dir, node) = if arch == "arm64" {
                ("amazon-linux-2-arm64", "amazon-eks-arm64-node")
            } else {
                ("amazon-linux-2", "amazon-eks-node")
            };
            let leaf = if latest {
                "recommended".to_string()
            } else {
                format!("{node}-{k8s}-{v}")
            };
            format!("/aws/service/eks/optimized-ami/{k8s}/{dir}/{leaf}/image_id")
        }
        AmiFamily::Bottlerocket => {
            let ver = if latest {
                "latest"
            } else {
                v.trim_start_matches('v')
            };
            format!("/aws/service/bottlerocket/aws-k8s-{k8s}/{arch}/{ver}/image_id")
        }
        _ => return None,
    })
}

/// The release name pattern (EC2 `name` filter) of an alias's images, for the fallback.
pub fn alias_name_pattern(alias: &Alias, k8s: &str, arch: &str) -> Option<String> {
    let v = if alias.version == "latest" {
        "*".to_string()
    } else {
        alias.version.clone()
    };
    Some(match alias.family {
        AmiFamily::Al2023 => format!("amazon-eks-node-al2023-{arch}-standard-{k8s}-{v}"),
        AmiFamily::Al2 if arch == "arm64" => format!("amazon-eks-arm64-node-{k8s}-{v}"),
        AmiFamily::Al2 => format!("amazon-eks-node-{k8s}-{v}"),
        AmiFamily::Bottlerocket => format!(
            "bottlerocket-aws-k8s-{k8s}-{arch}-{}*",
            v.trim_start_matches('v').trim_end_matches('*')
        ),
        _ => return None,
    })
}

fn newest(mut images: Vec<ImageInfo>) -> Option<ImageInfo> {
    images.sort_by(|a, b| b.creation_date.cmp(&a.creation_date));
    images.into_iter().next()
}

async fn alias_images(ec2: &dyn Ec2, alias: &Alias, k8s: &str) -> Result<Vec<ImageInfo>, Ec2Error> {
    let mut out = Vec::new();
    for arch in ["x86_64", "arm64"] {
        let Some(parameter) = alias_parameter(alias, k8s, arch) else {
            continue;
        };
        if let Some(id) = ec2.ssm_parameter(&parameter).await? {
            let images = ec2
                .describe_images(ImageQuery {
                    ids: vec![id],
                    ..ImageQuery::default()
                })
                .await;
            match images {
                Ok(images) => out.extend(newest(images)),
                Err(e) if e.is_not_found() || e.code.starts_with("InvalidAMIID") => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        let Some(pattern) = alias_name_pattern(alias, k8s, arch) else {
            continue;
        };
        let images = ec2
            .describe_images(ImageQuery {
                owners: vec!["amazon".into()],
                filters: vec![
                    Filter::new("name", pattern),
                    Filter::new("architecture", arch),
                ],
                ..ImageQuery::default()
            })
            .await?;
        out.extend(newest(images));
    }
    Ok(out)
}

async fn amis(
    ec2: &dyn Ec2,
    terms: &[AmiSelectorTerm],
    k8s: &str,
    now: Timestamp,
) -> Result<Vec<Ami>, Ec2Error> {
    let mut images: Vec<ImageInfo> = Vec::new();
    for term in terms {
        if let Some(alias) = term.alias.as_deref().and_then(Alias::parse) {
            images.extend(alias_images(ec2, &alias, k8s).await?);
            continue;
        }
        let query = if let Some(id) = &term.id {
            ImageQuery {
                ids: vec![id.clone()],
                ..ImageQuery::default()
            }
        } else if let Some(parameter) = &term.ssm_parameter {
            match ec2.ssm_parameter(parameter).await? {
                Some(id) => ImageQuery {
                    ids: vec![id],
                    ..ImageQuery::default()
                },
                None => continue,
            }
        } else {
            let mut filters = tag_filters(&term.tags);
            if let Some(name) = &term.name {
                filters.push(Filter::new("name", name.clone()));
            }
            if filters.is_empty() {
                continue;
            }
            let owners = match (&term.owner, &term.name) {
                (Some(o), _) => vec![o.clone()],
                (None, Some(_)) => vec!["self".into(), "amazon".into()],
                (None, None) => vec![],
            };
            ImageQuery {
                ids: vec![],
                owners,
                filters,
            }
        };
        match ec2.describe_images(query).await {
            Ok(found) => images.extend(found),
            Err(e) if e.is_not_found() || e.code.starts_with("InvalidAMIID") => {}
            Err(e) => return Err(e),
        }
    }
    let deprecated = |i: &ImageInfo| i.deprecation_time.is_some_and(|t| t <= now);
    images.sort_by(|a, b| {
        deprecated(a)
            .cmp(&deprecated(b))
            .then(b.creation_date.cmp(&a.creation_date))
            .then(a.id.cmp(&b.id))
    });
    let mut seen = BTreeSet::new();
    Ok(images
        .into_iter()
        .filter(|i| seen.insert(i.id.clone()))
        .map(|i| Ami {
            deprecated: deprecated(&i),
            requirements: vec![NodeSelectorRequirement {
                key: ARCH_LABEL.into(),
                operator: "In".into(),
                values: Some(vec![
                    if i.architecture == "arm64" {
                        "arm64"
                    } else {
                        "amd64"
                    }
                    .to_string(),
                ]),
            }],
            id: i.id,
            name: Some(i.name),
        })
        .collect())
}

/// The instance profile name upstream creates for a role: `<cluster>_<hash of region and role>`.
pub fn role_profile_name(cluster: &str, region: &str, role: &str) -> String {
    format!("{cluster}_{:x}", fnv(&format!("{region}/{role}")))
}

/// Make sure the instance profile Karpenter manages for `role` exists and holds exactly that
/// role (an instance profile holds one role), tagged with the cluster, region and node class.
///
/// Errors: IAM refused (e.g. `NoSuchEntity` for a role that does not exist).
pub async fn ensure_instance_profile(
    ec2: &dyn Ec2,
    name: &str,
    role: &str,
    cluster: &str,
    node_class: &str,
) -> Result<(), Ec2Error> {
    match ec2.instance_profile_roles(name).await? {
        Some(roles) if roles.len() == 1 && roles[0] == role => return Ok(()),
        Some(roles) if roles.is_empty() => {}
        Some(roles) => ec2.delete_instance_profile(name, &roles).await?,
        None => {}
    }
    let tags = [
        (
            format!("{}{cluster}", crds::labels::CLUSTER_TAG_KEY_PREFIX),
            "owned".to_string(),
        ),
        (
            crds::labels::EC2NODECLASS_TAG_KEY.to_string(),
            node_class.to_string(),
        ),
    ]
    .into_iter()
    .collect();
    ec2.create_instance_profile(name, role, &tags).await
}

/// Resolve a node class's selectors against EC2. A failed call makes the class not ready with
/// reason `<Kind>ResolutionFailed` and the error, so a flaky API never empties a good status
/// silently.
pub async fn resolve(
    ec2: &dyn Ec2,
    cluster: &str,
    region: &str,
    kubernetes_version: &str,
    node_class: &EC2NodeClass,
    now: Timestamp,
) -> NodeClassResolution {
    let spec = &node_class.spec;
    let previous = node_class.status.clone().unwrap_or_default();
    let mut status = EC2NodeClassStatus {
        conditions: previous.conditions.clone(),
        ..previous.clone()
    };
    let failed = |kind: &str, e: Ec2Error| {
        Some((
            format!("{kind}Ready"),
            format!("{kind}ResolutionFailed"),
            e.to_string(),
        ))
    };
    let mut not_ready = None;
    match subnets(ec2, &spec.subnet_selector_terms).await {
        Ok(s) => status.subnets = s,
        Err(e) => not_ready = not_ready.or(failed("Subnets", e)),
    }
    match security_groups(ec2, &spec.security_group_selector_terms).await {
        Ok(g) => status.security_groups = g,
        Err(e) => not_ready = not_ready.or(failed("SecurityGroups", e)),
    }
    match amis(ec2, &spec.ami_selector_terms, kubernetes_version, now).await {
        Ok(a) => status.amis = a,
        Err(e) => not_ready = not_ready.or(failed("AMIs", e)),
    }
    status.instance_profile = spec.instance_profile.clone();
    if let (None, Some(role)) = (&spec.instance_profile, &spec.role) {
        let name = role_profile_name(cluster, region, role);
        let class = node_class.metadata.name.clone().unwrap_or_default();
        match ensure_instance_profile(ec2, &name, role, cluster, &class).await {
            Ok(()) => status.instance_profile = Some(name),
            Err(e) => {
                status.instance_profile = None;
                not_ready = not_ready.or(Some((
                    "InstanceProfileReady".into(),
                    "InstanceProfileCreationFailed".into(),
                    format!("creating instance profile {name} for role {role}: {e}"),
                )));
            }
        }
    }
    let not_ready = not_ready.or_else(|| {
        let (t, r, m) = if status.subnets.is_empty() {
            (
                "SubnetsReady",
                "SubnetsNotFound",
                placeholder::subnets_not_found(&spec.subnet_selector_terms, cluster),
            )
        } else if status.security_groups.is_empty() {
            (
                "SecurityGroupsReady",
                "SecurityGroupsNotFound",
                placeholder::security_groups_not_found(
                    &spec.security_group_selector_terms,
                    cluster,
                ),
            )
        } else if status.amis.is_empty() {
            (
                "AMIsReady",
                "AMINotFound",
                "AMISelector did not match any AMIs".to_string(),
            )
        } else if status.instance_profile.is_none() {
            (
                "InstanceProfileReady",
                "InstanceProfileNotFound",
                "neither role nor instanceProfile is set".to_string(),
            )
        } else {
            return None;
        };
        Some((t.to_string(), r.to_string(), m))
    });
    NodeClassResolution { status, not_ready }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_parameters_follow_the_published_ssm_paths() {
        let a = Alias::parse("al2023@latest").expect("alias");
        assert_eq!(
            alias_parameter(&a, "1.32", "x86_64").as_deref(),
            Some(
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id"
            )
        );
        let pinned = Alias::parse("al2023@v20260301").expect("alias");
        assert_eq!(
            alias_parameter(&pinned, "1.32", "arm64").as_deref(),
            Some(
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-1.32-v20260301/image_id"
            )
        );
        let br = Alias::parse("bottlerocket@latest").expect("alias");
        assert_eq!(
            alias_parameter(&br, "1.32", "arm64").as_deref(),
            Some("/aws/service/bottlerocket/aws-k8s-1.32/arm64/latest/image_id")
        );
        assert_eq!(
            alias_name_pattern(&a, "1.32", "x86_64").as_deref(),
            Some("amazon-eks-node-al2023-x86_64-standard-1.32-*")
        );
    }
}
