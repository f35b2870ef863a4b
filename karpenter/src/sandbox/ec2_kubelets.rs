//! What the sandbox's simulated kubelets see of EC2 when the sandbox runs on the AWS provider:
//! each running instance tagged for the cluster boots a kubelet that registers with the labels
//! and taints its user data names (parsed as the real bootstrap does), the instance's own
//! well-known labels (a Windows image's nodes `kubernetes.io/os=windows` with their
//! `node.kubernetes.io/windows-build`), and the capacity of its instance type.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use crds::labels as l;
use sandbox::actors::{BootRecord, InstanceSource};

use controller::cloudprovider::aws::{AwsCloud, launchtemplate};
use crds::ec2nodeclass::AmiFamily;
use ec2api::{Filter, ImageQuery, instance_id, provider_id};
use karpenter_core::capacity::node_class::CapacityConfig;

/// An [`InstanceSource`] over EC2, caching each instance's boot record (its user data is read
/// once).
pub struct Ec2Kubelets {
    cloud: Arc<AwsCloud>,
    booted: Mutex<HashMap<String, BootRecord>>,
}

impl Ec2Kubelets {
    /// Kubelets for the instances `cloud` can see.
    pub fn new(cloud: Arc<AwsCloud>) -> Ec2Kubelets {
        Ec2Kubelets {
            cloud,
            booted: Mutex::new(HashMap::new()),
        }
    }
}

impl Ec2Kubelets {
    /// The Windows family of the image `image_id` by its name's release year
    /// ([`launchtemplate::windows_family`]); `None` when DescribeImages fails or the name says
    /// none (the kubelet then reports the Windows2022 build).
    async fn windows_family(&self, image_id: &str) -> Option<AmiFamily> {
        let query = ImageQuery {
            ids: vec![image_id.to_string()],
            ..ImageQuery::default()
        };
        match self.cloud.ec2().describe_images(query).await {
            Ok(images) => images
                .iter()
                .find_map(|image| launchtemplate::windows_family(&image.name)),
            Err(e) => {
                tracing::warn!(image = %image_id, error = %e,
                    "sandbox kubelet: describing a Windows image failed; reporting Windows 2022");
                None
            }
        }
    }
}

#[async_trait]
impl InstanceSource for Ec2Kubelets {
    async fn running(&self) -> Result<Vec<BootRecord>, String> {
        let ec2 = self.cloud.ec2();
        let cluster_tag = format!(
            "tag:{}{}",
            l::CLUSTER_TAG_KEY_PREFIX,
            self.cloud.settings().cluster_name
        );
        let instances = ec2
            .describe_instances(
                &[],
                vec![
                    Filter::new(cluster_tag, "owned"),
                    Filter::new("instance-state-name", "running"),
                ],
            )
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for i in instances.iter().filter(|i| i.state == "running") {
            let cached = self
                .booted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&i.id)
                .cloned();
            if let Some(record) = cached {
                out.push(record);
                continue;
            }
            let user_data = ec2
                .user_data(&i.id)
                .await
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            let (mut labels, taints) = launchtemplate::parse_registration(&user_data);
            // The kubelet sizes its Node from its own configuration in user data and its
            // family's default volumes (the instance's block devices are not read back).
            let (mut family, kubelet) = launchtemplate::parse_kubelet(&user_data);
            if family.windows_build().is_some()
                && let Some(windows) = self.windows_family(&i.image_id).await
            {
                family = windows;
            }
            let config = match CapacityConfig::from_kubelet(
                family,
                Some(&kubelet),
                &[],
                None,
                &[],
                self.cloud.capacity_options(),
            ) {
                Ok(config) => config,
                Err(e) => {
                    tracing::warn!(instance = %i.id, error = %e,
                        "sandbox kubelet: unreadable kubelet configuration; not registering");
                    continue;
                }
            };
            let zones = [i.zone.clone()].into();
            let types = self
                .cloud
                .types_in(&zones, &config)
                .await
                .map_err(|e| e.to_string())?;
            let Some(it) = types.iter().find(|t| t.name == i.instance_type) else {
                tracing::warn!(instance = %i.id, instance_type = %i.instance_type,
                    "sandbox kubelet: unknown instance type; not registering");
                continue;
            };
            let arch = it.labels.get(l::ARCH_LABEL).cloned().unwrap_or_default();
            let hostname = if i.private_dns.is_empty() {
                i.id.clone()
            } else {
                i.private_dns.clone()
            };
            labels.insert(l::INSTANCE_TYPE_LABEL.into(), i.instance_type.clone());
            labels.insert(l::TOPOLOGY_ZONE_LABEL.into(), i.zone.clone());
            labels.insert(
                l::TOPOLOGY_REGION_LABEL.into(),
                self.cloud.settings().region.clone(),
            );
            labels.insert(l::ARCH_LABEL.into(), arch.clone());
            // The OS (and a Windows node's build) as the family's instance types give it: a
            // Windows kubelet reports `kubernetes.io/os=windows` and its
            // `node.kubernetes.io/windows-build`.
            let os = it
                .labels
                .get(l::OS_LABEL)
                .map_or(l::OS_LINUX, String::as_str);
            labels.insert(l::OS_LABEL.into(), os.into());
            if let Some(build) = it.labels.get(l::WINDOWS_BUILD_LABEL) {
                labels.insert(l::WINDOWS_BUILD_LABEL.into(), build.clone());
            }
            labels.insert(l::HOSTNAME_LABEL.into(), hostname.clone());
            let capacity_type = if i.spot {
                l::CAPACITY_TYPE_SPOT
            } else {
                l::CAPACITY_TYPE_ON_DEMAND
            };
            let record = BootRecord {
                provider_id: provider_id(&i.zone, &i.id),
                hostname,
                private_ip: i.private_ip.clone(),
                launched_at: i.launched_at,
                labels,
                taints,
                capacity: it.capacity.to_list(),
                allocatable: it.allocatable.to_list(),
                architecture: arch,
                image_id: i.image_id.clone(),
                instance_type: i.instance_type.clone(),
                zone: i.zone.clone(),
                capacity_type: capacity_type.into(),
                price: Some(self.cloud.price_of(&i.instance_type, &i.zone, i.spot))
                    .filter(|p| *p > 0.0),
                tags: i.tags.clone(),
            };
            self.booted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(i.id.clone(), record.clone());
            out.push(record);
        }
        Ok(out)
    }

    /// TerminateInstances for the instance id in `provider_id`; an id EC2 no longer knows is
    /// not an error.
    async fn terminate(&self, provider_id: &str) -> Result<(), String> {
        let Some(id) = instance_id(provider_id) else {
            return Err(format!("{provider_id:?} is not an AWS providerID"));
        };
        match self.cloud.ec2().terminate_instances(&[id.to_owned()]).await {
            Ok(()) => {}
            Err(e) if e.code == "InvalidInstanceID.NotFound" => {}
            Err(e) => return Err(e.to_string()),
        }
        self.booted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        Ok(())
    }
}
