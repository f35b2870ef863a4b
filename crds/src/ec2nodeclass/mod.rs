//! The EC2NodeClass kind (`karpenter.k8s.aws/v1`): the AWS launch configuration a NodePool's
//! nodes use (subnets, security groups, AMIs, IAM role, user data, kubelet settings, volumes),
//! and in status what those selectors resolved to
//! (`aws:pkg/apis/v1/ec2nodeclass.go`, `ec2nodeclass_status.go`, `kubeletconfiguration.go`).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{self, Condition, ConditionTypes, ObjectInfo, StatusConditions};
use crate::schema;

mod launch;
pub mod placeholder;
mod selectors;
mod status;

pub use launch::*;
pub use selectors::*;
pub use status::*;

/// Most selector terms of each kind an EC2NodeClass may list.
pub const MAX_SELECTOR_TERMS: usize = 30;
/// The alias version that tracks the newest AMI release.
pub const ALIAS_VERSION_LATEST: &str = "latest";

/// The desired state of an EC2NodeClass.
// kube's repeated `printcolumn(...)` entries look like duplicated attributes to clippy.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    status = "EC2NodeClassStatus",
    derive = "PartialEq",
    category = "karpenter",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    doc = "An EC2NodeClass is the AWS-specific configuration NodePools reference to launch EC2 instances: where (subnets, security groups), from which image (AMI selectors), with which identity (role or instance profile), and how the node boots (user data, kubelet settings, volumes, metadata options).",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Role",
        type_ = "string",
        json_path = ".spec.role",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"message": "must specify exactly one of ['role', 'instanceProfile']", "rule": "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))"},
    {"message": "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias", "rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2') : true)"},
    {"message": "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias", "rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2023') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2023') : true)"},
    {"message": "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias", "rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'bottlerocket') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Bottlerocket') : true)"},
    {"message": "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias", "rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2019') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2019') : true)"},
    {"message": "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias", "rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2022') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2022') : true)"},
    {"message": "if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias", "rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2025') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2025') : true)"},
    {"message": "must specify amiFamily if amiSelectorTerms does not contain an alias", "rule": "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)"}
]))]
pub struct EC2NodeClassSpec {
    /// Subnets to launch into; terms are ORed, fields within a term ANDed. At most 30.
    #[schemars(extend(
        "maxItems" = 30,
        "x-kubernetes-validations" = [
            {"message": "subnetSelectorTerms cannot be empty", "rule": "self.size() != 0"},
            {"message": "expected at least one, got none, ['tags', 'id']", "rule": "self.all(x, has(x.tags) || has(x.id))"},
            {"message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term", "rule": "!self.all(x, has(x.id) && has(x.tags))"}
        ]
    ))]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Security groups for instances; terms are ORed, fields within a term ANDed. At most 30.
    #[schemars(extend(
        "maxItems" = 30,
        "x-kubernetes-validations" = [
            {"message": "securityGroupSelectorTerms cannot be empty", "rule": "self.size() != 0"},
            {"message": "expected at least one, got none, ['tags', 'id', 'name']", "rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name))"},
            {"message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term", "rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))"},
            {"message": "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term", "rule": "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))"}
        ]
    ))]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Capacity reservations instances may launch into; terms are ORed. At most 30.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 30,
        "x-kubernetes-validations" = [
            {"message": "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']", "rule": "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))"},
            {"message": "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term", "rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))"}
        ]
    ))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// The placement group (by name or id) instances launch into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// Whether instances get a public IPv4 address; unset follows the subnet's setting.
    #[serde(
        rename = "associatePublicIPAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// Number of IPv4 prefixes assigned to the primary network interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// AMIs to use; terms are ORed. An `alias` term (e.g. `al2023@latest`) must be the only term.
    #[schemars(extend(
        "minItems" = 1,
        "maxItems" = 30,
        "x-kubernetes-validations" = [
            {"message": "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']", "rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))"},
            {"message": "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms", "rule": "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))"},
            {"message": "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms", "rule": "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))"},
            {"message": "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms", "rule": "!(self.exists(x, has(x.alias)) && self.size() != 1)"}
        ]
    ))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// Decides the user data format and default block devices. Optional with an alias term
    /// (inferred from it; then only that family or `Custom` is allowed), required otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    /// User data for instances, in the AMI family's format; Karpenter merges its bootstrap
    /// configuration into it (passed through unchanged for `Custom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// IAM role for nodes; Karpenter creates and manages an instance profile for it. Exactly one
    /// of `role` and `instanceProfile` must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "role cannot be empty"}]))]
    pub role: Option<String>,
    /// An existing instance profile for nodes (its role must be passable by Karpenter). Exactly
    /// one of `role` and `instanceProfile` must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "instanceProfile cannot be empty"}]))]
    pub instance_profile: Option<String>,
    /// Tags for instances, volumes and launch templates. Keys Karpenter sets itself
    /// (`karpenter.sh/nodepool`, `karpenter.sh/nodeclaim`, `karpenter.k8s.aws/ec2nodeclass`,
    /// `eks:eks-cluster-name`, `kubernetes.io/cluster/*`) are not allowed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::ec2nodeclass_tags")]
    pub tags: BTreeMap<String, String>,
    /// Kubelet configuration for nodes. Any KubeletConfiguration field may be set; the fields
    /// listed here are the ones Karpenter reads for scheduling and bootstrap. An invalid
    /// configuration shows as `ValidationSucceeded=False` instead of failing the apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Block devices for instances; at most 50 and at most one `rootVolume`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 50,
        "x-kubernetes-validations" = [{"message": "must have only one blockDeviceMappings with rootVolume", "rule": "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1"}]
    ))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// How to use local NVMe instance-store disks; `RAID0` puts kubelet and containerd state on
    /// a RAID-0 array of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Network interfaces to attach, e.g. EFA devices. Must include the primary interface
    /// (card 0, device 0, type `interface`). At most 150.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 150,
        "x-kubernetes-validations" = [
            {"message": "networkInterfaces must include a primary interface with interfaceType='interface'", "rule": "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')"},
            {"message": "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card", "rule": "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))"}
        ]
    ))]
    pub network_interfaces: Vec<NetworkInterface>,
    /// Whether CloudWatch detailed (1-minute) monitoring is enabled for instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance Metadata Service settings for instances. Defaults to endpoint enabled, IPv6
    /// endpoint disabled, PUT hop limit 1 and tokens (IMDSv2) required, which keeps pods from
    /// reaching the node's credentials.
    #[serde(
        default = "default_metadata_options",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata_options: Option<MetadataOptions>,
    /// Idle connection-tracking timeouts for the ENIs Karpenter configures (not EFA-only ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// Reserved EC2 `Context` value passed to CreateFleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// CPU options for instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
}

