//! The drift explanation data a NodeClaim carries (the NodePool and EC2NodeClass field
//! snapshots) stays within its size budget for every upstream example manifest and the bundled
//! default; the sizes are printed (`cargo test -p crds --test hash_sizes -- --nocapture`).

use std::path::PathBuf;

use crds::hash::{SNAPSHOT_BUDGET, Snapshot, diff, nodeclass_fields, nodepool_fields};
use crds::{EC2NodeClass, NodePool};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(tag = "kind")]
enum Doc {
    NodePool(Box<NodePool>),
    EC2NodeClass(Box<EC2NodeClass>),
}

fn manifests() -> Vec<(String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("upstream/nodepools"))
        .expect("examples/upstream/nodepools")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.push(root.join("nodepools/default.yaml"));
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable manifest");
            (
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                text,
            )
        })
        .collect()
}

#[test]
fn snapshots_of_every_example_fit_the_budget() {
    let mut largest_pair = 0;
    println!(
        "{:<32} {:>10} {:>14}",
        "manifest", "nodepool B", "ec2nodeclass B"
    );
    for (file, text) in manifests() {
        let docs: Vec<Doc> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let (mut pool, mut class) = (0, 0);
        for doc in docs {
            let fields = match doc {
                Doc::NodePool(p) => nodepool_fields(&p),
                Doc::EC2NodeClass(c) => nodeclass_fields(&c),
            };
            let snapshot = fields.snapshot();
            assert!(
                snapshot.len() <= SNAPSHOT_BUDGET,
                "{file}: {} bytes",
                snapshot.len()
            );
            let parsed = Snapshot::parse(&snapshot).expect("own snapshot parses");
            assert!(
                diff(&parsed, &fields).is_empty(),
                "{file}: a snapshot explains itself"
            );
            if fields.root == "spec.template." {
                pool = pool.max(snapshot.len());
            } else {
                class = class.max(snapshot.len());
            }
        }
        println!("{file:<32} {pool:>10} {class:>14}");
        largest_pair = largest_pair.max(pool + class);
    }
    println!("largest per NodeClaim: {largest_pair} bytes (target 2048)");
    assert!(largest_pair <= 2048);
}
