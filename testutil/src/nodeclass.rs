//! EC2NodeClasses: the AWS settings (role, AMIs, subnets, security groups) NodeClaims launch with.

use crds::EC2NodeClass;
use serde_json::{Value, json};

/// An EC2NodeClass `name` with role `r`, AMI alias `al2023@latest`, and subnets and security
/// groups selected by the tag `karpenter.sh/discovery: demo` (the simulated cloud's cluster);
/// no status (not resolved).
pub fn ec2nodeclass(name: impl AsRef<str>) -> EC2NodeClassBuilder {
    EC2NodeClassBuilder(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": name.as_ref()},
        "spec": {
            "role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        },
    }))
}

/// An EC2NodeClass being built (see [`ec2nodeclass`]).
#[derive(Clone, Debug)]
pub struct EC2NodeClassBuilder(Value);

builder_common!(EC2NodeClassBuilder, EC2NodeClass, "EC2NodeClass");

impl EC2NodeClassBuilder {
    /// Sets the IAM role of the nodes (`spec.role`).
    pub fn role(mut self, role: impl AsRef<str>) -> Self {
        self.0["spec"]["role"] = json!(role.as_ref());
        self
    }

    /// Selects images by one alias, e.g. `al2023@latest` or `al2@v20240807`.
    pub fn ami_alias(mut self, alias: impl AsRef<str>) -> Self {
        self.0["spec"]["amiSelectorTerms"] = json!([{"alias": alias.as_ref()}]);
        self
    }

    /// Selects subnets and security groups by the tag `karpenter.sh/discovery: cluster`.
    pub fn discovery(self, cluster: impl AsRef<str>) -> Self {
        let cluster = cluster.as_ref();
        self.subnet_discovery(cluster)
            .security_group_discovery(cluster)
    }

    /// Selects subnets by the tag `karpenter.sh/discovery: cluster`.
    pub fn subnet_discovery(mut self, cluster: impl AsRef<str>) -> Self {
        self.0["spec"]["subnetSelectorTerms"] =
            json!([{"tags": {"karpenter.sh/discovery": cluster.as_ref()}}]);
        self
    }

    /// Selects security groups by the tag `karpenter.sh/discovery: cluster`.
    pub fn security_group_discovery(mut self, cluster: impl AsRef<str>) -> Self {
        self.0["spec"]["securityGroupSelectorTerms"] =
            json!([{"tags": {"karpenter.sh/discovery": cluster.as_ref()}}]);
        self
    }

    /// Selects subnets by id, one term each (e.g. `["subnet-1"]`).
    pub fn subnet_ids<S: AsRef<str>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.0["spec"]["subnetSelectorTerms"] = id_terms(ids);
        self
    }

    /// Selects security groups by id, one term each (e.g. `["sg-1"]`).
    pub fn security_group_ids<S: AsRef<str>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.0["spec"]["securityGroupSelectorTerms"] = id_terms(ids);
        self
    }
}

/// One selector term `{"id": ...}` per id.
fn id_terms<S: AsRef<str>>(ids: impl IntoIterator<Item = S>) -> Value {
    Value::Array(
        ids.into_iter()
            .map(|id| json!({"id": id.as_ref()}))
            .collect(),
    )
}
