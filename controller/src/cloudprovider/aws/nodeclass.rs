//! EC2NodeClass resolution against EC2 (upstream `aws:pkg/providers/{subnet,securitygroup,amifamily}`):
//! selector terms become Describe* filters; the results become the node class's status.
//!
//! - Subnets: terms by `id` or `tags` (`*` = any value), ORed; sorted by free IPv4 addresses,
//!   most first (the launch takes the first subnet of each zone).
//! - Security groups: terms by `id`, `name` or `tags`.
//! - AMIs: terms by `id`, or `name`/`owner`/`tags` (owners default to `self` and `amazon` when a
//!   name is given), or an alias `family@version` resolved through SSM public parameters
//!   ([`alias`]: each architecture's standard, NVIDIA and Neuron images, or Windows' one image,
//!   each listed with the instance-type requirements it is for). Where SSM has no such
//!   parameter (an EC2 emulator, a partition without EKS parameters), the alias falls back to
//!   the newest Amazon-owned image with that image's release name. An alias the cluster's
//!   Kubernetes version cannot use (AL2 on 1.33+, Windows 2025 before 1.35) makes the class
//!   not ready with reason `UnsupportedAlias`. Images are ordered non-deprecated first, then
//!   newest first; the status lists each image once per requirement set.
//! - Instance profile: `instanceProfile` as given, or for `role` an instance profile Karpenter
//!   creates in IAM and deletes with the node class (`<cluster>_<hash of region and role>`).

use std::collections::BTreeSet;

use crds::ec2nodeclass::{
    Alias, Ami, AmiSelectorTerm, SecurityGroup, SecurityGroupSelectorTerm, Subnet,
    SubnetSelectorTerm, placeholder,
};
use crds::{EC2NodeClass, EC2NodeClassStatus};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::alias;
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

fn newest(mut images: Vec<ImageInfo>) -> Option<ImageInfo> {
    images.sort_by(|a, b| b.creation_date.cmp(&a.creation_date));
    images.into_iter().next()
}

/// An image found for a selector term, with the requirements (beyond its architecture) of the
/// instance types it is for: none for images selected by id, name, tags or parameter.
type Found = (ImageInfo, Vec<NodeSelectorRequirement>);

/// The images an alias names ([`alias::alias_sources`]), one entry per image and requirement
/// set. A source whose parameter SSM lacks falls back to the newest Amazon-owned image
/// matching its release name; a source found neither way is skipped, as upstream skips it.
async fn alias_images(ec2: &dyn Ec2, alias: &Alias, k8s: &str) -> Result<Vec<Found>, Ec2Error> {
    let mut out = Vec::new();
    for source in alias::alias_sources(alias, k8s) {
        let image = match ec2.ssm_parameter(&source.parameter).await? {
            Some(id) => {
                let images = ec2
                    .describe_images(ImageQuery {
                        ids: vec![id],
                        ..ImageQuery::default()
                    })
                    .await;
                match images {
                    Ok(images) => newest(images),
                    Err(e) if e.is_not_found() || e.code.starts_with("InvalidAMIID") => None,
                    Err(e) => return Err(e),
                }
            }
            None => newest(
                ec2.describe_images(ImageQuery {
                    owners: vec!["amazon".into()],
                    filters: vec![
                        Filter::new("name", source.name_pattern.clone()),
                        Filter::new("architecture", source.arch),
                    ],
                    ..ImageQuery::default()
                })
                .await?,
            ),
        };
        if let Some(image) = image {
            out.extend(
                source
                    .requirements
                    .into_iter()
                    .map(|reqs| (image.clone(), reqs)),
            );
        }
    }
    Ok(out)
}

async fn amis(
    ec2: &dyn Ec2,
    terms: &[AmiSelectorTerm],
    k8s: &str,
    now: Timestamp,
) -> Result<Vec<Ami>, Ec2Error> {
    let mut images: Vec<Found> = Vec::new();
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
            Ok(found) => images.extend(found.into_iter().map(|i| (i, vec![]))),
            Err(e) if e.is_not_found() || e.code.starts_with("InvalidAMIID") => {}
            Err(e) => return Err(e),
        }
    }
    let deprecated = |i: &ImageInfo| i.deprecation_time.is_some_and(|t| t <= now);
    images.sort_by(|(a, _), (b, _)| {
        deprecated(a)
            .cmp(&deprecated(b))
            .then(b.creation_date.cmp(&a.creation_date))
            .then(a.id.cmp(&b.id))
    });
    // An image is listed once per requirement set (AL2's GPU image for NVIDIA and for Neuron).
    let mut listed: Vec<Ami> = Vec::new();
    for (i, extra) in images {
        let ami = Ami {
            deprecated: deprecated(&i),
            requirements: alias::image_requirements(&i.architecture, &extra),
            id: i.id,
            name: Some(i.name),
        };
        if !listed
            .iter()
            .any(|a| a.id == ami.id && a.requirements == ami.requirements)
        {
            listed.push(ami);
        }
    }
    Ok(listed)
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
    let refused = node_class
        .alias()
        .and_then(|a| alias::unsupported(&a, kubernetes_version));
    if let Some(why) = refused {
        not_ready = not_ready.or(Some((
            "AMIsReady".into(),
            crds::conditions::reason::UNSUPPORTED_ALIAS.into(),
            why,
        )));
    } else {
        match amis(ec2, &spec.ami_selector_terms, kubernetes_version, now).await {
            Ok(a) => status.amis = a,
            Err(e) => not_ready = not_ready.or(failed("AMIs", e)),
        }
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
