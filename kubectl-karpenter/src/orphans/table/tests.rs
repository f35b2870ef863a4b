//! Snapshots of the orphans table, `-o wide`, the summary line, the JSON document and names.

use super::*;
use crate::fixtures::now;
use crate::orphans::fixtures::{checked, orphans, world};

fn render(opts: TableOptions, cloud: Option<CloudView>) -> String {
    let w = world();
    let cloud = cloud.unwrap_or_else(|| checked(&w));
    let found = orphans(&w, &cloud);
    let mut out = Vec::new();
    write_table(&mut out, &found, &cloud, now(), opts).expect("write");
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn table_snapshot() {
    let got = render(
        TableOptions {
            headers: true,
            ..TableOptions::default()
        },
        None,
    );
    let want = "\
KIND                       NAME                   NODEPOOL   INSTANCE              NODE          SINCE   DETAIL
NotLaunched                default-unlaunched     default    <none>                <none>        10m     not launched after 10m (launch timeout 5m); Launched=Unknown: InsufficientCapacity: no offering available
NotRegistered              default-unregistered   default    i-0a1b2c3d4e5f60002   ip-10-0-1-2   20m     launched 20m ago, not registered (registration TTL 15m); node ip-10-0-1-2 joined but the NodeClaim is not marked Registered; instance i-0a1b2c3d4e5f60002 running
StuckTerminating           gpu-stuck              gpu        i-0a1b2c3d4e5f60003   ip-10-0-3-3   10m     deleting for 10m; waiting on: node ip-10-0-3-3 still present (finalizers: karpenter.sh/termination, 3 pods), instance i-0a1b2c3d4e5f60003 running, finalizers karpenter.sh/termination
NodeWithoutNodeClaim       ip-10-0-2-5            default    i-0a1b2c3d4e5f60005   ip-10-0-2-5   119m    no NodeClaim has providerID aws:///us-east-1a/i-0a1b2c3d4e5f60005; instance i-0a1b2c3d4e5f60005 running; 1 pod
InstanceWithoutNodeClaim   i-0a1b2c3d4e5f60005    default    i-0a1b2c3d4e5f60005   ip-10-0-2-5   60m     tagged for nodeclaim default-gone, which does not exist; node ip-10-0-2-5 registered for it
InstanceGone               default-lost           default    i-0a1b2c3d4e5f60009   ip-10-0-1-9   119m    instance aws:///us-east-1a/i-0a1b2c3d4e5f60009 no longer exists; node ip-10-0-1-9 still present (finalizers: karpenter.sh/termination)

6 orphans: 1 NotLaunched, 1 NotRegistered, 1 StuckTerminating, 1 NodeWithoutNodeClaim, 1 InstanceWithoutNodeClaim, 1 InstanceGone; cloud: sandbox, 9 instances checked; running orphaned instances cost $0.2880/hour
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn wide_snapshot() {
    let got = render(
        TableOptions {
            headers: true,
            wide: true,
            color: false,
        },
        None,
    );
    let want = "\
KIND                       NAME                   NODEPOOL   INSTANCE              NODE          SINCE   INSTANCE-TYPE   CAPACITY-TYPE   ZONE         PRICE/HOUR   PROVIDER-ID                             DETAIL
NotLaunched                default-unlaunched     default    <none>                <none>        10m     <none>          <none>          <none>       <none>       <none>                                  not launched after 10m (launch timeout 5m); Launched=Unknown: InsufficientCapacity: no offering available
NotRegistered              default-unregistered   default    i-0a1b2c3d4e5f60002   ip-10-0-1-2   20m     m5.large        on-demand       us-east-1a   $0.0960      aws:///us-east-1a/i-0a1b2c3d4e5f60002   launched 20m ago, not registered (registration TTL 15m); node ip-10-0-1-2 joined but the NodeClaim is not marked Registered; instance i-0a1b2c3d4e5f60002 running
StuckTerminating           gpu-stuck              gpu        i-0a1b2c3d4e5f60003   ip-10-0-3-3   10m     m5.large        on-demand       us-east-1a   $0.0960      aws:///us-east-1a/i-0a1b2c3d4e5f60003   deleting for 10m; waiting on: node ip-10-0-3-3 still present (finalizers: karpenter.sh/termination, 3 pods), instance i-0a1b2c3d4e5f60003 running, finalizers karpenter.sh/termination
NodeWithoutNodeClaim       ip-10-0-2-5            default    i-0a1b2c3d4e5f60005   ip-10-0-2-5   119m    m5.large        on-demand       us-east-1a   $0.0960      aws:///us-east-1a/i-0a1b2c3d4e5f60005   no NodeClaim has providerID aws:///us-east-1a/i-0a1b2c3d4e5f60005; instance i-0a1b2c3d4e5f60005 running; 1 pod
InstanceWithoutNodeClaim   i-0a1b2c3d4e5f60005    default    i-0a1b2c3d4e5f60005   ip-10-0-2-5   60m     m5.large        on-demand       us-east-1a   $0.0960      aws:///us-east-1a/i-0a1b2c3d4e5f60005   tagged for nodeclaim default-gone, which does not exist; node ip-10-0-2-5 registered for it
InstanceGone               default-lost           default    i-0a1b2c3d4e5f60009   ip-10-0-1-9   119m    <none>          <none>          <none>       <none>       aws:///us-east-1a/i-0a1b2c3d4e5f60009   instance aws:///us-east-1a/i-0a1b2c3d4e5f60009 no longer exists; node ip-10-0-1-9 still present (finalizers: karpenter.sh/termination)

6 orphans: 1 NotLaunched, 1 NotRegistered, 1 StuckTerminating, 1 NodeWithoutNodeClaim, 1 InstanceWithoutNodeClaim, 1 InstanceGone; cloud: sandbox, 9 instances checked; running orphaned instances cost $0.2880/hour
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn summary_without_a_cloud_view_and_no_headers() {
    let cloud = CloudView::Unchecked {
        reason: "--no-cloud".into(),
    };
    let got = render(
        TableOptions {
            headers: true,
            ..TableOptions::default()
        },
        Some(cloud.clone()),
    );
    assert_eq!(
        got.lines().last(),
        Some(
            "4 orphans: 1 NotLaunched, 1 NotRegistered, 1 StuckTerminating, \
             1 NodeWithoutNodeClaim; cloud not checked (--no-cloud)"
        ),
        "\n{got}"
    );
    let rows = render(TableOptions::default(), Some(cloud));
    assert_eq!(rows.lines().count(), 4, "\n{rows}");
    assert!(rows.starts_with("NotLaunched "), "\n{rows}");
}

#[test]
fn colour_wraps_only_the_kind() {
    crossterm::style::force_color_output(true);
    let got = render(
        TableOptions {
            headers: true,
            color: true,
            ..TableOptions::default()
        },
        None,
    );
    let stuck = got
        .lines()
        .find(|l| l.contains("gpu-stuck"))
        .expect("stuck row");
    assert!(
        stuck.starts_with("\u{1b}[38;5;9mStuckTerminating\u{1b}[39m           gpu-stuck"),
        "{stuck:?}"
    );
    let unlaunched = got
        .lines()
        .find(|l| l.contains("default-unlaunched"))
        .expect("row");
    assert!(
        unlaunched.starts_with("\u{1b}[38;5;11mNotLaunched"),
        "{unlaunched:?}"
    );
}

#[test]
fn json_document_of_one_orphan() {
    let w = world();
    let cloud = checked(&w);
    let found: Vec<Orphan> = orphans(&w, &cloud)
        .into_iter()
        .filter(|o| o.kind == Kind::InstanceWithoutNodeClaim)
        .collect();
    let mut out = Vec::new();
    write_document(&mut out, &found, &cloud, false).expect("json");
    let got = String::from_utf8(out).expect("utf-8");
    let want = r#"{
    "cloud": {
        "checked": true,
        "instances": 9,
        "source": "sandbox"
    },
    "items": [
        {
            "detail": [
                "tagged for nodeclaim default-gone, which does not exist",
                "node ip-10-0-2-5 registered for it"
            ],
            "instance": {
                "capacityType": "on-demand",
                "hourlyPrice": 0.096,
                "id": "i-0a1b2c3d4e5f60005",
                "instanceType": "m5.large",
                "launchTime": "2025-06-01T11:00:00Z",
                "nodeclaim": "default-gone",
                "nodepool": "default",
                "providerID": "aws:///us-east-1a/i-0a1b2c3d4e5f60005",
                "state": "running",
                "terminating": false,
                "zone": "us-east-1a"
            },
            "kind": "InstanceWithoutNodeClaim",
            "name": "i-0a1b2c3d4e5f60005",
            "node": {
                "deleting": false,
                "finalizers": [
                    "karpenter.sh/termination"
                ],
                "name": "ip-10-0-2-5"
            },
            "nodeclaim": null,
            "nodepool": "default",
            "pods": null,
            "since": "2025-06-01T11:00:00Z"
        }
    ],
    "kind": "OrphanList"
}
"#;
    assert_eq!(got, want, "\n{got}");
    let mut yaml = Vec::new();
    write_document(&mut yaml, &found, &cloud, true).expect("yaml");
    let back: Value =
        serde_saphyr::from_str(&String::from_utf8(yaml).expect("utf-8")).expect("yaml parses");
    assert_eq!(back, list_value(&found, &cloud).expect("doc"));
}

#[test]
fn names_are_qualified() {
    let w = world();
    let found = orphans(&w, &checked(&w));
    let mut out = Vec::new();
    write_names(&mut out, &found).expect("names");
    assert_eq!(
        String::from_utf8(out).expect("utf-8"),
        "nodeclaim.karpenter.sh/default-unlaunched\nnodeclaim.karpenter.sh/default-unregistered\n\
         nodeclaim.karpenter.sh/gpu-stuck\nnode/ip-10-0-2-5\ninstance/i-0a1b2c3d4e5f60005\n\
         nodeclaim.karpenter.sh/default-lost\n"
    );
}
