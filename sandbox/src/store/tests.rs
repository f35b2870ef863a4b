//! Tests of the store's write rules, watches and selectors.

use super::*;
use crate::selector::{parse_field_selector, parse_label_selector};

fn pods(store: &Store) -> ResourceType {
    store.resource("", "v1", "pods").expect("pods")
}

/// A Pod manifest of app `web` without a namespace: the store sets it from the request.
fn pod(name: &str) -> Value {
    testutil::pod(name)
        .label("app", "web")
        .image("nginx")
        .merge(json!({"metadata": {"namespace": null}}))
        .json()
}

#[test]
fn create_sets_system_fields_and_rejects_duplicates() {
    let store = Store::new();
    let rt = pods(&store);
    let p = store.create(&rt, "default", pod("a")).expect("created");
    assert_eq!(p["metadata"]["namespace"], "default");
    assert_eq!(p["metadata"]["generation"], 1);
    assert!(p["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    let err = store
        .create(&rt, "default", pod("a"))
        .expect_err("duplicate");
    assert_eq!(err.reason, Reason::AlreadyExists);
    let err = store
        .create(&rt, "nope", pod("b"))
        .expect_err("namespace missing");
    assert_eq!(err.reason, Reason::NotFound);
}

#[test]
fn generate_name_appends_five_characters() {
    let store = Store::new();
    let rt = pods(&store);
    let p = store
        .create(
            &rt,
            "default",
            json!({"metadata": {"generateName": "web-"}, "spec": {"containers": [{"name": "c"}]}}),
        )
        .expect("created");
    let name = p["metadata"]["name"].as_str().expect("name");
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");
}

#[test]
fn stale_resource_version_conflicts() {
    let store = Store::new();
    let rt = pods(&store);
    let p = store.create(&rt, "default", pod("a")).expect("created");
    let mut stale = (*p).clone();
    store
        .update(&rt, "default", "a", (*p).clone(), Subresource::Main)
        .expect("no-op update");
    stale["metadata"]["labels"]["x"] = json!("1");
    stale["metadata"]["resourceVersion"] = json!("1");
    let err = store
        .update(&rt, "default", "a", stale, Subresource::Main)
        .expect_err("stale");
    assert_eq!(err.reason, Reason::Conflict);
}

#[test]
fn generation_moves_with_spec_not_metadata_or_status() {
    let store = Store::new();
    let rt = pods(&store);
    store.create(&rt, "default", pod("a")).expect("created");
    let p = store
        .modify(&rt, "default", "a", Subresource::Main, |o| {
            o["metadata"]["labels"]["x"] = json!("1");
            Ok(())
        })
        .expect("label");
    assert_eq!(p["metadata"]["generation"], 1);
    let p = store
        .modify(&rt, "default", "a", Subresource::Main, |o| {
            o["spec"]["nodeName"] = json!("n1");
            Ok(())
        })
        .expect("spec");
    assert_eq!(p["metadata"]["generation"], 2);
    let p = store
        .modify(&rt, "default", "a", Subresource::Main, |o| {
            o["status"] = json!({"phase": "Running"});
            Ok(())
        })
        .expect("status ignored on main resource");
    assert_eq!(p["status"]["phase"], "Pending");
    let p = store
        .modify(&rt, "default", "a", Subresource::Status, |o| {
            o["status"] = json!({"phase": "Running"});
            o["spec"]["nodeName"] = json!("ignored");
            Ok(())
        })
        .expect("status");
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(p["spec"]["nodeName"], "n1");
}

#[test]
fn finalizers_hold_deletion_until_removed() {
    let store = Store::new();
    let rt = pods(&store);
    let mut obj = pod("a");
    obj["metadata"]["finalizers"] = json!(["example.com/hold"]);
    store.create(&rt, "default", obj).expect("created");
    let deleting = store
        .delete(&rt, "default", "a", &DeleteOptions::default())
        .expect("delete");
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    assert!(store.get(&rt, "default", "a").is_ok());
    store
        .modify(&rt, "default", "a", Subresource::Main, |o| {
            o["metadata"]["finalizers"] = json!([]);
            Ok(())
        })
        .expect("drop finalizer");
    assert_eq!(
        store.get(&rt, "default", "a").expect_err("gone").reason,
        Reason::NotFound
    );
}

#[test]
fn watch_replays_history_and_expires_old_versions() {
    let store = Store::with_history(3);
    let rt = pods(&store);
    let start = store.resource_version();
    for n in ["a", "b", "c", "d", "e"] {
        store.create(&rt, "default", pod(n)).expect("created");
    }
    let err = store.watch(&rt, None, Some(start)).err().expect("too old");
    assert_eq!(err.reason, Reason::Expired);
    let recent = store.resource_version() - 2;
    let w = store.watch(&rt, None, Some(recent)).expect("recent");
    let names: Vec<_> = w
        .backlog
        .iter()
        .map(|e| e.decoded()["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("d"), json!("e")]);
    let all = store
        .watch(&rt, Some("default"), Some(0))
        .expect("from zero");
    assert_eq!(all.backlog.len(), 5);
}

#[test]
fn each_type_keeps_its_own_history_so_a_flood_of_pods_expires_no_other_watch() {
    let store = Store::with_history(3);
    let rt = pods(&store);
    let cms = store.resource("", "v1", "configmaps").expect("configmaps");
    let before = store.resource_version();
    store
        .create(&cms, "default", json!({"metadata": {"name": "settings"}}))
        .expect("configmap");
    for i in 0..10 {
        store
            .create(&rt, "default", pod(&format!("p{i}")))
            .expect("pod");
    }
    let w = store
        .watch(&cms, None, Some(before))
        .expect("configmaps resume");
    assert_eq!(w.backlog.len(), 1);
    assert_eq!(w.backlog[0].decoded()["metadata"]["name"], "settings");
    let err = store
        .watch(&rt, None, Some(before))
        .err()
        .expect("pods expired");
    assert_eq!(err.reason, Reason::Expired);
}

#[test]
fn history_keeps_fresh_changes_up_to_its_maximum_and_its_minimum_however_old() {
    // Packed one change at a time beyond the newest, so the maximum drops packed changes.
    let fresh = Store::with_limits(HistoryLimits {
        fresh: Duration::from_secs(3600),
        max: 4,
        min: 2,
        recent: 1,
        block: 1,
    });
    let stale = Store::with_limits(HistoryLimits {
        fresh: Duration::ZERO,
        max: 100,
        min: 2,
        ..HistoryLimits::default()
    });
    for store in [&fresh, &stale] {
        let rt = pods(store);
        let start = store.resource_version();
        for i in 0..6 {
            store
                .create(&rt, "default", pod(&format!("p{i}")))
                .expect("pod");
        }
        let kept = |from: u64| store.watch(&rt, None, Some(from)).map(|w| w.backlog.len());
        assert_eq!(kept(start).err().map(|e| e.reason), Some(Reason::Expired));
        let now = store.resource_version();
        let want = if Arc::ptr_eq(store, &fresh) { 4 } else { 2 };
        assert_eq!(kept(now - want as u64).expect("kept"), want);
        assert_eq!(
            kept(now - want as u64 - 1).err().map(|e| e.reason),
            Some(Reason::Expired)
        );
    }
}

/// Every change a receiver holds now, oldest first.
fn drain<T: Clone>(rx: &mut broadcast::Receiver<T>) -> Vec<T> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

/// What a watch event says: everything but the shared allocation.
fn said(e: &WatchEvent) -> (u64, TypeKey, String, EventType, Bytes, Option<Bytes>) {
    (
        e.rv,
        e.key.clone(),
        e.namespace.clone(),
        e.event_type,
        e.object.clone(),
        e.previous.clone(),
    )
}

#[test]
fn a_watch_resuming_from_packed_history_replays_the_changes_as_they_were_made() {
    // Two recent changes stay as made; older ones are packed three to a block.
    let store = Store::with_limits(HistoryLimits {
        fresh: Duration::from_secs(3600),
        max: 1000,
        min: 1000,
        recent: 2,
        block: 3,
    });
    let rt = pods(&store);
    let ns = store.resource("", "v1", "namespaces").expect("namespaces");
    store
        .create(&ns, "", json!({"metadata": {"name": "other"}}))
        .expect("namespace");
    let start = store.resource_version();
    let mut live = store.watch(&rt, None, None).expect("live").live;
    for i in 0..7 {
        let namespace = if i % 2 == 0 { "default" } else { "other" };
        store
            .create(&rt, namespace, pod(&format!("p{i}")))
            .expect("pod");
        store
            .patch(
                &rt,
                namespace,
                &format!("p{i}"),
                PatchType::Merge,
                &json!({"metadata": {"labels": {"step": "two"}}}),
                Subresource::Main,
            )
            .expect("patched");
    }
    store
        .delete(&rt, "other", "p1", &DeleteOptions::default())
        .expect("deleted");
    let made = drain(&mut live);
    assert_eq!(made.len(), 15);
    assert!(made.iter().any(|e| e.previous.is_some()));
    for from in start..store.resource_version() {
        for namespace in [None, Some("default"), Some("other")] {
            let replayed = store.watch(&rt, namespace, Some(from)).expect("kept");
            let want: Vec<_> = made
                .iter()
                .filter(|e| e.rv > from && namespace.is_none_or(|n| e.namespace == n))
                .map(|e| said(e))
                .collect();
            let got: Vec<_> = replayed.backlog.iter().map(|e| said(e)).collect();
            assert_eq!(got, want, "from {from} in {namespace:?}");
        }
    }
    // Only the newest changes not yet packed (two to four) are the events as made; the rest
    // were decoded again from packed blocks.
    let replayed = store.watch(&rt, None, Some(start)).expect("kept").backlog;
    let shared = replayed
        .iter()
        .zip(&made)
        .filter(|(r, m)| Arc::ptr_eq(r, m))
        .count();
    assert!((2..5).contains(&shared), "{shared} shared");
}

#[test]
fn every_change_is_announced_without_its_object_in_order() {
    let store = Store::new();
    let rt = pods(&store);
    let cms = store.resource("", "v1", "configmaps").expect("configmaps");
    let mut changes = store.subscribe_changes();
    let mut events = store.subscribe();
    store.create(&rt, "default", pod("a")).expect("pod");
    store
        .create(&cms, "default", json!({"metadata": {"name": "settings"}}))
        .expect("configmap");
    store
        .delete(&rt, "default", "a", &DeleteOptions::default())
        .expect("deleted");
    let announced = drain(&mut changes);
    let made: Vec<Changed> = drain(&mut events)
        .iter()
        .map(|e| Changed {
            key: e.key.clone(),
            rv: e.rv,
            namespace: e.namespace.clone(),
            name: e.decoded()["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
        .collect();
    assert_eq!(announced.len(), 3);
    assert_eq!(announced[1].key, cms.key());
    assert_eq!(announced, made);
}

#[test]
fn a_stored_object_is_the_encoding_its_last_watch_event_carries() {
    let store = Store::new();
    let rt = pods(&store);
    let mut live = store.subscribe();
    store.create(&rt, "default", pod("a")).expect("pod");
    let event = live.try_recv().expect("added");
    let stored = store.snapshot_encoded(&rt.key());
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].as_ptr(),
        event.object.as_ptr(),
        "shared, not copied"
    );
    store
        .modify(&rt, "default", "a", Subresource::Main, |p| {
            p["metadata"]["labels"]["tier"] = json!("front");
            Ok(())
        })
        .expect("modified");
    let modified = live.try_recv().expect("modified");
    let previous = modified.previous.as_ref().expect("previous");
    assert_eq!(previous.as_ptr(), event.object.as_ptr());
    assert_eq!(
        store.get(&rt, "default", "a").expect("get")["metadata"]["labels"]["tier"],
        "front"
    );
}

#[test]
fn list_filters_by_namespace_and_selectors() {
    let store = Store::new();
    let rt = pods(&store);
    store.create(&rt, "default", pod("a")).expect("a");
    let mut b = pod("b");
    b["spec"]["nodeName"] = json!("n1");
    b["metadata"]["labels"]["app"] = json!("db");
    store.create(&rt, "kube-system", b).expect("b");
    let all = Selector::default();
    let none = FieldSelector::default();
    assert_eq!(store.list(&rt, None, &all, &none).items.len(), 2);
    assert_eq!(store.list(&rt, Some("default"), &all, &none).items.len(), 1);
    let web = parse_label_selector("app=web").expect("selector");
    assert_eq!(store.list(&rt, None, &web, &none).items.len(), 1);
    let on_n1 = parse_field_selector("spec.nodeName=n1").expect("selector");
    assert_eq!(store.list(&rt, None, &all, &on_n1).items.len(), 1);
}

#[test]
fn crd_create_registers_type_and_delete_drops_objects() {
    let store = Store::new();
    let crds = store
        .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .expect("crds");
    let crd = json!({"metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true}]}});
    let created = store.create(&crds, "", crd).expect("crd");
    assert_eq!(created["status"]["conditions"][0]["type"], "NamesAccepted");
    let widgets = store
        .resource("example.com", "v1", "widgets")
        .expect("registered");
    store
        .create(
            &widgets,
            "default",
            json!({"metadata": {"name": "w"}, "spec": {}}),
        )
        .expect("widget");
    store
        .delete(&crds, "", "widgets.example.com", &DeleteOptions::default())
        .expect("delete crd");
    assert!(store.resource("example.com", "v1", "widgets").is_none());
}

#[test]
fn lists_page_in_key_order_and_a_stale_continuation_expires() {
    let store = Store::with_history(3);
    let rt = pods(&store);
    for (ns, name) in [
        ("kube-system", "p1"),
        ("default", "p2"),
        ("default", "p1"),
        ("kube-public", "p0"),
    ] {
        store.create(&rt, ns, pod(name)).expect("created");
    }
    let all = Selector::default();
    let fields = parse_field_selector("").expect("empty");
    let names = |page: &Page| -> Vec<String> {
        page.decoded()
            .iter()
            .map(|o| {
                format!("{}/{}", o["metadata"]["namespace"], o["metadata"]["name"]).replace('"', "")
            })
            .collect()
    };
    let first = store
        .list_page(
            &rt,
            None,
            &all,
            &fields,
            &PageRequest {
                limit: Some(3),
                ..PageRequest::default()
            },
        )
        .expect("first page");
    assert_eq!(
        names(&first),
        ["default/p1", "default/p2", "kube-public/p0"]
    );
    assert_eq!(first.remaining, 1);
    let (ns, name) = first.next.clone().expect("more follow");
    let rv = first.resource_version;
    // A change between pages: the second page shows the store as it is now.
    store
        .create(&rt, "kube-system", pod("p2"))
        .expect("created");
    let second = store
        .list_page(
            &rt,
            None,
            &all,
            &fields,
            &PageRequest {
                after: Some((&ns, &name)),
                limit: Some(3),
                first_rv: Some(rv),
            },
        )
        .expect("second page");
    assert_eq!(names(&second), ["kube-system/p1", "kube-system/p2"]);
    assert_eq!((second.remaining, second.next.clone()), (0, None));
    assert_eq!(
        second.resource_version, rv,
        "the first page's version throughout"
    );
    // Namespaced, and the last page exactly full: no continuation.
    let a = store
        .list_page(
            &rt,
            Some("default"),
            &all,
            &fields,
            &PageRequest {
                limit: Some(2),
                ..PageRequest::default()
            },
        )
        .expect("namespace default");
    assert_eq!((names(&a).len(), a.next), (2, None));
    // Once the history no longer reaches back to the first page, the continuation is refused.
    for i in 0..4 {
        store
            .create(&rt, "kube-public", pod(&format!("q{i}")))
            .expect("created");
    }
    let err = store
        .list_page(
            &rt,
            None,
            &all,
            &fields,
            &PageRequest {
                after: Some((&ns, &name)),
                limit: Some(3),
                first_rv: Some(rv),
            },
        )
        .expect_err("expired");
    assert_eq!(err.reason, Reason::Expired);
}
