//! Fault injection at the [`Ec2`] seam, for tests and demos against an EC2 emulator that never
//! runs out of capacity: chosen offerings fail in CreateFleet as EC2 reports it (a per-override
//! `InsufficientInstanceCapacity` error while the fleet goes on with the other overrides), and
//! every call is counted so tests can assert what was (not) attempted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::{
    CapacityReservationInfo, CapacityReservationQuery, Ec2, Ec2Error, Filter, FleetError,
    FleetRequest, FleetResult, ImageInfo, ImageQuery, InstanceInfo, InstanceTypeInfo,
    LaunchTemplateData, LaunchTemplateInfo, SecurityGroupInfo, SubnetInfo,
};

/// An [`Ec2`] that forwards to another and injects capacity errors.
pub struct FaultyEc2 {
    inner: Arc<dyn Ec2>,
    /// `(instance type, zone)` pairs that have no capacity.
    shortages: Mutex<BTreeSet<(String, String)>>,
    calls: Mutex<BTreeMap<&'static str, usize>>,
    /// Per operation: calls in flight now, and the most ever in flight at once.
    in_flight: Mutex<BTreeMap<&'static str, (usize, usize)>>,
}

impl FaultyEc2 {
    /// Wrap `inner` with no faults.
    pub fn new(inner: Arc<dyn Ec2>) -> FaultyEc2 {
        FaultyEc2 {
            inner,
            shortages: Mutex::new(BTreeSet::new()),
            calls: Mutex::new(BTreeMap::new()),
            in_flight: Mutex::new(BTreeMap::new()),
        }
    }

    /// From now on, CreateFleet overrides for this type in this zone fail with
    /// `InsufficientInstanceCapacity`.
    pub fn add_capacity_shortage(&self, instance_type: &str, zone: &str) {
        self.shortages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((instance_type.to_string(), zone.to_string()));
    }

    /// How many times an operation (e.g. `CreateFleet`) was called.
    pub fn calls(&self, operation: &str) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// The most calls of an operation (e.g. `DescribeInstanceTypes`) ever in flight at once.
    pub fn max_concurrent(&self, operation: &str) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(operation)
            .map_or(0, |(_, most)| *most)
    }

    /// Count a call of `operation` as in flight until the returned guard drops.
    fn enter(&self, operation: &'static str) -> InFlight<'_> {
        self.count(operation);
        let mut flights = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let (now, most) = flights.entry(operation).or_default();
        *now += 1;
        *most = (*most).max(*now);
        InFlight {
            ec2: self,
            operation,
        }
    }

    fn count(&self, operation: &'static str) {
        *self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(operation)
            .or_default() += 1;
    }
}

/// A call in flight ([`FaultyEc2::enter`]): leaves the count when dropped.
struct InFlight<'a> {
    ec2: &'a FaultyEc2,
    operation: &'static str,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut flights = self.ec2.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((now, _)) = flights.get_mut(self.operation) {
            *now = now.saturating_sub(1);
        }
    }
}

#[async_trait]
impl Ec2 for FaultyEc2 {
    async fn describe_subnets(&self, filters: Vec<Filter>) -> Result<Vec<SubnetInfo>, Ec2Error> {
        self.count("DescribeSubnets");
        self.inner.describe_subnets(filters).await
    }

