//! What every builder shares: the JSON merge patch, status conditions, paths into the object,
//! and the metadata setters (labels, annotations, finalizers, owner, timestamps) every builder
//! gets from [`builder_common!`].

use serde_json::{Map, Value, json};

/// The time conditions carry unless told (`lastTransitionTime`): 2026-01-01T00:00:00Z.
pub const T0: &str = "2026-01-01T00:00:00Z";

/// Applies `patch` to `target` as a JSON merge patch (RFC 7386, what `kubectl patch --type
/// merge` sends): objects merge key by key, `null` removes a key, and anything else (arrays
/// included) replaces what was there.
pub fn merge(target: &mut Value, patch: Value) {
    let Value::Object(patch) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(&key);
            } else {
                merge(target.entry(key).or_insert(Value::Null), value);
            }
        }
    }
}

/// A status condition `type_` = `status` (`"True"`, `"False"` or `"Unknown"`), as Karpenter
/// writes them on NodePools, NodeClaims and EC2NodeClasses: reason `type_`, empty message,
/// `lastTransitionTime` [`T0`] unless told.
pub fn condition(type_: impl AsRef<str>, status: impl AsRef<str>) -> ConditionBuilder {
    let t = type_.as_ref();
    ConditionBuilder(json!({
        "type": t, "status": status.as_ref(), "reason": t, "message": "", "lastTransitionTime": T0,
    }))
}

/// A status condition being built (see [`condition`]); `json()` gives it as the API has it.
#[derive(Clone, Debug)]
pub struct ConditionBuilder(Value);

impl ConditionBuilder {
    /// The condition's `reason` (CamelCase, e.g. `NodeClassNotReady`).
    pub fn reason(mut self, reason: impl AsRef<str>) -> Self {
        self.0["reason"] = json!(reason.as_ref());
        self
    }

    /// The condition's human-readable `message`.
    pub fn message(mut self, message: impl AsRef<str>) -> Self {
        self.0["message"] = json!(message.as_ref());
        self
    }

    /// The condition's `lastTransitionTime`: RFC 3339 text or a `jiff::Timestamp`.
    pub fn at(mut self, time: impl std::fmt::Display) -> Self {
        self.0["lastTransitionTime"] = json!(time.to_string());
        self
    }

    /// The condition as JSON, an element of `status.conditions`.
    pub fn json(self) -> Value {
        self.0
    }
}

/// The value at `path` (object keys from the root), created as an empty object on the way.
pub(crate) fn at<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Value {
    path.iter().fold(v, |v, key| {
        if !v.is_object() {
            *v = Value::Object(Map::new());
        }
        &mut v[*key]
    })
}

/// The object at `path`, created empty (with the objects on the way) if absent.
pub(crate) fn object_at<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Value {
    let o = at(v, path);
    if !o.is_object() {
        *o = Value::Object(Map::new());
    }
    o
}

/// Appends `item` to the array at `path`, created empty on the way.
pub(crate) fn push(v: &mut Value, path: &[&str], item: Value) {
    let list = at(v, path);
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Value::Array(list) = list {
        list.push(item);
    }
}

/// `values` as a JSON array of strings.
pub(crate) fn strings<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> Value {
    Value::Array(values.into_iter().map(|s| json!(s.as_ref())).collect())
}

/// A taint from kubectl's `key[=value]:effect` spelling, e.g. `dedicated=gpu:NoSchedule`.
pub(crate) fn taint(spec: &str) -> Value {
    let (kv, effect) = spec
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("taint {spec:?} is not key[=value]:effect"));
    match kv.split_once('=') {
        Some((key, value)) => json!({"key": key, "value": value, "effect": effect}),
        None => json!({"key": kv, "effect": effect}),
    }
}

