//! EC2NodeClass resolution against a small recorded account ([`Account`], an [`Ec2`] that
//! answers Describe* filters as EC2 does for the few it is asked): each selector term field
//! picks what it names, and an explicit `instanceProfile` is used as given and reaches the
//! launch template.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use crds::EC2NodeClass;
use crds::ec2nodeclass::AmiFamily;
use ec2api::{
    Ec2, Ec2Error, FleetRequest, FleetResult, ImageInfo, ImageQuery, InstanceInfo,
    InstanceTypeInfo, LaunchTemplateData, LaunchTemplateInfo, SecurityGroupInfo, SubnetInfo,
};
use jiff::Timestamp;
use serde_json::json;

use super::launchtemplate;
use super::nodeclass::resolve;
use ec2api::Filter;

/// The account `resolve` sees: images (with owner and tags), SSM parameters, security groups
/// and one subnet; every IAM call is recorded. It sells one instance type, m5.large, in
/// eu-west-1a, with no spot price history (for the provider's pricing tests).
pub(super) struct Account {
    /// `(image, owner account, tags)`.
    images: Vec<(ImageInfo, &'static str, BTreeMap<String, String>)>,
    parameters: BTreeMap<&'static str, &'static str>,
    groups: Vec<SecurityGroupInfo>,
    iam_calls: Mutex<Vec<String>>,
}

/// This account's id: what the owner `self` means.
const SELF: &str = "111111111111";

fn image(id: &str, name: &str, arch: &str) -> ImageInfo {
    ImageInfo {
        id: id.into(),
        name: name.into(),
        architecture: arch.into(),
        creation_date: "2026-01-01T00:00:00.000Z".into(),
        deprecation_time: None,
    }
}

pub(super) fn account() -> Account {
    let tags = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    Account {
        images: vec![
            (
                image("ami-web", "team-node-v1", "x86_64"),
                SELF,
                tags(&[("team", "web")]),
            ),
            (
                image("ami-shared", "team-node-v2", "arm64"),
                "222222222222",
                tags(&[]),
            ),
            (
                image("ami-db", "db-node-v1", "x86_64"),
                SELF,
                tags(&[("team", "db")]),
            ),
            (
                image("ami-ssm", "published-v9", "x86_64"),
                "amazon",
                tags(&[]),
            ),
        ],
        parameters: [("/team/node/image", "ami-ssm")].into_iter().collect(),
        groups: vec![
            SecurityGroupInfo {
                id: "sg-a".into(),
                name: "nodes-a".into(),
            },
            SecurityGroupInfo {
                id: "sg-b".into(),
                name: "nodes-b".into(),
            },
        ],
        iam_calls: Mutex::new(Vec::new()),
    }
}

/// EC2's name filter: `*` matches any run of characters (one `*` at most here).
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        Some((head, tail)) => name.starts_with(head) && name[head.len()..].ends_with(tail),
        None => pattern == name,
    }
}

fn unsupported<T>(call: &str) -> Result<T, Ec2Error> {
    Err(Ec2Error {
        code: "UnsupportedOperation".into(),
        message: format!("{call} is not part of this test"),
    })
}

#[async_trait]
impl Ec2 for Account {
    async fn describe_subnets(&self, filters: Vec<Filter>) -> Result<Vec<SubnetInfo>, Ec2Error> {
        let subnet = SubnetInfo {
            id: "subnet-1".into(),
            zone: "us-east-1a".into(),
            zone_id: None,
            available_ips: 100,
        };
        Ok(filters
            .iter()
            .all(|f| f.name == "subnet-id" && f.values.contains(&subnet.id))
            .then_some(subnet)
            .into_iter()
            .collect())
    }

