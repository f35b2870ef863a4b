//! `--generate diverse:N`: the pod mix of upstream's scheduling benchmark
//! (`provisioning/scheduling/scheduling_benchmark_test.go`, `makeDiversePods`): N/5 each of
//! generic pods, zonal topology spread, hostname topology spread, zonal self-affinity and
//! hostname self-anti-affinity, the remainder generic. CPU is drawn uniformly from
//! {100, 250, 500, 1000, 1500}m, memory from {100, 256, 512, 1024, 2048, 4096}Mi, label values
//! from a–g, in upstream's draw order per pod (labels, selector labels, cpu, memory).
//!
//! Upstream draws with Go's `math/rand` seeded 42; we draw with ChaCha8 seeded 42, so the mix and
//! its distributions match but individual draws differ.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

const CPU_MILLI: [i64; 5] = [100, 250, 500, 1000, 1500];
const MEMORY_MIB: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];
const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];
/// The seed upstream's benchmark gives Go's `math/rand`; here it seeds ChaCha8, so the mix
/// matches but individual draws differ.
pub const SEED: u64 = 42;

struct Draw(ChaCha8Rng);

impl Draw {
    fn label(&mut self) -> &'static str {
        LABEL_VALUES[self.0.random_range(0..LABEL_VALUES.len())]
    }

    fn resources(&mut self) -> Value {
        let cpu = CPU_MILLI[self.0.random_range(0..CPU_MILLI.len())];
        let mem = MEMORY_MIB[self.0.random_range(0..MEMORY_MIB.len())];
        json!({"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem}Mi")}})
    }
}

fn pod(index: usize, labels: Value, resources: Value, extra: Value) -> Pod {
    let mut spec =
        json!({"containers": [{"name": "app", "image": "pause", "resources": resources}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("diverse-{index}"), "namespace": "default", "uid": format!("diverse-uid-{index}"), "labels": labels},
        "spec": spec,
    }))
    .unwrap_or_default()
}

/// The N pods of the diverse mix, deterministic for a given N.
pub fn diverse_pods(n: usize) -> Vec<Pod> {
    let mut d = Draw(ChaCha8Rng::seed_from_u64(SEED));
    let per = n / 5;
    let mut pods = Vec::with_capacity(n);
    let generic = |d: &mut Draw, pods: &mut Vec<Pod>, count: usize| {
        for _ in 0..count {
            let labels = json!({"my-label": d.label()});
            let res = d.resources();
            pods.push(pod(pods.len(), labels, res, json!({})));
        }
    };
    generic(&mut d, &mut pods, per);
    for key in ["topology.kubernetes.io/zone", "kubernetes.io/hostname"] {
        for _ in 0..per {
            let labels = json!({"my-label": d.label()});
            let selector = json!({"my-label": d.label()});
            let res = d.resources();
            let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": selector}}]});
            pods.push(pod(pods.len(), labels, res, spread));
        }
    }
    for _ in 0..per {
        let labels = json!({"my-affininity": d.label()});
        let res = d.resources();
        let affinity = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels.clone()}, "topologyKey": "topology.kubernetes.io/zone"}]}}});
        pods.push(pod(pods.len(), labels, res, affinity));
    }
    for _ in 0..per {
        let labels = json!({"app": "nginx"});
        let res = d.resources();
        let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "nginx"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
        pods.push(pod(pods.len(), labels, res, anti));
    }
    let rest = n - pods.len();
    generic(&mut d, &mut pods, rest);
    pods
}

/// Count pods per kind, for reports: `generic`, `zonal-spread`, `hostname-spread`,
/// `zonal-affinity`, `hostname-anti-affinity`.
pub fn kinds(pods: &[Pod]) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for p in pods {
        let spec = p.spec.as_ref();
        let kind = match (
            spec.and_then(|s| s.topology_spread_constraints.as_ref())
                .and_then(|c| c.first())
                .map(|c| c.topology_key.as_str()),
            spec.and_then(|s| s.affinity.as_ref()),
        ) {
            (Some("topology.kubernetes.io/zone"), _) => "zonal-spread",
            (Some(_), _) => "hostname-spread",
            (None, Some(a)) if a.pod_affinity.is_some() => "zonal-affinity",
            (None, Some(_)) => "hostname-anti-affinity",
            (None, None) => "generic",
        };
        *out.entry(kind).or_default() += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_one_fifth_each_and_deterministic() {
        let pods = diverse_pods(1003);
        let k = kinds(&pods);
        assert_eq!(k["zonal-spread"], 200);
        assert_eq!(k["hostname-spread"], 200);
        assert_eq!(k["zonal-affinity"], 200);
        assert_eq!(k["hostname-anti-affinity"], 200);
        assert_eq!(k["generic"], 203);
        let again = diverse_pods(1003);
        assert_eq!(
            serde_json::to_value(&pods).ok(),
            serde_json::to_value(&again).ok()
        );
        let cpus: std::collections::BTreeSet<String> = pods
            .iter()
            .filter_map(|p| {
                p.spec.as_ref()?.containers[0]
                    .resources
                    .as_ref()?
                    .requests
                    .as_ref()?
                    .get("cpu")
                    .map(|q| q.0.clone())
            })
            .collect();
        assert_eq!(cpus.len(), 5, "every CPU size appears: {cpus:?}");
    }
}
