//! Selector terms of an EC2NodeClass (subnets, security groups, capacity reservations,
//! placement group, AMIs) and AMI families and aliases (`aws:pkg/apis/v1/ec2nodeclass.go`).

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// Selects subnets by tags or by id.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq)]
pub struct SubnetSelectorTerm {
    /// Tags a subnet must have; a value of `*` matches any value. At most 20.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::selector_tags")]
    pub tags: BTreeMap<String, String>,
    /// Subnet id, e.g. `subnet-0123456789abcdef0`; cannot be combined with tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "subnet-[0-9a-z]+"))]
    pub id: Option<String>,
}

/// Selects security groups by tags, id or name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq)]
pub struct SecurityGroupSelectorTerm {
    /// Tags a security group must have; a value of `*` matches any value. At most 20.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::selector_tags")]
    pub tags: BTreeMap<String, String>,
    /// Security group id, e.g. `sg-0123456789abcdef0`; cannot be combined with other fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "sg-[0-9a-z]+"))]
    pub id: Option<String>,
    /// Security group name (the group's name field, not its Name tag); cannot be combined with
    /// other fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Selects capacity reservations by tags, id, owner or match criteria.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// Tags a reservation must have; a value of `*` matches any value. At most 20.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::selector_tags")]
    pub tags: BTreeMap<String, String>,
    /// Capacity reservation id, e.g. `cr-0123456789abcdef0`; cannot be combined with other fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// 12-digit AWS account id that owns the reservation.
    #[serde(rename = "ownerID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^[0-9]{12}$"))]
    pub owner_id: Option<String>,
    /// Which launches the reservation accepts: `open` or `targeted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
}

/// Selects a placement group by name or by id (exactly one).
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq)]
#[schemars(extend("x-kubernetes-validations" = [
    {"message": "expected at least one, got none, ['name', 'id']", "rule": "has(self.name) || has(self.id)"},
    {"message": "'name' and 'id' are mutually exclusive", "rule": "!(has(self.name) && has(self.id))"}
]))]
pub struct PlacementGroupSelector {
    /// Placement group name, as given when the group was created; exclusive with `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// Placement group id, e.g. `pg-0123456789abcdef0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
}

/// Selects AMIs by alias, id, name, owner, tags or SSM parameter.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// An EKS-optimized AMI as `family@version`: family is al2, al2023, bottlerocket,
    /// windows2019, windows2022 or windows2025; version is a release (e.g. `v20240625`) or
    /// `latest` (the only choice for Windows). `latest` drifts nodes on every new release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxLength" = 30,
        "x-kubernetes-validations" = [
            {"message": "'alias' is improperly formatted, must match the format 'family@version'", "rule": "self.matches('^[a-zA-Z0-9]+@.+$')"},
            {"message": "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'", "rule": "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']"},
            {"message": "windows families may only specify version 'latest'", "rule": "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true"}
        ]
    ))]
    pub alias: Option<String>,
    /// Tags an AMI must have; a value of `*` matches any value. At most 20.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::selector_tags")]
    pub tags: BTreeMap<String, String>,
    /// AMI id, e.g. `ami-0123456789abcdef0`; cannot be combined with other fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "ami-[0-9a-z]+"))]
    pub id: Option<String>,
    /// AMI name (the image's name field, not its Name tag); may contain wildcards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// AMI owner: account ids, `self`, `amazon` or `aws-marketplace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Name or ARN of an SSM parameter that holds an AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// An AMI family: decides the user data format and default block devices.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq, Hash)]
pub enum AmiFamily {
    /// Amazon Linux 2 (bootstrap.sh); not supported on Kubernetes 1.33 and later.
    #[serde(rename = "AL2")]
    Al2,
    /// Amazon Linux 2023 (nodeadm).
    #[serde(rename = "AL2023")]
    Al2023,
    /// Bottlerocket (TOML settings).
    Bottlerocket,
    /// Any AMI; user data is passed through unchanged.
    Custom,
    /// Windows Server 2019.
    Windows2019,
    /// Windows Server 2022.
    Windows2022,
    /// Windows Server 2025 (Kubernetes 1.35 and later).
    Windows2025,
}

impl AmiFamily {
    /// The wire spelling, e.g. `AL2023`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Al2 => "AL2",
            Self::Al2023 => "AL2023",
            Self::Bottlerocket => "Bottlerocket",
            Self::Custom => "Custom",
            Self::Windows2019 => "Windows2019",
            Self::Windows2022 => "Windows2022",
            Self::Windows2025 => "Windows2025",
        }
    }

    /// The family an alias names (`al2023` → `AL2023`); `None` for unknown families.
    pub fn from_alias_family(family: &str) -> Option<Self> {
        [
            Self::Al2,
            Self::Al2023,
            Self::Bottlerocket,
            Self::Windows2019,
            Self::Windows2022,
            Self::Windows2025,
        ]
        .into_iter()
        .find(|f| f.as_str().to_lowercase() == family)
    }

    /// Whether the family runs Windows.
    pub fn is_windows(self) -> bool {
        matches!(
            self,
            Self::Windows2019 | Self::Windows2022 | Self::Windows2025
        )
    }

    /// The Windows Server release year of a Windows family (`"2022"` for Windows2022), as it
    /// appears in the EKS-optimized image names and SSM parameters; `None` for Linux families.
    pub fn windows_year(self) -> Option<&'static str> {
        match self {
            Self::Windows2019 => Some("2019"),
            Self::Windows2022 => Some("2022"),
            Self::Windows2025 => Some("2025"),
            _ => None,
        }
    }

    /// The OS build a Windows family's nodes report in `node.kubernetes.io/windows-build`
    /// (`10.0.20348` for Windows Server 2022), as upstream pins them per family
    /// (`aws:pkg/apis/v1/labels.go` `Windows20xxBuild`); `None` for Linux families.
    pub fn windows_build(self) -> Option<&'static str> {
        match self {
            Self::Windows2019 => Some("10.0.17763"),
            Self::Windows2022 => Some("10.0.20348"),
            Self::Windows2025 => Some("10.0.26100"),
            _ => None,
        }
    }
}

impl fmt::Display for AmiFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed `family@version` AMI alias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias {
    /// The family the alias names, e.g. [`AmiFamily::Al2023`] for `al2023@latest` (aliases
    /// exist for AL2, AL2023, Bottlerocket and Windows 2019/2022/2025, never Custom).
    pub family: AmiFamily,
    /// The version, e.g. `v20240625` or `latest`.
    pub version: String,
}

impl Alias {
    /// Parses `family@version`; `None` when malformed or the family is unknown.
    pub fn parse(alias: &str) -> Option<Self> {
        let (family, version) = alias.split_once('@')?;
        if version.is_empty() || version.contains('@') {
            return None;
        }
        Some(Self {
            family: AmiFamily::from_alias_family(family)?,
            version: version.to_string(),
        })
    }
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@{}",
            self.family.as_str().to_lowercase(),
            self.version
        )
    }
}

/// Which launches a capacity reservation accepts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    /// `open`: any launch with a matching instance type, zone and platform uses it.
    Open,
    /// Only launches that target the reservation.
    Targeted,
}
