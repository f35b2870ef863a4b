//! What the sandbox's simulated kubelets boot from: the instances the cloud provider runs. On
//! the simulated cloud that is its instance list ([`SimInstances`]); on the AWS provider, EC2's
//! (`ec2_kubelets`). Each running instance becomes a Node the way a kubelet registers one.

use std::sync::Arc;

use async_trait::async_trait;
use controller::cloudprovider::build::Cloud;
use controller::cloudprovider::sim::SimCloud;
use sandbox::actors::{BootRecord, InstanceSource};

/// The instance list the sandbox's kubelets boot from, for the cloud that was built.
///
/// Errors: a cloud that has none (never: `build` makes only `sim` and `aws`).
pub fn for_cloud(cloud: &Cloud) -> Result<Arc<dyn InstanceSource>, String> {
    if let Some(sim) = &cloud.sim {
        return Ok(Arc::new(SimInstances(Arc::clone(sim))));
    }
    #[cfg(feature = "aws")]
    if let Some(aws) = &cloud.aws {
        return Ok(Arc::new(super::ec2_kubelets::Ec2Kubelets::new(Arc::clone(
            aws,
        ))));
    }
    Err(format!(
        "the {} cloud provider has no instance list for simulated kubelets",
        cloud.provider.name()
    ))
}

/// The sandbox kubelets learn about instances from the simulated cloud's instance list.
pub struct SimInstances(pub Arc<SimCloud>);

#[async_trait]
impl InstanceSource for SimInstances {
    /// The running instances whose kubelet comes up. Instances booted from an image published
    /// broken ([`SimCloud::broken_images`]) are left out: their simulated kubelet never starts,
    /// so no Node registers for them and their NodeClaims stay Launched but never Registered.
    /// The cloud still lists them ([`SimCloud::instances`],
    /// [`CloudProvider::list`](controller::cloudprovider::CloudProvider::list)), so the
    /// controller and garbage collection see and terminate them as usual; the `Instance` mirror
    /// reads this list too, so `kubectl get instances` does not show them.
    async fn running(&self) -> Result<Vec<BootRecord>, String> {
        let broken = self.0.broken_images();
        Ok(self
            .0
            .instances()
            .into_iter()
            .filter(|i| !broken.contains(&i.image_id))
            .map(|i| BootRecord {
                architecture: i
                    .labels
                    .get(crds::labels::ARCH_LABEL)
                    .cloned()
                    .unwrap_or_default(),
                provider_id: i.provider_id,
                hostname: i.hostname,
                private_ip: i.private_ip,
                launched_at: i.launched_at,
                labels: i.node_labels,
                taints: i.node_taints,
                capacity: i.capacity.to_list(),
                allocatable: i.allocatable.to_list(),
                image_id: i.image_id,
                instance_type: i.instance_type,
                zone: i.zone,
                capacity_type: i.capacity_type,
                price: Some(i.price),
                tags: i.tags,
            })
            .collect())
    }

    async fn terminate(&self, provider_id: &str) -> Result<(), String> {
        if self.0.terminate(provider_id) {
            tracing::info!(provider_id = %provider_id, "simulated instance terminated");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use controller::cloudprovider::CloudProvider;
    use controller::cloudprovider::sim::release::ImageHealth;
    use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL};
    use crds::{EC2NodeClass, NodeClaim, Operator};
    use karpenter_core::clock::SystemClock;
    use testutil::{ec2nodeclass, nodeclaim};

    fn cloud() -> SimCloud {
        SimCloud::new("demo", Arc::new(SystemClock)).expect("catalog")
    }

    /// The EC2NodeClass `default` as `cloud` resolves it.
    fn node_class(cloud: &SimCloud) -> EC2NodeClass {
        let mut nc = ec2nodeclass("default").build();
        let r = cloud.with_network(|n| n.resolve("demo", &nc, jiff::Timestamp::now()));
        nc.status = Some(r.status);
        nc
    }

    /// The NodeClaim `default-abcde` of `default` for one of `types` and `capacity_types`.
    fn claim(types: &[&str], capacity_types: &[&str]) -> NodeClaim {
        nodeclaim("default-abcde")
            .nodepool("default")
            .requirement(INSTANCE_TYPE_LABEL, Operator::In, types)
            .requirement(CAPACITY_TYPE_LABEL, Operator::In, capacity_types)
            .build()
    }

    #[tokio::test]
    async fn instances_of_a_broken_release_run_but_their_kubelet_never_starts() {
        let c = Arc::new(cloud());
        let kubelets = SimInstances(Arc::clone(&c));
        let mut nc = node_class(&c);
        let good = c
            .create(&claim(&["m5.large"], &["on-demand"]), &nc)
            .await
            .expect("launch");
        let broken = c
            .publish_release("al2023", None, &[], ImageHealth::Broken)
            .expect("published");
        assert_eq!(
            c.broken_images(),
            broken.iter().map(|a| a.id.clone()).collect()
        );
        nc.status = Some(c.resolve_node_class(&nc).await.status);
        let mut second = claim(&["m5.large"], &["on-demand"]);
        second.metadata.name = Some("default-fghij".into());
        let bad = c.create(&second, &nc).await.expect("launch");
        assert!(
            broken.iter().any(|a| a.id == bad.image_id),
            "launched from the broken release: {}",
            bad.image_id
        );
        assert!(!c.broken_images().contains(&good.image_id));

        // EC2 lists both; the kubelets see only the healthy one.
        let listed: Vec<String> = c
            .list()
            .await
            .expect("list")
            .into_iter()
            .map(|i| i.provider_id)
            .collect();
        assert_eq!(listed.len(), 2);
        assert!(listed.contains(&bad.provider_id) && listed.contains(&good.provider_id));
        assert_eq!(c.instances().len(), 2);
        let booted: Vec<String> = kubelets
            .running()
            .await
            .expect("running")
            .into_iter()
            .map(|r| r.provider_id)
            .collect();
        assert_eq!(booted, std::slice::from_ref(&good.provider_id));

        // Termination works as for any instance.
        c.delete(&second).await.expect("terminating");
        assert!(
            c.list()
                .await
                .expect("list")
                .iter()
                .all(|i| i.provider_id != bad.provider_id)
        );
        kubelets
            .terminate(&good.provider_id)
            .await
            .expect("terminated");
        assert!(c.instances().is_empty());
        assert!(kubelets.running().await.expect("running").is_empty());
    }
}
