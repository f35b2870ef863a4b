//! Why `orphans` could not read or change the cloud: the typed error both clouds return (the
//! sandbox through its Instance objects, and EC2 with cargo feature `aws`), a missing cluster
//! name or region included. Each message says what to check, or what to pass instead
//! (`--cluster-name`, `--no-cloud`).

use std::time::Duration;

use crds::sandbox as mirror;

use crate::causes::causes;

/// How long terminating a sandbox instance waits for its Instance object to be gone.
pub const SANDBOX_TERMINATE_WAIT: Duration = Duration::from_secs(30);

/// Why the cloud could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// Listing the sandbox's Instance objects failed.
    #[error("listing instances.{} from the sandbox: {}", mirror::GROUP, causes(.0))]
    SandboxList(#[source] kube::Error),
    /// Deleting a sandbox Instance object failed.
    #[error(
        "terminating instance {id} (deleting instance.{}/{id}): {}",
        mirror::GROUP,
        causes(source)
    )]
    SandboxDelete {
        /// Instance id, e.g. `i-0abc…`.
        id: String,
        /// The delete call's error, printed with its causes.
        source: kube::Error,
    },
    /// The sandbox did not finish terminating in time.
    #[error(
        "instance {id} was not terminated within {}s: instance.{}/{id} still has finalizer {}; \
         check that the sandbox is still running",
        SANDBOX_TERMINATE_WAIT.as_secs(), mirror::GROUP, mirror::INSTANCE_FINALIZER
    )]
    SandboxTimeout {
        /// Instance id.
        id: String,
    },
    /// No cluster name for the EC2 tag filter.
    #[error(
        "no cluster name to find EC2 instances by (tag kubernetes.io/cluster/<name>): the \
         kubeconfig cluster {kube_cluster:?} is not an EKS cluster ARN; pass --cluster-name NAME \
         (or set CLUSTER_NAME), or --no-cloud to skip the cloud"
    )]
    NoClusterName {
        /// The kubeconfig cluster entry that was looked at.
        kube_cluster: String,
    },
    /// No AWS region.
    #[cfg(feature = "aws")]
    #[error(
        "no AWS region for EC2: set AWS_REGION (or a profile's region), or pass --no-cloud to \
         skip the cloud"
    )]
    NoRegion,
    /// An EC2 call failed.
    #[cfg(feature = "aws")]
    #[error(
        "{call} in {region} (cluster {cluster}): {message}; check the AWS credentials and region \
             (AWS_PROFILE, AWS_REGION), or pass --no-cloud to skip the cloud"
    )]
    Ec2 {
        /// The EC2 call, e.g. `DescribeInstances`.
        call: &'static str,
        /// The region called, e.g. `us-east-1`.
        region: String,
        /// The cluster name instances are found by (tag `kubernetes.io/cluster/<name>`).
        cluster: String,
        /// The SDK's error as text.
        message: String,
    },
}
