//! Builders for scheduling tests: pods, instance types and NodePool templates with readable
//! defaults.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::pod_view::PodView;
use serde_json::json;

use super::pod::PodInfo;
use super::requirements::{Requirement, Requirements};
use super::resources::Resources;
use super::solver::NodePoolTemplate;
use crate::capacity::InstanceType;
use crate::capacity::Offering;
use crds::labels::{ARCH_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, OS_LABEL};

/// Resources from (cpu millicores, memory MiB).
pub fn res(cpu_milli: i64, memory_mib: i64) -> Resources {
    Resources {
        cpu: cpu_milli,
        memory: memory_mib << 20,
        ..Resources::default()
    }
}

/// A pod requesting cpu (millicores) and memory (MiB), with optional extra spec fields.
pub fn pod(name: &str, cpu_milli: i64, memory_mib: i64, extra: serde_json::Value) -> PodInfo {
    let mut spec = json!({"containers": [{"name": "c", "resources": {"requests": {
        "cpu": format!("{cpu_milli}m"), "memory": format!("{memory_mib}Mi")}}}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    let p: PodView = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": spec,
    }))
    .expect("test pod is valid");
    PodInfo::from_pod(&p).expect("test pod compiles")
}

/// An amd64 instance type with `vcpus` cores and `memory_gib`, 110 pods, zero overhead, offered
/// on-demand in zones a and b at `price` and as spot at 60% of it.
pub fn instance_type(name: &str, vcpus: i64, memory_gib: i64, price: f64) -> Arc<InstanceType> {
    instance_type_in(
        name,
        vcpus,
        memory_gib,
        price,
        &["test-zone-a", "test-zone-b"],
        &[],
    )
}

/// Like [`instance_type`], offered in `zones` instead, with extra labels (e.g.
/// `karpenter.k8s.aws/instance-family`) that also become requirements.
pub fn instance_type_in(
    name: &str,
    vcpus: i64,
    memory_gib: i64,
    price: f64,
    zones: &[&str],
    extra_labels: &[(&str, &str)],
) -> Arc<InstanceType> {
    let labels: BTreeMap<String, String> = [
        (INSTANCE_TYPE_LABEL, name),
        (ARCH_LABEL, "amd64"),
        (OS_LABEL, "linux"),
    ]
    .iter()
    .chain(extra_labels)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut capacity = res(vcpus * 1000, memory_gib * 1024);
    capacity.pods = 110;
    let offerings = zones
        .iter()
        .flat_map(|z| {
            [
                Offering {
                    zone: z.to_string(),
                    capacity_type: "on-demand".into(),
                    price,
                    available: true,
                    reservation_id: None,
                    reservation_capacity: 0,
                },
                Offering {
                    zone: z.to_string(),
                    capacity_type: "spot".into(),
                    price: price * 0.6,
                    available: true,
                    reservation_id: None,
                    reservation_capacity: 0,
                },
            ]
        })
        .collect();
    Arc::new(InstanceType::new(
        name.into(),
        labels,
        &[],
        capacity,
        Resources::default(),
        offerings,
    ))
}

/// Three sizes of a general-purpose family: 2/8, 4/16, 16/64 (vCPU/GiB).
pub fn small_medium_large() -> Vec<Arc<InstanceType>> {
    vec![
        instance_type("gp.large", 2, 8, 0.10),
        instance_type("gp.xlarge", 4, 16, 0.20),
        instance_type("gp.4xlarge", 16, 64, 0.80),
    ]
}

/// A ready NodePool template over `types`, no limits, no taints.
pub fn pool(name: &str, types: Vec<Arc<InstanceType>>) -> NodePoolTemplate {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::is_in(NODEPOOL_LABEL, [name]));
    NodePoolTemplate {
        name: name.into(),
        weight: 0,
        requirements,
        taints: vec![],
        instance_types: types,
        daemon_overhead: Resources::default(),
        remaining: BTreeMap::new(),
    }
}

/// The well-known label keys scheduling tests allow undefined.
pub fn well_known() -> Vec<String> {
    crds::labels::WELL_KNOWN_LABELS
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// A GPU instance type: like [`instance_type`], with `gpus` NVIDIA GPUs as capacity and the
/// catalog's GPU labels (`karpenter.k8s.aws/instance-gpu-count`, `-manufacturer`).
pub fn gpu_instance_type(
    name: &str,
    vcpus: i64,
    memory_gib: i64,
    gpus: i64,
    price: f64,
) -> Arc<InstanceType> {
    let base = instance_type_in(
        name,
        vcpus,
        memory_gib,
        price,
        &["test-zone-a", "test-zone-b"],
        &[
            (crds::labels::INSTANCE_GPU_COUNT_LABEL, &gpus.to_string()),
            (crds::labels::INSTANCE_GPU_MANUFACTURER_LABEL, "nvidia"),
        ],
    );
    let mut capacity = base.capacity.clone();
    capacity.set(super::resources::NVIDIA_GPU, gpus);
    Arc::new(InstanceType::new(
        base.name.clone(),
        base.labels.clone(),
        &[],
        capacity,
        Resources::default(),
        base.offerings.clone(),
    ))
}
