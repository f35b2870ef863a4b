//! New AMI releases in the sandbox move `@latest` aliases: published in-process through the
//! harness or by `kubectl create` of an AMIRelease, the EC2NodeClass's `status.amis` follow
//! well before the node class controller's one-minute resync.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use tests::{Options, TestCluster, condition};

/// Far below the 60s resync: the change signal, not the resync, re-resolves.
const PROMPTLY: Duration = Duration::from_secs(10);

fn ami_ids(c: &TestCluster) -> BTreeSet<String> {
    c.objects("karpenter.k8s.aws", "ec2nodeclasses")
        .iter()
        .find(|n| n["metadata"]["name"] == "default")
        .and_then(|n| n.pointer("/status/amis").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|a| a["id"].as_str().map(String::from))
        .collect()
}

async fn resolved(c: &TestCluster) -> BTreeSet<String> {
    c.eventually(
        "the default EC2NodeClass resolves its AMIs",
        PROMPTLY,
        |c| ami_ids(c).len() == 2,
    )
    .await;
    ami_ids(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_published_release_becomes_the_node_class_s_amis() {
    let c = TestCluster::start("", Options::default()).await;
    let before = resolved(&c).await;
    let amis = c.publish_ami("al2023", None);
    assert_eq!(amis.len(), 2, "one image per architecture");
    assert!(amis.iter().all(|a| a.version == "v20260302"));
    let want: BTreeSet<String> = amis.iter().map(|a| a.id.clone()).collect();
    assert!(want.is_disjoint(&before));
    c.eventually("status.amis moves to the new release", PROMPTLY, |c| {
        ami_ids(c) == want
    })
    .await;
    // A release of another family leaves an al2023 node class alone.
    c.publish_ami("bottlerocket", "v20260401");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ami_ids(&c), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_create_of_an_ami_release_publishes_it() {
    let c = TestCluster::start("", Options::default()).await;
    let before = resolved(&c).await;
    let manifest = "apiVersion: sandbox.karpenter.sh/v1\nkind: AMIRelease\nmetadata:\n  name: al2023-april\nspec:\n  family: al2023\n  version: v20260401\n  architectures: [arm64]\n";
    let out = c.kubectl(&["create", "-f", "-"], Some(manifest)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.eventually("the release is published", PROMPTLY, |c| {
        c.objects("sandbox.karpenter.sh", "amireleases")
            .iter()
            .any(|r| condition(r, "Published").as_deref() == Some("True"))
    })
    .await;
    let release = c.objects("sandbox.karpenter.sh", "amireleases").remove(0);
    let new_id = release["status"]["amis"][0]["id"]
        .as_str()
        .expect("published image")
        .to_string();
    assert_eq!(release["status"]["amis"][0]["architecture"], "arm64");
    c.eventually("status.amis picks up the arm64 image", PROMPTLY, |c| {
        ami_ids(c).contains(&new_id)
    })
    .await;
    let after = ami_ids(&c);
    assert_eq!(after.len(), 2);
    assert_eq!(
        after.intersection(&before).count(),
        1,
        "amd64 stays on the previous release"
    );
    let table = c.kubectl_ok(&["get", "amireleases"]).await;
    assert!(
        table.contains("al2023-april") && table.contains("v20260401") && table.contains(&new_id),
        "{table}"
    );
    // The schema refuses what the simulated cloud does not publish.
    let bad = manifest
        .replace("al2023-april", "bad")
        .replace("family: al2023", "family: windows2022");
    let out = c.kubectl(&["create", "-f", "-"], Some(&bad)).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec.family"), "{stderr}");
}
