//! Where `orphans` reads cloud instances from and terminates them: the sandbox's simulated cloud
//! through its `instances.sandbox.karpenter.sh` objects (deleting one terminates the instance),
//! or EC2 through the controller's AWS provider code (cargo feature `aws`), with the user's
//! credentials and the cluster name from `--cluster-name`, `CLUSTER_NAME` or an EKS cluster ARN
//! in the kubeconfig.

use std::time::Duration;

use crds::sandbox as mirror;
use jiff::Timestamp;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams};
use serde_json::Value;

use super::CloudInstance;
use super::cloud_error::{CloudError, SANDBOX_TERMINATE_WAIT};

/// An EKS cluster named by its ARN, `arn:aws:eks:REGION:ACCOUNT:cluster/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EksArn {
    /// Region, e.g. `us-west-2`.
    pub region: String,
    /// 12-digit AWS account id.
    pub account: String,
    /// Cluster name: what instances are found by (tag `kubernetes.io/cluster/<name>`).
    pub name: String,
}

/// Parses an EKS cluster ARN (any partition: `aws`, `aws-cn`, `aws-us-gov`); `None` otherwise.
pub fn parse_eks_arn(s: &str) -> Option<EksArn> {
    let mut parts = s.splitn(6, ':');
    let (arn, partition, service, region, account, resource) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    let name = resource.strip_prefix("cluster/")?;
    let ok = arn == "arn"
        && partition.starts_with("aws")
        && service == "eks"
        && !region.is_empty()
        && !name.is_empty()
        && !name.contains('/');
    ok.then(|| EksArn {
        region: region.to_owned(),
        account: account.to_owned(),
        name: name.to_owned(),
    })
}

/// The cluster name EC2 instances are tagged with, and the region an EKS ARN names: `flag`
/// (`--cluster-name` or `CLUSTER_NAME`) first, else the kubeconfig cluster or context when it is
/// an EKS cluster ARN.
///
/// Errors: [`CloudError::NoClusterName`].
pub fn cluster_name(
    flag: Option<&str>,
    kube_cluster: Option<&str>,
    context: &str,
) -> Result<(String, Option<String>), CloudError> {
    let arn = kube_cluster
        .and_then(parse_eks_arn)
        .or_else(|| parse_eks_arn(context));
    match (flag.filter(|f| !f.is_empty()), arn) {
        (Some(name), arn) => Ok((name.to_owned(), arn.map(|a| a.region))),
        (None, Some(arn)) => Ok((arn.name, Some(arn.region))),
        (None, None) => Err(CloudError::NoClusterName {
            kube_cluster: kube_cluster.unwrap_or(context).to_owned(),
        }),
    }
}

/// The API resource of the sandbox's Instance objects.
pub fn sandbox_resource() -> ApiResource {
    ApiResource {
        group: mirror::GROUP.to_owned(),
        version: mirror::VERSION.to_owned(),
        api_version: format!("{}/{}", mirror::GROUP, mirror::VERSION),
        kind: mirror::INSTANCE_KIND.to_owned(),
        plural: mirror::INSTANCE_PLURAL.to_owned(),
    }
}

