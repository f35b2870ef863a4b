//! A workload's objects through the sandbox API server's admission, in the order they are
//! applied: the one place that decides which objects a workload may hold. `karpenter sandbox`
//! creates them in its store; `karpenter simulate` creates them in a scratch store first
//! ([`admit`]), so a kind the sandbox does not serve, a duplicate name, an invalid name or a
//! field kube-apiserver would refuse is the same error in both commands.

use serde_json::Value;

use super::manifest::{Manifest, WorkloadError};
use sandbox::Store;

/// Install Karpenter's CRDs (NodePool, NodeClaim, EC2NodeClass) into `store`.
///
/// Errors: the store refuses a CRD or does not serve CRDs (a build defect), as a message.
pub fn install_crds(store: &Store) -> Result<(), String> {
    let rt = store
        .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .ok_or_else(|| "CRDs are not served".to_string())?;
    for crd in crds::generate::crds() {
        let value = serde_json::to_value(&crd).map_err(|e| e.to_string())?;
        store
            .create(&rt, "", value)
            .map_err(|e| format!("installing CRD: {e}"))?;
    }
    Ok(())
}

/// Create every manifest in `store`, in order, in its `metadata.namespace` (`default` when
/// unset; ignored for cluster-scoped kinds), with kubectl's strict field validation: an
/// unknown field of a custom resource is an error naming it.
///
/// Errors: [`WorkloadError::Refused`] for the first object the store refuses, with its
/// location and the API server's message (no type served for its `apiVersion` and `kind`; 409
/// already exists; 404 namespace not found; 400/422 invalid, or an unknown field).
pub fn create_all(store: &Store, manifests: &[Manifest]) -> Result<(), WorkloadError> {
    for m in manifests {
        let refused = |message: String| WorkloadError::Refused {
            location: m.location(),
            message,
        };
        let rt = store
            .resource_for_kind(m.api_version(), m.kind())
            .ok_or_else(|| {
                refused(format!(
                    "no resource type {} {} is served by the sandbox",
                    m.api_version(),
                    m.kind()
                ))
            })?;
        let ns = m
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        // Strict, as `kubectl apply` asks by default (`fieldValidation=Strict`): a misspelt
        // field of a NodePool is refused with its path, not dropped without a word.
        store
            .create_with(&rt, ns, m.object.clone(), true)
            .map_err(|e| refused(e.to_string()))?;
    }
    Ok(())
}

/// Whether a sandbox would accept `manifests` (Namespaces first, as [`super::with_defaults`]
/// orders them): they are created in a scratch store with Karpenter's CRDs, which is then
/// dropped. No pod is created for a Deployment's replicas (no workload controller runs).
///
/// Errors: as [`create_all`]; [`WorkloadError::Bundled`] when the CRDs cannot be installed.
pub fn admit(manifests: &[Manifest]) -> Result<(), WorkloadError> {
    // No watcher reads the scratch store: a one-event history is enough.
    let store = Store::with_history(1);
    install_crds(&store).map_err(WorkloadError::Bundled)?;
    create_all(&store, manifests)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::workload::{ONLINE_BOUTIQUE, parse_yaml, with_defaults};

    #[test]
    fn the_bundled_workload_with_its_defaults_is_admitted() {
        let ms = parse_yaml(Path::new("ob.yaml"), ONLINE_BOUTIQUE).expect("parses");
        admit(&with_defaults(ms, "c").expect("defaults")).expect("admitted");
    }

    #[test]
    fn refusals_name_the_document_and_say_what_the_api_server_says() {
        let cases = [
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n",
                "w.yaml: document 2: no resource type example.com/v1 Gadget is served by the sandbox",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
                "w.yaml: document 2: configmaps \"a\" already exists",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: nowhere}\n",
                "w.yaml: document 1: namespaces \"nowhere\" not found",
            ),
        ];
        for (text, want) in cases {
            let ms = parse_yaml(Path::new("w.yaml"), text).expect("parses");
            let err = admit(&ms).expect_err(want);
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn a_misspelt_nodepool_field_is_refused_by_name_as_kubectl_apply_refuses_it() {
        let text = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  disruption: {consolidateAftr: 30s}\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n";
        let ms = parse_yaml(Path::new("w.yaml"), text).expect("parses");
        let err = admit(&with_defaults(ms, "c").expect("defaults")).expect_err("unknown field");
        let err = err.to_string();
        assert!(err.starts_with("w.yaml: document 1: "), "{err}");
        assert!(
            err.contains("unknown field \"spec.disruption.consolidateAftr\""),
            "{err}"
        );
    }
}
