//! Volume detachment between drain and instance termination (upstream
//! `node/termination/volumedetachment.go`): a drained node's instance is terminated only once its
//! VolumeAttachments are gone, so that volumes detach cleanly before the instance goes and can
//! attach to the pods' new nodes. Attachments of volumes still used by pods the drain leaves in
//! place (static pods, pods tolerating `karpenter.sh/disrupted:NoSchedule` such as most
//! DaemonSet pods, pods stuck terminating) never detach and are not waited for, nor are
//! attachments that name no PersistentVolume. The wait ends at the NodeClaim's termination time.
//! The executor is `controller::node::volume_detachment`.

use std::collections::BTreeSet;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::pod_view::PodView;
use k8s_openapi::api::storage::v1::VolumeAttachment;

use super::drain::is_drainable;

/// Where a drained node's volume detachment stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detachment {
    /// Nothing left to wait for: the instance may be terminated (`VolumesDetached=True`).
    Detached,
    /// These PersistentVolumes (sorted) are still attached to the node
    /// (`VolumesDetached=Unknown`, reason `AwaitingVolumeDetachment`).
    Awaiting(Vec<String>),
    /// The NodeClaim's termination time has passed: the instance is terminated without waiting
    /// (`VolumesDetached=False`, reason `TerminationGracePeriodElapsed`).
    GracePeriodElapsed,
}

/// Where the detachment of `node`'s volumes stands at `now`.
///
/// `attachments` may hold every VolumeAttachment of the cluster (those whose `spec.nodeName` is
/// not `node` are ignored); `pods` are the pods bound to the node; `claims` the cluster's
/// PersistentVolumeClaims (a non-drainable pod's claims name the volumes it keeps attached);
/// `termination_time` is the NodeClaim's `karpenter.sh/nodeclaim-termination-timestamp`.
pub fn detachment(
    node: &str,
    attachments: &[Arc<VolumeAttachment>],
    pods: &[Arc<PodView>],
    claims: &[Arc<PersistentVolumeClaim>],
    now: Timestamp,
    termination_time: Option<Timestamp>,
) -> Detachment {
    if termination_time.is_some_and(|t| now >= t) {
        return Detachment::GracePeriodElapsed;
    }
    let kept = volumes_of_undrained(pods, claims, now);
    let mut waiting: Vec<String> = attachments
        .iter()
        .filter(|a| a.spec.node_name == node)
        .filter_map(|a| a.spec.source.persistent_volume_name.clone())
        .filter(|pv| !kept.contains(pv))
        .collect();
    waiting.sort();
    waiting.dedup();
    if waiting.is_empty() {
        Detachment::Detached
    } else {
        Detachment::Awaiting(waiting)
    }
}

/// The PersistentVolumes used by the pods a drain leaves on the node: those bound to their
/// claims (persistent, or the claim Kubernetes creates for a generic ephemeral volume,
/// `<pod>-<volume>`).
fn volumes_of_undrained(
    pods: &[Arc<PodView>],
    claims: &[Arc<PersistentVolumeClaim>],
    now: Timestamp,
) -> BTreeSet<String> {
    let mut wanted: BTreeSet<(String, String)> = BTreeSet::new();
    for pod in pods.iter().filter(|p| !is_drainable(p, now)) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        for vol in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            if let Some(c) = &vol.persistent_volume_claim {
                wanted.insert((ns.clone(), c.claim_name.clone()));
            } else if vol.ephemeral.is_some() {
                wanted.insert((ns.clone(), format!("{name}-{}", vol.name)));
            }
        }
    }
    if wanted.is_empty() {
        return BTreeSet::new();
    }
    claims
        .iter()
        .filter(|c| {
            let key = (
                c.metadata.namespace.clone().unwrap_or_default(),
                c.metadata.name.clone().unwrap_or_default(),
            );
            wanted.contains(&key)
        })
        .filter_map(|c| c.spec.as_ref()?.volume_name.clone())
        .filter(|v| !v.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attachment(name: &str, node: &str, pv: Option<&str>) -> Arc<VolumeAttachment> {
        let source = match pv {
            Some(pv) => json!({"persistentVolumeName": pv}),
            None => {
                json!({"inlineVolumeSpec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-x"}}})
            }
        };
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
                "attacher": "ebs.csi.aws.com", "nodeName": node, "source": source}}))
            .expect("volume attachment"),
        )
    }

    fn claim(name: &str, pv: &str) -> Arc<PersistentVolumeClaim> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "db"},
                "spec": {"volumeName": pv}}))
            .expect("pvc"),
        )
    }

    /// A pod in `db` on `n1` mounting `claim`.
    fn pod_with(name: &str, claim: &str) -> testutil::PodBuilder {
        testutil::pod(name)
            .namespace("db")
            .on_node("n1")
            .phase("Running")
            .merge(json!({"spec": {"volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}))
    }

    fn now() -> Timestamp {
        "2026-01-01T00:10:00Z".parse().expect("timestamp")
    }

    #[test]
    fn a_drained_node_waits_for_its_own_attachments_only() {
        let attachments = vec![
            attachment("va-1", "n1", Some("pv-a")),
            attachment("va-2", "n2", Some("pv-b")),
            attachment("va-3", "n1", None),
        ];
        let claims = vec![claim("a", "pv-a")];
        assert_eq!(
            detachment("n1", &attachments, &[], &claims, now(), None),
            Detachment::Awaiting(vec!["pv-a".into()])
        );
        assert_eq!(
            detachment("n3", &attachments, &[], &claims, now(), None),
            Detachment::Detached
        );
    }

    #[test]
    fn volumes_of_pods_the_drain_leaves_do_not_block() {
        let attachments = vec![
            attachment("va-1", "n1", Some("pv-a")),
            attachment("va-2", "n1", Some("pv-b")),
        ];
        let claims = vec![claim("a", "pv-a"), claim("b", "pv-b")];
        // (pod on the node using claim `a`, still blocking)
        let table: Vec<(testutil::PodBuilder, Vec<String>)> = vec![
            (
                pod_with("agent", "a").merge(json!({"spec": {"tolerations": [
                    {"key": "karpenter.sh/disrupted", "operator": "Exists"}]}})),
                vec!["pv-b".into()],
            ),
            (
                pod_with("static", "a").owner("v1", "Node", "n1", "node-uid"),
                vec!["pv-b".into()],
            ),
            // A drainable pod (e.g. evicted but not yet gone) keeps both blocking.
            (pod_with("web", "a"), vec!["pv-a".into(), "pv-b".into()]),
        ];
        for (pod, expected) in table {
            let pod = pod.arc();
            assert_eq!(
                detachment(
                    "n1",
                    &attachments,
                    &[Arc::clone(&pod)],
                    &claims,
                    now(),
                    None
                ),
                Detachment::Awaiting(expected),
                "{:?}",
                pod.metadata.name
            );
        }
    }

    #[test]
    fn the_termination_time_ends_the_wait() {
        let attachments = vec![attachment("va-1", "n1", Some("pv-a"))];
        let before: Timestamp = "2026-01-01T00:10:01Z".parse().expect("timestamp");
        let at: Timestamp = "2026-01-01T00:10:00Z".parse().expect("timestamp");
        assert!(matches!(
            detachment("n1", &attachments, &[], &[], now(), Some(before)),
            Detachment::Awaiting(_)
        ));
        assert_eq!(
            detachment("n1", &attachments, &[], &[], now(), Some(at)),
            Detachment::GracePeriodElapsed
        );
    }
}