/// The metadata setters and the finishers (`merge`, `json`, `build`, `arc`) of a builder that
/// wraps its object's JSON in field `.0`; `$what` names the kind in panic messages.
macro_rules! builder_common {
    ($builder:ident, $kind:ty, $what:literal) => {
        builder_common!($builder, $kind, $what, @common);
        impl $builder {
            /// The typed object in an `Arc`, as cluster snapshots and caches hold them.
            pub fn arc(self) -> std::sync::Arc<$kind> {
                std::sync::Arc::new(self.build())
            }
        }
    };
    // A kind that snapshots hold as a view of their own (pods: `karpenter_core`'s `PodView`):
    // `arc` decodes the JSON into whatever the caller wants, the kind or a view of it.
    ($builder:ident, $kind:ty, $what:literal, decoded_arc) => {
        builder_common!($builder, $kind, $what, @common);
        impl $builder {
            /// The object decoded as `T` (the kind itself or a view of it that decodes from the
            /// same JSON) in an `Arc`, as cluster snapshots and caches hold them.
            pub fn arc<T: serde::de::DeserializeOwned>(self) -> std::sync::Arc<T> {
                std::sync::Arc::new(self.decode())
            }

            /// The object decoded as `T`: the kind itself or a view of it that decodes from the
            /// same JSON. Panics if the JSON is not a valid one (a test's mistake).
            pub fn decode<T: serde::de::DeserializeOwned>(self) -> T {
                serde_json::from_value(self.0).expect(concat!("testutil: a valid ", $what))
            }
        }
    };
    ($builder:ident, $kind:ty, $what:literal, @common) => {
        impl $builder {
            /// Adds the label `key` = `value` to `metadata.labels`.
            pub fn label(mut self, key: impl AsRef<str>, value: impl AsRef<str>) -> Self {
                $crate::meta::at(&mut self.0, &["metadata", "labels"])[key.as_ref()] =
                    serde_json::json!(value.as_ref());
                self
            }

            /// Adds these labels to `metadata.labels` (which exists afterwards, even if empty).
            pub fn labels<K: AsRef<str>, V: AsRef<str>>(
                mut self,
                pairs: impl IntoIterator<Item = (K, V)>,
            ) -> Self {
                $crate::meta::object_at(&mut self.0, &["metadata", "labels"]);
                for (k, v) in pairs {
                    self = self.label(k, v);
                }
                self
            }

            /// Adds the annotation `key` = `value` to `metadata.annotations`.
            pub fn annotation(mut self, key: impl AsRef<str>, value: impl AsRef<str>) -> Self {
                $crate::meta::at(&mut self.0, &["metadata", "annotations"])[key.as_ref()] =
                    serde_json::json!(value.as_ref());
                self
            }

            /// Adds these annotations to `metadata.annotations` (which exists afterwards, even if
            /// empty).
            pub fn annotations<K: AsRef<str>, V: AsRef<str>>(
                mut self,
                pairs: impl IntoIterator<Item = (K, V)>,
            ) -> Self {
                $crate::meta::object_at(&mut self.0, &["metadata", "annotations"]);
                for (k, v) in pairs {
                    self = self.annotation(k, v);
                }
                self
            }

            /// Appends `finalizer` to `metadata.finalizers`.
            pub fn finalizer(mut self, finalizer: impl AsRef<str>) -> Self {
                $crate::meta::push(
                    &mut self.0,
                    &["metadata", "finalizers"],
                    serde_json::json!(finalizer.as_ref()),
                );
                self
            }

            /// Sets `metadata.uid` (none unless told).
            pub fn uid(mut self, uid: impl AsRef<str>) -> Self {
                self.0["metadata"]["uid"] = serde_json::json!(uid.as_ref());
                self
            }

            /// Sets `metadata.creationTimestamp`: RFC 3339 text or a `jiff::Timestamp`.
            pub fn created(mut self, time: impl std::fmt::Display) -> Self {
                self.0["metadata"]["creationTimestamp"] = serde_json::json!(time.to_string());
                self
            }

            /// Sets `metadata.deletionTimestamp` (the object is terminating): RFC 3339 text or a
            /// `jiff::Timestamp`.
            pub fn deleting(mut self, time: impl std::fmt::Display) -> Self {
                self.0["metadata"]["deletionTimestamp"] = serde_json::json!(time.to_string());
                self
            }

            /// Sets `metadata.generation`.
            pub fn generation(mut self, generation: i64) -> Self {
                self.0["metadata"]["generation"] = serde_json::json!(generation);
                self
            }

            /// Sets `metadata.resourceVersion`.
            pub fn resource_version(mut self, version: impl AsRef<str>) -> Self {
                self.0["metadata"]["resourceVersion"] = serde_json::json!(version.as_ref());
                self
            }

            /// Appends a controller owner reference (`controller: true`), e.g. `("apps/v1",
            /// "DaemonSet", "agent", "u")` for a DaemonSet's pod.
            pub fn owner(
                mut self,
                api_version: impl AsRef<str>,
                kind: impl AsRef<str>,
                name: impl AsRef<str>,
                uid: impl AsRef<str>,
            ) -> Self {
                $crate::meta::push(
                    &mut self.0,
                    &["metadata", "ownerReferences"],
                    serde_json::json!({
                        "apiVersion": api_version.as_ref(), "kind": kind.as_ref(),
                        "name": name.as_ref(), "uid": uid.as_ref(), "controller": true,
                    }),
                );
                self
            }

            /// Applies `patch` as a JSON merge patch (see [`crate::merge`]): the escape hatch for
            /// fields no setter covers, e.g. `json!({"spec": {"priority": 10}})`.
            pub fn merge(mut self, patch: serde_json::Value) -> Self {
                $crate::meta::merge(&mut self.0, patch);
                self
            }

            /// The object as JSON (with `apiVersion` and `kind`), e.g. for an API server's store.
            pub fn json(self) -> serde_json::Value {
                self.0
            }

            /// The typed object. Panics if the JSON is not a valid one (a test's mistake).
            pub fn build(self) -> $kind {
                serde_json::from_value(self.0).expect(concat!("testutil: a valid ", $what))
            }

        }
    };
}