    async fn describe_security_groups(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<SecurityGroupInfo>, Ec2Error> {
        self.count("DescribeSecurityGroups");
        self.inner.describe_security_groups(filters).await
    }

    async fn describe_images(&self, query: ImageQuery) -> Result<Vec<ImageInfo>, Ec2Error> {
        self.count("DescribeImages");
        self.inner.describe_images(query).await
    }

    async fn ssm_parameter(&self, name: &str) -> Result<Option<String>, Ec2Error> {
        self.count("GetParameter");
        self.inner.ssm_parameter(name).await
    }

    async fn describe_cluster(&self, name: &str) -> Result<crate::ClusterNetwork, Ec2Error> {
        self.count("DescribeCluster");
        self.inner.describe_cluster(name).await
    }

    async fn describe_instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Ec2Error> {
        let _flight = self.enter("DescribeInstanceTypes");
        self.inner.describe_instance_types().await
    }

    async fn describe_instance_type_offerings(&self) -> Result<Vec<(String, String)>, Ec2Error> {
        self.count("DescribeInstanceTypeOfferings");
        self.inner.describe_instance_type_offerings().await
    }

    async fn spot_prices(&self) -> Result<Vec<(String, String, f64)>, Ec2Error> {
        self.count("DescribeSpotPriceHistory");
        self.inner.spot_prices().await
    }

    async fn describe_launch_templates(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<LaunchTemplateInfo>, Ec2Error> {
        self.count("DescribeLaunchTemplates");
        self.inner.describe_launch_templates(filters).await
    }

    async fn create_launch_template(
        &self,
        name: &str,
        data: &LaunchTemplateData,
        tags: &BTreeMap<String, String>,
    ) -> Result<String, Ec2Error> {
        self.count("CreateLaunchTemplate");
        self.inner.create_launch_template(name, data, tags).await
    }

    async fn delete_launch_template(&self, id: &str) -> Result<(), Ec2Error> {
        self.count("DeleteLaunchTemplate");
        self.inner.delete_launch_template(id).await
    }

    async fn create_fleet(&self, request: &FleetRequest) -> Result<FleetResult, Ec2Error> {
        self.count("CreateFleet");
        let shortages = self
            .shortages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut errors = Vec::new();
        let mut forwarded = request.clone();
        for config in &mut forwarded.configs {
            config.overrides.retain(|o| {
                let short = shortages.contains(&(o.instance_type.clone(), o.zone.clone()));
                if short {
                    errors.push(FleetError {
                        code: "InsufficientInstanceCapacity".into(),
                        message: format!(
                            "We currently do not have sufficient {} capacity in the \
                             Availability Zone you requested ({}).",
                            o.instance_type, o.zone
                        ),
                        instance_type: Some(o.instance_type.clone()),
                        zone: Some(o.zone.clone()),
                        subnet_id: Some(o.subnet_id.clone()),
                    });
                }
                !short
            });
        }
        forwarded.configs.retain(|c| !c.overrides.is_empty());
        if forwarded.configs.is_empty() {
            return Ok(FleetResult {
                instance_ids: vec![],
                errors,
            });
        }
        let mut result = self.inner.create_fleet(&forwarded).await?;
        errors.append(&mut result.errors);
        result.errors = errors;
        Ok(result)
    }

    async fn describe_instances(
        &self,
        ids: &[String],
        filters: Vec<Filter>,
    ) -> Result<Vec<InstanceInfo>, Ec2Error> {
        self.count("DescribeInstances");
        self.inner.describe_instances(ids, filters).await
    }

    async fn terminate_instances(&self, ids: &[String]) -> Result<(), Ec2Error> {
        self.count("TerminateInstances");
        self.inner.terminate_instances(ids).await
    }

    async fn describe_capacity_reservations(
        &self,
        query: CapacityReservationQuery,
    ) -> Result<Vec<CapacityReservationInfo>, Ec2Error> {
        self.count("DescribeCapacityReservations");
        self.inner.describe_capacity_reservations(query).await
    }

    async fn describe_placement_groups(
        &self,
        query: crate::PlacementGroupQuery,
    ) -> Result<Vec<crate::PlacementGroupInfo>, Ec2Error> {
        self.count("DescribePlacementGroups");
        self.inner.describe_placement_groups(query).await
    }

    async fn user_data(&self, instance_id: &str) -> Result<Option<String>, Ec2Error> {
        self.count("DescribeInstanceAttribute");
        self.inner.user_data(instance_id).await
    }

    async fn instance_profile_roles(&self, name: &str) -> Result<Option<Vec<String>>, Ec2Error> {
        self.count("GetInstanceProfile");
        self.inner.instance_profile_roles(name).await
    }

    async fn create_instance_profile(
        &self,
        name: &str,
        role: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), Ec2Error> {
        self.count("CreateInstanceProfile");
        self.inner.create_instance_profile(name, role, tags).await
    }

    async fn delete_instance_profile(&self, name: &str, roles: &[String]) -> Result<(), Ec2Error> {
        self.count("DeleteInstanceProfile");
        self.inner.delete_instance_profile(name, roles).await
    }
}
