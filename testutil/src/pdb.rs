//! PodDisruptionBudgets: what drains and upgrades must respect when they evict pods.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{Value, json};

use crate::meta::at;

/// A PodDisruptionBudget `name` in namespace `default` keeping one pod labelled `app: name`
/// available (`minAvailable: 1`); no status. E.g. `pdb("cart").namespace("shop")
/// .disruptions_allowed(0)`.
pub fn pdb(name: impl AsRef<str>) -> PdbBuilder {
    let name = name.as_ref();
    PdbBuilder(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}},
    }))
}

/// A PodDisruptionBudget being built (see [`pdb`]).
#[derive(Clone, Debug)]
pub struct PdbBuilder(Value);

builder_common!(PdbBuilder, PodDisruptionBudget, "PodDisruptionBudget");

impl PdbBuilder {
    /// Sets `metadata.namespace` (`default` unless told).
    pub fn namespace(mut self, namespace: impl AsRef<str>) -> Self {
        self.0["metadata"]["namespace"] = json!(namespace.as_ref());
        self
    }

    /// Replaces the selector with one matching exactly `key: value`.
    pub fn selecting(mut self, key: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        self.0["spec"]["selector"] = json!({"matchLabels": {key.as_ref(): value.as_ref()}});
        self
    }

    /// The status of a budget over one healthy pod that allows `allowed` disruptions
    /// (`currentHealthy`, `desiredHealthy` and `expectedPods` 1).
    pub fn disruptions_allowed(mut self, allowed: i32) -> Self {
        *at(&mut self.0, &["status"]) = json!({
            "disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
            "expectedPods": 1,
        });
        self
    }
}
