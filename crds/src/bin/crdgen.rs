//! Writes the CRD manifests (`karpenter.sh_nodepools.yaml`, `karpenter.sh_nodeclaims.yaml`,
//! `karpenter.k8s.aws_ec2nodeclasses.yaml`, `karpenter.sh_nodeoverlays.yaml`) generated from
//! the Rust types into `crds/manifests/`, or into the directory given as the first argument.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests"));
    std::fs::create_dir_all(&dir)?;
    for (name, yaml) in crds::generate::manifests() {
        let path = dir.join(name);
        std::fs::write(&path, yaml)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
