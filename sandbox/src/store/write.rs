//! The write rules of the store, as kube-apiserver applies them: create (names, generateName,
//! namespaces, system fields, defaults, CRD registration), update (optimistic concurrency,
//! status subresource, generation, finalizers), delete (finalizers, preconditions, orphaning),
//! schemas of custom resources, and the watch history every write appends to.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::Rng;
use serde_json::{Value, json};

use bytes::Bytes;

use super::{
    DeleteOptions, EventType, Inner, Live, ObjectKey, Subresource, TypeHistory, WatchEvent, decode,
    encode, new_uid, rfc3339,
};
use crate::admission;
use crate::error::{ApiError, ApiResult, Reason};
use crate::registry::{ResourceType, TypeKey};

impl Inner {
    pub(super) fn table(&self, key: &TypeKey) -> Option<&BTreeMap<ObjectKey, Bytes>> {
        self.objects.get(key)
    }

    /// Changes of type `key` with a resourceVersion at or below this may have left its
    /// history (a watch or continued list from an older version answers 410).
    pub(super) fn floor(&self, key: &TypeKey) -> u64 {
        self.history.get(key).map_or(0, |h| h.floor)
    }

    pub(super) fn object_key(rt: &ResourceType, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: if rt.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    pub(super) fn find(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        self.objects
            .get(&rt.key())?
            .get(&Inner::object_key(rt, namespace, name))
            .map(decode)
    }

    pub(super) fn namespace_exists(&self, namespace: &str) -> bool {
        let key = TypeKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        self.objects.get(&key).is_some_and(|t| {
            t.contains_key(&ObjectKey {
                namespace: String::new(),
                name: namespace.to_string(),
            })
        })
    }

    pub(super) fn create(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        mut obj: Value,
        strict: bool,
        tx: &Live,
    ) -> ApiResult<Arc<Value>> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        check_type_meta(rt, &obj)?;
        let namespace = if rt.namespaced {
            let ns = match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
                Some(body_ns) if !namespace.is_empty() && body_ns != namespace => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                Some(body_ns) => body_ns.to_string(),
                None if namespace.is_empty() => "default".to_string(),
                None => namespace.to_string(),
            };
            if !self.namespace_exists(&ns) {
                return Err(ApiError::not_found("namespaces", &ns));
            }
            ns
        } else {
            String::new()
        };
        let name = match obj.pointer("/metadata/name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match obj
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
            {
                Some(prefix) if !prefix.is_empty() => self.generate_name(rt, &namespace, prefix),
                _ => {
                    return Err(ApiError::invalid(
                        &rt.kind,
                        "",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    ));
                }
            },
        };
        validate_name(rt, &name)?;
        let key = Inner::object_key(rt, namespace.as_str(), &name);
        if self
            .objects
            .get(&rt.key())
            .is_some_and(|t| t.contains_key(&key))
        {
            return Err(ApiError::already_exists(&rt.qualified(), &name));
        }
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        let meta = obj
            .as_object_mut()
            .and_then(|o| o.get_mut("metadata"))
            .and_then(Value::as_object_mut);
        let meta = match meta {
            Some(m) => m,
            None => {
                obj["metadata"] = json!({});
                obj["metadata"]
                    .as_object_mut()
                    .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?
            }
        };
        meta.insert("name".into(), json!(name));
        if rt.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(rfc3339((self.clock)())));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        meta.remove("resourceVersion");
        meta.remove("managedFields");
        if rt.status_subresource
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        admission::on_create(rt, &mut obj)?;
        check_schema(rt, &name, &mut obj, strict, Rules::Create)?;
        if admission::is_crd(rt) {
            let registered = self
                .registry
                .register_crd(&obj)
                .map_err(|e| ApiError::invalid(&rt.kind, &name, "spec", &e.0))?;
            admission::crd_established(&mut obj, &registered, &rfc3339((self.clock)()));
        }
        Ok(self.put(rt, key, obj, EventType::Added, tx))
    }

    pub(super) fn generate_name(&self, rt: &ResourceType, namespace: &str, prefix: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut rng = rand::rng();
        loop {
            let suffix: String = (0..5)
                .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
                .collect();
            let name = format!("{prefix}{suffix}");
            let taken = self
                .objects
                .get(&rt.key())
                .is_some_and(|t| t.contains_key(&Inner::object_key(rt, namespace, &name)));
            if !taken {
                return name;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn update(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        mut obj: Value,
        sub: Subresource,
        strict: bool,
        tx: &Live,
    ) -> ApiResult<Arc<Value>> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        check_type_meta(rt, &obj)?;
        let current = self
            .find(rt, namespace, name)
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))?;
        if let Some(body_name) = obj.pointer("/metadata/name").and_then(Value::as_str)
            && body_name != name
        {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        if let Some(rv) = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && !rv.is_empty()
            && Some(rv)
                != current
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
        {
            return Err(ApiError::conflict(&rt.qualified(), name));
        }
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        match sub {
            Subresource::Status => {
                // Only status changes through /status.
                let status = obj.get("status").cloned();
                obj = (*current).clone();
                match status {
                    Some(s) => obj["status"] = s,
                    None => {
                        if let Some(o) = obj.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                admission::on_status_update(rt, &current, &mut obj)?;
            }
            Subresource::Main | Subresource::All => {
                if sub == Subresource::Main && rt.status_subresource {
                    match current.get("status") {
                        Some(s) => obj["status"] = s.clone(),
                        None => {
                            if let Some(o) = obj.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                // System fields are owned by the server.
                for field in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "namespace",
                    "name",
                ] {
                    match current.get("metadata").and_then(|m| m.get(field)) {
                        Some(v) => obj["metadata"][field] = v.clone(),
                        None => {
                            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut)
                            {
                                m.remove(field);
                            }
                        }
                    }
                }
                let spec_changed =
                    without_meta_and_status(&obj) != without_meta_and_status(&current);
                let generation = current
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                obj["metadata"]["generation"] = json!(if spec_changed {
                    generation + 1
                } else {
                    generation
                });
                admission::on_update(rt, &current, &mut obj)?;
                if admission::is_crd(rt) {
                    let registered = self
                        .registry
                        .register_crd(&obj)
                        .map_err(|e| ApiError::invalid(&rt.kind, name, "spec", &e.0))?;
                    admission::crd_established(&mut obj, &registered, &rfc3339((self.clock)()));
                }
            }
        }
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        let rules = match sub {
            // kube-apiserver checks a status write against the status schema only; the
            // custom resources served here keep their CEL rules on spec.
            Subresource::Status => Rules::Skip,
            Subresource::Main | Subresource::All => Rules::Update(&current),
        };
        check_schema(rt, name, &mut obj, strict, rules)?;
        let key = Inner::object_key(rt, namespace, name);
        let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
        let finalizers_empty = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if deleting && finalizers_empty {
            return Ok(self.remove(rt, key, tx));
        }
        if obj == *current_without_rv(&current, &obj) {
            return Ok(current);
        }
        Ok(self.put(rt, key, obj, EventType::Modified, tx))
    }

    pub(super) fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
        tx: &Live,
    ) -> ApiResult<Arc<Value>> {
        let current = self
            .find(rt, namespace, name)
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))?;
        let meta = &current["metadata"];
        if let Some(uid) = &opts.uid
            && meta["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::new(
                Reason::Conflict,
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta["uid"].as_str().unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && meta["resourceVersion"].as_str() != Some(rv)
        {
            return Err(ApiError::conflict(&rt.qualified(), name));
        }
        let key = Inner::object_key(rt, namespace, name);
        let has_finalizers = meta["finalizers"].as_array().is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if meta.get("deletionTimestamp").is_some() {
                return Ok(current);
            }
            let mut obj = (*current).clone();
            obj["metadata"]["deletionTimestamp"] = json!(rfc3339((self.clock)()));
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            let updated = self.put(rt, key, obj, EventType::Modified, tx);
            if opts.orphan {
                self.orphan_dependents(&updated, tx);
            }
            return Ok(updated);
        }
        let last = self.remove(rt, key, tx);
        if opts.orphan {
            self.orphan_dependents(&last, tx);
        }
        Ok(last)
    }

    /// `propagationPolicy: Orphan`: dependents lose their owner reference instead of being
    /// garbage-collected.
    pub(super) fn orphan_dependents(&mut self, owner: &Value, tx: &Live) {
        let Some(uid) = owner.pointer("/metadata/uid").and_then(Value::as_str) else {
            return;
        };
        let mut dependents = Vec::new();
        for (type_key, table) in &self.objects {
            for (k, json) in table {
                let obj = decode(json);
                let refs = obj
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array);
                if refs.is_some_and(|r| r.iter().any(|o| o["uid"] == uid)) {
                    dependents.push((type_key.clone(), k.clone(), obj));
                }
            }
        }
        for (type_key, k, obj) in dependents {
            let Some(rt) = self.registry.by_key(&type_key).cloned() else {
                continue;
            };
            let mut updated = (*obj).clone();
            if let Some(refs) = updated["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|o| o["uid"] != uid);
            }
            self.put(&rt, k, updated, EventType::Modified, tx);
        }
    }

    pub(super) fn put(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        mut obj: Value,
        event_type: EventType,
        tx: &Live,
    ) -> Arc<Value> {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let json = encode(&obj);
        let previous = self
            .objects
            .entry(rt.key())
            .or_default()
            .insert(key.clone(), json.clone());
        let previous = previous.filter(|_| event_type == EventType::Modified);
        self.record(rt.key(), key, event_type, json, previous, tx);
        Arc::new(obj)
    }

    pub(super) fn remove(&mut self, rt: &ResourceType, key: ObjectKey, tx: &Live) -> Arc<Value> {
        let previous = self.objects.get_mut(&rt.key()).and_then(|t| t.remove(&key));
        let Some(previous) = previous else {
            return Arc::new(Value::Null);
        };
        self.rv += 1;
        let mut last = Arc::unwrap_or_clone(decode(&previous));
        last["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        if admission::is_crd(rt)
            && let Some(crd) = last["metadata"]["name"].as_str()
        {
            let crd = crd.to_owned();
            self.drop_crd_objects(&crd, tx);
        }
        self.record(rt.key(), key, EventType::Deleted, encode(&last), None, tx);
        Arc::new(last)
    }

    /// Deleting a CRD removes its types and every object of them.
    pub(super) fn drop_crd_objects(&mut self, crd: &str, tx: &Live) {
        let keys: Vec<TypeKey> = self
            .registry
            .all()
            .filter(|rt| rt.crd.as_deref() == Some(crd))
            .map(ResourceType::key)
            .collect();
        self.registry.unregister_crd(crd);
        for key in keys {
            let Some(table) = self.objects.remove(&key) else {
                continue;
            };
            for (k, json) in table {
                self.rv += 1;
                let mut last = Arc::unwrap_or_clone(decode(&json));
                last["metadata"]["resourceVersion"] = json!(self.rv.to_string());
                self.record(key.clone(), k, EventType::Deleted, encode(&last), None, tx);
            }
        }
    }

    /// Append a change to its type's history and send it to the live channel. `object` is the
    /// change's encoding (for additions and modifications, the bytes the store now keeps);
    /// `previous`, for a modification, the encoding the object's last event carried.
    pub(super) fn record(
        &mut self,
        key: TypeKey,
        object_key: ObjectKey,
        event_type: EventType,
        object: Bytes,
        previous: Option<Bytes>,
        tx: &Live,
    ) {
        let ev = Arc::new(WatchEvent {
            rv: self.rv,
            key: key.clone(),
            namespace: object_key.namespace,
            event_type,
            object,
            previous,
        });
        let limits = self.limits;
        self.history
            .entry(key)
            .or_insert_with_key(|key| TypeHistory::new(key.clone()))
            .push(Arc::clone(&ev), &limits);
        tx.send(ev, &object_key.name);
    }
}