    async fn describe_security_groups(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<SecurityGroupInfo>, Ec2Error> {
        Ok(self
            .groups
            .iter()
            .filter(|g| {
                filters.iter().all(|f| match f.name.as_str() {
                    "group-id" => f.values.contains(&g.id),
                    "group-name" => f.values.contains(&g.name),
                    _ => false,
                })
            })
            .cloned()
            .collect())
    }

    async fn describe_images(&self, query: ImageQuery) -> Result<Vec<ImageInfo>, Ec2Error> {
        let owner_of = |o: &str| {
            if o == "self" {
                SELF.to_string()
            } else {
                o.to_string()
            }
        };
        Ok(self
            .images
            .iter()
            .filter(|(i, owner, tags)| {
                (query.ids.is_empty() || query.ids.contains(&i.id))
                    && (query.owners.is_empty()
                        || query.owners.iter().any(|o| owner_of(o) == *owner))
                    && query.filters.iter().all(|f| match f.name.as_str() {
                        "name" => f.values.iter().any(|p| name_matches(p, &i.name)),
                        key => key
                            .strip_prefix("tag:")
                            .is_some_and(|k| tags.get(k).is_some_and(|v| f.values.contains(v))),
                    })
            })
            .map(|(i, _, _)| i.clone())
            .collect())
    }

    async fn ssm_parameter(&self, name: &str) -> Result<Option<String>, Ec2Error> {
        Ok(self.parameters.get(name).map(|id| id.to_string()))
    }

    async fn describe_instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Ec2Error> {
        Ok(vec![InstanceTypeInfo {
            name: "m5.large".into(),
            vcpus: 2,
            memory_mib: 8192,
            architectures: vec!["x86_64".into()],
            hypervisor: "nitro".into(),
            max_network_interfaces: 3,
            ipv4_per_interface: 10,
            usage_classes: vec!["on-demand".into(), "spot".into()],
            placement_group_strategies: vec![],
            ..InstanceTypeInfo::default()
        }])
    }

    async fn describe_instance_type_offerings(&self) -> Result<Vec<(String, String)>, Ec2Error> {
        Ok(vec![("m5.large".into(), "eu-west-1a".into())])
    }

    async fn spot_prices(&self) -> Result<Vec<(String, String, f64)>, Ec2Error> {
        Ok(vec![])
    }

    async fn describe_capacity_reservations(
        &self,
        _: ec2api::CapacityReservationQuery,
    ) -> Result<Vec<ec2api::CapacityReservationInfo>, Ec2Error> {
        unsupported("DescribeCapacityReservations")
    }

    async fn describe_launch_templates(
        &self,
        _: Vec<Filter>,
    ) -> Result<Vec<LaunchTemplateInfo>, Ec2Error> {
        unsupported("DescribeLaunchTemplates")
    }

    async fn create_launch_template(
        &self,
        _: &str,
        _: &LaunchTemplateData,
        _: &BTreeMap<String, String>,
    ) -> Result<String, Ec2Error> {
        unsupported("CreateLaunchTemplate")
    }

    async fn delete_launch_template(&self, _: &str) -> Result<(), Ec2Error> {
        unsupported("DeleteLaunchTemplate")
    }

    async fn create_fleet(&self, _: &FleetRequest) -> Result<FleetResult, Ec2Error> {
        unsupported("CreateFleet")
    }

    async fn describe_instances(
        &self,
        _: &[String],
        _: Vec<Filter>,
    ) -> Result<Vec<InstanceInfo>, Ec2Error> {
        unsupported("DescribeInstances")
    }

    async fn terminate_instances(&self, _: &[String]) -> Result<(), Ec2Error> {
        unsupported("TerminateInstances")
    }

    async fn user_data(&self, _: &str) -> Result<Option<String>, Ec2Error> {
        unsupported("DescribeInstanceAttribute")
    }

    async fn instance_profile_roles(&self, name: &str) -> Result<Option<Vec<String>>, Ec2Error> {
        self.record(format!("GetInstanceProfile {name}"));
        Ok(None)
    }

    async fn create_instance_profile(
        &self,
        name: &str,
        role: &str,
        _: &BTreeMap<String, String>,
    ) -> Result<(), Ec2Error> {
        self.record(format!("CreateInstanceProfile {name} {role}"));
        Ok(())
    }

    async fn delete_instance_profile(&self, name: &str, _: &[String]) -> Result<(), Ec2Error> {
        self.record(format!("DeleteInstanceProfile {name}"));
        Ok(())
    }
}

impl Account {
    fn record(&self, call: String) {
        self.iam_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call);
    }

