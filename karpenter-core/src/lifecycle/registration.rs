//! Registration as data (upstream `lifecycle/registration.go`): the patch that makes the Node a
//! kubelet registered for a NodeClaim Karpenter's: the NodeClaim's labels, annotations and
//! taints synced onto it, the termination finalizer, an owner reference, and the
//! `karpenter.sh/unregistered` taint removed. The controller sends it
//! (`controller::nodeclaim::registration`).

use std::collections::BTreeMap;

use crds::NodeClaim;
use crds::labels::{
    NODE_DO_NOT_SYNC_TAINTS_LABEL, NODE_REGISTERED_LABEL, TERMINATION_FINALIZER,
    UNREGISTERED_TAINT_KEY,
};
use k8s_openapi::api::core::v1::{Node, Taint};
use serde_json::{Value, json};

/// The patch that makes a registered node Karpenter's: a JSON merge patch carrying the node's
/// resourceVersion, so a concurrent change conflicts instead of being overwritten. `None` when
/// the node is already in sync.
pub fn registration_patch(claim: &NodeClaim, node: &Node) -> Option<Value> {
    let claim_name = claim.metadata.name.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
    labels.extend(claim.metadata.labels.clone().unwrap_or_default());
    labels.insert(NODE_REGISTERED_LABEL.into(), "true".into());
    let mut annotations: BTreeMap<String, String> =
        node.metadata.annotations.clone().unwrap_or_default();
    annotations.extend(claim.metadata.annotations.clone().unwrap_or_default());
    let mut finalizers = node.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        finalizers.push(TERMINATION_FINALIZER.into());
    }
    let mut owners = node.metadata.owner_references.clone().unwrap_or_default();
    let claim_uid = claim.metadata.uid.clone().unwrap_or_default();
    if !owners.iter().any(|o| o.uid == claim_uid) {
        owners.push(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "karpenter.sh/v1".into(),
                kind: "NodeClaim".into(),
                name: claim_name,
                uid: claim_uid,
                block_owner_deletion: Some(true),
                controller: None,
            },
        );
    }
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let sync_taints = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(NODE_DO_NOT_SYNC_TAINTS_LABEL))
        .map(String::as_str)
        != Some("true");
    if sync_taints {
        for t in claim
            .spec
            .taints
            .iter()
            .chain(claim.spec.startup_taints.iter())
        {
            if !taints
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect)
            {
                taints.push(t.clone());
            }
        }
    }
    taints.retain(|t| t.key != UNREGISTERED_TAINT_KEY);
    let unchanged = Some(&labels) == node.metadata.labels.as_ref()
        && (annotations.is_empty() || Some(&annotations) == node.metadata.annotations.as_ref())
        && Some(&finalizers) == node.metadata.finalizers.as_ref()
        && Some(&owners) == node.metadata.owner_references.as_ref()
        && Some(&taints) == node.spec.as_ref().and_then(|s| s.taints.as_ref());
    if unchanged {
        return None;
    }
    Some(json!({
        "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "labels": labels, "annotations": annotations,
            "finalizers": finalizers, "ownerReferences": owners,
        },
        "spec": {"taints": taints},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use testutil::{node, nodeclaim};

    #[test]
    fn registration_syncs_labels_taints_finalizer_and_owner() {
        let claim = nodeclaim("default-x")
            .uid("u1")
            .nodepool("default")
            .label("team", "a")
            .taint("dedicated=gpu:NoSchedule")
            .build();
        let node = node("ip-10-0-0-1.ec2.internal")
            .resource_version("7")
            .label("kubernetes.io/hostname", "ip")
            .provider_id("aws:///us-east-1a/i-1")
            .taint("karpenter.sh/unregistered:NoExecute")
            .build();
        let patch = registration_patch(&claim, &node).expect("needs sync");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(patch["metadata"]["labels"]["team"], "a");
        assert_eq!(
            patch["metadata"]["labels"]["karpenter.sh/registered"],
            "true"
        );
        assert_eq!(
            patch["metadata"]["finalizers"],
            json!(["karpenter.sh/termination"])
        );
        assert_eq!(patch["metadata"]["ownerReferences"][0]["kind"], "NodeClaim");
        assert_eq!(
            patch["spec"]["taints"],
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        );
    }
}