fn text(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A sandbox Instance object (as JSON) as a [`CloudInstance`]; `None` without a name or
/// providerID.
pub fn from_instance_object(obj: &Value) -> Option<CloudInstance> {
    Some(CloudInstance {
        id: text(obj, "/metadata/name")?,
        provider_id: text(obj, "/spec/providerID")?,
        instance_type: text(obj, "/spec/instanceType"),
        zone: text(obj, "/spec/zone"),
        capacity_type: text(obj, "/spec/capacityType"),
        hourly_price: obj.pointer("/status/hourlyPrice").and_then(Value::as_f64),
        launch_time: text(obj, "/status/launchTime").and_then(|t| t.parse::<Timestamp>().ok()),
        nodeclaim: text(obj, "/spec/nodeClaim"),
        nodepool: text(obj, "/spec/nodePool"),
        terminating: obj.pointer("/metadata/deletionTimestamp").is_some(),
    })
}

/// A cloud the plugin can list and terminate instances in.
pub enum Cloud {
    /// The sandbox's simulated cloud, through its Instance objects.
    Sandbox(Api<DynamicObject>),
    /// EC2 (feature `aws`).
    #[cfg(feature = "aws")]
    Ec2(super::ec2::Ec2Cloud),
}

impl Cloud {
    /// The sandbox's cloud, through `client`.
    pub fn sandbox(client: kube::Client) -> Cloud {
        Cloud::Sandbox(Api::all_with(client, &sandbox_resource()))
    }

    /// What the summary line calls it, e.g. `sandbox` or `EC2 us-east-1, cluster demo`.
    pub fn source(&self) -> String {
        match self {
            Cloud::Sandbox(_) => "sandbox".to_owned(),
            #[cfg(feature = "aws")]
            Cloud::Ec2(ec2) => ec2.source(),
        }
    }

    /// Instances tagged for the cluster that are not terminated.
    ///
    /// Errors: the listing failed.
    pub async fn list(&self) -> Result<Vec<CloudInstance>, CloudError> {
        match self {
            Cloud::Sandbox(api) => {
                let list = api
                    .list(&ListParams::default())
                    .await
                    .map_err(CloudError::SandboxList)?;
                Ok(list
                    .items
                    .iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .filter_map(|v| from_instance_object(&v))
                    .collect())
            }
            #[cfg(feature = "aws")]
            Cloud::Ec2(ec2) => ec2.list().await,
        }
    }

    /// Terminates instance `id`; one that is already gone is not an error. In the sandbox this
    /// deletes its Instance object and waits (up to [`SANDBOX_TERMINATE_WAIT`]) for the
    /// sandbox to terminate the instance and release the object.
    ///
    /// Errors: the cloud refused, or the sandbox did not finish in time.
    pub async fn terminate(&self, id: &str) -> Result<(), CloudError> {
        match self {
            Cloud::Sandbox(api) => {
                match api.delete(id, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                    Err(source) => {
                        return Err(CloudError::SandboxDelete {
                            id: id.to_owned(),
                            source,
                        });
                    }
                }
                let deadline = tokio::time::Instant::now() + SANDBOX_TERMINATE_WAIT;
                loop {
                    match api.get_opt(id).await {
                        Ok(None) => return Ok(()),
                        Ok(Some(_)) | Err(_) if tokio::time::Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        _ => return Err(CloudError::SandboxTimeout { id: id.to_owned() }),
                    }
                }
            }
            #[cfg(feature = "aws")]
            Cloud::Ec2(ec2) => ec2.terminate(id).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn eks_arns() {
        assert_eq!(
            parse_eks_arn("arn:aws:eks:us-west-2:123456789012:cluster/prod-1"),
            Some(EksArn {
                region: "us-west-2".into(),
                account: "123456789012".into(),
                name: "prod-1".into(),
            })
        );
        assert_eq!(
            parse_eks_arn("arn:aws-cn:eks:cn-north-1:1:cluster/c").map(|a| a.region),
            Some("cn-north-1".into())
        );
        for bad in [
            "prod-1",
            "arn:aws:ec2:us-west-2:1:cluster/x",
            "arn:aws:eks:us-west-2:1:nodegroup/x/y",
            "arn:aws:eks::1:cluster/x",
            "arn:aws:eks:us-west-2:1:cluster/",
            "kind-kind",
        ] {
            assert_eq!(parse_eks_arn(bad), None, "{bad}");
        }
    }

    #[test]
    fn cluster_name_from_flag_then_arn() {
        let arn = "arn:aws:eks:eu-west-1:1:cluster/shop";
        assert_eq!(
            cluster_name(Some("flagged"), Some(arn), "ctx").expect("flag"),
            ("flagged".into(), Some("eu-west-1".into()))
        );
        assert_eq!(
            cluster_name(None, Some(arn), "ctx").expect("arn"),
            ("shop".into(), Some("eu-west-1".into()))
        );
        assert_eq!(
            cluster_name(Some(""), Some("kind-kind"), arn).expect("context arn"),
            ("shop".into(), Some("eu-west-1".into()))
        );
        let err = cluster_name(None, Some("kind-kind"), "kind-kind").expect_err("no name");
        assert!(
            err.to_string()
                .contains("\"kind-kind\" is not an EKS cluster ARN; pass --cluster-name NAME"),
            "{err}"
        );
    }

    #[test]
    fn instance_objects_parse() {
        let obj = json!({
            "metadata": {"name": "i-0abc", "deletionTimestamp": "2025-06-01T11:59:00Z"},
            "spec": {"providerID": "aws:///us-east-1a/i-0abc", "instanceType": "m5.large",
                     "zone": "us-east-1a", "capacityType": "spot", "nodeClaim": "default-x",
                     "nodePool": "default"},
            "status": {"hourlyPrice": 0.04, "launchTime": "2025-06-01T11:00:00Z"},
        });
        let i = from_instance_object(&obj).expect("instance");
        assert_eq!(i.id, "i-0abc");
        assert_eq!(i.instance_type.as_deref(), Some("m5.large"));
        assert_eq!(i.hourly_price, Some(0.04));
        assert_eq!(i.nodeclaim.as_deref(), Some("default-x"));
        assert!(i.terminating);
        assert_eq!(
            i.launch_time,
            Some("2025-06-01T11:00:00Z".parse().expect("time"))
        );
        assert_eq!(
            from_instance_object(&json!({"metadata": {"name": "x"}})),
            None
        );
    }
}