    fn iam_calls(&self) -> Vec<String> {
        self.iam_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A node class with `spec` merged over a ready base (subnet `subnet-1`, group `sg-a`, image
/// `ami-web`, role `NodeRole`).
fn node_class(spec: serde_json::Value) -> EC2NodeClass {
    let mut base = json!({
        "role": "NodeRole", "amiFamily": "AL2023",
        "amiSelectorTerms": [{"id": "ami-web"}],
        "subnetSelectorTerms": [{"id": "subnet-1"}],
        "securityGroupSelectorTerms": [{"id": "sg-a"}],
    });
    if let (Some(b), Some(s)) = (base.as_object_mut(), spec.as_object()) {
        for (k, v) in s {
            b.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "terms"}, "spec": base,
    }))
    .expect("node class")
}

async fn resolved(ec2: &Account, spec: serde_json::Value) -> EC2NodeClass {
    let mut nc = node_class(spec);
    let r = resolve(ec2, "demo", "us-east-1", "1.32", &nc, Timestamp::UNIX_EPOCH).await;
    nc.status = Some(r.status);
    nc
}

/// The ids of the images `amiSelectorTerms` resolves to.
async fn images(ec2: &Account, terms: serde_json::Value) -> Vec<String> {
    let nc = resolved(ec2, json!({"amiSelectorTerms": terms})).await;
    nc.status
        .map(|s| s.amis.into_iter().map(|a| a.id).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn ami_selector_terms_pick_images_by_id_name_owner_ssm_parameter_and_tags() {
    let ec2 = account();
    assert_eq!(images(&ec2, json!([{"id": "ami-db"}])).await, ["ami-db"]);
    // A name without an owner looks at this account's and Amazon's images only.
    assert_eq!(
        images(&ec2, json!([{"name": "team-node-*"}])).await,
        ["ami-web"]
    );
    assert_eq!(
        images(
            &ec2,
            json!([{"name": "team-node-*", "owner": "222222222222"}])
        )
        .await,
        ["ami-shared"]
    );
    assert_eq!(
        images(&ec2, json!([{"tags": {"team": "db"}}])).await,
        ["ami-db"]
    );
    assert_eq!(
        images(&ec2, json!([{"ssmParameter": "/team/node/image"}])).await,
        ["ami-ssm"]
    );
    assert_eq!(
        images(&ec2, json!([{"ssmParameter": "/no/such/parameter"}])).await,
        Vec::<String>::new()
    );
    // Terms are ORed; an image two terms select is listed once.
    let mut both = images(
        &ec2,
        json!([{"tags": {"team": "web"}}, {"id": "ami-web"}, {"id": "ami-db"}]),
    )
    .await;
    both.sort();
    assert_eq!(both, ["ami-db", "ami-web"]);
}

#[tokio::test]
async fn security_group_terms_pick_groups_by_id_and_name_and_they_reach_the_launch_template() {
    let ec2 = account();
    let groups = |nc: &EC2NodeClass| -> Vec<String> {
        let data = launchtemplate::data(nc, AmiFamily::Al2023, "ami-web", "", false);
        data.security_group_ids
    };
    let by_id = resolved(
        &ec2,
        json!({"securityGroupSelectorTerms": [{"id": "sg-b"}]}),
    )
    .await;
    assert_eq!(groups(&by_id), ["sg-b"]);
    let by_name = resolved(
        &ec2,
        json!({"securityGroupSelectorTerms": [{"name": "nodes-a"}]}),
    )
    .await;
    assert_eq!(groups(&by_name), ["sg-a"]);
    let none = resolved(
        &ec2,
        json!({"securityGroupSelectorTerms": [{"name": "nodes-c"}]}),
    )
    .await;
    assert_eq!(groups(&none), Vec::<String>::new());
}

#[tokio::test]
async fn an_instance_profile_is_used_as_given_and_none_is_created_for_it() {
    let ec2 = account();
    let mut nc = node_class(json!({"instanceProfile": "TeamProfile"}));
    nc.spec.role = None;
    let r = resolve(
        &ec2,
        "demo",
        "us-east-1",
        "1.32",
        &nc,
        Timestamp::UNIX_EPOCH,
    )
    .await;
    assert_eq!(r.not_ready, None);
    assert_eq!(r.status.instance_profile.as_deref(), Some("TeamProfile"));
    assert_eq!(ec2.iam_calls(), Vec::<String>::new(), "no IAM call");
    nc.status = Some(r.status);
    let data = launchtemplate::data(&nc, AmiFamily::Al2023, "ami-web", "", false);
    assert_eq!(data.instance_profile.as_deref(), Some("TeamProfile"));
    // With a role instead, Karpenter makes (and uses) a profile of its own.
    let with_role = resolved(&ec2, json!({})).await;
    let own = with_role
        .status
        .and_then(|s| s.instance_profile)
        .expect("a profile for the role");
    assert_ne!(own, "TeamProfile");
    assert!(
        ec2.iam_calls()
            .contains(&format!("CreateInstanceProfile {own} NodeRole")),
        "{:?}",
        ec2.iam_calls()
    );
}

/// Labels of a type with `extra` hardware labels, on amd64 Linux.
fn type_labels(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[tokio::test]
async fn an_al2_alias_lists_its_gpu_image_for_nvidia_and_neuron_types() {
    let mut ec2 = account();
    ec2.images.extend([
        (
            image("ami-al2", "amazon-eks-node-1.32-v20260301", "x86_64"),
            "amazon",
            BTreeMap::new(),
        ),
        (
            image(
                "ami-al2-gpu",
                "amazon-eks-gpu-node-1.32-v20260301",
                "x86_64",
            ),
            "amazon",
            BTreeMap::new(),
        ),
    ]);
    ec2.parameters.extend([
        (
            "/aws/service/eks/optimized-ami/1.32/amazon-linux-2/recommended/image_id",
            "ami-al2",
        ),
        (
            "/aws/service/eks/optimized-ami/1.32/amazon-linux-2-gpu/recommended/image_id",
            "ami-al2-gpu",
        ),
    ]);
    let spec = json!({"amiFamily": null, "amiSelectorTerms": [{"alias": "al2@latest"}]});
    let nc = resolved(&ec2, spec.clone()).await;
    let amis = nc.status.map(|s| s.amis).unwrap_or_default();
    let mut ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["ami-al2", "ami-al2-gpu", "ami-al2-gpu"]);
    let boots = |extra: &[(&str, &str)]| {
        karpenter_core::cloud::compatible_ami(&amis, &type_labels(extra)).map(|a| a.id.clone())
    };
    assert_eq!(boots(&[]).as_deref(), Some("ami-al2"));
    assert_eq!(
        boots(&[("karpenter.k8s.aws/instance-gpu-count", "1")]).as_deref(),
        Some("ami-al2-gpu")
    );
    assert_eq!(
        boots(&[("karpenter.k8s.aws/instance-accelerator-count", "1")]).as_deref(),
        Some("ami-al2-gpu")
    );
    // On 1.33 the alias is refused before any parameter is read, as upstream refuses it.
    let r = resolve(
        &ec2,
        "demo",
        "us-east-1",
        "1.33",
        &node_class(spec),
        Timestamp::UNIX_EPOCH,
    )
    .await;
    let (condition, reason, _) = r.not_ready.expect("not ready");
    assert_eq!(
        (condition.as_str(), reason.as_str()),
        ("AMIsReady", "UnsupportedAlias")
    );
    assert!(r.status.amis.is_empty());
}
