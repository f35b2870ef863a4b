//! The simulated VPC and image catalog behind EC2NodeClass resolution: subnets per zone,
//! security groups and AMIs (with SSM-style aliases such as `al2023@latest`), all tagged for
//! discovery by the cluster name as EKS getting-started guides set them up.

use karpenter_core::capacity::reservation::{self, Record};
use std::collections::BTreeMap;

use crds::ec2nodeclass::{
    Alias, Ami, AmiSelectorTerm, SecurityGroup, SecurityGroupSelectorTerm, Subnet,
    SubnetSelectorTerm, placeholder,
};
use crds::{EC2NodeClass, EC2NodeClassStatus};
use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use karpenter_core::capacity::catalog::REGION;
use karpenter_core::cloud::NodeClassResolution;

/// Tag key subnets and security groups carry for Karpenter's discovery.
pub const DISCOVERY_TAG: &str = "karpenter.sh/discovery";

/// One subnet.
#[derive(Clone, Debug, PartialEq)]
pub struct SimSubnet {
    /// `subnet-...`.
    pub id: String,
    /// Availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// Zone id, e.g. `use1-az1`.
    pub zone_id: String,
    /// Third octet of its 10.0.x.0/20 block.
    pub octet: u32,
    /// EC2 tags: `karpenter.sh/discovery: <cluster>` and `Name: <cluster>-private-<zone>`.
    pub tags: BTreeMap<String, String>,
}

/// One security group.
#[derive(Clone, Debug, PartialEq)]
pub struct SimSecurityGroup {
    /// `sg-...`.
    pub id: String,
    /// Group name (`GroupName`), e.g. `<cluster>-node`.
    pub name: String,
    /// EC2 tags: `karpenter.sh/discovery: <cluster>` and `Name`.
    pub tags: BTreeMap<String, String>,
}

/// One machine image.
#[derive(Clone, Debug, PartialEq)]
pub struct SimAmi {
    /// `ami-...`.
    pub id: String,
    /// Image name, e.g. `amazon-eks-node-al2023-x86_64-standard-1.32-v20260301`.
    pub name: String,
    /// Alias family, one of [`super::images::FAMILIES`], e.g. `al2023` or `windows2022`.
    pub family: String,
    /// Alias version, e.g. `v20260301`.
    pub version: String,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// Owner account (`amazon` for public EKS images).
    pub owner: String,
    /// Whether the image is deprecated.
    pub deprecated: bool,
    /// EC2 tags (none on published releases), matched by `amiSelectorTerms[].tags`.
    pub tags: BTreeMap<String, String>,
}

