//! Stamps the commit this binary is built from into `KUBECTL_KARPENTER_GIT_COMMIT` (read by
//! `version`), unless the environment already sets it (a release build from a tarball). Outside
//! a git checkout, or without git, the commit stays unknown (`gitCommit: null`).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=KUBECTL_KARPENTER_GIT_COMMIT");
    if std::env::var_os("KUBECTL_KARPENTER_GIT_COMMIT").is_some() {
        return;
    }
    // Rebuild when HEAD moves: the HEAD file (a branch switch) and the branch's ref (a commit).
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &head_ref])
    {
        println!("cargo:rerun-if-changed={p}");
    }
    if let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) {
        println!("cargo:rustc-env=KUBECTL_KARPENTER_GIT_COMMIT={commit}");
    }
}