/// The current object with its resourceVersion replaced by the candidate's, for a no-op check.
fn current_without_rv<'a>(
    current: &'a Arc<Value>,
    candidate: &Value,
) -> std::borrow::Cow<'a, Value> {
    let cand_rv = candidate.pointer("/metadata/resourceVersion");
    if cand_rv == current.pointer("/metadata/resourceVersion") {
        return std::borrow::Cow::Borrowed(current.as_ref());
    }
    let mut c = (**current).clone();
    match cand_rv {
        Some(rv) => c["metadata"]["resourceVersion"] = rv.clone(),
        None => {
            if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
        }
    }
    std::borrow::Cow::Owned(c)
}

/// Which CEL rules of a custom resource a write is checked against.
enum Rules<'a> {
    /// A create: every rule, without `oldSelf`.
    Create,
    /// An update of the main resource: every rule, the stored object as `oldSelf` (and for
    /// ratcheting).
    Update(&'a Value),
    /// A status write: none.
    Skip,
}

/// Apply a custom resource's schema: defaults, pruning, validation, then its CEL rules once
/// the structure is valid (422 on failure; unknown fields are an error only under strict
/// field validation).
fn check_schema(
    rt: &ResourceType,
    name: &str,
    obj: &mut Value,
    strict: bool,
    rules: Rules<'_>,
) -> ApiResult<()> {
    let Some(schema) = rt.schema.as_ref() else {
        return Ok(());
    };
    let outcome = crate::schema::process(obj, schema);
    let mut causes: Vec<(String, String)> = outcome
        .errors
        .into_iter()
        .map(|e| (e.field, e.message))
        .collect();
    if strict {
        causes.extend(
            outcome
                .unknown
                .into_iter()
                .map(|f| (f.clone(), format!("unknown field \"{f}\""))),
        );
    }
    if causes.is_empty() {
        causes = match rules {
            Rules::Create => crate::cel::violations(schema, obj, None),
            Rules::Update(old) => crate::cel::violations(schema, obj, Some(old)),
            Rules::Skip => Vec::new(),
        };
    }
    if causes.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
    let summary = if listed.len() == 1 {
        listed[0].clone()
    } else {
        format!("[{}]", listed.join(", "))
    };
    Err(ApiError {
        reason: Reason::Invalid,
        message: format!("{}.{} \"{name}\" is invalid: {summary}", rt.kind, rt.group),
        details: Some(json!({
            "name": name, "group": rt.group, "kind": rt.kind,
            "causes": causes.iter().map(|(f, m)| json!({"reason": "FieldValueInvalid", "message": m, "field": f})).collect::<Vec<_>>(),
        })),
    })
}

fn without_meta_and_status(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

fn check_type_meta(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind {kind:?} of the object does not match the resource {:?} ({})",
            rt.qualified(),
            rt.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        let group = av.split_once('/').map(|(g, _)| g).unwrap_or("");
        if group != rt.group {
            return Err(ApiError::bad_request(format!(
                "the apiVersion {av:?} of the object does not match the resource {:?}",
                rt.qualified()
            )));
        }
    }
    Ok(())
}

/// Names follow the kind's rule (see [`crate::validation::name_errors`]: DNS subdomains, DNS
/// labels for Namespaces, DNS-1035 labels for Services); a 422 with one cause per broken rule.
fn validate_name(rt: &ResourceType, name: &str) -> ApiResult<()> {
    let errors: Vec<crate::validation::FieldError> = crate::validation::name_errors(rt, name)
        .into_iter()
        .map(|m| crate::validation::FieldError::invalid("metadata.name", name, m))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(crate::validation::invalid(
            &rt.group, &rt.kind, name, &errors,
        ))
    }
}