/// The simulated account: network and images.
#[derive(Clone, Debug)]
pub struct SimNetwork {
    /// Subnets, one per zone.
    pub subnets: Vec<SimSubnet>,
    /// Security groups (one node group by default).
    pub security_groups: Vec<SimSecurityGroup>,
    /// Images, oldest first (a release published later with an older version excepted).
    pub amis: Vec<SimAmi>,
    /// Capacity reservations in DescribeCapacityReservations' shape (`karpenter sandbox
    /// --capacity-reservations FILE`); `AvailableInstanceCount` is the room before any
    /// simulated instance launched into one.
    pub reservations: Vec<Record>,
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl SimNetwork {
    /// The default account for a cluster: private subnets in us-east-1a, b, c, d and f and a node
    /// security group, tagged `karpenter.sh/discovery: <cluster>`; EKS-optimized AL2023, AL2,
    /// Bottlerocket and Windows Server images with their release history
    /// ([`super::images::release_history`]).
    pub fn new(cluster_name: &str) -> SimNetwork {
        let zones = [
            ("a", "use1-az4"),
            ("b", "use1-az6"),
            ("c", "use1-az1"),
            ("d", "use1-az2"),
            ("f", "use1-az5"),
        ];
        let subnets = zones
            .iter()
            .enumerate()
            .map(|(i, (z, zone_id))| SimSubnet {
                id: format!("subnet-0{:016x}", 0x5ab0_0000u64 + i as u64),
                zone: format!("{REGION}{z}"),
                zone_id: zone_id.to_string(),
                octet: 16 * i as u32,
                tags: tags(&[
                    (DISCOVERY_TAG, cluster_name),
                    ("Name", &format!("{cluster_name}-private-{REGION}{z}")),
                ]),
            })
            .collect();
        let security_groups = vec![SimSecurityGroup {
            id: "sg-0c0ffee0000000001".into(),
            name: format!("{cluster_name}-node"),
            tags: tags(&[
                (DISCOVERY_TAG, cluster_name),
                ("Name", &format!("{cluster_name}-node")),
            ]),
        }];
        let mut network = SimNetwork {
            subnets,
            security_groups,
            amis: vec![],
            reservations: vec![],
        };
        network.publish_release_history();
        network
    }

    /// Resolve a node class's selector terms into status, with the first reason it is not ready.
    /// Capacity reservations are those usable at `now` (an expiring Capacity Block included,
    /// in state `expiring`), each with its `AvailableInstanceCount` as recorded; the cloud
    /// counts its own instances in them.
    pub fn resolve(
        &self,
        cluster_name: &str,
        nc: &EC2NodeClass,
        now: jiff::Timestamp,
    ) -> NodeClassResolution {
        let spec = &nc.spec;
        let subnets: Vec<Subnet> = self
            .subnets
            .iter()
            .filter(|s| {
                spec.subnet_selector_terms
                    .iter()
                    .any(|t| subnet_matches(t, s))
            })
            .map(|s| Subnet {
                id: s.id.clone(),
                zone: s.zone.clone(),
                zone_id: Some(s.zone_id.clone()),
            })
            .collect();
        let security_groups: Vec<SecurityGroup> = self
            .security_groups
            .iter()
            .filter(|g| {
                spec.security_group_selector_terms
                    .iter()
                    .any(|t| sg_matches(t, g))
            })
            .map(|g| SecurityGroup {
                id: g.id.clone(),
                name: Some(g.name.clone()),
            })
            .collect();
        let amis = self.resolve_amis(&spec.ami_selector_terms);
        let instance_profile = spec.instance_profile.clone().or_else(|| {
            spec.role
                .as_ref()
                .map(|role| format!("{cluster_name}_{:x}", fnv(role)))
        });
        let not_ready = if subnets.is_empty() {
            Some((
                "SubnetsReady",
                "SubnetsNotFound",
                placeholder::subnets_not_found(&spec.subnet_selector_terms, cluster_name),
            ))
        } else if security_groups.is_empty() {
            Some((
                "SecurityGroupsReady",
                "SecurityGroupsNotFound",
                placeholder::security_groups_not_found(
                    &spec.security_group_selector_terms,
                    cluster_name,
                ),
            ))
        } else if amis.is_empty() {
            Some((
                "AMIsReady",
                "AMINotFound",
                "AMISelector did not match any AMIs".into(),
            ))
        } else if instance_profile.is_none() {
            Some((
                "InstanceProfileReady",
                "InstanceProfileNotFound",
                "neither role nor instanceProfile is set".into(),
            ))
        } else {
            None
        };
        NodeClassResolution {
            status: EC2NodeClassStatus {
                subnets,
                security_groups,
                capacity_reservations: reservation::select(
                    &spec.capacity_reservation_selector_terms,
                    &self.reservations,
                    now,
                )
                .into_iter()
                .map(|r| reservation::status(r, now, r.available_instance_count))
                .collect(),
                amis,
                instance_profile,
                conditions: nc
                    .status
                    .as_ref()
                    .map(|s| s.conditions.clone())
                    .unwrap_or_default(),
            },
            not_ready: not_ready.map(|(t, r, m)| (t.to_string(), r.to_string(), m)),
        }
    }

    fn resolve_amis(&self, terms: &[AmiSelectorTerm]) -> Vec<Ami> {
        let mut chosen: Vec<&SimAmi> = Vec::new();
        for term in terms {
            if let Some(alias) = term.alias.as_deref().and_then(Alias::parse) {
                let family = alias_family(term.alias.as_deref().unwrap_or(""));
                for arch in ["amd64", "arm64"] {
                    let candidates = self
                        .amis
                        .iter()
                        .filter(|a| a.family == family && a.arch == arch && !a.deprecated);
                    let pick = if alias.version == "latest" {
                        candidates.max_by(|a, b| a.version.cmp(&b.version))
                    } else {
                        candidates.into_iter().find(|a| a.version == alias.version)
                    };
                    chosen.extend(pick);
                }
                continue;
            }
            chosen.extend(self.amis.iter().filter(|a| ami_matches(term, a)));
        }
        // Newest first, non-deprecated before deprecated; one entry per image.
        chosen.sort_by(|a, b| {
            a.deprecated
                .cmp(&b.deprecated)
                .then(b.version.cmp(&a.version))
                .then(a.id.cmp(&b.id))
        });
        chosen.dedup_by(|a, b| a.id == b.id);
        chosen
            .into_iter()
            .map(|a| Ami {
                id: a.id.clone(),
                name: Some(a.name.clone()),
                deprecated: a.deprecated,
                requirements: vec![NodeSelectorRequirement {
                    key: crds::labels::ARCH_LABEL.into(),
                    operator: "In".into(),
                    values: Some(vec![a.arch.clone()]),
                }],
            })
            .collect()
    }
}

fn alias_family(alias: &str) -> &str {
    alias.split('@').next().unwrap_or("")
}

fn tags_match(selector: &BTreeMap<String, String>, tags: &BTreeMap<String, String>) -> bool {
    selector
        .iter()
        .all(|(k, v)| tags.get(k).is_some_and(|actual| v == "*" || actual == v))
}

fn subnet_matches(t: &SubnetSelectorTerm, s: &SimSubnet) -> bool {
    match &t.id {
        Some(id) => *id == s.id,
        None => !t.tags.is_empty() && tags_match(&t.tags, &s.tags),
    }
}

fn sg_matches(t: &SecurityGroupSelectorTerm, g: &SimSecurityGroup) -> bool {
    if let Some(id) = &t.id {
        return *id == g.id;
    }
    if let Some(name) = &t.name {
        return *name == g.name;
    }
    !t.tags.is_empty() && tags_match(&t.tags, &g.tags)
}

fn ami_matches(t: &AmiSelectorTerm, a: &SimAmi) -> bool {
    if let Some(id) = &t.id {
        return *id == a.id;
    }
    let name_ok = t
        .name
        .as_deref()
        .is_none_or(|pattern| glob(pattern, &a.name));
    let owner_ok = t
        .owner
        .as_deref()
        .is_none_or(|o| o == a.owner || o == "self");
    let any = t.name.is_some() || !t.tags.is_empty();
    any && name_ok && owner_ok && tags_match(&t.tags, &a.tags)
}

/// `*` matches any run of characters (EC2 name filters).
fn glob(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let mut rest = s;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            let Some(pos) = rest.find(part) else {
                return false;
            };
            rest = &rest[pos + part.len()..];
        }
    }
    true
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use testutil::ec2nodeclass;

    #[test]
    fn discovery_tags_alias_and_role_resolve() {
        let net = SimNetwork::new("demo");
        let nc = ec2nodeclass("default")
            .role("KarpenterNodeRole-demo")
            .build();
        let r = net.resolve("demo", &nc, jiff::Timestamp::now());
        assert_eq!(r.not_ready, None);
        assert_eq!(r.status.subnets.len(), 5);
        assert_eq!(r.status.amis.len(), 2, "one latest image per architecture");
        assert!(
            r.status
                .amis
                .iter()
                .all(|a| a.name.as_deref().is_some_and(|n| n.ends_with("v20260301")))
        );
        assert!(r.status.instance_profile.is_some());
    }

    /// The AMIs a node class with one alias resolves: (architecture, version) pairs.
    fn resolved(net: &SimNetwork, alias: &str) -> Vec<(String, String)> {
        let nc = ec2nodeclass("default").ami_alias(alias).build();
        net.resolve("demo", &nc, jiff::Timestamp::now())
            .status
            .amis
            .iter()
            .map(|a| {
                let arch = a.requirements[0]
                    .values
                    .clone()
                    .unwrap_or_default()
                    .join(",");
                let version = net
                    .amis
                    .iter()
                    .find(|s| s.id == a.id)
                    .map(|s| s.version.clone())
                    .unwrap_or_default();
                (arch, version)
            })
            .collect()
    }

    #[test]
    fn aliases_pin_a_past_release_or_follow_the_latest() {
        let mut net = SimNetwork::new("demo");
        let pair = |arch: &str, version: &str| (arch.to_string(), version.to_string());
        assert_eq!(
            resolved(&net, "al2023@v20240625"),
            [pair("amd64", "v20240625"), pair("arm64", "v20240625")]
        );
        assert_eq!(
            resolved(&net, "al2@latest"),
            [pair("amd64", "v20260301"), pair("arm64", "v20260301")]
        );
        assert_eq!(resolved(&net, "al2023@v20240626"), []);
        for family in ["windows2019", "windows2022", "windows2025"] {
            assert_eq!(
                resolved(&net, &format!("{family}@latest")),
                [pair("amd64", "v20260301")],
                "{family}"
            );
        }
        net.publish_release("windows2022", None, &[])
            .expect("publishes");
        assert_eq!(
            resolved(&net, "windows2022@latest"),
            [pair("amd64", "v20260302")]
        );
        assert_eq!(
            resolved(&net, "windows2019@latest"),
            [pair("amd64", "v20260301")]
        );
    }

    #[test]
    fn selectors_that_match_nothing_say_which() {
        let net = SimNetwork::new("demo");
        let nc = ec2nodeclass("default")
            .subnet_discovery("${CLUSTER_NAME}")
            .security_group_ids(["sg-0c0ffee0000000001"])
            .build();
        let r = net.resolve("demo", &nc, jiff::Timestamp::now());
        let (_, reason, message) = r.not_ready.expect("not ready");
        assert_eq!(reason, "SubnetsNotFound");
        assert!(
            message.contains("placeholder ${CLUSTER_NAME}, which was not substituted")
                && message.contains("CLUSTER_NAME=demo envsubst"),
            "{message}"
        );
        let nc = ec2nodeclass("default")
            .subnet_discovery("demo")
            .merge(
                json!({"spec": {"securityGroupSelectorTerms": [{"name": "${CLUSTER_NAME}-node"}]}}),
            )
            .build();
        let (_, reason, message) = net
            .resolve("demo", &nc, jiff::Timestamp::now())
            .not_ready
            .expect("not ready");
        assert_eq!(reason, "SecurityGroupsNotFound");
        assert!(
            message.contains("securityGroupSelectorTerms[0].name contains the literal"),
            "{message}"
        );
        let nc = ec2nodeclass("default").subnet_discovery("other").build();
        let (_, _, message) = net
            .resolve("demo", &nc, jiff::Timestamp::now())
            .not_ready
            .expect("not ready");
        assert_eq!(message, "SubnetSelector did not match any Subnets");
    }

    #[test]
    fn publishing_a_release_moves_latest_and_names_glob() {
        let mut net = SimNetwork::new("demo");
        let new = net.publish_ami("al2023", "v20260501", "amd64");
        let nc = ec2nodeclass("default")
            .subnet_ids(["subnet-00000000005ab00000"])
            .merge(json!({"spec": {"securityGroupSelectorTerms": [{"name": "demo-node"}]}}))
            .build();
        let r = net.resolve("demo", &nc, jiff::Timestamp::now());
        assert!(r.status.amis.iter().any(|a| a.id == new.id));
        assert!(glob("amazon-eks-node-al2023-*-v2026*", &new.name));
        assert!(!glob("bottlerocket*", &new.name));
    }
}
