//! EC2 for `orphans` (cargo feature `aws`): instances tagged `kubernetes.io/cluster/<name>=owned`
//! through the [`Ec2`] trait the controller's AWS provider uses, over aws-sdk-ec2, with the user's credentials and
//! region from the standard AWS chain (`AWS_PROFILE`, `AWS_REGION`, `AWS_ENDPOINT_URL`, ...).
//! Prices come from the vendored on-demand table of the region ([`CatalogPrices`]).

use crds::labels::{
    CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, CLUSTER_TAG_KEY_PREFIX, NODECLAIM_TAG_KEY,
    NODEPOOL_TAG_KEY,
};
use ec2api::{Ec2, Filter, InstanceInfo, SdkEc2, loader, provider_id};

use super::CloudInstance;
use super::cloud_error::CloudError;
use crate::price::CatalogPrices;
use crate::status::PriceBook;

/// Instance states DescribeInstances is asked for: everything not yet terminated.
const STATES: [&str; 5] = ["pending", "running", "stopping", "stopped", "shutting-down"];

/// EC2 in one region, for one cluster's instances.
pub struct Ec2Cloud {
    ec2: SdkEc2,
    cluster: String,
    region: String,
    prices: Option<CatalogPrices>,
}

impl Ec2Cloud {
    /// Loads the AWS configuration (standard chain; `endpoint_url` overrides every endpoint;
    /// `fallback_region` is used when the chain names no region).
    ///
    /// Errors: no region at all.
    pub async fn connect(
        cluster: String,
        endpoint_url: Option<&str>,
        fallback_region: Option<String>,
    ) -> Result<Ec2Cloud, CloudError> {
        let mut config = loader(endpoint_url).await.load().await;
        if config.region().is_none()
            && let Some(region) = fallback_region
        {
            config = loader(endpoint_url)
                .await
                .region(aws_config::Region::new(region))
                .load()
                .await;
        }
        let region = config
            .region()
            .map(ToString::to_string)
            .ok_or(CloudError::NoRegion)?;
        Ok(Ec2Cloud {
            ec2: SdkEc2::new(&config),
            cluster,
            region,
            prices: CatalogPrices::embedded().ok(),
        })
    }

    /// `EC2 <region>, cluster <name>`.
    pub fn source(&self) -> String {
        format!("EC2 {}, cluster {}", self.region, self.cluster)
    }

    fn error(&self, call: &'static str, e: impl std::fmt::Display) -> CloudError {
        CloudError::Ec2 {
            call,
            region: self.region.clone(),
            cluster: self.cluster.clone(),
            message: e.to_string(),
        }
    }

    fn instance(&self, i: &InstanceInfo) -> CloudInstance {
        let capacity_type = if i.spot {
            CAPACITY_TYPE_SPOT
        } else {
            CAPACITY_TYPE_ON_DEMAND
        };
        let tag = |k: &str| i.tags.get(k).filter(|v| !v.is_empty()).cloned();
        CloudInstance {
            id: i.id.clone(),
            provider_id: provider_id(&i.zone, &i.id),
            instance_type: Some(i.instance_type.clone()),
            zone: Some(i.zone.clone()),
            capacity_type: Some(capacity_type.to_owned()),
            hourly_price: self.prices.as_ref().and_then(|p| {
                p.hourly_price(
                    &i.instance_type,
                    Some(&self.region),
                    Some(&i.zone),
                    Some(capacity_type),
                )
            }),
            launch_time: Some(i.launched_at),
            nodeclaim: tag(NODECLAIM_TAG_KEY),
            nodepool: tag(NODEPOOL_TAG_KEY),
            terminating: i.is_terminated(),
        }
    }

    /// DescribeInstances for the cluster's instances that are not terminated.
    ///
    /// Errors: the call failed.
    pub async fn list(&self) -> Result<Vec<CloudInstance>, CloudError> {
        let filters = vec![
            Filter::new(
                format!("tag:{CLUSTER_TAG_KEY_PREFIX}{}", self.cluster),
                "owned",
            ),
            Filter {
                name: "instance-state-name".to_owned(),
                values: STATES.iter().map(|s| (*s).to_owned()).collect(),
            },
        ];
        let infos = self
            .ec2
            .describe_instances(&[], filters)
            .await
            .map_err(|e| self.error("DescribeInstances", e))?;
        Ok(infos
            .iter()
            .filter(|i| i.state != "terminated")
            .map(|i| self.instance(i))
            .collect())
    }

    /// TerminateInstances for one id; an id EC2 does not know is not an error.
    ///
    /// Errors: the call failed.
    pub async fn terminate(&self, id: &str) -> Result<(), CloudError> {
        match self.ec2.terminate_instances(&[id.to_owned()]).await {
            Ok(()) => Ok(()),
            Err(e) if e.code == "InvalidInstanceID.NotFound" => Ok(()),
            Err(e) => Err(self.error("TerminateInstances", e)),
        }
    }
}
