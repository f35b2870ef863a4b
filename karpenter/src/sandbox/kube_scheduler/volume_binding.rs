//! kube-scheduler's VolumeBinding PreFilter, for the sandbox's simulated scheduler: a pod waits,
//! on no node at all, while one of its claims does not exist, is being deleted, or is unbound in
//! an `Immediate` class (the provisioner binds those without the scheduler; binding the pod
//! first would let its volume land in another zone). Unbound claims of a `WaitForFirstConsumer`
//! class pass: the scheduler picks the node and the volume follows it. A claim without a class
//! counts as the default class's, as the DefaultStorageClass admission plugin would have set it.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;

/// The annotation marking the default StorageClass.
const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// Claims and classes indexed for the PreFilter.
pub struct VolumeBinding<'a> {
    claims: HashMap<(&'a str, &'a str), &'a PersistentVolumeClaim>,
    classes: HashMap<&'a str, &'a StorageClass>,
    default_class: Option<&'a str>,
}

impl<'a> VolumeBinding<'a> {
    /// Index the view's claims and classes.
    pub fn new(
        claims: &'a [Arc<PersistentVolumeClaim>],
        classes: &'a [Arc<StorageClass>],
    ) -> VolumeBinding<'a> {
        let default_class = classes
            .iter()
            .filter(|c| {
                c.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(DEFAULT_CLASS))
                    .is_some_and(|v| v == "true")
            })
            .max_by_key(|c| c.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .and_then(|c| c.metadata.name.as_deref());
        VolumeBinding {
            claims: claims
                .iter()
                .filter_map(|c| {
                    Some((
                        (
                            c.metadata.namespace.as_deref()?,
                            c.metadata.name.as_deref()?,
                        ),
                        c.as_ref(),
                    ))
                })
                .collect(),
            classes: classes
                .iter()
                .filter_map(|c| Some((c.metadata.name.as_deref()?, c.as_ref())))
                .collect(),
            default_class,
        }
    }

    /// Why the pod cannot be scheduled anywhere yet, in kube-scheduler's words; `None` when its
    /// claims allow scheduling.
    pub fn blocker(&self, pod: &Pod) -> Option<String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut immediate_unbound = false;
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some(source) = v.persistent_volume_claim.as_ref() else {
                continue;
            };
            let name = source.claim_name.as_str();
            let Some(claim) = self.claims.get(&(ns, name)) else {
                return Some(format!("persistentvolumeclaim \"{name}\" not found"));
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return Some(format!("persistentvolumeclaim \"{name}\" is being deleted"));
            }
            let spec = claim.spec.as_ref();
            if spec
                .and_then(|s| s.volume_name.as_deref())
                .is_some_and(|v| !v.is_empty())
            {
                continue;
            }
            let class = match spec.and_then(|s| s.storage_class_name.as_deref()) {
                Some(c) => Some(c),
                None => self.default_class,
            };
            match class.filter(|c| !c.is_empty()) {
                None => immediate_unbound = true,
                Some(c) => match self.classes.get(c) {
                    None => {
                        return Some(format!("storageclass.storage.k8s.io \"{c}\" not found"));
                    }
                    Some(sc) => {
                        immediate_unbound |=
                            sc.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer");
                    }
                },
            }
        }
        immediate_unbound.then(|| "pod has unbound immediate PersistentVolumeClaims".to_string())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).expect("valid object"))
    }

    fn pod(claims: &[&str]) -> Pod {
        let volumes: Vec<_> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        testutil::pod("p")
            .merge(json!({"spec": {"volumes": volumes}}))
            .build()
    }

    /// The PreFilter outcomes of kube-scheduler's VolumeBinding plugin (`volume_binding.go`):
    /// bound and WaitForFirstConsumer claims pass; missing, deleting and unbound Immediate
    /// claims, and claims of a missing class, block.
    #[test]
    fn claims_that_block_scheduling_anywhere() {
        let claim = |name: &str, spec: serde_json::Value| {
            typed::<PersistentVolumeClaim>(
                json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
            )
        };
        let claims = vec![
            claim(
                "bound",
                json!({"volumeName": "pv", "storageClassName": "now"}),
            ),
            claim("later", json!({"storageClassName": "wait"})),
            claim("now", json!({"storageClassName": "now"})),
            claim("classless", json!({})),
            claim("ghost-class", json!({"storageClassName": "ghost"})),
            typed(json!({"metadata": {"name": "going", "namespace": "default",
                "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["kubernetes.io/pvc-protection"]},
                "spec": {"volumeName": "pv"}})),
        ];
        let classes: Vec<Arc<StorageClass>> = vec![
            typed(
                json!({"metadata": {"name": "wait"}, "provisioner": "ebs.csi.aws.com",
                "volumeBindingMode": "WaitForFirstConsumer"}),
            ),
            typed(json!({"metadata": {"name": "now"}, "provisioner": "ebs.csi.aws.com"})),
        ];
        let vb = VolumeBinding::new(&claims, &classes);
        assert_eq!(vb.blocker(&pod(&["bound", "later"])), None);
        assert_eq!(vb.blocker(&pod(&[])), None);
        let immediate = Some("pod has unbound immediate PersistentVolumeClaims".to_string());
        assert_eq!(vb.blocker(&pod(&["bound", "now"])), immediate);
        assert_eq!(vb.blocker(&pod(&["classless"])), immediate);
        assert_eq!(
            vb.blocker(&pod(&["missing"])),
            Some("persistentvolumeclaim \"missing\" not found".into())
        );
        assert_eq!(
            vb.blocker(&pod(&["going"])),
            Some("persistentvolumeclaim \"going\" is being deleted".into())
        );
        assert_eq!(
            vb.blocker(&pod(&["ghost-class"])),
            Some("storageclass.storage.k8s.io \"ghost\" not found".into())
        );

        // With a default WaitForFirstConsumer class, a classless claim is that class's.
        let mut defaulted = (*classes[0]).clone();
        defaulted.metadata.annotations =
            Some([(DEFAULT_CLASS.to_string(), "true".to_string())].into());
        let classes = vec![Arc::new(defaulted), Arc::clone(&classes[1])];
        let vb = VolumeBinding::new(&claims, &classes);
        assert_eq!(vb.blocker(&pod(&["classless"])), None);
    }
}