fn default_metadata_options() -> Option<MetadataOptions> {
    Some(MetadataOptions::default())
}

impl StatusConditions for EC2NodeClass {
    fn condition_types(&self) -> ConditionTypes {
        conditions::EC2NODECLASS_CONDITIONS
    }
    fn status_conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
    fn object_info(&self) -> ObjectInfo {
        conditions::object_info(&self.metadata)
    }
    fn status_conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.status.get_or_insert_with(Default::default).conditions
    }
}

impl EC2NodeClass {
    /// The alias of the alias term, if the class selects AMIs by alias and it parses.
    pub fn alias(&self) -> Option<Alias> {
        self.spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())
            .and_then(Alias::parse)
    }

    /// The effective AMI family: `spec.amiFamily`, else the alias's family, else `Custom`.
    pub fn ami_family(&self) -> AmiFamily {
        self.spec
            .ami_family
            .or_else(|| self.alias().map(|a| a.family))
            .unwrap_or(AmiFamily::Custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn parses_and_defaults() {
        let yaml = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-test
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{id: sg-123}]
  amiSelectorTerms: [{alias: bottlerocket@latest}]
  kubelet:
    maxPods: 110
    kubeReserved: {cpu: 100m}
    evictionSoftGracePeriod: {memory.available: 1m30s}
    containerLogMaxSize: 10Mi
  blockDeviceMappings:
    - deviceName: /dev/xvda
      rootVolume: true
      ebs: {volumeSize: 20Gi, volumeType: gp3, kmsKeyID: arn:aws:kms:x}
  metadataOptions: {httpTokens: optional}
"#;
        let nc: EC2NodeClass = serde_saphyr::from_str(yaml).expect("parse");
        assert_eq!(nc.ami_family(), AmiFamily::Bottlerocket);
        assert_eq!(
            nc.alias(),
            Some(Alias {
                family: AmiFamily::Bottlerocket,
                version: "latest".into()
            })
        );
        let kubelet = nc.spec.kubelet.as_ref().expect("kubelet");
        assert_eq!(kubelet.max_pods, Some(IntOrString::Int(110)));
        assert_eq!(kubelet.other["containerLogMaxSize"], "10Mi");
        let mo = nc.spec.metadata_options.as_ref().expect("metadata options");
        assert_eq!(mo.http_tokens, Some(HttpTokens::Optional));
        assert_eq!(mo.http_endpoint, Some(Toggle::Enabled));
        let json = serde_json::to_value(&nc).expect("ser");
        assert_eq!(json["spec"]["kubelet"]["containerLogMaxSize"], "10Mi");
        assert_eq!(
            json["spec"]["blockDeviceMappings"][0]["ebs"]["kmsKeyID"],
            "arn:aws:kms:x"
        );
        assert_eq!(
            json["spec"]["metadataOptions"]["httpProtocolIPv6"],
            "disabled"
        );
    }

    #[test]
    fn metadata_options_default_when_absent() {
        let spec: EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
            "subnetSelectorTerms": [], "securityGroupSelectorTerms": [], "amiSelectorTerms": []
        }))
        .expect("parse");
        assert_eq!(spec.metadata_options, Some(MetadataOptions::default()));
    }

    #[test]
    fn aliases() {
        assert_eq!(
            Alias::parse("al2023@v20240625").map(|a| a.family),
            Some(AmiFamily::Al2023)
        );
        assert_eq!(
            Alias::parse("windows2022@latest")
                .map(|a| a.to_string())
                .as_deref(),
            Some("windows2022@latest")
        );
        assert_eq!(Alias::parse("ubuntu@latest"), None);
        assert_eq!(Alias::parse("al2023"), None);
        assert_eq!(Alias::parse("al2023@"), None);
    }

    #[test]
    fn windows_families_name_their_release_and_build() {
        let windows = [
            (AmiFamily::Windows2019, "2019", "10.0.17763"),
            (AmiFamily::Windows2022, "2022", "10.0.20348"),
            (AmiFamily::Windows2025, "2025", "10.0.26100"),
        ];
        for (family, year, build) in windows {
            assert_eq!(family.windows_year(), Some(year));
            assert_eq!(family.windows_build(), Some(build));
        }
        for linux in [AmiFamily::Al2023, AmiFamily::Al2, AmiFamily::Bottlerocket] {
            assert_eq!((linux.windows_year(), linux.windows_build()), (None, None));
        }
    }
}
