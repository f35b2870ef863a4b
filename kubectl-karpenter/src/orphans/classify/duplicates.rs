//! NodeClaims that claim a providerID another NodeClaim claims too ([`Kind::DuplicateProviderID`]):
//! two records for one instance and one Node, e.g. a hand-made NodeClaim that copied a
//! launched one's `status.providerID`. Upstream Karpenter maps a Node to its NodeClaim by
//! providerID and refuses to pick when more than one matches (`DuplicateNodeClaimError` in
//! `pkg/utils/nodeclaim`), and deleting either record makes the controller drain the Node and
//! terminate the instance both name.
//!
//! The NodeClaim the instance is tagged for (`karpenter.sh/nodeclaim`) is the owner and is not
//! reported; the others are. When the owner cannot be told (the cloud was not checked, or the
//! instance is not tagged for any of them), every NodeClaim of the group is reported.

use std::collections::{BTreeMap, HashMap};

use crds::NodeClaim;
use crds::labels::NODEPOOL_LABEL;

use super::{Index, Inputs, label, non_empty, object_ref};
use crate::orphans::{InstanceState, Kind, Orphan};

/// The duplicate orphans, by NodeClaim name.
pub(super) fn duplicates(input: &Inputs, index: &Index) -> HashMap<String, Orphan> {
    let mut groups: BTreeMap<&str, Vec<&NodeClaim>> = BTreeMap::new();
    for claim in input.claims {
        if let Some(pid) = claim
            .status
            .as_ref()
            .and_then(|s| non_empty(s.provider_id.as_ref()))
        {
            groups.entry(pid).or_default().push(claim);
        }
    }
    let mut out = HashMap::new();
    for (pid, claims) in groups.into_iter().filter(|(_, c)| c.len() > 1) {
        let names: Vec<&str> = claims
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        let instance = index.instance(Some(pid), None);
        let tagged = instance
            .running()
            .and_then(|i| non_empty(i.nodeclaim.as_ref()));
        let owner = tagged.filter(|t| names.contains(t));
        for claim in &claims {
            let Some(name) = claim.metadata.name.as_deref() else {
                continue;
            };
            if owner == Some(name) {
                continue;
            }
            let others: Vec<&str> = names.iter().copied().filter(|n| *n != name).collect();
            let mut detail = vec![format!(
                "providerID {pid} is also claimed by nodeclaim {}",
                others.join(", ")
            )];
            detail.push(match (&instance, owner, tagged) {
                (_, Some(owner), _) => format!(
                    "instance {} was launched for nodeclaim {owner} (its karpenter.sh/nodeclaim tag)",
                    instance.id().unwrap_or_default()
                ),
                (InstanceState::Running(i), None, Some(t)) => {
                    format!("instance {} is tagged for nodeclaim {t}, none of these", i.id)
                }
                (InstanceState::Running(i), None, None) => format!(
                    "instance {} has no karpenter.sh/nodeclaim tag: which NodeClaim owns it is unknown",
                    i.id
                ),
                (InstanceState::Gone { .. }, ..) => "instance gone".to_owned(),
                _ => "instance not checked: which NodeClaim owns it is unknown".to_owned(),
            });
            let node = index
                .nodes_by_provider
                .get(pid)
                .map(|n| object_ref(&n.metadata));
            let pods = node
                .as_ref()
                .and_then(|n| input.pods_by_node.get(&n.name).copied());
            out.insert(
                name.to_owned(),
                Orphan {
                    kind: Kind::DuplicateProviderID,
                    name: name.to_owned(),
                    nodepool: label(&claim.metadata, NODEPOOL_LABEL),
                    nodeclaim: Some(object_ref(&claim.metadata)),
                    node,
                    pods,
                    instance: instance.clone(),
                    since: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    detail,
                },
            );
        }
    }
    out
}
